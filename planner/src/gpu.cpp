#include "preflight/planner/gpu.hpp"

#include <algorithm>
#include <iterator>
#include <sstream>
#include <string>
#include <utility>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "preflight/planner/error.hpp"
#include "preflight/planner/limits.hpp"
#include "preflight/planner/throughput.hpp"
#include "preflight/planner/shown_value.hpp"

namespace preflight {

using nlohmann::json;

namespace {

// A string field, or `fallback` when absent or null; anything else names the key.
std::string optional_string(const json& j, const char* key, const std::string& fallback) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_string()) throw InputError(key, "must be a string, got " + shown_json(*it));
    return it->get<std::string>();
}

// A rate per second in [min, max] (limits.hpp), or nullopt when the key holds null (vendor publishes none).
std::optional<double> optional_rate(const json& j, const char* key, double min, double max) {
    auto it = j.find(key);
    if (it == j.end()) throw InputError(key, "missing from GPU spec (use null when the vendor publishes no figure)");
    if (it->is_null()) return std::nullopt;
    if (!it->is_number() || !(it->get<double>() > 0) || !std::isfinite(it->get<double>()))
        throw InputError(key, "must be a positive number or null");
    const double v = it->get<double>();
    if (v < min || v > max) {
        char range[96];
        std::snprintf(range, sizeof range, "must lie in [%g, %g] per second (limits.hpp), got %g", min, max, v);
        throw InputError(key, range);
    }
    return v;
}
std::optional<double> optional_flops(const json& j, const char* key) {
    return optional_rate(j, key, limits::kMinFlopsPerS, limits::kMaxFlopsPerS);
}
std::optional<double> optional_bandwidth(const json& j, const char* key) {
    return optional_rate(j, key, limits::kMinBandwidthBytesPerS, limits::kMaxBandwidthBytesPerS);
}

double bandwidth(const json& j, const char* key) {
    auto v = optional_bandwidth(j, key);
    if (!v) throw InputError(key, "must be a positive number");
    return *v;
}

std::int64_t bytes(const json& j, const char* key, bool allow_zero) {
    auto it = j.find(key);
    if (it == j.end()) throw InputError(key, "missing from GPU spec");
    if (!it->is_number_integer()) throw InputError(key, "must be an integer number of bytes");
    if (it->is_number_unsigned() && it->get<std::uint64_t>() > static_cast<std::uint64_t>(limits::kMaxDeviceBytes))
        throw InputError(key, shown_json(*it) + " exceeds the limit kMaxDeviceBytes = " +
                                  std::to_string(limits::kMaxDeviceBytes) + " (1 PiB)");
    const auto v = it->get<std::int64_t>();
    if (v < 0 || (!allow_zero && v == 0))
        throw InputError(key, std::string(allow_zero ? "must be 0 or more" : "must be positive") + ", got " + shown_json(*it));
    if (v > limits::kMaxDeviceBytes)
        throw InputError(key, std::to_string(v) + " exceeds the limit kMaxDeviceBytes = " +
                                  std::to_string(limits::kMaxDeviceBytes) + " (1 PiB)");
    return v;
}

