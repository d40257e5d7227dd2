// The groups the runtime's q/k RMSNorms normalise (runtime/kernels/head_norm.cu), shared by the
// runtime, which runs them, and its planner profile, which sizes their scratch. Plain integers only,
// so that nvcc compiles it beside the kernels.
#pragma once

#include <algorithm>
#include <cstdint>

namespace preflight {

// Per token, Q's columns of a fused q|k|v row split into q_groups groups of q_width, then K's into
// k_groups of k_width; each group has its own RMS and every group of a kind shares one weight of its
// width. Qwen3 (Qwen3Attention q_norm / k_norm over head_dim): a group per head. OLMo 2 and OLMoE
// (Olmo2Attention, OlmoeAttention: q_norm over num_heads x head_dim, k_norm over num_key_value_heads
// x head_dim): one group spanning the whole q projection and one the whole k projection.
struct QkNormGroups {
    std::int64_t q_groups = 0, q_width = 0, k_groups = 0, k_width = 0;
    std::int64_t per_row() const { return q_groups + k_groups; }
    std::int64_t columns() const { return q_groups * q_width + k_groups * k_width; }  // a row's Q|K columns
    std::int64_t weights() const { return q_width + k_width; }  // the q and k norm weights' elements
};

inline QkNormGroups qk_norm_groups(bool whole_projection, std::int64_t heads, std::int64_t kv_heads,
                                   std::int64_t head_dim) {
    if (whole_projection) return {1, heads * head_dim, 1, kv_heads * head_dim};
    return {heads, head_dim, kv_heads, head_dim};
}

// The backward's weight-gradient column sums run over `slices` blocks of groups each (at least 512
// groups a slice, at most 256 slices: many blocks, where one block per 32 columns would walk 2^17
// groups for Qwen3-8B's 4,096 tokens), whose fp32 partial sums then add up in slice order
// (deterministic).
inline std::int64_t runtime_head_norm_slices(std::int64_t rows, const QkNormGroups& g) {
    return std::clamp<std::int64_t>((rows * g.q_groups + 511) / 512, 1, 256);
}
// Its scratch: each group's fp32 rstd, then each slice's partial sums of the q and k weights (fp32).
inline std::int64_t runtime_head_norm_scratch_elements(std::int64_t rows, const QkNormGroups& g) {
    return rows * g.per_row() + runtime_head_norm_slices(rows, g) * g.weights();
}

}  // namespace preflight
