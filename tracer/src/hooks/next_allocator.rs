//! The allocator the program's calls go on to once recorded: glibc's,
//! called directly, unless another allocator (jemalloc, tcmalloc) was
//! preloaded after libtracer.so; then the next definition of each
//! function, as the program would reach it without the tracer. Sending
//! every call to glibc instead split the program's memory between two
//! allocators: the other one's C++ `delete` or `malloc_usable_size` met
//! glibc's blocks, and `import torch` aborted in `free()` with jemalloc.

use std::cell::Cell;
use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicU8, Ordering};

use super::{allocator_stats, NextSymbol};
use crate::real_alloc::*;
use crate::session::Allocators;
use crate::sys;

const UNKNOWN: u8 = 0;
const GLIBC: u8 = 1;
const OTHER: u8 = 2;

/// Whose functions come next: [`UNKNOWN`] until the process's first call.
static NEXT_IS: AtomicU8 = AtomicU8::new(UNKNOWN);

pub static MALLOC: NextSymbol = NextSymbol::new(c"malloc");
pub static FREE: NextSymbol = NextSymbol::new(c"free");
pub static CALLOC: NextSymbol = NextSymbol::new(c"calloc");
pub static REALLOC: NextSymbol = NextSymbol::new(c"realloc");
pub static POSIX_MEMALIGN: NextSymbol = NextSymbol::new(c"posix_memalign");
pub static ALIGNED_ALLOC: NextSymbol = NextSymbol::new(c"aligned_alloc");
pub static MEMALIGN: NextSymbol = NextSymbol::new(c"memalign");
pub static VALLOC: NextSymbol = NextSymbol::new(c"valloc");
pub static PVALLOC: NextSymbol = NextSymbol::new(c"pvalloc");

