// The data-parallel part of a rank's step program: collectives (all-reduce, reduce-scatter,
// all-gather) as ops with their buffers, waits of the compute stream on the communication
// stream, and the ZeRO buffers they fill (runtime_layout.hpp gives every unit's chunk and
// padding). What each rank holds (Rajbhandari et al. 2020, sec. 5):
//  - ZeRO-0: everything whole; each unit's gradients all-reduced in place during the last
//    micro-batch's backward, after the unit's last gradient op (PyTorch DDP's overlap);
//  - ZeRO-1: master and moments sharded; the gradients reduce-scattered in place the same way,
//    the updated parameters all-gathered in place after the optimizer (llm.c, PR #421);
//  - ZeRO-2: gradients sharded too: each unit's gradients live in a buffer of their own from the
//    unit's first gradient op until its reduce-scatter, which runs every micro-batch while the
//    next unit's backward computes, and is added into the rank's gradient shard (but for a word
//    embedding tied across pipeline stages, whose unit holds its buffer all step and is
//    reduce-scattered once, after its two copies are summed: tie_embedding_grads);
//  - ZeRO-3: parameters sharded too: each unit is all-gathered before its forward and again
//    before its backward, the next layer's gather prefetched, and freed after its last use
//    (PyTorch FSDP's FlatParameter per layer, forward and backward prefetch).
#include <algorithm>
#include <stdexcept>

#include "program_builder.hpp"

