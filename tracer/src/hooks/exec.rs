//! Exec: the trace is completed before the image is replaced, and resumed
//! if the exec fails. glibc's list forms (`execl`, `execlp`, `execle`)
//! build an argument vector and call `execve` inside glibc, where no hook
//! sees it: they are interposed too, and go through the vector forms here.

use std::ffi::{c_char, c_int, CStr};

use trace_format::EndReason;

use crate::session;

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
        let errno = crate::sys::errno();
        session::exec_failed();
        crate::sys::set_errno(errno);
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
    crate::sys::set_errno(libc::ENOSYS);
    -1
}

/// Defines a vector form: it completes the trace and calls the next
/// definition of the symbol (glibc's) with the caller's arguments.
macro_rules! vector_form {
    ($name:ident = $symbol:literal ($($arg:ident: $type:ty),*)) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $type),*) -> c_int {
            type Real = unsafe extern "C" fn($($type),*) -> c_int;
            match next_exec::<Real>($symbol) {
                // SAFETY: forwarding the caller's arguments unchanged.
                Some(real) => around_exec(|| unsafe { real($($arg),*) }),
                None => exec_unavailable(),
            }
        }
    };
}

vector_form!(execve = c"execve"(path: *const c_char, argv: Argv, envp: Argv));
vector_form!(execv = c"execv"(path: *const c_char, argv: Argv));
vector_form!(execvp = c"execvp"(file: *const c_char, argv: Argv));
vector_form!(execvpe = c"execvpe"(file: *const c_char, argv: Argv, envp: Argv));

/// The list forms, whose entry code is written for x86_64's calling convention.
#[cfg(target_arch = "x86_64")]
mod list_forms {
    use std::ffi::{c_char, c_int};

    use super::{execv, execve, execvp, Argv};

    /// Which vector form a list form calls.
    const LIST_EXECV: u32 = 0;
    const LIST_EXECVP: u32 = 1;
    const LIST_EXECVE: u32 = 2;

    /// Arguments of a list form past this many are gathered in a vector on the
    /// heap rather than on the stack.
    const ARGS_ON_STACK: usize = 1024;

    /// The list forms' arguments after the first, as the x86_64 calling
    /// convention leaves them: five in registers, which the entry code of each
    /// list form pushes in order at `registers`, then the rest on the stack at
    /// `stack`. The list ends with a null pointer; for `execle` the
    /// environment follows it.
    ///
    /// # Safety
    /// Called only by the entry code below, with the pointers it computes, for
    /// a caller that passed a null-terminated list as the list forms require.
    unsafe extern "C" fn exec_list(
        file: *const c_char,
        registers: *const *const c_char,
        stack: *const *const c_char,
        form: u32,
    ) -> c_int {
        // SAFETY: argument `i` of the list, read where the calling convention
        // put it; the caller's list reaches at least up to its null pointer
        // (and, for execle, the environment after it).
        let arg = |i: usize| unsafe {
            if i < 5 {
                *registers.add(i)
            } else {
                *stack.add(i - 5)
            }
        };
        let count = (0..).take_while(|&i| !arg(i).is_null()).count();
        let mut on_stack = [std::ptr::null::<c_char>(); ARGS_ON_STACK];
        let mut on_heap = Vec::new();
        let argv: &mut [*const c_char] = if count < ARGS_ON_STACK {
            &mut on_stack[..=count]
        } else {
            on_heap.resize(count + 1, std::ptr::null());
            &mut on_heap
        };
        argv.iter_mut().take(count).enumerate().for_each(|(i, slot)| *slot = arg(i));
        // SAFETY: the vector forms get the caller's file and arguments, now as
        // a null-terminated vector, and execle's environment.
        unsafe {
            match form {
                LIST_EXECVP => execvp(file, argv.as_ptr()),
                LIST_EXECVE => execve(file, argv.as_ptr(), arg(count + 1) as Argv),
                _ => execv(file, argv.as_ptr()),
            }
        }
    }

    /// Defines a list form: C-variadic, which Rust cannot define, so its entry
    /// is written in assembly. The five argument registers after the first are
    /// pushed (rsp is then 16-byte aligned for the call, as at any call site),
    /// so that they lie in order below the return address, above which the
    /// caller's stack arguments start; `exec_list` gets their addresses and
    /// which vector form to call, and its result is returned.
    macro_rules! list_form {
        ($(#[$doc:meta])* $name:ident, $form:expr) => {
            $(#[$doc])*
            #[unsafe(naked)]
            #[no_mangle]
            pub unsafe extern "C" fn $name() -> c_int {
                std::arch::naked_asm!(
                    "push r9",
                    "push r8",
                    "push rcx",
                    "push rdx",
                    "push rsi",
                    "mov rsi, rsp",
                    "lea rdx, [rsp + 48]",
                    "mov ecx, {form}",
                    "call {exec_list}",
                    "add rsp, 40",
                    "ret",
                    form = const $form,
                    exec_list = sym exec_list,
                )
            }
        };
    }

    list_form!(
        /// `execl(path, arg0, ..., NULL)`.
        execl,
        LIST_EXECV
    );
    list_form!(
        /// `execlp(file, arg0, ..., NULL)`.
        execlp,
        LIST_EXECVP
    );
    list_form!(
        /// `execle(path, arg0, ..., NULL, envp)`.
        execle,
        LIST_EXECVE
    );
}
