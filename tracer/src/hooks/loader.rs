//! `dlopen` and `dlclose`: the fast unwinder reads the loaded objects' unwind
//! tables in place, so it must learn of every change to the set of objects,
//! and must never read an object's memory once `dlclose` has unmapped it.
//! The module map lists the objects loaded before each `dlclose`, so that
//! the trace names the ones it unloads.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::unwind::{self, module_set};
use crate::{gate, session, thread_state};

target_stub!(
    /// `dlopen` looks at its return address to find the calling object (whose
    /// RUNPATH and namespace apply), so this hook must not be a frame of its
    /// own: it notes the change and jumps to glibc's `dlopen` with the caller's
    /// return address still on the stack. Objects it loads are picked up by the
    /// next capture that meets their code.
    dlopen(file: *const c_char, mode: c_int) -> *mut c_void => before_dlopen
);

static REAL_DLOPEN: AtomicUsize = AtomicUsize::new(0);
static REAL_DLCLOSE: AtomicUsize = AtomicUsize::new(0);

/// Resolves the next definition of `name` once; 0 if there is none.
fn next_symbol(cell: &AtomicUsize, name: &std::ffi::CStr) -> usize {
    let mut symbol = cell.load(Ordering::Acquire);
    if symbol == 0 {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name has no
        // preconditions; its own allocations go through the hooks as usual.
        symbol = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
        cell.store(symbol, Ordering::Release);
    }
    symbol
}

/// Called from `dlopen` with its arguments saved: returns glibc's `dlopen`
/// (null if there is none, and then `dlopen` returns null).
extern "C" fn before_dlopen() -> usize {
    module_set::objects_changing();
    next_symbol(&REAL_DLOPEN, c"dlopen")
}

#[no_mangle]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    type Dlclose = unsafe extern "C" fn(*mut c_void) -> c_int;
    let real = next_symbol(&REAL_DLCLOSE, c"dlclose");
    if real == 0 {
        return -1;
    }
    // SAFETY: `real` is glibc's dlclose, whose C signature Dlclose spells.
    let real: Dlclose = unsafe { std::mem::transmute::<usize, Dlclose>(real) };
    // Listed before they may go, and the stacks through them written: a
    // library loaded and unloaded within an epoch still names the stacks
    // that ran through it, and one loaded later at its addresses does not.
    session::objects_unloading(|| closing_object(handle));
    let waited = thread_state::inside(|ordinal| {
        // Inside the gate, so that fork never copies a half-done wait.
        let _pass = gate::pass(ordinal);
        module_set::closing(true);
    });
    if waited.is_none() {
        // Nested in the tracer's own work, or forking: no waiting here.
        module_set::closing(false);
    }
    let unloading = crate::loaded_objects::Unloading::begin(waited.is_some());
    // SAFETY: forwarding the caller's handle unchanged.
    let result = unsafe { real(handle) };
    drop(unloading);
    module_set::closed();
    result
}

/// The start of glibc's `struct link_map`, as `<link.h>` declares it.
#[repr(C)]
struct LinkMapHead {
    load_bias: usize,
    name: *const c_char,
}

/// The load bias and name of the object `handle` names, which `dlclose`
/// is about to close, the name as the loader gives it (the module map
/// knows each object by it).
fn closing_object(handle: *mut c_void) -> Option<(u64, String)> {
    if handle.is_null() {
        return None;
    }
    let mut link_map: *const LinkMapHead = std::ptr::null();
    // SAFETY: `handle` is the caller's, about to be passed to dlclose, which
    // needs a handle dlopen returned; RTLD_DI_LINKMAP stores one pointer
    // into `link_map`.
    let found =
        unsafe { libc::dlinfo(handle, libc::RTLD_DI_LINKMAP, (&mut link_map as *mut *const LinkMapHead).cast()) };
    if found != 0 || link_map.is_null() {
        return None;
    }
    // SAFETY: the link map of an open object stays valid until dlclose
    // unloads it, after this returns; `l_name` is a NUL-terminated string
    // the loader owns, or null.
    let (load_bias, name) = unsafe { ((*link_map).load_bias, (*link_map).name) };
    // SAFETY: as above.
    let name =
        if name.is_null() { String::new() } else { unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned() };
    Some((load_bias as u64, name))
}

/// Runs at exit: the `TRACER_UNWIND_CHECK` summary.
extern "C" fn on_unload() {
    unwind::report_check();
}

#[used]
#[link_section = ".fini_array"]
static ON_UNLOAD: extern "C" fn() = on_unload;
