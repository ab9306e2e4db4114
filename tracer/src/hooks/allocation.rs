//! malloc and friends: each forwards to glibc and then records the result.
//! C++ `new`/`delete` reach these through libstdc++'s calls to malloc/free.

use std::ffi::{c_int, c_void};

use crate::real_alloc::*;
use crate::session;

extern "C" {
    fn malloc_usable_size(ptr: *mut c_void) -> usize;
}

#[no_mangle]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    // SAFETY: forwarding the caller's request unchanged to glibc.
    let ptr = unsafe { __libc_malloc(size) };
    session::allocated(ptr, size);
    ptr
}

#[no_mangle]
pub unsafe extern "C" fn free(ptr: *mut c_void) {
    // The record goes first: once glibc has the block back, another thread
    // may be handed the same address.
    session::freed(ptr);
    // SAFETY: the caller passes a pointer from this allocator (or null), as free requires.
    unsafe { __libc_free(ptr) }
}

#[no_mangle]
pub unsafe extern "C" fn calloc(count: usize, size: usize) -> *mut c_void {
    // SAFETY: forwarding the caller's request unchanged to glibc.
    let ptr = unsafe { __libc_calloc(count, size) };
    // glibc returns null when count * size overflows, so the product is exact here.
    session::allocated(ptr, count.wrapping_mul(size));
    ptr
}

#[no_mangle]
pub unsafe extern "C" fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    if ptr.is_null() {
        // SAFETY: realloc(NULL, n) is malloc(n).
        return unsafe { malloc(size) };
    }
    let known = session::forget_for_realloc(ptr);
    // SAFETY: the caller passes a live pointer from this allocator, as realloc requires.
    let new_ptr = unsafe { __libc_realloc(ptr, size) };
    if new_ptr.is_null() {
        // Size 0 freed the block; otherwise the old block is still the caller's.
        if size != 0 && known {
            // SAFETY: the failed realloc left `ptr` live and unchanged.
            session::allocated(ptr, unsafe { malloc_usable_size(ptr) });
        }
        return new_ptr;
    }
    session::allocated(new_ptr, size);
    new_ptr
}

#[no_mangle]
pub unsafe extern "C" fn reallocarray(ptr: *mut c_void, count: usize, size: usize) -> *mut c_void {
    match count.checked_mul(size) {
        // SAFETY: same contract as realloc, which reallocarray extends.
        Some(total) => unsafe { realloc(ptr, total) },
        None => {
            set_errno(libc::ENOMEM);
            std::ptr::null_mut()
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, alignment: usize, size: usize) -> c_int {
    if !alignment.is_power_of_two() || !alignment.is_multiple_of(std::mem::size_of::<*mut c_void>()) {
        return libc::EINVAL;
    }
    // SAFETY: the alignment was checked as posix_memalign requires.
    let ptr = unsafe { __libc_memalign(alignment, size) };
    if ptr.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: the caller passes a valid location for the result.
    unsafe { *out = ptr };
    session::allocated(ptr, size);
    0
}

#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(alignment: usize, size: usize) -> *mut c_void {
    // SAFETY: glibc's aligned_alloc is memalign; forwarding unchanged.
    unsafe { memalign(alignment, size) }
}

#[no_mangle]
pub unsafe extern "C" fn memalign(alignment: usize, size: usize) -> *mut c_void {
    // SAFETY: forwarding the caller's request unchanged to glibc.
    let ptr = unsafe { __libc_memalign(alignment, size) };
    session::allocated(ptr, size);
    ptr
}

#[no_mangle]
pub unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
    // SAFETY: forwarding the caller's request unchanged to glibc.
    let ptr = unsafe { __libc_valloc(size) };
    session::allocated(ptr, size);
    ptr
}

#[no_mangle]
pub unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
    // SAFETY: forwarding the caller's request unchanged to glibc.
    let ptr = unsafe { __libc_pvalloc(size) };
    session::allocated(ptr, size);
    ptr
}

fn set_errno(value: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = value };
}