thread_local! {
    // Const-initialized without a destructor: static TLS, never allocates.
    static RESOLVING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `call` into an allocator with the thread marked inside the tracer,
/// as the tracer's own work is: the memory the allocator maps meanwhile
/// holds the program's blocks, recorded as such, and the mapping hooks
/// leave it alone, as they never see glibc's (mapped by internal calls).
/// Counted as mappings too, an allocator keeping memory for a thread made
/// that thread's call site look like a leak. Calls it makes to malloc and
/// free (C++ `new` in libstdc++) are not recorded again.
pub fn forwarded<R>(call: impl FnOnce() -> R) -> R {
    let mut call = Some(call);
    // Already inside (a signal handler's call, or one during fork): as is.
    let inside = crate::thread_state::inside(|_| call.take().map(|call| call())).flatten();
    match (inside, call) {
        (Some(result), _) => result,
        (None, Some(call)) => call(),
        (None, None) => unreachable!("a call taken is a call made"),
    }
}

fn other_allocator() -> bool {
    match NEXT_IS.load(Ordering::Acquire) {
        GLIBC => false,
        OTHER => true,
        _ => resolve(),
    }
}

/// The load address of the allocator the program's malloc goes on to,
/// when that is not glibc's (one that also defines `__libc_malloc`, as
/// tcmalloc does, is called directly all the same).
pub fn other_allocator_object() -> Option<usize> {
    let next = MALLOC.address();
    let object = object_of(next);
    (next != 0 && object != object_of(libc::gnu_get_libc_version as *const () as usize)).then_some(object)
}

/// Looks every function up, on the first call of each thread that gets
/// here before the answer is known (they all find the same functions).
#[cold]
fn resolve() -> bool {
    // dlsym allocates only to keep the message of a failed lookup, and
    // glibc defines every name looked up here: were it to allocate all the
    // same, its calls would reach glibc rather than loop back here.
    if RESOLVING.try_with(|resolving| resolving.replace(true)).unwrap_or(true) {
        return false;
    }
    let next_malloc = MALLOC.address();
    // Where the next malloc is the one `__libc_malloc` names (glibc's, or an
    // allocator that defines both), the direct calls reach it already.
    let other = next_malloc != 0 && next_malloc != __libc_malloc as *const () as usize;
    if other {
        for symbol in [&FREE, &CALLOC, &REALLOC, &POSIX_MEMALIGN, &ALIGNED_ALLOC, &MEMALIGN, &VALLOC, &PVALLOC] {
            symbol.address();
        }
    }
    NEXT_IS.store(if other { OTHER } else { GLIBC }, Ordering::Release);
    let _ = RESOLVING.try_with(|resolving| resolving.set(false));
    other
}

/// What the tracer's place among the program's allocators means for the
/// trace: an allocator of the program's own, or another one ahead of the
/// tracer, keeps the heap from it (a warning); one after it is named, with
/// the reader of its statistics when the tracer knows them, or else a
/// warning that `malloc free` is glibc's count.
pub fn allocators() -> Allocators {
    // Not `malloc`'s own address, which the program's malloc would stand for.
    let tracer = object_of(allocators as *const () as usize);
    // SAFETY: getauxval reads the auxiliary vector the kernel gave the process.
    let program = object_of(unsafe { libc::getauxval(libc::AT_ENTRY) } as usize);
    let first = first_malloc(program);
    let warning = |text: String| Allocators { warnings: vec![text], ..Allocators::default() };
    if first != 0 && object_of(first) == program {
        return warning(format!(
            "the program defines malloc itself: its {} (its mappings do)",
            trace_format::HEAP_NOT_TRACED
        ));
    }
    if first != 0 && object_of(first) != tracer {
        return warning(format!(
            "malloc is {}'s, loaded before libtracer.so: the program's {} (its mappings do); \
             list libtracer.so first in LD_PRELOAD",
            file_defining(first),
            trace_format::HEAP_NOT_TRACED
        ));
    }
    let Some(object) = other_allocator_object() else { return Allocators::default() };
    let file = file_defining(object);
    match allocator_stats::known(object) {
        Some(known) => Allocators {
            other: Some(format!("{} ({file})", known.name)),
            free_bytes: Some(known.free_bytes),
            ..Allocators::default()
        },
        None => Allocators {
            other: Some(file.clone()),
            ..warning(format!(
                "the program's allocator is {file}'s, preloaded after libtracer.so: its blocks are recorded \
                 (C++ new and delete too), but `malloc free` counts glibc's arenas only (what it keeps \
                 shows as growth outside the heap)"
            ))
        },
    }
}

/// The malloc the program's calls reach: the first definition in the
/// lookup order, which dlsym finds, unless the program (at load address
/// `program`) only refers to malloc and takes its address. A program built
/// without PIE that does, as Debian's python3 is, holds an undefined entry
/// for malloc whose value is its PLT stub, which dlsym hands out so that
/// the function's address compares equal everywhere; its calls go on to
/// the first library that defines malloc.
fn first_malloc(program: usize) -> usize {
    let first = sys::global_symbol(c"malloc").unwrap_or(0);
    if first == 0 || object_of(first) != program || defines_symbol_at(first) {
        return first;
    }
    first_library_defining_malloc()
}

/// The section index of an undefined symbol.
const SHN_UNDEF: u16 = 0;

/// Whether the symbol dladdr finds at `address` is defined there (not an
/// undefined entry whose value is a PLT stub).
fn defines_symbol_at(address: usize) -> bool {
    sys::symbol_entry(address).is_some_and(|(_, entry)| entry.st_shndx != SHN_UNDEF)
}

/// The first loaded library, in load order (the lookup order of the
/// libraries loaded at start, preloads first), that defines malloc itself;
/// 0 when none is found.
fn first_library_defining_malloc() -> usize {
    // Named first, looked into after: the callback runs under a loader lock
    // that dlopen and dladdr, taking another one first, must not meet.
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _: usize, names: *mut c_void) -> c_int {
        // SAFETY: dl_iterate_phdr passes a valid entry and the `names` given below.
        let (info, names) = unsafe { (&*info, &mut *names.cast::<Vec<*const libc::c_char>>()) };
        names.push(info.dlpi_name);
        0
    }
    let mut names: Vec<*const libc::c_char> = Vec::new();
    // SAFETY: `each` matches the callback's contract and only pushes onto `names`.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut names as *mut Vec<*const libc::c_char>).cast()) };
    names.into_iter().find_map(malloc_defined_by).unwrap_or(0)
}

/// The malloc the loaded object named `name` defines itself, if it does.
fn malloc_defined_by(name: *const libc::c_char) -> Option<usize> {
    if name.is_null() {
        return None;
    }
    // SAFETY: a loaded object's name is a NUL-terminated string the loader
    // keeps while the object is loaded (objects loaded at start stay).
    let name = unsafe { CStr::from_ptr(name) };
    if name.is_empty() {
        return None; // the program
    }
    // SAFETY: RTLD_NOLOAD only looks an already loaded object up (the vdso,
    // which cannot be opened, gives null); the handle is closed below.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return None;
    }
    // glibc's answer: the tracer's `dlsym` would give glibc's malloc as the tracer's.
    let address = super::symbol_in_scope(handle, c"malloc");
    // SAFETY: closes the reference dlopen took above.
    unsafe { libc::dlclose(handle) };
    // dlsym on a handle also searches its dependencies: the object itself must hold it.
    let own = sys::loaded_file_name(address) == Some(name);
    (address != 0 && own && defines_symbol_at(address)).then_some(address)
}

