// Per-GPU memory model of one training step: model states under ZeRO/TP/PP,
// activations from a per-tensor inventory, logits and loss, communication
// buffers, overhead, and a phase-by-phase timeline whose maximum is the peak.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "preflight/planner/allocator_model.hpp"
#include "preflight/planner/gpu.hpp"
#include "preflight/planner/model.hpp"
#include "preflight/planner/plan.hpp"

namespace preflight {

inline constexpr std::int64_t kMiB = std::int64_t{1} << 20;
inline constexpr std::int64_t kGiB = std::int64_t{1} << 30;

struct MemoryReport;
struct MemoryOptions;
struct ThroughputOptions;

// The zero_optimization settings of a ds_config that size DeepSpeed's gradient buffers
// (deepspeed/runtime/zero/config.py): the defaults are what `--emit deepspeed` writes; `--from` a
// ds_config takes the file's (FrameworkProfile::deepspeed_zero).
struct DeepSpeedZeroSettings {
    std::int64_t reduce_bucket_elements = 500'000'000;  // reduce_bucket_size (zero/config.py default 5e8)
    // reduce_bucket_size "auto": the Hugging Face Trainer writes hidden_size x hidden_size
    // (transformers integrations/deepspeed.py trainer_config_finalize), known only with the model.
    bool reduce_bucket_hidden_squared = false;
    // overlap_comm: --emit deepspeed writes true; nullopt (a ds_config without it) is zero/config.py's
    // default, on at ZeRO-3 only (overlap_comm_valid), decided by the plan's stage.
    std::optional<bool> overlap_comm = true;
    // ZeRO-3 (zero/config.py defaults): sub_group_size, the elements of one optimizer-step sub-group
    // (1e9); stage3_max_live_parameters (1e9) and stage3_prefetch_bucket_size (5e7), the gathered
    // parameters the prefetcher keeps live and fetches ahead at a time.
    std::int64_t sub_group_elements = 1'000'000'000;
    std::int64_t max_live_elements = 1'000'000'000;
    std::int64_t prefetch_elements = 50'000'000;
    bool operator==(const DeepSpeedZeroSettings&) const = default;
};

// What a training framework keeps beyond the analytic minimum. The default
// describes Megatron-LM-style training (persistent contiguous gradient buffers,
// fused vocab-parallel cross-entropy).
struct FrameworkProfile {
    std::string name = "megatron";
    // Gradient communication bucket (PyTorch DDP's default bucket_cap_mb = 25; the step-time model's
    // last, exposed, reduction) and how many copies of one the framework holds while backward
    // overlaps the reduction (nanotron's DDP: 2). None under Megatron-LM: its buckets are views into
    // the contiguous main-gradient buffer, all-reduced or reduce-scattered in place
    // (core/distributed/param_and_grad_buffer.py start_grad_sync, d98e8a6).
    std::int64_t grad_bucket_bytes = 25 * kMiB;
    int grad_buckets_in_flight = 0;
    // Cross-entropy upcasts the logits to fp32 (fused kernels keep one fp32 copy).
    bool logits_fp32_copy = true;
    // Keep each norm's per-row statistics (mean/rstd, fp32); Korthikanti et al.
    // omit these O(sb) terms, so the default leaves them out.
    bool norm_row_stats = false;
    // Vocabulary padded to a multiple of this (times tp) before sharding
    // (Megatron: --make-vocab-size-divisible-by 128; plain PyTorch: 1).
    std::int64_t vocab_pad_multiple = 1;
    // The attention core runs the GPU's native fused kernels (ThroughputOptions::fused_attention):
    // Megatron-Core's TransformerEngine attention. The PyTorch frameworks (nanotron's flash-attn,
    // torchtitan's and Hugging Face's SDPA, DeepSpeed's) run FlashAttention-2-class kernels.
    bool fused_attention = true;
    // fp8-mixed runs torchao's Float8Linear (dynamic scaling; ThroughputOptions::fp8_dynamic_scaling):
    // torchtitan. Transformer Engine otherwise.
    bool fp8_dynamic_scaling = false;

