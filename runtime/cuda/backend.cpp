// The CUDA device backend (device.hpp): device_count, run_on_device and
// capture_step_gradients are the executor's (executor.cpp).
#include "preflight/runtime/device.hpp"

namespace preflight::runtime {

std::string_view device_backend_unavailable_reason() { return {}; }

}  // namespace preflight::runtime
