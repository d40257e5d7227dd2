// Profile (deepspeed_zero_optimizer): DeepSpeed's ZeRO optimizers term by term, with the settings
// of FrameworkProfile::deepspeed_zero (`--emit deepspeed`'s overlap_comm on and default
// reduce_bucket_size, sub_group_size and ZeRO-3 prefetcher, or a `--from` ds_config's) and
// contiguous_gradients on, with or without offload_optimizer. Read from DeepSpeed v0.19.6 (edaa722):
// runtime/zero/stage_1_and_2.py (DeepSpeedZeroOptimizer, ZeRO-1/2), runtime/zero/stage3.py
// (ZeRO-3), runtime/fp16/fused_optimizer.py (FP16_Optimizer, which also runs bf16 without ZeRO:
// engine.py _do_optimizer_sanity_check returns DDP_BFLOAT16), runtime/engine.py
// (allreduce_gradients, buffered_allreduce_fallback). The optimizer is DeepSpeed's FusedAdam (a
// config "optimizer" block), which steps without temporaries (torch's foreach AdamW would add an fp32
// one per element: emit_deepspeed.cpp deepspeed_optimizer says so). Never measured: no DeepSpeed
// memory figure has been recorded in this project.
#include <algorithm>
#include <vector>

#include "preflight/planner/checked.hpp"
#include "preflight/planner/plan.hpp"
#include "stage_model.hpp"

