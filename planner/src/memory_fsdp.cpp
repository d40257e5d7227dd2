// The default (megatron) profile's ZeRO-2/3 as Megatron-FSDP runs them (FrameworkProfile::
// megatron_fsdp), term by term with megatron/core/distributed/fsdp/src/megatron_fsdp/ at
// Megatron-LM d98e8a6 (megatron_fsdp.py, param_and_grad_buffer.py), read on 2026-11-29; and
// PyTorch FSDP2's gradient shards (torchtitan's profile); DDP's buckets; TE's userbuffers; the optimizer step's
// temporaries.
#include <algorithm>

#include "activations.hpp"
#include "stage_model.hpp"

namespace preflight::memory_detail {

namespace {
// Megatron-FSDP's floor on its communication unit (megatron_fsdp.py: "Cap to 1B elements"): the
// reduce-scatter queue's capacity, twice the all-gather prefetch.
constexpr std::int64_t kMegatronFsdpQueueElements = 1'000'000'000;
}  // namespace

void add_ddp_buckets(StageModel& st, const Plan& p, const FrameworkProfile& prof, const StageParamElements& params) {
    if (p.dp <= 1 || p.zero >= 3) return;
    st.grad_buckets = prof.grad_bucket_bytes * prof.grad_buckets_in_flight;
    // Profile: DDP's flat bucket copy of the gradients, in their dtype (fp32 under autocast).
    if (prof.ddp_gradient_bucket_copy && p.zero == zero_none)
        st.static_buffers += params.flat * (activations::runs_amp(prof, p) ? 4 : profile_precision_bytes(p.precision, prof).gradient);
}

std::int64_t sp_head_gather_bytes(const Plan& p, const ModelConfig& m, const FrameworkProfile& prof, bool last) {
    if (!prof.sp_head_gather_buffer || !last || p.tp < 2 || !p.sp) return 0;
    // core/tensor_parallel/layers.py (d98e8a6): [seq x mbs, hidden] in the input's dtype (the
    // 16-bit activation; fp8 recipes keep the LM head in bf16); `p` is the cp rank's plan, seq / cp.
    return p.seq * p.mbs * m.hidden * precision_bytes(p.precision).activation;
}

std::int64_t te_userbuffer_bytes(const Plan& p, const ModelConfig& m, const MemoryOptions& opt) {
    if (!opt.tp_comm_overlap || p.tp < 2 || !p.sp) return 0;
    // Transformer Engine (d0067d0) module/base.py initialize_ub, as Megatron-LM's initialize.py
    // calls it: one buffer of [seq x mbs / cp, hidden] for each of 12 GEMMs (qkv/fc1 fprop and
    // proj/fc2 dgrad ring-exchange, proj/fc2 fprop pipelined, qkv/fc1 dgrad and wgrad bulk, proj/fc2
    // wgrad external; comm_gemm_overlap.cpp: a ring-exchange all-gather buffer is the shape's
    // size too), registered outside PyTorch's allocator. Under fp8 the 8 all-gather ones hold
    // uint8, the 4 reduce-scatter ones the 16-bit dtype. `p` is the cp rank's plan: seq / cp.
    const std::int64_t rows_by_hidden = p.seq * p.mbs * m.hidden;
    return rows_by_hidden * (p.precision == Precision::fp8_mixed ? 8 * 1 + 4 * 2 : 12 * 2);
}

std::int64_t optimizer_step_temp_bytes(const Plan& p, const FrameworkProfile& prof, const PrecisionBytes& state_pb,
                                       std::int64_t stepped, int moment_bytes) {
    std::int64_t bytes = prof.optimizer_step_temp_moments * stepped * moment_bytes;  // profile (0: none)
    // Megatron-LM (FrameworkProfile::main_grad_fp32_copy_at_step): 4 B per stepped element when the
    // main gradients are 16-bit beside fp32 main weights; under ZeRO-2/3 Megatron-FSDP makes its own
    // copy (add_megatron_fsdp_buffers below); LoRA's adapters keep fp32 gradients.
    const int main_grad_bytes = state_pb.gradient_accum > 0 ? state_pb.gradient_accum : state_pb.gradient;
    if (prof.main_grad_fp32_copy_at_step && p.zero <= 1 && p.finetune == Finetune::full && main_grad_bytes < 4 &&
        state_pb.master > 0)
        bytes += stepped * 4;
    return bytes;
}

// What Megatron-FSDP keeps under ZeRO-2/3 beyond the sharded states.
void add_megatron_fsdp_buffers(StageModel& st, const Plan& p, const FrameworkProfile& prof, const StageParamElements& params) {
    const std::int64_t unit = params.layer_local;  // an FSDP unit: one TransformerLayer (mcore_fsdp_adapter.py)
    if (unit <= 0) return;
    const PrecisionBytes state_pb = profile_precision_bytes(p.precision, prof);
    // The main gradient dtype: --megatron-fsdp-main-grads-dtype, the emitted form (fp32 for the
    // fp32-gradient recipes, else the parameters' dtype: _resolve_group_grad_dtype).
    const int grad_bytes = state_pb.gradient + state_pb.gradient_accum;
    // megatron_fsdp.py: suggested_communication_unit_size = 2 x a unit's elements under
    // optim_grads_params, else the bucket size (none given: 1e9), at least 1e9; the reduce-scatter
    // queue is that many elements, the all-gather prefetch half of it.
    // (With --overlap-grad-reduce, training.py: bucket_size = max(4e7, 1e6 x dp).)
    const std::int64_t capacity = std::max(kMegatronFsdpQueueElements, p.zero == 3 ? 2 * unit : 1'000'000 * p.dp);
    // reduce_gradients: a ready bucket waits until the queue holds <= capacity elements, then
    // joins it (wait_for_previous_grad_reduce), while the next layer's bucket fills.
    st.fsdp_grad_unit_bytes = unit * grad_bytes;
    st.fsdp_queue_units = capacity / unit + 1;
    // Modules outside the layers form buckets of their own (_get_parameter_groups). The LM head's
    // (with the final norm's) joins the queue first, at the head's backward, and leaves it once the
    // layers' buckets behind it pass the capacity; a tied embedding's, on a stage that also looks
    // tokens up, waits for that lookup's gradient through the whole backward. The embedding's
    // bucket joins last, after layer 1's backward: the queue then holds up to capacity beside it.
    const std::int64_t head = params.head_local;
    const bool head_waits = params.head_is_embedding;
    st.fsdp_head_grad_bytes = head * grad_bytes;
    // In the queue while the head and the n layer buckets before the newest fit the capacity:
    // head + (n - 1) x unit <= capacity, i.e. for n = 0 .. (capacity - head) / unit + 1.
    st.fsdp_head_backward_layers = head_waits ? st.layers : head <= capacity ? (capacity - head) / unit + 2 : 1;
    st.fsdp_end_of_backward_bytes = (std::min(capacity / unit, st.layers) * unit + params.embed_local) * grad_bytes;
    st.grad_buckets = 0;
    st.layer_grad_bytes = 0;
    // Optimizer step: a gradient shard not in the fp32 main weights' dtype is copied to it
    // (param_and_grad_buffer.py update_main_grads: optimizer_grad.to(param.dtype)).
    if (grad_bytes < 4 && state_pb.master > 0)
        st.optimizer_temp += (p.zero == 3 ? params.zero3 : shard_elements(params.flat, p.dp)) * 4;
    if (p.zero < 3) return;
    // AllGatherPipeline: buckets are prefetched until their elements reach capacity / 2.
    st.gather_prefetch_layers = (capacity / 2 + unit - 1) / unit;
    // Non-unit modules stay gathered for the whole run (docs/user-guide/features/megatron_fsdp.md:
    // "Non-unit modules remain persistently un-sharded"), beside their shards.
    st.states.weights += params.outside_layers * precision_bytes(p.precision).weight;
    st.gather_head = 0;
}

// FSDP2 (torch.distributed.fsdp.fully_shard) under ZeRO-2 (reshard_after_forward False): the
// gathered parameters stay beside their shard (_sharded_param_data), and the sharded gradient
// takes the sharded parameter's dtype, fp32 under torchtitan's MixedPrecisionPolicy(param bf16,
// reduce fp32). ZeRO-3 as the recipes count it: a mixed recipe's 2 B weight shard + 4 B master +
// 2 B gradient are its 4 B parameter and 4 B gradient shards. Under ZeRO-2 a mixed recipe's master
// is the fp32 shard but its gradient lacks 2 B; a recipe without a master (pure bf16, fp32) lacks
// the parameter shard.
void add_fsdp2_shards(StageModel& st, const Plan& p, const StageParamElements& params) {
    if (p.zero != zero_gradients) return;
    const PrecisionBytes pb = precision_bytes(p.precision);
    const std::int64_t shard = shard_elements(params.flat, p.dp);
    if (pb.master == 4 && pb.gradient == 2 && pb.gradient_accum == 0) st.states.gradients += shard * 2;
    if (pb.master == 0) st.states.weights += shard * pb.weight;
}

}  // namespace preflight::memory_detail
