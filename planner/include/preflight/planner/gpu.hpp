// GPU specification (data/gpus/*.json).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace preflight {

// Dense peak throughput by math precision. Unknown is explicit (nullopt),
// printed as N/A, never guessed.
struct PeakFlops {
    std::optional<double> fp32_flops_per_s;
    std::optional<double> tf32_flops_per_s;
    std::optional<double> bf16_flops_per_s;
    std::optional<double> fp16_flops_per_s;
    std::optional<double> fp8_flops_per_s;
};

struct GpuSpec {
    std::string name;
    std::string display_name;
    std::string architecture;
    std::int64_t memory_bytes = 0;
    PeakFlops peak;
    double hbm_bandwidth_bytes_per_s = 0;
    double intra_node_bandwidth_bytes_per_s = 0;  // per GPU, per direction
    int gpus_per_node = 1;
    double inter_node_bandwidth_bytes_per_s = 0;  // per GPU, per direction
    std::int64_t overhead_bytes = 0;  // CUDA context + library workspaces, per GPU
    std::map<std::string, std::string> sources;   // key -> citation
};

// Parses a GPU spec object; throws InputError naming the key on bad input.
GpuSpec gpu_from_json(const nlohmann::json& spec, const std::string& fallback_name);

}  // namespace preflight
