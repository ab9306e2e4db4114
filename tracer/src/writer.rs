//! Appends framed records to this process's trace file.

use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use trace_format::{
    file_header, frame_record, snapshot_frame, EncodedCounters, Process, Record, RecordReader, Snapshot, StdioPipes,
    MAGIC, STDIO_PIPES_SETTING,
};

use crate::sys::{self, Claim};

/// What the write buffer keeps between flushes.
const KEPT_CAPACITY: usize = 1 << 20;

/// Set in a child forked while its forking thread was inside the tracer:
/// the work it interrupted goes on in the child too, and must not write
/// the parent's trace.
static WRITES_FORBIDDEN: AtomicBool = AtomicBool::new(false);

/// Nothing more is written by this process (see [`WRITES_FORBIDDEN`]).
pub fn forbid_writes() {
    WRITES_FORBIDDEN.store(true, Ordering::Relaxed);
}

pub struct TraceWriter {
    /// -1 once the program took the descriptor over (see [`TraceWriter::check_descriptor`]).
    fd: i32,
    /// The file the descriptor was opened on.
    file: sys::FileId,
    /// It is a regular file, which limits and a full disk apply to (not
    /// `/dev/null`).
    regular: bool,
    /// How many bytes this writer wrote into it.
    written: u64,
    path: PathBuf,
    pending: Vec<u8>,
    /// A file passed over that holds something other than a trace.
    kept_other_file: Option<PathBuf>,
}

