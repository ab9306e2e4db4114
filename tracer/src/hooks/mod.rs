//! The symbols `libtracer.so` interposes in the traced process: the allocator
//! entry points, the process-ending calls, and the exported `tracer_mark`.
//! This and `sys`, `modules`, `real_alloc` and `unwind` are the only places
//! with `unsafe` code.

mod allocation;
mod lifecycle;
#[cfg(target_arch = "x86_64")]
mod loader;
