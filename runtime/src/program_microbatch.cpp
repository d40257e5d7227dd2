// The micro-batches of a rank's step program: the embedding (first stage), the stage's layers,
// the output and loss (last stage), their backward, and the order they run in: one after the
// other on a single stage, 1F1B across pipeline stages (PipeDream-Flush, Narayanan et al. 2021,
// sec. 2.2), with the activations and gradients that cross stages sent point to point. A model
// chunk's passes serve the interleaved schedule too (program_interleaved.cpp).
#include <algorithm>
#include <functional>

#include "preflight/planner/error.hpp"
#include "preflight/planner/extensions.hpp"
#include "program_builder.hpp"

namespace preflight::runtime::program_detail {

// Synthetic tokens and the embedding of micro-batch mb; returns layer 1's input.
BufferId emit_embedding_forward(Builder& B, std::int64_t mb, BufferId tokens) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    {  // tokens: v0 = token ids [b, s]
        Op& o = B.emit(P.step, OpKind::tokens, "synthetic tokens", {PhaseKind::forward, 1, mb});
        o.alloc = {tokens};
        o.v[0] = {tokens, d.b, d.s, d.s, 0};
    }
    // Sequence parallelism: the partial embeddings go to a temporary, reduce-scattered into layer 1's input.
    const BufferId e = d.sp ? B.act("embedding partial sums", d.h, Category::temporary) : B.act(layer_input_label(P, 1), d.h);
    if (P.plan.zero == zero_weights) {  // ZeRO-3: the embedding gathered for its op only
        gather_unit(B, P.step, embedding_unit(), {PhaseKind::forward, 1, mb});
        B.emit_wait(P.step, B.last_collective, {PhaseKind::forward, 1, mb});
    }
    // embedding_fwd: v0 = tokens, v1 = x; p0 = word embedding (this rank's vocabulary rows: the
    // others' tokens give 0), p1 = position embedding (added by tensor-parallel rank 0 only, before
    // the ranks' partial rows are summed).
    Op& o = B.emit(P.step, OpKind::embedding_fwd, "embedding", {PhaseKind::forward, 1, mb});
    o.alloc = {e};
    o.v[0] = {tokens, d.b, d.s, d.s, 0};
    o.v[1] = B.full(e, d.h);
    o.p0 = P.wte;
    o.p1 = P.tp_rank == 0 || P.emulated ? P.wpe : kNoParam;
    release_gathered(B, o, embedding_unit());
    return B.reduce_seq(P.step, layer_input_label(P, 1), {PhaseKind::forward, 1, mb}, e, d.h, kNoBuffer,
                        Category::activations);
}

namespace {

// Vocabulary-parallel cross-entropy (Megatron-LM, tensor_parallel/cross_entropy.py): the row's
// largest logit and then its sum of exponentials and its label's logit, each combined over the
// tensor-parallel ranks, so the full logits are never gathered. The buffers go before the head's
// backward.
void emit_vocab_parallel_statistics(Builder& B, const Phase& ph, const View& lv, BufferId labels, BufferId& max_rows,
                                    BufferId& sums) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    max_rows = B.buffer("logit max", Category::logits, DType::f32, d.rows);
    sums = B.buffer("exp sums and label logits", Category::logits, DType::f32, 2 * d.rows);
    {  // ce_max: v0 = logits, v1 = max [rows]
        Op& o = B.emit(P.step, OpKind::ce_max, "local logit max", ph);
        o.alloc = {max_rows};
        o.v[0] = lv;
        o.v[1] = {max_rows, d.rows, 1, 1, 0};
    }
    B.tp_all_reduce(P.step, "logit max", ph, {max_rows, 1, d.rows, d.rows, 0}, ReduceOp::max);
    {  // ce_sums: v0 = logits, v1 = labels, v2 = max, v3 = sums [rows, 2]
        Op& o = B.emit(P.step, OpKind::ce_sums, "local exp sums and label logits", ph);
        o.alloc = {sums};
        o.v[0] = lv;
        o.v[1] = {labels, d.b, d.s, d.s, 0};
        o.v[2] = {max_rows, d.rows, 1, 1, 0};
        o.v[3] = {sums, d.rows, 2, 2, 0};
    }
    B.tp_all_reduce(P.step, "exp sums and label logits", ph, {sums, 1, 2 * d.rows, 2 * d.rows, 0});
}

}  // namespace