/// The load address of the object holding `address` (0 when none does).
pub fn object_of(address: usize) -> usize {
    sys::loaded_object(address).map_or(0, |info| info.dli_fbase as usize)
}

fn file_defining(address: usize) -> String {
    match sys::loaded_file_name(address) {
        Some(name) => name.to_string_lossy().into(),
        None => format!("the library at {address:#x}"),
    }
}

/// Calls the next definition of the function `symbol` names, as `$ty`, or
/// else glibc's `$glibc`, with `$args`.
macro_rules! forward {
    ($symbol:ident as $ty:ty, $glibc:expr, ($($arg:expr),*)) => {{
        if NEXT_IS.load(Ordering::Acquire) == GLIBC {
            // SAFETY: the caller's request, unchanged, to glibc's allocator,
            // which the program would call without the tracer.
            crate::thread_state::in_allocator(|| unsafe { $glibc($($arg),*) })
        } else {
            // SAFETY: as above, to the function the program would call.
            through_next(&$symbol, |next: $ty| unsafe { next($($arg),*) }, || unsafe { $glibc($($arg),*) })
        }
    }};
}

/// A call where glibc's allocator is not known to come next, out of line:
/// the process's first, or each call in one whose allocator is another.
#[cold]
#[inline(never)]
fn through_next<F: Copy, R>(symbol: &NextSymbol, next: impl FnOnce(F) -> R, glibc: impl FnOnce() -> R) -> R {
    match other_allocator().then(|| symbol.get::<F>()).flatten() {
        Some(function) => forwarded(|| next(function)),
        None => glibc(),
    }
}

type Size = unsafe extern "C" fn(usize) -> *mut c_void;
type Pair = unsafe extern "C" fn(usize, usize) -> *mut c_void;

pub fn malloc(size: usize) -> *mut c_void {
    forward!(MALLOC as Size, __libc_malloc, (size))
}

/// # Safety
/// `ptr` is null or a live block of the program's allocator.
pub unsafe fn free(ptr: *mut c_void) {
    forward!(FREE as unsafe extern "C" fn(*mut c_void), __libc_free, (ptr))
}

pub fn calloc(count: usize, size: usize) -> *mut c_void {
    forward!(CALLOC as Pair, __libc_calloc, (count, size))
}

/// # Safety
/// `ptr` is a live block of the program's allocator.
pub unsafe fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    forward!(REALLOC as unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void, __libc_realloc, (ptr, size))
}

/// # Safety
/// `out` is writable.
pub unsafe fn posix_memalign(out: *mut *mut c_void, alignment: usize, size: usize) -> c_int {
    forward!(
        POSIX_MEMALIGN as unsafe extern "C" fn(*mut *mut c_void, usize, usize) -> c_int,
        glibc_posix_memalign,
        (out, alignment, size)
    )
}

pub fn aligned_alloc(alignment: usize, size: usize) -> *mut c_void {
    forward!(ALIGNED_ALLOC as Pair, __libc_memalign, (alignment, size))
}

pub fn memalign(alignment: usize, size: usize) -> *mut c_void {
    forward!(MEMALIGN as Pair, __libc_memalign, (alignment, size))
}

pub fn valloc(size: usize) -> *mut c_void {
    forward!(VALLOC as Size, __libc_valloc, (size))
}

pub fn pvalloc(size: usize) -> *mut c_void {
    forward!(PVALLOC as Size, __libc_pvalloc, (size))
}

/// glibc's posix_memalign, from the memalign it exports for interposers.
unsafe extern "C" fn glibc_posix_memalign(out: *mut *mut c_void, alignment: usize, size: usize) -> c_int {
    if !alignment.is_power_of_two() || !alignment.is_multiple_of(std::mem::size_of::<*mut c_void>()) {
        return libc::EINVAL;
    }
    // SAFETY: the alignment was checked as posix_memalign requires.
    let ptr = unsafe { __libc_memalign(alignment, size) };
    if ptr.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: the caller passes a writable location for the result.
    unsafe { *out = ptr };
    0
}
