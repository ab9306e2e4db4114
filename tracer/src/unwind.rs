//! Native stack capture with DWARF CFI (glibc's `_dl_find_object` plus
//! libgcc's unwinder), so code built without frame pointers — CPython,
//! libtorch, `-O2 -fomit-frame-pointer` C — still yields full stacks.

/// Deeper stacks are cut at this many frames (the outermost ones are dropped).
pub const MAX_FRAMES: usize = 128;

/// Return addresses of the current thread, innermost first.
pub struct CapturedStack {
    frames: [u64; MAX_FRAMES],
    len: usize,
}

impl CapturedStack {
    pub fn frames(&self) -> &[u64] {
        &self.frames[..self.len]
    }
}

/// Captures the calling thread's stack, leaving out the innermost frames that
/// lie inside the tracer itself (`own_code` is its address range).
#[inline(never)]
pub fn capture(own_code: (u64, u64)) -> CapturedStack {
    let mut stack = CapturedStack { frames: [0; MAX_FRAMES], len: 0 };
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
            if ip == 0 {
                return false; // the outermost frame (_start, clone) has no caller
            }
            stack.frames[stack.len] = ip;
            stack.len += 1;
            stack.len < MAX_FRAMES
        })
    };
    stack
}
