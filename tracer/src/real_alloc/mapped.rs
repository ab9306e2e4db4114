//! The tracer's large blocks, each a private anonymous mapping of its own
//! made by the raw system calls (this library's `mmap` is the hook that
//! records the program's mappings), and what of them is resident; and the
//! blocks of a process that is ending, which never touch malloc.

use std::alloc::Layout;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Mappings are whole pages; this alignment the kernel always gives.
pub const PAGE_ALIGNMENT: usize = 4096;

/// Where the tracer's mapped blocks are, so that a snapshot can count their
/// resident pages: a table that doubles reserves twice its size and writes
/// the new half only as it fills it. A slot's start is 0 when it is free.
struct Registered {
    start: AtomicUsize,
    len: AtomicUsize,
    /// The block's resident bytes when last counted, and when (monotonic
    /// ns; 0: never).
    resident: AtomicU64,
    counted_ns: AtomicU64,
}

/// Far more than the tracer's tables ever are at once.
const REGISTERED_SLOTS: usize = 256;
static REGISTERED: [Registered; REGISTERED_SLOTS] = [const {
    Registered {
        start: AtomicUsize::new(0),
        len: AtomicUsize::new(0),
        resident: AtomicU64::new(0),
        counted_ns: AtomicU64::new(0),
    }
}; REGISTERED_SLOTS];

/// A block's count is reused for this long: counting walks its page
/// tables (tens of microseconds for the tables of a million stacks), and a
/// run of thousands of short epochs would do it at each.
const RECOUNT_AFTER_NS: u64 = 50_000_000;
/// Bytes of blocks that found no free slot, counted whole.
static UNREGISTERED_BYTES: AtomicU64 = AtomicU64::new(0);

fn register(start: usize, len: usize) {
    let slot = REGISTERED
        .iter()
        .find(|slot| slot.start.compare_exchange(0, start, Ordering::AcqRel, Ordering::Relaxed).is_ok());
    match slot {
        Some(slot) => {
            slot.counted_ns.store(0, Ordering::Relaxed);
            slot.len.store(len, Ordering::Release);
        }
        None => {
            UNREGISTERED_BYTES.fetch_add(len as u64, Ordering::Relaxed);
        }
    }
}

fn unregister(start: usize, len: usize) {
    match REGISTERED.iter().find(|slot| slot.start.load(Ordering::Acquire) == start) {
        Some(slot) => {
            slot.len.store(0, Ordering::Relaxed);
            slot.start.store(0, Ordering::Release);
        }
        None => {
            UNREGISTERED_BYTES.fetch_sub(len as u64, Ordering::Relaxed);
        }
    }
}

/// A new mapped block of `len` bytes (zeroed), or null.
pub fn map(len: usize) -> *mut u8 {
    let block = map_unregistered(len);
    if !block.is_null() {
        register(block as usize, len);
    }
    block
}

/// Gives a block from [`map`] back to the system.
///
/// # Safety
/// `block` came from [`map`] (or [`remap`]) with this `len`, and nothing uses it any more.
pub unsafe fn unmap(block: *mut u8, len: usize) {
    // Unregistered first: once unmapped, the address may be mapped again.
    unregister(block as usize, len);
    // SAFETY: the caller hands over a whole block of its own mapping.
    unsafe { libc::syscall(libc::SYS_munmap, block, len) };
}

/// The block from [`map`] at `block`, grown or shrunk to `new_len` (moved
/// by the kernel, not copied, where it must move); null on failure, the
/// block then unchanged.
///
/// # Safety
/// `block` came from [`map`] (or [`remap`]) with `len`, and the caller
/// uses it only through the returned pointer from now on.
pub unsafe fn remap(block: *mut u8, len: usize, new_len: usize) -> *mut u8 {
    unregister(block as usize, len);
    // SAFETY: the caller's own mapping, resized as a whole.
    let moved = unsafe { libc::syscall(libc::SYS_mremap, block, len, new_len, libc::MREMAP_MAYMOVE) };
    if moved == -1 {
        register(block as usize, len);
        return std::ptr::null_mut();
    }
    register(moved as usize, new_len);
    moved as *mut u8
}

/// The resident bytes of the mapped blocks at `now_ns` (monotonic), each
/// counted at most [`RECOUNT_AFTER_NS`] before (those that found no slot
/// counted whole). A block unmapped meanwhile counts as nothing. Called by
/// one thread at a time (snapshots are taken under a lock).
pub fn resident_bytes(now_ns: u64) -> u64 {
    let registered: u64 = REGISTERED.iter().filter_map(|slot| slot.resident_at(now_ns)).sum();
    registered + UNREGISTERED_BYTES.load(Ordering::Relaxed)
}