// Final norm, LM head, cross-entropy and their backward for micro-batch mb, from the last
// layer's output x (freed here). Returns the residual gradient buffer dres, which holds
// dLoss/d(last layer output).
BufferId emit_output_and_loss(Builder& B, std::int64_t mb, BufferId x, bool reduce) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    const Phase out{PhaseKind::output_loss, 0, mb};
    output_gathers(B, P.step, out);
    const BufferId xnf = B.seq_act("final norm out", d.h);
    emit_norm_fwd(B, P.step, "final norm", out, x, xnf, P.normf_w, P.normf_b);
    // Sequence parallelism: the head keeps the gathered input for its weight gradient; the shard
    // goes (the final norm's backward reads its input, not its output).
    const BufferId xg = B.gather_seq(P.step, "final norm out", out, xnf, d.h);
    if (xg != xnf) P.step.back().free.push_back(xnf);
    const BufferId labels = B.buffer("labels", Category::activations, DType::i64, d.rows);
    {  // labels: v0 = next-token ids [b, s]
        Op& o = B.emit(P.step, OpKind::labels, "synthetic labels", out);
        o.alloc = {labels};
        o.v[0] = {labels, d.b, d.s, d.s, 0};
    }
    const BufferId logits = B.buffer("logits", Category::logits, P.act, d.rows * d.vocab_padded);
    const View lv{logits, d.rows, d.vocab_padded, d.vocab_padded, 0};
    emit_linear_fwd(B, P.step, "lm head", out, B.full(xg, d.h), lv, P.head, kNoParam);
    BufferId max_rows = kNoBuffer, sums = kNoBuffer;
    if (d.tp > 1) emit_vocab_parallel_statistics(B, out, lv, labels, max_rows, sums);
    const BufferId loss = B.buffer("loss per token", Category::logits, DType::f32, d.rows);
    {  // cross_entropy: v0 = logits (overwritten by dlogits, scaled 1/(rows*grad_acc)), v1 = labels, v2 = loss rows;
       // tensor parallel: v3 = the rows' max, v4 = their exp sums and label logits (freed here)
        Op& o = B.emit(P.step, OpKind::cross_entropy, "softmax cross-entropy", out);
        o.alloc = {loss};
        o.v[0] = lv;
        o.v[1] = {labels, d.b, d.s, d.s, 0};
        o.v[2] = {loss, d.rows, 1, 1, 0};
        if (d.tp > 1) {
            o.v[3] = {max_rows, d.rows, 1, 1, 0};
            o.v[4] = {sums, d.rows, 2, 2, 0};
            o.free = {max_rows, sums};
        }
    }
    {  // loss_accumulate: v0 = loss rows, summed into the device scalars
        Op& o = B.emit(P.step, OpKind::loss_accumulate, "loss sum", out);
        o.v[0] = {loss, d.rows, 1, 1, 0};
        o.free = {loss};
    }
    output_grads_begin(B, P.step, out);
    // dxnf is the head's input gradient (logits category: the planner counts it with the logits).
    const BufferId dxnf = B.buffer(d.sp ? "d final norm out partial sums" : "d final norm out", Category::logits, P.act, d.rows * d.h);
    emit_linear_bwd(B, P.step, "lm head", out, lv, B.full(xg, d.h), B.full(dxnf, d.h), P.head, kNoParam, {dxnf});
    P.step.back().free = {logits};
    if (xg != xnf) P.step.back().free.push_back(xg);
    const BufferId dn = B.reduce_seq(P.step, "d final norm out", out, dxnf, d.h, kNoBuffer, Category::logits);
    const BufferId dres = B.seq_act("d residual", d.h, Category::temporary);
    std::vector<BufferId> release = {dn, labels, x};
    if (xg == xnf) release.push_back(xnf);
    emit_norm_bwd(B, P.step, "final norm bwd", out, x, dn, dres, false, P.normf_w, P.normf_b, {dres}, release);
    output_end(B, P.step, out, reduce);
    return dres;
}

