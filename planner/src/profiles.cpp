#include "preflight/planner/profiles.hpp"

namespace preflight {

FrameworkProfile runtime_profile() {
    FrameworkProfile p;
    p.name = "preflight-runtime";
    p.grad_bucket_bytes = 0;  // one GPU: no data-parallel buckets
    p.grad_buckets_in_flight = 0;
    p.lazy_optimizer_state = false;
    p.logits_fp32_copy = false;
    p.norm_row_stats = false;
    p.vocab_pad_multiple = kRuntimeVocabPadMultiple;
    p.workspace_bytes = kRuntimeGemmWorkspaceBytes + kRuntimeScalarsBytes;
    p.head_input_grad_with_logits = true;
    p.full_recompute_shares_input = true;
    return p;
}

std::optional<FrameworkProfile> profile_by_name(std::string_view name) {
    if (name == "megatron") return FrameworkProfile{};
    if (name == "preflight-runtime") return runtime_profile();
    return std::nullopt;
}

}  // namespace preflight
