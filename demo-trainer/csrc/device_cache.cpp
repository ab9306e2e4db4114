// Releases the memory that an accelerator's caching allocator keeps for reuse,
// the way torch.cuda.empty_cache() does in Python. libtorch only has this as an
// inline function in its headers, so it is compiled here against them.
#include <ATen/DeviceAccelerator.h>

extern "C" {

// Returns 1 when a device cache was emptied, 0 when there is no accelerator
// (plain CPU runs: nothing to do), -1 when libtorch raised an error.
int demo_empty_device_cache() {
  try {
    auto accelerator = at::accelerator::getAccelerator(false);
    // A CUDA build of libtorch reports CUDA as its accelerator even on a
    // machine without a GPU; no devices means nothing is cached.
    if (!accelerator.has_value() || *accelerator == c10::DeviceType::CPU ||
        at::accelerator::deviceCount() == 0) {
      return 0;
    }
    at::accelerator::emptyCache();
    at::accelerator::emptyHostCache();
    return 1;
  } catch (...) {
    return -1;
  }
}

}  // extern "C"
