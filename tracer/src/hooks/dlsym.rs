//! `dlsym`. A lookup on a handle searches that object's own scope:
//! `dlsym(dlopen("libc.so.6"), "malloc")`, or Python's
//! `ctypes.CDLL(ctypes.util.find_library("c")).malloc`, is glibc's malloc,
//! not the tracer's, and the blocks it hands out were never recorded;
//! worse, a block of the tracer's malloc given back to such a `free` stayed
//! in the live table for good. So a lookup on a handle of a name the tracer
//! interposes whose answer is the very definition its hook passes calls on
//! to (the next one after the tracer's) is answered with the hook. Any
//! other answer (another allocator's own malloc, in a library the program
//! loaded) is passed on unchanged.
//!
//! glibc resolves `RTLD_NEXT` and `RTLD_DEFAULT` for the object that called
//! dlsym, which it finds from the return address: lookups with those go on
//! to glibc's dlsym from the entry stub, with the caller's return address
//! in place (see [`target_stub!`]). The tracer's own calls to `dlsym` reach
//! the stub too, and stay the tracer's; its lookups on a handle take
//! glibc's answer, from [`next_answer`].
//!
//! The next `dlsym` is found with `dlvsym`, which the tracer leaves alone
//! for that: a `dlsym` of its own could not ask itself. A program's
//! `dlvsym` on libc's handle (rare: ctypes and C programs use `dlsym`)
//! still gets glibc's functions.

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{allocation, mapping, next_allocator as next, operator_new as op, trim, NextSymbol};
use crate::thread_state;

type Dlsym = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

target_stub!(dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void => dlsym_target);

/// `RTLD_DEFAULT` (0) and `RTLD_NEXT` (-1), which glibc resolves for the caller.
fn for_the_caller(handle: *mut c_void) -> bool {
    handle.is_null() || handle == libc::RTLD_NEXT
}

/// Where `dlsym` goes: the next dlsym for the caller's scopes, else the
/// body that may answer with a hook.
extern "C" fn dlsym_target(handle: *mut c_void) -> usize {
    if for_the_caller(handle) {
        next_dlsym_address()
    } else {
        dlsym_on_handle as *const () as usize
    }
}

unsafe extern "C" fn dlsym_on_handle(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    let Some(next) = next_dlsym() else { return std::ptr::null_mut() };
    // SAFETY: the caller's arguments, unchanged, to the dlsym it reaches untraced.
    let found = unsafe { next(handle, name) };
    // SAFETY: `name` is the one dlsym just took, as the caller passed it.
    unsafe { answer(name, found) }
}

/// glibc's answer for `name` in the scope of `handle` (for the tracer's own
/// lookups), 0 when there is none.
pub fn next_answer(handle: *mut c_void, name: &CStr) -> usize {
    match next_dlsym() {
        // SAFETY: a handle the caller got from dlopen and a NUL-terminated name.
        Some(next) => unsafe { next(handle, name.as_ptr()) as usize },
        None => 0,
    }
}

fn next_dlsym() -> Option<Dlsym> {
    // SAFETY: the address is a dlsym (0 gives None), whose C signature Dlsym spells.
    unsafe { super::as_function::<Dlsym>(next_dlsym_address()) }
}

/// The hook for `name` when `found` is the next definition of a name the
/// tracer interposes, else `found`.
///
/// # Safety
/// `name` is a NUL-terminated string wherever `found` is not null (dlsym
/// found something under it).
unsafe fn answer(name: *const c_char, found: *mut c_void) -> *mut c_void {
    if found.is_null() {
        return found;
    }
    // SAFETY: dlsym found a symbol under `name`, a NUL-terminated string, as the caller guarantees.
    let name = unsafe { CStr::from_ptr(name) };
    match hooked(name.to_bytes()) {
        Some((hook, next)) if next_address(next) == found as usize => hook as *mut c_void,
        _ => found,
    }
}

