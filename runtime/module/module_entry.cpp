// Entry point of libpreflight_cuda.so: the CUDA executor's device functions (executor.cpp,
// step_gradients.cpp) behind the table device_module.hpp declares.
#include "preflight/runtime/device_module.hpp"

extern "C" __attribute__((visibility("default"))) const preflight::runtime::DeviceModule* preflight_device_module_v1() {
    using namespace preflight::runtime;
    static const DeviceModule table = [] {
        DeviceModule m;
        m.device_count = &device_count;
        m.run_on_device = &run_on_device;
        m.capture_step_gradients = &capture_step_gradients;
        m.run_ranks_on_device = &run_ranks_on_device;
        return m;
    }();
    return &table;
}
