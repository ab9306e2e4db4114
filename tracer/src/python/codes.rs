//! Code objects seen by the frame walk: each gets a small id the first time
//! its address is seen, and what the analyzer needs of it (file, qualified
//! name, first line, location table) is copied then and queued as a `PyCode`
//! record.
//!
//! A freed code object's memory can hold a different code object later, and
//! its line table's memory a different line table. The cache remembers the
//! identity of the object it copied (the filename, qualname, line-table and
//! constants pointers, the first line and the bytecode length) and compares
//! it on every hit; a mismatch means a new object, which gets a new id. Only
//! the code object's own fields are compared: the line table is not read
//! again, as it would cost a cache miss a frame on every walk (half of this
//! table's time). Module code exec'd again and again that differs only in
//! the lines it is on (same file object, name, first line and bytecode
//! length) was seen on 3.11 to take the freed one's address and its line
//! table's; its constants tuple's address told them apart. A new code object taking an old one's
//! address, its line table's and its constants', with the same file, name,
//! first line and bytecode length, would keep the old one's lines.
//!
//! The copy is also when `DataLoader.__iter__` is recognised, by its file and
//! qualified name: the walk then knows it from the cache without reading
//! names. Its address is also found as soon as the module that defines it
//! runs (its code object holds the class's, which holds the method's), so
//! that a walk reading nothing but code pointers can look for it. So is
//! the method through which Python's `multiprocessing` forks, whose id a
//! child forked under it looks for among its frames.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use dashmap::DashMap;
use trace_format::PyCode;

use super::data_loader::{is_data_loader_iter, is_data_loader_module, DATA_LOADER_CLASS, DATA_LOADER_ITER};
use super::layout::Layout;
use super::memory;
use super::multiprocessing;
use crate::fast_hash::BuildWordHasher;
use crate::room::{self, OutOfMemory};
use crate::{lock, real_alloc};

/// Code ids are packed into 30 bits of a stack-tree frame (`python::pack`).
const MAX_CODE_IDS: u64 = 1 << 30;

/// Longest file or function name copied (longer ones are cut).
const MAX_NAME_CHARS: u64 = 4096;
/// Largest location table copied; a larger one is left empty (lines unknown).
const MAX_LINETABLE_BYTES: u64 = 1 << 20;
/// Constants looked through for a nested code object; a module has hundreds at most.
const MAX_CONSTS: u64 = 1 << 16;

#[derive(Clone, Copy, PartialEq, Eq, Default)]
struct Identity {
    filename: u64,
    qualname: u64,
    linetable: u64,
    consts: u64,
    first_line: u32,
    code_units: u64,
}

/// A code object as the walk knows it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Code {
    pub id: u64,
    /// It is `torch.utils.data.DataLoader.__iter__`.
    pub data_loader_iter: bool,
}

#[derive(Clone, Copy)]
struct Cached {
    code: Code,
    identity: Identity,
}

/// The types a code object's fields must have, resolved once at load.
#[derive(Clone, Copy)]
pub struct Types {
    pub code: u64,
    pub unicode: u64,
    pub bytes: u64,
    pub tuple: u64,
}

#[derive(Default)]
pub struct CodeTable {
    ids: DashMap<u64, Cached, BuildWordHasher>,
    /// Every code record, at the index of its id: a trace file gets those
    /// its stacks name, when it first writes one of them.
    records: Mutex<Vec<PyCode>>,
    /// Address of the `DataLoader.__iter__` code object; 0 until it is known.
    data_loader_iter: AtomicU64,
    /// One more than the id of `multiprocessing`'s fork launch; 0 until it is met.
    fork_launch_id_plus_one: AtomicU64,
}

impl CodeTable {
    /// The code object at `code` (whose type was checked), copied on first
    /// sight; `None` when its fields do not look like a code object's.
    /// `cache`: the calling thread's, taken once for a walk's frames.
    pub fn code_at(&self, code: u64, layout: &Layout, types: &Types, cache: &mut WalkCache<'_>) -> Option<Code> {
        // The fields read lie before the bytecode; the line table is not
        // read here (only when the object is first copied).
        let object = memory::block(code, layout.code_adaptive)?;
        let identity = Identity {
            filename: object.word(layout.code_filename),
            qualname: object.word(layout.code_qualname),
            linetable: object.word(layout.code_linetable),
            consts: object.word(layout.code_consts),
            first_line: object.u32(layout.code_firstlineno),
            code_units: object.word(layout.var_size),
        };
        if !memory::plausible(identity.filename, 16, 8) || !memory::plausible(identity.qualname, 16, 8) {
            return None;
        }
        let entry = &mut cache.0.codes[recent_slot(code)];
        if entry.address == code && entry.identity == identity {
            return Some(entry.code);
        }
        let known = self.shared_code_at(code, identity, layout, types)?;
        *entry = Recent { address: code, identity, code: known };
        Some(known)
    }

