//! glibc's allocator entry points, and the allocator the tracer itself uses.
//!
//! The hooks forward to `__libc_malloc` and friends, which glibc exports for
//! exactly this purpose; they work from the first instruction of the process,
//! so no static bootstrap pool is needed (unless another allocator follows
//! the tracer: see `hooks::next_allocator`). The tracer's own Rust
//! allocations go to these functions directly, so they never re-enter the
//! hooks and are never recorded.

mod mapped;

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub use mapped::set_reserve_aside;
use mapped::{ending_block, in_reserve, reserve_block, PAGE_ALIGNMENT};

extern "C" {
    pub fn __libc_malloc(size: usize) -> *mut c_void;
    pub fn __libc_calloc(count: usize, size: usize) -> *mut c_void;
    pub fn __libc_realloc(ptr: *mut c_void, size: usize) -> *mut c_void;
    pub fn __libc_free(ptr: *mut c_void);
    pub fn __libc_memalign(alignment: usize, size: usize) -> *mut c_void;
    pub fn __libc_valloc(size: usize) -> *mut c_void;
    pub fn __libc_pvalloc(size: usize) -> *mut c_void;
}

/// Bytes of the tracer's blocks from malloc, as asked for.
static MALLOC_BYTES: AtomicU64 = AtomicU64::new(0);

/// The memory the tracer holds for itself (tables, buffers), reported in
/// every snapshot: its blocks from malloc as asked for, its mapped ones
/// (the large tables) as far as they are resident, counted within the last
/// 50 ms.
pub fn tracer_bytes() -> u64 {
    MALLOC_BYTES.load(Ordering::Relaxed) + mapped::resident_bytes(crate::sys::monotonic_ns())
}

/// Freed memory the program's allocator keeps: memory the program gave
/// back that the system did not get back. `other_allocator` reads it for
/// an allocator other than glibc's; glibc's is its arenas' free space
/// (`fordblks`) less what `malloc_trim` handed back (see
/// [`TRIMMED_FREE_BYTES`]). The caller must hold none of the allocator's
/// locks (no hook does once the real call returned).
pub fn allocator_free_bytes(other_allocator: Option<fn() -> u64>) -> u64 {
    if malloc_off_limits() {
        return 0;
    }
    if let Some(read) = other_allocator {
        return read();
    }
    let free = glibc_free_bytes();
    // The free space holds no more trimmed bytes than all its bytes: what
    // malloc took from the trimmed chunks since is written again, and once
    // freed, kept like any other.
    let trimmed = TRIMMED_FREE_BYTES.fetch_min(free, Ordering::Relaxed).min(free);
    free - trimmed
}

/// glibc's free space right after the program's last `malloc_trim`, which
/// hands the pages inside free chunks back to the system (`MADV_DONTNEED`)
/// and still counts the chunks as free space: not resident, and not kept.
/// The chunk headers and partial pages it leaves resident are a page per
/// chunk at most, so the count errs towards less kept.
static TRIMMED_FREE_BYTES: AtomicU64 = AtomicU64::new(0);

/// The program's `malloc_trim` returned.
pub fn note_trim() {
    if !malloc_off_limits() {
        TRIMMED_FREE_BYTES.store(glibc_free_bytes(), Ordering::Relaxed);
    }
}

/// glibc's arenas' free space (`fordblks`), for which mallinfo2 locks each
/// arena in turn and walks its free lists: not once malloc is off limits.
fn glibc_free_bytes() -> u64 {
    // SAFETY: mallinfo2 takes no arguments and returns a plain struct; it
    // is safe to call from any thread that is not inside malloc itself.
    let info = unsafe { libc::mallinfo2() };
    info.fordblks as u64
}