namespace {

// Pipeline parallelism: a stage's input received from the previous stage (forward) or its output
// gradient from the next one (backward), into a new [srows, h] buffer `name` (returned).
BufferId emit_recv(Builder& B, const std::string& name, const Phase& ph, int from, Category c) {
    const Dims& d = B.d_;
    const BufferId x = B.seq_act(name, d.h, c);
    // p2p: v1 = the received tensor (allocated here)
    Op& o = B.emit(B.p_.step, OpKind::p2p, name + " receive", ph);
    o.alloc = {x};
    o.v[1] = B.seq(x, d.h);
    o.recv_peer = static_cast<std::int8_t>(from);
    return x;
}

// The stage's output (forward) or its input gradient (backward) sent on and freed.
void emit_send(Builder& B, BufferId x, const Phase& ph, int to) {
    const Dims& d = B.d_;
    Program& P = B.p_;
    // p2p: v0 = the sent tensor (freed after)
    Op& o = B.emit(P.step, OpKind::p2p, P.buffers[static_cast<std::size_t>(x)].name + " send", ph);
    o.v[0] = B.seq(x, d.h);
    o.send_peer = static_cast<std::int8_t>(to);
    o.free = {x};
}

}  // namespace

// Forward of model chunk `chunk` on micro-batch mb: the embedding (the model's first chunk) or
// the previous chunk's output received (from the previous stage; the first stage's later chunks
// from the last stage's), the chunk's layers, then the output and loss (the model's last chunk)
// or the output sent on. `reduce`: the output layer reduces its gradients.
ForwardState emit_forward_pass(Builder& B, std::size_t chunk, std::int64_t mb, bool reduce) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    const Dims::LayerChunk& c = d.chunks[chunk];
    const std::int64_t last_layer = c.first + c.layers - 1;
    const Recompute recompute = P.plan.recompute;
    ForwardState s;
    BufferId x = kNoBuffer;
    if (d.model_first(chunk)) {
        s.tokens = B.buffer("tokens", Category::activations, DType::i64, d.rows);
        x = emit_embedding_forward(B, mb, s.tokens);
    } else {
        x = emit_recv(B, layer_input_label(P, c.first), {PhaseKind::forward, c.first, mb}, -1,
                      Category::activations);
    }
    for (std::int64_t l = c.first; l <= last_layer; ++l) {
        layer_forward_gathers(B, P.step, l, {PhaseKind::forward, l, mb});
        // Selective recompute drops the attention core right after use; full recompute
        // keeps only the layer input (everything else goes with the layer's last op).
        LayerFwd f = emit_layer_forward(B, P.step, l, mb, x, true, recompute != Recompute::selective, "");
        if (recompute == Recompute::full) {
            for (BufferId b : layer_kept(P, f)) P.step.back().free.push_back(b);
            P.step.back().free.push_back(f.core);
        }
        for (std::size_t u = layer_unit(P, l); u <= last_layer_unit(P, l); ++u) release_gathered(B, P.step.back(), u);
        s.saved.push_back(f);
        x = f.out;
    }
    if (d.model_last(chunk)) {
        s.dres = emit_output_and_loss(B, mb, x, reduce);
        output_pass_end(B, P.step, {PhaseKind::output_loss, 0, mb});
    } else {
        emit_send(B, x, {PhaseKind::forward, last_layer, mb}, +1);
    }
    return s;
}

