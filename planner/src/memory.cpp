#include "preflight/planner/checked.hpp"
#include "preflight/planner/memory.hpp"
#include "preflight/planner/limits.hpp"

#include <algorithm>
#include <utility>

#include "preflight/planner/error.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/extensions.hpp"
#include "preflight/planner/runtime_layout.hpp"
#include "preflight/planner/throughput.hpp"
#include "activations.hpp"
#include "pace_range.hpp"
#include "stage_model.hpp"

namespace preflight {

using namespace activations;
using namespace memory_detail;

namespace {

// Elements held per category, before multiplying by bytes per element.
struct StateElements {
    std::int64_t weights = 0, gradients = 0, optimizer = 0;
};

// ZeRO stages (Rajbhandari et al. 2020, sec. 5.1-5.3): stage 1 partitions optimizer
// states (with the fp32 master copy), stage 2 adds gradients, stage 3 parameters.
// `flat` is the unsharded element count; `per_tensor_shard` is what ZeRO-3 holds when
// each tensor is split on its own (sum of ceil(numel_i / dp)).
StateElements zero_elements(std::int64_t flat, std::int64_t per_tensor_shard, ZeroStage zero, std::int64_t dp) {
    const std::int64_t flat_shard = shard_elements(flat, dp);  // ZeRO-1/2: one padded flat buffer
    const std::int64_t shard = zero == 3 ? per_tensor_shard : flat_shard;
    return {zero == 3 ? shard : flat, zero >= 2 ? shard : flat, zero >= 1 ? shard : flat};
}

ModelStateBytes state_bytes(const StateElements& e, const PrecisionBytes& pb, int optimizer_bytes) {
    ModelStateBytes b;
    b.weights = e.weights * pb.weight;
    b.gradients = e.gradients * (pb.gradient + pb.gradient_accum);
    b.master_weights = e.optimizer * pb.master;
    b.optimizer_states = e.optimizer * optimizer_bytes;
    return b;
}

std::int64_t padded_vocab(std::int64_t vocab, std::int64_t tp, std::int64_t pad_multiple) {
    const std::int64_t unit = std::max<std::int64_t>(pad_multiple, 1) * tp;
    return (vocab + unit - 1) / unit * unit;
}

}  // namespace

namespace memory_detail {

// Elements of one parameter tensor held by one tensor-parallel rank (Shoeybi et al.
// 2019, sec. 3: column/row-parallel linears; vocab-parallel embedding).
std::int64_t tp_local_numel(const ParamTensor& p, std::int64_t tp, std::int64_t vocab_pad) {
    switch (p.split) {
        case TpSplit::replicated: return p.numel();
        case TpSplit::column: return p.rows / tp * p.cols * p.copies;
        case TpSplit::row: return p.rows * (p.cols / tp) * p.copies;
        case TpSplit::vocab: return padded_vocab(p.rows, tp, vocab_pad) / tp * p.cols * p.copies;
    }
    return p.numel();
}

}  // namespace memory_detail

namespace {

// Parameters this stage owns (stage_model.hpp StageParamElements). Megatron keeps a copy of a
// tied word embedding on the last stage for the output layer when pp > 1 (its gradient is all-reduced).
StageParamElements stage_params(const ModelConfig& m, const Plan& p, const FrameworkProfile& prof, const StageModel& st,
                                const std::vector<ParamTensor>& tensors) {
    StageParamElements sp;
    for (const auto& t : tensors) {
        std::int64_t count = 0;
        switch (t.place) {
            case TensorPlace::embedding:
                count = (st.first ? 1 : 0) +
                        (st.last && !st.first && m.tied_embeddings && t.name == "word_embedding" ? 1 : 0);
                break;
            case TensorPlace::layer: count = st.layers; break;
            case TensorPlace::final_norm:
            case TensorPlace::lm_head: count = st.last ? 1 : 0; break;
        }
        if (count == 0) continue;
        const std::int64_t local = tp_local_numel(t, p.tp, prof.vocab_pad_multiple);
        sp.flat += count * local;
        sp.zero3 += count * shard_elements(local, p.dp);
        // One layer as this rank holds it: expert copies split over ep ranks (plan_extensions.cpp).
        const std::int64_t rank_local = t.copies > 1 ? local / p.ep : local;
        // fp8 copies of the layers' GEMM weights: Megatron-Core's LM head is a plain ColumnParallelLinear
        // (gpt_model.py at d98e8a6; TE's only under MXFP8), the runtime's stays bf16; torchao converts it.
        // The runtime's experts stay 16-bit (runtime_moe): no fp8 copies of theirs.
        const bool fp8_copy = t.gemm_weight && (t.place == TensorPlace::layer || prof.fp8_dynamic_scaling) &&
                              !(prof.runtime_moe && t.copies > 1);
        if (fp8_copy) {
            sp.gemm += count * rank_local;
            sp.gemm_zero3 += count * shard_elements(rank_local, p.dp);
        }
        if (t.place == TensorPlace::layer) sp.layer_local += rank_local;
        if (t.place == TensorPlace::lm_head || (t.name == "word_embedding" && st.last && m.tied_embeddings))
            sp.head_local += local;
        if (t.place == TensorPlace::embedding && st.first) sp.embed_local += local;
        if (t.place != TensorPlace::layer) sp.outside_layers += count * local;
        if (t.name == "word_embedding" && st.first && st.last && m.tied_embeddings) sp.head_is_embedding = true;
    }
    return sp;
}

// Profile: every state tensor is its own allocation, rounded up to the granularity.
void pad_state_allocations(StageModel& st, const Plan& p, const FrameworkProfile& prof,
                           const std::vector<ParamTensor>& tensors, const PrecisionBytes& state_pb, int moment_bytes) {
    auto pad = [&prof](std::int64_t bytes) { return allocation_padding(bytes, prof.allocation_granularity_bytes); };
    const int moments = optimizer_bytes_per_param(p.optimizer) / 4;
    for (const auto& t : tensors) {
        const std::int64_t count = t.place == TensorPlace::layer       ? st.layers
                                   : t.place == TensorPlace::embedding ? (st.first ? 1 : 0)
                                                                       : (st.last ? 1 : 0);
        if (count == 0) continue;
        const std::int64_t numel = tp_local_numel(t, p.tp, prof.vocab_pad_multiple);
        st.states.weights += count * pad(numel * state_pb.weight);
        st.states.gradients += count * pad(numel * state_pb.gradient);
        if (state_pb.gradient_accum > 0) st.states.gradients += count * pad(numel * state_pb.gradient_accum);
        if (state_pb.master > 0) st.states.master_weights += count * pad(numel * state_pb.master);
        st.states.optimizer_states += count * moments * pad(numel * moment_bytes);
    }
}

// Model states of the stage after ZeRO for the precision recipe (and the profile's additions).
void add_model_states(StageModel& st, const ModelConfig& m, const Plan& p, const FrameworkProfile& prof,
                      const std::vector<ParamTensor>& tensors, const StageParamElements& params) {
    const PrecisionBytes pb = precision_bytes(p.precision);
    st.params_local = params.flat;
    // Profile: under autocast with fp32 parameters the states are the fp32 recipe's.
    const bool amp = runs_amp(prof, p);
    const Precision state_precision = amp ? Precision::fp32 : p.precision;
    const PrecisionBytes state_pb = profile_precision_bytes(state_precision, prof);
    st.states = state_bytes(zero_elements(params.flat, params.zero3, p.zero, p.dp), state_pb,
                            optimizer_state_bytes(prof, p.precision, p.optimizer, amp));
    const int moment_bytes = optimizer_moment_bytes(prof, p.precision, amp);
    if (prof.allocation_granularity_bytes > 0 && p.zero == 0)
        pad_state_allocations(st, p, prof, tensors, state_pb, moment_bytes);
    // Elements the optimizer steps on the GPU: its ZeRO shard of the trainable ones (the adapters
    // under LoRA, the rank's experts under ep), none when it runs on the host.
    std::int64_t stepped = st.params_local;
    if (uses_extended_states(p)) {  // fine-tuning, offload, expert parallelism (extensions.hpp)
        const StageStates x = extended_stage_states(m, p, prof, st.layers, st.first, st.last);
        st.states = x.gpu;
        st.host_bytes = x.host_bytes;
        stepped = p.offload != Offload::none ? 0 : x.trainable_params;
    }
    if (p.zero >= 1) stepped = shard_elements(stepped, p.dp);
    if (prof.fsdp2_fp32_grad_shards && !uses_extended_states(p)) add_fsdp2_shards(st, p, params);
    if (prof.runtime_shard_units) {  // profile: the runtime's flat layout and ZeRO shards (runtime_layout.hpp)
        const RuntimeStageSpan span{st.first, st.last, 1, st.layers, {}};
        const RuntimeLayout layout =
            runtime_layout(m, p, padded_vocab(m.vocab, p.tp, prof.vocab_pad_multiple) / p.tp, span);
        st.states = runtime_model_states(layout, p.precision, p.optimizer);
    }
    st.optimizer_temp = optimizer_step_temp_bytes(p, prof, state_pb, stepped, moment_bytes);
    // fp8 weight caches are held beside the 16-bit weights (and sharded like them under ZeRO-3);
    // under --fp8-param-gather (Megatron-LM, ZeRO-1 only) the fp8 data and transpose are the layers'
    // GEMM weights themselves, whose 16-bit copy goes (fp8_params.cpp).
    // Profile: the runtime under ZeRO-3 casts a layer after each gather of it into a cache that lives
    // as long as the gathered layer (runtime/src/program_fp8.cpp add_unit_fp8_buffers).
    if (prof.runtime_shard_units && p.zero == 3)
        st.unit_fp8_layer = st.layers > 0 ? params.gemm / st.layers * pb.fp8_weight_copies : 0;
    else
        st.states.weights += (p.zero == 3 ? params.gemm_zero3 : params.gemm) * pb.fp8_weight_copies -
                             (p.fp8_param_gather ? params.gemm * pb.weight : 0);
}

// One layer's kept activations under the recompute mode (one filter over the inventory)
// and the within-layer working memory of forward and backward.
void add_layer_activations(StageModel& st, const ModelConfig& m, const Plan& p, const FrameworkProfile& prof,
                           const ActivationDims& d, const std::vector<ActivationTensor>& inventory) {
    st.act_layer_full = sum_bytes(inventory);
    st.full_recompute = p.recompute == Recompute::full;
    switch (p.recompute) {
        case Recompute::none: st.act_layer = st.act_layer_full; break;
        case Recompute::selective:
            st.act_layer = 0;
            if (prof.selective_op_sac && op_sac_applies(m)) {
                st.act_layer = sum_bytes(op_sac_inventory(m, p, d));  // profile: torchtitan's op-level policy
                break;
            }
            for (const auto& t : inventory)
                if (!t.attention_core) st.act_layer += t.bytes;
            break;
        case Recompute::full: st.act_layer = layer_input_bytes(d); break;
    }
    st.fwd_transient = forward_transient(m, p, d);
    st.bwd_transient = profile_backward_transient(m, p, prof, d, backward_transient(m, p, d));
    // Profile: the runtime gathers K and V (cp_gathered_kv_bytes) where others keep ring buffers.
    const std::int64_t cp_kv = prof.cp_gathers_kv ? cp_gathered_kv_bytes(m, p) : 0;
    // (the runtime's expert parallelism gathers tokens in place of the all-to-all buffers: runtime_moe)
    const std::int64_t ext = extension_transient_bytes(m, p) - (cp_kv > 0 ? cp_ring_buffer_bytes(m, p) : 0) -
                             (prof.runtime_moe ? ep_all_to_all_buffer_bytes(m, p) : 0);
    st.fwd_transient = std::max(st.fwd_transient, cp_kv) + ext;
    st.bwd_transient += ext;
    // One layer re-materialised (profile: its kept input is shared, not copied).
    if (p.recompute == Recompute::full)
        st.bwd_transient += st.act_layer_full - (prof.full_recompute_shares_input ? layer_input_bytes(d) : 0);
    if (p.recompute == Recompute::selective) st.bwd_transient += st.act_layer_full - st.act_layer;
    if (p.recompute == Recompute::full)
        st.pool_slack = std::llround(prof.full_recompute_pool_slack_fraction * static_cast<double>(st.act_layer_full));
}

// Embedding-level tensors on the first stage; final norm, logits and loss on the last.
void add_embedding_and_head(StageModel& st, const ModelConfig& m, const Plan& p, const MemoryOptions& opt,
                            const ActivationDims& d) {
    const FrameworkProfile& prof = opt.profile;
    const std::int64_t tokens = d.seq * d.micro_batch;
    const std::int64_t sp_div = d.sp ? d.tp : 1;
    if (st.first) {
        st.act_embed = tokens * 8;                                             // int64 token ids
        if (p.dropout > 0.0) st.act_embed += tokens * d.hidden * 1 / sp_div;  // embedding dropout mask
    }
    if (!st.last) return;
    const std::int64_t vocab_local = padded_vocab(m.vocab, p.tp, prof.vocab_pad_multiple) / p.tp;
    const std::int64_t hidden_tokens = tokens * d.hidden;
    // Final norm input and its output (the LM-head GEMM input), int64 labels. Profile: the GEMM
    // saves its all-gathered input (the whole sequence) under sequence parallelism.
    // An LM head kept in bf16 under fp8 (Megatron-Core's, the runtime's) keeps its input at the
    // activation dtype; torchao's Float8Linear head saves the fp8 cast.
    const int head_input_bytes = prof.fp8_dynamic_scaling ? d.gemm_input_bytes : d.activation_bytes;
    const std::int64_t head_gemm_input = hidden_tokens * head_input_bytes / (prof.head_saves_gathered_input ? 1 : sp_div);
    st.act_head = hidden_tokens * d.activation_bytes / sp_div + head_gemm_input + tokens * 8;
    if (prof.hf_module_inventory)  // profile: the final norm as in hf_inventory
        st.act_head =
            hidden_tokens * (m.norm == NormKind::rmsnorm ? 4 + d.residual_bytes : d.residual_bytes) / sp_div +
            head_gemm_input + tokens * 8;
    // Logits at the activation dtype plus the fp32 copy cross-entropy works in
    // (softmax kept for backward; its gradient overwrites it in place).
    st.logits_peak =
        tokens * vocab_local * (d.activation_bytes + (prof.logits_fp32_copy && d.activation_bytes < 4 ? 4 : 0));
    // Profile: fp32 buffers of an unfused loss, vocabulary-parallel ones under tp > 1.
    const int fp32_buffers = p.tp > 1 && prof.loss_parallel_fp32_logit_buffers > 0 ? prof.loss_parallel_fp32_logit_buffers
                                                                                   : prof.loss_fp32_logit_buffers;
    if (fp32_buffers > 0) st.logits_peak = tokens * vocab_local * (d.activation_bytes + 4 * fp32_buffers);
    // torch.compile fuses the loss: the logits and their gradient only, both at the activation dtype.
    if (opt.compiled_loss) st.logits_peak = tokens * vocab_local * 2 * d.activation_bytes;
    // Profile addition (off by default): the LM-head input gradient written while the
    // logits gradient is alive.
    if (prof.head_input_grad_with_logits) st.logits_peak += hidden_tokens * d.activation_bytes;
    // Profile (runtime's emit_output_and_loss): the logits gone, the final norm's backward holds the head's
    // input gradient (the rank's rows under sequence parallelism), the residual gradient it writes and its
    // row statistics (2 x fp32), no longer the head's gathered input: above the logits with a small vocabulary.
    if (prof.runtime_shard_units)
        st.logits_peak = std::max(st.logits_peak, (2 * hidden_tokens * d.activation_bytes + tokens * 8) / sp_div -
                                                      (sp_div > 1 ? head_gemm_input : 0));
}

// Buffers: workspaces, Megatron-LM's userbuffers and sequence-parallel LM-head gather, RoPE tables,
// fp8 scaling state, ZeRO-3 gathers, autocast weight copies, gradient buckets, and the overhead
// outside the framework.
void add_buffers(StageModel& st, const ModelConfig& m, const GpuSpec& gpu, const Plan& p, const MemoryOptions& opt,
                 const std::vector<ParamTensor>& tensors, const StageParamElements& params) {
    const FrameworkProfile& prof = opt.profile;
    const PrecisionBytes pb = precision_bytes(p.precision);
    st.static_buffers += prof.workspace_bytes + te_userbuffer_bytes(p, m, opt) + sp_head_gather_bytes(p, m, prof, st.last);
    if (m.position == PositionKind::rope) st.static_buffers += 2 * p.seq * m.head_dim * 4;  // fp32 cos/sin tables
    if (p.precision == Precision::fp8_mixed && prof.fp8_runtime_recipe) {
        // Profile: current scaling, an amax and a dequantization factor (fp32) for the input, the
        // weight and the output gradient of each of a layer's four GEMMs (program_fp8.cpp).
        st.static_buffers += st.layers * 4 * 3 * 2 * 4;
    } else if (p.precision == Precision::fp8_mixed) {
        // Transformer Engine delayed scaling: amax history (1024 x fp32) and scale for
        // input, weight and gradient of every GEMM.
        std::int64_t gemms = 0;
        for (const auto& t : tensors)
            if (t.gemm_weight) gemms += t.place == TensorPlace::layer ? st.layers * t.copies : 1;
        st.static_buffers += gemms * 3 * (1024 + 1) * 4;
    }
    if (prof.runtime_shard_units) {
        add_runtime_unit_buffers(st, m, p, prof);
    } else if (p.zero == 3) {
        // Gathered full (TP-local) weights of the current layer and the prefetched next one.
        st.gather_layer = params.layer_local * pb.weight;
        st.gather_head = params.head_local * pb.weight;
        st.layer_grad_bytes = params.layer_local * pb.gradient;
        // Profile: with a pipeline, FSDP keeps each block (and the root's embedding, norm and
        // output) unsharded from its forward to its backward; 1F1B interleaves them, so the whole
        // stage stays gathered.
        if (prof.fsdp_pp_keeps_params_gathered && p.pp > 1) st.gather_stage = params.flat * pb.weight;
        // Profile: the pipeline turns gradient sync off until the last micro-batch, and FSDP
        // accumulates each unsharded gradient in its fp32 reduce dtype meanwhile.
        if (prof.fsdp_pp_accumulates_unsharded_grads && p.pp > 1)
            st.grad_accum_stage = params.flat * 4;
    }
    if (runs_amp(prof, p) && prof.autocast_weight_copies) {
        // Profile: bf16 autocast copies of the fp32 GEMM weights (autocast_mode.cpp casts fp32 only,
        // caching leaves that require grad); head_local: the LM head (or tied embedding). LoRA's frozen
        // base is 16-bit: no cast. QLoRA's layers are NF4 (MatMul4Bit dequantizes per use), its head
        // fp32 (prepare_model_for_kbit_training): that cast is saved for backward.
        if (p.finetune == Finetune::full)
            for (const auto& t : tensors)
                if (t.gemm_weight && t.place == TensorPlace::layer)
                    st.autocast_layer += tp_local_numel(t, p.tp, prof.vocab_pad_multiple) * 2;
        if (p.finetune == Finetune::full || (p.finetune == Finetune::qlora && p.lora.fp32_non_quantized))
            st.autocast_head = params.head_local * 2;
    }
    add_ddp_buckets(st, p, prof, params);
    // Offload and LoRA are not Megatron-FSDP's (`--emit megatron` warns that it cannot express them).
    if (prof.megatron_fsdp && !prof.runtime_shard_units && p.zero >= 2 && p.offload == Offload::none &&
        p.finetune == Finetune::full)
        add_megatron_fsdp_buffers(st, p, prof, params);
    if (prof.deepspeed_zero_optimizer) add_deepspeed_terms(st, m, p, prof, tensors, params);
    st.overhead = opt.overhead_bytes.value_or(gpu.overhead_bytes) + st.pool_slack;
}

// 1F1B (Narayanan et al. 2021, sec. 2.2): stage i holds up to p - i micro-batches; GPipe, interleaved: extensions.hpp.
void set_micro_batches_in_flight(StageModel& st, const ModelConfig& m, const Plan& p, std::int64_t stage) {
    st.in_flight = std::min<std::int64_t>(p.pp - stage, p.grad_acc);
    if (p.pp_schedule != PpSchedule::one_f_one_b) {
        st.in_flight = std::min(pipeline_in_flight(p, stage), p.grad_acc);
        if (p.pp_schedule == PpSchedule::interleaved)
            st.earlier_layer_units = pipeline_held_layer_units(p, m.layers, stage) - st.layers;
    }
    // Profile: the runtime's own schedule, chunk by chunk, to the byte; in flight counts the
    // chunk micro-batches held at once (at most m v).
    if (st.runtime_units && p.pp_schedule == PpSchedule::interleaved) {
        st.chunk_views = runtime_chunk_views(st, m, p, stage);
        st.in_flight = pipeline_in_flight(p, stage);
    }
}

// What a stage's states and per-micro-batch activations depend on besides the plan:
// stages of the same placement differ only in the micro-batches they hold in flight.
struct StagePlace {
    bool first = false, last = false;
    std::int64_t layers = 0;
    bool operator==(const StagePlace&) const = default;
};

// One stage before its micro-batches in flight are set (set_micro_batches_in_flight).
StageModel build_stage(const ModelConfig& m, const GpuSpec& gpu, const Plan& p, const MemoryOptions& opt,
                       const StagePlace& place, const std::vector<ParamTensor>& tensors,
                       const std::vector<ActivationTensor>& inventory) {
    StageModel st;
    st.zero = p.zero;
    st.first = place.first;
    st.last = place.last;
    st.layers = place.layers;
    const StageParamElements params = stage_params(m, p, opt.profile, st, tensors);
    add_model_states(st, m, p, opt.profile, tensors, params);
    const ActivationDims d = activation_dims(m, p, opt.profile);
    add_layer_activations(st, m, p, opt.profile, d, inventory);
    add_embedding_and_head(st, m, p, opt, d);
    add_buffers(st, m, gpu, p, opt, tensors, params);
    add_autograd_grads(st, m, p, opt.profile, tensors);
    return st;
}

// Memory held at one phase of the micro-batch that reaches the stage's peak (the
// in_flight-th: the earlier ones' activations are still held).
MemoryBreakdown generic_snapshot(const StageModel& st, const Phase& ph, bool first_step) {
    MemoryBreakdown b;
    b.weights = st.states.weights;
    b.master_weights = st.states.master_weights;
    b.gradients = st.states.gradients;
    b.optimizer_states = st.states.optimizer_states;
    if (first_step && ph.kind != PhaseKind::optimizer_step) b.optimizer_states = 0;
    b.overhead = st.overhead;
    b.buffers = st.static_buffers + (ph.kind == PhaseKind::optimizer_step ? 0 : st.tied_unit_grads);

    const std::int64_t per_micro_batch = st.layers * st.act_layer + st.act_embed + st.act_head;
    const std::int64_t earlier = st.earlier_fwd >= 0 ? (ph.kind == PhaseKind::backward ? st.earlier_bwd : st.earlier_fwd)
                                 : st.earlier_layer_units >= 0
                                     ? st.earlier_layer_units * st.act_layer + (st.in_flight - 1) * (st.act_embed + st.act_head)
                                     : (st.in_flight - 1) * per_micro_batch;
    switch (ph.kind) {
        case PhaseKind::step_start: break;
        case PhaseKind::optimizer_step: b.buffers += st.optimizer_temp; break;
        case PhaseKind::grad_reduce: b.buffers += st.grad_buckets + st.fsdp_end_of_backward_bytes; break;
        case PhaseKind::forward:
            b.gradients += st.grad_accum_stage;  // 1F1B steady state: earlier micro-batches' backwards
            b.activations = earlier + st.act_embed + ph.layer * st.act_layer + st.fwd_transient;
            b.weights += ph.layer * st.autocast_layer;  // profile: copies made so far
            b.buffers += std::max(st.gather_stage, st.gather_layer * (1 + std::min(st.gather_prefetch_layers, st.layers - ph.layer))) +
                         st.unit_fp8_layer;
            break;
        case PhaseKind::output_loss:
            b.gradients += st.grad_accum_stage;
            b.activations = earlier + per_micro_batch;
            b.logits_and_loss = st.logits_peak;
            b.weights += st.layers * st.autocast_layer + st.autocast_head;
            b.buffers += std::max(st.gather_stage, st.gather_head) + st.unit_grad_output;
            break;
        case PhaseKind::backward:
            b.gradients += st.grad_accum_stage;
            b.activations = earlier + st.act_embed + ph.layer * st.act_layer + st.bwd_transient;
            // Profile: copies still saved by layers 1..l; under full recompute the autocast
            // cache was cleared after forward and only the recomputed layer's copy exists.
            b.weights += (st.full_recompute ? 1 : ph.layer) * st.autocast_layer;
            b.buffers += std::max(st.gather_stage, st.gather_layer * (1 + std::min(st.gather_prefetch_layers, ph.layer - 1))) +
                         st.layer_grad_bytes + st.grad_buckets + st.unit_grad_layer + st.unit_fp8_layer +
                         st.fsdp_grad_unit_bytes * (1 + std::min(st.fsdp_queue_units, st.layers - ph.layer)) +
                         (st.layers - ph.layer < st.fsdp_head_backward_layers ? st.fsdp_head_grad_bytes : 0) +
                         (ph.layer < st.layers                                ? st.unit_grad_layer
                          : st.last && !st.output_grads_freed_in_forward ? st.unit_grad_output
                                                                          : 0);
            break;
    }
    if (ph.kind != PhaseKind::forward && ph.kind != PhaseKind::backward) return b;
    if (st.layers == 0) b.activations = 0, b.buffers = 0;  // a chunk of the embedding alone: its ops only
    return with_embedding_point(st, ph, b, earlier);
}

MemoryBreakdown snapshot(const StageModel& st, const Phase& ph, bool first_step) {
    // Profile: DeepSpeed's gradient lifetimes (memory_deepspeed.cpp), or autograd's (memory_autograd.cpp).
    return with_autograd_grads(st, ph, with_deepspeed_phase(st, ph, generic_snapshot(st, ph, first_step)));
}

// Calls f(phase) for the forward, output and backward phases of one stage's micro-batch;
// `all_layers` false keeps only the ones that can hold the peak (activations grow through
// forward and shrink through backward, so the last layer's; under the runtime's ZeRO buffers also
// the one before it, which holds two layer units where the last holds one, or one beside the
// head's; and on its first stage layer 1's, where its embedding ops hold the gathered embedding
// or its gradients, with_embedding_point).
template <class F>
void for_each_pass_phase(const StageModel& st, bool all_layers, F&& f) {
    // (Profile: DeepSpeed's gradients accumulate over micro-batches, so with more of them than the stage
    // holds its peak micro-batch is the next one, which runs beside the earlier ones' gradients.)
    const bool after_earlier = st.deepspeed.kind != DeepSpeedOptimizer::none && st.deepspeed.grad_acc > st.in_flight;
    const std::int64_t micro_batches = st.in_flight + (after_earlier ? 1 : 0);
    // Layers gathered ahead and gradient buckets queued behind grow towards the stage's far end
    // while activations shrink: the peak may lie up to that many layers from the last (DeepSpeed's
    // gradients grow through backward: any layer).
    const std::int64_t window = std::max({std::int64_t{st.runtime_units ? 1 : 0}, st.gather_layer > 0 ? st.gather_prefetch_layers : 0,
                                          st.fsdp_queue_units, st.deepspeed.kind != DeepSpeedOptimizer::none ? st.layers : 0});
    const std::int64_t lowest = all_layers ? 1 : std::max<std::int64_t>(st.layers - window, 1);
    // (A chunk of the embedding alone, interleaved: its ops are the pass.)
    const bool embedding_points = st.runtime_units && st.first && (lowest > 1 || st.layers == 0);
    if (embedding_points) f(Phase{PhaseKind::forward, 1, micro_batches});
    for (std::int64_t layer = lowest; layer <= st.layers; ++layer) f(Phase{PhaseKind::forward, layer, micro_batches});
    if (st.last) f(Phase{PhaseKind::output_loss, 0, micro_batches});
    for (std::int64_t layer = st.layers; layer >= lowest; --layer) f(Phase{PhaseKind::backward, layer, micro_batches});
    if (embedding_points) f(Phase{PhaseKind::backward, 1, micro_batches});
}

// Calls f(model, phase, shown) for the phases in step order of one stage: `model` is the stage
// or, under the runtime's interleaved schedule, the chunk view whose pass the phase is in, `shown`
// the phase with its layer counted on the stage. A visitor, not a vector: the search judges every
// plan through it.
template <class F>
void for_each_phase(const StageModel& st, bool all_layers, F&& f) {
    f(st, Phase{PhaseKind::step_start, 0, 0}, Phase{PhaseKind::step_start, 0, 0});
    if (st.chunk_views.empty()) {
        for_each_pass_phase(st, all_layers, [&](const Phase& ph) { f(st, ph, ph); });
    } else {
        for (const StageModel::ChunkView& v : st.chunk_views) {
            const StageModel view = chunk_view_model(st, v);
            for_each_pass_phase(view, all_layers, [&](const Phase& ph) {
                Phase shown = ph;
                if (ph.layer > 0) shown.layer += v.first_layer - 1;
                f(view, ph, shown);
            });
        }
    }
    f(st, Phase{PhaseKind::grad_reduce, 0, 0}, Phase{PhaseKind::grad_reduce, 0, 0});
    f(st, Phase{PhaseKind::optimizer_step, 0, 0}, Phase{PhaseKind::optimizer_step, 0, 0});
}

struct PeakAt {
    std::int64_t bytes = -1;
    Phase phase;
    MemoryBreakdown breakdown;
};

PeakAt peak_of(const StageModel& st, bool first_step) {
    PeakAt best;
    std::size_t best_at = 0;
    for_each_phase(st, false, [&](const StageModel& at, const Phase& ph, const Phase& shown) {
        const MemoryBreakdown b = snapshot(at, ph, first_step);
        // Of two chunk views' backwards that peak alike, the one a walk of the step meets first
        // names the peak (the phase a dry run names).
        const bool earlier_view = b.total() == best.bytes && ph.kind == PhaseKind::backward &&
                                  best.phase.kind == PhaseKind::backward && at.view_backward_at < best_at;
        if (b.total() > best.bytes || earlier_view) best = {b.total(), shown, b}, best_at = at.view_backward_at;
    });
    return best;
}

}  // namespace

ModelStateBytes model_state_bytes(std::int64_t params, Precision precision, Optimizer optimizer, int zero,
                                  std::int64_t dp) {
    const auto stage = static_cast<ZeroStage>(zero);
    return state_bytes(zero_elements(params, shard_elements(params, dp), stage, dp), precision_bytes(precision),
                       optimizer_bytes_per_param(optimizer));
}

std::vector<ActivationTensor> layer_activation_inventory(const ModelConfig& model, const Plan& plan,
                                                         const FrameworkProfile& profile) {
    return kept_for_backward(full_inventory(model, plan, profile), model, plan, profile);
}

std::int64_t layer_activation_bytes(const ModelConfig& model, const Plan& plan, const FrameworkProfile& profile) {
    return sum_bytes(layer_activation_inventory(model, plan, profile));
}

void validate_memory_options(const MemoryOptions& options, const Plan& plan) {
    limits::check_overhead_bytes(options.overhead_bytes);
    check_fp8_param_gather_profile(plan, options.profile);
    check_uneven_pipeline_split_profile(plan, options.profile);
    if (options.compiled_loss && (options.profile.evaluate || options.profile.loss_fp32_logit_buffers == 0))
        throw InputError("--compiled-loss", "the " + options.profile.name + " profile does not model PyTorch's eager "
                                            "cross-entropy, whose fp32 buffers a compiled loss removes; --compiled-loss "
                                            "applies to --framework torchtitan and pytorch");
}

MemoryReport evaluate_memory(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan_in,
                             const MemoryOptions& options_in) {
    validate_memory_options(options_in, plan_in);
    if (options_in.profile.check_model) options_in.profile.check_model(model);  // before any figure of it
    MemoryOptions options = options_in;
    // The pace matters only to an allocator model with run-ahead terms; elsewhere the default is never wrong.
    const bool pace_matters = has_run_ahead_terms(options.profile.allocator);
    if (!options.host_pace)
        options.host_pace = pace_matters ? expected_host_pace(model, gpu, plan_in, options.profile) : HostPace::runs_ahead;
    if (options.profile.evaluate) {  // the profile's own model
        MemoryReport r = options.profile.evaluate(model, gpu, plan_in, options);
        r.host_pace = *options.host_pace;
        r.host_pace_expected = !options_in.host_pace;
        set_pace_range(r, model, gpu, plan_in, options);
        return r;
    }
    const Plan user_plan = resolve_defaults(plan_in, model);
    validate_plan(user_plan, model);
    if (options.profile.check_plan) options.profile.check_plan(model, user_plan);
    const Plan plan = context_parallel_rank_plan(user_plan);  // identity at cp = 1
    const auto tensors = param_tensors(model);
    const auto inventory = full_inventory(model, plan, options.profile);

    MemoryReport r;
    r.params = count_params(model, tensors);
    r.capacity_bytes = gpu.memory_bytes;
    StageModel worst;
    std::vector<std::pair<StagePlace, StageModel>> built;  // at most first, last and two middle layer counts
    std::vector<std::int64_t> host_by_stage(static_cast<std::size_t>(plan.pp), 0);  // one GPU's, per stage
    if (options.pipeline_stage && (*options.pipeline_stage < 0 || *options.pipeline_stage >= plan.pp))
        throw InputError("--pp", "stage " + std::to_string(*options.pipeline_stage) + " is outside the plan's stages 0.." +
                                     std::to_string(plan.pp - 1));
    for (std::int64_t stage = 0; stage < plan.pp; ++stage) {
        if (options.pipeline_stage && stage != *options.pipeline_stage) continue;
        const StagePlace place{stage == 0, stage == plan.pp - 1, pipeline_stage_layers(plan, model.layers, stage)};
        auto it = std::find_if(built.begin(), built.end(), [&](const auto& b) { return b.first == place; });
        if (it == built.end())
            it = built.insert(built.end(), {place, build_stage(model, gpu, plan, options, place, tensors, inventory)});
        StageModel st = it->second;
        host_by_stage[static_cast<std::size_t>(stage)] = st.host_bytes;
        set_micro_batches_in_flight(st, model, plan, stage);
        const PeakAt pk = peak_of(st, false);
        if (pk.bytes > r.peak_bytes) {
            r.peak_bytes = pk.bytes;
            r.peak_phase = pk.phase;
            r.at_peak = pk.breakdown;
            r.pipeline_stage = stage;
            worst = st;
        }
    }
    r.layers_on_stage = worst.layers;
    r.micro_batches_in_flight = worst.in_flight;
    r.params_on_gpu = worst.params_local;
    r.activations_per_layer_bytes = worst.act_layer;
    r.layer_inventory = kept_for_backward(inventory, model, plan, options.profile);
    r.fits = r.peak_bytes <= gpu.memory_bytes;
    r.host_bytes_per_gpu = worst.host_bytes;
    // One stage asked for (an emulated rank) fills its node; else the busiest node's ranks (offload.cpp).
    const std::int64_t node = std::min<std::int64_t>(user_plan.gpus(), std::max(1, gpu.gpus_per_node));
    r.host_bytes_per_node = options.pipeline_stage ? checked_mul(worst.host_bytes, node, "--offload (host bytes per node)")
                                                   : host_bytes_per_node(host_by_stage, user_plan.gpus() / plan.pp, node);
    // One micro-batch's bf16 hidden state on this rank (plan is the context-parallel rank's plan).
    const std::int64_t loss_hidden_bytes =
        checked_mul(checked_mul(plan.seq, plan.mbs, "--seq x --mbs"), 2 * model.hidden, "tokens x hidden x 2 B");
    apply_allocator_model(r, options.profile.allocator, options.profile.verdict_on_reserved, loss_hidden_bytes,
                          worst.states.gradients, *options.host_pace);
    r.host_pace = *options.host_pace;
    r.host_pace_expected = !options_in.host_pace;
    r.compiled_loss = options.compiled_loss;
    const PeakAt first = peak_of(worst, true);
    r.first_step_peak_bytes = first.bytes;
    r.first_step_peak_phase = first.phase;
    if (options.timeline) {
        for_each_phase(worst, true, [&](const StageModel& at, const Phase& ph, const Phase& shown) {
            r.timeline_steady.push_back({shown, snapshot(at, ph, false)});
            r.timeline_first.push_back({shown, snapshot(at, ph, true)});
        });
    }
    set_pace_range(r, model, gpu, plan_in, options);  // last: it may replace the whole report
    return r;
}

}  // namespace preflight
