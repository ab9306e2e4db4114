//! The analyzer: reads a trace written by `libtracer.so` and finds what leaks.
//!
//! Data flows one way: [`trace`] loads records into a model (its module
//! records cut into generations by [`modules`]), [`analysis`] ranks leak
//! suspects and gives the verdict, counting the stacks that symbolize the
//! same as one site ([`sites`]), [`symbolize`] resolves the addresses and
//! Python code locations that are shown ([`debug_file`] finds the DWARF
//! split off a module, [`demangle`] names Rust and C++ functions),
//! [`merge`] makes one stack of their native and Python frames, [`lines`]
//! sums the suspects by their line of own code,
//! [`findings`] looks at the traces of the process's descendants, and
//! [`render`] writes the text report, the JSON and the flamegraphs. [`cli`]
//! ties them to the command line.

pub mod analysis;
pub mod cli;
pub mod debug_file;
pub mod demangle;
pub mod error;
pub mod findings;
pub mod format;
pub mod install_dirs;
pub mod lines;
pub mod merge;
pub mod modules;
pub mod progress;
pub mod pylines;
pub mod render;
pub mod sites;
pub mod symbolize;
#[doc(hidden)]
pub mod synth;
pub mod trace;
