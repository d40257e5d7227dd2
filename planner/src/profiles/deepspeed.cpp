// DeepSpeed (deepspeedai/DeepSpeed) ZeRO with the zero_optimization block `--emit deepspeed` writes.
#include "preflight/planner/error.hpp"
#include "preflight/planner/frameworks.hpp"

namespace preflight {

namespace {

// runtime/config.py _do_error_check: bf16_master_weights_and_grads needs ZeRO stage 1, 2 or 3.
void check_deepspeed_plan(const ModelConfig&, const Plan& p) {
    // runtime/pipe/engine.py asserts "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism";
    // its PipelineEngine runs one schedule, TrainSchedule (runtime/pipe/schedule.py): 1F1B.
    if (p.pp > 1 && p.zero > zero_optimizer_states)
        throw InputError("--zero", "DeepSpeed's pipeline engine refuses ZeRO-2 and ZeRO-3 (runtime/pipe/engine.py): "
                                   "--zero 0 or 1 with --pp > 1");
    if (p.pp > 1 && p.pp_schedule != PpSchedule::one_f_one_b)
        throw InputError("--pp-schedule", "DeepSpeed's pipeline engine runs 1F1B only (TrainSchedule, "
                                          "runtime/pipe/schedule.py): --pp-schedule 1f1b");
    // ZeRO-Offload is a ZeRO optimizer's (zero_optimization.offload_optimizer): stage 1 and above.
    // Over one data-parallel rank stage 1 shards nothing, so ZeRO-0 is the same job there.
    if (p.offload != Offload::none && p.zero == zero_none && p.dp * p.cp > 1)
        throw InputError("--zero", "DeepSpeed offloads the optimizer of a ZeRO stage (zero_optimization."
                                   "offload_optimizer): --zero 1 or above with --offload");
    // The ds_config (emit_deepspeed.cpp) has no switch for Megatron-style sequence parallelism, and
    // its sequence_parallel_size is DeepSpeed-Ulysses (runtime/config.py), not the ring attention of
    // --cp: plans the config cannot express are not ranked.
    if (p.sp)
        throw InputError("--sp", "a ds_config has no sequence-parallel switch (Megatron-DeepSpeed's "
                                 "--sequence-parallel is model code): --sp off under --framework deepspeed");
    if (p.cp > 1)
        throw InputError("--cp", "the context parallelism --cp models is ring attention, which DeepSpeed does not "
                                 "run (a ds_config's sequence_parallel_size is DeepSpeed-Ulysses, an all-to-all over "
                                 "attention heads): --cp 1 under --framework deepspeed");
    if (p.precision == Precision::fp8_mixed)
        throw InputError("--precision", "a ds_config has no fp8 recipe (DeepSpeed's fp8 runs Transformer Engine's "
                                        "layers, outside the config this profile models): --precision bf16-mixed");
    // engine.py _configure_optimizer's dtype checks: without ZeRO (or Apex AMP) the model's dtype
    // must equal data_types.grad_accum_dtype, else NotImplementedError("unsupported mix ...").
    if (p.precision == Precision::bf16_mixed_fp32_grads && p.zero == zero_none)
        throw InputError("--zero", "DeepSpeed accumulates bf16 gradients in fp32 (data_types.grad_accum_dtype fp32) "
                                   "only under ZeRO (engine.py refuses the mix without it, v0.19.6; some older releases "
                                   "ran it): --zero 1 or above, or --precision bf16-mixed");
    if (p.precision == Precision::bf16 && p.zero == zero_none)
        throw InputError("--zero", "DeepSpeed keeps pure bf16 (bf16_master_weights_and_grads) only under ZeRO stage "
                                   "1, 2 or 3 (runtime/config.py asserts it): --zero 1 or above");
}

}  // namespace

FrameworkProfile deepspeed_profile() {
    FrameworkProfile p = non_megatron_profile();
    p.fp32_main_grads_only = false;  // its fp32 accumulator sits beside the 16-bit gradients
    p.name = "deepspeed";
    // ZeRO's buckets, gradient lifetimes, step copies and ZeRO-3's gathered window
    // (memory_deepspeed.cpp), as deepspeed_zero says: by default the block `--emit deepspeed` writes
    // (overlap_comm and contiguous_gradients on, reduce_bucket_size 5e8, sub_group_size and the ZeRO-3
    // prefetcher at zero/config.py's defaults), under --from the ds_config's.
    p.deepspeed_zero_optimizer = true;
    // DeepSpeed checkpoints whole layers (runtime/activation_checkpointing/checkpointing.py
    // checkpoint, or the model's gradient checkpointing), with no selective mode: the search tries
    // none and full (a pinned selective is judged, and --emit deepspeed warns that it has no switch).
    p.recomputes = {Recompute::none, Recompute::full};
    // Where those terms do not apply (the pipeline engine's optimizers but BF16_Optimizer, offloaded
    // ZeRO-1 with fp32 accumulation, fine-tuning, expert parallelism): one 5e8-element 16-bit bucket
    // in flight.
    p.grad_bucket_bytes = 500'000'000LL * 2;
    p.grad_buckets_in_flight = 1;
    p.logits_fp32_copy = true;
    p.norm_row_stats = false;
    p.vocab_pad_multiple = 1;
    p.allocation_granularity_bytes = kTorchMinBlockBytes;
    // DeepSpeed leaves attention to the model code: PyTorch SDPA or the flash-attn package
    // (FlashAttention-2-class), not TransformerEngine's fused kernels.
    p.fused_attention = false;
    // What a ds_config expresses (emit.cpp deepspeed_config): bf16 or fp16 with fp32 master
    // weights, fp32 gradient accumulation (data_types.grad_accum_dtype), fp32, and pure bf16
    // (bf16.bf16_master_weights_and_grads with bf16_optimizer_states: a bf16 master partition and
    // bf16 moments, runtime/config.py). fp8 needs Transformer Engine outside the config: not tried.
    p.precisions = {Precision::bf16_mixed, Precision::bf16_mixed_fp32_grads, Precision::fp16_mixed, Precision::fp32,
                    Precision::bf16};
    p.pure_bf16_master_bytes = 2;
    p.pure_bf16_moments_bf16 = true;
    p.check_plan = &check_deepspeed_plan;
    p.max_zero_with_pp = zero_optimizer_states;  // runtime/pipe/engine.py
    return p;
}

}  // namespace preflight
