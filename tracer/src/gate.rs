//! Keeps `fork` from copying the tracer's tables in the middle of an update.
//!
//! Every recording operation passes the gate. The `fork` prepare handler closes
//! it and waits until no thread is inside, so the child inherits tables and
//! locks in a consistent, unlocked state whatever the other threads of a
//! multi-threaded parent were doing. A thread that arrives while the gate is
//! closed waits outside, holding nothing the forking thread needs.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static CLOSED: AtomicBool = AtomicBool::new(false);
static INSIDE: AtomicUsize = AtomicUsize::new(0);

/// A pass through the gate; the gate cannot close until it is dropped.
pub struct Pass(());

impl Drop for Pass {
    fn drop(&mut self) {
        INSIDE.fetch_sub(1, Ordering::Release);
    }
}

pub fn pass() -> Pass {
    loop {
        while CLOSED.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        INSIDE.fetch_add(1, Ordering::SeqCst);
        if !CLOSED.load(Ordering::SeqCst) {
            return Pass(());
        }
        INSIDE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Closes the gate and waits for the threads inside to leave.
pub fn close() {
    CLOSED.store(true, Ordering::SeqCst);
    while INSIDE.load(Ordering::SeqCst) != 0 {
        std::thread::yield_now();
    }
}

pub fn open() {
    CLOSED.store(false, Ordering::SeqCst);
}

/// In a forked child only the forking thread exists: nobody is inside.
pub fn reset_in_child() {
    INSIDE.store(0, Ordering::SeqCst);
    CLOSED.store(false, Ordering::SeqCst);
}
