// Internal to the planner's memory model (memory.cpp, memory_runtime.cpp): one pipeline stage
// as the phase snapshots see it, and the terms of the Preflight runtime's profile.
#pragma once

#include <cstdint>
#include <vector>

#include "activations.hpp"
#include "preflight/planner/memory.hpp"

namespace preflight::memory_detail {

// Parameter element counts of one stage (TP-local), summed over the tensors it owns.
struct StageParamElements {
    std::int64_t flat = 0;         // every element
    std::int64_t zero3 = 0;        // ZeRO-3's per-tensor shards
    std::int64_t gemm = 0;         // GEMM weights with an fp8 copy (this expert-parallel rank's experts)
    std::int64_t gemm_zero3 = 0;   // their ZeRO-3 shards
    std::int64_t layer_local = 0;  // one decoder layer (this rank's experts under ep)
    std::int64_t head_local = 0;   // the LM head (or the tied embedding) on the last stage
    std::int64_t embed_local = 0;  // the embeddings (token, and learned positions) on the first stage
    bool head_is_embedding = false;  // a tied LM head on the stage that also looks tokens up
    std::int64_t outside_layers = 0;  // embeddings, final norm, LM head (a tied copy on the last stage)
};

// Profile (deepspeed_zero_optimizer, memory_deepspeed.cpp): which DeepSpeed optimizer holds the
// gradients, their lifetimes and its buffers, phase by phase (none: the generic terms).
enum class DeepSpeedOptimizer { none, unsharded, zero12, zero3 };
struct DeepSpeedStage {
    DeepSpeedOptimizer kind = DeepSpeedOptimizer::none;  // unsharded: FP16_Optimizer, BF16_Optimizer, bare
    bool zero_one = false;           // zero12: ZeRO-1 (reduces only at the accumulation boundary)
    bool overlap_comm = true;        // zero12: the hooks reduce as backward goes (ZeRO-1: at the boundary)
    std::int64_t grad_acc = 1;
    std::int64_t full_grads = 0;     // every 16-bit param.grad of the stage
    std::int64_t layer_grads = 0, head_grads = 0, embed_grads = 0;  // one layer's, the LM head's, the embeddings'
    std::int64_t tensor_grads = 0;   // the largest layer tensor's (one expert's)
    std::int64_t tied_head_grads = 0;  // a tied embedding's: the LM head's part, held through backward
    std::int64_t persistent_grads = 0;  // BF16_Optimizer's flat high-precision gradient buffer
    std::int64_t partition_grads = 0;   // ZeRO-1/2 grads_in_partition (the busiest rank's)
    std::int64_t ipg_buffers = 0;       // ZeRO-1/2: the two reduce buckets (contiguous_gradients, overlap_comm)
    // ZeRO-1: gradients of tensors above a bucket, kept to the epilogue (one layer's, summed)
    std::int64_t large_head_grads = 0, large_embed_grads = 0, large_layer_grads = 0;
    std::int64_t reduce_buffer = 0;     // the engine's all-reduce copy (flattened, or cast to bf16)
    std::int64_t step_copies = 0;       // the optimizer step's gradient copies (or overflow check), at their widest
    std::int64_t offload_overflow_check = 0;  // zero12 offload: one partition gradient's overflow check, in backward
    bool moments_at_init = false;       // FP16_Optimizer: the moments exist before the first step
};

// Everything about one pipeline stage that the phase snapshots need.
struct StageModel {
    std::int64_t layers = 0;
    bool first = false, last = false;
    std::int64_t in_flight = 1;       // micro-batches whose activations are held at once
    std::int64_t params_local = 0;    // after TP/PP, before ZeRO
    ModelStateBytes states;           // steady state, after ZeRO
    std::int64_t act_layer = 0;       // kept per layer per micro-batch
    std::int64_t act_layer_full = 0;  // full saved set (re-created during backward under full recompute)
    std::int64_t fwd_transient = 0;   // within-layer working memory in forward
    std::int64_t bwd_transient = 0;   // within-layer working memory in backward
    std::int64_t act_embed = 0;       // first stage: token ids, embedding dropout mask
    std::int64_t act_head = 0;        // last stage: final-norm input/output, labels
    std::int64_t logits_peak = 0;     // output+loss working set
    std::int64_t static_buffers = 0;  // RoPE tables, fp8 scaling state
    std::int64_t gather_layer = 0;    // ZeRO-3: one layer's gathered weights
    std::int64_t gather_head = 0;     // ZeRO-3: gathered LM head / embedding
    // Profile, ZeRO-3: gathered weights held from forward through backward whatever the layer (FSDP
    // with pp > 1: every parameter of the stage; DeepSpeed: its prefetcher's live parameters).
    std::int64_t gather_stage = 0;
    std::int64_t grad_accum_stage = 0;  // profile, ZeRO-3 with pp > 1: unsharded gradients accumulated over micro-batches
    std::int64_t layer_grad_bytes = 0;  // ZeRO-3: a layer's full grads before reduce-scatter
    std::int64_t gather_prefetch_layers = 1;  // ZeRO-3: layers gathered ahead of the current one
    // Profile (megatron_fsdp), ZeRO-2/3: one layer's full-size gradient bucket, and how many of
    // them the reduce-scatter queue holds beside the one being computed.
    std::int64_t fsdp_grad_unit_bytes = 0;
    std::int64_t fsdp_queue_units = 0;
    // ... the LM head's bucket, live through the first this-many layers of backward, and the
    // queue with the embedding's bucket once backward ends.
    std::int64_t fsdp_head_grad_bytes = 0;
    std::int64_t fsdp_head_backward_layers = 0;
    std::int64_t fsdp_end_of_backward_bytes = 0;
    std::int64_t grad_buckets = 0;    // data-parallel gradient buckets in flight
    std::int64_t autocast_layer = 0;  // profile: one layer's autocast 16-bit weight copies
    std::int64_t autocast_head = 0;   // profile: the LM head's autocast copy
    std::int64_t optimizer_temp = 0;  // profile: optimizer-step temporaries
    bool full_recompute = false;
    std::int64_t overhead = 0;
    std::int64_t pool_slack = 0;  // profile: the device pool's slack under full recompute
    ZeroStage zero = zero_none;
    std::int64_t host_bytes = 0;            // offloaded states (extensions.hpp)
    std::int64_t earlier_layer_units = -1;  // interleaved schedule: layer activations held from earlier chunks
    // Profile (runtime_shard_units): the runtime's ZeRO-2/3 unreduced unit gradients (the unit
    // being computed and the one before it, being reduce-scattered), its ZeRO-3 gathered
    // embedding, and what its embedding ops hold beside them (runtime_embedding_points).
    bool runtime_units = false;
    std::int64_t unit_grad_layer = 0, unit_grad_output = 0, unit_grad_embed = 0;
    std::int64_t gather_embed = 0;
    std::int64_t unit_fp8_layer = 0;  // ZeRO-3 fp8: the layer's fp8 weight cache, cast after each gather of it
    std::int64_t tied_unit_grads = 0;  // ZeRO-2/3, pp > 1: the tied embedding's unit gradients, step start to grad_reduce
    std::int64_t embed_fwd_act = 0;   // the embedding's output ([s, b, h]: layer 1's input, or its partial sums)
    std::int64_t embed_fwd_rows = 0;  // sequence parallelism: the rank's rows of layer 1's input beside them
    std::int64_t embed_bwd_act = 0;  // the residual gradient the embedding's backward reads
    // Profile (runtime_units), interleaved schedule: each model chunk of the stage runs as a pass
    // of its own (first/last: it begins or ends the model; layers; its first stage layer), beside
    // the most that the stage's other chunk micro-batches hold during its forwards and its
    // backwards (runtime_chunk_views). `earlier_fwd` >= 0 marks a view: snapshot takes it, or
    // `earlier_bwd` in backward, as the bytes held from earlier passes.
    struct ChunkView {
        bool first = false, last = false;
        std::int64_t layers = 0, first_layer = 1, earlier_fwd = 0, earlier_bwd = 0;
        std::size_t backward_at = 0;  // the step whose backward first holds earlier_bwd beside it
    };
    std::vector<ChunkView> chunk_views;
    std::int64_t earlier_fwd = -1, earlier_bwd = -1;
    bool output_grads_freed_in_forward = false;  // a view: ZeRO-2/3 wait for the head's reduction in its forward
    std::size_t view_backward_at = 0;  // a view: its ChunkView::backward_at
    DeepSpeedStage deepspeed;
    // Profile (grads_set_to_none): the gradients each phase holds (with_autograd_grads), from the
    // padded bytes backward allocates for the LM head side (final norm, head or tied embedding)
    // and for one layer.
    struct AutogradGrads {
        bool on = false;
        std::int64_t grad_acc = 1;
        std::int64_t head_side = 0, per_layer = 0;
    };
    AutogradGrads autograd;
};

// Bytes an allocation of `bytes` is rounded up by, to a multiple of the profile's granularity
// (FrameworkProfile::allocation_granularity_bytes; 0 = none): each state tensor is its own allocation.
inline std::int64_t allocation_padding(std::int64_t bytes, std::int64_t granularity) {
    return granularity > 0 ? (granularity - bytes % granularity) % granularity : 0;
}

// A tensor's elements on one tensor-parallel rank (vocabulary padded to pad_multiple x tp).
std::int64_t tp_local_numel(const ParamTensor& p, std::int64_t tp, std::int64_t vocab_pad);
// Profile (deepspeed_zero_optimizer, memory_deepspeed.cpp): DeepSpeed's terms for the stage, and
// a phase's snapshot with them.
void add_deepspeed_terms(StageModel& st, const ModelConfig& m, const Plan& p, const FrameworkProfile& prof,
                         const std::vector<ParamTensor>& tensors, const StageParamElements& params);
MemoryBreakdown with_deepspeed_phase(const StageModel& st, const Phase& ph, MemoryBreakdown b);

// Profile (megatron_fsdp, memory_fsdp.cpp): Megatron-FSDP's ZeRO-2/3 terms for the stage.
void add_megatron_fsdp_buffers(StageModel& st, const Plan& p, const FrameworkProfile& prof,
                               const StageParamElements& params);
// Data-parallel gradient buckets (memory_fsdp.cpp): the profile's DDP buckets in flight, or the
// whole gradient copy PyTorch DDP keeps (FrameworkProfile::ddp_gradient_bucket_copy).
void add_ddp_buckets(StageModel& st, const Plan& p, const FrameworkProfile& prof, const StageParamElements& params);
// Transformer Engine's userbuffers under --tp-comm-overlap (MemoryOptions::tp_comm_overlap,
// memory_fsdp.cpp); 0 without it, without tensor or sequence parallelism.
std::int64_t te_userbuffer_bytes(const Plan& p, const ModelConfig& m, const MemoryOptions& opt);
// Megatron-LM's LM head under sequence parallelism (FrameworkProfile::sp_head_gather_buffer): the
// global memory buffer its input is all-gathered into, on the last stage (`last`), held all run.
std::int64_t sp_head_gather_bytes(const Plan& p, const ModelConfig& m, const FrameworkProfile& prof, bool last);
// Temporaries of the optimizer step over `stepped` elements (memory_fsdp.cpp): the profile's
// moment-sized ones, and Megatron-LM's fp32 copy of 16-bit main gradients outside Megatron-FSDP.
std::int64_t optimizer_step_temp_bytes(const Plan& p, const FrameworkProfile& prof, const PrecisionBytes& state_pb,
                                       std::int64_t stepped, int moment_bytes);
// Profile (fsdp2_fp32_grad_shards, memory_fsdp.cpp): PyTorch FSDP2's shards beside ZeRO-2's gathered weights.
void add_fsdp2_shards(StageModel& st, const Plan& p, const StageParamElements& params);

// Profile (grads_set_to_none, memory_autograd.cpp): the gradient bytes autograd allocates in
// backward (StageModel::autograd), and a phase's breakdown with the gradients it holds then.
void add_autograd_grads(StageModel& st, const ModelConfig& m, const Plan& p, const FrameworkProfile& prof,
                        const std::vector<ParamTensor>& tensors);
MemoryBreakdown with_autograd_grads(const StageModel& st, const Phase& ph, MemoryBreakdown b);

// Profile (runtime_shard_units, memory_runtime.cpp): the runtime's ZeRO buffers for the stage.
void add_runtime_unit_buffers(StageModel& st, const ModelConfig& m, const Plan& p, const FrameworkProfile& prof);
// Profile (runtime_units): a layer-1 phase's peak, the embedding ops' included.
MemoryBreakdown with_embedding_point(const StageModel& st, const Phase& ph, const MemoryBreakdown& layer_point,
                                     std::int64_t earlier);
// Profile (fp8_runtime_recipe): the widest point of a layer's backward with its fp8 gradient casts.
std::int64_t runtime_fp8_backward_transient(const ModelConfig& m, const activations::ActivationDims& d);
// A layer's backward working memory under the profile's own kernels and buffers (memory_runtime.cpp):
// `generic` (activations.cpp backward_transient) or the larger of the runtime's flash attention, fp8
// casts, MoE MLP and sequence-parallel gathers where the profile has them.
std::int64_t profile_backward_transient(const ModelConfig& m, const Plan& p, const FrameworkProfile& prof,
                                        const activations::ActivationDims& d, std::int64_t generic);
// Profile (runtime_units), interleaved schedule: the stage's chunk views, from the runtime's
// steps (interleaved_stage_steps) and what a chunk micro-batch holds between its forward and its
// backward: its layers' activations, the token ids on the model's first chunk, the residual
// gradient of the loss on the model's last (runtime/src/program_interleaved.cpp); beside them the
// activations and gradients received ahead of their passes and the outputs not yet sent.
std::vector<StageModel::ChunkView> runtime_chunk_views(const StageModel& st, const ModelConfig& m, const Plan& p,
                                                       std::int64_t stage);
// A chunk view's own stage model: the view's placement, layers and earlier bytes on st's states.
StageModel chunk_view_model(const StageModel& st, const StageModel::ChunkView& v);
std::int64_t runtime_sp_backward_transient(const ModelConfig& m, const Plan& p, const activations::ActivationDims& d);
// Profile (flash_bwd_workspace): a layer's transient bytes during flash attention's backward.
std::int64_t runtime_flash_backward_transient(const ModelConfig& m, const Plan& p, const activations::ActivationDims& d);


}  // namespace preflight::memory_detail