    // --- Fields the Preflight CUDA runtime's profile needs (profiles.hpp).
    // Device buffers the framework allocates itself and keeps for the whole run (GEMM
    // workspace, device scalars), counted under `buffers`.
    std::int64_t workspace_bytes = 0;
    // The LM-head backward writes d(final-norm output) (s*b*h at the activation dtype; the
    // whole sequence under sequence parallelism too: the dgrad writes the partial sums before
    // their reduce-scatter) while the logits gradient is still alive.
    bool head_input_grad_with_logits = false;
    // Full recompute re-materialises a layer from its kept input, sharing that tensor
    // instead of holding a second copy of it (true of every framework: the checkpointed
    // input is the recomputed layer's input).
    bool full_recompute_shares_input = true;
    // Flash attention's backward allocates runtime_flash_bwd_workspace_bytes (profiles.hpp)
    // beside the attention gradients.
    bool flash_bwd_workspace = false;
    // Memory the device pool keeps beyond the tensors under full recompute, as a fraction of
    // one layer's full activations: the runtime's cudaMallocAsync pool (`preflight run
    // --allocator pool`; its default arena keeps none) re-maps about one re-materialised layer
    // while backward frees and re-allocates it in another order (fitted: GpuSpec::runtime).
    // Counted in `overhead` (non-tensor memory).
    double full_recompute_pool_slack_fraction = 0;
    // Precision recipes the framework can run (empty: every one); the plan search tries no other,
    // and a plan that names none starts from bf16-mixed, or from the first when it is not one of
    // them (default_precision, profiles.hpp).
    std::vector<Precision> precisions;
    // Recompute modes and ZeRO stages the framework implements (empty: every one): the plan
    // search tries no other (a pinned one is still judged, and refused by the profile).
    std::vector<Recompute> recomputes;
    std::vector<ZeroStage> zero_stages;
    // The highest ZeRO stage it runs beside a pipeline (pp > 1): the search tries none above it.
    ZeroStage max_zero_with_pp = zero_weights;
    // Model states, ZeRO shards, gathered parameters and unreduced gradients follow the Preflight
    // runtime's flat layout (runtime_layout.hpp): per-unit padding to dp equal chunks, ZeRO-3
    // gathers of one unit at a time (the next layer prefetched), ZeRO-2/3 gradients of the unit
    // being computed and of the one being reduce-scattered, and the embedding ops' own peaks.
    bool runtime_shard_units = false;
    // fp8-mixed as the Preflight runtime runs it (runtime/src/program_fp8.cpp): only the layers'
    // GEMMs take fp8 operands (the LM head, and a tied embedding, stay bf16: no fp8 copy, and the
    // head's input is kept at the activation dtype); per-tensor current scaling keeps two fp32 per
    // operand of each layer GEMM (input, weight, output gradient) instead of an amax history;
    // flash attention's bf16 output is kept beside its fp8 copy (the flash backward reads it);
    // the casts' transient copies in the backward (runtime_fp8_backward_transient).
    bool fp8_runtime_recipe = false;
    // Context parallelism as the Preflight runtime runs it (runtime/src/program_cp.cpp): each layer
    // all-gathers the whole sequence's K and V over the cp ranks (Llama 3 paper, sec. 3.3.2) instead
    // of circulating them around a ring: in the forward the gathered chunks and their copy in
    // sequence order (2 x the whole sequence's K and V) at once; in the backward the gathered K and
    // V again beside their gradients for the whole sequence, with flash attention's own terms
    // (cp_gathered_kv_bytes). No ring buffers (cp_ring_buffer_bytes).
    bool cp_gathers_kv = false;
    // Runs --fp8-param-gather (Megatron-LM with Transformer Engine: fp8 primary weights under the
    // distributed optimizer, fp8_params.cpp); the other profiles refuse the flag.
    bool fp8_param_gather = true;
    // Runs Megatron-LM's uneven pipeline split, --decoder-first/last-pipeline-num-layers
    // (Plan::pp_first_stage_layers / pp_last_stage_layers, pipeline_uneven.cpp); the other profiles
    // refuse the plan flags.
    bool uneven_pipeline_split = true;
    // Overlaps the interleaved schedule's pipeline sends with compute unless a plan turns it off
    // (ThroughputOptions::p2p_overlap): Megatron-core's overlap_p2p_comm, on by default (arguments.py
    // has only --no-overlap-p2p-communication). `plan`, `--emit megatron` and the explorer start from it.
    bool p2p_overlap_by_default = true;

