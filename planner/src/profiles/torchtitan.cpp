// torchtitan (pytorch/torchtitan) training Llama: FSDP2 over dp (the plan's --zero 3, or
// ZeRO-0/1 semantics when the user pins them), DTensor tensor/sequence parallelism, bf16 params
// with fp32 gradient reduction, fused AdamW, unfused cross-entropy in fp32.
#include "preflight/planner/error.hpp"
#include "preflight/planner/frameworks.hpp"
#include "preflight/planner/throughput.hpp"

namespace preflight {

namespace {
// v0.2.2: DDP only as the whole mesh, mixed precision only through FSDP once tp or pp is above 1
// (frameworks.hpp).
void check_torchtitan_plan(const ModelConfig&, const Plan& p) {
    // Its job config expresses no ZeRO-1 and no fp16 (emit.cpp torchtitan_*): a plan judged as
    // either would be another plan than the one its config runs.
    if (p.zero == zero_optimizer_states)
        throw InputError("--zero", "torchtitan's FSDP2 has no optimizer-only sharding (ZeRO-1): --zero 2 keeps the "
                                   "parameters gathered and shards gradients and optimizer states "
                                   "(fsdp_reshard_after_forward \"never\"), --zero 3 reshards the parameters too");
    // apply_tp (models/llama3/infra/parallelize.py, v0.2.2): the norms are SequenceParallel and the
    // blocks' inputs Shard(1) whenever tp > 1; torchtitan has no tensor parallelism without it.
    if (p.tp > 1 && !p.sp)
        throw InputError("--sp", "torchtitan's tensor parallelism shards the norms and the layer inputs over the "
                                 "sequence (apply_tp: SequenceParallel, Shard(1)): with --tp above 1 give --sp");
    if (p.precision == Precision::fp16_mixed)
        throw InputError("--precision", "torchtitan has no fp16 recipe (training.mixed_precision_param is bfloat16 or "
                                        "float32, torchtitan/config/configs.py): --precision bf16-mixed");
    // FSDP2's MixedPrecisionPolicy(param bf16, reduce fp32) reduces each bf16 gradient into the fp32
    // sharded gradient of the fp32 sharded parameter (bf16-mixed with add_fsdp2_shards counts
    // them). bf16-mixed-fp32-grads would add a 4 B accumulator that does not exist, and its job
    // config is bf16-mixed's (emit.cpp torchtitan_training).
    if (p.precision == Precision::bf16_mixed_fp32_grads)
        throw InputError("--precision", "torchtitan reduces its bf16 gradients into fp32 sharded gradients "
                                        "(mixed_precision_reduce \"float32\"), with no separate accumulator: that job "
                                        "is --precision bf16-mixed under this profile");
    if (p.cp > 1 && p.zero == zero_none)
        throw InputError("--zero", "torchtitan shards with FSDP over the shard x cp ranks whenever context "
                                   "parallelism is on (parallel_dims.py fsdp_enabled): --zero 2 or 3 with --cp");
    if (torchtitan_ddp_beside_other_parallelism(p))
        throw InputError("--zero", "torchtitan runs ZeRO-0 as DDP, which it applies only to data parallelism "
                                   "alone (\"DDP has not supported > 1D parallelism\"): with tp, pp or ep above 1 "
                                   "use FSDP, --zero 2 or 3");
    if (torchtitan_amp_off(p) && p.precision != Precision::fp32 && p.precision != Precision::bf16)
        throw InputError("--precision", "torchtitan runs mixed precision through FSDP only once tp or pp is above 1 "
                                        "(maybe_enable_amp); without data-parallel sharding (dp > 1 with ZeRO) or cp "
                                        "the step is fp32 or pure bf16: --precision fp32 or bf16");
}

// torchtitan's step-time specifics: --recompute selective re-runs what its op policy does not
// save (ThroughputOptions::selective_op_sac).
void adjust_throughput_torchtitan(const ModelConfig&, const Plan&, ThroughputOptions& o) { o.selective_op_sac = true; }
}  // namespace

bool torchtitan_amp_off(std::int64_t shard, std::int64_t cp, std::int64_t tp, std::int64_t pp) {
    return shard == 1 && cp == 1 && (tp > 1 || pp > 1);
}
bool torchtitan_amp_off(const Plan& p) { return torchtitan_amp_off(p.zero == zero_none ? 1 : p.dp, p.cp, p.tp, p.pp); }
bool torchtitan_ddp_beside_other_parallelism(const Plan& p) {
    return p.zero == zero_none && p.dp > 1 && p.cp == 1 && (p.tp > 1 || p.pp > 1 || p.ep > 1);
}

FrameworkProfile torchtitan_profile() {
    FrameworkProfile p = non_megatron_profile();
    p.fp32_main_grads_only = false;
    p.fsdp2_fp32_grad_shards = true;  // FSDP2 shards beside ZeRO-2 gathers, fp32 gradients (memory_fsdp.cpp)
    // Without FSDP (ZeRO-0: DDP over dp alone, or one GPU) the step runs under torch.autocast over
    // fp32 parameters (maybe_enable_amp), which caches each weight's bf16 cast for its backward,
    // and DDP keeps a bucket copy of the gradients (apply_ddp: replicate, bucket_cap_mb 100).
    p.amp_without_fsdp = true;
    p.autocast_weight_copies = true;
    p.ddp_gradient_bucket_copy = true;
    p.name = "torchtitan";
    // FSDP2 reduce-scatters each transformer block's gradients as they are produced: no DDP
    // buckets (torchtitan/distributed/parallel_dims + torch.distributed.fsdp.fully_shard); the
    // per-layer gathered weights and gradients are the planner's ZeRO-3 gather terms.
    p.grad_bucket_bytes = 0;
    p.grad_buckets_in_flight = 0;
    // The loss (train.py loss_fn at 9dec370, components/loss.py cross_entropy_loss later):
    // F.cross_entropy(pred.flatten(0, 1).float(), ...). At its backward three fp32 logit-sized
    // tensors are alive (log_softmax's saved output, nll_loss's input gradient, log_softmax's input
    // gradient). train.py deletes the bf16 logits before backward ("del pred"), but their segment
    // stays in the caching allocator's pool, too small for an fp32 buffer: 3 fp32 + 1 bf16 reserved.
    p.logits_fp32_copy = true;
    p.loss_fp32_logit_buffers = 3;
    // With tp > 1 the loss runs under DTensor's loss_parallel (parallel_dims: enabled with TP unless
    // training.disable_loss_parallel), torch/distributed/tensor/parallel/loss.py: the backward
    // (_nll_loss_and_log_softmax_backward) holds zeros_like(x), exp(x)'s sum with it and the product
    // beside the saved log-probabilities, four fp32 buffers of the local vocabulary shard at once.
    p.loss_parallel_fp32_logit_buffers = 4;
    // parallelize_llama.py apply_tp: "output": ColwiseParallel(input_layouts=Shard(1)) all-gathers the
    // normed hidden states over the sequence before the GEMM, which saves the gathered tensor.
    p.head_saves_gathered_input = true;
    // Llama's RMSNorm in torchtitan/models/llama3/model.py is PyTorch's (saves rstd).
    p.norm_row_stats = true;
    p.vocab_pad_multiple = 1;
    // torchtitan/components/optimizer/optimizer.py: implementation "fused" by default (no
    // foreach temporaries).
    p.optimizer_step_temp_moments = 0;
    // --recompute selective is torchtitan's op-level policy, selective_ac_option = 'op' as its
    // Llama 3 train configs set it (train_configs/llama3_8b.toml; config_manager.py's own
    // default, "2", checkpoints every other layer whole and is not this mode).
    p.selective_op_sac = true;
    p.adjust_throughput = &adjust_throughput_torchtitan;
    p.check_plan = &check_torchtitan_plan;
    p.pure_bf16_moments_bf16 = true;
    // models/llama3/model.py Attention: F.scaled_dot_product_attention, whose flash backend on
    // H100 is FlashAttention-2 (PyTorch's SDPA), not TransformerEngine's fused kernels.
    p.fused_attention = false;
    // What a job config expresses (emit.cpp torchtitan_*): the search tries no other. No ZeRO-1
    // (FSDP2 has no optimizer-only sharding: ZeRO-0 is DDP, ZeRO-2 reshard_after_forward "never",
    // ZeRO-3 "always"); mixed_precision_param bfloat16 or float32 with fp32 reduction, Float8 through
    // torchao, pure bf16 through training.dtype (v0.2.0+); no fp16 recipe. A pinned ZeRO-1, fp16 or
    // bf16-mixed-fp32-grads is refused (check_torchtitan_plan).
    p.zero_stages = {zero_none, zero_gradients, zero_weights};
    p.precisions = {Precision::bf16_mixed, Precision::fp8_mixed, Precision::fp32, Precision::bf16};
    // Float8 training: torchao Float8Linear with dynamic scaling (torchtitan/float8.py Float8Handler at
    // 9dec370; components/quantization/float8.py since), not TransformerEngine.
    p.fp8_dynamic_scaling = true;
    // parallelisms/parallelize_llama.py apply_fsdp at 9dec370: "For PP, do not reshard after
    // forward to avoid per-microbatch all-gathers" (every block, and the root module).
    p.fsdp_pp_keeps_params_gathered = true;
    // ... and with PyTorch's pipeline schedules, unsharded fp32 gradients accumulate over the
    // micro-batches (training.mixed_precision_reduce "float32"; memory.hpp for the sources).
    p.fsdp_pp_accumulates_unsharded_grads = true;
    // Every tensor through PyTorch's caching allocator (512-byte blocks).
    p.allocation_granularity_bytes = kTorchMinBlockBytes;
    // PyTorch's caching allocator is the same under every framework: its fragmentation of the
    // activations and its constant reserve, as fitted on the nanotron sweep, are transferred here
    // and judged on torchtitan's published runs, which the fit never saw (data set README). The
    // nanotron terms for a host running ahead (around the loss, along a deep pipeline) and its
    // verdict margin describe nanotron's loop and its sweep, and are not transferred.
    const AllocatorConstants fitted = nanotron_allocator_constants();
    p.allocator.activation_fragmentation = fitted.activation_fragmentation;
    p.allocator.reserved_constant_bytes = fitted.reserved_constant_bytes;
    p.allocator.provenance = "activation fragmentation and constant reserve transferred from the nanotron fit (" +
                             fitted.provenance + "); judged on torchtitan's published runs";
    // The fit is judged on the reserved pool plus the memory outside PyTorch, as a job dies.
    p.verdict_on_reserved = true;
    return p;
}

}  // namespace preflight
