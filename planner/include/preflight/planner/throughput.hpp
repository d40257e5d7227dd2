// FLOP counts and step-time / MFU / HFU model (issue 3). Declarations agreed
// between the planner, the CLI's `plan` command and the Qt explorer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "preflight/planner/gpu.hpp"
#include "preflight/planner/model.hpp"
#include "preflight/planner/plan.hpp"

namespace preflight {

// How attention score/value FLOPs are counted: causal (half the s^2 work, what a
// causal kernel executes) or full (PaLM / Megatron convention, the default).
enum class AttentionFlops { full, causal };

struct FlopCounts {
    double model_flops_per_step = 0;     // forward + backward, no recompute (MFU numerator)
    double hardware_flops_per_step = 0;  // + what recompute re-executes (HFU numerator)
};

// Whole-step FLOPs over all GPUs for the plan's global batch.
FlopCounts step_flops(const ModelConfig& model, const Plan& plan, AttentionFlops convention = AttentionFlops::full);

struct ThroughputOptions {
    AttentionFlops attention_flops = AttentionFlops::full;
};

// One named slice of the step time (for display: compute, exposed communication, bubble, ...).
struct TimeSlice {
    std::string name;
    double seconds = 0;
};

struct Throughput {
    double step_time_s = 0;
    double tokens_per_s = 0;          // all GPUs
    double tokens_per_s_per_gpu = 0;
    double mfu = 0;                   // model FLOPs / (step time * GPUs * dense peak)
    double hfu = 0;                   // hardware FLOPs / (step time * GPUs * dense peak)
    double model_flops_per_step = 0;
    double hardware_flops_per_step = 0;
    double peak_flops_per_s = 0;      // dense peak of the compute precision used
    std::vector<TimeSlice> breakdown;
};

// Throws InputError when the GPU has no published peak for the plan's compute precision.
Throughput estimate_throughput(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan,
                               const ThroughputOptions& options = {});

}  // namespace preflight
