//! Native stack capture with DWARF CFI, so code built without frame pointers
//! — CPython, libtorch, `-O2 -fomit-frame-pointer` C — still yields full
//! stacks.
//!
//! On x86_64 the fast path (`fast`) unwinds with framehop over the loaded
//! objects' unwind tables in memory (`module_set`), caching each return
//! address's rule. libgcc's unwinder (glibc's `_dl_find_object`, a full CFI
//! interpretation per frame) is the fallback: other architectures, a stack
//! the fast path does not know, a `dlclose` in progress.
//!
//! `TRACER_UNWIND_CHECK=1` (a debugging aid) captures every stack both ways
//! and reports on stderr at exit how many differed and how (see [`Difference`]),
//! printing the first few of each kind.

#[cfg(target_arch = "x86_64")]
mod fast;
#[cfg(target_arch = "x86_64")]
pub mod module_set;
#[cfg(target_arch = "x86_64")]
mod trail;

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use crate::sys;

/// Deeper stacks are cut at this many frames (the outermost ones are dropped).
pub const MAX_FRAMES: usize = 128;

/// Code lies below this address (the user half of x86_64's 48-bit address
/// space): a "return address" at or above it is no caller. The fast path
/// hands such a stack to libgcc, which ends a stack there; kept, the word
/// was taken for a tagged frame by the stack table.
pub const USER_SPACE_END: u64 = 1 << 47;

/// Where the program called into a hook: its stack pointer at the hook's
/// first instruction (pointing at the return address) and its frame pointer.
/// From there the unwinder starts at the program's frame, instead of
/// unwinding the tracer's own frames first (a tenth of a capture's cost).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub stack_pointer: u64,
    pub frame_pointer: u64,
}

impl Entry {
    /// Not known (a hook entered without its registers): the capture
    /// unwinds out of the tracer's frames.
    pub const UNKNOWN: Entry = Entry { stack_pointer: 0, frame_pointer: 0 };
}

/// Return addresses of the current thread, innermost first.
pub struct CapturedStack {
    /// The first `len` are initialized (left uninitialized otherwise: this
    /// is filled on every allocation).
    frames: [MaybeUninit<u64>; MAX_FRAMES],
    len: usize,
    /// This capture's number on its thread; 0 when it does not have one.
    serial: u64,
    /// The number of the thread's earlier capture this one repeats frame for
    /// frame (the unwinder met it at the same depth, the frames inside the
    /// meeting point the same); 0 if none.
    repeats: u64,
}

impl CapturedStack {
    /// Empty. Made once per thread, in its capture room (see
    /// `capture_room`), whose frames are written over by each capture.
    pub const fn new() -> CapturedStack {
        CapturedStack { frames: [MaybeUninit::uninit(); MAX_FRAMES], len: 0, serial: 0, repeats: 0 }
    }

    #[cfg(test)]
    pub fn for_test(frames: &[u64], serial: u64, repeats: u64) -> CapturedStack {
        let mut stack = CapturedStack::new();
        frames.iter().for_each(|&frame| _ = stack.push(frame));
        (stack.serial, stack.repeats) = (serial, repeats);
        stack
    }

    /// This capture's number among the thread's captures, if it has one.
    pub fn serial(&self) -> u64 {
        self.serial
    }

    /// Whether this is, frame for frame, the thread's capture number `serial`.
    pub fn repeats(&self, serial: u64) -> bool {
        serial != 0 && self.repeats == serial
    }

    pub fn frames(&self) -> &[u64] {
        // SAFETY: the first `len` entries were written by `push`, and
        // MaybeUninit<u64> has the layout of u64.
        unsafe { std::slice::from_raw_parts(self.frames.as_ptr().cast::<u64>(), self.len) }
    }

    /// Replaces the frames with (at most `MAX_FRAMES` of) `frames`.
    #[cfg(target_arch = "x86_64")]
    fn set(&mut self, frames: &[u64]) {
        let len = frames.len().min(MAX_FRAMES);
        for (slot, &frame) in self.frames.iter_mut().zip(&frames[..len]) {
            *slot = MaybeUninit::new(frame);
        }
        self.len = len;
    }

    /// Appends a frame; false once the stack is full.
    fn push(&mut self, frame: u64) -> bool {
        self.frames[self.len] = MaybeUninit::new(frame);
        self.len += 1;
        self.len < MAX_FRAMES
    }
}

/// Captures the calling thread's stack into `stack`, leaving out the
/// innermost frames that lie inside the tracer itself (`own_code` is its
/// address range). The caller's stack is filled in place: at a kilobyte,
/// returning it by value cost two copies per allocation.
#[inline(never)]
pub fn capture(own_code: (u64, u64), entry: Entry, stack: &mut CapturedStack) {
    #[cfg(target_arch = "x86_64")]
    if fast::capture(own_code, entry, stack).is_ok() {
        if check_enabled() {
            check_against_libgcc(own_code, stack);
        }
        return;
    }
    if check_enabled() {
        FALLBACKS.fetch_add(1, Ordering::Relaxed);
    }
    capture_with_libgcc(own_code, stack);
}

/// Runs libgcc's unwinder once, as the tracer starts on the main thread's
/// stack: its first run has the loader bind the functions it calls
/// (`_dl_find_object`), which takes 3 KiB of stack more, and a later first
/// run may be in a signal handler on a small alternate stack.
pub fn prepare_fallback(own_code: (u64, u64)) {
    capture_with_libgcc(own_code, &mut CapturedStack::new());
}