// Backward of model chunk `chunk` on micro-batch mb: the output gradient received (but on the
// model's last chunk), the chunk's layers, then the embedding's backward (the model's first
// chunk) or the input gradient sent back; the fp32 accumulation of the pass's gradients.
void emit_backward_pass(Builder& B, std::size_t chunk, std::int64_t mb, const ForwardState& s, bool reduce) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    const Dims::LayerChunk& c = d.chunks[chunk];
    const std::int64_t last_layer = c.first + c.layers - 1;
    const BufferId dres = d.model_last(chunk) ? s.dres
                                              : emit_recv(B, "d residual", {PhaseKind::backward, last_layer, mb}, +1,
                                                          Category::temporary);
    for (std::int64_t l = last_layer; l >= c.first; --l) {
        const Phase ph{PhaseKind::backward, l, mb};
        layer_backward_begin(B, P.step, l, ph);
        emit_layer_backward(B, P.step, l, mb, s.saved[static_cast<std::size_t>(l - c.first)], dres);
        layer_backward_end(B, P.step, l, ph, reduce);
    }
    // The loss's own chunk (no decoder layer) ends its backward in its output pass's phase.
    const Phase emb = c.layers == 0 && !d.model_first(chunk) ? Phase{PhaseKind::output_loss, 0, mb}
                                                              : Phase{PhaseKind::backward, c.first, mb};
    if (d.model_first(chunk)) {
        embedding_backward_begin(B, P.step, emb);
        const BufferId dg = B.gather_seq(P.step, "d embedding out", emb, dres, d.h);  // sequence parallelism
        {  // embedding_bwd: v0 = tokens, v1 = dres; p0/p1 word/position embedding grads
            Op& o = B.emit(P.step, OpKind::embedding_bwd, "embedding bwd", emb);
            o.v[0] = {s.tokens, d.b, d.s, d.s, 0};
            o.v[1] = B.full(dg, d.h);
            o.p0 = P.wte;
            o.p1 = P.wpe;
            o.free = {dres, s.tokens};
            if (dg != dres) o.free.push_back(dg);
        }
        embedding_backward_end(B, P.step, emb, reduce);
    } else {
        emit_send(B, dres, emb, -1);
        // The loss's own chunk (interleaved, no decoder layer) has no first layer to reduce: the
        // head's gradients were reduced at the end of its output pass (output_pass_end).
        if (c.layers > 0) stage_backward_end(B, P.step, c.first, emb);
    }
    if (P.grads_fp32 != kNoBuffer) {  // grad_accumulate: fp32 buffer += 16-bit gradients, which are then zeroed
        Op& o = B.emit(P.step, OpKind::grad_accumulate, "accumulate gradients in fp32", emb);
        // v0 (several chunks on the stage): only this chunk's units, which lie together in the layout.
        if (d.chunks.size() > 1) {
            // A chunk without decoder layers holds the embedding's unit or the head's alone.
            const std::size_t lo_unit = d.model_first(chunk) ? embedding_unit()
                                        : c.layers > 0     ? layer_unit(P, c.first)
                                                           : head_unit(P);
            const std::size_t hi_unit = d.model_last(chunk) ? head_unit(P)
                                        : c.layers > 0    ? last_layer_unit(P, last_layer)
                                                          : embedding_unit();
            const ShardUnit& lo = P.layout.units[lo_unit];
            const ShardUnit& hi = P.layout.units[hi_unit];
            const std::int64_t n = hi.begin + hi.padded - lo.begin;
            o.v[0] = {P.grads_fp32, 1, n, n, lo.begin};
        }
    }
}

// Ops appended to the step since `from`, taken out of it (a template).
std::vector<Op> take_from(Program& P, std::size_t from) {
    std::vector<Op> t(std::make_move_iterator(P.step.begin() + static_cast<std::ptrdiff_t>(from)),
                      std::make_move_iterator(P.step.end()));
    P.step.resize(from);
    return t;
}

namespace {

// One micro-batch, forward then backward, with the data-parallel collectives around them
// (program_comm.cpp; `reduce`: this micro-batch reduces its gradients).
void emit_micro_batch(Builder& B, std::int64_t mb, bool reduce) {
    const ForwardState s = emit_forward_pass(B, 0, mb, reduce);
    emit_backward_pass(B, 0, mb, s, reduce);
}

// Appends a template's ops as micro-batch mb's. A send to the next stage followed by a receive
// from it (or to and from the previous one) become one p2p op, as Megatron-LM's
// send_forward_recv_backward and send_backward_recv_forward pair them, so that neighbouring
// stages never wait on each other's lone sends. (Under ZeRO-2/3 a later stage's backward ends
// with its first layer's reduce-scatter after its send: those two stay apart, stage_backward_end.)
void append_as(Program& P, const std::vector<Op>& t, std::int64_t mb) {
    for (std::size_t i = 0; i < t.size(); ++i) {
        Op o = t[i];
        o.phase.micro_batch = mb;
        if (i == 0 && !P.step.empty()) {
            Op& last = P.step.back();
            const bool send_only = last.kind == OpKind::p2p && last.recv_peer == 0;
            const bool recv_only = o.kind == OpKind::p2p && o.send_peer == 0;
            if (send_only && recv_only && last.send_peer == o.recv_peer) {
                last.name += " + " + o.name;
                last.v[1] = o.v[1];
                last.recv_peer = o.recv_peer;
                last.alloc = o.alloc;
                continue;
            }
        }
        P.step.push_back(std::move(o));
    }
}

// The items' periodic stretch (a pipeline's steady state): from item `start`, `periods` runs of
// `period` items, each the same keys as the first run on micro-batches `stride` later.
struct PassPeriod {
    std::size_t start = 0, period = 0;
    std::int64_t periods = 0, stride = 0;
};

PassPeriod find_period(const std::vector<PeriodItem>& items, std::size_t max_period) {
    PassPeriod best;
    const std::size_t n = items.size();
    // A long steady state holds the middle item: its period is a distance from there to an item
    // of the same key, so only those are tried (each over all items: O(n) apiece).
    const std::size_t mid = n / 2;
    for (std::size_t p = 1; p <= max_period && 3 * p <= n; ++p) {
        if (mid + p >= n || items[mid + p].key != items[mid].key) continue;
        std::size_t run = 0;  // items k - run .. k - 1 each match the item p later
        std::int64_t stride = 0;
        for (std::size_t k = 0; k + p <= n; ++k) {
            const bool match = k + p < n && items[k].key == items[k + p].key &&
                               (run == 0 || items[k + p].mb - items[k].mb == stride);
            if (match) {
                if (run == 0) stride = items[k + p].mb - items[k].mb;
                ++run;
                continue;
            }
            // items[k - run .. k + p) repeat: (run + p) / p whole periods
            const auto periods = static_cast<std::int64_t>((run + p) / p);
            if (run > 0 && periods >= 4 && (periods - 3) * static_cast<std::int64_t>(p) >
                                               (best.periods - 3) * static_cast<std::int64_t>(best.period))
                best = {k - run, p, periods, stride};
            run = 0;
        }
    }
    return best;
}

}  // namespace