namespace preflight::runtime::program_detail {

namespace {

const ShardUnit& unit_of(const Program& P, std::size_t u) { return P.layout.units[u]; }

// The whole unit u of a flat buffer laid out like the parameters (begin .. begin + padded).
View unit_region(const Program& P, BufferId b, std::size_t u) {
    const ShardUnit& s = unit_of(P, u);
    return {b, 1, s.padded, s.padded, s.begin};
}
// The whole of a per-unit buffer, and this rank's chunk of unit u in a shard buffer.
View whole(const Program& P, BufferId b) {
    const std::int64_t n = P.buffers[static_cast<std::size_t>(b)].elements;
    return {b, 1, n, n, 0};
}
View shard_chunk(const Program& P, BufferId b, std::size_t u) {
    const ShardUnit& s = unit_of(P, u);
    return {b, 1, s.chunk, s.chunk, s.shard_begin};
}

std::string unit_label(const Program& P, std::size_t u) { return unit_name(unit_of(P, u)); }

bool zero3(const Program& P) { return P.plan.zero == zero_weights; }
bool grads_sharded(const Program& P) { return P.plan.zero >= zero_gradients; }
// ZeRO-0/1 with an fp32 accumulation buffer reduce it after the last micro-batch's
// accumulation, not unit by unit during the backward.
bool reduces_after_accumulation(const Program& P) { return !grads_sharded(P) && P.grads_fp32 != kNoBuffer; }

// The collective that reduces unit u's gradients.
void emit_reduction(Builder& B, std::vector<Op>& out, std::size_t u, const Phase& ph) {
    Program& P = B.p_;
    if (grads_sharded(P)) {  // reduce_scatter: v0 = the unit's gradient buffer, v1 = this rank's shard chunk (+=)
        Op& o = B.emit_collective(out, OpKind::reduce_scatter, unit_label(P, u) + " gradients reduce-scatter", ph,
                                  static_cast<std::int64_t>(u));
        o.group = P.unit_group(unit_of(P, u));
        o.v[0] = whole(P, P.unit_grads[u]);
        o.v[1] = shard_chunk(P, P.grad_shard, u);
        B.reducing.emplace_back(u, B.last_collective);
        return;
    }
    const BufferId g = P.grads_fp32 != kNoBuffer ? P.grads_fp32 : P.grads;
    if (P.plan.zero == zero_none) {  // all_reduce: v0 = the unit's gradients, in place
        Op& o = B.emit_collective(out, OpKind::all_reduce, unit_label(P, u) + " gradients all-reduce", ph,
                                  static_cast<std::int64_t>(u));
        o.group = P.unit_group(unit_of(P, u));
        o.v[0] = unit_region(P, g, u);
        return;
    }
    // reduce_scatter (ZeRO-1): v0 = the unit in the full buffer; this rank's chunk reduced in place
    Op& o = B.emit_collective(out, OpKind::reduce_scatter, unit_label(P, u) + " gradients reduce-scatter", ph,
                              static_cast<std::int64_t>(u));
    o.group = P.unit_group(unit_of(P, u));
    o.v[0] = unit_region(P, g, u);
}

// ZeRO-2/3: waits for the reductions in flight and frees their unit buffers.
void finish_reductions(Builder& B, std::vector<Op>& out, const Phase& ph, std::size_t keep_newest) {
    Program& P = B.p_;
    if (B.reducing.size() <= keep_newest) return;
    const std::size_t n = B.reducing.size() - keep_newest;
    std::vector<BufferId> release;
    for (std::size_t i = 0; i < n; ++i) release.push_back(P.unit_grads[B.reducing[i].first]);
    B.emit_wait(out, B.reducing[n - 1].second, ph, std::move(release));
    B.reducing.erase(B.reducing.begin(), B.reducing.begin() + static_cast<std::ptrdiff_t>(n));
}

void begin_unit_grads(Builder& B, std::vector<Op>& out, std::size_t u, const Phase& ph) {
    Program& P = B.p_;
    // unit_grads_begin: v0 = the unit's gradient buffer (allocated here), zeroed
    Op& o = B.emit(out, OpKind::unit_grads_begin, unit_label(P, u) + " gradient buffer", ph);
    o.unit = static_cast<std::int64_t>(u);
    o.alloc = {P.unit_grads[u]};
    o.v[0] = whole(P, P.unit_grads[u]);
}

// The LM head is the word embedding itself (tied, on one stage).
bool tied_output(const Program& P) { return P.model.tied_embeddings && P.dims.first_stage && P.dims.last_stage; }
// A tied word embedding on the first stage and its copy on the last (pp > 1): the unit holding it
// on this stage is reduced only once the two copies' gradients are summed (tie_embedding_grads).
bool tied_across_stages(const Program& P) {
    return P.model.tied_embeddings && P.dims.pp > 1 && (P.dims.first_stage || P.dims.last_stage);
}
bool defers_reduction(const Program& P, std::size_t u) {
    return tied_across_stages(P) && u == (P.dims.first_stage ? std::size_t{0} : P.layout.units.size() - 1);
}
// ZeRO-2/3: that unit's gradients stay in their unit buffer from the step's start, accumulated
// over the micro-batches, until the two copies are summed; only then is it reduce-scattered.
bool holds_tied_unit(const Program& P, std::size_t u) { return grads_sharded(P) && defers_reduction(P, u); }

}  // namespace

bool data_parallel(const Program& P) { return P.plan.dp > 1 || P.plan.zero != zero_none; }
// The stage's units: the embedding (first stage only), its layers (each followed by its experts'
// unit under expert parallelism), the head (last stage only).
namespace {
bool experts_apart(const Program& P) { return P.dims.moe() && P.dims.ep > 1; }
}  // namespace
std::size_t layer_unit(const Program& P, std::int64_t l) {
    return static_cast<std::size_t>((P.dims.first_stage ? 1 : 0) + (l - 1) * (experts_apart(P) ? 2 : 1));
}
std::size_t last_layer_unit(const Program& P, std::int64_t l) { return layer_unit(P, l) + (experts_apart(P) ? 1 : 0); }
namespace {
// Layer l's units: its own, and its experts' under expert parallelism (gathered, reduced together).
std::vector<std::size_t> layer_units(const Program& P, std::int64_t l) {
    std::vector<std::size_t> v{layer_unit(P, l)};
    if (experts_apart(P)) v.push_back(layer_unit(P, l) + 1);
    return v;
}
}  // namespace
std::size_t embedding_unit() { return 0; }
std::size_t head_unit(const Program& P) { return P.layout.units.size() - 1; }

void add_unit_buffers(Builder& B) {
    Program& P = B.p_;
    const std::size_t n = P.layout.units.size();
    P.unit_weights.assign(n, kNoBuffer);
    P.unit_grads.assign(n, kNoBuffer);
    for (std::size_t u = 0; u < n; ++u) {
        const ShardUnit& s = unit_of(P, u);
        if (zero3(P)) P.unit_weights[u] = B.buffer(unit_name(s) + " gathered parameters", Category::sharding, P.weight, s.padded);
        if (grads_sharded(P)) P.unit_grads[u] = B.buffer(unit_name(s) + " unreduced gradients", Category::sharding, P.grad, s.padded);
    }
    add_unit_fp8_buffers(B);
}

void gather_unit(Builder& B, std::vector<Op>& out, std::size_t u, const Phase& ph) {
    Program& P = B.p_;
    // all_gather (ZeRO-3): v0 = the unit's gathered buffer (allocated here), v1 = this rank's shard chunk
    Op& o = B.emit_collective(out, OpKind::all_gather, unit_label(P, u) + " parameters all-gather", ph,
                              static_cast<std::int64_t>(u));
    o.group = P.unit_group(unit_of(P, u));
    o.alloc = {P.unit_weights[u]};
    o.v[0] = whole(P, P.unit_weights[u]);
    o.v[1] = shard_chunk(P, P.weights, u);
    B.gathered_at.resize(P.layout.units.size(), -1);
    B.gathered_at[u] = B.last_collective;
}

namespace {
// The compute stream waits for unit u's latest gather.
void wait_gathered(Builder& B, std::vector<Op>& out, std::size_t u, const Phase& ph) {
    B.emit_wait(out, B.gathered_at.at(u), ph);
}
}  // namespace

void release_gathered(Builder& B, Op& last, std::size_t u) {
    if (!zero3(B.p_)) return;
    last.free.push_back(B.p_.unit_weights[u]);
    if (!B.p_.unit_fp8.empty() && B.p_.unit_fp8[u] != kNoBuffer) last.free.push_back(B.p_.unit_fp8[u]);
}

void layer_forward_gathers(Builder& B, std::vector<Op>& out, std::int64_t l, const Phase& ph) {
    Program& P = B.p_;
    if (!zero3(P)) return;
    // Within the layer's model chunk: the next chunk's forward is another pass, later.
    const Dims::LayerChunk& c = P.dims.chunks[P.dims.chunk_of(l)];
    if (l == c.first)  // later layers were prefetched
        for (std::size_t u : layer_units(P, l)) gather_unit(B, out, u, ph);
    if (l < c.first + c.layers - 1)
        for (std::size_t u : layer_units(P, l + 1)) gather_unit(B, out, u, ph);
    for (std::size_t u : layer_units(P, l)) wait_gathered(B, out, u, ph);
    cast_unit_fp8(B, out, layer_unit(P, l), ph);
}

void layer_backward_begin(Builder& B, std::vector<Op>& out, std::int64_t l, const Phase& ph) {
    Program& P = B.p_;
    if (zero3(P)) {
        const Dims::LayerChunk& c = P.dims.chunks[P.dims.chunk_of(l)];
        if (l == c.first + c.layers - 1)  // earlier layers were prefetched
            for (std::size_t u : layer_units(P, l)) gather_unit(B, out, u, ph);
        if (l > c.first)
            for (std::size_t u : layer_units(P, l - 1)) gather_unit(B, out, u, ph);
        for (std::size_t u : layer_units(P, l)) wait_gathered(B, out, u, ph);
        cast_unit_fp8(B, out, layer_unit(P, l), ph);
    }
    if (grads_sharded(P))
        for (std::size_t u : layer_units(P, l)) begin_unit_grads(B, out, u, ph);
}

void layer_backward_end(Builder& B, std::vector<Op>& out, std::int64_t l, const Phase& ph, bool reduce) {
    Program& P = B.p_;
    for (std::size_t u : layer_units(P, l)) release_gathered(B, out.back(), u);
    // ZeRO-2/3 on a chunk that does not begin the model: its first layer's reduce-scatter waits
    // until the input gradient is sent (stage_backward_end), so that the send, on the same
    // communication stream, does not queue behind it on the pipeline's critical path.
    const std::size_t chunk = P.dims.chunk_of(l);
    const bool after_send = grads_sharded(P) && l == P.dims.chunks[chunk].first && !P.dims.model_first(chunk);
    const std::vector<std::size_t> units = layer_units(P, l);
    if (!after_send && (grads_sharded(P) || (reduce && !reduces_after_accumulation(P))))
        for (std::size_t u : units) emit_reduction(B, out, u, ph);
    if (grads_sharded(P)) finish_reductions(B, out, ph, after_send ? 0 : units.size());  // those before layer l's: overlapped with it
}

void output_gathers(Builder& B, std::vector<Op>& out, const Phase& ph) {
    Program& P = B.p_;
    if (!zero3(P)) return;
    gather_unit(B, out, head_unit(P), ph);
    if (tied_output(P)) gather_unit(B, out, embedding_unit(), ph);
    B.emit_wait(out, B.last_collective, ph);
}

void output_grads_begin(Builder& B, std::vector<Op>& out, const Phase& ph) {
    Program& P = B.p_;
    if (!grads_sharded(P)) return;
    if (!holds_tied_unit(P, head_unit(P))) begin_unit_grads(B, out, head_unit(P), ph);
    if (tied_output(P)) begin_unit_grads(B, out, embedding_unit(), ph);
}

void output_end(Builder& B, std::vector<Op>& out, const Phase& ph, bool reduce) {
    Program& P = B.p_;
    release_gathered(B, out.back(), head_unit(P));
    if (tied_output(P)) release_gathered(B, out.back(), embedding_unit());
    if (grads_sharded(P)) {
        if (!holds_tied_unit(P, head_unit(P))) emit_reduction(B, out, head_unit(P), ph);
        // A tied embedding's gradient so far (the head's share): reduced now, its buffer freed,
        // and opened again for the embedding's own backward.
        if (tied_output(P)) emit_reduction(B, out, embedding_unit(), ph);
    } else if (reduce && !reduces_after_accumulation(P) && !defers_reduction(P, head_unit(P))) {
        emit_reduction(B, out, head_unit(P), ph);  // a tied embedding is reduced after its own backward
    }
}

void output_pass_end(Builder& B, std::vector<Op>& out, const Phase& ph) {
    if (grads_sharded(B.p_) && B.p_.plan.pp_schedule == PpSchedule::interleaved) finish_reductions(B, out, ph, 0);
}

void embedding_backward_begin(Builder& B, std::vector<Op>& out, const Phase& ph) {
    Program& P = B.p_;
    if (!grads_sharded(P)) return;
    finish_reductions(B, out, ph, 0);
    if (!holds_tied_unit(P, embedding_unit())) begin_unit_grads(B, out, embedding_unit(), ph);
}

void embedding_backward_end(Builder& B, std::vector<Op>& out, const Phase& ph, bool reduce) {
    Program& P = B.p_;
    if ((grads_sharded(P) && !holds_tied_unit(P, embedding_unit())) ||
        (reduce && !reduces_after_accumulation(P) && !defers_reduction(P, embedding_unit())))
        emit_reduction(B, out, embedding_unit(), ph);
    if (grads_sharded(P)) finish_reductions(B, out, ph, 0);
}

void stage_backward_end(Builder& B, std::vector<Op>& out, std::int64_t first_layer, const Phase& ph) {
    if (!grads_sharded(B.p_)) return;
    for (std::size_t u : layer_units(B.p_, first_layer)) emit_reduction(B, out, u, ph);
    finish_reductions(B, out, ph, 0);
}

void open_tied_unit_grads(Builder& B, std::vector<Op>& out) {
    Program& P = B.p_;
    const std::size_t u = P.dims.first_stage ? embedding_unit() : head_unit(P);
    if (holds_tied_unit(P, u)) begin_unit_grads(B, out, u, {PhaseKind::step_start, 0, 0});
}

void tie_embedding_grads(Builder& B, std::vector<Op>& out) {
    Program& P = B.p_;
    if (!tied_across_stages(P)) return;
    const Phase ph{PhaseKind::grad_reduce, 0, 0};
    const ParamSpec& ps = P.params[static_cast<std::size_t>(P.dims.first_stage ? P.wte : P.head)];
    const std::size_t u = P.dims.first_stage ? embedding_unit() : head_unit(P);
    // all_reduce (embedding group, sum): v0 = the tied tensor's accumulated gradient, in place (in
    // its unit buffer under ZeRO-2/3)
    Op& o = B.emit_collective(out, OpKind::all_reduce, "word embedding gradient (first + last stage) all-reduce", ph, -1);
    o.group = CommGroup::embedding;
    o.reduce = ReduceOp::sum;
    const ParamRef at = P.grad_at(P.dims.first_stage ? P.wte : P.head);
    o.v[0] = holds_tied_unit(P, u) ? View{at.buffer, 1, ps.numel(), ps.numel(), at.offset}
                                   : View{P.optimizer_grads(), 1, ps.numel(), ps.numel(), ps.offset};
    if (data_parallel(P) && !reduces_after_accumulation(P)) emit_reduction(B, out, u, ph);
    if (holds_tied_unit(P, u)) finish_reductions(B, out, ph, 0);
}

void reduce_accumulated(Builder& B, std::vector<Op>& out) {
    Program& P = B.p_;
    if (!data_parallel(P) || !reduces_after_accumulation(P)) return;
    for (std::size_t u = 0; u < P.layout.units.size(); ++u) emit_reduction(B, out, u, {PhaseKind::grad_reduce, 0, 0});
}

void wait_all(Builder& B, std::vector<Op>& out, const Phase& ph) {
    if (B.collectives > 0) B.emit_wait(out, B.collectives - 1, ph);
}

void reduce_sequence_parallel_grads(Builder& B, std::vector<Op>& out) {
    Program& P = B.p_;
    if (std::none_of(P.params.begin(), P.params.end(), [](const ParamSpec& ps) { return ps.tp_partial_grad; })) return;
    const Phase ph{PhaseKind::grad_reduce, 0, 0};
    const BufferId grads = P.optimizer_grads();
    for (const ParamSpec& ps : P.params) {
        if (!ps.tp_partial_grad) continue;
        // Where the optimizer reads this tensor's reduced gradient: the whole of it, or (ZeRO >= 1)
        // its part in this rank's chunk of its unit (the same chunk on every tensor-parallel peer).
        std::int64_t at = ps.offset, count = ps.numel();
        if (P.layout.sharded()) {
            const ShardUnit& u = P.layout.units[static_cast<std::size_t>(ps.unit)];
            const std::int64_t first = u.begin + P.unit_rank(u) * u.chunk;
            const std::int64_t lo = std::max(first, ps.offset), hi = std::min(first + u.chunk, ps.offset + ps.numel());
            if (hi <= lo) continue;
            count = hi - lo;
            at = grads == P.grad_shard ? u.shard_begin + (lo - first) : lo;
        }
        Op& o = B.emit_collective(out, OpKind::all_reduce, ps.name + " gradient tensor-parallel all-reduce", ph, -1);
        o.group = CommGroup::tp;
        o.reduce = ReduceOp::sum;
        o.v[0] = {grads, 1, count, count, at};
    }
    wait_all(B, out, ph);
}

void gather_updated(Builder& B, std::vector<Op>& out) {
    Program& P = B.p_;
    if (P.plan.zero != zero_optimizer_states && P.plan.zero != zero_gradients) return;
    const Phase ph{PhaseKind::optimizer_step, 0, 0};
    for (std::size_t u = 0; u < P.layout.units.size(); ++u) {
        // all_gather (ZeRO-1/2): v0 = the unit in the full weights, each rank's chunk in place
        Op& o = B.emit_collective(out, OpKind::all_gather, unit_label(P, u) + " parameters all-gather", ph,
                                  static_cast<std::int64_t>(u));
        o.group = P.unit_group(unit_of(P, u));
        o.v[0] = unit_region(P, P.weights, u);
    }
    wait_all(B, out, ph);
}

}  // namespace preflight::runtime::program_detail

namespace preflight::runtime {
bool has_collectives(const Program& P) { return P.plan.gpus() > 1 || P.plan.zero != zero_none; }
}  // namespace preflight::runtime
