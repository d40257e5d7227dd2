// torchtitan (pytorch/torchtitan) training Llama: FSDP2 over dp (the plan's --zero 3, or
// ZeRO-0/1 semantics when the user pins them), DTensor tensor/sequence parallelism, bf16 params
// with fp32 gradient reduction, fused AdamW, unfused cross-entropy in fp32.
#include "preflight/planner/frameworks.hpp"

namespace preflight {

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
    // Every tensor through PyTorch's caching allocator (512-byte blocks).
    p.allocation_granularity_bytes = kTorchMinBlockBytes;
    return p;
}

}  // namespace preflight