/// `len` pairs of words, all zero, or `None` when there is no memory for
/// them: a table that grows fallibly, whose large blocks come zeroed from
/// fresh mappings (their pages cost no memory until written, which filling
/// the vector with zeros would do).
pub fn zeroed_pairs(len: usize) -> Option<Vec<[u64; 2]>> {
    let layout = Layout::array::<[u64; 2]>(len).ok().filter(|layout| layout.size() > 0)?;
    // SAFETY: a zeroed block of the global allocator, of a nonzero size, for
    // `len` pairs of words (for which all-zero bytes are valid values),
    // handed to a vector of that length and capacity, which frees it with
    // the same layout.
    unsafe {
        let block = std::alloc::alloc_zeroed(layout);
        (!block.is_null()).then(|| Vec::from_raw_parts(block.cast(), len, len))
    }
}

/// glibc's malloc guarantees this alignment; larger ones need memalign.
const MALLOC_ALIGNMENT: usize = 16;

/// The tracer's blocks of this size or more (its large tables) are mapped
/// by the raw system call, not taken from malloc: glibc's default mmap
/// threshold. Freeing a block that malloc had mapped raises malloc's
/// threshold to that block's size (its dynamic threshold), after which the
/// program's own large blocks would come from the heap instead: a traced
/// program would manage its memory differently. And a table that outgrew
/// its block goes back to the system at once, rather than sitting in
/// malloc's free lists, where it added to the process's RSS and to the
/// `malloc free` the snapshots report as the program's.
const MAPPED_BLOCK_BYTES: usize = 128 << 10;

fn is_mapped_block(layout: Layout) -> bool {
    layout.size() >= MAPPED_BLOCK_BYTES && layout.align() <= PAGE_ALIGNMENT
}

/// Set when the process ends in `_exit`, which a signal handler may call
/// (it is async-signal-safe) on a thread it interrupted inside malloc, with
/// an arena's lock held: malloc on that thread would then wait for ever.
/// From then on the tracer's allocations come from
/// [`mapped::ending_block`] and nothing it frees goes back.
static MALLOC_OFF_LIMITS: AtomicBool = AtomicBool::new(false);

/// The process is ending: the tracer's last work must not touch malloc.
pub fn stop_using_malloc() {
    MALLOC_OFF_LIMITS.store(true, Ordering::Release);
}

fn malloc_off_limits() -> bool {
    MALLOC_OFF_LIMITS.load(Ordering::Acquire)
}

/// Set once an allocation of the tracer's found no memory: the session
/// stops recording.
static OUT_OF_MEMORY: AtomicBool = AtomicBool::new(false);

pub fn note_out_of_memory() {
    OUT_OF_MEMORY.store(true, Ordering::Relaxed);
}

/// Whether the tracer's memory ran out: a table could not grow, or an
/// allocation had its block from the reserve.
pub fn out_of_memory() -> bool {
    OUT_OF_MEMORY.load(Ordering::Relaxed)
}

/// A block from the reserve for an allocation that found no memory, which
/// would otherwise abort the process (Rust's `handle_alloc_error`); null
/// once the reserve is spent too. The tables' growth asks first and never
/// gets here: this is for the small allocations of the work under way when
/// memory ran out, and of stopping.
fn from_reserve(layout: Layout) -> *mut u8 {
    note_out_of_memory();
    reserve_block(layout)
}

/// `block`, or one from the reserve where it is null.
fn or_from_reserve(block: *mut u8, layout: Layout) -> *mut u8 {
    if block.is_null() {
        from_reserve(layout)
    } else {
        block
    }
}

pub struct LibcAllocator;