void append_repeating(Program& P, const std::vector<PeriodItem>& items, std::size_t max_period,
                      const std::function<void(std::size_t, std::size_t)>& append) {
    const PassPeriod r = find_period(items, max_period);
    if (r.periods < 4) {
        append(0, items.size());
        return;
    }
    append(0, r.start + r.period);
    P.repeat.begin = P.step.size();
    append(r.start + r.period, r.start + 2 * r.period);
    P.repeat.end = P.step.size();
    P.repeat.times = r.periods - 2;
    P.repeat.stride = r.stride;
    append(r.start + static_cast<std::size_t>(r.periods - 1) * r.period, items.size());
}

namespace {

// A pipeline stage's passes (planner pipeline_stage_order: 1F1B, or interleaved over its model
// chunks). Chunk c's micro-batches in flight at once take buffer slots, each a pair of forward
// and backward templates emitted once: micro-batch j takes the lowest slot free when its forward
// starts (1F1B: slot (j - 1) % k with k = min(p - stage, m)), and its backward frees it. ZeRO-0/1
// reduce in the last micro-batch, whose templates are their own for every chunk.
void emit_pipeline(Builder& B) {
    Program& P = B.p_;
    const std::int64_t m = P.dims.grad_acc;
    const std::size_t chunks = P.dims.chunks.size();
    const std::vector<PipelinePass> order = pipeline_stage_order(P.plan, P.pp_rank);
    // The slot of each forward and backward (in order), and the slots each chunk needs.
    std::vector<std::int64_t> slot_of(order.size(), -1);
    std::vector<std::vector<std::int64_t>> held(chunks);  // per chunk: the micro-batch in each slot, 0 = free
    std::vector<std::vector<std::int64_t>> at(chunks, std::vector<std::int64_t>(static_cast<std::size_t>(m) + 1, -1));
    for (std::size_t k = 0; k < order.size(); ++k) {
        const PipelinePass& ps = order[k];
        std::vector<std::int64_t>& h = held[static_cast<std::size_t>(ps.chunk)];
        std::int64_t& slot = at[static_cast<std::size_t>(ps.chunk)][static_cast<std::size_t>(ps.micro_batch)];
        if (ps.forward) {
            const auto free = std::find(h.begin(), h.end(), 0);
            slot = free - h.begin();
            if (free == h.end()) h.push_back(0);
            h[static_cast<std::size_t>(slot)] = ps.micro_batch;
        } else {
            h[static_cast<std::size_t>(slot)] = 0;
        }
        slot_of[k] = slot;
    }
    const bool reduce = data_parallel(P);
    std::vector<std::vector<std::vector<Op>>> fwd(chunks), bwd(chunks);
    std::vector<std::vector<ForwardState>> state(chunks);
    for (std::size_t c = 0; c < chunks; ++c)
        for (std::size_t slot = 0; slot < held[c].size(); ++slot) {
            const std::size_t from = P.step.size();
            state[c].push_back(emit_forward_pass(B, c, static_cast<std::int64_t>(slot) + 1, false));
            fwd[c].push_back(take_from(P, from));
        }
    for (std::size_t c = 0; c < chunks; ++c)
        for (std::size_t slot = 0; slot < held[c].size(); ++slot) {
            const std::size_t from = P.step.size();
            emit_backward_pass(B, c, static_cast<std::int64_t>(slot) + 1, state[c][slot], false);
            bwd[c].push_back(take_from(P, from));
        }
    // The last micro-batch's own templates, on buffers of their own (those of its slot are free
    // by then too; separate ones keep the templates independent).
    std::vector<std::vector<Op>> fwd_last(chunks), bwd_last(chunks);
    for (std::size_t c = 0; c < chunks; ++c) {
        std::size_t from = P.step.size();
        const ForwardState last = emit_forward_pass(B, c, m, reduce);
        fwd_last[c] = take_from(P, from);
        from = P.step.size();
        emit_backward_pass(B, c, m, last, reduce);
        bwd_last[c] = take_from(P, from);
    }
    std::vector<PeriodItem> items(order.size());
    std::vector<const std::vector<Op>*> ops_of(order.size());  // item -> its template
    for (std::size_t k = 0; k < order.size(); ++k) {
        const PipelinePass& ps = order[k];
        const std::size_t c = static_cast<std::size_t>(ps.chunk), slot = static_cast<std::size_t>(slot_of[k]);
        ops_of[k] = ps.micro_batch == m ? (ps.forward ? &fwd_last[c] : &bwd_last[c]) : (ps.forward ? &fwd[c][slot] : &bwd[c][slot]);
        items[k] = {ops_of[k], ps.micro_batch};
    }
    // A 1F1B stage's templates repeat every k <= pp micro-batches (slot (j - 1) % k).
    append_repeating(P, items, 4 * static_cast<std::size_t>(P.plan.pp), [&](std::size_t from, std::size_t to) {
        for (std::size_t k = from; k < to; ++k) append_as(P, *ops_of[k], items[k].mb);
    });
}

}  // namespace

