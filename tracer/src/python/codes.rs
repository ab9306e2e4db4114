//! Code objects seen by the frame walk: each gets a small id the first time
//! its address is seen, and what the analyzer needs of it (file, qualified
//! name, first line, location table) is copied then and queued as a `PyCode`
//! record.
//!
//! A freed code object's memory can hold a different code object later, and
//! its line table's memory a different line table. The cache remembers the
//! identity of the object it copied (the filename, qualname and line-table
//! pointers, the first line, the bytecode length, the line table's length
//! and a hash of its first 64 bytes) and compares it on every hit; a mismatch
//! means a new object, which gets a new id.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use trace_format::PyCode;

use super::layout::Layout;
use super::memory;
use crate::fast_hash::BuildWordHasher;
use crate::lock;

/// Longest file or function name copied (longer ones are cut).
const MAX_NAME_CHARS: u64 = 4096;
/// Largest location table copied; a larger one is left empty (lines unknown).
const MAX_LINETABLE_BYTES: u64 = 1 << 20;

#[derive(Clone, Copy, PartialEq, Eq)]
struct Identity {
    filename: u64,
    qualname: u64,
    linetable: u64,
    first_line: u32,
    code_units: u64,
    linetable_len: u64,
    linetable_head: u64,
}

#[derive(Clone, Copy)]
struct Cached {
    id: u64,
    identity: Identity,
}

/// The types a code object's fields must have, resolved once at load.
#[derive(Clone, Copy)]
pub struct Types {
    pub code: u64,
    pub unicode: u64,
    pub bytes: u64,
}

#[derive(Default)]
struct Written {
    records: Vec<PyCode>,
    /// How many of `records` the current trace file already holds.
    written: usize,
}

#[derive(Default)]
pub struct CodeTable {
    ids: DashMap<u64, Cached, BuildWordHasher>,
    next_id: AtomicU64,
    records: Mutex<Written>,
}

impl CodeTable {
    /// The id of the code object at `code` (whose type was checked), copying
    /// it on first sight; `None` when its fields do not look like a code object's.
    pub fn id_of(&self, code: u64, layout: &Layout, types: &Types) -> Option<u64> {
        let linetable = memory::object_pointer(code, layout.code_linetable)?;
        if memory::word(linetable, layout.ob_type)? != types.bytes {
            return None;
        }
        let linetable_len = memory::word(linetable, layout.var_size)?;
        let identity = Identity {
            filename: memory::object_pointer(code, layout.code_filename)?,
            qualname: memory::object_pointer(code, layout.code_qualname)?,
            linetable,
            first_line: memory::u32_at(code, layout.code_firstlineno)?,
            code_units: memory::word(code, layout.var_size)?,
            linetable_len,
            linetable_head: head_hash(linetable + layout.bytes_data, linetable_len)?,
        };
        if let Some(cached) = self.ids.get(&code) {
            if cached.identity == identity {
                return Some(cached.id);
            }
        }
        // New, or another object at a reused address: copy it outside any lock.
        let record = PyCode {
            id: 0,
            filename: read_str(identity.filename, layout, types)?,
            qualname: read_str(identity.qualname, layout, types)?,
            first_line: identity.first_line,
            linetable: read_bytes(identity.linetable, layout, types)?,
        };
        match self.ids.entry(code) {
            Entry::Occupied(mut existing) => {
                if existing.get().identity == identity {
                    return Some(existing.get().id);
                }
                let id = self.queue(record);
                existing.insert(Cached { id, identity });
                Some(id)
            }
            Entry::Vacant(vacant) => {
                let id = self.queue(record);
                vacant.insert(Cached { id, identity });
                Some(id)
            }
        }
    }

    /// Assigns the next id and queues the record; called with the map entry
    /// held, before the id is published, so a stack naming the id is always
    /// written after the code record.
    fn queue(&self, record: PyCode) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&self.records).records.push(PyCode { id, ..record });
        id
    }

    /// Code records not yet in the current trace file.
    pub fn take_unwritten(&self) -> Vec<PyCode> {
        let mut records = lock(&self.records);
        let start = records.written;
        records.written = records.records.len();
        records.records[start..].to_vec()
    }

    /// Every code record, for a trace file that starts from scratch.
    pub fn all(&self) -> Vec<PyCode> {
        let mut records = lock(&self.records);
        records.written = records.records.len();
        records.records.clone()
    }
}

/// A hash of the first 64 bytes of a line table (`len` bytes at `data`,
/// 8-aligned: the start of a bytes object's data).
fn head_hash(data: u64, len: u64) -> Option<u64> {
    let len = len.min(64);
    let mut hash = len;
    for i in 0..len.div_ceil(8) {
        let mut word = memory::word(data, i * 8)?;
        let valid = (len - i * 8).min(8);
        if valid < 8 {
            word &= (1u64 << (valid * 8)) - 1;
        }
        hash = (hash.rotate_left(23) ^ word).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    Some(hash)
}

/// The text of a `str` object from its raw layout: compact ASCII, or compact
/// UCS-1/2/4. Anything else (a legacy string) reads as "?".
fn read_str(object: u64, layout: &Layout, types: &Types) -> Option<String> {
    if memory::word(object, layout.ob_type)? != types.unicode {
        return None;
    }
    let length = memory::word(object, layout.unicode_length)?;
    let state = memory::u32_at(object, layout.unicode_state)?;
    let kind = (state >> 2) & 7;
    let compact = state & (1 << 5) != 0;
    let ascii = state & (1 << 6) != 0;
    if !compact || length > 1 << 30 {
        return Some("?".into());
    }
    let shown = length.min(MAX_NAME_CHARS);
    let text = if ascii {
        let raw = memory::copy_bytes(object + layout.ascii_data, shown as usize)?;
        String::from_utf8_lossy(&raw).into_owned()
    } else {
        let data = object + layout.compact_data;
        let raw = memory::copy_bytes(data, (shown * u64::from(kind.max(1))) as usize)?;
        match kind {
            1 => raw.iter().map(|&b| char::from(b)).collect(),
            2 => {
                let units: Vec<u16> = raw.chunks_exact(2).map(|c| u16::from_ne_bytes([c[0], c[1]])).collect();
                String::from_utf16_lossy(&units)
            }
            4 => raw
                .chunks_exact(4)
                .map(|c| char::from_u32(u32::from_ne_bytes([c[0], c[1], c[2], c[3]])).unwrap_or('?'))
                .collect(),
            _ => "?".into(),
        }
    };
    Some(text)
}

/// The contents of a `bytes` object.
fn read_bytes(object: u64, layout: &Layout, types: &Types) -> Option<Vec<u8>> {
    if memory::word(object, layout.ob_type)? != types.bytes {
        return None;
    }
    let size = memory::word(object, layout.var_size)?;
    if size > MAX_LINETABLE_BYTES {
        return Some(Vec::new());
    }
    memory::copy_bytes(object + layout.bytes_data, size as usize)
}
