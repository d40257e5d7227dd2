#include "preflight/planner/gpu.hpp"

#include <nlohmann/json.hpp>

#include "preflight/planner/error.hpp"

namespace preflight {

using nlohmann::json;

namespace {

// A positive number, or nullopt when the key holds null (vendor publishes none).
std::optional<double> optional_rate(const json& j, const char* key) {
    auto it = j.find(key);
    if (it == j.end()) throw InputError(key, "missing from GPU spec (use null when the vendor publishes no figure)");
    if (it->is_null()) return std::nullopt;
    if (!it->is_number() || it->get<double>() <= 0) throw InputError(key, "must be a positive number or null");
    return it->get<double>();
}

double rate(const json& j, const char* key) {
    auto v = optional_rate(j, key);
    if (!v) throw InputError(key, "must be a positive number");
    return *v;
}

std::int64_t bytes(const json& j, const char* key, bool allow_zero) {
    auto it = j.find(key);
    if (it == j.end()) throw InputError(key, "missing from GPU spec");
    if (!it->is_number_integer()) throw InputError(key, "must be an integer number of bytes");
    const auto v = it->get<std::int64_t>();
    if (v < 0 || (!allow_zero && v == 0)) throw InputError(key, "must be positive");
    return v;
}

}  // namespace

GpuSpec gpu_from_json(const json& j, const std::string& fallback_name) {
    if (!j.is_object()) throw InputError(fallback_name, "GPU spec must hold a JSON object");
    GpuSpec g;
    g.name = j.value("name", fallback_name);
    g.display_name = j.value("display_name", g.name);
    g.architecture = j.value("architecture", "");
    g.memory_bytes = bytes(j, "memory_bytes", false);
    g.peak.fp32_flops_per_s = optional_rate(j, "peak_fp32_flops_per_s");
    g.peak.tf32_flops_per_s = optional_rate(j, "peak_tf32_flops_per_s");
    g.peak.bf16_flops_per_s = optional_rate(j, "peak_bf16_flops_per_s");
    g.peak.fp16_flops_per_s = optional_rate(j, "peak_fp16_flops_per_s");
    g.peak.fp8_flops_per_s = optional_rate(j, "peak_fp8_flops_per_s");
    g.hbm_bandwidth_bytes_per_s = rate(j, "hbm_bandwidth_bytes_per_s");
    g.intra_node_bandwidth_bytes_per_s = rate(j, "intra_node_bandwidth_bytes_per_s");
    g.inter_node_bandwidth_bytes_per_s = rate(j, "inter_node_bandwidth_bytes_per_s");
    auto it = j.find("gpus_per_node");
    if (it == j.end() || !it->is_number_integer() || it->get<int>() <= 0)
        throw InputError("gpus_per_node", "must be a positive integer");
    g.gpus_per_node = it->get<int>();
    g.overhead_bytes = bytes(j, "overhead_bytes", true);
    if (auto s = j.find("sources"); s != j.end() && s->is_object())
        for (const auto& [k, v] : s->items())
            if (v.is_string()) g.sources[k] = v.get<std::string>();
    return g;
}

}  // namespace preflight
