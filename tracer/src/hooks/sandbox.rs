//! `prctl`, for the one call after which the tracer cannot run: seccomp's
//! strict mode leaves the thread `read`, `write`, `exit` and `sigreturn`,
//! and takes away the time-stamp counter that the clock reads (the kernel
//! then kills the process at the tracer's next clock read or system call).

use std::ffi::{c_int, c_ulong};

use super::NextSymbol;
use crate::session;

static NEXT_PRCTL: NextSymbol = NextSymbol::new(c"prctl");

/// glibc declares `prctl(int, ...)` and reads four more words whatever the
/// option; x86_64 and aarch64 pass them in registers, so taking them as
/// fixed arguments reads what glibc would (words the caller did not set
/// are passed on unread by the kernel, as glibc passes them).
#[no_mangle]
pub extern "C" fn prctl(option: c_int, arg2: c_ulong, arg3: c_ulong, arg4: c_ulong, arg5: c_ulong) -> c_int {
    if option == libc::PR_SET_SECCOMP && arg2 == c_ulong::from(libc::SECCOMP_MODE_STRICT) {
        session::stop_before_strict_mode();
    }
    match NEXT_PRCTL.get::<unsafe extern "C" fn(c_int, ...) -> c_int>() {
        // SAFETY: glibc's prctl (the next definition), with the caller's words.
        Some(next) => unsafe { next(option, arg2, arg3, arg4, arg5) },
        // SAFETY: the prctl system call with the caller's words, which is what glibc's makes.
        None => unsafe { libc::syscall(libc::SYS_prctl, option as libc::c_long, arg2, arg3, arg4, arg5) as c_int },
    }
}
