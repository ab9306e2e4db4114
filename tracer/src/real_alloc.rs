//! glibc's allocator entry points, and the allocator the tracer itself uses.
//!
//! The hooks forward to `__libc_malloc` and friends, which glibc exports for
//! exactly this purpose; they work from the first instruction of the process,
//! so no `dlsym` bootstrap (and no static bootstrap pool) is needed. The
//! tracer's own Rust allocations go to the same functions directly, so they
//! never re-enter the hooks and are never recorded.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

extern "C" {
    pub fn __libc_malloc(size: usize) -> *mut c_void;
    pub fn __libc_calloc(count: usize, size: usize) -> *mut c_void;
    pub fn __libc_realloc(ptr: *mut c_void, size: usize) -> *mut c_void;
    pub fn __libc_free(ptr: *mut c_void);
    pub fn __libc_memalign(alignment: usize, size: usize) -> *mut c_void;
    pub fn __libc_valloc(size: usize) -> *mut c_void;
    pub fn __libc_pvalloc(size: usize) -> *mut c_void;
}

/// Bytes the tracer holds for itself (tables, buffers), reported in every snapshot.
static TRACER_BYTES: AtomicU64 = AtomicU64::new(0);

pub fn tracer_bytes() -> u64 {
    TRACER_BYTES.load(Ordering::Relaxed)
}

/// glibc's malloc guarantees this alignment; larger ones need memalign.
const MALLOC_ALIGNMENT: usize = 16;

pub struct LibcAllocator;

// SAFETY: every method forwards to glibc's allocator, which satisfies the
// GlobalAlloc contract for the alignments it is asked for: plain malloc for
// alignments up to 16, memalign above that; realloc keeps the alignment
// only up to 16, so larger alignments reallocate by copy.
unsafe impl GlobalAlloc for LibcAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = if layout.align() <= MALLOC_ALIGNMENT {
            __libc_malloc(layout.size())
        } else {
            __libc_memalign(layout.align(), layout.size())
        };
        if !ptr.is_null() {
            TRACER_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        }
        ptr.cast()
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.align() > MALLOC_ALIGNMENT {
            let ptr = self.alloc(layout);
            if !ptr.is_null() {
                ptr.write_bytes(0, layout.size());
            }
            return ptr;
        }
        let ptr = __libc_calloc(1, layout.size());
        if !ptr.is_null() {
            TRACER_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        }
        ptr.cast()
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        TRACER_BYTES.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        __libc_free(ptr.cast())
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.align() > MALLOC_ALIGNMENT {
            let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
            let new_ptr = self.alloc(new_layout);
            if !new_ptr.is_null() {
                new_ptr.copy_from_nonoverlapping(ptr, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            return new_ptr;
        }
        let new_ptr = __libc_realloc(ptr.cast(), new_size);
        if !new_ptr.is_null() {
            TRACER_BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
            TRACER_BYTES.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        }
        new_ptr.cast()
    }
}
