// The dense peak a precision's GEMMs run at, and what a step time means for a training run.
#include "preflight/planner/throughput.hpp"

namespace preflight {

std::optional<double> compute_peak_flops_per_s(const GpuSpec& gpu, Precision precision) {
    switch (precision) {
        case Precision::fp32: return gpu.peak.fp32_flops_per_s;
        case Precision::bf16_mixed:
        case Precision::bf16_mixed_fp32_grads:
        case Precision::bf16: return gpu.peak.bf16_flops_per_s;
        case Precision::fp16_mixed: return gpu.peak.fp16_flops_per_s;
        case Precision::fp8_mixed: return gpu.peak.fp8_flops_per_s;
    }
    return std::nullopt;
}

const char* compute_peak_name(Precision precision) {
    switch (precision) {
        case Precision::fp32: return "fp32";
        case Precision::bf16_mixed:
        case Precision::bf16_mixed_fp32_grads:
        case Precision::bf16: return "bf16";
        case Precision::fp16_mixed: return "fp16";
        case Precision::fp8_mixed: return "fp8";
    }
    return "unknown";
}

TrainingTime training_time(const Throughput& t, std::int64_t train_tokens) {
    TrainingTime r;
    if (t.tokens_per_step <= 0 || train_tokens <= 0) return r;
    r.steps = (train_tokens - 1) / t.tokens_per_step + 1;  // ceil, without overflow near 2^63
    r.wall_s = static_cast<double>(r.steps) * t.step_time_s;
    r.gpu_hours = r.wall_s * static_cast<double>(t.gpus) / 3600.0;
    return r;
}

}  // namespace preflight
