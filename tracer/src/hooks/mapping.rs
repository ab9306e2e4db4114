//! `mmap`, `munmap` and `mremap`: each forwards to the next definition
//! (glibc's) and lets the session record anonymous mappings and shared
//! memory.
//!
//! glibc's malloc and its thread stacks map memory through glibc-internal
//! calls that never reach these symbols, so the heap is not counted twice;
//! another allocator's calls run with the thread inside the tracer (see
//! `next_allocator`), where these hooks record nothing.

use std::ffi::{c_int, c_void};

use super::NextSymbol;
use crate::session;

type Mmap = unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, c_int, libc::off_t) -> *mut c_void;
type Munmap = unsafe extern "C" fn(*mut c_void, usize) -> c_int;
type Mremap = unsafe extern "C" fn(*mut c_void, usize, usize, c_int, ...) -> *mut c_void;

pub static REAL_MMAP: NextSymbol = NextSymbol::new(c"mmap");
pub static REAL_MUNMAP: NextSymbol = NextSymbol::new(c"munmap");
pub static REAL_MREMAP: NextSymbol = NextSymbol::new(c"mremap");

#[no_mangle]
pub unsafe extern "C" fn mmap(
    address: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: libc::off_t,
) -> *mut c_void {
    session::mapping(len, prot, flags, fd, || match REAL_MMAP.get::<Mmap>() {
        // SAFETY: forwarding the caller's arguments unchanged to the real mmap.
        Some(real) => unsafe { real(address, len, prot, flags, fd, offset) },
        // SAFETY: the system call glibc's mmap makes, with the same arguments.
        None => unsafe { libc::syscall(libc::SYS_mmap, address, len, prot, flags, fd, offset) as *mut c_void },
    })
}

/// The same function as `mmap` on 64-bit glibc, where `off_t` is 64 bits.
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    address: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: libc::off_t,
) -> *mut c_void {
    // SAFETY: the caller upholds mmap's contract, which mmap64 shares.
    unsafe { mmap(address, len, prot, flags, fd, offset) }
}

#[no_mangle]
pub unsafe extern "C" fn munmap(address: *mut c_void, len: usize) -> c_int {
    session::unmapping(address, len, || match REAL_MUNMAP.get::<Munmap>() {
        // SAFETY: forwarding the caller's arguments unchanged to the real munmap.
        Some(real) => unsafe { real(address, len) },
        // SAFETY: the system call glibc's munmap makes, with the same arguments.
        None => unsafe { libc::syscall(libc::SYS_munmap, address, len) as c_int },
    })
}

/// Declared with a fixed fifth argument: on x86_64 a variadic caller passes
/// it in the same register, and glibc's own `mremap` forwards that register
/// to the kernel whatever the flags, as this does; only `MREMAP_FIXED`
/// gives it a meaning.
#[no_mangle]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: usize,
    new_len: usize,
    flags: c_int,
    new_address: *mut c_void,
) -> *mut c_void {
    session::remapping(old, old_len, new_len, flags, new_address, || match REAL_MREMAP.get::<Mremap>() {
        // SAFETY: forwarding the caller's arguments unchanged to the real mremap.
        Some(real) => unsafe { real(old, old_len, new_len, flags, new_address) },
        // SAFETY: the system call glibc's mremap makes, with the same arguments.
        None => unsafe { libc::syscall(libc::SYS_mremap, old, old_len, new_len, flags, new_address) as *mut c_void },
    })
}
