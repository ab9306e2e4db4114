//! Keeps `fork` from copying the tracer's tables in the middle of an update.
//!
//! Every recording operation passes the gate. The `fork` prepare handler closes
//! it and waits until no thread is inside, so the child inherits tables and
//! locks in a consistent, unlocked state whatever the other threads of a
//! multi-threaded parent were doing. A thread that arrives while the gate is
//! closed waits outside, holding nothing the forking thread needs.
//!
//! The threads inside are counted in slots of their own, each on its own
//! cache line: one shared counter, written twice at every allocation by
//! every thread, moved between their cores each time.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static CLOSED: AtomicBool = AtomicBool::new(false);

/// Threads past this many share slots.
const SLOTS: usize = 64;

#[repr(align(128))]
struct Slot(AtomicUsize);

static INSIDE: [Slot; SLOTS] = [const { Slot(AtomicUsize::new(0)) }; SLOTS];

/// A pass through the gate; the gate cannot close until it is dropped.
pub struct Pass(&'static AtomicUsize);

impl Drop for Pass {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

/// A pass for the thread of ordinal `ordinal` (see [`crate::thread_state::inside`]).
pub fn pass(ordinal: usize) -> Pass {
    let inside = &INSIDE[ordinal % SLOTS].0;
    loop {
        while CLOSED.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        inside.fetch_add(1, Ordering::SeqCst);
        if !CLOSED.load(Ordering::SeqCst) {
            return Pass(inside);
        }
        inside.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Closes the gate and waits for the threads inside to leave.
pub fn close() {
    CLOSED.store(true, Ordering::SeqCst);
    while INSIDE.iter().any(|slot| slot.0.load(Ordering::SeqCst) != 0) {
        std::thread::yield_now();
    }
}

pub fn open() {
    CLOSED.store(false, Ordering::SeqCst);
}

/// In a forked child only the forking thread exists: nobody is inside.
pub fn reset_in_child() {
    INSIDE.iter().for_each(|slot| slot.0.store(0, Ordering::SeqCst));
    CLOSED.store(false, Ordering::SeqCst);
}