#[inline(never)]
fn capture_with_libgcc(own_code: (u64, u64), stack: &mut CapturedStack) {
    (stack.len, stack.serial, stack.repeats) = (0, 0, 0);
    let mut in_tracer = true;
    // SAFETY: the unsynchronized variant only skips backtrace's global lock,
    // which a malloc hook must not take; the closure does not unwind the
    // stack itself, and libgcc's unwinder is thread-safe.
    unsafe {
        backtrace::trace_unsynchronized(|frame| {
            let ip = frame.ip() as u64;
            if in_tracer && own_code.0 <= ip && ip < own_code.1 {
                return true;
            }
            in_tracer = false;
            if ip == 0 || ip >= USER_SPACE_END {
                return false; // the outermost frame (_start, clone) has no caller
            }
            stack.push(ip)
        })
    };
}

const CHECK_UNKNOWN: u8 = 0;
const CHECK_OFF: u8 = 1;
const CHECK_ON: u8 = 2;
static CHECK: AtomicU8 = AtomicU8::new(CHECK_UNKNOWN);
static COMPARED: AtomicU64 = AtomicU64::new(0);
/// Differing captures, by [`Difference`].
static DIFFERED: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
/// Captures that took the libgcc path.
static FALLBACKS: AtomicU64 = AtomicU64::new(0);
/// Differences printed in full, at most, of each kind.
const SHOWN: u64 = 5;

/// How the fast unwinder's capture of a stack differs from libgcc's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Difference {
    /// The same frames, and more outside libgcc's outermost one (a frame
    /// libgcc takes for the end of the stack, such as a thread's `clone3`).
    PastLibgccEnd,
    /// The same frames, but fewer: the fast unwinder stopped first.
    ShortOfLibgccEnd,
    /// A frame differs: one of the two unwound a frame wrongly.
    Inside,
}

impl Difference {
    fn of(fast: &[u64], slow: &[u64]) -> Difference {
        if fast.starts_with(slow) {
            Difference::PastLibgccEnd
        } else if slow.starts_with(fast) {
            Difference::ShortOfLibgccEnd
        } else {
            Difference::Inside
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Difference::PastLibgccEnd => "past libgcc's outermost frame",
            Difference::ShortOfLibgccEnd => "short of libgcc's outermost frame",
            Difference::Inside => "in a frame inside both",
        }
    }
}

fn check_enabled() -> bool {
    let mut state = CHECK.load(Ordering::Relaxed);
    if state == CHECK_UNKNOWN {
        // SAFETY: getenv with a NUL-terminated name; the result is only read
        // here, before any thread of the tracer changes the environment.
        let value = unsafe { libc::getenv(c"TRACER_UNWIND_CHECK".as_ptr()) };
        // SAFETY: a non-null getenv result is a NUL-terminated string.
        let on = !value.is_null() && unsafe { std::ffi::CStr::from_ptr(value) }.to_bytes() == b"1";
        state = if on { CHECK_ON } else { CHECK_OFF };
        CHECK.store(state, Ordering::Relaxed);
    }
    state == CHECK_ON
}

/// Out of line: the second capture's frames take this function's frame, not
/// that of every capture.
#[inline(never)]
fn check_against_libgcc(own_code: (u64, u64), fast: &CapturedStack) {
    let mut slow = CapturedStack::new();
    capture_with_libgcc(own_code, &mut slow);
    compare(fast, &slow);
}

fn compare(fast: &CapturedStack, slow: &CapturedStack) {
    COMPARED.fetch_add(1, Ordering::Relaxed);
    if fast.frames() == slow.frames() {
        return;
    }
    let difference = Difference::of(fast.frames(), slow.frames());
    if DIFFERED[difference as usize].fetch_add(1, Ordering::Relaxed) < SHOWN {
        let hex = |frames: &[u64]| frames.iter().map(|f| format!("{f:#x}")).collect::<Vec<_>>().join(" ");
        sys::print_stderr(&format!(
            "tracer: unwind check: stacks differ {}\n  fast:   {}\n  libgcc: {}\n",
            difference.describe(),
            hex(fast.frames()),
            hex(slow.frames())
        ));
    }
}

/// At exit, with `TRACER_UNWIND_CHECK=1`: how many captures differed, and how.
pub fn report_check() {
    if CHECK.load(Ordering::Relaxed) == CHECK_ON {
        let counts = DIFFERED.each_ref().map(|count| count.load(Ordering::Relaxed));
        let kinds = [Difference::PastLibgccEnd, Difference::ShortOfLibgccEnd, Difference::Inside];
        let by_kind: Vec<String> =
            kinds.iter().map(|&kind| format!("{} {}", counts[kind as usize], kind.describe())).collect();
        sys::print_stderr(&format!(
            "tracer: unwind check: {} stacks compared, {} differed ({}), {} captured by libgcc alone\n",
            COMPARED.load(Ordering::Relaxed),
            counts.iter().sum::<u64>(),
            by_kind.join(", "),
            FALLBACKS.load(Ordering::Relaxed)
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::Difference;

    #[test]
    fn differences_are_told_apart_by_where_the_stacks_part() {
        assert_eq!(Difference::of(&[1, 2, 3, 4], &[1, 2, 3]), Difference::PastLibgccEnd);
        assert_eq!(Difference::of(&[1, 2], &[1, 2, 3]), Difference::ShortOfLibgccEnd);
        assert_eq!(Difference::of(&[1, 9, 3], &[1, 2, 3]), Difference::Inside);
        assert_eq!(Difference::of(&[1, 9, 3, 4], &[1, 2, 3]), Difference::Inside);
    }
}
