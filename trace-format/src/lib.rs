//! The trace file written by `libtracer.so` and read by `analyzer`.
//!
//! A trace is a 12-byte file header followed by self-delimiting records:
//!
//! ```text
//! file header : magic "LEAKTRC\0" (8 bytes) | version u16 LE | reserved u16 (0)
//! record      : payload length u32 LE | kind u8 | payload | CRC-32 of (kind, payload) u32 LE
//! ```
//!
//! Records are appended as the traced process runs, so a process killed at any
//! moment (the OOM killer sends SIGKILL) leaves a file whose complete records
//! are all valid; the reader detects the torn or damaged tail by length and
//! checksum and reports it instead of misreading it.
//!
//! The size of a trace grows with distinct stacks times epochs, not with the
//! number of allocations: a [`Snapshot`] carries only the (stack, birth epoch)
//! counters that changed since the previous snapshot of the same file, and
//! stacks are written as the new nodes of a prefix tree ([`StackNodes`]).
//!
//! Version 3 added anonymous memory mappings: a stack whose innermost node is
//! [`Frame::Mapping`] made a mapping, and snapshots carry the mapped totals
//! apart from the heap's. A version 2 trace reads as one without mappings.

mod codec;
mod reader;
mod records;

pub use codec::{DecodeError, Decoder, Encoder};
pub use reader::{ReadError, RecordReader, TraceEnd};
pub use records::*;

/// The first bytes of every trace file.
pub const MAGIC: [u8; 8] = *b"LEAKTRC\0";
/// The format version this crate writes and the newest it reads.
pub const FORMAT_VERSION: u16 = 6;
/// The oldest format version this crate reads. Versions 3 to 6 only added
/// frame kinds, epoch causes and snapshot fields (see `records.rs`), so an
/// older trace reads as it did, the new fields as 0.
pub const OLDEST_READABLE_VERSION: u16 = 2;
/// Length of the file header (magic, version, reserved).
pub const FILE_HEADER_LEN: usize = 12;
/// Largest payload a reader accepts; anything longer is damage, not data.
pub const MAX_PAYLOAD_LEN: u32 = 1 << 30;

/// The trace file's name when `TRACER_OUTPUT` names none (or names a
/// directory), and what the analyzer reads when given no file (or a
/// directory).
pub const DEFAULT_TRACE_FILE: &str = "trace.bin";

/// The numbers a descendant's trace adds to the name of its run's first
/// trace, `output`: `<output>.<pid>`, then `<output>.<pid>.<n>` when that
/// name was taken (after an exec); `None` for any other name.
pub fn descendant_trace_numbers(name: &str, output: &str) -> Option<Vec<u64>> {
    let suffix = name.strip_prefix(output)?.strip_prefix('.')?;
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    suffix.split('.').map(|part| digits(part).then(|| part.parse().unwrap_or(u64::MAX))).collect()
}

/// A byte count as the tracer's settings (`TRACER_SAMPLE_BYTES`) and the
/// analyzer's options (`--noise-floor`) are written: "524288", "512k",
/// "2m", "1g" (binary units, either case); `None` for anything else or an
/// overflow.
pub fn parse_byte_count(text: &str) -> Option<u64> {
    let text = text.trim().to_ascii_lowercase();
    let (digits, shift) = [('k', 10), ('m', 20), ('g', 30)]
        .into_iter()
        .find_map(|(suffix, shift)| Some((text.strip_suffix(suffix)?, shift)))
        .unwrap_or((text.as_str(), 0));
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// The file header bytes for [`FORMAT_VERSION`].
pub fn file_header() -> [u8; FILE_HEADER_LEN] {
    file_header_of_version(FORMAT_VERSION)
}

/// The file header bytes of a trace in format `version`.
pub fn file_header_of_version(version: u16) -> [u8; FILE_HEADER_LEN] {
    let mut header = [0u8; FILE_HEADER_LEN];
    header[..8].copy_from_slice(&MAGIC);
    header[8..10].copy_from_slice(&version.to_le_bytes());
    header
}

/// Appends one framed record (length, kind, payload, checksum) to `out`.
pub fn frame_record(record: &Record, out: &mut Vec<u8>) {
    frame_record_of_version(FORMAT_VERSION, record, out)
}

/// [`frame_record`] in format `version`.
pub fn frame_record_of_version(version: u16, record: &Record, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.push(record.kind() as u8);
    let mut encoder = Encoder::new(out);
    record.encode_payload(version, &mut encoder);
    let payload_len = (out.len() - start - 5) as u32;
    out[start..start + 4].copy_from_slice(&payload_len.to_le_bytes());
    let crc = crc32fast::hash(&out[start + 4..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// A snapshot's counters, encoded one by one as they are found: a first
/// snapshot under torch has over a million, which as [`SiteCounters`] would
/// take 40 bytes each on top of their encoding.
#[derive(Default)]
pub struct EncodedCounters {
    bytes: Vec<u8>,
    count: u64,
}

impl EncodedCounters {
    pub fn push(&mut self, counters: &SiteCounters) {
        counters.encode(&mut Encoder::new(&mut self.bytes));
        self.count += 1;
    }

    pub fn len(&self) -> u64 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// The frame of `snapshot` holding `counters` instead of its own (which
/// must be empty), in three pieces to write one after the other: the
/// length, kind, header and count; the counters; the checksum. Together
/// they are, byte for byte, [`frame_record`] of the snapshot holding them.
pub fn snapshot_frame<'a>(snapshot: &Snapshot, counters: &'a EncodedCounters) -> (Vec<u8>, &'a [u8], [u8; 4]) {
    debug_assert!(snapshot.counters.is_empty());
    let mut head = vec![0; 4];
    head.push(RecordKind::Snapshot as u8);
    let mut encoder = Encoder::new(&mut head);
    snapshot.encode_header(FORMAT_VERSION, &mut encoder);
    encoder.u64(counters.count);
    let payload_len = (head.len() - 5 + counters.bytes.len()) as u32;
    head[..4].copy_from_slice(&payload_len.to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&head[4..]);
    crc.update(&counters.bytes);
    (head, &counters.bytes, crc.finalize().to_le_bytes())
}

#[cfg(test)]
mod tests;
