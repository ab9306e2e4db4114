//! Appends framed records to this process's trace file.

use std::io;
use std::path::{Path, PathBuf};

use trace_format::{file_header, frame_record, snapshot_frame, EncodedCounters, Record, Snapshot};

use crate::sys::{self, Claim};

/// What the write buffer keeps between flushes.
const KEPT_CAPACITY: usize = 1 << 20;

pub struct TraceWriter {
    fd: i32,
    path: PathBuf,
    pending: Vec<u8>,
}

impl TraceWriter {
    /// Opens the first candidate path that no other process holds, and
    /// writes the file header.
    pub fn create(candidates: impl Iterator<Item = (PathBuf, Claim)>) -> Result<TraceWriter, (PathBuf, io::Error)> {
        let mut last_error = None;
        for (path, claim) in candidates {
            match sys::create_file(&path, claim) {
                Ok(fd) => {
                    let mut writer = TraceWriter { fd, path, pending: file_header().to_vec() };
                    writer.flush().map_err(|err| (writer.path.clone(), err))?;
                    return Ok(writer);
                }
                Err(err) if held_by_another(claim, &err) => last_error = Some((path, err)),
                Err(err) => return Err((path, err)),
            }
        }
        Err(last_error.unwrap_or_else(|| (PathBuf::new(), io::Error::other("no output path to try"))))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn append(&mut self, record: &Record) {
        frame_record(record, &mut self.pending);
    }

    /// Writes what was appended since the last flush in one go, so that a
    /// process killed meanwhile leaves at most one torn record at the end.
    pub fn flush(&mut self) -> io::Result<()> {
        let result = sys::write_all(self.fd, &self.pending);
        self.pending.clear();
        // A first snapshot's stack nodes take MiBs; later flushes are small.
        self.pending.shrink_to(KEPT_CAPACITY);
        result
    }

    /// Flushes what was appended, then writes `snapshot` holding `counters`
    /// straight from their buffer (tens of MiB at a first snapshot, not
    /// copied again). A process killed meanwhile leaves it as the torn
    /// record at the end.
    pub fn write_snapshot(&mut self, snapshot: &Snapshot, counters: &EncodedCounters) -> io::Result<()> {
        let (head, body, tail) = snapshot_frame(snapshot, counters);
        self.pending.extend_from_slice(&head);
        self.flush()?;
        sys::write_all(self.fd, body)?;
        sys::write_all(self.fd, &tail)
    }
}

/// Whether opening a file as `claim` failed only because another process
/// has that file: the next candidate may be free.
fn held_by_another(claim: Claim, err: &io::Error) -> bool {
    match claim {
        Claim::Locked => err.kind() == io::ErrorKind::WouldBlock,
        Claim::Exclusive => err.kind() == io::ErrorKind::AlreadyExists,
    }
}

impl Drop for TraceWriter {
    fn drop(&mut self) {
        sys::close(self.fd);
    }
}
