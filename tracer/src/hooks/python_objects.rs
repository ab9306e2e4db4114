//! Python's object allocator (`TRACER_PYTHON_OBJECTS=1`): hooks set with
//! `PyMem_SetAllocator` on its two pymalloc domains, `PyMem_Malloc` (list
//! arrays, buffers) and `PyObject_Malloc` (objects), each forwarding to the
//! allocator it replaced and letting the session record the block.
//!
//! Without them pymalloc serves blocks of 512 bytes or less from arenas it
//! maps itself, and only the arenas are seen, each charged to whichever
//! line needed a new one. The hooks are set as the library loads, before
//! the interpreter starts, which is when Python allows it; Python does not
//! reset them unless `PYTHONMALLOC` or its development mode asks for
//! another allocator (then the session does not ask for them).
//!
//! pymalloc serves requests of 1 to 512 bytes itself and hands the others
//! to malloc, whose hooks record them as any other block: the hooks here
//! record only the small ones, and its arenas are mapped quietly (see
//! [`thread_state::quietly`]), through a hook on its arena allocator, as
//! the blocks in them are recorded one by one. The small blocks' path takes
//! no thread-local look but the sampling's.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void, CStr};
use std::mem::MaybeUninit;

use super::entry;
use crate::{session, sys, thread_state};

/// `PyMemAllocatorEx`, unchanged since Python 3.5.
#[repr(C)]
#[derive(Clone, Copy)]
struct Allocator {
    ctx: *mut c_void,
    malloc: unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void,
    calloc: unsafe extern "C" fn(*mut c_void, usize, usize) -> *mut c_void,
    realloc: unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> *mut c_void,
    free: unsafe extern "C" fn(*mut c_void, *mut c_void),
}

/// `PyObjectArenaAllocator`, unchanged since Python 3.4.
#[repr(C)]
#[derive(Clone, Copy)]
struct ArenaAllocator {
    ctx: *mut c_void,
    alloc: unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void,
    free: unsafe extern "C" fn(*mut c_void, *mut c_void, usize),
}

/// `PyMemAllocatorDomain`: `PYMEM_DOMAIN_MEM` and `PYMEM_DOMAIN_OBJ`.
const DOMAINS: [c_int; 2] = [1, 2];

/// pymalloc's `SMALL_REQUEST_THRESHOLD` (3.4 to 3.13): larger requests go to malloc.
const LARGEST_SMALL_REQUEST: usize = 512;

/// What a hook replaced, written once, by `install`, before the hook that
/// reads it is set.
struct Replaced<T>(UnsafeCell<MaybeUninit<T>>);

// SAFETY: written once, before the hook that reads it is set (and so before
// any thread can call that hook), and only read after.
unsafe impl<T> Sync for Replaced<T> {}

impl<T> Replaced<T> {
    const fn new() -> Self {
        Replaced(UnsafeCell::new(MaybeUninit::uninit()))
    }

    fn as_ptr(&self) -> *mut T {
        self.0.get().cast()
    }
}

/// The allocator each domain had before the hooks; the hooks' context
/// points to its domain's.
static REPLACED: [Replaced<Allocator>; 2] = [const { Replaced::new() }; 2];
static REPLACED_ARENAS: Replaced<ArenaAllocator> = Replaced::new();

type GetOrSetAllocator = unsafe extern "C" fn(c_int, *mut Allocator);
type GetOrSetArenaAllocator = unsafe extern "C" fn(*mut ArenaAllocator);

/// Sets the hooks on both domains and on the arena allocator; says on
/// stderr, once, when the interpreter lacks the functions to set them.
pub fn install() {
    thread_state::quietly(|| {
        // SAFETY: these functions have these C signatures in every Python 3.
        let found = unsafe {
            (
                function::<GetOrSetAllocator>(c"PyMem_GetAllocator"),
                function::<GetOrSetAllocator>(c"PyMem_SetAllocator"),
                function::<GetOrSetArenaAllocator>(c"PyObject_GetArenaAllocator"),
                function::<GetOrSetArenaAllocator>(c"PyObject_SetArenaAllocator"),
            )
        };
        let (Some(get), Some(set), Some(get_arenas), Some(set_arenas)) = found else {
            sys::print_stderr(
                "tracer: this Python cannot have its allocator hooked; its small objects are not traced\n",
            );
            return;
        };
        // SAFETY: each Get fills the struct it is given and each Set copies
        // it; what a hook's context points to is written here, before the
        // hook is set. The arena hook goes first: the objects' hooks rely
        // on it to keep arenas out of the mappings.
        unsafe {
            get_arenas(REPLACED_ARENAS.as_ptr());
            let mut arena_hooks =
                ArenaAllocator { ctx: REPLACED_ARENAS.as_ptr().cast(), alloc: arena_alloc, free: arena_free };
            set_arenas(&mut arena_hooks);
            for (domain, replaced) in DOMAINS.into_iter().zip(&REPLACED) {
                get(domain, replaced.as_ptr());
                let mut hooks = Allocator {
                    ctx: replaced.as_ptr().cast(),
                    malloc: object_malloc,
                    calloc: object_calloc,
                    realloc: object_realloc,
                    free: object_free,
                };
                set(domain, &mut hooks);
            }
        }
    });
}