// Every constant of the step-time model under its spec key, with the range the loader accepts:
// (0, hi] and at least lo, plus 0 where zero is allowed (a time or a dimension that may be
// absent, or a figure whose 0 means "use the general one"); zero_means_fallback keys are not
// written at 0. A fraction of a peak or a bandwidth is at least kMinFraction: below 1 % no GPU
// trains (calibrate's bound on fitted fractions, validation/spec_bounds.hpp), and 1e-300 gave
// "0 tokens/s" or a step-time error that named neither the file nor the key.
// scalable: a fraction a calibration transfer may scale (CalibrationTransfer::efficiency_scale;
// it must stay in (0, 1]). Times and dimensions are not: no part differs by a known factor there.
struct EfficiencyKey {
    const char* key;
    double Efficiency::*member;
    bool zero_allowed;
    double lo, hi;  // a nonzero value lies in [lo, hi] (and above 0)
    bool zero_means_fallback;
    bool scalable;
};
constexpr double kMinFraction = 0.01;
constexpr EfficiencyKey kEfficiencyKeys[] = {
    {"gemm_max_fraction_of_peak", &Efficiency::gemm_max_fraction_of_peak, false, kMinFraction, 1, false, true},
    {"fp8_gemm_max_fraction_of_peak", &Efficiency::fp8_gemm_max_fraction_of_peak, false, kMinFraction, 1, false, true},
    {"fp8_dynamic_gemm_max_fraction_of_peak", &Efficiency::fp8_dynamic_gemm_max_fraction_of_peak, true, kMinFraction, 1, true, true},
    {"fp8_rowwise_gemm_max_fraction_of_peak", &Efficiency::fp8_rowwise_gemm_max_fraction_of_peak, true, kMinFraction, 1, true, true},
    {"gemm_half_efficiency_dim", &Efficiency::gemm_half_efficiency_dim, true, 0, 1e9, false, false},
    {"attention_fraction_of_peak", &Efficiency::attention_fraction_of_peak, false, kMinFraction, 1, false, true},
    {"fp32_gemm_max_fraction_of_peak", &Efficiency::fp32_gemm_max_fraction_of_peak, true, kMinFraction, 1, true, true},
    {"fp32_gemm_half_efficiency_dim", &Efficiency::fp32_gemm_half_efficiency_dim, true, 0, 1e9, true, false},
    {"fp32_attention_fraction_of_peak", &Efficiency::fp32_attention_fraction_of_peak, true, kMinFraction, 1, true, true},
    {"fused_attention_fraction_of_peak", &Efficiency::fused_attention_fraction_of_peak, true, kMinFraction, 1, true, true},
    {"memory_bound_fraction_of_hbm", &Efficiency::memory_bound_fraction_of_hbm, false, kMinFraction, 1, false, true},
    {"collective_bus_efficiency", &Efficiency::collective_bus_efficiency, false, kMinFraction, 1, false, true},
    {"inter_node_bus_efficiency", &Efficiency::inter_node_bus_efficiency, false, kMinFraction, 1, false, true},
    {"intra_node_latency_s", &Efficiency::intra_node_latency_s, true, 0, 1, false, false},
    {"inter_node_latency_s", &Efficiency::inter_node_latency_s, true, 0, 1, false, false},
    {"layer_launch_overhead_s", &Efficiency::layer_launch_overhead_s, true, 0, 1, false, false},
    {"tp_layer_launch_overhead_s", &Efficiency::tp_layer_launch_overhead_s, true, 0, 1, false, false},
    {"pipeline_span_layer_host_per_tp_s", &Efficiency::pipeline_span_layer_host_per_tp_s, true, 0, 1, false, false},
    {"microbatch_sync_s", &Efficiency::microbatch_sync_s, true, 0, 60, false, false},
    {"microbatch_sync_half_nodes", &Efficiency::microbatch_sync_half_nodes, false, 0, 1e6, false, false},
    {"microbatch_sync_node_exponent", &Efficiency::microbatch_sync_node_exponent, false, 0, 8, false, false},
    {"microbatch_sync_no_pipeline_fraction", &Efficiency::microbatch_sync_no_pipeline_fraction, true, 0, 1, false, false},
    {"column_sum_row_s", &Efficiency::column_sum_row_s, true, 0, 1, true, false},
    {"step_overhead_s", &Efficiency::step_overhead_s, true, 0, 3600, false, false},
};

std::string range_text(const EfficiencyKey& k) {
    auto num = [](double v) {
        std::ostringstream o;
        o << v;
        return o.str();
    };
    const std::string nonzero = k.lo > 0 ? "in [" + num(k.lo) + ", " + num(k.hi) + "]" : "in (0, " + num(k.hi) + "]";
    return k.zero_allowed ? (k.lo > 0 ? "0 or " + nonzero : "in [0, " + num(k.hi) + "]") : nonzero;
}

Efficiency efficiency_from_json(const json& j) {
    Efficiency e;
    auto it = j.find("efficiency");
    if (it == j.end() || it->is_null()) return e;
    if (!it->is_object()) throw InputError("efficiency", "must be a JSON object");
    // A misspelt constant would leave the built-in default in its place without a word.
    for (const auto& [key, value] : it->items()) {
        bool known = key == "provenance";
        for (const EfficiencyKey& k : kEfficiencyKeys) known = known || key == k.key;
        if (!known) {
            std::string names;
            for (const EfficiencyKey& k : kEfficiencyKeys) names += (names.empty() ? "" : ", ") + std::string(k.key);
            throw InputError("efficiency." + key, "unknown key; the constants are " + names + " and provenance");
        }
    }
    for (const EfficiencyKey& k : kEfficiencyKeys) {
        auto v = it->find(k.key);
        if (v == it->end()) continue;  // absent: the built-in default
        const std::string subject = std::string("efficiency.") + k.key;
        if (!v->is_number()) throw InputError(subject, "must be a number");
        const double x = v->get<double>();
        const bool in_range = ((k.zero_allowed && x == 0) || (x > 0 && x >= k.lo)) && x <= k.hi;  // NaN fails
        if (!in_range) throw InputError(subject, "must be " + range_text(k) + ", got " + shown_json(*v));
        e.*k.member = x;
    }
    if (auto p = it->find("provenance"); p != it->end()) {
        if (!p->is_string()) throw InputError("efficiency.provenance", "must be a string");
        e.provenance = p->get<std::string>();
    }
    return e;
}

