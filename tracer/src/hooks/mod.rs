//! The symbols `libtracer.so` interposes in the traced process: the allocator
//! entry points, the memory-mapping calls, the process-ending and
//! image-replacing calls, the loader's `dlopen`, `dlclose` and `dlsym`,
//! `malloc_trim`, `prctl` (for seccomp's strict mode), the exported `tracer_mark`, and the hooks set on Python's
//! object allocator. This and `sys`, `modules`, `real_alloc`,
//! `thread_state` (its static TLS block), `own_stack` (its switch to the
//! spare stack) and `unwind` are the only places with `unsafe` code.

/// Exports `$name($args)` as a stub that appends the caller's stack pointer
/// and frame pointer (in the argument registers after `$args`: `$sp`, `$bp`)
/// and jumps to `$body`, or to the address `through $target` holds, which
/// returns straight to the caller.
/// `entry_stub!(unexported ...)` makes the same stub for a function the
/// program reaches through a pointer (x86_64 only).
macro_rules! entry_stub {
    (unexported $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty => $body:ident, $sp:literal, $bp:literal) => {
        entry_stub!(@x86_64 [] $name($($arg: $ty),*) -> $ret, $sp, $bp, "jmp {to}", sym $body);
    };
    ($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty => $body:ident, $sp:literal, $bp:literal) => {
        entry_stub!(@x86_64 [no_mangle] $name($($arg: $ty),*) -> $ret, $sp, $bp, "jmp {to}", sym $body);

        #[cfg(not(target_arch = "x86_64"))]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            // SAFETY: the caller's contract is the body's, which takes no
            // more than the registers it cannot read here.
            unsafe { $body($($arg,)* 0, 0) }
        }
    };
    ($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty => through $target:path, $sp:literal, $bp:literal) => {
        entry_stub!(@x86_64 [no_mangle] $name($($arg: $ty),*) -> $ret, $sp, $bp, "jmp qword ptr [rip + {to}]", sym $target);
    };
    (@x86_64 [$($export:meta)?] $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty, $sp:literal, $bp:literal, $jump:literal, sym $to:path) => {
        #[cfg(target_arch = "x86_64")]
        #[unsafe(naked)]
        $(#[$export])?
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            // SAFETY: copies two registers into argument registers the
            // function does not use and jumps: no memory is touched but the
            // jump's target, and the stack is left as the caller made it, so
            // the body sees the caller's arguments, the return address and
            // the alignment of a direct call.
            core::arch::naked_asm!(
                concat!("mov ", $sp, ", rsp"),
                concat!("mov ", $bp, ", rbp"),
                $jump,
                to = sym $to,
            )
        }
    };
}

/// Exports `$name($args)` as a stub that calls `$target` with the caller's
/// first three argument registers (saved around the call) and jumps to the
/// address it returns, the stack as the caller left it: the function
/// reached sees the caller's arguments and return address, as glibc's
/// `dlopen` and `dlsym` need (they act for the object that called them).
/// Where `$target` returns 0, the stub returns 0 (null) itself.
#[cfg(target_arch = "x86_64")]
macro_rules! target_stub {
    ($(#[$doc:meta])* $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty => $target:path) => {
        $(#[$doc])*
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            // SAFETY: saves and restores the argument registers around a
            // call of an `extern "C"` function, with the stack aligned as at
            // a call site (three pushes over the return address), then
            // jumps with the stack as the caller made it, so the target
            // sees the caller's arguments and return address.
            core::arch::naked_asm!(
                ".cfi_startproc",
                "push rdi",
                ".cfi_adjust_cfa_offset 8",
                "push rsi",
                ".cfi_adjust_cfa_offset 8",
                "push rdx",
                ".cfi_adjust_cfa_offset 8",
                "call {target}",
                "pop rdx",
                ".cfi_adjust_cfa_offset -8",
                "pop rsi",
                ".cfi_adjust_cfa_offset -8",
                "pop rdi",
                ".cfi_adjust_cfa_offset -8",
                "test rax, rax",
                "jz 2f",
                "jmp rax",
                "2:",
                "ret",
                ".cfi_endproc",
                target = sym $target,
            )
        }
    };
}

/// `name` as a C string, at compile time.
macro_rules! c_name {
    ($name:ident) => {
        match std::ffi::CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
            Ok(name) => name,
            Err(_) => panic!("an identifier holds no NUL"),
        }
    };
}

