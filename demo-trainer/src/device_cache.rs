//! Emptying the device caching allocator, like `torch.cuda.empty_cache()`.
//!
//! tch does not expose it; `csrc/device_cache.cpp` calls libtorch's
//! `at::accelerator::emptyCache()`. On a CPU-only run there is no accelerator
//! and the call does nothing.

use std::ffi::c_int;

extern "C" {
    fn demo_empty_device_cache() -> c_int;
}

#[derive(Debug, PartialEq, Eq)]
pub enum Emptied {
    /// The accelerator's cached blocks (and pinned host blocks) were released.
    Yes,
    /// No accelerator in use: nothing to release.
    NoDevice,
    /// libtorch raised an error.
    Failed,
}

/// Releases the memory the device's caching allocator holds for reuse.
pub fn empty() -> Emptied {
    // SAFETY: the shim takes no arguments and catches C++ exceptions.
    match unsafe { demo_empty_device_cache() } {
        1 => Emptied::Yes,
        0 => Emptied::NoDevice,
        _ => Emptied::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emptying_the_cache_runs_on_cpu() {
        let before = tch::Tensor::ones([256, 256], (tch::Kind::Float, tch::Device::Cpu));
        let expected = if tch::Cuda::is_available() { Emptied::Yes } else { Emptied::NoDevice };
        assert_eq!(empty(), expected);
        assert_eq!(empty(), expected, "a second call is harmless too");
        assert_eq!(before.sum(tch::Kind::Float).double_value(&[]), 65536.0);
    }
}