impl Registered {
    /// The resident bytes of the slot's block, if it holds one.
    fn resident_at(&self, now_ns: u64) -> Option<u64> {
        let (start, len) = (self.start.load(Ordering::Acquire), self.len.load(Ordering::Acquire));
        if start == 0 || len == 0 {
            return None;
        }
        let counted_ns = self.counted_ns.load(Ordering::Relaxed);
        if counted_ns != 0 && now_ns.saturating_sub(counted_ns) < RECOUNT_AFTER_NS {
            return Some(self.resident.load(Ordering::Relaxed));
        }
        let resident = resident_in(start, len);
        self.resident.store(resident, Ordering::Relaxed);
        self.counted_ns.store(now_ns.max(1), Ordering::Relaxed);
        Some(resident)
    }
}

/// The bytes of `[start, start + len)` (page-aligned `start`) in memory.
pub fn resident_in(start: usize, len: usize) -> u64 {
    let mut vector = [0u8; 4096];
    let pages = len.div_ceil(PAGE_ALIGNMENT);
    let mut resident = 0u64;
    for first in (0..pages).step_by(vector.len()) {
        let count = (pages - first).min(vector.len());
        // SAFETY: mincore reads the page tables for the range and writes
        // one byte per page into `vector`, which has room for `count`.
        let done = unsafe {
            libc::mincore(
                (start + first * PAGE_ALIGNMENT) as *mut libc::c_void,
                count * PAGE_ALIGNMENT,
                vector.as_mut_ptr(),
            )
        };
        if done != 0 {
            return 0;
        }
        resident += vector[..count].iter().filter(|&&page| page & 1 != 0).count() as u64;
    }
    resident * PAGE_ALIGNMENT as u64
}

/// A new private anonymous mapping of `len` bytes (zeroed), or null.
fn map_unregistered(len: usize) -> *mut u8 {
    crate::sys::map_anonymous(len, libc::MAP_PRIVATE).map_or(std::ptr::null_mut(), |block| block.as_ptr())
}

/// Blocks carved one after the other from a chunk, `[cursor, end)`, both
/// changed under the spin lock, and never given back one by one.
struct Carved {
    lock: AtomicBool,
    cursor: AtomicUsize,
    end: AtomicUsize,
}

impl Carved {
    const fn new() -> Carved {
        Carved { lock: AtomicBool::new(false), cursor: AtomicUsize::new(0), end: AtomicUsize::new(0) }
    }

    /// A block for `layout` from the chunk, or from the chunk `refill`
    /// gives (start and length) where it does not fit; null when neither
    /// has room. The lock is held for a few instructions; a signal handler
    /// on the holding thread never comes back here, since the tracer does
    /// nothing on a thread already inside it.
    fn carve(&self, layout: Layout, refill: impl FnOnce() -> Option<(usize, usize)>) -> *mut u8 {
        while self.lock.swap(true, Ordering::Acquire) {
            std::hint::spin_loop();
        }
        let fits = |cursor: usize| {
            let start = cursor.checked_next_multiple_of(layout.align())?;
            let end = start.checked_add(layout.size())?;
            (cursor != 0 && end <= self.end.load(Ordering::Relaxed)).then_some((start, end))
        };
        let mut block = fits(self.cursor.load(Ordering::Relaxed));
        if block.is_none() {
            if let Some((chunk, len)) = refill() {
                self.cursor.store(chunk, Ordering::Relaxed);
                self.end.store(chunk + len, Ordering::Relaxed);
                block = fits(chunk);
            }
        }
        if let Some((_, end)) = block {
            self.cursor.store(end, Ordering::Relaxed);
        }
        self.lock.store(false, Ordering::Release);
        block.map_or(std::ptr::null_mut(), |(start, _)| start as *mut u8)
    }
}

/// The blocks of a process that is ending, from chunks of this size.
static ENDING: Carved = Carved::new();
const ENDING_CHUNK_BYTES: usize = 4 << 20;

/// A block for `layout` carved from mappings that are never given back,
/// for a process that is ending.
pub fn ending_block(layout: Layout) -> *mut u8 {
    if layout.size() >= ENDING_CHUNK_BYTES / 4 {
        return if layout.align() <= PAGE_ALIGNMENT { map_unregistered(layout.size()) } else { std::ptr::null_mut() };
    }
    let chunk = || Some(map_unregistered(ENDING_CHUNK_BYTES) as usize).filter(|&chunk| chunk != 0);
    ENDING.carve(layout, || chunk().map(|chunk| (chunk, ENDING_CHUNK_BYTES)))
}

/// Memory set aside as the tracer starts, for its allocations that find
/// no other (see [`super::LibcAllocator`]): `[start, start + len)`.
static RESERVE: Carved = Carved::new();
static RESERVE_START: AtomicUsize = AtomicUsize::new(0);
static RESERVE_LEN: AtomicUsize = AtomicUsize::new(0);
/// Enough for the work between a failed allocation and the end of recording.
const RESERVE_BYTES: usize = 1 << 20;

/// Maps the reserve (its pages cost no memory until written), once.
pub fn set_reserve_aside() {
    if RESERVE_START.load(Ordering::Acquire) != 0 {
        return;
    }
    let start = map_unregistered(RESERVE_BYTES) as usize;
    if start != 0 && RESERVE_START.compare_exchange(0, start, Ordering::AcqRel, Ordering::Acquire).is_ok() {
        RESERVE_LEN.store(RESERVE_BYTES, Ordering::Release);
    }
}

