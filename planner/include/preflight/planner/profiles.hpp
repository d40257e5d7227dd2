// Framework profiles: what a given training framework really keeps beyond the
// analytic minimum. The default FrameworkProfile{} describes Megatron-LM; this
// file adds the profile of Preflight's own CUDA runtime (runtime/), whose buffers
// are designed to follow the planner's per-layer inventory.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "preflight/planner/memory.hpp"
#include "preflight/planner/qk_norm_groups.hpp"

namespace preflight {

// Design constants of the Preflight runtime, shared by the runtime (which
// allocates them) and its planner profile (which models them). Never measured.
// cuBLASLt workspace: NVIDIA recommends 32 MiB on Hopper (cuBLAS docs, cublasSetWorkspace).
inline constexpr std::int64_t kRuntimeGemmWorkspaceBytes = 32 * kMiB;
// Device scalars: the step's summed loss and room for a few more counters.
inline constexpr std::int64_t kRuntimeScalarsBytes = 256;
// Vocabulary padded to a multiple of 128 rows so the LM-head GEMMs stay aligned (as llm.c / Megatron).
inline constexpr std::int64_t kRuntimeVocabPadMultiple = 128;
// fp8-mixed: a layer GEMM's kept transposed input carries its amax and dequantization factor
// (2 x fp32) after its elements, for its weight gradient (runtime/src/program_fp8.cpp).
inline constexpr std::int64_t kRuntimeFp8KeptScaleBytes = 8;

// Flash-attention backward workspace of the runtime for 16-bit activations, sized for
// cuDNN's fused flash attention backward: an fp32 dQ accumulator [b, heads, s, d] and the
// fp32 softmax sum rowsum(dO * O) [b, heads, s] (cudnn-frontend,
// scaled_dot_product_flash_attention.h, CompositeSDPABackwardNode: dQ_accum and
// softmax_sum). With grouped-query attention (heads > kv_heads) the backward engine also asks
// for its own workspace, which the runtime keeps here after the accumulator (256-byte
// aligned): runtime_cudnn_gqa_engine_workspace_bytes. Other engine workspace comes from the
// cuBLASLt workspace (one stream: never in use at once). The runtime's own kernel (fp32 path,
// or when cuDNN is absent) uses the first b*heads*s floats, so the memory is the same
// whichever runs; under context parallelism, where cuDNN never runs, only those floats are
// allocated (`own_kernel`).
inline constexpr std::int64_t kRuntimeCudnnAlignBytes = 256;

// cuDNN 9's GQA backward engine workspace: b*heads*s*d*4 + 256 bytes (measured on an H100 with
// cuDNN 9.19: 67,109,120 B for b 4, 32 query heads on 8 KV heads, s 2048, d 64: an fp32
// [b, heads, s, d] buffer, the K/V gradients per query head before the group reduction, plus
// 256); 0 for MHA, whose engines need 256 B.
inline std::int64_t runtime_cudnn_gqa_engine_workspace_bytes(std::int64_t b, std::int64_t heads,
                                                             std::int64_t kv_heads, std::int64_t s,
                                                             std::int64_t head_dim) {
    return heads > kv_heads ? b * heads * s * head_dim * 4 + kRuntimeCudnnAlignBytes : 0;
}

// Bytes of the dQ accumulator and softmax sum, rounded up so an engine region can follow.
inline std::int64_t runtime_flash_bwd_accumulator_bytes(std::int64_t b, std::int64_t heads, std::int64_t s,
                                                        std::int64_t head_dim) {
    const std::int64_t raw = b * heads * s * (head_dim + 1) * 4;
    return (raw + kRuntimeCudnnAlignBytes - 1) / kRuntimeCudnnAlignBytes * kRuntimeCudnnAlignBytes;
}

// `own_kernel`: the runtime's kernel runs whatever the dtype (context parallelism never uses cuDNN).
inline std::int64_t runtime_flash_bwd_workspace_bytes(std::int64_t b, std::int64_t heads, std::int64_t kv_heads,
                                                      std::int64_t s, std::int64_t head_dim, int activation_bytes,
                                                      bool own_kernel = false) {
    if (activation_bytes == 4 || own_kernel) return b * heads * s * 4;  // the kernel's D = rowsum(dO * O)
    return runtime_flash_bwd_accumulator_bytes(b, heads, s, head_dim) +
           runtime_cudnn_gqa_engine_workspace_bytes(b, heads, kv_heads, s, head_dim);
}

// Profile of the Preflight CUDA runtime ("preflight-runtime"):
//  - optimizer moments allocated at set-up (not lazily),
//  - logits at the activation dtype, cross-entropy writes its gradient in place (no fp32 copy;
//    its fp32 loss per token is freed before the head's backward), and d(final-norm output)
//    allocated while the logits gradient lives,
//  - norm statistics recomputed in backward (not kept),
//  - full recompute shares the kept layer input,
//  - the GEMM workspace and device scalars as buffers, vocabulary padded to 128,
//  - the flash-attention backward workspace (runtime_flash_bwd_workspace_bytes).
FrameworkProfile runtime_profile();

// The runtime's fp8-mixed recipe (runtime/src/program_fp8.cpp) runs per-tensor (tensorwise)
// scaling and GEMM dimensions that are multiples of 16 (cuBLASLt's fp8 GEMMs), a tensor-parallel
// rank's slices of them included. Throws InputError naming the flag otherwise; the
// runtime's check_supported and the preflight-runtime profile (FrameworkProfile::check_plan) both
// call it. Other precisions pass.
void check_runtime_fp8(const ModelConfig& model, const Plan& plan);
// The runtime's pipeline (runtime/src/program_microbatch.cpp, program_interleaved.cpp) runs 1F1B or
// interleaved 1F1B (every model chunk with a layer), not GPipe; with a tied word embedding ZeRO-2/3 keep that unit's 16-bit gradients all step (its two copies
// are summed after the last micro-batch), so not under a recipe that accumulates in fp32. Throws
// InputError naming the flag otherwise; pp 1 passes.
void check_runtime_pipeline(const ModelConfig& model, const Plan& plan);
// The models the runtime executes: dense (no mixture of experts), head_dim at most 128 (and even
// under RoPE), llama3 RoPE scaling or none, the MLP nonlinearity its kernels compute. Throws
// InputError naming the flag or config key otherwise (planner/src/runtime_support.cpp).
void check_runtime_model(const ModelConfig& model);
// The plans the runtime executes: its pipeline and fp8 rules above, no fp16-mixed, no dropout,
// full pre-training only (no LoRA/QLoRA, offload; ep for mixtures of experts; cp for RoPE models), and its
// bound on one step's work (limits::kMaxRuntimeRepeatedLayerSteps micro-batches x layers of a stage).
// The runtime's check_supported
// and the preflight-runtime profile's check_plan.
void check_runtime_plan(const ModelConfig& model, const Plan& plan);

// The GPU as a profile sees it: for preflight-runtime, the spec's own constants for that runtime
// (GpuSpec::runtime: step-time efficiency, non-tensor memory) replace the generic ones; any
// other profile, or a spec without the block, unchanged. `preflight run`, `memory` and `plan` all
// predict the runtime through this one function. The block's pool slack is not taken: the runtime
// plans its memory as one arena (runtime::predict adds the slack for `--allocator pool` runs).
GpuSpec gpu_for_profile(const GpuSpec& gpu, const FrameworkProfile& profile);

// Profile of plain PyTorch training a Hugging Face transformers model on one GPU
// ("pytorch"; validation/pytorch/train.py; dp, tp, pp, cp, ep > 1, ZeRO and fp16/fp8 refused): torch.autocast over fp32 parameters for the
// mixed recipes (fp32 gradients, no master copy, fp32 residual stream, cached 16-bit
// weight copies), HF's eager modules' saved tensors, SDPA flash or eager attention,
// unfused fp32 cross-entropy over the logits, torch.optim.AdamW (lazy moments in the
// parameter dtype, foreach step temporaries) and the caching allocator's 512-byte
// rounding. No framework workspaces: PyTorch's cuBLAS workspace is left to the overhead.
FrameworkProfile pytorch_profile();
// PyTorch caching allocator: every block is a multiple of 512 bytes (kMinBlockSize in
// c10/cuda/CUDACachingAllocator.cpp); allocations of 1 MiB or less come from 2 MiB
// segments, larger ones are rounded to 2 MiB (kRoundLarge) when reserved.
inline constexpr std::int64_t kTorchBlockBytes = 512;
inline constexpr std::int64_t kTorchSegmentBytes = 2 * kMiB;

// Megatron-LM ("megatron", the default): FrameworkProfile's defaults, with its even pipeline split
// (pipeline_split_divides_layers).
FrameworkProfile megatron_profile();
// Why the framework would refuse a 1F1B pipeline of `pp` stages over the model's layers (empty when
// it runs it): under a profile with pipeline_split_divides_layers, pp must divide the layers.
std::string pipeline_split_problem(const FrameworkProfile& profile, const ModelConfig& model, const Plan& plan);
// The same for every schedule of a pp-stage pipeline (empty when one runs it): a pp that splits
// layers + 2 may still run interleaved, the embedding and the loss taking a slot each (the search
// keeps those plans and drops the 1F1B ones: drop_unlaunchable_pipelines).
std::string pipeline_degree_problem(const FrameworkProfile& profile, const ModelConfig& model, std::int64_t pp);

// The names profile_by_name takes (--framework), the default "megatron" first.
std::vector<std::string> framework_names();
// Profile by name ("megatron" = the default, "preflight-runtime", "pytorch", "nanotron",
// "torchtitan", "deepspeed"; frameworks.hpp); nullopt if unknown.
std::optional<FrameworkProfile> profile_by_name(std::string_view name);

// The recipe a plan that names none starts from: bf16-mixed, or the framework's first recipe when
// it does not run bf16-mixed (nanotron: bf16-mixed-fp32-grads). `memory`/`plan` without
// --precision, the explorer's Framework control and its --plan file all take it.
Precision default_precision(const FrameworkProfile& profile);
// Whether the framework runs `precision` (FrameworkProfile::precisions empty: every recipe).
bool runs_precision(const FrameworkProfile& profile, Precision precision);

}  // namespace preflight