namespace preflight::memory_detail {

namespace {

// engine.py MEMORY_OPT_ALLREDUCE_SIZE = 5e8 elements (buffered_allreduce_fallback without ZeRO);
// reduce_bucket_size and sub_group_size are DeepSpeedZeroSettings' (zero/config.py defaults).
constexpr std::int64_t kAllreduceBufferElements = 500'000'000;
// stage_1_and_2.py _has_inf_or_nan: x.float() (4 B), isnan (1 B), isinf (1 B), logical_or (1 B)
// and .float() of that (4 B) are alive together: 11 B per element of the gradient it checks.
constexpr std::int64_t kOverflowCheckBytesPerElement = 11;

// The stage's tensors in the order DeepSpeed flattens them (model.parameters(): the embeddings,
// each layer's tensors, the final norm, the LM head), TP-local element counts. Within a layer the
// planner's own order (norm, attention, norm, MLP); model code may register the norms elsewhere,
// which moves a few norm vectors across a partition's edge.
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
// rank's count, for partitions of `partition` elements. Only a rank whose range holds a tensor's
// first or last element can overlap more than one tensor; any other lies inside one tensor and
// overlaps it alone: so those ranks, and each tensor that covers a whole rank, are all that is
// looked at (prefix sums, no per-rank table: dp may be 2^20).
std::int64_t busiest_partition_overlap(const std::vector<std::int64_t>& sizes, std::int64_t partition,
                                       std::int64_t ranks) {
    std::vector<std::int64_t> ends;  // ends[i] = elements up to and including tensor i
    ends.reserve(sizes.size());
    std::int64_t total = 0;
    for (const std::int64_t n : sizes) ends.push_back(total += n);
    // The elements of the tensors overlapping [lo, hi).
    const auto overlap = [&](std::int64_t lo, std::int64_t hi) {
        const auto first = std::upper_bound(ends.begin(), ends.end(), lo);  // first tensor ending after lo
        const auto last = std::lower_bound(ends.begin(), ends.end(), hi);   // the tensor holding hi - 1
        if (first == ends.end()) return std::int64_t{0};
        const std::int64_t before = first == ends.begin() ? 0 : *(first - 1);
        return (last == ends.end() ? total : *last) - before;
    };
    std::int64_t busiest = 0, start = 0;
    for (std::size_t i = 0; i < sizes.size(); start = ends[i], ++i) {
        if (sizes[i] == 0) continue;
        for (const std::int64_t r : {start / partition, std::min((ends[i] - 1) / partition, ranks - 1)})
            busiest = std::max(busiest, overlap(r * partition, std::min(r * partition + partition, total)));
        const std::int64_t whole_from = (start + partition - 1) / partition;  // ranks inside the tensor
        if (whole_from < ranks && (whole_from + 1) * partition <= ends[i]) busiest = std::max(busiest, sizes[i]);
    }
    return busiest;
}

// The largest piece of one tensor inside a partition (what one overflow check reads).
std::int64_t largest_piece(const std::vector<std::int64_t>& sizes, std::int64_t partition) {
    std::int64_t largest = 0;
    for (const std::int64_t n : sizes) largest = std::max(largest, std::min(n, partition));
    return largest;
}

// stage3.py _create_fp16_sub_groups: the rank's parameter shards (ceil(numel / dp) each, in order)
// close a sub-group once it reaches sub_group_size, so one may exceed it by its last shard.
std::int64_t largest_sub_group(const std::vector<std::int64_t>& sizes, std::int64_t ranks,
                               std::int64_t sub_group_elements) {
    std::int64_t largest = 0, open = 0;
    for (const std::int64_t n : sizes) {
        open += shard_elements(n, ranks);
        largest = std::max(largest, open);
        if (open >= sub_group_elements) open = 0;
    }
    return largest;
}

// The stage's largest tensor (TP-local elements).
std::int64_t largest_tensor(const std::vector<std::int64_t>& sizes) {
    return sizes.empty() ? 0 : *std::max_element(sizes.begin(), sizes.end());
}

// Without ZeRO: FP16_Optimizer (bf16 and fp16; fp32 runs the bare optimizer), the engine's
// all-reduce of the 16-bit gradients.
void add_fused_optimizer_terms(DeepSpeedStage& ds, const Plan& p, const StageParamElements& params,
                               std::int64_t dtype_bytes) {
    ds.kind = DeepSpeedOptimizer::unsharded;
    // engine.py buffered_allreduce_fallback flattens the gradients 5e8 elements at a time.
    ds.reduce_buffer = p.dp > 1 ? kAllreduceBufferElements * dtype_bytes : 0;
    // fused_optimizer.py step: a list of fp32 copies of every 16-bit gradient, then their flat
    // concatenation, while the 16-bit gradients still exist.
    ds.step_copies = dtype_bytes == 4 ? 0 : checked_mul(params.flat, 8, "stage parameters x 8 B");
    // initialize_optimizer_states runs optimizer.step() on zero gradients at construction: the
    // moments exist before the first step (the bare optimizer's are lazy).
    ds.moments_at_init = dtype_bytes != 4;
}

// BF16_Optimizer (bf16_optimizer.py), which engine.py _do_optimizer_sanity_check picks for bf16
// beside a pipeline without ZeRO, and for ZeRO-1 with fp32 gradient accumulation: an fp32 master
// partition, a flat high-precision gradient buffer of every parameter in grad_accum_dtype (zeroed,
// never freed) beside the 16-bit param.grad, reduced in place.
void add_bf16_optimizer_terms(StageModel& st, DeepSpeedStage& ds, const Plan& p, const StageParamElements& params,
                              std::int64_t accum_bytes) {
    ds.kind = DeepSpeedOptimizer::unsharded;
    const std::int64_t partition = shard_elements(params.flat, p.dp);
    st.states.master_weights = partition * 4;
    st.states.optimizer_states = partition * optimizer_bytes_per_param(p.optimizer);
    ds.persistent_grads = checked_mul(params.flat, accum_bytes, "stage parameters x accumulation bytes");
    // step: the gradient partition .to(fp32), no copy when it already is.
    ds.step_copies = accum_bytes == 4 ? 0 : partition * 4;
    // engine.py buffered_allreduce_fallback reduces the buffer (get_grads_for_reduction: one flat
    // tensor, so allreduce_bucket's flatten is a view) in communication_data_type, bf16 under bf16:
    // an fp32 buffer is copied whole to bf16 for the all-reduce and back.
    if (accum_bytes == 4 && p.dp > 1) ds.reduce_buffer = checked_mul(params.flat, 2, "stage parameters x 2 B");
}

// Element sizes and the reduce bucket of one plan under DeepSpeed.
struct Widths {
    std::int64_t dtype_bytes = 2;      // the model's (param.grad's) dtype
    std::int64_t master_bytes = 4;     // the master partition's: fp32, or bf16 (bf16_master_weights_and_grads)
    std::int64_t bucket_elements = 0;  // reduce_bucket_size
    bool overlap_comm = true;
    bool offload = false;  // offload_optimizer: the optimizer and its gradient partition live on the host
};

// stage3.py: one IPG bucket of reduce_bucket_size in the communication (model) dtype, allocated
// at initialisation and kept whatever the offload (_setup_for_real_optimizer); the gradient
// partitions in grad_accum_dtype (grad_partitions_flat_buffer, on self.device: the host under
// offload_optimizer); pure bf16's master partition is the bf16 partition itself (no copy).
void add_zero3_terms(StageModel& st, DeepSpeedStage& ds, const Plan& p, const DeepSpeedZeroSettings& z,
                     const StageParamElements& params, const std::vector<std::int64_t>& sizes, const Widths& w) {
    ds.kind = DeepSpeedOptimizer::zero3;
    const std::int64_t dtype_bytes = w.dtype_bytes, master_bytes = w.master_bytes;
    const std::int64_t bucket_bytes = checked_mul(w.bucket_elements, dtype_bytes, "reduce_bucket_size x bytes");
    st.static_buffers += bucket_bytes;
    if (p.precision == Precision::bf16) st.states.master_weights = 0;
    const std::int64_t grad_bytes = p.precision == Precision::bf16_mixed_fp32_grads ? 4 : dtype_bytes;
    st.states.gradients = w.offload ? 0 : params.zero3 * grad_bytes;
    // _prepare_sub_group: without offload, _prepare_fp32_grad_for_sub_group's
    // flatten(averaged_gradients[sub_group]).to(fp32), one sub-group of sub_group_size at a time;
    // offloaded, the host steps on its own fp32 gradients.
    const std::int64_t sub_group = largest_sub_group(sizes, p.dp, z.sub_group_elements);
    ds.step_copies = w.offload ? 0 : sub_group * grad_bytes + (master_bytes != grad_bytes ? sub_group * master_bytes : 0);
    // partitioned_param_coordinator.py fetch_sub_module: every module hook prefetches up to
    // min(max_live - n_available, prefetch_bucket_size) elements of the trace, one parameter past
    // the bound at most, and params it keeps for reuse stay counted in n_available: with the
    // prefetcher on, the gathered 16-bit weights stay within stage3_max_live_parameters plus the
    // largest tensor from forward through backward (in place of the generic current + next layer).
    // Prefetching off, the generic layers stand (what reuse distance keeps is not modelled).
    if (z.prefetch_elements > 0 && z.max_live_elements > 0) {
        const std::int64_t live = std::min(params.flat, checked_add(z.max_live_elements, largest_tensor(sizes),
                                                                    "stage3_max_live_parameters + largest tensor"));
        st.gather_stage = live * precision_bytes(p.precision).weight;
        st.gather_layer = st.gather_head = 0;
    }
    // __avg_scatter_grads -> coalesced_collectives.py reduce_scatter_coalesced: torch.cat of the
    // bucket's gradients into a padded flat copy (at most reduce_bucket_size elements) while the
    // next tensor's gradient waits outside the bucket (in place of a whole layer's gradients).
    st.layer_grad_bytes = ds.tensor_grads + std::min(bucket_bytes, checked_mul(params.flat, dtype_bytes, "grads"));
}

// DeepSpeedZeroOptimizer (stage_1_and_2.py) with offload_optimizer (cpu_offload; self.device 'cpu').
void add_zero12_offload_terms(StageModel& st, DeepSpeedStage& ds, const Plan& p, const std::vector<std::int64_t>& sizes,
                              std::int64_t partition, std::int64_t dtype_bytes) {
    const std::int64_t largest = largest_tensor(sizes);
    // copy_grads_in_partition (cpu_offload): each reduced gradient of the rank's partition is
    // copied into the host's fp32 partition (async_inplace_copy_grad_to_fp32_buffer_from_gpu), no
    // grads_in_partition is made, and step() runs the optimizer on the host, then copies the
    // pinned bf16 partition back in place: no gradient partition and no step copies on the GPU.
    ds.partition_grads = 0;
    ds.step_copies = 0;
    // __init__: temp_grad_buffer_for_gpu_offload, torch.zeros(largest_param_numel) in the model
    // dtype on the GPU, kept (accumulation through the host stages through it).
    st.static_buffers += checked_mul(largest, dtype_bytes, "largest parameter x bytes");
    // copy_grads_in_partition -> update_offload_overflow_tracker_for_param_grad: _has_inf_or_nan of
    // the whole param.grad of each parameter in the partition, as its bucket is reduced (every
    // dtype; x.float() copies nothing in fp32): at most the largest tensor's, charged through
    // backward and the reduction (an upper bound for the rank holding it).
    const std::int64_t check_bytes = kOverflowCheckBytesPerElement - (dtype_bytes == 4 ? 4 : 0);
    ds.offload_overflow_check = checked_mul(largest, check_bytes, "largest parameter x overflow check bytes");
    // Host: param_buffer_of_bit16_for_cpu_offload_groups (a bit16 copy of the partition, pinned by
    // default) and temp_grad_buffer_for_cpu_offload (largest_param_numel, model dtype); with
    // accumulation, async_accumulate_grad_in_cpu_via_gpu's accumulated_grads_in_cpu, one whole
    // param.dtype buffer per parameter overlapping the partition (the busiest rank's).
    std::int64_t host = checked_add(checked_mul(partition, dtype_bytes, "partition x bytes"),
                                    checked_mul(largest, dtype_bytes, "largest parameter x bytes"), "host buffers");
    if (p.grad_acc > 1)
        host = checked_add(host, checked_mul(busiest_partition_overlap(sizes, partition, p.dp), dtype_bytes, "accumulated"),
                           "host buffers");
    st.host_bytes = checked_add(st.host_bytes, host, "--offload (host bytes per GPU)");
}

// DeepSpeedZeroOptimizer (stage_1_and_2.py). Its gradients stay in the model dtype under fp32
// accumulation too (ZeRO-2: use_grad_accum_attribute is off where gradients are partitioned).
void add_zero12_terms(StageModel& st, DeepSpeedStage& ds, const Plan& p, const StageParamElements& params,
                      const std::vector<ParamTensor>& tensors, const std::vector<std::int64_t>& sizes, const Widths& w) {
    ds.kind = DeepSpeedOptimizer::zero12;
    ds.zero_one = p.zero == zero_optimizer_states;
    ds.overlap_comm = w.overlap_comm;
    const std::int64_t dtype_bytes = w.dtype_bytes, master_bytes = w.master_bytes;
    const std::int64_t partition = shard_elements(params.flat, p.dp);  // partition_size = ceil(flat / dp)
    // The fp32 master partition is a clone even when the model is fp32 (weights_partition ... .clone()),
    // on the host under offload (self.device 'cpu').
    if (p.precision == Precision::fp32 && !w.offload) st.states.master_weights = partition * 4;
    ds.partition_grads = busiest_partition_overlap(sizes, partition, p.dp) * dtype_bytes;
    // setup_buckets: contiguous_gradients allocates one reduce_bucket_size buffer in the model dtype
    // at the first gradient hook, overlap_comm a second (double buffering).
    ds.ipg_buffers = checked_mul(w.overlap_comm ? 2 * w.bucket_elements : w.bucket_elements, dtype_bytes,
                                 "reduce_bucket_size x bytes");
    // reduce_independent_p_g_buckets_and_remove_grads: a parameter above reduce_bucket_size is
    // reduced from its own param.grad, not copied into a bucket; ZeRO-1 leaves that gradient in
    // place until the epilogue clears param.grad (ZeRO-2 clears or moves it at once), except for
    // the rank's own partition, moved to grads_in_partition (not subtracted: an upper bound). The
    // LM head's from the first backward layer, each layer's after its backward, the embedding's
    // after the last layer. (Expert parallelism keeps the generic terms: every copy is the rank's.)
    if (p.zero == zero_optimizer_states) {
        if (params.head_local > w.bucket_elements) ds.large_head_grads = params.head_local * dtype_bytes;
        if (!params.head_is_embedding && params.embed_local > w.bucket_elements)
            ds.large_embed_grads = params.embed_local * dtype_bytes;
        for (const ParamTensor& t : tensors) {
            const std::int64_t local = tp_local_numel(t, p.tp, 1);
            if (t.place == TensorPlace::layer && local / t.copies > w.bucket_elements) ds.large_layer_grads += local * dtype_bytes;
        }
    }
    // A tied embedding's gradient collects the LM head's and the lookup's: its hook fires after the
    // lookup's backward, so the head's contribution is held through the whole backward.
    if (params.head_is_embedding) ds.tied_head_grads = params.head_local * dtype_bytes;
    // step: flatten(averaged_gradients) then .to(master dtype) (no copy when it already is); the bf16
    // and fp16 overflow check (check_grad_overflow) runs first, one gradient piece at a time.
    const std::int64_t step_copy = partition * dtype_bytes + (master_bytes != dtype_bytes ? partition * master_bytes : 0);
    const std::int64_t overflow = dtype_bytes == 4 ? 0 : largest_piece(sizes, partition) * kOverflowCheckBytesPerElement;
    ds.step_copies = std::max(step_copy, overflow);
    if (w.offload) add_zero12_offload_terms(st, ds, p, sizes, partition, w.dtype_bytes);
}

}  // namespace

void add_deepspeed_terms(StageModel& st, const ModelConfig& m, const Plan& p, const FrameworkProfile& prof,
                         const std::vector<ParamTensor>& tensors, const StageParamElements& params) {
    // Fine-tuning keeps the generic model's terms (fp8 is refused by the profile).
    if (p.finetune != Finetune::full || p.precision == Precision::fp8_mixed) return;
    const bool fp32_accum = p.precision == Precision::bf16_mixed_fp32_grads;
    const bool offload = p.offload != Offload::none;
    // Offloaded ZeRO-1 with fp32 accumulation keeps a separate grad_accum attribute
    // (stage_1_and_2.py use_grad_accum_attribute), not traced here: generic terms.
    if (offload && fp32_accum && p.zero == zero_optimizer_states) return;
    // engine.py _do_optimizer_sanity_check: the cases that run BF16_Optimizer (ZeRO-1 with fp32
    // accumulation only when not zero_cpu_offload).
    const bool bf16_optimizer = (p.zero == zero_none && p.pp > 1 && p.precision == Precision::bf16_mixed) ||
                                (fp32_accum && p.zero == zero_optimizer_states && !offload);
    if (p.pp > 1 && !bf16_optimizer) return;  // the pipeline engine's other optimizers: generic terms
    // Expert parallelism splits DeepSpeed's expert parameter groups apart (not traced): generic terms.
    if (p.ep > 1) return;
    DeepSpeedStage& ds = st.deepspeed;
    ds.grad_acc = p.grad_acc;
    const DeepSpeedZeroSettings& z = prof.deepspeed_zero;
    const Widths w{p.precision == Precision::fp32 ? 4 : 2, p.precision == Precision::bf16 ? prof.pure_bf16_master_bytes : 4,
                   z.reduce_bucket_hidden_squared ? m.hidden * m.hidden : z.reduce_bucket_elements,
                   z.overlap_comm.value_or(p.zero == zero_weights), offload};
    const std::int64_t dtype_bytes = w.dtype_bytes;
    ds.full_grads = checked_mul(params.flat, dtype_bytes, "stage parameters x gradient bytes");
    ds.layer_grads = params.layer_local * dtype_bytes;
    ds.head_grads = params.head_local * dtype_bytes;
    ds.embed_grads = params.embed_local * dtype_bytes;
    // AccumulateGrad adds each new gradient into param.grad, and DeepSpeed's hook moves it on, one
    // tensor at a time: at most the layer's largest tensor's (one expert's) in flight.
    for (const ParamTensor& t : tensors)
        if (t.place == TensorPlace::layer)
            ds.tensor_grads = std::max(ds.tensor_grads, tp_local_numel(t, p.tp, 1) / t.copies * dtype_bytes);
    st.grad_buckets = 0;  // replaced by DeepSpeed's own buffers
    const std::vector<std::int64_t> sizes = flat_order(p, prof, st, tensors);
    if (bf16_optimizer) return add_bf16_optimizer_terms(st, ds, p, params, fp32_accum ? 4 : 2);
    if (p.zero == zero_none) return add_fused_optimizer_terms(ds, p, params, dtype_bytes);
    if (p.zero == zero_weights) return add_zero3_terms(st, ds, p, z, params, sizes, w);
    add_zero12_terms(st, ds, p, params, tensors, sizes, w);
}

namespace {

// Where a phase lies in the step, for the gradients DeepSpeed holds there.
struct PhasePlace {
    bool before_backward = false;  // step start, a forward or the loss
    bool accumulates = false;      // a later micro-batch runs beside the earlier ones' gradients
    bool beside_earlier = false;   // before backward, beside them
    std::int64_t computing = 0;    // a new gradient before autograd accumulates it or its hook moves it
    std::int64_t reached = 0;      // layers whose gradients backward has reached (head first)
};

// param.grad from the first backward to the step (zero_grad sets them to None), growing through
// that backward; with accumulation, whole from the second micro-batch on.
std::int64_t unreduced_grads(const StageModel& st, const DeepSpeedStage& ds, const Phase& ph, const PhasePlace& at) {
    if (at.before_backward) return at.beside_earlier ? ds.full_grads : 0;
    if (ph.kind == PhaseKind::backward && !at.accumulates) return (st.last ? ds.head_grads : 0) + at.reached * ds.layer_grads;
    return ds.full_grads + at.computing;
}

// ZeRO-1 reduces only at the accumulation boundary (engine.py allreduce_gradients), so the earlier
// micro-batches accumulate whole param.grad and keep the bucket(s) setup_buckets allocated at their
// first gradient hook until the boundary's epilogue (_release_ipg_buffers). With overlap_comm the
// boundary's hooks move each gradient into a bucket and the rank's partition into
// grads_in_partition as backward goes; without it reduce_gradients does so after backward.
void zero1_phase(const StageModel& st, const DeepSpeedStage& ds, const Phase& ph, const PhasePlace& at,
                 MemoryBreakdown& b) {
    const bool in_backward = ph.kind == PhaseKind::backward || ph.kind == PhaseKind::grad_reduce;
    if (at.beside_earlier || in_backward) b.buffers += ds.ipg_buffers;
    if (in_backward) b.buffers += ds.offload_overflow_check;
    if (ph.kind == PhaseKind::optimizer_step) {
        b.gradients = ds.partition_grads;
    } else if (!ds.overlap_comm) {
        b.gradients = unreduced_grads(st, ds, ph, at) + (ph.kind == PhaseKind::grad_reduce ? ds.partition_grads : 0);
    } else if (at.before_backward) {
        b.gradients = at.beside_earlier ? ds.full_grads : 0;
    } else if (ph.kind == PhaseKind::backward) {
        const std::int64_t unreduced = at.accumulates ? (st.first ? ds.embed_grads : 0) + ph.layer * ds.layer_grads : 0;
        // (layer l's tensors above a bucket counted whole while its backward runs: an upper bound)
        b.gradients = unreduced + at.computing + ds.partition_grads + std::max(ds.large_head_grads, ds.tied_head_grads) +
                      at.reached * ds.large_layer_grads;
    } else {
        b.gradients = ds.partition_grads + ds.large_head_grads + st.layers * ds.large_layer_grads + ds.large_embed_grads;
    }
}

}  // namespace

MemoryBreakdown with_deepspeed_phase(const StageModel& st, const Phase& ph, MemoryBreakdown b) {
    const DeepSpeedStage& ds = st.deepspeed;
    if (ds.kind == DeepSpeedOptimizer::none) return b;
    if (ds.moments_at_init) b.optimizer_states = st.states.optimizer_states;
    if (ph.kind == PhaseKind::optimizer_step) b.buffers += ds.step_copies;
    if (ds.kind == DeepSpeedOptimizer::zero3) return b;  // its gradients and gathers: the generic ZeRO-3 terms
    PhasePlace at;
    at.before_backward = ph.kind == PhaseKind::step_start || ph.kind == PhaseKind::forward ||
                         ph.kind == PhaseKind::output_loss;
    // With more micro-batches than the stage holds at once (pp 1: any accumulation).
    at.accumulates = ds.grad_acc > st.in_flight;
    at.beside_earlier = at.accumulates && ph.kind != PhaseKind::step_start && at.before_backward;
    at.computing = ph.kind == PhaseKind::backward ? ds.tensor_grads : 0;
    at.reached = st.layers - ph.layer + 1;
    if (ds.kind == DeepSpeedOptimizer::unsharded) {
        b.gradients = unreduced_grads(st, ds, ph, at) + ds.persistent_grads;
        if (ph.kind == PhaseKind::grad_reduce) b.buffers += ds.reduce_buffer;
        return b;
    }
    if (ds.zero_one) {
        zero1_phase(st, ds, ph, at, b);
        return b;
    }
    // ZeRO-2 reduces in every backward and releases its buckets and grads_in_partition at each
    // epilogue; with accumulation the first micro-batch's partition stays as the accumulator
    // (all_grad_tensors) beside the next one's.
    if (at.before_backward) {
        b.gradients = at.beside_earlier ? ds.partition_grads : 0;
    } else if (ph.kind == PhaseKind::optimizer_step) {
        b.gradients = ds.partition_grads;
    } else {
        b.gradients = (at.accumulates ? 2 : 1) * ds.partition_grads + at.computing;
        if (ph.kind == PhaseKind::backward) b.gradients += ds.tied_head_grads;
        b.buffers += ds.ipg_buffers + ds.offload_overflow_check;
    }
    return b;
}

}  // namespace preflight::memory_detail