impl TraceWriter {
    /// Opens the first candidate path that no other process holds, and
    /// writes the file header. A `Locked` candidate (the named trace file)
    /// holding a trace begun by a process started beside this one (see
    /// [`started_beside`]) is passed over too: that one may have ended
    /// already, and its trace is kept. `None` when this process's start is
    /// not known: the file is taken for an earlier run's. One holding
    /// anything but a trace (a script named by mistake) is passed over and
    /// kept as it is.
    pub fn create(
        candidates: impl Iterator<Item = (PathBuf, Claim)>,
        this: Option<ThisProcess>,
    ) -> Result<TraceWriter, (PathBuf, io::Error)> {
        let mut last_error = None;
        let mut kept_other_file: Option<PathBuf> = None;
        for (path, claim) in candidates {
            // A FIFO would block the open until a reader came (before the
            // program's main, where no timeout of its own can stop it), and
            // every process of the tree would write into one pipe.
            if std::fs::metadata(&path).is_ok_and(|m| m.file_type().is_fifo() || m.file_type().is_socket()) {
                kept_other_file = Some(path.clone());
                last_error = Some((path, io::Error::other("a FIFO or a socket")));
                continue;
            }
            let keep = |fd| {
                let other = holds_other_than_a_trace(fd);
                if other {
                    kept_other_file = Some(path.clone());
                }
                other || this.is_some_and(|this| started_beside(fd, &this))
            };
            match sys::create_file(&path, claim, keep) {
                Ok(fd) => {
                    let opened = sys::open_file(fd);
                    let mut writer = TraceWriter {
                        fd,
                        file: opened.as_ref().map(|file| file.id).unwrap_or_default(),
                        regular: opened.is_some_and(|file| file.size.is_some()),
                        written: 0,
                        path,
                        pending: file_header().to_vec(),
                        kept_other_file: kept_other_file.take(),
                    };
                    if let Err(err) = writer.flush() {
                        // An empty file would read as a process that died
                        // at start-up.
                        _ = std::fs::remove_file(&writer.path);
                        return Err((writer.path.clone(), err));
                    }
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

    /// The file named for the trace, passed over because it holds something
    /// other than a trace (see [`TraceWriter::create`]).
    pub fn kept_other_file(&self) -> Option<&Path> {
        self.kept_other_file.as_deref()
    }

    pub fn append(&mut self, record: &Record) {
        frame_record(record, &mut self.pending);
    }

    /// Writes what was appended since the last flush in one go, so that a
    /// process killed meanwhile leaves at most one torn record at the end.
    pub fn flush(&mut self) -> io::Result<()> {
        self.write_pending(0).map(drop)
    }

    /// Flushes what was appended, then writes `snapshot` holding `counters`
    /// straight from their buffer (tens of MiB at a first snapshot, not
    /// copied again). A process killed meanwhile leaves it as the torn
    /// record at the end.
    pub fn write_snapshot(&mut self, snapshot: &Snapshot, counters: &EncodedCounters) -> io::Result<()> {
        let (head, body, tail) = snapshot_frame(snapshot, counters);
        self.pending.extend_from_slice(&head);
        if self.write_pending(body.len() + tail.len())? {
            self.write_all(body)?;
            self.write_all(&tail)?;
        }
        Ok(())
    }

    /// Writes what was appended, when the file-size limit and the room on
    /// the file system leave room for it and `then` bytes more, which the
    /// caller writes next; false when this process writes nothing (see
    /// [`WRITES_FORBIDDEN`]).
    fn write_pending(&mut self, then: usize) -> io::Result<bool> {
        if WRITES_FORBIDDEN.load(Ordering::Relaxed) {
            self.pending.clear();
            return Ok(false);
        }
        self.check_descriptor()?;
        let pending = std::mem::take(&mut self.pending);
        let len = pending.len() + then;
        // The descriptor was just found to hold what was written.
        let limits = if self.regular {
            sys::within_file_size_limit(self.written, len).and_then(|()| sys::leaves_room_for_the_program(self.fd, len))
        } else {
            Ok(())
        };
        let result = limits.and_then(|()| self.write_all(&pending));
        self.pending = pending;
        self.pending.clear();
        // A first snapshot's stack nodes take MiBs; later flushes are small.
        self.pending.shrink_to(KEPT_CAPACITY);
        result.map(|()| true)
    }

    /// Writes `bytes` at the end of the trace, counting them.
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        let result = sys::write_all(self.fd, bytes);
        self.written = match &result {
            Ok(()) => self.written + bytes.len() as u64,
            // Part of it may have been written.
            Err(_) => sys::open_file(self.fd).and_then(|file| file.size).unwrap_or(self.written),
        };
        result
    }

    /// Makes sure the descriptor still names the trace file. A program that
    /// closes every descriptor it did not open itself (a daemon's start, a
    /// careful launcher) and opens a file of its own may be handed the same
    /// number: the trace must not go into that file, nor that descriptor be
    /// closed under the program. The trace file is opened again instead,
    /// and the trace goes on where it was. A trace file deleted while the
    /// program runs is lost: recording stops, and says so.
    fn check_descriptor(&mut self) -> io::Result<()> {
        if let Some(file) = sys::open_file(self.fd).filter(|file| self.fd >= 0 && file.id == self.file) {
            return if !self.holds_what_was_written(&file) {
                // It may be the program's own file now: never closed here.
                self.fd = -1;
                Err(io::Error::other(
                    "it no longer holds what the tracer wrote (another writer wrote into it, or the program deleted it and a file of its own took its place)",
                ))
            } else if file.deleted {
                Err(io::Error::other("it was deleted while the program ran"))
            } else {
                Ok(())
            };
        }
        let lost = std::mem::replace(&mut self.fd, -1);
        let fd = sys::reopen_to_append(&self.path).map_err(|err| {
            io::Error::new(
                err.kind(),
                format!("the program closed its descriptor ({lost}) and the file is gone ({err})"),
            )
        })?;
        if !sys::open_file(fd).is_some_and(|file| self.holds_what_was_written(&file)) {
            sys::close(fd);
            return Err(io::Error::other(format!(
                "the program closed its descriptor ({lost}) and the file at that path is another one now"
            )));
        }
        self.fd = fd;
        Ok(())
    }

    /// Whether `file` is the trace file as this writer left it. Its size
    /// tells it from a file the program opened at the same number after
    /// the trace file was deleted, which may be given the deleted one's
    /// inode once the program closed the last descriptor on it.
    fn holds_what_was_written(&self, file: &sys::OpenFile) -> bool {
        file.id == self.file && file.size.is_none_or(|size| size == self.written)
    }

    /// Whether the descriptor is still open on the trace file (a forked
    /// child's copy of its parent's, which its parent may have written to
    /// since, included).
    fn owns_descriptor(&self) -> bool {
        self.fd >= 0 && sys::file_id(self.fd) == Some(self.file)
    }
}

impl Drop for TraceWriter {
    fn drop(&mut self) {
        if self.owns_descriptor() {
            sys::close(self.fd);
        }
    }
}

/// Whether opening a file as `claim` failed only because another process
/// has that file (or, `Locked`, wrote it beside this one): the next
/// candidate may be free.
fn held_by_another(claim: Claim, err: &io::Error) -> bool {
    match claim {
        Claim::Locked => matches!(err.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::AlreadyExists),
        Claim::Exclusive => err.kind() == io::ErrorKind::AlreadyExists,
    }
}

/// Whether the file `fd` is open on holds something other than a trace (a
/// script named as the output by mistake), or cannot be read to tell: it is
/// kept, not emptied. An empty file, or one starting as a trace does (an
/// earlier run's, whole or torn), is not.
fn holds_other_than_a_trace(fd: i32) -> bool {
    if sys::file_size(fd).is_none_or(|size| size == 0) {
        return false;
    }
    let Ok(reading) = sys::open_to_read(fd) else { return true };
    let mut start = [0u8; MAGIC.len()];
    let read = sys::read_at(reading, &mut start, 0);
    sys::close(reading);
    read.map_or(true, |n| start[..n] != MAGIC[..n])
}

/// A process record larger than this (a command line of megabytes) is
/// not read: the file is taken for an earlier run's.
const MOST_PROCESS_RECORD_BYTES: u32 = 1 << 20;

/// What tells a trace begun beside this process from an earlier run's.
#[derive(Debug, Clone, Copy)]
pub struct ThisProcess {
    /// When this process started, rounded down to the kernel's clock tick
    /// (see [`sys::process_start_unix_ns`]).
    pub start_unix_ns: u64,
    pub pipes: StdioPipes,
}

/// Whether the file `fd` is open on holds a trace of a process started
/// beside this one, as its first record says: the other end of a pipe with
/// this one (`first | second`, where `first` ended before `second`'s tracer
/// began) whose trace began after this process started. Time alone does
/// not tell: this process's start is known to a clock tick (10 ms), within
/// which a command run just before it may have begun its trace, and a
/// process that execs keeps the start of its fork (`(mkdir -p out; exec
/// python train.py)` started before mkdir did).
fn started_beside(fd: i32, this: &ThisProcess) -> bool {
    let Ok(reading) = sys::open_to_read(fd) else { return false };
    let other = trace_process(reading);
    sys::close(reading);
    let Some(other) = other else { return false };
    let pipes = other.setting(STDIO_PIPES_SETTING).map(StdioPipes::parse).unwrap_or_default();
    other.start_unix_ns >= this.start_unix_ns && pipes.neighbours(&this.pipes)
}

/// The process record a trace file starts with, read whole and checked;
/// `None` for anything but a trace starting with a sound process record.
fn trace_process(fd: i32) -> Option<Process> {
    let reader = RecordReader::new(sys::ReaderAt::from_start(fd)).ok()?;
    match reader.with_payload_limit(MOST_PROCESS_RECORD_BYTES).next()? {
        Record::Process(process) => Some(process),
        _ => None,
    }
}
