// The plan command's JSON pieces (plan_json.hpp).
#include "plan_json.hpp"

#include <cmath>
#include <cstdint>

namespace preflight::cli {

nlohmann::json throughput_json(const Throughput& t) {
    nlohmann::json b = nlohmann::json::array();
    for (const auto& s : t.breakdown) b.push_back({{"name", s.name}, {"seconds", s.seconds}});
    nlohmann::json j = {{"step_time_s", t.step_time_s},
            {"tokens_per_s", t.tokens_per_s},
            {"tokens_per_s_per_gpu", t.tokens_per_s_per_gpu},
            {"mfu", t.mfu},
            {"hfu", t.hfu},
            {"model_flops_per_step", t.model_flops_per_step},
            {"hardware_flops_per_step", t.hardware_flops_per_step},
            {"peak_flops_per_s", t.peak_flops_per_s},
            {"gpus", t.gpus},
            {"tokens_per_step", t.tokens_per_step},
            {"breakdown", b}};
    if (t.offload_s > 0 || t.pcie_bytes_per_step > 0) {  // offload only
        j["offload_s"] = t.offload_s;
        // A byte figure is a whole number (docs/interface.md); past 2^62 it is no figure at all.
        const double pcie = std::round(t.pcie_bytes_per_step);
        j["pcie_bytes_per_step"] = std::isfinite(pcie) && pcie < 0x1p62 ? nlohmann::json(static_cast<std::int64_t>(pcie)) : nlohmann::json();
    }
    if (t.cp_ep_communication_s > 0) j["cp_ep_communication_s"] = t.cp_ep_communication_s;
    if (t.host_dispatch)  // --framework pytorch: every kernel's launch counted
        j["host_dispatch"] = {{"kernels_per_layer", t.host_dispatch->kernels_per_layer},
                              {"per_kernel_s", t.host_dispatch->per_kernel_s},
                              {"layer_device_s", t.host_dispatch->layer_device_s},
                              {"layer_slots", t.host_dispatch->layer_slots}};
    return j;
}

nlohmann::json lr_json(const LrAdvice& a) {
    // Token counts are whole numbers (lr_advice refuses a fractional base batch; --gbs-tokens is an integer).
    return {{"base_lr", a.base_lr},
            {"base_batch_tokens", static_cast<std::int64_t>(a.base_batch_tokens)},
            {"batch_tokens", static_cast<std::int64_t>(a.batch_tokens)},
            {"ratio", a.ratio},
            {"linear", {{"lr", a.linear.lr}, {"source", a.linear.source}}},
            {"square_root", {{"lr", a.square_root.lr}, {"source", a.square_root.source}}},
            {"preferred_rule", a.preferred == "linear" ? "linear" : "square_root"},  // a key of lr_advice
            {"warmup_steps", a.warmup_steps},
            {"warmup_tokens", static_cast<std::int64_t>(a.warmup_tokens)},
            {"warmup_source", a.warmup_source},
            {"caveat", a.caveat},
            {"warnings", a.warnings}};
}

}  // namespace preflight::cli
