// torchtitan (pytorch/torchtitan) training Llama: FSDP2 over dp (the plan's --zero 3, or
// ZeRO-0/1 semantics when the user pins them), DTensor tensor/sequence parallelism, bf16 params
// with fp32 gradient reduction, fused AdamW, unfused cross-entropy in fp32.
#include "preflight/planner/frameworks.hpp"
#include "preflight/planner/throughput.hpp"

namespace preflight {

namespace {
// torchtitan's step-time specifics: --recompute selective re-runs what its op policy does not
// save (ThroughputOptions::selective_op_sac).
void adjust_throughput_torchtitan(const ModelConfig&, const Plan&, ThroughputOptions& o) { o.selective_op_sac = true; }
}  // namespace

FrameworkProfile torchtitan_profile() {
    FrameworkProfile p;
    p.name = "torchtitan";
    // FSDP2 reduce-scatters each transformer block's gradients as they are produced: no DDP
    // buckets (torchtitan/distributed/parallel_dims + torch.distributed.fsdp.fully_shard); the
    // per-layer gathered weights and gradients are the planner's ZeRO-3 gather terms.
    p.grad_bucket_bytes = 0;
    p.grad_buckets_in_flight = 0;
    // torchtitan/components/loss.py cross_entropy_loss: pred.float() then
    // torch.nn.functional.cross_entropy: the fp32 cast, log_softmax's saved fp32 output and
    // the fp32 input gradient live beside the bf16 logits at the loss's backward.
    p.logits_fp32_copy = true;
    p.loss_fp32_logit_buffers = 3;
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
    // parallelisms/parallelize_llama.py apply_fsdp at 9dec370: "For PP, do not reshard after
    // forward to avoid per-microbatch all-gathers" (every block, and the root module).
    p.fsdp_pp_keeps_params_gathered = true;
    // ... and with PyTorch's pipeline schedules, unsharded fp32 gradients accumulate over the
    // micro-batches (training.mixed_precision_reduce "float32"; memory.hpp for the sources).
    p.fsdp_pp_accumulates_unsharded_grads = true;
    // Every tensor through PyTorch's caching allocator (512-byte blocks).
    p.allocation_granularity_bytes = kTorchMinBlockBytes;
    return p;
}

}  // namespace preflight
