// The CUDA backend as a loadable module. `preflight` loads libpreflight_cuda.so (the CUDA
// executor with cudart and cuBLASLt) only when a command needs a device, so the planner
// commands start without paying for cuBLASLt's start-up (~90 % of a `preflight models`
// run's time when it was linked in) and work on a machine without the CUDA libraries.
// The module and its loader come from the same build: the entry point checks the ABI
// version and the size of every type that crosses the boundary.
#pragma once

#include <cstddef>

#include "preflight/runtime/device.hpp"

namespace preflight::runtime {

inline constexpr int kDeviceModuleAbi = 2;
inline constexpr const char* kDeviceModuleFile = "libpreflight_cuda.so";
inline constexpr const char* kDeviceModuleEntry = "preflight_device_module_v1";

// Sizes of the types passed across, compared by the loader (a stale module from another
// build is refused instead of misread).
struct DeviceModuleLayout {
    std::size_t model = sizeof(ModelConfig), gpu = sizeof(GpuSpec), plan = sizeof(Plan),
                options = sizeof(RunOptions), report = sizeof(RunReport), gradients = sizeof(StepGradients);
    bool operator==(const DeviceModuleLayout&) const = default;
};

struct DeviceModule {
    int abi = kDeviceModuleAbi;
    DeviceModuleLayout layout;
    int (*device_count)() = nullptr;
    RunReport (*run_on_device)(const ModelConfig&, const GpuSpec&, const Plan&, const RunOptions&) = nullptr;
    StepGradients (*capture_step_gradients)(const ModelConfig&, const Plan&, const RunOptions&) = nullptr;
    std::vector<RankResult> (*run_ranks_on_device)(const ModelConfig&, const Plan&, const RunOptions&, int) = nullptr;
};

}  // namespace preflight::runtime

// The module's one exported symbol (named by kDeviceModuleEntry).
extern "C" const preflight::runtime::DeviceModule* preflight_device_module_v1();