CalibrationTransfer transfer_from_json(const json& t) {
    if (!t.is_object()) throw InputError("calibration_from", "must be a JSON object {\"gpu\", \"why\"[, \"efficiency_scale\"]}");
    CalibrationTransfer c;
    for (const auto& [key, v] : t.items())
        if (key != "gpu" && key != "why" && key != "efficiency_scale")
            throw InputError("calibration_from." + key, "unknown key (gpu, why, efficiency_scale)");
    c.gpu = optional_string(t, "gpu", "");
    c.why = optional_string(t, "why", "");
    if (c.gpu.empty()) throw InputError("calibration_from.gpu", "must name the calibrated GPU (a catalog name)");
    if (c.why.empty()) throw InputError("calibration_from.why", "must say what the two GPUs share");
    if (auto sc = t.find("efficiency_scale"); sc != t.end()) {
        if (!sc->is_object()) throw InputError("calibration_from.efficiency_scale", "must be a JSON object");
        for (const auto& [key, v] : sc->items()) {
            const std::string subject = "calibration_from.efficiency_scale." + key;
            const std::string& name = key;  // clang before 16 cannot capture a structured binding (P1091)
            const bool known = std::any_of(std::begin(kEfficiencyKeys), std::end(kEfficiencyKeys),
                                           [&](const EfficiencyKey& k) { return k.scalable && name == k.key; });
            if (!known) throw InputError(subject, "not a scalable efficiency fraction");
            if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>()))
                throw InputError(subject, "must be a positive number");
            c.efficiency_scale[key] = v.get<double>();
        }
    }
    return c;
}

Efficiency scaled(Efficiency e, const std::map<std::string, double>& scale, const std::string& block) {
    for (const EfficiencyKey& k : kEfficiencyKeys) {
        auto it = scale.find(k.key);
        double& v = e.*k.member;
        if (!k.scalable || it == scale.end() || v == 0) continue;  // 0 = "the general figure": nothing to scale
        v *= it->second;
        if (!(v > 0 && v <= 1))
            throw InputError("calibration_from.efficiency_scale." + std::string(k.key),
                             "takes " + block + " " + k.key + " to " + std::to_string(v) + ", outside (0, 1]");
    }
    return e;
}

}  // namespace

nlohmann::json efficiency_to_json(const Efficiency& e) {
    nlohmann::json j = nlohmann::json::object();
    for (const EfficiencyKey& k : kEfficiencyKeys)
        if (!(k.zero_means_fallback && e.*k.member == 0)) j[k.key] = e.*k.member;
    return j;
}

GpuSpec apply_calibration_transfer(GpuSpec g, const GpuSpec& source) {
    if (!g.calibration_from) return g;
    const CalibrationTransfer t = *g.calibration_from;
    g.calibration_from.reset();
    if (source.calibration_from) throw InputError("calibration_from.gpu", source.name + " has a transfer pending itself");
    const std::string from = "transferred from " + source.name + " (" + t.why + ")";
    if (!g.own_efficiency) {
        g.efficiency = scaled(source.efficiency, t.efficiency_scale, "efficiency");
        g.efficiency.provenance = from + "; there: " + source.efficiency.provenance;
        g.efficiency_transferred_from = source.name;
    }
    if (!g.runtime && source.runtime) {
        RuntimeCalibration r = *source.runtime;
        r.efficiency = scaled(r.efficiency, t.efficiency_scale, "runtime");
        r.provenance = from + "; there: " + source.runtime->provenance;
        g.runtime = r;
    }
    return g;
}

std::string efficiency_origin(const GpuSpec& g) {
    if (!g.efficiency_transferred_from.empty()) return "from " + g.efficiency_transferred_from;
    return g.efficiency.provenance.rfind("fitted", 0) == 0 ? "fitted" : "defaults";
}

void drop_superseded_transfer(json& spec) {
    auto t = spec.find("calibration_from");
    if (t == spec.end() || !t->is_object()) return;
    const auto own = [&](const char* key) { return spec.contains(key) && !spec[key].is_null(); };
    if (own("efficiency")) t->erase("efficiency_scale");
    if (own("efficiency") && own("runtime")) spec.erase("calibration_from");
}