    // --- Fields the PyTorch profile needs (profiles.hpp, pytorch_profile()): plain
    // PyTorch with Hugging Face transformers modules on one GPU. Every default below
    // leaves the numbers above unchanged.
    // Mixed recipes run under torch.autocast with fp32 parameters: the fp32 parameters
    // are what the optimizer updates (no separate master copy), gradients are fp32, and
    // the residual stream stays fp32 because the embedding lookup is not an autocast op
    // (PyTorch docs, "Automatic Mixed Precision package - torch.amp", op lists).
    bool amp_fp32_parameters = false;
    // The same only without FSDP (ZeRO-0, no context parallelism): torchtitan v0.2.2's
    // maybe_enable_amp (distributed/utils.py) runs torch.autocast over the fp32 model for DDP and
    // single-GPU training, and leaves mixed precision to fully_shard otherwise.
    bool amp_without_fsdp = false;
    // PyTorch DDP with gradient_as_bucket_view=False (its default; torchtitan's apply_ddp calls
    // replicate(model, bucket_cap_mb=100)) keeps its own flat copy of every gradient in its
    // buckets for the whole run (DistributedDataParallel docs: the view "saves" the total
    // gradients' size): counted under `buffers` at ZeRO-0 over dp > 1.
    bool ddp_gradient_bucket_copy = false;
    // bf16-mixed-fp32-grads keeps one fp32 main gradient per parameter, not a 16-bit gradient
    // beside an fp32 accumulator: Megatron-LM's param.main_grad, into which each micro-batch's
    // gradient is accumulated as soon as it is computed (docs/user-guide/features/dist_optimizer.md:
    // bf16 parameters with fp32 gradients take 18 B per parameter, 6 + 12/d distributed). The
    // other profiles keep their own accumulator beside the 16-bit gradients (nanotron's
    // accumulate_grad_in_fp32).
    bool fp32_main_grads_only = true;
    // Autocast caches the 16-bit cast of every fp32 leaf weight for the rest of the
    // autocast region, and linear saves that copy for backward (torch.amp docs,
    // `cache_enabled`). Counted under `weights` from a layer's forward to its backward.
    bool autocast_weight_copies = false;
    // Per-layer saved tensors of Hugging Face's eager modules instead of fused kernels:
    // LlamaRMSNorm upcasts to fp32 and saves the normalized tensor, LlamaMLP saves
    // silu(gate) beside gate and up, GPT-2's gelu_new is unfused (tanh and its
    // intermediates saved), eager attention saves an fp32 softmax and repeats K/V for GQA.
    bool hf_module_inventory = false;
    // fp32 logit-sized buffers alive at the loss's backward regardless of the activation
    // dtype (0: the logits_fp32_copy rule above). PyTorch: log_softmax's saved output, the
    // gradient nll_loss hands back and log_softmax's input gradient.
    int loss_fp32_logit_buffers = 0;
    // With tp > 1, the loss runs vocabulary-parallel on the sharded logits and holds this many
    // fp32 logit-sized buffers instead (0: loss_fp32_logit_buffers applies at every tp).
    int loss_parallel_fp32_logit_buffers = 0;
    // Under sequence parallelism the LM head all-gathers its input over the sequence and its GEMM
    // saves the gathered tensor, instead of the sequence shard Megatron saves and gathers again
    // in backward.
    bool head_saves_gathered_input = false;
    // Optimizer moments in the parameter dtype (torch.optim.AdamW: zeros_like(param))
    // rather than fp32.
    bool optimizer_moments_param_dtype = false;
    // The same only for pure bf16 (no fp32 master copy), where the parameters the optimizer owns are
    // bf16 (torchtitan's training.dtype "bfloat16": parameters, gradients and optimizer states in
    // bf16, config/job_config.py); mixed recipes keep fp32 sharded parameters and fp32 moments.
    bool pure_bf16_moments_bf16 = false;
    // Pure bf16 keeps a master copy of this many bytes per parameter over the optimizer shard (0:
    // none, the parameters are the master): DeepSpeed's bf16_master_weights_and_grads keeps its ZeRO
    // partition of the parameters in bf16 (docs/_pages/config-json.md "bf16"), beside the model's.
    int pure_bf16_master_bytes = 0;
    // Temporary moment-sized buffers the optimizer step allocates (torch.optim.AdamW's
    // foreach path: the sqrt(exp_avg_sq) denominator), counted under `buffers`.
    int optimizer_step_temp_moments = 0;
    // param.grad lives from the backward that produces it to the step: the loop frees every
    // gradient after the optimizer step (optimizer.zero_grad(set_to_none=True), PyTorch's default
    // since 2.0; validation/pytorch/train.py), and autograd's AccumulateGrad allocates each anew in
    // the next backward, the LM head's first and a layer's as its backward runs. Without
    // accumulation the forward and the loss run with no gradients; with it, beside the earlier
    // micro-batches' whole ones. ZeRO-0 full training only (the other cases keep the generic terms).
    bool grads_set_to_none = false;
    // Selective recompute as torchtitan's op-level policy (selective_ac_option "op",
    // _apply_ac_to_transformer_block in torchtitan/parallelisms/parallelize_llama.py): a layer
    // keeps its input and the outputs of the odd-numbered aten.mm calls (the 1st, 3rd, ...), of
    // SDPA and of the sequence-parallel reduce-scatters, and recomputes the rest in backward.
    // SwiGLU dense models only (its layer order); others keep Korthikanti et al.'s selective.
    bool selective_op_sac = false;
    // ZeRO-3 with a pipeline: the data-parallel wrapper keeps each block's parameters gathered
    // from its forward to its backward instead of resharding after forward (torchtitan apply_fsdp:
    // reshard_after_forward = False when pp is enabled), so a 1F1B stage holds all of them.
    bool fsdp_pp_keeps_params_gathered = false;
    // ZeRO-3 with a pipeline: gradient sync stays off until the last micro-batch
    // (torch/distributed/pipelining/stage.py backward_maybe_with_nosync: FSDP modules get
    // set_requires_gradient_sync(False)), and FSDP2 accumulates each unsharded gradient in its
    // fp32 reduce dtype meanwhile (_fsdp_param.py to_accumulated_grad_if_needed): 4 B per
    // parameter of the stage through the step's forwards and backwards.
    bool fsdp_pp_accumulates_unsharded_grads = false;
    // ZeRO-2/3 as Megatron-FSDP runs them (--use-megatron-fsdp with --data-parallel-sharding-strategy
    // optim_grads / optim_grads_params, the form `plan --emit megatron` gives them;
    // megatron/core/distributed/fsdp/src/megatron_fsdp at Megatron-LM d98e8a6): each layer's
    // gradients are a full-size bucket until its reduce-scatter leaves a queue of up to 1e9
    // elements (memory_fsdp.cpp); ZeRO-3 prefetches layers up to half that many elements ahead and
    // keeps the modules outside the layers (embedding, final norm, LM head) gathered for the whole
    // run; with 16-bit main gradients the optimizer step makes an fp32 copy of the gradient shard.
    // Replaces ZeRO-3's one-layer gather and gradient terms.
    bool megatron_fsdp = true;
    // Megatron-LM's optimizer step outside Megatron-FSDP gives each fp32 main parameter it steps an
    // fp32 copy of its 16-bit main gradient (optimizer.py _copy_model_grads_to_main_grads,
    // distrib_optimizer.py copy_group_grads: main_grad.float()), dropped by the next step's
    // zero_grad; with fp32 main gradients .float() is the gradient itself.
    bool main_grad_fp32_copy_at_step = true;
    // Megatron-LM's MoE layer multiplies the routing probabilities inside the expert activation
    // (experts.py weighted_bias_swiglu_impl with permuted_probs) and unpermutes without them, so the
    // experts' outputs are not saved for a weighted combine, as the other frameworks' combine saves.
    bool moe_probs_in_activation = true;
    // The Preflight runtime's MoE (runtime/src/program_moe.cpp) keeps each token's k gate weights
    // (fp32) and an i64 routing table (slots, offsets, experts) in place of the router's
    // probabilities, routes all of a micro-batch's tokens on every tensor-parallel rank, runs its
    // experts' GEMMs in 16 bits under fp8-mixed (no fp8 copies of their weights or inputs), and its
    // backward holds the router logits' gradient beside the experts' (memory_runtime.cpp
    // runtime_moe_backward_transient).
    bool runtime_moe = false;
    // Transformer Engine under fp8 (Megatron-LM's default delayed recipe) keeps the fused attention's
    // 16-bit output for its backward beside the out-projection's fp8 copy of it (TE backends.py saves
    // out_f16 when attention itself is not fp8; attention.py sets save_original_input only for
    // other recipes).
    bool fp8_attention_output_16bit_kept = true;
    // Megatron-LM's LM head under sequence parallelism (tensor_parallel.ColumnParallelLinear, the
    // output layer outside MXFP8) all-gathers its input into the global memory buffer "mpu"
    // (core/tensor_parallel/layers.py LinearWithGradAccumulationAndAsyncCommunication,
    // core/utils.py GlobalMemoryBuffer, d98e8a6): seq x mbs x hidden in the input's dtype, allocated
    // at the first forward and held for the whole run; the head saves its un-gathered input.
    bool sp_head_gather_buffer = true;
    // DeepSpeed's ZeRO optimizers (planner/src/memory_deepspeed.cpp, from DeepSpeed v0.19.6's
    // stage_1_and_2.py, stage3.py and fused_optimizer.py): 16-bit gradients exist from the first
    // backward to the step (none in the first forward), ZeRO-1/2 keep the rank's partition of them
    // whole-tensor (grads_in_partition) and two reduce buckets, ZeRO-3 one persistent bucket, and the
    // optimizer step copies the gradients to fp32; BF16_Optimizer where DeepSpeed picks it (beside a
    // pipeline without ZeRO, ZeRO-1 with fp32 accumulation). The pipeline engine's other
    // optimizers, offload, LoRA and expert parallelism keep the generic terms. The buckets follow
    // deepspeed_zero.
    bool deepspeed_zero_optimizer = false;
    DeepSpeedZeroSettings deepspeed_zero;
    // Allocation granularity: each model-state tensor is rounded up to this many bytes
    // (PyTorch CUDACachingAllocator: kMinBlockSize = 512). 0 = no rounding.
    std::int64_t allocation_granularity_bytes = 0;

