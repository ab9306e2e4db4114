//! Reading a trace record by record, with the torn tail of a killed process
//! detected rather than misread.

use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

use crate::records::{Record, RecordKind};
use crate::{FILE_HEADER_LEN, FORMAT_VERSION, MAGIC, MAX_PAYLOAD_LEN, OLDEST_READABLE_VERSION};

/// A trace that cannot be read at all.
#[derive(Debug)]
pub enum ReadError {
    Io(io::Error),
    /// The file does not start with the trace magic.
    NotATrace,
    /// Written by a newer tracer than this reader understands.
    NewerVersion {
        found: u16,
    },
    /// Written by an older tracer, in a format this reader no longer reads.
    OlderVersion {
        found: u16,
    },
    /// The file is shorter than the file header.
    TooShort,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(err) => write!(f, "cannot read it: {err}"),
            ReadError::NotATrace => f.write_str("it is not a trace written by libtracer.so (wrong magic bytes)"),
            ReadError::NewerVersion { found } => write!(
                f,
                "it has trace format version {found}, newer than the {FORMAT_VERSION} this analyzer reads; use the analyzer built with that tracer"
            ),
            ReadError::OlderVersion { found } => write!(
                f,
                "it has trace format version {found}, older than version {OLDEST_READABLE_VERSION}, the oldest this analyzer reads; trace the program again with this tracer"
            ),
            ReadError::TooShort => f.write_str("it is too short to be a trace (no complete file header)"),
        }
    }
}

impl std::error::Error for ReadError {}

/// How the sequence of records ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceEnd {
    /// Not at the end yet.
    Open,
    /// The file ended on a record boundary.
    EndOfFile,
    /// The last record is incomplete: the file was cut off at `offset`
    /// (the process was killed or the disk filled while writing).
    Truncated { offset: u64 },
    /// The record at `offset` is damaged (bad checksum, unknown kind or bad field).
    Damaged { offset: u64, reason: String },
}

/// Yields the records of a trace in file order and stops at the first
/// incomplete or damaged one, recording why in [`RecordReader::end`].
pub struct RecordReader<R> {
    input: R,
    offset: u64,
    end: TraceEnd,
    payload: Vec<u8>,
    /// The format version in the file header, which lays the payloads out.
    version: u16,
    /// Payloads longer than this are taken for damage, not read.
    payload_limit: u32,
}

impl RecordReader<BufReader<File>> {
    pub fn open(path: &Path) -> Result<Self, ReadError> {
        let file = File::open(path).map_err(ReadError::Io)?;
        RecordReader::new(BufReader::with_capacity(1 << 20, file))
    }
}

impl<R: Read> RecordReader<R> {
    pub fn new(mut input: R) -> Result<Self, ReadError> {
        let mut header = [0u8; FILE_HEADER_LEN];
        let got = read_full(&mut input, &mut header).map_err(ReadError::Io)?;
        if got >= MAGIC.len() && header[..MAGIC.len()] != MAGIC {
            return Err(ReadError::NotATrace);
        }
        if got < FILE_HEADER_LEN {
            let magic = got.min(MAGIC.len());
            return Err(if header[..magic] == MAGIC[..magic] { ReadError::TooShort } else { ReadError::NotATrace });
        }
        let version = u16::from_le_bytes([header[8], header[9]]);
        if version > FORMAT_VERSION {
            return Err(ReadError::NewerVersion { found: version });
        }
        if version == 0 {
            return Err(ReadError::NotATrace);
        }
        if version < OLDEST_READABLE_VERSION {
            return Err(ReadError::OlderVersion { found: version });
        }
        Ok(RecordReader {
            input,
            offset: FILE_HEADER_LEN as u64,
            end: TraceEnd::Open,
            payload: Vec::new(),
            version,
            payload_limit: MAX_PAYLOAD_LEN,
        })
    }

    /// Stops at a record whose payload is longer than `limit` bytes (at
    /// most [`MAX_PAYLOAD_LEN`]) without reading it, as at a damaged one:
    /// for a reader that wants only small records and must not be made to
    /// allocate for a large one.
    pub fn with_payload_limit(mut self, limit: u32) -> Self {
        self.payload_limit = limit.min(MAX_PAYLOAD_LEN);
        self
    }

    /// Why reading stopped; [`TraceEnd::Open`] until the iterator is exhausted.
    pub fn end(&self) -> &TraceEnd {
        &self.end
    }

    /// Bytes consumed so far (the offset of the next record).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn read_record(&mut self) -> Result<Option<Record>, TraceEnd> {
        let start = self.offset;
        let truncated = TraceEnd::Truncated { offset: start };
        let io_error = |err: io::Error| TraceEnd::Damaged { offset: start, reason: err.to_string() };
        let mut head = [0u8; 5];
        match read_full(&mut self.input, &mut head).map_err(io_error)? {
            0 => return Ok(None),
            5 => {}
            _ => return Err(truncated),
        }
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        if len > self.payload_limit {
            let reason = if len > MAX_PAYLOAD_LEN {
                format!("impossible record length {len}")
            } else {
                format!("record length {len} over this reader's limit of {}", self.payload_limit)
            };
            return Err(TraceEnd::Damaged { offset: start, reason });
        }
        self.payload.resize(len as usize + 4, 0);
        if read_full(&mut self.input, &mut self.payload).map_err(io_error)? < self.payload.len() {
            return Err(truncated);
        }
        let (payload, crc) = self.payload.split_at(len as usize);
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&head[4..]);
        hasher.update(payload);
        if hasher.finalize() != u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
            return Err(TraceEnd::Damaged { offset: start, reason: "checksum mismatch".into() });
        }
        let kind = RecordKind::from_byte(head[4])
            .ok_or_else(|| TraceEnd::Damaged { offset: start, reason: format!("unknown record kind {}", head[4]) })?;
        let record = Record::decode_payload(kind, self.version, payload)
            .map_err(|err| TraceEnd::Damaged { offset: start, reason: err.to_string() })?;
        self.offset += 5 + u64::from(len) + 4;
        Ok(Some(record))
    }
}

impl<R: Read> Iterator for RecordReader<R> {
    type Item = Record;

    fn next(&mut self) -> Option<Record> {
        if self.end != TraceEnd::Open {
            return None;
        }
        match self.read_record() {
            Ok(Some(record)) => Some(record),
            Ok(None) => {
                self.end = TraceEnd::EndOfFile;
                None
            }
            Err(end) => {
                self.end = end;
                None
            }
        }
    }
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(filled)
}
