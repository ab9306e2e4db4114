//! Code objects seen by the frame walk: each gets a small id the first time
//! its address is seen, and what the analyzer needs of it (file, qualified
//! name, first line, location table) is copied then and queued as a `PyCode`
//! record.
//!
//! A freed code object's memory can hold a different code object later, and
//! its line table's memory a different line table. The cache remembers the
//! identity of the object it copied (the filename, qualname and line-table
//! pointers, the first line, the bytecode length, the line table's length
//! and a hash of its first 32 bytes) and compares it on every hit; a mismatch
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

/// Code ids are packed into 30 bits of a stack-tree frame (`python::pack`).
const MAX_CODE_IDS: u64 = 1 << 30;

/// Longest file or function name copied (longer ones are cut).
const MAX_NAME_CHARS: u64 = 4096;
/// Largest location table copied; a larger one is left empty (lines unknown).
const MAX_LINETABLE_BYTES: u64 = 1 << 20;

#[derive(Clone, Copy, PartialEq, Eq, Default)]
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
        // The fields read lie before the bytecode. Of the line table only the
        // header and the words holding its first min(len, 32) bytes are read,
        // all inside its allocation; the block is just their upper bound.
        let object = memory::block(code, layout.code_adaptive)?;
        let linetable = object.word(layout.code_linetable);
        let table = memory::block(linetable, layout.bytes_data + 32)?;
        if table.word(layout.ob_type) != types.bytes {
            return None;
        }
        let linetable_len = table.word(layout.var_size);
        let identity = Identity {
            filename: object.word(layout.code_filename),
            qualname: object.word(layout.code_qualname),
            linetable,
            first_line: object.u32(layout.code_firstlineno),
            code_units: object.word(layout.var_size),
            linetable_len,
            linetable_head: head_hash(&table, layout.bytes_data, linetable_len),
        };
        if !memory::plausible(identity.filename, 16, 8) || !memory::plausible(identity.qualname, 16, 8) {
            return None;
        }
        let slot = recent_slot(code);
        let recent = RECENT.try_with(|recent| {
            // SAFETY: only this thread touches its cache, and never re-entrantly.
            let entry = unsafe { (*recent.get())[slot] };
            (entry.code == code && entry.identity == identity).then_some(entry.id)
        });
        if let Ok(Some(id)) = recent {
            return Some(id);
        }
        let id = self.shared_id_of(code, identity, layout, types)?;
        let _ = RECENT.try_with(|recent| {
            // SAFETY: as above.
            unsafe { (*recent.get())[slot] = Recent { code, identity, id } };
        });
        Some(id)
    }

    fn shared_id_of(&self, code: u64, identity: Identity, layout: &Layout, types: &Types) -> Option<u64> {
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
                let id = self.queue(record)?;
                existing.insert(Cached { id, identity });
                Some(id)
            }
            Entry::Vacant(vacant) => {
                let id = self.queue(record)?;
                vacant.insert(Cached { id, identity });
                Some(id)
            }
        }
    }

    /// Assigns the next id and queues the record; called with the map entry
    /// held, before the id is published, so a stack naming the id is always
    /// written after the code record.
    /// `None` once the ids that fit a packed frame (30 bits) are used up.
    fn queue(&self, record: PyCode) -> Option<u64> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if id >= MAX_CODE_IDS {
            return None;
        }
        lock(&self.records).records.push(PyCode { id, ..record });
        Some(id)
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

/// Entries of the per-thread cache in front of the shared table.
const RECENT_SLOTS: usize = 64;

#[derive(Clone, Copy)]
struct Recent {
    code: u64,
    identity: Identity,
    id: u64,
}

const EMPTY: Recent = Recent {
    code: 0,
    identity: Identity {
        filename: 0,
        qualname: 0,
        linetable: 0,
        first_line: 0,
        code_units: 0,
        linetable_len: 0,
        linetable_head: 0,
    },
    id: 0,
};

thread_local! {
    /// The code objects this thread met last, direct-mapped by address: a
    /// hit costs no atomic operation. Const-initialized and without a
    /// destructor, so it lives in static TLS and reading it never allocates;
    /// the tracer's reentrancy guard keeps a thread from using it twice at once.
    static RECENT: std::cell::UnsafeCell<[Recent; RECENT_SLOTS]> = const { std::cell::UnsafeCell::new([EMPTY; RECENT_SLOTS]) };
}

fn recent_slot(code: u64) -> usize {
    ((code >> 4) ^ (code >> 10)) as usize % RECENT_SLOTS
}

/// A hash of the first 32 bytes of a line table of `len` bytes whose data
/// starts at `data` in `table`. A bytes object's allocation holds its data
/// and a NUL and is rounded up to 8 bytes, so whole words can be read.
#[inline]
fn head_hash(table: &memory::Block, data: u64, len: u64) -> u64 {
    let len = len.min(32);
    let mut hash = len;
    for i in 0..len.div_ceil(8) {
        let mut word = table.word(data + i * 8);
        let valid = (len - i * 8).min(8);
        if valid < 8 {
            word &= (1u64 << (valid * 8)) - 1;
        }
        hash = (hash.rotate_left(23) ^ word).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    hash
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
