// DeepSpeed (microsoft/DeepSpeed) ZeRO with its default configuration.
#include "preflight/planner/frameworks.hpp"

namespace preflight {

FrameworkProfile deepspeed_profile() {
    FrameworkProfile p;
    p.fp32_main_grads_only = false;  // its fp32 accumulator sits beside the 16-bit gradients
    p.megatron_fsdp = false;
    p.name = "deepspeed";
    // deepspeed/runtime/zero/config.py: reduce_bucket_size = 5e8 elements, contiguous_gradients
    // = True, overlap_comm defaults to True only for stage 3 (overlap_comm_valid).
    // deepspeed/runtime/zero/stage_1_and_2.py DeepSpeedZeroOptimizer.backward: with
    // contiguous_gradients it allocates ipg_buffer = one reduce_bucket_size tensor in the
    // parameter dtype (a second one under overlap_comm) before each backward. Counted here as
    // one 5e8-element bf16 bucket in flight.
    p.grad_bucket_bytes = 500'000'000LL * 2;
    p.grad_buckets_in_flight = 1;
    // The optimizer's fp32 state partitions are created at initialisation
    // (DeepSpeedZeroOptimizer.initialize_optimizer_states zero-fills them before training).
    p.logits_fp32_copy = true;
    p.norm_row_stats = false;
    p.vocab_pad_multiple = 1;
    p.allocation_granularity_bytes = kTorchMinBlockBytes;
    // DeepSpeed leaves attention to the model code: PyTorch SDPA or the flash-attn package
    // (FlashAttention-2-class), not TransformerEngine's fused kernels.
    p.fused_attention = false;
    // What a ds_config expresses (emit.cpp deepspeed_config): bf16 or fp16 with fp32 master
    // weights, fp32 gradient accumulation (data_types.grad_accum_dtype), fp32. fp8 needs
    // Transformer Engine outside the config and pure bf16 has no switch: the search tries neither.
    p.precisions = {Precision::bf16_mixed, Precision::bf16_mixed_fp32_grads, Precision::fp16_mixed, Precision::fp32};
    return p;
}

}  // namespace preflight