// Micro-batches 2.. run the same ops on the same buffers as a template micro-batch (each
// buffer is freed within its micro-batch): copies with their index, so the program's buffer
// table does not grow with gradient accumulation. ZeRO-0/1 reduce only in the last
// micro-batch, which then has a template of its own. Three copies are written out (micro-batches
// 2 to 4); the last stands for every later one (Program::repeat), so the ops do not grow either.
// Across pipeline stages: emit_pipeline.
void emit_micro_batches(Builder& B) {
    Program& P = B.p_;
    if (P.dims.pp > 1) {
        if (P.plan.pp_schedule == PpSchedule::interleaved)
            emit_interleaved(B);
        else
            emit_pipeline(B);
        return;
    }
    const std::int64_t K = P.dims.grad_acc;
    const bool every = P.plan.zero >= zero_gradients || !data_parallel(P);
    const std::size_t first = P.step.size();
    emit_micro_batch(B, 1, data_parallel(P) && (every || K == 1));
    const std::size_t per_micro_batch = P.step.size() - first;
    const std::int64_t copies = every ? K - 1 : std::max<std::int64_t>(K - 2, 0);
    const std::int64_t written = std::min<std::int64_t>(copies, 3);
    P.step.reserve(P.step.size() + static_cast<std::size_t>(written + 1) * per_micro_batch + 16);
    for (std::int64_t mb = 2; mb <= written + 1; ++mb)
        for (std::size_t i = first; i < first + per_micro_batch; ++i) {
            P.step.push_back(P.step[i]);  // no reallocation: reserved above
            P.step.back().phase.micro_batch = mb;
        }
    if (copies > written) {  // the last copy written (micro-batch 4) runs as micro-batches 4 .. copies + 1
        P.repeat.end = P.step.size();
        P.repeat.begin = P.repeat.end - per_micro_batch;
        P.repeat.times = copies - written + 1;
    }
    if (!every && K > 1) emit_micro_batch(B, K, true);
}

}  // namespace preflight::runtime::program_detail
