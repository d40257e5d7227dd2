// One decoder layer as Hugging Face transformers' eager modules run it under plain PyTorch
// (the pytorch profile): every elementwise op a kernel of its own with its own pass over HBM,
// autocast's casts, and the kernels autograd launches for their backward. The step-time model
// (throughput.cpp) charges these bytes at the memory-bound rate and these launches at the
// profile's host time per kernel.
#pragma once

#include <cstdint>

#include "preflight/planner/model.hpp"
#include "preflight/planner/plan.hpp"

namespace preflight::eager {

// One layer, one micro-batch.
struct LayerKernels {
    double fwd_bytes = 0;   // HBM bytes of the forward's non-GEMM, non-attention ops
    double bwd_bytes = 0;   // of their backward (autograd's kernels, gradient sums and casts)
    std::int64_t fwd_kernels = 0;  // launches in the forward, GEMMs and attention kernels included
    std::int64_t bwd_kernels = 0;  // launches in the backward
    // Eager attention: the bytes of the ops over the s x s scores (scale, mask, softmax, casts),
    // apart from the two figures above; 0 under SDPA, where one kernel does all of it.
    double score_fwd_bytes = 0, score_bwd_bytes = 0;
};

// The layer of a dense GPT-2 (LayerNorm, gelu_new, Conv1D with biases) or Llama-like model
// (RMSNorm, RoPE, SwiGLU) on one GPU (tp = 1). `autocast`: torch.autocast(bfloat16) over fp32
// parameters (the mixed recipes); otherwise every tensor is at the recipe's activation width.
LayerKernels hf_layer_kernels(const ModelConfig& m, const Plan& p, bool autocast);

}  // namespace preflight::eager
