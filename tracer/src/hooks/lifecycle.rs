//! Start, fork and exit: the moments a trace file must be opened, handed
//! over or completed, and the exported `tracer_mark`. Exec is in `exec`.

use std::ffi::{c_char, c_int, CStr};

use trace_format::EndReason;

use super::NextSymbol;
use crate::{session, sys};

/// Runs when the library is loaded, before the program's `main`.
extern "C" fn on_load() {
    session::start(super::next_allocator::allocators());
    #[cfg(target_arch = "x86_64")]
    if session::traces_python_objects() {
        super::python_objects::install();
    }
    // SAFETY: registering plain functions that stay valid for the process's life.
    unsafe { libc::pthread_atfork(Some(before_fork), Some(after_fork_in_parent), Some(after_fork_in_child)) };
}

/// Runs after `main` returns or `exit` is called, after the program's exit handlers.
extern "C" fn on_unload() {
    session::finish(EndReason::Exit);
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;

#[used]
#[link_section = ".fini_array"]
static ON_UNLOAD: extern "C" fn() = on_unload;

extern "C" fn before_fork() {
    session::before_fork();
}

extern "C" fn after_fork_in_parent() {
    session::after_fork_in_parent();
}

extern "C" fn after_fork_in_child() {
    crate::loaded_objects::note_fork_in_child();
    session::after_fork_in_child();
}

/// Closes the current epoch and starts the next. `label` may be null.
#[no_mangle]
pub unsafe extern "C" fn tracer_mark(label: *const c_char) {
    let label = (!label.is_null()).then(|| {
        // SAFETY: a non-null label is a NUL-terminated string, as documented.
        unsafe { CStr::from_ptr(label) }.to_string_lossy().into_owned()
    });
    session::mark(label);
}

/// `_exit` skips exit handlers (Python's multiprocessing workers end this
/// way), so the trace is completed here.
#[no_mangle]
pub extern "C" fn _exit(status: c_int) -> ! {
    session::finish(EndReason::ImmediateExit);
    sys::exit_group(status)
}

#[no_mangle]
pub extern "C" fn _Exit(status: c_int) -> ! {
    _exit(status)
}

static NEXT_KILL: NextSymbol = NextSymbol::new(c"kill");
static NEXT_RAISE: NextSymbol = NextSymbol::new(c"raise");

/// A process that sends itself a signal that ends it never reaches `exit`:
/// CPython, after an unhandled KeyboardInterrupt (Ctrl-C), finalizes and
/// then sends itself SIGINT with its default action, so that the shell
/// sees it die of it. The trace is completed first.
#[no_mangle]
pub extern "C" fn kill(pid: libc::pid_t, signal: c_int) -> c_int {
    if u32::try_from(pid).is_ok_and(|pid| pid == sys::pid()) && sys::signal_ends_process(signal) {
        session::finish(EndReason::ImmediateExit);
    }
    match NEXT_KILL.get::<unsafe extern "C" fn(libc::pid_t, c_int) -> c_int>() {
        // SAFETY: glibc's kill (the next definition), with the caller's arguments.
        Some(next) => unsafe { next(pid, signal) },
        // SAFETY: the kill system call with the caller's arguments.
        None => unsafe { libc::syscall(libc::SYS_kill, pid as libc::c_long, signal as libc::c_long) as c_int },
    }
}

/// `raise`, the C standard's way to send oneself a signal (glibc sends it
/// with `tgkill`, not through `kill`): as [`kill`] of the process itself.
#[no_mangle]
pub extern "C" fn raise(signal: c_int) -> c_int {
    if sys::signal_ends_process(signal) {
        session::finish(EndReason::ImmediateExit);
    }
    match NEXT_RAISE.get::<unsafe extern "C" fn(c_int) -> c_int>() {
        // SAFETY: glibc's raise (the next definition), with the caller's signal.
        Some(next) => unsafe { next(signal) },
        // SAFETY: tgkill to the calling thread, which is what raise does.
        None => unsafe {
            libc::syscall(
                libc::SYS_tgkill,
                sys::pid() as libc::c_long,
                libc::gettid() as libc::c_long,
                signal as libc::c_long,
            ) as c_int
        },
    }
}
