//! Start, fork, exec and exit: the moments a trace file must be opened,
//! handed over or completed, and the exported `tracer_mark`.

use std::ffi::{c_char, c_int, CStr};

use trace_format::EndReason;

use crate::{session, sys};

/// Runs when the library is loaded, before the program's `main`.
extern "C" fn on_load() {
    session::start();
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

type Argv = *const *const c_char;

/// Completes the trace before the image is replaced, and resumes it if the
/// exec fails. A `vfork` child shares its parent's memory and is left alone.
fn around_exec(exec: impl FnOnce() -> c_int) -> c_int {
    let owned = session::owns_process();
    if owned {
        session::finish(EndReason::Exec);
    }
    let result = exec();
    if owned {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        session::exec_failed();
        // SAFETY: restoring this thread's errno slot for the caller.
        unsafe { *libc::__errno_location() = errno };
    }
    result
}

/// The next definition of an exec function after ours, resolved at call time
/// (exec is rare; dlsym is not called from an allocation hook).
fn next_exec<F: Copy>(name: &CStr) -> Option<F> {
    // SAFETY: F is always the C signature of the glibc function named `name`.
    unsafe { super::as_function(super::next_symbol(name) as usize) }
}

fn exec_unavailable() -> c_int {
    // SAFETY: setting this thread's errno slot.
    unsafe { *libc::__errno_location() = libc::ENOSYS };
    -1
}

#[no_mangle]
pub unsafe extern "C" fn execve(path: *const c_char, argv: Argv, envp: Argv) -> c_int {
    type Execve = unsafe extern "C" fn(*const c_char, Argv, Argv) -> c_int;
    match next_exec::<Execve>(c"execve") {
        // SAFETY: forwarding the caller's arguments unchanged.
        Some(real) => around_exec(|| unsafe { real(path, argv, envp) }),
        None => exec_unavailable(),
    }
}

#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: Argv) -> c_int {
    type Execv = unsafe extern "C" fn(*const c_char, Argv) -> c_int;
    match next_exec::<Execv>(c"execv") {
        // SAFETY: forwarding the caller's arguments unchanged.
        Some(real) => around_exec(|| unsafe { real(path, argv) }),
        None => exec_unavailable(),
    }
}

#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: Argv) -> c_int {
    type Execvp = unsafe extern "C" fn(*const c_char, Argv) -> c_int;
    match next_exec::<Execvp>(c"execvp") {
        // SAFETY: forwarding the caller's arguments unchanged.
        Some(real) => around_exec(|| unsafe { real(file, argv) }),
        None => exec_unavailable(),
    }
}

#[no_mangle]
pub unsafe extern "C" fn execvpe(file: *const c_char, argv: Argv, envp: Argv) -> c_int {
    type Execvpe = unsafe extern "C" fn(*const c_char, Argv, Argv) -> c_int;
    match next_exec::<Execvpe>(c"execvpe") {
        // SAFETY: forwarding the caller's arguments unchanged.
        Some(real) => around_exec(|| unsafe { real(file, argv, envp) }),
        None => exec_unavailable(),
    }
}
