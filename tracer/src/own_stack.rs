//! Where the tracer's work runs: on the thread's own stack, or, when a hook
//! is called on another one (a coroutine's, an alternate signal stack: a
//! few KiB each), on a spare stack of the tracer's for the work that needs
//! more room than such a stack may have left (a snapshot, reading
//! /proc/self/maps through a page-sized buffer).

use std::cell::{Cell, UnsafeCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::sys;

thread_local! {
    /// This thread's stack `[low, high)`; (0, 0) until first needed, (1, 1)
    /// if it could not be found. Const-initialized, no destructor: reading it
    /// never allocates.
    static BOUNDS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// The top of this thread's own stack, if `sp` lies on it.
pub fn top_if_on(sp: u64) -> Option<u64> {
    let (low, high) = bounds()?;
    (low <= sp && sp < high).then_some(high)
}

/// Runs `work` on a stack with room for it: the calling one when it is the
/// thread's own, else the spare one (waiting for another thread to be done
/// with it). Called inside the fork gate, so no fork copies the spare
/// stack taken. A panic of `work` there is raised again here, once back on
/// the calling stack.
pub fn with_room(work: impl FnOnce()) {
    if top_if_on(stack_pointer()).is_some() {
        return work();
    }
    let mut work = Some(work);
    let mut finished = false;
    on_spare_stack(&mut || {
        if let Some(work) = work.take() {
            work();
            finished = true;
        }
    });
    if !finished {
        panic!("the tracer's work on its spare stack failed");
    }
}

/// This thread's stack bounds, found once per thread on the spare stack
/// (the calling one may be small): the mapping that holds the stack's top,
/// the address the loader recorded for the main thread, the thread's
/// control block for the others (glibc places it at the top of a thread's
/// stack), wherever the stack pointer is now. `pthread_getattr_np` would
/// be simpler but cannot be called here: it holds the thread's lock while
/// it allocates, so an allocation made inside it (Rust's runtime calls it
/// before `main` and in every new thread) would wait on that lock forever.
fn bounds() -> Option<(u64, u64)> {
    let mut bounds = BOUNDS.try_with(Cell::get).ok()?;
    if bounds == (0, 0) {
        on_spare_stack(&mut || bounds = sys::mapping_containing(stack_top_inside()).unwrap_or((1, 1)));
        let _ = BOUNDS.try_with(|cell| cell.set(bounds));
    }
    Some(bounds)
}

extern "C" {
    /// The main thread's stack top as the process started, set by the loader.
    static __libc_stack_end: *const u8;
}

/// An address inside this thread's stack mapping, near its top.
fn stack_top_inside() -> u64 {
    if sys::is_main_thread() {
        // SAFETY: the loader sets the variable before any code runs; it is
        // only read.
        unsafe { __libc_stack_end as u64 }
    } else {
        thread_pointer()
    }
}

#[cfg(target_arch = "x86_64")]
fn thread_pointer() -> u64 {
    let pointer: u64;
    // SAFETY: `fs:0` holds the thread pointer; reading it writes nothing.
    unsafe {
        core::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) pointer, options(nostack, readonly, preserves_flags))
    };
    pointer
}

#[cfg(target_arch = "x86_64")]
fn stack_pointer() -> u64 {
    let sp: u64;
    // SAFETY: reads the stack pointer into a register; touches no memory.
    unsafe { core::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags)) };
    sp
}

const SPARE_BYTES: usize = 256 * 1024;

#[repr(C, align(64))]
struct SpareStack(UnsafeCell<[u8; SPARE_BYTES]>);

// SAFETY: only the thread holding `SPARE_TAKEN` runs on it.
unsafe impl Sync for SpareStack {}

/// Zeroed memory, not touched until needed.
static SPARE: SpareStack = SpareStack(UnsafeCell::new([0; SPARE_BYTES]));
static SPARE_TAKEN: AtomicBool = AtomicBool::new(false);

/// Runs `work` on the spare stack, once no other thread is on it. A signal
/// handler that interrupts it on this thread finds the thread inside the
/// tracer, so it never waits here for its own thread.
#[cfg(target_arch = "x86_64")]
fn on_spare_stack(work: &mut dyn FnMut()) {
    while SPARE_TAKEN.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
        std::hint::spin_loop();
    }
    let top = (SPARE.0.get() as u64 + SPARE_BYTES as u64) & !15;
    let mut work = work;
    // SAFETY: switches to the top of the spare stack, which this thread
    // alone holds (16-byte aligned, as a call needs), calls `run_work` there
    // and switches back: r12, callee-saved, keeps the stack pointer across
    // the call. `run_work` catches every panic, so none unwinds across the
    // switch.
    unsafe {
        core::arch::asm!(
            "mov r12, rsp",
            "mov rsp, {top}",
            "call {run}",
            "mov rsp, r12",
            top = in(reg) top,
            run = sym run_work,
            in("rdi") &mut work as *mut &mut dyn FnMut(),
            out("r12") _,
            clobber_abi("C"),
        );
    }
    SPARE_TAKEN.store(false, Ordering::Release);
}

/// Runs the work `on_spare_stack` was given; no panic leaves it.
extern "C" fn run_work(work: *mut &mut dyn FnMut()) {
    // SAFETY: `on_spare_stack` passes a pointer to its live `work`.
    let work = unsafe { &mut *work };
    let _ = panic::catch_unwind(AssertUnwindSafe(work));
}

#[cfg(not(target_arch = "x86_64"))]
fn on_spare_stack(work: &mut dyn FnMut()) {
    work();
}

#[cfg(not(target_arch = "x86_64"))]
fn thread_pointer() -> u64 {
    0
}

#[cfg(not(target_arch = "x86_64"))]
fn stack_pointer() -> u64 {
    let marker = 0u8;
    std::ptr::addr_of!(marker) as u64
}