// SAFETY: every method forwards to glibc's allocator, which satisfies the
// GlobalAlloc contract for the alignments it is asked for: plain malloc for
// alignments up to 16, memalign above that; realloc keeps the alignment
// only up to 16, so larger alignments reallocate by copy. Large blocks are
// page-aligned mappings of exactly their layout's size, which `dealloc` and
// `realloc` get back with the block and unmap or remap as such. Once malloc
// is off limits, blocks are carved from fresh mappings (zeroed, aligned as
// asked) and none is ever freed or resized in place. A block from the
// reserve (zeroed, aligned as asked) is never freed either, and resized by
// copy; the reserve's range tells it apart.
unsafe impl GlobalAlloc for LibcAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        or_from_reserve(self.alloc_from_system(layout), layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        or_from_reserve(self.alloc_zeroed_from_system(layout), layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if malloc_off_limits() || in_reserve(ptr) {
            // The process is ending, or the block is the reserve's; whatever
            // it holds stays there.
        } else if is_mapped_block(layout) {
            // SAFETY: the block was mapped with this length (the same
            // layout) and nothing refers to it any more.
            mapped::unmap(ptr, layout.size());
        } else {
            MALLOC_BYTES.fetch_sub(layout.size() as u64, Ordering::Relaxed);
            __libc_free(ptr.cast())
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
        let new_ptr =
            if in_reserve(ptr) { std::ptr::null_mut() } else { self.realloc_in_system(ptr, layout, new_size) };
        if !new_ptr.is_null() {
            return new_ptr;
        }
        // The block, unchanged, goes to the reserve (or stays there).
        let new_ptr = from_reserve(new_layout);
        if !new_ptr.is_null() {
            new_ptr.copy_from_nonoverlapping(ptr, layout.size().min(new_size));
            self.dealloc(ptr, layout);
        }
        new_ptr
    }
}

impl LibcAllocator {
    /// [`GlobalAlloc::alloc`] from glibc or the system; null when they have no memory.
    ///
    /// # Safety
    /// As [`GlobalAlloc::alloc`].
    unsafe fn alloc_from_system(&self, layout: Layout) -> *mut u8 {
        let ptr = if malloc_off_limits() {
            ending_block(layout).cast()
        } else if is_mapped_block(layout) {
            return mapped::map(layout.size());
        } else if layout.align() <= MALLOC_ALIGNMENT {
            __libc_malloc(layout.size())
        } else {
            __libc_memalign(layout.align(), layout.size())
        };
        if !ptr.is_null() {
            MALLOC_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        }
        ptr.cast()
    }

    /// [`GlobalAlloc::alloc_zeroed`] from glibc or the system.
    ///
    /// # Safety
    /// As [`GlobalAlloc::alloc_zeroed`].
    unsafe fn alloc_zeroed_from_system(&self, layout: Layout) -> *mut u8 {
        // A new mapping is zeroed already, and its pages untouched cost no
        // memory until written (so is the memory of an ending process).
        if is_mapped_block(layout) || malloc_off_limits() {
            return self.alloc_from_system(layout);
        }
        if layout.align() > MALLOC_ALIGNMENT {
            let ptr = self.alloc_from_system(layout);
            if !ptr.is_null() {
                ptr.write_bytes(0, layout.size());
            }
            return ptr;
        }
        let ptr = __libc_calloc(1, layout.size());
        if !ptr.is_null() {
            MALLOC_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        }
        ptr.cast()
    }

    /// [`GlobalAlloc::realloc`] of a block that is not the reserve's, by
    /// glibc or the system; null, the block unchanged, when they have no
    /// memory.
    ///
    /// # Safety
    /// As [`GlobalAlloc::realloc`].
    unsafe fn realloc_in_system(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
        if is_mapped_block(layout) && is_mapped_block(new_layout) && !malloc_off_limits() {
            // SAFETY: the block was mapped with the old length; the caller
            // uses it through the returned pointer only.
            return mapped::remap(ptr, layout.size(), new_size);
        }
        let by_copy = layout.align() > MALLOC_ALIGNMENT || is_mapped_block(layout) || is_mapped_block(new_layout);
        if by_copy || malloc_off_limits() {
            let new_ptr = self.alloc_from_system(new_layout);
            if !new_ptr.is_null() {
                new_ptr.copy_from_nonoverlapping(ptr, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            return new_ptr;
        }
        let new_ptr = __libc_realloc(ptr.cast(), new_size);
        if !new_ptr.is_null() {
            MALLOC_BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
            MALLOC_BYTES.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        }
        new_ptr.cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the page at `address` is mapped in this process.
    fn is_mapped(address: *mut u8) -> bool {
        let mut resident = 0u8;
        // SAFETY: mincore only reads the page tables for one page-aligned
        // page and writes one byte of `resident`.
        unsafe { libc::mincore(address.cast(), 1, &mut resident) == 0 }
    }

    #[test]
    fn a_large_block_is_a_mapping_of_its_own_kept_across_growth_and_unmapped_when_freed() {
        let allocator = LibcAllocator;
        let layout = Layout::from_size_align(MAPPED_BLOCK_BYTES, 16).unwrap();
        // SAFETY: the blocks come from this allocator with these layouts,
        // are written within their sizes and freed once.
        unsafe {
            let block = allocator.alloc_zeroed(layout);
            assert_eq!(block as usize % PAGE_ALIGNMENT, 0, "a mapping starts a page");
            assert!(std::slice::from_raw_parts(block, layout.size()).iter().all(|&b| b == 0));
            block.write_bytes(7, layout.size());
            let grown = allocator.realloc(block, layout, 4 * MAPPED_BLOCK_BYTES);
            assert!(std::slice::from_raw_parts(grown, layout.size()).iter().all(|&b| b == 7));
            let grown_layout = Layout::from_size_align(4 * MAPPED_BLOCK_BYTES, 16).unwrap();
            let shrunk = allocator.realloc(grown, grown_layout, 100);
            assert!(std::slice::from_raw_parts(shrunk, 100).iter().all(|&b| b == 7));
            assert!(!is_mapped(grown), "the large block went back to the system");
            allocator.dealloc(shrunk, Layout::from_size_align(100, 16).unwrap());
        }
    }

    #[test]
    fn a_large_zeroed_block_costs_no_memory_until_written() {
        let allocator = LibcAllocator;
        let layout = Layout::from_size_align(4 << 20, 16).unwrap();
        // SAFETY: a block from this allocator with this layout, written
        // within its size and freed once.
        unsafe {
            let block = allocator.alloc_zeroed(layout);
            assert_eq!(mapped::resident_in(block as usize, layout.size()), 0);
            block.add(1 << 20).write(1);
            // A page, or a huge page where the system backs mappings with them.
            let resident = mapped::resident_in(block as usize, layout.size());
            assert!((PAGE_ALIGNMENT as u64..=2 << 20).contains(&resident), "{resident}");
            allocator.dealloc(block, layout);
        }
    }

    #[test]
    fn memory_freed_between_kept_blocks_counts_as_held_by_malloc() {
        let _alone = crate::lock(&crate::HEAP_FIGURES);
        let before = allocator_free_bytes(None);
        // Its own thread, for an arena (and free lists) of its own.
        let kept = std::thread::spawn(|| {
            // SAFETY: blocks from glibc's malloc, written within their size
            // and freed once; the small kept ones go back to the caller.
            unsafe {
                let pairs: Vec<(*mut c_void, usize)> =
                    (0..100).map(|_| (__libc_malloc(40 << 10), __libc_malloc(16) as usize)).collect();
                pairs.iter().for_each(|&(block, _)| block.cast::<u8>().write_bytes(1, 40 << 10));
                pairs.into_iter().map(|(block, kept)| (__libc_free(block), kept).1).collect::<Vec<usize>>()
            }
        })
        .join()
        .unwrap();
        let after = allocator_free_bytes(None);
        assert!(after >= before + (3 << 20), "{before} -> {after}");
        // SAFETY: the kept blocks, from __libc_malloc above, each freed once.
        kept.into_iter().for_each(|block| unsafe { __libc_free(block as *mut c_void) });
    }
}