    fn shared_code_at(&self, code: u64, identity: Identity, layout: &Layout, types: &Types) -> Option<Code> {
        if let Some(cached) = self.ids.get(&code) {
            if cached.identity == identity {
                return Some(cached.code);
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
        let data_loader_iter = is_data_loader_iter(&record.filename, &record.qualname);
        if data_loader_iter {
            self.data_loader_iter.store(code, Ordering::Relaxed);
        } else if is_data_loader_module(&record.filename, &record.qualname) {
            let method = nested_code(code, DATA_LOADER_CLASS, layout, types)
                .and_then(|class| nested_code(class, DATA_LOADER_ITER, layout, types));
            if let Some(method) = method {
                self.data_loader_iter.store(method, Ordering::Relaxed);
            }
        }
        let fork_launch = multiprocessing::is_fork_launch(&record.filename, &record.qualname);
        // The record is queued with the entry's shard held; a new entry's
        // room is taken first.
        let placed = room::upsert(&self.ids, code, |cached| match cached {
            Some(cached) if cached.identity == identity => (None, Some(cached.code)),
            cached => {
                let Some(id) = self.queue(record) else { return (None, None) };
                let code = Code { id, data_loader_iter };
                if fork_launch {
                    self.fork_launch_id_plus_one.store(id + 1, Ordering::Relaxed);
                }
                let placed = Cached { code, identity };
                match cached {
                    Some(cached) => {
                        *cached = placed;
                        (None, Some(code))
                    }
                    None => (Some(placed), Some(code)),
                }
            }
        });
        placed.unwrap_or_else(|OutOfMemory| {
            real_alloc::note_out_of_memory();
            None
        })
    }

    /// Assigns the next id and keeps the record; called with the map entry
    /// held, before the id is published, so a stack naming the id always
    /// finds its record. `None` once the ids that fit a packed frame (30
    /// bits) are used up, or when the records cannot grow.
    fn queue(&self, record: PyCode) -> Option<u64> {
        let mut records = lock(&self.records);
        let id = records.len() as u64;
        if id >= MAX_CODE_IDS {
            return None;
        }
        if room::push(&mut records, PyCode { id, ..record }).is_err() {
            real_alloc::note_out_of_memory();
            return None;
        }
        Some(id)
    }

    /// The address of `DataLoader.__iter__`'s code object, 0 while unknown.
    pub fn data_loader_iter(&self) -> u64 {
        self.data_loader_iter.load(Ordering::Relaxed)
    }

    /// The id of the code object through which `multiprocessing` forks,
    /// once a walk met it.
    pub fn fork_launch_id(&self) -> Option<u64> {
        self.fork_launch_id_plus_one.load(Ordering::Relaxed).checked_sub(1)
    }

    /// The records of the code objects with these ids (the known ones).
    pub fn records_of(&self, ids: &[u64]) -> Vec<PyCode> {
        let records = lock(&self.records);
        ids.iter().filter_map(|&id| records.get(id as usize).cloned()).collect()
    }
}

/// Entries of the per-thread cache in front of the shared table.
const RECENT_SLOTS: usize = 64;

#[derive(Clone, Copy)]
struct Recent {
    address: u64,
    identity: Identity,
    code: Code,
}

const EMPTY: Recent = Recent {
    address: 0,
    identity: Identity { filename: 0, qualname: 0, linetable: 0, consts: 0, first_line: 0, code_units: 0 },
    code: Code { id: 0, data_loader_iter: false },
};

const EMPTY_FRAME: RecentFrame = RecentFrame {
    key: FrameKey { frame: 0, code: 0, instr: 0, qualname: 0, linetable: 0, consts: 0, owner: 0, entry: false },
    word: 0,
    data_loader_iter: false,
};

thread_local! {
    /// The code objects this thread met last, direct-mapped by address,
    /// and the frames its walks decoded last, by frame address: a hit costs
    /// no atomic operation. Const-initialized and without a destructor, so
    /// it lives in static TLS and reading it never allocates; the tracer's
    /// reentrancy guard keeps a thread from using it twice at once.
    static RECENT: std::cell::UnsafeCell<ThreadCaches> = const {
        std::cell::UnsafeCell::new(ThreadCaches { codes: [EMPTY; RECENT_SLOTS], frames: [EMPTY_FRAME; RECENT_FRAME_SLOTS] })
    };
}

/// A frame a walk decoded lately, and what it was decoded to.
#[derive(Clone, Copy)]
pub struct RecentFrame {
    /// What the frame held: its address, owner and entry flag, its code
    /// object with the object's name and line table (as the code table's
    /// own check, in part: a code object freed and another made at its
    /// address is told apart), the instruction pointer.
    pub key: FrameKey,
    /// The packed word of the frame (see [`super::pack`]).
    pub word: u64,
    pub data_loader_iter: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub struct FrameKey {
    pub frame: u64,
    pub code: u64,
    pub instr: u64,
    pub qualname: u64,
    pub linetable: u64,
    pub consts: u64,
    pub owner: u8,
    pub entry: bool,
}

/// Frames remembered per thread, direct-mapped by the frame's address.
const RECENT_FRAME_SLOTS: usize = 128;

/// The calling thread's caches, borrowed for one walk: one thread-local
/// access per walk instead of one per frame (each a call to
/// `__tls_get_addr` in a preloaded library).
pub struct WalkCache<'a>(&'a mut ThreadCaches);

impl WalkCache<'_> {
    /// The packed word and loader flag of the frame that held `key` when a
    /// walk last decoded it.
    #[inline]
    pub fn frame(&self, key: &FrameKey) -> Option<(u64, bool)> {
        let recent = &self.0.frames[frame_slot(key.frame)];
        (recent.key == *key).then_some((recent.word, recent.data_loader_iter))
    }

    pub fn note_frame(&mut self, key: FrameKey, word: u64, data_loader_iter: bool) {
        self.0.frames[frame_slot(key.frame)] = RecentFrame { key, word, data_loader_iter };
    }
}

fn frame_slot(frame: u64) -> usize {
    // Frames are at least 80 bytes apart.
    ((frame >> 4) ^ (frame >> 11)) as usize % RECENT_FRAME_SLOTS
}

/// What one thread remembers between walks.
struct ThreadCaches {
    codes: [Recent; RECENT_SLOTS],
    frames: [RecentFrame; RECENT_FRAME_SLOTS],
}

/// Runs `walk` with the calling thread's cache of code objects and frames.
pub fn with_walk_cache<R>(walk: impl FnOnce(&mut WalkCache<'_>) -> R) -> R {
    RECENT.with(|recent| {
        // SAFETY: only this thread touches its cache, and never re-entrantly:
        // a walk runs inside the tracer, whose reentrancy guard keeps the
        // allocations it makes from starting another. The borrow ends with `walk`.
        walk(&mut WalkCache(unsafe { &mut *recent.get() }))
    })
}

fn recent_slot(code: u64) -> usize {
    ((code >> 4) ^ (code >> 10)) as usize % RECENT_SLOTS
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

/// The code object among the constants of the code object at `code` whose
/// qualified name is `qualname`. `code` is alive (a frame runs it), and so
/// are its constants, which it owns.
fn nested_code(code: u64, qualname: &str, layout: &Layout, types: &Types) -> Option<u64> {
    let consts = memory::object_pointer(code, layout.code_consts)?;
    if memory::word(consts, layout.ob_type)? != types.tuple {
        return None;
    }
    let len = memory::word(consts, layout.var_size)?.min(MAX_CONSTS);
    (0..len).filter_map(|i| memory::object_pointer(consts, layout.tuple_items + i * 8)).find(|&item| {
        memory::word(item, layout.ob_type) == Some(types.code)
            && memory::object_pointer(item, layout.code_qualname)
                .and_then(|name| read_str(name, layout, types))
                .is_some_and(|name| name == qualname)
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_taken_from_the_memo_only_when_all_it_held_is_unchanged() {
        let key = FrameKey {
            frame: 0x7000_0100,
            code: 0x5000,
            instr: 0x50c8,
            qualname: 0x6000,
            linetable: 0x6100,
            consts: 0x6200,
            owner: 0,
            entry: false,
        };
        with_walk_cache(|cache| {
            cache.note_frame(key, 0xabc, true);
            assert_eq!(cache.frame(&key), Some((0xabc, true)));
            for changed in [
                FrameKey { code: 0x5800, ..key },
                FrameKey { instr: 0x50ca, ..key },
                FrameKey { qualname: 0x6008, ..key },
                FrameKey { linetable: 0x6108, ..key },
                FrameKey { consts: 0x6208, ..key },
                FrameKey { owner: 1, ..key },
                FrameKey { entry: true, ..key },
            ] {
                assert_eq!(cache.frame(&changed), None);
            }
            // Another frame in the same slot replaces it.
            let same_slot = (1..).map(|n| key.frame + n * 0x10).find(|&f| frame_slot(f) == frame_slot(key.frame));
            let other = FrameKey { frame: same_slot.unwrap(), ..key };
            cache.note_frame(other, 0xdef, false);
            assert_eq!(cache.frame(&key), None);
            assert_eq!(cache.frame(&other), Some((0xdef, false)));
        });
    }
}
