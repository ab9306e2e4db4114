//! malloc and friends: each forwards to the program's allocator (glibc's,
//! see [`super::next_allocator`]) and then records the result.
//! C++ `new`/`delete` reach these through libstdc++'s calls to malloc/free
//! (another allocator's own are recorded in [`super::operator_new`]).
//!
//! The entry points that record a stack are stubs that pass the program's
//! stack and frame pointers at the call on to the hook's body (see
//! [`Entry`]), so the capture starts at the program's frame.

use std::ffi::{c_int, c_void};

use super::entry;
use super::next_allocator as next;
use crate::session;

extern "C" {
    fn malloc_usable_size(ptr: *mut c_void) -> usize;
}

entry_stub!(malloc(size: usize) -> *mut c_void => malloc_body, "rsi", "rdx");
entry_stub!(calloc(count: usize, size: usize) -> *mut c_void => calloc_body, "rdx", "rcx");
entry_stub!(realloc(ptr: *mut c_void, size: usize) -> *mut c_void => realloc_body, "rdx", "rcx");
entry_stub!(reallocarray(ptr: *mut c_void, count: usize, size: usize) -> *mut c_void => reallocarray_body, "rcx", "r8");
entry_stub!(posix_memalign(out: *mut *mut c_void, alignment: usize, size: usize) -> c_int => posix_memalign_body, "rcx", "r8");
entry_stub!(aligned_alloc(alignment: usize, size: usize) -> *mut c_void => aligned_alloc_body, "rdx", "rcx");
entry_stub!(memalign(alignment: usize, size: usize) -> *mut c_void => memalign_body, "rdx", "rcx");
entry_stub!(valloc(size: usize) -> *mut c_void => valloc_body, "rsi", "rdx");
entry_stub!(pvalloc(size: usize) -> *mut c_void => pvalloc_body, "rsi", "rdx");

unsafe extern "C" fn malloc_body(size: usize, sp: u64, bp: u64) -> *mut c_void {
    let ptr = next::malloc(size);
    session::allocated(ptr, size, entry(sp, bp));
    ptr
}

#[no_mangle]
pub unsafe extern "C" fn free(ptr: *mut c_void) {
    // The record goes first: once the allocator has the block back, another
    // thread may be handed the same address.
    session::freed(ptr);
    // SAFETY: the caller passes a pointer from this allocator (or null), as free requires.
    unsafe { next::free(ptr) }
}

unsafe extern "C" fn calloc_body(count: usize, size: usize, sp: u64, bp: u64) -> *mut c_void {
    let ptr = next::calloc(count, size);
    // calloc returns null when count * size overflows, so the product is exact here.
    session::allocated(ptr, count.wrapping_mul(size), entry(sp, bp));
    ptr
}

unsafe extern "C" fn realloc_body(ptr: *mut c_void, size: usize, sp: u64, bp: u64) -> *mut c_void {
    if ptr.is_null() {
        // SAFETY: realloc(NULL, n) is malloc(n).
        return unsafe { malloc_body(size, sp, bp) };
    }
    let known = session::forget_for_realloc(ptr);
    // SAFETY: the caller passes a live pointer from this allocator, as realloc requires.
    let new_ptr = unsafe { next::realloc(ptr, size) };
    if new_ptr.is_null() {
        // Size 0 freed the block; otherwise the old block is still the caller's.
        if size != 0 && known {
            // SAFETY: the failed realloc left `ptr` live and unchanged.
            session::allocated(ptr, unsafe { malloc_usable_size(ptr) }, entry(sp, bp));
        }
        return new_ptr;
    }
    session::allocated(new_ptr, size, entry(sp, bp));
    new_ptr
}

unsafe extern "C" fn reallocarray_body(ptr: *mut c_void, count: usize, size: usize, sp: u64, bp: u64) -> *mut c_void {
    match count.checked_mul(size) {
        // SAFETY: same contract as realloc, which reallocarray extends.
        Some(total) => unsafe { realloc_body(ptr, total, sp, bp) },
        None => {
            crate::sys::set_errno(libc::ENOMEM);
            std::ptr::null_mut()
        }
    }
}

unsafe extern "C" fn posix_memalign_body(
    out: *mut *mut c_void,
    alignment: usize,
    size: usize,
    sp: u64,
    bp: u64,
) -> c_int {
    // SAFETY: the caller passes a writable location for the result.
    let result = unsafe { next::posix_memalign(out, alignment, size) };
    if result == 0 {
        // SAFETY: set by the successful call above.
        session::allocated(unsafe { *out }, size, entry(sp, bp));
    }
    result
}

unsafe extern "C" fn aligned_alloc_body(alignment: usize, size: usize, sp: u64, bp: u64) -> *mut c_void {
    let ptr = next::aligned_alloc(alignment, size);
    session::allocated(ptr, size, entry(sp, bp));
    ptr
}

unsafe extern "C" fn memalign_body(alignment: usize, size: usize, sp: u64, bp: u64) -> *mut c_void {
    let ptr = next::memalign(alignment, size);
    session::allocated(ptr, size, entry(sp, bp));
    ptr
}

unsafe extern "C" fn valloc_body(size: usize, sp: u64, bp: u64) -> *mut c_void {
    let ptr = next::valloc(size);
    session::allocated(ptr, size, entry(sp, bp));
    ptr
}

unsafe extern "C" fn pvalloc_body(size: usize, sp: u64, bp: u64) -> *mut c_void {
    let ptr = next::pvalloc(size);
    session::allocated(ptr, size, entry(sp, bp));
    ptr
}