mod allocation;
mod allocator_stats;
#[cfg(target_arch = "x86_64")]
mod dlsym;
mod exec;
mod lifecycle;
#[cfg(target_arch = "x86_64")]
mod loader;
#[cfg(target_arch = "x86_64")]
mod mapping;
pub mod next_allocator;
#[cfg(target_arch = "x86_64")]
mod operator_new;
#[cfg(target_arch = "x86_64")]
pub mod python_objects;
mod sandbox;
mod trim;

use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::unwind::Entry;

/// Where the program called a hook, from the registers its entry stub
/// passed on (see [`entry_stub!`]).
fn entry(stack_pointer: u64, frame_pointer: u64) -> Entry {
    Entry { stack_pointer, frame_pointer }
}

/// The address of the next definition of `name` after ours (glibc's), or null.
/// (The tracer's own `dlsym` passes the lookup on to glibc's as made here.)
fn next_symbol(name: &CStr) -> *mut libc::c_void {
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name has no preconditions.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) }
}

/// The address of `name` in the scope of the object `handle` refers to, as
/// glibc's dlsym answers: the tracer's own lookups on a handle never get
/// one of its hooks back (see `dlsym`), 0 when there is none.
fn symbol_in_scope(handle: *mut libc::c_void, name: &CStr) -> usize {
    #[cfg(target_arch = "x86_64")]
    return dlsym::next_answer(handle, name);
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: a handle from dlopen and a NUL-terminated name.
    return unsafe { libc::dlsym(handle, name.as_ptr()) } as usize;
}

/// A function pointer of type `F` from a symbol address; `None` for null.
///
/// # Safety
/// `F` must be a function pointer type with the C signature of the function at `address`.
unsafe fn as_function<F: Copy>(address: usize) -> Option<F> {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<usize>()) };
    // SAFETY: F is a function pointer of the same size, as the caller guarantees.
    (address != 0).then(|| unsafe { std::mem::transmute_copy::<usize, F>(&address) })
}

/// The next definition of a function, looked up once, when first called
/// (for hooks called too often to look it up each time), or set where the
/// next definition lies outside the global scope.
pub struct NextSymbol {
    name: &'static CStr,
    /// 0 until looked up; then the address, or 1 when there is none.
    address: AtomicUsize,
}

const NOT_FOUND: usize = 1;

impl NextSymbol {
    pub const fn new(name: &'static CStr) -> NextSymbol {
        NextSymbol { name, address: AtomicUsize::new(0) }
    }

    pub fn name(&self) -> &'static CStr {
        self.name
    }

    /// Records the definition found in another scope; 0 for none.
    pub fn set(&self, address: usize) {
        self.address.store(address.max(NOT_FOUND), Ordering::Release);
    }

    /// The function, as `F`: the C signature of the function named.
    pub fn get<F: Copy>(&self) -> Option<F> {
        // SAFETY: every NextSymbol is read as the C signature of the function it names.
        unsafe { as_function(self.address()) }
    }

    /// The function's address, 0 when there is none.
    pub fn address(&self) -> usize {
        let mut address = self.address.load(Ordering::Acquire);
        if address == 0 {
            // Threads racing here all find the same address.
            address = (next_symbol(self.name) as usize).max(NOT_FOUND);
            self.address.store(address, Ordering::Release);
        }
        if address == NOT_FOUND {
            0
        } else {
            address
        }
    }
}