    // --- Framework profiles with a memory model of their own (planner/src/profiles/).
    // Refuses (InputError naming the flag) a model the framework cannot run at all, before any
    // plan is evaluated or searched; nullptr = every valid model.
    void (*check_model)(const ModelConfig&) = nullptr;
    // Megatron-LM splits the decoder layers evenly: validate_args (megatron/training/arguments.py at
    // d98e8a6) asserts that pp divides them unless --decoder-first/last-pipeline-num-layers give
    // an uneven split (the plan's pp_first_stage_layers / pp_last_stage_layers, modelled stage by
    // stage: pipeline_uneven.cpp). Without that split the search tries only pp that divide the
    // layers (pipeline_split_problem); `memory` of such a plan warns and evaluates it with the
    // remainder on the first stages, `--emit megatron` warns; the interleaved schedule's own rule
    // is validate_plan_extensions'.
    bool pipeline_split_divides_layers = false;
    // The framework offloads the optimizer only under a ZeRO stage, even over one data-parallel rank
    // (Megatron-LM: --optimizer-cpu-offload needs its distributed optimizer): the search then plans
    // --offload optimizer at dp 1 as ZeRO-1, which shards nothing there.
    bool offload_needs_zero = false;
    // PyTorch FSDP2 under ZeRO-2 keeps each parameter's shard beside the gathered copy, and its
    // gradient shards are fp32, the sharded parameter's dtype (torchtitan's MixedPrecisionPolicy
    // reduces in fp32): memory_fsdp.cpp add_fsdp2_shards.
    bool fsdp2_fp32_grad_shards = false;
    // Refuses (InputError naming the flag) a plan the framework cannot run, before it is evaluated;
    // nullptr = every valid plan. The plan search lists such plans' families as refused.
    void (*check_plan)(const ModelConfig&, const Plan&) = nullptr;
    // Evaluates the plan instead of the generic model below; nullptr = the generic model.
    MemoryReport (*evaluate)(const ModelConfig&, const GpuSpec&, const Plan&, const MemoryOptions&) = nullptr;
    // Sets the framework's own step-time options for a plan (its pipeline split, async TP
    // collectives, buckets) over the caller's (attention FLOPs convention, breakdown);
    // nullptr = the planner's defaults. Applied by throughput_options_for (throughput.hpp).
    void (*adjust_throughput)(const ModelConfig&, const Plan&, ThroughputOptions&) = nullptr;
    // Caching-allocator constants turning the allocated peak into the reserved peak
    // (allocator_model.hpp); all zero = reserved equals allocated.
    AllocatorConstants allocator;
    // Judge the fit on the reserved pool plus the memory outside PyTorch (CUDA context, NCCL)
    // rather than on peak_bytes (allocated + the GPU spec's overhead).
    bool verdict_on_reserved = false;
};

struct MemoryBreakdown {
    std::int64_t weights = 0;
    std::int64_t master_weights = 0;
    std::int64_t gradients = 0;
    std::int64_t optimizer_states = 0;
    std::int64_t activations = 0;
    std::int64_t logits_and_loss = 0;
    std::int64_t buffers = 0;
    std::int64_t overhead = 0;

