// The activation inventory of one decoder layer (Korthikanti et al. 2022, sec. 4.1,
// generalised to GQA, SwiGLU, MoE and flash attention; Hugging Face eager modules under a
// profile), what full recompute keeps, and the within-layer working memory. Internal to
// the planner: memory.cpp builds the pipeline stages from these.
#pragma once

#include <cstdint>
#include <vector>

#include "preflight/planner/memory.hpp"

namespace preflight::activations {

// The dimensions one layer's activations are sized by.
struct ActivationDims {
    std::int64_t seq, micro_batch, hidden, q_width, kv_width, ffn_hidden, heads, tp;
    bool sp;
    int activation_bytes, gemm_input_bytes;  // activation / saved-GEMM-input bytes per element
    int residual_bytes;  // residual-stream element bytes (activation_bytes, or 4 under autocast with fp32 parameters)
};

// Profile addition: a mixed recipe run under torch.autocast with fp32 parameters.
bool runs_amp(const FrameworkProfile& prof, const Plan& p);
ActivationDims activation_dims(const ModelConfig& m, const Plan& p, const FrameworkProfile& prof);
// Full per-layer saved set, before recompute filtering.
std::vector<ActivationTensor> full_inventory(const ModelConfig& m, const Plan& p, const FrameworkProfile& prof);
std::int64_t sum_bytes(const std::vector<ActivationTensor>& v);
// Whether torchtitan's op-level selective recompute is modelled for the model: SwiGLU dense
// models (the mm order the policy counts); others keep Korthikanti et al.'s selective recompute.
bool op_sac_applies(const ModelConfig& m);
// What a layer keeps under that policy (FrameworkProfile::selective_op_sac); empty where
// op_sac_applies is false.
std::vector<ActivationTensor> op_sac_inventory(const ModelConfig& m, const Plan& p, const ActivationDims& d);
// What a layer keeps for backward out of its full saved set under the plan's recompute.
std::vector<ActivationTensor> kept_for_backward(std::vector<ActivationTensor> full, const ModelConfig& model,
                                                const Plan& plan, const FrameworkProfile& profile);
// Layer input kept under full recompute (Korthikanti et al. 2022, sec. 4.3, eq. 5).
std::int64_t layer_input_bytes(const ActivationDims& d);
// Within-layer working memory of the forward and of the backward.
std::int64_t forward_transient(const ModelConfig& m, const Plan& p, const ActivationDims& d);
std::int64_t backward_transient(const ModelConfig& m, const Plan& p, const ActivationDims& d);

}  // namespace preflight::activations