/// # Safety
/// `F` must be the C signature of the function `name` names.
unsafe fn function<F: Copy>(name: &CStr) -> Option<F> {
    // SAFETY: F is the function's signature, as the caller guarantees.
    unsafe { super::as_function(sys::global_symbol(name)?) }
}

/// The allocator (an [`Allocator`] or [`ArenaAllocator`]) a hook's context
/// stands for.
///
/// # Safety
/// `ctx` must be the context `install` gave the hook, and `T` the type of
/// what it replaced.
unsafe fn replaced<T: Copy>(ctx: *mut c_void) -> T {
    // SAFETY: `ctx` points into REPLACED or REPLACED_ARENAS, written before
    // the hook was set.
    unsafe { *ctx.cast::<T>() }
}

entry_stub!(unexported object_malloc(ctx: *mut c_void, size: usize) -> *mut c_void => malloc_body, "rdx", "rcx");
entry_stub!(unexported object_calloc(ctx: *mut c_void, count: usize, size: usize) -> *mut c_void => calloc_body, "rcx", "r8");
entry_stub!(unexported object_realloc(ctx: *mut c_void, ptr: *mut c_void, size: usize) -> *mut c_void => realloc_body, "rcx", "r8");

/// Whether pymalloc serves a request of `size` bytes itself.
fn small(size: usize) -> bool {
    (1..=LARGEST_SMALL_REQUEST).contains(&size)
}

unsafe extern "C" fn malloc_body(ctx: *mut c_void, size: usize, sp: u64, bp: u64) -> *mut c_void {
    // SAFETY: Python calls the hook with the context it was set with, and
    // the caller's arguments go to the allocator it replaced unchanged.
    let ptr = unsafe {
        let previous: Allocator = replaced(ctx);
        (previous.malloc)(previous.ctx, size)
    };
    // Should pymalloc find no memory for an arena, it hands a small request
    // to malloc too, whose record this one then replaces.
    if small(size) {
        session::object_allocated(ptr, size, entry(sp, bp));
    }
    ptr
}

unsafe extern "C" fn calloc_body(ctx: *mut c_void, count: usize, size: usize, sp: u64, bp: u64) -> *mut c_void {
    // SAFETY: as in malloc_body.
    let ptr = unsafe {
        let previous: Allocator = replaced(ctx);
        (previous.calloc)(previous.ctx, count, size)
    };
    // A product that overflows gets null, which is not recorded.
    let total = count.wrapping_mul(size);
    if small(total) {
        session::object_allocated(ptr, total, entry(sp, bp));
    }
    ptr
}

unsafe extern "C" fn realloc_body(ctx: *mut c_void, ptr: *mut c_void, size: usize, sp: u64, bp: u64) -> *mut c_void {
    // Forgotten first: once the allocator has the block back, another
    // thread may be handed the same address. Should the call fail, the old
    // block stays the program's unrecorded (Python raises MemoryError).
    session::object_freed(ptr);
    // A block pymalloc did not serve is resized by realloc, and a small
    // one growing past 512 bytes moves to malloc: either way malloc's hooks
    // record the result.
    let counted = thread_state::allocations_counted();
    // SAFETY: as in malloc_body; the caller passes a block of this domain or null.
    let new_ptr = unsafe {
        let previous: Allocator = replaced(ctx);
        (previous.realloc)(previous.ctx, ptr, size)
    };
    if thread_state::allocations_counted() == counted {
        session::object_allocated(new_ptr, size, entry(sp, bp));
    }
    new_ptr
}

/// Blocks of either kind come back here: a small one was recorded by the
/// hooks above, a large one goes on to `free`, whose hook forgets it.
unsafe extern "C" fn object_free(ctx: *mut c_void, ptr: *mut c_void) {
    session::object_freed(ptr);
    // SAFETY: as in malloc_body; the caller passes a block of this domain or null.
    unsafe {
        let previous: Allocator = replaced(ctx);
        (previous.free)(previous.ctx, ptr)
    }
}

unsafe extern "C" fn arena_alloc(ctx: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: the arena allocator Python called, with its context and the caller's size.
    thread_state::quietly(|| unsafe {
        let previous: ArenaAllocator = replaced(ctx);
        (previous.alloc)(previous.ctx, size)
    })
}

unsafe extern "C" fn arena_free(ctx: *mut c_void, ptr: *mut c_void, size: usize) {
    // SAFETY: as in arena_alloc; the caller passes an arena it allocated.
    thread_state::quietly(|| unsafe {
        let previous: ArenaAllocator = replaced(ctx);
        (previous.free)(previous.ctx, ptr, size)
    })
}