/// The definition after the tracer's, looked up once. The allocations of
/// a lookup that fails (the message dlerror would give) are not the
/// program's: they go unrecorded, and the message is taken, so the
/// program's next `dlerror` still says its own lookup succeeded.
fn next_address(next: &NextSymbol) -> usize {
    thread_state::quietly(|| {
        let address = next.address();
        if address == 0 {
            // SAFETY: dlerror has no preconditions; it only reads and
            // clears this thread's last error.
            unsafe { libc::dlerror() };
        }
        address
    })
}

/// The hook the tracer exports as `name`, with the definition after it
/// that the lookup is compared with, if the tracer interposes `name`: the
/// hook's own next definition (an operator's, as its first call resolved
/// it), or for `reallocarray` and `mmap64`, whose hooks pass their calls on
/// to `realloc` and `mmap`, the next definition of their own name.
fn hooked(name: &[u8]) -> Option<(usize, &'static NextSymbol)> {
    static REALLOCARRAY: NextSymbol = NextSymbol::new(c"reallocarray");
    static MMAP64: NextSymbol = NextSymbol::new(c"mmap64");
    let functions: [(usize, &'static NextSymbol); 15] = [
        (allocation::malloc as *const () as usize, &next::MALLOC),
        (allocation::free as *const () as usize, &next::FREE),
        (allocation::calloc as *const () as usize, &next::CALLOC),
        (allocation::realloc as *const () as usize, &next::REALLOC),
        (allocation::reallocarray as *const () as usize, &REALLOCARRAY),
        (allocation::posix_memalign as *const () as usize, &next::POSIX_MEMALIGN),
        (allocation::aligned_alloc as *const () as usize, &next::ALIGNED_ALLOC),
        (allocation::memalign as *const () as usize, &next::MEMALIGN),
        (allocation::valloc as *const () as usize, &next::VALLOC),
        (allocation::pvalloc as *const () as usize, &next::PVALLOC),
        (mapping::mmap as *const () as usize, &mapping::REAL_MMAP),
        (mapping::mmap64 as *const () as usize, &MMAP64),
        (mapping::munmap as *const () as usize, &mapping::REAL_MUNMAP),
        (mapping::mremap as *const () as usize, &mapping::REAL_MREMAP),
        (trim::malloc_trim as *const () as usize, &trim::NEXT_MALLOC_TRIM),
    ];
    let operators = op::OPERATORS.iter().map(|operator| (operator.stub(), operator.next()));
    functions.into_iter().chain(operators).find(|(_, next)| next.name().to_bytes() == name)
}

/// The dlsym after the tracer's; 0 until looked up, or where none was found.
static NEXT_DLSYM: AtomicUsize = AtomicUsize::new(0);

fn next_dlsym_address() -> usize {
    match NEXT_DLSYM.load(Ordering::Acquire) {
        0 => resolve(),
        address => address,
    }
}

/// Asks glibc's `dlvsym` for the next `dlsym` after the tracer's (the
/// caller, for `RTLD_NEXT`, is this function): glibc's, in libc since 2.34
/// and in libdl before. Threads racing here find the same one. A lookup
/// that fails allocates its message, which is not the program's: it goes
/// unrecorded, and is taken, so that the program's `dlerror` says nothing
/// of it.
#[cold]
#[inline(never)]
fn resolve() -> usize {
    let found = thread_state::quietly(|| {
        let mut found = 0;
        for version in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
            // SAFETY: RTLD_NEXT and NUL-terminated strings; the tracer
            // defines no dlvsym, so this is glibc's.
            found = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) } as usize;
            if found != 0 {
                break;
            }
            // SAFETY: dlerror has no preconditions; it only reads and
            // clears this thread's last error.
            unsafe { libc::dlerror() };
        }
        found
    });
    NEXT_DLSYM.store(found, Ordering::Release);
    found
}
