// The no-device backend (device.hpp) of builds without CUDA: no device, device runs refused.
#include <stdexcept>

#include "preflight/runtime/device.hpp"

namespace preflight::runtime {

namespace {
constexpr std::string_view kReason =
    "this build has no CUDA runtime (configure with PREFLIGHT_CUDA=ON on a machine with nvcc)";
}

std::string_view device_backend_unavailable_reason() { return kReason; }

int device_count() { return 0; }

RunReport run_on_device(const ModelConfig&, const GpuSpec&, const Plan&, const RunOptions&) {
    throw std::logic_error(std::string(kReason));
}

StepGradients capture_step_gradients(const ModelConfig&, const Plan&, const RunOptions&) {
    throw std::runtime_error(std::string(kReason));
}

std::vector<RankResult> run_ranks_on_device(const ModelConfig&, const Plan&, const RunOptions&, int) {
    throw std::runtime_error(std::string(kReason));
}

}  // namespace preflight::runtime