namespace {

// The keys of a GPU spec (data/gpus/*.json) and of its "runtime" block; any other is a typo
// that would leave a figure unknown or at its default without a word.
constexpr std::string_view kSpecKeys[] = {
    "name", "display_name", "architecture", "memory_bytes", "peak_fp32_flops_per_s", "peak_tf32_flops_per_s",
    "peak_bf16_flops_per_s", "peak_fp16_flops_per_s", "peak_fp8_flops_per_s", "hbm_bandwidth_bytes_per_s",
    "intra_node_bandwidth_bytes_per_s", "gpus_per_node", "inter_node_bandwidth_bytes_per_s", "overhead_bytes",
    "pcie_bandwidth_bytes_per_s", "efficiency", "sources", "runtime", "calibration_from"};
constexpr std::string_view kRuntimeKeys[] = {"efficiency", "overhead_bytes", "full_recompute_pool_slack_fraction",
                                             "provenance"};

template <std::size_t N>
void refuse_unknown_keys(const json& j, const std::string_view (&known)[N], const std::string& prefix) {
    for (const auto& [key, value] : j.items())
        if (std::find(std::begin(known), std::end(known), key) == std::end(known))
            throw InputError(prefix + key, "unknown key in a GPU spec");
}

}  // namespace

GpuSpec gpu_from_json(const json& j, const std::string& fallback_name) {
    if (!j.is_object()) throw InputError(fallback_name, "GPU spec must hold a JSON object");
    refuse_unknown_keys(j, kSpecKeys, "");
    GpuSpec g;
    g.name = optional_string(j, "name", fallback_name);
    if (g.name.empty()) throw InputError("name", "must be a non-empty name (or leave it out for the file's name)");
    g.display_name = optional_string(j, "display_name", g.name);
    g.architecture = optional_string(j, "architecture", "");
    require_printable_name(g.name, "name", j.contains("name") ? "the GPU's name" : "the GPU's name (its file's name)");
    require_printable_name(g.display_name, "display_name", "the GPU's display name");
    require_printable_name(g.architecture, "architecture", "the GPU's architecture");
    g.memory_bytes = bytes(j, "memory_bytes", false);
    g.peak.fp32_flops_per_s = optional_flops(j, "peak_fp32_flops_per_s");
    g.peak.tf32_flops_per_s = optional_flops(j, "peak_tf32_flops_per_s");
    g.peak.bf16_flops_per_s = optional_flops(j, "peak_bf16_flops_per_s");
    g.peak.fp16_flops_per_s = optional_flops(j, "peak_fp16_flops_per_s");
    g.peak.fp8_flops_per_s = optional_flops(j, "peak_fp8_flops_per_s");
    g.hbm_bandwidth_bytes_per_s = bandwidth(j, "hbm_bandwidth_bytes_per_s");
    g.intra_node_bandwidth_bytes_per_s = bandwidth(j, "intra_node_bandwidth_bytes_per_s");
    g.inter_node_bandwidth_bytes_per_s = bandwidth(j, "inter_node_bandwidth_bytes_per_s");
    auto it = j.find("gpus_per_node");
    // Read as a 64-bit value and range-checked: 4294967304 must not truncate to 8.
    if (it == j.end() || !it->is_number_integer() ||
        (it->is_number_unsigned() ? it->get<std::uint64_t>() == 0 : it->get<std::int64_t>() <= 0))
        throw InputError("gpus_per_node", "must be a positive integer");
    if (it->is_number_unsigned() ? it->get<std::uint64_t>() > static_cast<std::uint64_t>(limits::kMaxGpusPerNode)
                                 : it->get<std::int64_t>() > limits::kMaxGpusPerNode)
        throw InputError("gpus_per_node", shown_json(*it) + " exceeds the limit kMaxGpusPerNode = " +
                                              std::to_string(limits::kMaxGpusPerNode));
    g.gpus_per_node = static_cast<int>(it->get<std::int64_t>());
    g.overhead_bytes = bytes(j, "overhead_bytes", true);
    if (g.overhead_bytes >= g.memory_bytes)
        throw InputError("overhead_bytes", std::to_string(g.overhead_bytes) + " is not less than memory_bytes " +
                                               std::to_string(g.memory_bytes) + ": no memory would be left for training");
    // Optional key (older spec files lack it): absent or null = unknown.
    if (j.contains("pcie_bandwidth_bytes_per_s")) g.pcie_bandwidth_bytes_per_s = optional_bandwidth(j, "pcie_bandwidth_bytes_per_s");
    if (auto s = j.find("sources"); s != j.end() && s->is_object())
        for (const auto& [k, v] : s->items())
            if (v.is_string()) g.sources[k] = v.get<std::string>();
    g.efficiency = efficiency_from_json(j);
    g.own_efficiency = j.contains("efficiency") && !j["efficiency"].is_null();
    if (auto t = j.find("calibration_from"); t != j.end() && !t->is_null()) {
        g.calibration_from = transfer_from_json(*t);
        if (g.own_efficiency && !g.calibration_from->efficiency_scale.empty())
            throw InputError("calibration_from.efficiency_scale",
                             "scales a transferred \"efficiency\" block, and this spec has its own");
    }
    if (auto r = j.find("runtime"); r != j.end() && !r->is_null()) {
        if (!r->is_object()) throw InputError("runtime", "must be a JSON object");
        refuse_unknown_keys(*r, kRuntimeKeys, "runtime.");
        RuntimeCalibration rc;
        try {
            rc.efficiency = efficiency_from_json(*r);
            rc.overhead_bytes = bytes(*r, "overhead_bytes", true);
        } catch (const InputError& e) {
            throw InputError("runtime", e.what());  // "runtime: efficiency.<key>: ..."
        }
        if (auto f = r->find("full_recompute_pool_slack_fraction"); f != r->end()) {
            if (!f->is_number() || !(f->get<double>() >= 0 && f->get<double>() <= 4))
                throw InputError("runtime.full_recompute_pool_slack_fraction", "must be a number in [0, 4]");
            rc.full_recompute_pool_slack_fraction = f->get<double>();
        }
        if (auto p = r->find("provenance"); p != r->end()) {
            if (!p->is_string()) throw InputError("runtime.provenance", "must be a string");
            rc.provenance = p->get<std::string>();
        }
        g.runtime = rc;
    }
    return g;
}

