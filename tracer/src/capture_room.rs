//! Per-thread room for one capture's frames, off the program's stack: a
//! hook may run on a stack of a few KiB (a coroutine's, an alternate signal
//! stack), where the 1.5 KiB of native and Python frames would not fit.
//! One room per thread is enough: the tracer never re-enters itself on a
//! thread (see `thread_state::inside`), so a thread fills one capture at
//! a time.

use std::cell::RefCell;

use crate::python::PyStack;
use crate::unwind::CapturedStack;

struct Room {
    native: CapturedStack,
    python: PyStack,
}

thread_local! {
    // Const-initialized without a destructor: static TLS, never allocates.
    static ROOM: RefCell<Room> = const { RefCell::new(Room { native: CapturedStack::new(), python: PyStack::new() }) };
}

/// Runs `work` with this thread's room for the native and Python frames of
/// a capture; `None`, without running it, should the room be taken.
pub fn with_room<R>(work: impl FnOnce(&mut CapturedStack, &mut PyStack) -> R) -> Option<R> {
    let mut work = Some(work);
    ROOM.try_with(|room| {
        let mut room = room.try_borrow_mut().ok()?;
        let Room { native, python } = &mut *room;
        work.take().map(|work| work(native, python))
    })
    .ok()
    .flatten()
}