    std::int64_t total() const {
        return weights + master_weights + gradients + optimizer_states + activations +
               logits_and_loss + buffers + overhead;
    }
};

enum class PhaseKind { step_start, forward, output_loss, backward, grad_reduce, optimizer_step };

struct Phase {
    PhaseKind kind = PhaseKind::step_start;
    std::int64_t layer = 0;        // 1-based layer on the stage (forward/backward)
    std::int64_t micro_batch = 0;  // 1-based micro-batch (forward/output/backward)
};
// Human-readable label, e.g. "backward layer 32 (micro-batch 1)".
std::string describe(const Phase& phase);
std::string_view to_string(PhaseKind k);

struct TimelineEntry {
    Phase phase;
    MemoryBreakdown bytes;
};

// One tensor a transformer layer saves for backward, for one micro-batch on one
// GPU, after TP/SP division.
struct ActivationTensor {
    std::string_view name;
    std::int64_t bytes = 0;
    bool attention_core = false;  // dropped by selective recompute
};

// Model states (steady state) for a flat parameter count. ZeRO-1/2 shard a flat,
// padded buffer over dp ranks (Rajbhandari et al. 2020, sec. 5).
struct ModelStateBytes {
    std::int64_t weights = 0;
    std::int64_t master_weights = 0;
    std::int64_t gradients = 0;
    std::int64_t optimizer_states = 0;
    std::int64_t total() const { return weights + master_weights + gradients + optimizer_states; }
};
ModelStateBytes model_state_bytes(std::int64_t params, Precision precision, Optimizer optimizer,
                                  int zero, std::int64_t dp);

// Elements one of `ranks` ranks holds when `elements` are split evenly with padding.
constexpr std::int64_t shard_elements(std::int64_t elements, std::int64_t ranks) {
    return (elements + ranks - 1) / ranks;
}

// The saved-tensor inventory of one transformer layer (one micro-batch, one GPU)
// under the plan's attention kind, dropout, precision, TP/SP and recompute mode.
std::vector<ActivationTensor> layer_activation_inventory(const ModelConfig& model, const Plan& plan,
                                                         const FrameworkProfile& profile = {});
std::int64_t layer_activation_bytes(const ModelConfig& model, const Plan& plan,
                                    const FrameworkProfile& profile = {});

struct MemoryOptions {
    FrameworkProfile profile;
    std::optional<std::int64_t> overhead_bytes;  // overrides the GPU spec's figure
    // Whether the loop waits for the GPU every micro-batch (allocator_model.hpp): the run-ahead
    // terms of a fitted caching-allocator model are charged only when it runs ahead. Unset: the
    // pace the plan is expected to run at (throughput.hpp expected_host_pace: the profile's
    // host-pace model, from the layout), which a user knows before the job.
    std::optional<HostPace> host_pace;
    bool pace_range = true;  // also evaluate the two ends of MemoryReport's range (where it matters)
    // The cross-entropy runs under torch.compile: the fused loss keeps no logit-sized buffer of its
    // own, so only the logits and their gradient (activation dtype) are charged. Profiles whose
    // loss is PyTorch's eager F.cross_entropy only (loss_fp32_logit_buffers > 0); InputError otherwise.
    bool compiled_loss = false;
    // Megatron-LM's --tp-comm-overlap (plan --tp-comm-overlap, a launch script's flag): Transformer
    // Engine's userbuffers for the GEMM-overlapped TP collectives, held outside PyTorch's allocator
    // for the whole run (te_userbuffer_bytes, memory_fsdp.cpp).
    bool tp_comm_overlap = false;
    bool timeline = false;                       // fill MemoryReport::timeline_*
    // Pipeline parallelism: evaluate this stage only (0-based; a rank's own prediction), instead
    // of the stage with the highest peak. Must lie in 0..pp-1.
    std::optional<std::int64_t> pipeline_stage;
};

struct MemoryReport {
    ParamCounts params;
    std::int64_t capacity_bytes = 0;
    std::int64_t pipeline_stage = 0;   // 0-based stage with the highest peak
    std::int64_t layers_on_stage = 0;
    std::int64_t micro_batches_in_flight = 1;
    std::int64_t params_on_gpu = 0;    // parameters this GPU owns before ZeRO sharding
    MemoryBreakdown at_peak;           // contract's per_gpu_bytes
    std::int64_t activations_per_layer_bytes = 0;
    std::vector<ActivationTensor> layer_inventory;
    std::int64_t peak_bytes = 0;
    Phase peak_phase;
    bool fits = false;
    std::int64_t first_step_peak_bytes = 0;
    Phase first_step_peak_phase;
    // Caching-allocator view of the same peak: tensors alone (peak_bytes less `overhead`), the
    // pool PyTorch reserves for them (allocator_model.hpp), and what the device must hold:
    // reserved + the memory outside PyTorch (CUDA context, NCCL buffers).
    std::int64_t peak_allocated_bytes = 0;
    std::int64_t peak_reserved_bytes = 0;
    std::int64_t device_peak_bytes = 0;
    std::int64_t non_pytorch_bytes = 0;
    std::int64_t verdict_margin_bytes = 0;  // fitted margin (allocator_model.hpp), in device_peak_bytes
    ReservedExtra reserved_extra;           // the reserved pool beyond the allocated peak, by cause
    // Where the pool peaks at another phase or stage than the tensors (nanotron: the reserve around
    // the loss), that phase, stage and its tensors, which reserved_extra is beyond; unset otherwise.
    std::optional<Phase> reserved_peak_phase;
    std::int64_t reserved_peak_stage = 0;
    std::int64_t reserved_peak_tensor_bytes = 0;
    HostPace host_pace = HostPace::runs_ahead;  // the pace the report was made under
    bool host_pace_expected = true;             // from expected_host_pace (MemoryOptions::host_pace unset)
    // With the pace expected from a fitted host-pace model: the probability it gives a wait
    // (throughput.hpp host_wait_probability). Unset otherwise.
    std::optional<double> host_wait_probability;
    // The expected pace ran ahead, but that pool outgrows the device (allocator_model.hpp
    // pool_outgrows_device): the allocator frees its cache and the host waits. The reserved figures
    // (peak_reserved_bytes, stage_reserved_bytes, reserved_extra) are then the waiting pace's;
    // device_peak_bytes and fits keep the running-ahead need (at the top of the range, over the
    // capacity: the job depends on the flush, so it does not fit); reserved_running_ahead_bytes is
    // the running-ahead point pool. Unset otherwise.
    bool allocator_flush = false;
    std::optional<std::int64_t> reserved_running_ahead_bytes;
    // The pace is expected and unsure (allocator_model.hpp unsure_pace_band): the reserved figures
    // (peak_reserved_bytes, stage_reserved_bytes, reserved_extra) and the point need in
    // device_peak_bytes are the two paces' weighted by host_wait_probability; host_pace stays the
    // likelier one.
    bool unsure_pace_mix = false;
    // The host runs ahead (expected or given) and its pool at the top of the range plus the memory
    // outside PyTorch exceeds the point need: device_peak_bytes and fits are that need
    // (allocator_model.hpp range_top_need_bytes).
    bool need_at_range_top = false;
    // Profiles whose caching-allocator model depends on the pace (run-ahead terms fitted): the
    // range the reserved pool can take for this layout, and the device need at its ends
    // (allocator_model.hpp range_low_constants: the host waits and every freed block is reused;
    // range_high_constants: the host runs ahead, the reserve terms at their upper envelope); the
    // point lies inside. Unset otherwise. The verdict by range: fits (high under the capacity), may
    // not fit (the capacity inside the range), does not fit.
    std::optional<std::int64_t> device_peak_low_bytes, device_peak_high_bytes;
    std::optional<std::int64_t> reserved_low_bytes, reserved_high_bytes;  // the pool's range (measured rank's stage)
    bool compiled_loss = false;                 // MemoryOptions::compiled_loss the report was made under
    // Per pipeline stage (profiles with their own model): allocated and reserved peaks.
    std::vector<std::int64_t> stage_allocated_bytes;
    std::vector<std::int64_t> stage_reserved_bytes;
    std::vector<TimelineEntry> timeline_steady;  // when MemoryOptions::timeline
    std::vector<TimelineEntry> timeline_first;
    // Offload (extensions.hpp): model states in host memory, per GPU of the most loaded
    // stage and for one node (that figure times the GPUs of a node in use).
    std::int64_t host_bytes_per_gpu = 0;
    std::int64_t host_bytes_per_node = 0;
};

// Fills peak_allocated_bytes, peak_reserved_bytes, non_pytorch_bytes and device_peak_bytes
// of a report whose peak_bytes and at_peak are set (allocator_model.cpp); with
// verdict_on_reserved, fits becomes device_peak_bytes <= capacity_bytes. loss_hidden_bytes:
// one micro-batch's hidden state (s*b*h*2), charged when the peak phase holds the loss and the
// host runs ahead (HostPace); step_gradient_bytes: the gradients of the step on this GPU.
void apply_allocator_model(MemoryReport& r, const AllocatorConstants& c, bool verdict_on_reserved,
                           std::int64_t loss_hidden_bytes, std::int64_t step_gradient_bytes, HostPace pace);

// Throws InputError naming the flag for options no plan can use (an overhead beyond the documented
// bound, --compiled-loss under a profile whose loss is not PyTorch's eager cross-entropy) or that
// the plan cannot take under the options' profile (--fp8-param-gather or an uneven pipeline split
// beside any but Megatron-LM's).
void validate_memory_options(const MemoryOptions& options, const Plan& plan);
// --fp8-param-gather under a profile that does not run it: InputError naming the flag (fp8_params.cpp).
void check_fp8_param_gather_profile(const Plan& plan, const FrameworkProfile& profile);
// --pp-first/last-stage-layers under a profile that does not run Megatron-LM's uneven split:
// InputError naming the flag (pipeline_uneven.cpp).
void check_uneven_pipeline_split_profile(const Plan& plan, const FrameworkProfile& profile);

// Evaluates a validated plan. Throws InputError for an invalid plan or options.
// The verdict of a report, by its range where it has one (MemoryReport::device_peak_low/high_bytes):
// "fits" (the high end under the capacity), "may-not-fit" (the capacity inside the range),
// "does-not-fit"; without a range, "fits" or "does-not-fit" as MemoryReport::fits says.
std::string_view memory_verdict(const MemoryReport& r);

// The recipe's bytes per parameter as the profile keeps them (FrameworkProfile::fp32_main_grads_only,
// pure_bf16_master_bytes).
inline PrecisionBytes profile_precision_bytes(Precision precision, const FrameworkProfile& profile) {
    PrecisionBytes pb = precision_bytes(precision);
    if (profile.fp32_main_grads_only && pb.gradient_accum > 0) pb.gradient = 0;
    if (precision == Precision::bf16 && profile.pure_bf16_master_bytes > 0) pb.master = profile.pure_bf16_master_bytes;
    return pb;
}

// Bytes of one optimizer moment per parameter: the parameter's own dtype where the profile keeps
// the moments so (FrameworkProfile::optimizer_moments_param_dtype; pure_bf16_moments_bf16 for pure
// bf16), fp32 otherwise. `amp`: the states are the fp32 recipe's (autocast with fp32 parameters).
inline int optimizer_moment_bytes(const FrameworkProfile& profile, Precision precision, bool amp) {
    const int param_bytes = amp ? 4 : precision_bytes(precision).weight;
    const bool param_dtype = profile.optimizer_moments_param_dtype ||
                             (profile.pure_bf16_moments_bf16 && !amp && precision == Precision::bf16);
    return param_dtype ? param_bytes : 4;
}

// Bytes of optimizer state per parameter: the optimizer's moments (AdamW two, SGD one), each at
// optimizer_moment_bytes.
inline int optimizer_state_bytes(const FrameworkProfile& profile, Precision precision, Optimizer optimizer, bool amp) {
    return optimizer_bytes_per_param(optimizer) / 4 * optimizer_moment_bytes(profile, precision, amp);
}

// The memory a profile judges the fit on: the device need (reserved pool + memory outside
// PyTorch + margin) where it models the caching allocator (verdict_on_reserved), else the
// allocated peak + overhead. The search, the plan tables and the explorer show this figure.
inline std::int64_t judged_bytes(const MemoryReport& r, const FrameworkProfile& profile) {
    return profile.verdict_on_reserved ? r.device_peak_bytes : r.peak_bytes;
}

// The figure a fit is judged on against the capacity: under a profile that models the caching
// allocator (verdict_on_reserved) the device need at the top of its range where the report has
// one (memory_verdict: "fits" needs the high end under the capacity), else the device need;
// under the others the allocated peak + overhead. `preflight memory` counts the free memory of a
// plan that fits from it (free_bytes); the explorer's headline and sweeps show it.
inline std::int64_t fit_bytes(const MemoryReport& r, const FrameworkProfile& profile) {
    return profile.verdict_on_reserved ? r.device_peak_high_bytes.value_or(r.device_peak_bytes) : r.peak_bytes;
}

// The free memory `preflight memory` prints for a plan that fits: the capacity less fit_bytes.
inline std::int64_t free_bytes(const MemoryReport& r, const FrameworkProfile& profile) {
    return r.capacity_bytes - fit_bytes(r, profile);
}

MemoryReport evaluate_memory(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan,
                             const MemoryOptions& options = {});

}  // namespace preflight