/// A block for `layout` from the reserve (zeroed: nothing there is used
/// twice), or null once it is spent.
pub fn reserve_block(layout: Layout) -> *mut u8 {
    let start = RESERVE_START.load(Ordering::Acquire);
    // The chunk is the reserve, taken up once.
    let first_use = || start != 0 && RESERVE.cursor.load(Ordering::Relaxed) == 0;
    RESERVE.carve(layout, || first_use().then_some((start, RESERVE_BYTES)))
}

/// Whether `block` came from [`reserve_block`].
pub fn in_reserve(block: *mut u8) -> bool {
    let start = RESERVE_START.load(Ordering::Acquire);
    (start..start + RESERVE_LEN.load(Ordering::Acquire)).contains(&(block as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot_of(block: *mut u8) -> Option<&'static Registered> {
        REGISTERED.iter().find(|slot| slot.start.load(Ordering::Acquire) == block as usize)
    }

    fn is_registered(block: *mut u8) -> bool {
        slot_of(block).is_some()
    }

    #[test]
    fn a_count_is_reused_for_a_while_then_made_again() {
        let len = 16 * PAGE_ALIGNMENT;
        let block = map(len);
        let slot = slot_of(block).unwrap();
        let now = 1_000_000_000;
        assert_eq!(slot.resident_at(now), Some(0));
        // SAFETY: the first two pages of the block just mapped.
        unsafe { block.write_bytes(1, 2 * PAGE_ALIGNMENT) };
        assert_eq!(slot.resident_at(now + RECOUNT_AFTER_NS / 2), Some(0), "the count of a moment ago");
        assert_eq!(slot.resident_at(now + RECOUNT_AFTER_NS), Some(2 * PAGE_ALIGNMENT as u64));
        // SAFETY: the block from `map` with `len`, unused from here on.
        unsafe { unmap(block, len) };
    }

    #[test]
    fn only_the_pages_written_count_and_a_block_leaves_the_count_when_unmapped() {
        let len = 64 * PAGE_ALIGNMENT;
        let block = map(len);
        assert!(!block.is_null() && is_registered(block));
        assert_eq!(resident_in(block as usize, len), 0, "nothing written yet");
        // SAFETY: the first 5 pages of the block just mapped.
        unsafe { block.write_bytes(1, 5 * PAGE_ALIGNMENT) };
        assert_eq!(resident_in(block as usize, len), 5 * PAGE_ALIGNMENT as u64);
        // SAFETY: the block from `map` with `len`, used only through `grown` after.
        let grown = unsafe { remap(block, len, 4 * len) };
        assert!(!grown.is_null() && is_registered(grown));
        assert!(grown == block || !is_registered(block));
        assert_eq!(resident_in(grown as usize, 4 * len), 5 * PAGE_ALIGNMENT as u64, "growing writes nothing");
        // SAFETY: the block from `remap`, unused from here on.
        unsafe { unmap(grown, 4 * len) };
        assert!(!is_registered(grown));
    }

    #[test]
    fn an_ending_process_gets_zeroed_aligned_blocks_that_never_overlap() {
        let mut blocks: Vec<(usize, usize)> = Vec::new();
        let layouts = [(24, 8), (1 << 20, 16), (100, 4096), (3 << 20, 64), (1, 1)];
        for (i, (size, align)) in layouts.iter().cycle().take(40).enumerate() {
            let block = ending_block(Layout::from_size_align(*size, *align).unwrap());
            assert!(!block.is_null());
            assert_eq!(block as usize % align, 0, "block {i}");
            // SAFETY: the block is `size` bytes, just handed out.
            let bytes = unsafe { std::slice::from_raw_parts_mut(block, *size) };
            assert!(bytes.iter().all(|&b| b == 0), "block {i}");
            bytes.fill(0xff);
            blocks.push((block as usize, block as usize + size));
        }
        blocks.sort_unstable();
        assert!(blocks.windows(2).all(|pair| pair[0].1 <= pair[1].0), "{blocks:x?}");
    }

    #[test]
    fn the_reserve_hands_out_aligned_blocks_of_its_own_until_spent() {
        set_reserve_aside();
        let mut handed = 0;
        loop {
            let block = reserve_block(Layout::from_size_align(40_000, 64).unwrap());
            if block.is_null() {
                break;
            }
            assert!(in_reserve(block) && (block as usize).is_multiple_of(64));
            handed += 1;
        }
        assert_eq!(handed, RESERVE_BYTES / 40_000, "the reserve is taken up once");
        let own = map(PAGE_ALIGNMENT);
        assert!(!in_reserve(own), "a mapping of its own is not the reserve's");
        // SAFETY: the block just mapped with this length, unused from here on.
        unsafe { unmap(own, PAGE_ALIGNMENT) };
    }
}