KernelEfficiency kernel_efficiency(const Efficiency& e, Precision precision, bool fused_attention, Fp8Kernels fp8) {
    KernelEfficiency k{e.gemm_max_fraction_of_peak, e.gemm_half_efficiency_dim, e.attention_fraction_of_peak, 0};
    if (precision == Precision::fp8_mixed) {
        // Each figure falls back to the one before it when the spec has none (0).
        const double dynamic = e.fp8_dynamic_gemm_max_fraction_of_peak > 0 ? e.fp8_dynamic_gemm_max_fraction_of_peak
                                                                           : e.fp8_gemm_max_fraction_of_peak;
        const double rowwise = e.fp8_rowwise_gemm_max_fraction_of_peak > 0 ? e.fp8_rowwise_gemm_max_fraction_of_peak
                                                                           : dynamic;
        k.fp8_gemm_max_fraction_of_peak = fp8.scaling == Fp8Scaling::rowwise ? rowwise
                                          : fp8.dynamic_scaling              ? dynamic
                                                                             : e.fp8_gemm_max_fraction_of_peak;
    }
    if (fused_attention && e.fused_attention_fraction_of_peak > 0)
        k.attention_fraction_of_peak = e.fused_attention_fraction_of_peak;
    if (precision == Precision::fp32) {
        if (e.fp32_gemm_max_fraction_of_peak > 0) k.gemm_max_fraction_of_peak = e.fp32_gemm_max_fraction_of_peak;
        if (e.fp32_gemm_half_efficiency_dim > 0) k.gemm_half_efficiency_dim = e.fp32_gemm_half_efficiency_dim;
        if (e.fp32_attention_fraction_of_peak > 0) k.attention_fraction_of_peak = e.fp32_attention_fraction_of_peak;
    }
    return k;
}

AttentionRate attention_rate(const GpuSpec& gpu, const Plan& p, const ThroughputOptions& opt,
                             double fallback_peak_flops_per_s) {
    const Efficiency& e = gpu.efficiency;
    if (opt.attention_on_fp32_units && p.attention == AttentionKind::flash && gpu.peak.fp32_flops_per_s)
        return {*gpu.peak.fp32_flops_per_s, kernel_efficiency(e, Precision::fp32).attention_fraction_of_peak};
    // Attention kernels run in the activation dtype (fp8 recipes keep attention in bf16).
    const std::optional<double> peak = p.precision == Precision::fp32         ? gpu.peak.fp32_flops_per_s
                                       : p.precision == Precision::fp16_mixed ? gpu.peak.fp16_flops_per_s
                                                                              : gpu.peak.bf16_flops_per_s;
    return {peak.value_or(fallback_peak_flops_per_s),
            kernel_efficiency(e, p.precision, opt.fused_attention).attention_fraction_of_peak};
}

}  // namespace preflight
