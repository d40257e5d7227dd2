// Profile (deepspeed_zero_optimizer): DeepSpeed's ZeRO optimizers term by term, as the
// zero_optimization block `--emit deepspeed` writes them (overlap_comm and contiguous_gradients on,
// reduce_bucket_size and sub_group_size at their defaults). Read from DeepSpeed v0.19.6 (edaa722):
// runtime/zero/stage_1_and_2.py (DeepSpeedZeroOptimizer, ZeRO-1/2), runtime/zero/stage3.py
// (ZeRO-3), runtime/fp16/fused_optimizer.py (FP16_Optimizer, which also runs bf16 without ZeRO:
// engine.py _do_optimizer_sanity_check returns DDP_BFLOAT16), runtime/engine.py
// (allreduce_gradients, buffered_allreduce_fallback). Never measured: no DeepSpeed memory figure
// has been recorded in this project.
#include <algorithm>
#include <vector>

#include "preflight/planner/checked.hpp"
#include "stage_model.hpp"

namespace preflight::memory_detail {

namespace {

// zero/config.py: reduce_bucket_size = 5e8 elements, sub_group_size = 1e9 elements;
// engine.py MEMORY_OPT_ALLREDUCE_SIZE = 5e8 elements (buffered_allreduce_fallback without ZeRO).
constexpr std::int64_t kReduceBucketElements = 500'000'000;
constexpr std::int64_t kSubGroupElements = 1'000'000'000;
constexpr std::int64_t kAllreduceBufferElements = 500'000'000;
// stage_1_and_2.py _has_inf_or_nan: x.float() (4 B), isnan (1 B), isinf (1 B), logical_or (1 B)
// and .float() of that (4 B) are alive together: 11 B per element of the gradient it checks.
constexpr std::int64_t kOverflowCheckBytesPerElement = 11;

// The stage's tensors in the order DeepSpeed flattens them (model.parameters(): the embeddings,
// each layer's tensors, the final norm, the LM head), TP-local element counts.
std::vector<std::int64_t> flat_order(const Plan& p, const FrameworkProfile& prof, const StageModel& st,
                                     const std::vector<ParamTensor>& tensors) {
    std::vector<std::int64_t> out;
    const auto add = [&](TensorPlace place) {
        for (const auto& t : tensors)
            if (t.place == place) out.push_back(tp_local_numel(t, p.tp, prof.vocab_pad_multiple));
    };
    if (st.first) add(TensorPlace::embedding);
    for (std::int64_t l = 0; l < st.layers; ++l) add(TensorPlace::layer);
    if (st.last) add(TensorPlace::final_norm), add(TensorPlace::lm_head);
    return out;
}

// stage_1_and_2.py copy_grads_in_partition: grads_in_partition holds every parameter that overlaps
// the rank's partition of the flat buffer, whole (sum of params_in_partition numel). The busiest
// rank's count, for partitions of `partition` elements.
std::int64_t busiest_partition_overlap(const std::vector<std::int64_t>& sizes, std::int64_t partition,
                                       std::int64_t ranks) {
    std::vector<std::int64_t> per_rank(static_cast<std::size_t>(ranks), 0);
    std::int64_t start = 0;
    for (const std::int64_t n : sizes) {
        if (n == 0) continue;
        const std::int64_t first = start / partition, last = std::min((start + n - 1) / partition, ranks - 1);
        for (std::int64_t r = first; r <= last; ++r) per_rank[static_cast<std::size_t>(r)] += n;
        start += n;
    }
    return *std::max_element(per_rank.begin(), per_rank.end());
}

// The largest piece of one tensor inside a partition (what one overflow check reads).
std::int64_t largest_piece(const std::vector<std::int64_t>& sizes, std::int64_t partition) {
    std::int64_t largest = 0;
    for (const std::int64_t n : sizes) largest = std::max(largest, std::min(n, partition));
    return largest;
}

// stage3.py _create_fp16_sub_groups: the rank's parameter shards (ceil(numel / dp) each, in order)
// close a sub-group once it reaches sub_group_size, so one may exceed it by its last shard.
std::int64_t largest_sub_group(const std::vector<std::int64_t>& sizes, std::int64_t ranks) {
    std::int64_t largest = 0, open = 0;
    for (const std::int64_t n : sizes) {
        open += shard_elements(n, ranks);
        largest = std::max(largest, open);
        if (open >= kSubGroupElements) open = 0;
    }
    return largest;
}

}  // namespace

void add_deepspeed_terms(StageModel& st, const Plan& p, const FrameworkProfile& prof,
                         const std::vector<ParamTensor>& tensors, const StageParamElements& params) {
    // DeepSpeed's pipeline engine, offload and fine-tuning keep the generic model's terms.
    if (p.pp > 1 || p.offload != Offload::none || p.finetune != Finetune::full) return;
    const bool fp32 = p.precision == Precision::fp32;
    if (!fp32 && p.precision != Precision::bf16_mixed && p.precision != Precision::fp16_mixed &&
        p.precision != Precision::bf16)
        return;  // bf16-mixed-fp32-grads: DeepSpeed's fp32 accumulators (BF16_Optimizer), generic terms
    DeepSpeedStage& ds = st.deepspeed;
    ds.on = true;
    ds.accumulates = p.grad_acc > 1;
    const std::int64_t dtype_bytes = fp32 ? 4 : 2;  // the model's (and the gradients') dtype
    // Master partition dtype: fp32, or bf16 under bf16_master_weights_and_grads.
    const std::int64_t master_bytes = p.precision == Precision::bf16 ? prof.pure_bf16_master_bytes : 4;
    const std::vector<std::int64_t> sizes = flat_order(p, prof, st, tensors);
    ds.zero = p.zero;
    ds.full_grads = checked_mul(params.flat, dtype_bytes, "stage parameters x gradient bytes");
    ds.layer_grads = params.layer_local * dtype_bytes;
    ds.head_grads = params.head_local * dtype_bytes;
    ds.embed_grads = params.embed_local * dtype_bytes;
    st.grad_buckets = 0;  // replaced by DeepSpeed's own buffers below
    if (p.zero == zero_none) {
        // engine.py buffered_allreduce_fallback flattens the gradients 5e8 elements at a time.
        ds.reduce_buffer = p.dp > 1 ? kAllreduceBufferElements * dtype_bytes : 0;
        // fused_optimizer.py step: a list of fp32 copies of every 16-bit gradient, then their flat
        // concatenation, while the 16-bit gradients still exist; fp32 runs the bare optimizer.
        ds.step_copies = fp32 ? 0 : checked_mul(params.flat, 8, "stage parameters x 8 B");
        return;
    }
    if (p.zero == zero_weights) {
        // stage3.py: one IPG bucket of reduce_bucket_size in the communication dtype, allocated at
        // initialisation and kept; pure bf16's master partition is the bf16 partition itself
        // (same dtype and device: no copy).
        st.static_buffers += kReduceBucketElements * dtype_bytes;
        if (p.precision == Precision::bf16) st.states.master_weights = 0;
        // _prepare_fp32_grad_for_sub_group: flatten(averaged_gradients[sub_group]).to(fp32), one
        // sub-group at a time.
        const std::int64_t sub_group = largest_sub_group(sizes, p.dp);
        ds.step_copies = sub_group * dtype_bytes + (master_bytes != dtype_bytes ? sub_group * master_bytes : 0);
        return;
    }
    // ZeRO-1/2 (stage_1_and_2.py). partition_size = ceil(flat / dp).
    const std::int64_t partition = shard_elements(params.flat, p.dp);
    // The fp32 master partition is a clone even when the model is fp32 (weights_partition ... .clone()).
    if (fp32) st.states.master_weights = partition * 4;
    ds.partition_grads = busiest_partition_overlap(sizes, partition, p.dp) * dtype_bytes;
    // setup_buckets: contiguous_gradients allocates one reduce_bucket_size buffer in the model dtype
    // at the first gradient hook, overlap_comm a second (double buffering).
    ds.ipg_buffers = 2 * kReduceBucketElements * dtype_bytes;
    // reduce_independent_p_g_buckets_and_remove_grads: a parameter above reduce_bucket_size is
    // reduced from its own param.grad, not copied into a bucket; ZeRO-1 leaves that gradient in
    // place until the epilogue clears param.grad (ZeRO-2 clears or moves it at once). The LM head's
    // from the first backward layer, the embedding's from its backward, after the last layer.
    if (p.zero == zero_optimizer_states) {
        if (params.head_local > kReduceBucketElements) ds.large_head_grads = params.head_local * dtype_bytes;
        if (!params.head_is_embedding && params.embed_local > kReduceBucketElements)
            ds.large_embed_grads = params.embed_local * dtype_bytes;
    }
    // step: flatten(averaged_gradients) then .to(master dtype) (no copy when it already is); the bf16
    // and fp16 overflow check (check_grad_overflow) runs first, one gradient piece at a time.
    const std::int64_t step_copy = partition * dtype_bytes + (master_bytes != dtype_bytes ? partition * master_bytes : 0);
    const std::int64_t overflow = fp32 ? 0 : largest_piece(sizes, partition) * kOverflowCheckBytesPerElement;
    ds.step_copies = std::max(step_copy, overflow);
}

MemoryBreakdown with_deepspeed_phase(const StageModel& st, const Phase& ph, MemoryBreakdown b) {
    const DeepSpeedStage& ds = st.deepspeed;
    if (!ds.on) return b;
    if (ds.zero == zero_weights) {  // gradients and buckets as the generic ZeRO-3 terms; the step's copy
        if (ph.kind == PhaseKind::optimizer_step) b.buffers += ds.step_copies;
        return b;
    }
    const bool before_backward = ph.kind == PhaseKind::step_start || ph.kind == PhaseKind::forward ||
                                 ph.kind == PhaseKind::output_loss;
    // A layer's 16-bit gradients while autograd computes them, before their hook moves them on.
    const std::int64_t computing = ph.kind == PhaseKind::backward ? ds.layer_grads : 0;
    // Layers whose gradients backward has reached at backward layer l (head first).
    const std::int64_t reached = st.layers - ph.layer + 1;
    switch (ds.zero) {
        case zero_none:
            // param.grad from the first backward to the step (zero_grad sets them to None); with
            // accumulation every later micro-batch runs beside all of them.
            if (ph.kind == PhaseKind::step_start) b.gradients = 0;
            else if (before_backward) b.gradients = ds.accumulates ? ds.full_grads : 0;
            else if (ph.kind == PhaseKind::backward && !ds.accumulates)
                b.gradients = (st.last ? ds.head_grads : 0) + reached * ds.layer_grads;
            else b.gradients = ds.full_grads;
            if (ph.kind == PhaseKind::grad_reduce) b.buffers += ds.reduce_buffer;
            if (ph.kind == PhaseKind::optimizer_step) b.buffers += ds.step_copies;
            return b;
        case zero_optimizer_states:
            // ZeRO-1 reduces only at the accumulation boundary (engine.py allreduce_gradients): the
            // earlier micro-batches accumulate full param.grad and keep the IPG buffers until the
            // boundary's epilogue (_release_ipg_buffers); at the boundary each hook moves its
            // gradient into a bucket, and the rank's partition into grads_in_partition.
            if (before_backward) {
                b.gradients = ds.accumulates && ph.kind != PhaseKind::step_start ? ds.full_grads : 0;
                if (ds.accumulates && ph.kind != PhaseKind::step_start) b.buffers += ds.ipg_buffers;
            } else if (ph.kind == PhaseKind::backward) {
                const std::int64_t unreduced = ds.accumulates ? (st.first ? ds.embed_grads : 0) + ph.layer * ds.layer_grads : 0;
                b.gradients = unreduced + computing + ds.partition_grads + ds.large_head_grads;
                b.buffers += ds.ipg_buffers;
            } else if (ph.kind == PhaseKind::grad_reduce) {
                b.gradients = ds.partition_grads + ds.large_head_grads + ds.large_embed_grads;
                b.buffers += ds.ipg_buffers;
            } else {
                b.gradients = ds.partition_grads;
                b.buffers += ds.step_copies;
            }
            return b;
        default:
            // ZeRO-2 reduces in every backward and releases its buckets and grads_in_partition at
            // each epilogue; with accumulation the first micro-batch's partition stays as the
            // accumulator (all_grad_tensors) beside the next one's.
            if (before_backward) {
                b.gradients = ds.accumulates && ph.kind != PhaseKind::step_start ? ds.partition_grads : 0;
            } else if (ph.kind == PhaseKind::optimizer_step) {
                b.gradients = ds.partition_grads;
                b.buffers += ds.step_copies;
            } else {
                b.gradients = (ds.accumulates ? 2 : 1) * ds.partition_grads + computing;
                b.buffers += ds.ipg_buffers;
            }
            return b;
    }
    return b;
}

}  // namespace preflight::memory_detail
