// nanotron's memory, term by term, read from huggingface/nanotron (src/nanotron/...):
//   models/llama.py       LlamaModel / LlamaForTraining / CausalSelfAttention / MLP / Loss
//   models/base.py        build_model (pipeline split by compute cost)
//   optim/gradient_accumulator.py  FP32GradientAccumulator (fp32 grad buffer + fp32 master)
//   optim/zero.py         ZeroDistributedOptimizer (ZeRO-1 sharding, _all_gather_params)
//   helpers.py            init_optimizer_and_grad_accumulator (fused torch.optim.AdamW)
//   trainer.py            DistributedDataParallel wrapping when dp > 1 (bucket_cap_mb)
//   parallel/tensor_parallel/functional.py  column/row linears, MemoryBuffer, sharded cross-entropy
//   parallel/pipeline_parallel/engine.py    OneForwardOneBackwardPipelineEngine
// plus PyTorch's caching allocator (allocator_model.hpp) with constants fitted on measured runs.
#include <algorithm>

#include "preflight/planner/checked.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/limits.hpp"
#include "preflight/planner/frameworks.hpp"

namespace preflight {

namespace {

std::string str(std::int64_t v) { return std::to_string(v); }

// The models the profile was built and fitted for: nanotron's LlamaForTraining.
void check_nanotron_model(const ModelConfig& m) {
    if (m.is_moe() || m.family == ModelFamily::gpt2)
        throw InputError("--model", "the nanotron profile models Llama-shaped dense models");
    if (m.qk_norm)
        throw InputError("--model", "the nanotron profile models Llama-shaped dense models; nanotron's models have no "
                                    "q/k norms (" + m.name + "'s q_norm and k_norm)");
    if (!m.pre_norms || m.post_norms)
        throw InputError("--model", "the nanotron profile models Llama-shaped dense models; nanotron's models have "
                                    "pre-norms alone (" + m.name + " normalizes its sublayer outputs)");
}

// Plans nanotron can build. Its own asserts: CausalSelfAttention (heads and key/value heads
// divisible by tp), TensorParallelColumnLinear (out_features divisible by tp); ZeRO stages 0/1
// only (config: zero_stage in [0, 1]); flash attention only in LlamaModel; recompute_layer is
// full-layer checkpointing.
void validate_nanotron_plan(const Plan& p, const ModelConfig& m) {
    const std::pair<const char*, std::int64_t> counts[] = {
        {"--seq", p.seq}, {"--mbs", p.mbs}, {"--grad-acc", p.grad_acc}, {"--dp", p.dp}, {"--tp", p.tp}, {"--pp", p.pp}};
    for (const auto& [flag, v] : counts)
        if (v <= 0) throw InputError(flag, "must be a positive integer, got " + str(v));
    if (p.zero < 0 || p.zero > 1)
        throw InputError("--zero", "nanotron implements ZeRO stages 0 and 1 only, got " + str(p.zero));
    if (m.heads % p.tp != 0 || m.kv_heads % p.tp != 0)
        throw InputError("--tp", str(p.tp) + " does not divide the model's " + str(m.heads) + " heads and " +
                                     str(m.kv_heads) + " key/value heads (nanotron CausalSelfAttention)");
    if (m.ffn_hidden % p.tp != 0) throw InputError("--tp", str(p.tp) + " does not divide the MLP width " + str(m.ffn_hidden));
    if (p.sp && p.tp == 1) throw InputError("--sp", "sequence parallelism needs --tp > 1");
    if (p.sp && p.seq % p.tp != 0)
        throw InputError("--sp", "sequence length " + str(p.seq) + " is not divisible by --tp " + str(p.tp));
    if (p.precision != Precision::bf16_mixed_fp32_grads && p.precision != Precision::bf16)
        throw InputError("--precision", "the nanotron profile models bf16-mixed-fp32-grads (accumulate_grad_in_fp32) "
                                        "and bf16, got " + std::string(to_string(p.precision)));
    if (p.recompute == Recompute::selective)
        throw InputError("--recompute", "nanotron checkpoints whole layers (recompute_layer): use none or full");
    if (p.attention != AttentionKind::flash) throw InputError("--attention", "nanotron's Llama uses flash attention");
    if (p.dropout > 0) throw InputError("--dropout", "nanotron's Llama has no dropout");
    check_nanotron_model(m);
    // Each refusal names the setting at fault, so a config's line can be named for it (--from).
    const std::pair<bool, const char*> outside[] = {{p.finetune != Finetune::full, "--finetune"},
                                                    {p.offload != Offload::none, "--offload"},
                                                    {p.pp_schedule != PpSchedule::one_f_one_b, "--pp-schedule"},
                                                    {p.cp != 1, "--cp"},
                                                    {p.ep != 1, "--ep"}};
    for (const auto& [refused, flag] : outside)
        if (refused)
            throw InputError(flag, "the nanotron profile (--framework nanotron) models full pre-training with the "
                                   "1F1B schedule (no LoRA/QLoRA, offload, GPipe/interleaved schedules, --cp or --ep); "
                                   "--framework megatron models them");
    limits::check_plan(p, m);  // documented bounds: no int64 overflow in the terms below
    // pp above the number of pipeline blocks is accepted: build_model leaves the trailing ranks
    // without blocks (they still hold the CUDA context and communicators).
}

}  // namespace

namespace {

// Per-rank sizes of one decoder layer under the plan (elements or bytes as named).
struct LayerSizes {
    std::int64_t tp = 1, hidden = 0, tokens = 0, seq_shards = 1, ffn_local = 0, vocab_local = 0;
    std::int64_t layer_params = 0;    // parameters of one decoder layer on one TP rank
    std::int64_t act_layer_none = 0;  // bytes one layer saves for backward without recompute
    std::int64_t layer_input = 0;     // bytes of the layer input (all full recompute keeps)
    std::int64_t act_layer = 0;       // bytes one layer saves under the plan's recompute
};

LayerSizes layer_sizes(const ModelConfig& m, const Plan& p) {
    LayerSizes z;
    z.tp = p.tp, z.hidden = m.hidden, z.tokens = p.seq * p.mbs;
    z.seq_shards = p.sp ? z.tp : 1;
    const std::int64_t tp = z.tp, hidden = z.hidden, tokens = z.tokens, seq_shards = z.seq_shards;
    const std::int64_t q_local = m.q_width() / tp, kv_local = m.kv_width() / tp, ffn_local = m.ffn_hidden / tp;
    z.ffn_local = ffn_local;
    z.vocab_local = (m.vocab + tp - 1) / tp;  // vocab padded to a multiple of tp
    // Parameters of one decoder layer on one TP rank: q, k, v (qkv_proj, column), o_proj (row),
    // gate_up_proj (column, 2*ffn), down_proj (row), two RMSNorm weights (replicated).
    z.layer_params = hidden * (q_local + 2 * kv_local) + q_local * hidden + hidden * 2 * ffn_local +
                     ffn_local * hidden + 2 * hidden;

    // Activations one decoder layer saves for backward, one micro-batch (bf16 = 2 B):
    // (per token; /sp = divided by seq_shards under sequence parallelism)
    //  input_layernorm (TritonRMSNorm) saves its input and fp32 rstd     hidden/sp + rstd
    //  qkv_proj (column linear, tp_recompute_allgather) saves the sharded input  hidden/sp
    //  the permuted q|k|v tensor (q is a view of it, kept by flash attention)
    //                                                               q_local + 2 kv_local
    //  _forward_training's contiguous key/value copy (kept by flash attention) 2 kv_local
    //  flash attention's output (o_proj input) and fp32 log-sum-exp   q_local, heads/tp
    //  post_attention_layernorm input + rstd, gate_up_proj sharded input  2 hidden/sp
    //  gate_up output (gate and up views of it are saved), silu(gate), the product
    //                                                                     4 ffn_local
    const std::int64_t norm_rstd = tokens * 4 / seq_shards;
    z.act_layer_none = tokens * (2 * hidden / seq_shards * 2 + 2 * hidden / seq_shards * 2) + 2 * norm_rstd +
                       tokens * 2 * (q_local + 2 * kv_local) + tokens * 2 * 2 * kv_local + tokens * 2 * q_local +
                       tokens * (m.heads / tp) * 4 + tokens * 2 * 4 * ffn_local;
    // Full recompute (LlamaDecoderLayer._checkpointed_forward): the layer input only.
    z.layer_input = tokens * hidden * 2 / seq_shards;
    z.act_layer = p.recompute == Recompute::full ? z.layer_input : z.act_layer_none;
    return z;
}

// Model states and persistent buffers of one stage.
void stage_states(NanotronStageMemory& s, const ModelConfig& m, const Plan& p, const LayerSizes& z) {
    const bool fp32_accum = p.precision == Precision::bf16_mixed_fp32_grads;
    const std::int64_t hidden = z.hidden, tokens = z.tokens;
    std::int64_t n = s.blocks.layers * z.layer_params;
    // Token embedding (vocab-parallel); the LM head is a column linear over the vocabulary.
    // A tied embedding is one tensor on a stage holding both, a copy on each otherwise
    // (nanotron ties the copies and all-reduces their gradients).
    if (s.blocks.embedding) n += z.vocab_local * hidden;
    if (s.blocks.head && !(m.tied_embeddings && s.blocks.embedding)) n += z.vocab_local * hidden;
    if (s.blocks.head) n += hidden;  // final norm
    s.params_local = n;
    const std::int64_t shard = p.zero >= 1 ? p.dp : 1;
    const std::int64_t n_shard = (n + shard - 1) / shard;  // parameters in this dp rank's ZeRO-1 slice
    s.bf16_weights = 2 * n;  // build_model: init_on_device_and_dtype(dtype=bf16)
    if (fp32_accum) {
        // FP32GradientAccumulator.build_grad_buffers: one fp32 buffer for every parameter
        // "independently of ZeRO sharding"; its __init__ makes the fp32 master copy of the
        // parameters it is given, which under ZeRO-1 are this dp rank's slices.
        s.fp32_grad_buffer = 4 * n;
        s.fp32_master = 4 * n_shard;
    }
    // torch.optim.AdamW (fused) over the fp32 master (or the bf16 parameters without the
    // accumulator): exp_avg and exp_avg_sq in the parameter dtype.
    s.adam_moments = (fp32_accum ? 8 : 4) * n_shard;
    // trainer.py wraps the model in DistributedDataParallel when dp > 1; the reducer
    // (torch/csrc/distributed/c10d/reducer.cpp, initialize_buckets) keeps bucket tensors for
    // every gradient in the parameter dtype.
    if (p.dp > 1) s.ddp_buckets = 2 * n;
    // bf16 .grad of each parameter, written by backward and dropped by
    // FP32GradientAccumulator.backward only after loss.backward() returns.
    s.bf16_grads = 2 * n;
    // ZeroDistributedOptimizer._all_gather_params -> distributed.py all_gather_coalesced: the
    // gathered parameters in flat bf16 buffers (_flatten_dense_tensors of the per-rank output
    // slices, 2 B/param) and a flat copy of this rank's input shard (2 B/param over the shard).
    if (p.zero >= 1 && p.dp > 1) s.zero1_gather = 2 * n + 2 * n_shard;
    // functional.py: MemoryBuffer().get("allgather", ...) holds the gathered s*b*h input of the
    // column linears in reduce-scatter mode for the whole run; with async communication
    // _RowLinearAsyncCommunication.backward keeps a second one, "allgather2", for the
    // gathered output gradient (s*b*h bf16).
    if (p.sp && z.tp > 1) s.tp_gather_buffer = 2 * tokens * hidden * 2;
    if (p.pp > 1) s.p2p_buffer = tokens * hidden * 2 / z.seq_shards;  // p2p.py: a received tensor in flight
    s.rope_tables = 2 * p.seq * m.head_dim * 4;  // fp32 cos/sin
}

// Saved activations, transients and the loss working set of one stage; returns the bytes
// one in-flight micro-batch keeps.
std::int64_t stage_activations(NanotronStageMemory& s, const Plan& p, const LayerSizes& z, std::int64_t stage) {
    const std::int64_t hidden = z.hidden, tokens = z.tokens, seq_shards = z.seq_shards;
    // engine.py OneForwardOneBackwardPipelineEngine: pp - rank - 1 warm-up forwards, then one
    // forward before each backward: pp - rank micro-batches in flight (at most grad_acc).
    s.in_flight = std::min<std::int64_t>(p.pp - stage, p.grad_acc);
    s.activations_per_layer = z.act_layer;
    std::int64_t per_mb = s.blocks.layers * z.act_layer;
    if (s.blocks.embedding) per_mb += tokens * 8;  // int64 input ids
    // Final norm input + LM-head input (bf16) and the norm's fp32 rstd.
    if (s.blocks.head) per_mb += tokens * hidden * 2 / seq_shards * 2 + tokens * 4 / seq_shards;
    if (s.blocks.loss) per_mb += tokens * 8 * 2;   // labels, masked targets
    s.activations = s.in_flight * per_mb;
    // Row-parallel linear in reduce-scatter mode: the full s*b*h product exists before
    // its reduce-scatter (o_proj and down_proj each); all-reduce mode likewise.
    s.forward_transient = (z.tp > 1 && s.blocks.layers > 0) ? tokens * hidden * 2 : 0;
    if (p.recompute == Recompute::full) s.forward_transient += z.act_layer_none;  // layer re-materialised in backward
    // Backward through one layer: the residual-stream gradient in and out, and the widest op's
    // input gradients (gate_up's 2*ffn output gradient).
    s.backward_transient = s.blocks.layers > 0 ? 2 * z.layer_input + tokens * 2 * z.ffn_local * 2 : 0;
    // Logits (nanotron LlamaModel.forward_with_hidden_states, Loss, _ShardedCrossEntropy):
    // the bf16 sharded logits and their fp32 cast coexist (6 B), then the fp32 logits and
    // `sharded_logits - logits_max` (8 B); the fp32 softmax (4 B) is saved for backward.
    if (s.blocks.loss) s.logits_working_set = tokens * z.vocab_local * 8;
    return per_mb;
}

// What the caching-allocator model charges a stage beyond its tensors, before the phases:
// loss_hidden (one micro-batch's s*b*h*2 on a stage holding the loss, else 0) and runahead_hidden
// (s*b*h*2 x layers x in-flight micro-batches beyond two), both 0 when the host waits.
struct PoolInputs {
    std::int64_t loss_hidden = 0, runahead_hidden = 0;
    const AllocatorConstants* alloc = nullptr;
    std::int64_t non_pytorch_bytes = 0;
};

// The stage's allocated and reserved peaks over its phases (forward through the loss, start
// and end of a backward, optimizer step), reserved bytes from the caching-allocator model.
void stage_peaks(NanotronStageMemory& s, std::int64_t per_mb, std::int64_t logits_bwd, const PoolInputs& pool) {
    auto breakdown = [&](std::int64_t acts, std::int64_t logits, std::int64_t extra_grads, std::int64_t extra_buffers) {
        MemoryBreakdown b;
        b.weights = s.bf16_weights;
        b.master_weights = s.fp32_master;
        b.gradients = s.fp32_grad_buffer + extra_grads;
        b.optimizer_states = s.adam_moments;
        b.activations = acts;
        b.logits_and_loss = logits;
        b.buffers = s.ddp_buckets + s.tp_gather_buffer + s.p2p_buffer + s.rope_tables + extra_buffers;
        b.overhead = pool.non_pytorch_bytes;
        return b;
    };
    // Forward of the last in-flight micro-batch, through its loss.
    const MemoryBreakdown fwd = breakdown(s.activations + s.forward_transient, s.logits_working_set, 0, 0);
    // Backward: starts with every in-flight activation (and the softmax + its bf16 gradient,
    // 6 B per logit), ends with one micro-batch fewer and every bf16 gradient written.
    const MemoryBreakdown bwd_start = breakdown(s.activations + s.backward_transient, logits_bwd, 0, 0);
    const MemoryBreakdown bwd_end = breakdown((s.in_flight - 1) * per_mb + s.backward_transient, 0, s.bf16_grads, 0);
    const MemoryBreakdown opt = breakdown(0, 0, 0, s.zero1_gather);
    // The last micro-batch's loss, its backward at the stage's last layer and at its first.
    const std::int64_t layers = s.blocks.layers, mb = s.in_flight;
    s.phases = {{{PhaseKind::output_loss, 0, mb}, fwd},
                {{PhaseKind::backward, layers, mb}, bwd_start},
                {{PhaseKind::backward, std::min<std::int64_t>(layers, 1), mb}, bwd_end},
                {{PhaseKind::optimizer_step, 0, 0}, opt}};
    s.allocated_peak = -1;
    s.reserved_peak = -1;
    s.optimizer_step_allocated = opt.total() - opt.overhead;
    for (const TimelineEntry& e : s.phases) {
        const MemoryBreakdown* b = &e.bytes;
        const std::int64_t allocated = b->total() - b->overhead;
        const std::int64_t loss_hidden = b->logits_and_loss > 0 ? pool.loss_hidden : 0;
        const std::int64_t runahead = b->activations > 0 ? pool.runahead_hidden : 0;
        const ReservedExtra extra = reserved_extra(b->activations, loss_hidden, runahead, *pool.alloc);
        const std::int64_t reserved = reserved_pool_bytes(allocated, extra);
        if (allocated > s.allocated_peak) {
            s.allocated_peak = allocated;
            s.allocated_peak_phase = e.phase;
            s.at_allocated_peak = *b;
        }
        if (reserved > s.reserved_peak) {
            s.reserved_peak = reserved;
            s.reserved_peak_phase = e.phase;
            s.at_peak = *b;
            s.reserved_extra = extra;
            s.loss_hidden_at_peak = loss_hidden;
            s.runahead_hidden_at_peak = runahead;
        }
    }
}

}  // namespace

std::vector<NanotronStageMemory> nanotron_stage_memory(const ModelConfig& m, const Plan& plan_in,
                                                       const AllocatorConstants& alloc, std::int64_t non_pytorch_bytes,
                                                       HostPace pace) {
    const Plan p = resolve_defaults(plan_in, m);
    validate_nanotron_plan(p, m);
    const auto split = pipeline_stages(m, p.pp, PipelineSplit::nanotron_compute_cost);
    const LayerSizes z = layer_sizes(m, p);
    std::vector<NanotronStageMemory> out;
    for (std::size_t i = 0; i < split.size(); ++i) {
        NanotronStageMemory s;
        s.blocks = split[i];
        stage_states(s, m, p, z);
        const std::int64_t per_mb = stage_activations(s, p, z, static_cast<std::int64_t>(i));
        const std::int64_t logits_bwd = s.blocks.loss ? z.tokens * z.vocab_local * 6 : 0;
        PoolInputs pool{0, 0, &alloc, non_pytorch_bytes};
        if (pace == HostPace::runs_ahead) {
            const std::int64_t hidden_bytes = z.tokens * z.hidden * 2;  // one micro-batch's s*b*h, bf16
            if (s.blocks.loss) pool.loss_hidden = hidden_bytes;
            // limits::check_plan bounds tokens x hidden and the layer count; in-flight <= pp.
            pool.runahead_hidden = checked_mul(checked_mul(hidden_bytes, s.blocks.layers, "--mbs (s*b*h x layers)"),
                                               std::max<std::int64_t>(0, s.in_flight - 2), "--pp (x in-flight micro-batches)");
        }
        stage_peaks(s, per_mb, logits_bwd, pool);
        out.push_back(s);
    }
    return out;
}

MemoryReport evaluate_memory_nanotron(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan_in,
                                      const MemoryOptions& options) {
    const Plan plan = resolve_defaults(plan_in, model);
    const AllocatorConstants& c = options.profile.allocator;
    const std::int64_t non_pytorch =
        options.overhead_bytes.value_or(c.non_pytorch_bytes >= 0 ? c.non_pytorch_bytes : gpu.overhead_bytes);
    const auto stages = nanotron_stage_memory(model, plan, c, non_pytorch, options.host_pace.value_or(HostPace::runs_ahead));
    MemoryReport r;
    r.params = count_params(model);
    r.capacity_bytes = gpu.memory_bytes;
    r.non_pytorch_bytes = non_pytorch;
    // The verdict judges the stage with the largest pool; peak_bytes is the most tensors any stage
    // holds (another stage's, where a pool reserve around the loss makes the difference).
    std::size_t worst = 0, most = 0;
    for (std::size_t i = 0; i < stages.size(); ++i) {
        r.stage_allocated_bytes.push_back(stages[i].allocated_peak);
        r.stage_reserved_bytes.push_back(stages[i].reserved_peak);
        if (stages[i].reserved_peak > stages[worst].reserved_peak) worst = i;
        if (stages[i].allocated_peak > stages[most].allocated_peak) most = i;
    }
    const NanotronStageMemory& s = stages[most];
    const NanotronStageMemory& pool = stages[worst];
    r.pipeline_stage = static_cast<std::int64_t>(most);
    r.layers_on_stage = s.blocks.layers;
    r.micro_batches_in_flight = s.in_flight;
    r.params_on_gpu = s.params_local;
    // peak_bytes keeps its contract meaning: the most tensors allocated at once + overhead, at the
    // phase that holds them (the reserved pool, which the verdict judges, may peak at another).
    r.at_peak = s.at_allocated_peak;
    r.activations_per_layer_bytes = s.activations_per_layer;
    r.layer_inventory = {{"layer activations (nanotron inventory)", s.activations_per_layer, false}};
    r.peak_phase = s.allocated_peak_phase;
    r.peak_bytes = r.at_peak.total();
    r.peak_allocated_bytes = s.allocated_peak;
    r.peak_reserved_bytes = pool.reserved_peak;
    if (worst != most || pool.reserved_peak_phase.kind != s.allocated_peak_phase.kind ||
        pool.reserved_peak_phase.layer != s.allocated_peak_phase.layer) {
        r.reserved_peak_stage = static_cast<std::int64_t>(worst);
        r.reserved_peak_phase = pool.reserved_peak_phase;
        r.reserved_peak_tensor_bytes = pool.at_peak.total() - pool.at_peak.overhead;
    }
    r.reserved_extra = pool.reserved_extra;
    r.verdict_margin_bytes = std::max<std::int64_t>(0, c.verdict_margin_bytes);
    r.device_peak_bytes = pool.reserved_peak + non_pytorch + r.verdict_margin_bytes;
    r.fits = options.profile.verdict_on_reserved ? r.device_peak_bytes <= r.capacity_bytes
                                                 : r.peak_bytes <= r.capacity_bytes;
    // Optimizer moments exist from the first step on (torch.optim creates them lazily, inside
    // the first step); the first step's forward/backward runs without them.
    r.first_step_peak_bytes = -1;
    for (const TimelineEntry& e : s.phases) {
        MemoryBreakdown first = e.bytes;
        if (e.phase.kind != PhaseKind::optimizer_step) first.optimizer_states = 0;
        if (first.total() > r.first_step_peak_bytes) {
            r.first_step_peak_bytes = first.total();
            r.first_step_peak_phase = e.phase;
        }
        if (!options.timeline) continue;
        r.timeline_steady.push_back(e);
        r.timeline_first.push_back({e.phase, first});
    }
    return r;
}

FrameworkProfile nanotron_profile() {
    FrameworkProfile p = non_megatron_profile();
    p.fp32_main_grads_only = false;  // its fp32 accumulator sits beside the 16-bit gradients
    p.name = "nanotron";
    p.fused_attention = false;  // models/llama.py CoreAttention: flash-attn's FlashAttention-2
    p.grad_bucket_bytes = 25 * kMiB;  // config.model.ddp_bucket_cap_mb default 25
    p.grad_buckets_in_flight = 2;
    p.logits_fp32_copy = true;
    p.norm_row_stats = true;  // TritonRMSNorm saves rstd
    p.vocab_pad_multiple = 1;
    p.check_model = &check_nanotron_model;
    // What validate_nanotron_plan accepts: accumulate_grad_in_fp32 on (the sweep's setting) or
    // off, ZeRO-0/1 (optim/zero.py), whole-layer recompute (recompute_layer).
    p.precisions = {Precision::bf16_mixed_fp32_grads, Precision::bf16};
    p.recomputes = {Recompute::none, Recompute::full};
    p.zero_stages = {zero_none, zero_optimizer_states};
    p.evaluate = &evaluate_memory_nanotron;
    p.adjust_throughput = &adjust_throughput_nanotron;
    p.verdict_on_reserved = true;
    p.allocator = nanotron_allocator_constants();
    return p;
}

}  // namespace preflight
