//! `libtracer.so`: preloaded into a process, it records every live heap
//! allocation and anonymous memory mapping with its call stack, cuts the run into epochs and writes the
//! changes of each epoch to a trace file for `analyzer`.
//!
//! Data flows one way: the hooks (`hooks`) forward each call to the program's
//! allocator (glibc's, or one preloaded after the tracer) and hand
//! the result to the session (`session`), which captures the stack (`unwind`),
//! adds the Python frames of a CPython process (`python`), which also show
//! when a PyTorch DataLoader pass starts an epoch (`auto_epochs`),
//! interns it (`stacks`) and updates the live table (`recorder` for the heap,
//! `mappings` for anonymous mappings, both counting in `sites`); at the end of
//! each epoch the session writes a snapshot (`writer`, in the `trace-format`).

// Unit tests build the library without its hooks (they would interpose the
// test harness's own malloc), so the code only the hooks reach looks unused.
#![cfg_attr(test, allow(dead_code))]

#[cfg(not(test))]
mod hooks;

mod auto_epochs;
mod block_filter;
mod capture_room;
mod config;
mod fast_hash;
mod gate;
mod loaded_objects;
mod mappings;
mod modules;
mod own_stack;
mod python;
mod real_alloc;
mod recorder;
mod room;
mod sampling;
mod session;
mod shared_epochs;
mod sites;
mod stacks;
mod sys;
mod thread_state;
mod unwind;
mod writer;

/// The tracer's own allocations go straight to glibc, never through the hooks.
#[cfg(not(test))]
#[global_allocator]
static TRACER_ALLOCATOR: real_alloc::LibcAllocator = real_alloc::LibcAllocator;

/// A poisoned lock only means a panic was caught while it was held; the
/// tracer's tables behind it remain usable.
fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Held by the unit tests that read glibc's heap figures for the whole
/// process, and by those that allocate from other threads meanwhile: those
/// could take the freed memory the first ones count.
#[cfg(test)]
static HEAP_FIGURES: std::sync::Mutex<()> = std::sync::Mutex::new(());
