//! Per-thread flags that keep the tracer from re-entering itself.
//!
//! Anything the tracer calls (glibc's unwinder, `pthread_getattr_np`, file
//! I/O) may call malloc again on the same thread; those nested calls must go
//! straight to glibc. The flags live in const-initialized thread-locals without
//! destructors, which glibc keeps in the static TLS block of a preloaded
//! library: reading them never allocates.

use std::cell::Cell;

struct ThreadFlags {
    inside_tracer: Cell<bool>,
    /// This thread is running `fork` (between the prepare and parent handlers).
    forking: Cell<bool>,
    /// Allocations recorded on this thread, to pace the epoch clock checks.
    allocations: Cell<u32>,
}

thread_local! {
    static FLAGS: ThreadFlags = const {
        ThreadFlags { inside_tracer: Cell::new(false), forking: Cell::new(false), allocations: Cell::new(0) }
    };
}

/// Held while this thread is inside the tracer.
pub struct InsideTracer(());

impl Drop for InsideTracer {
    fn drop(&mut self) {
        let _ = FLAGS.try_with(|flags| flags.inside_tracer.set(false));
    }
}

/// Marks this thread as inside the tracer; `None` if it already is (a nested
/// call from the tracer's own work) or is in the middle of `fork`.
pub fn enter() -> Option<InsideTracer> {
    FLAGS
        .try_with(|flags| {
            if flags.inside_tracer.get() || flags.forking.get() {
                None
            } else {
                flags.inside_tracer.set(true);
                Some(InsideTracer(()))
            }
        })
        .ok()
        .flatten()
}

pub fn set_forking(forking: bool) {
    let _ = FLAGS.try_with(|flags| flags.forking.set(forking));
}

/// Counts an allocation on this thread; true once every `period` allocations.
pub fn count_allocation(period_mask: u32) -> bool {
    FLAGS
        .try_with(|flags| {
            let n = flags.allocations.get().wrapping_add(1);
            flags.allocations.set(n);
            n & period_mask == 0
        })
        .unwrap_or(false)
}
