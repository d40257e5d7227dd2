// The interleaved 1F1B schedule of a pipeline stage's step program (Narayanan et al. 2021, sec.
// 2.2.2): the stage's model chunks run their forwards and backwards in the planner's order, and
// the activations and gradients that cross stages go in the grouped exchanges Megatron-LM makes
// between passes (planner interleaved_stage_steps). Each pass is a template emitted once per
// buffer slot; its receive and send are taken out of it and issued in the exchanges instead.
#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "preflight/planner/extensions.hpp"
#include "program_builder.hpp"

namespace preflight::runtime::program_detail {

namespace {

// A pass template with its receive and its send taken out.
struct PassTemplate {
    std::vector<Op> ops;
    Op recv, send;  // kind p2p when the pass has one
    bool has_recv = false, has_send = false;
};

PassTemplate split_template(std::vector<Op> t) {
    PassTemplate pt;
    for (Op& op : t) {
        if (op.kind == OpKind::p2p && op.recv_peer != 0 && !pt.has_recv) {
            pt.recv = std::move(op), pt.has_recv = true;
        } else if (op.kind == OpKind::p2p && op.send_peer != 0 && !pt.has_send) {
            pt.send = std::move(op), pt.has_send = true;
        } else {
            pt.ops.push_back(std::move(op));
        }
    }
    return pt;
}

// The forwards that receive their input and the backwards that receive their output gradient,
// in compute order: the n-th activation (gradient) an exchange receives is theirs.
struct Takers {
    std::vector<PipelinePass> forward, backward;
};
Takers takers_of(const Program& P, const std::vector<PipelineStep>& steps) {
    Takers t;
    for (const PipelineStep& s : steps) {
        if (!s.compute) continue;
        const std::size_t c = static_cast<std::size_t>(s.pass.chunk);
        if (s.pass.forward && !P.dims.model_first(c)) t.forward.push_back(s.pass);
        if (!s.pass.forward && !P.dims.model_last(c)) t.backward.push_back(s.pass);
    }
    return t;
}

// Buffer slots: a chunk micro-batch holds its slot from its input's receive (or its forward) to
// the end of its backward. A chunk starts and ends its micro-batches in order, so with k slots
// micro-batch j can take slot (j - 1) % k as 1F1B's do, k at least the most it holds at once
// (checked here). Every chunk gets the same k, a multiple of pp: the slots then cycle with the
// schedule's groups of pp micro-batches, every k micro-batches, so the step's steady state is
// periodic (emit_interleaved repeats it).
struct Slots {
    std::int64_t per_chunk = 1;
    std::size_t of(const PipelinePass& ps) const { return static_cast<std::size_t>((ps.micro_batch - 1) % per_chunk); }
};
// Calls start(pass) where a chunk micro-batch takes its slot and end(pass) where it gives it up.
template <typename Start, typename End>
void slot_events(const Program& P, const std::vector<PipelineStep>& steps, const Takers& takers, Start start, End end) {
    std::size_t received = 0;
    for (const PipelineStep& st : steps) {
        if (!st.compute) {
            if (st.recv_forward) start(takers.forward.at(received++));
        } else if (st.pass.forward && P.dims.model_first(static_cast<std::size_t>(st.pass.chunk))) {
            start(st.pass);
        } else if (!st.pass.forward) {
            end(st.pass);
        }
    }
}

Slots assign_slots(const Program& P, const std::vector<PipelineStep>& steps, const Takers& takers) {
    std::vector<std::int64_t> held(P.dims.chunks.size(), 0);
    std::int64_t most = 1;  // the most micro-batches a chunk holds at once
    slot_events(
        P, steps, takers, [&](const PipelinePass& ps) { most = std::max(most, ++held[static_cast<std::size_t>(ps.chunk)]); },
        [&](const PipelinePass& ps) { --held[static_cast<std::size_t>(ps.chunk)]; });
    Slots s;
    s.per_chunk = std::min((most + P.plan.pp - 1) / P.plan.pp * P.plan.pp, P.dims.grad_acc);
    // No micro-batch takes a slot still held (those in flight are consecutive: in-order starts
    // and ends, at most `most` of them).
    std::vector<std::vector<bool>> busy(P.dims.chunks.size(), std::vector<bool>(static_cast<std::size_t>(s.per_chunk)));
    slot_events(
        P, steps, takers,
        [&](const PipelinePass& ps) {
            std::vector<bool>& b = busy[static_cast<std::size_t>(ps.chunk)];
            if (b[s.of(ps)]) throw std::logic_error("interleaved schedule: a micro-batch's buffer slot is still held");
            b[s.of(ps)] = true;
        },
        [&](const PipelinePass& ps) { busy[static_cast<std::size_t>(ps.chunk)][s.of(ps)] = false; });
    return s;
}

// The pass templates: per chunk and buffer slot, and the last micro-batch's own (ZeRO-0/1 reduce
// in it), each with its receive and send taken out.
struct Templates {
    std::vector<std::vector<PassTemplate>> fwd, bwd;
    std::vector<PassTemplate> fwd_last, bwd_last;
    const Slots* slots = nullptr;
    std::int64_t m = 1;
    const PassTemplate& of(const PipelinePass& ps) const {
        const auto c = static_cast<std::size_t>(ps.chunk);
        if (ps.micro_batch == m) return ps.forward ? fwd_last[c] : bwd_last[c];
        const std::size_t slot = slots->of(ps);
        return ps.forward ? fwd[c][slot] : bwd[c][slot];
    }
};

Templates make_templates(Builder& B, const Slots& slots) {
    Program& P = B.p_;
    const std::size_t chunks = P.dims.chunks.size();
    Templates t{std::vector<std::vector<PassTemplate>>(chunks), std::vector<std::vector<PassTemplate>>(chunks),
                std::vector<PassTemplate>(chunks), std::vector<PassTemplate>(chunks), &slots, P.dims.grad_acc};
    std::vector<std::vector<ForwardState>> state(chunks);
    for (std::size_t c = 0; c < chunks; ++c)
        for (std::size_t slot = 0; slot < static_cast<std::size_t>(slots.per_chunk); ++slot) {
            const std::size_t from = P.step.size();
            state[c].push_back(emit_forward_pass(B, c, static_cast<std::int64_t>(slot) + 1, false));
            t.fwd[c].push_back(split_template(take_from(P, from)));
        }
    for (std::size_t c = 0; c < chunks; ++c)
        for (std::size_t slot = 0; slot < static_cast<std::size_t>(slots.per_chunk); ++slot) {
            const std::size_t from = P.step.size();
            emit_backward_pass(B, c, static_cast<std::int64_t>(slot) + 1, state[c][slot], false);
            t.bwd[c].push_back(split_template(take_from(P, from)));
        }
    const bool reduce = data_parallel(P);
    for (std::size_t c = 0; c < chunks; ++c) {
        std::size_t from = P.step.size();
        const ForwardState last = emit_forward_pass(B, c, t.m, reduce);
        t.fwd_last[c] = split_template(take_from(P, from));
        from = P.step.size();
        emit_backward_pass(B, c, t.m, last, reduce);
        t.bwd_last[c] = split_template(take_from(P, from));
    }
    return t;
}

// A grouped exchange: the passes whose sends and receives it carries (for their templates' views,
// peers and buffers). Its period key (the shape) is the templates with their micro-batches
// relative to the pass computed before it.
struct Exchange {
    std::vector<PipelinePass> sends;
    std::vector<std::pair<PipelinePass, std::size_t>> receives;  // the taker and the view it goes to: v1 or v3
    Phase phase;                                                 // the last op computed before it
};
using ExchangeShape = std::vector<std::tuple<const PassTemplate*, std::size_t, std::int64_t>>;

void emit_exchange(Program& P, Builder& B, const Templates& templates, const Exchange& x) {
    // p2p: v0 a forward's output to the next stage, v2 a backward's input gradient to the
    // previous one; v1 an activation from the previous stage, v3 a gradient from the next.
    Op& o = B.emit(P.step, OpKind::p2p, "exchange", x.phase);  // describe() names what it carries
    for (const PipelinePass& ps : x.sends) {
        if (!templates.of(ps).has_send) throw std::logic_error("interleaved schedule: a send from a pass that has none");
        const Op& send = templates.of(ps).send;
        o.carries.push_back({ps.micro_batch, ps.chunk, ps.forward, true});
        o.v[ps.forward ? 0 : 2] = send.v[0];
        (ps.forward ? o.send_peer : o.send2_peer) = send.send_peer;
        o.free.insert(o.free.end(), send.free.begin(), send.free.end());
    }
    for (const auto& [ps, v] : x.receives) {
        if (!templates.of(ps).has_recv) throw std::logic_error("interleaved schedule: a receive for a pass that takes none");
        const Op& recv = templates.of(ps).recv;
        o.carries.push_back({ps.micro_batch, ps.chunk, ps.forward, false});
        o.v[v] = recv.v[1];
        (v == 1 ? o.recv_peer : o.recv2_peer) = recv.recv_peer;
        o.alloc.insert(o.alloc.end(), recv.alloc.begin(), recv.alloc.end());
    }
}

}  // namespace

// The step's passes and exchanges in the planner's order; its steady state (once it holds four
// periods, each k micro-batches through every chunk, forward and backward, with their exchanges;
// k the slots a chunk cycles through) is written twice and repeated (append_repeating), so the ops
// do not grow with the micro-batches.
void emit_interleaved(Builder& B) {
    Program& P = B.p_;
    const std::vector<PipelineStep> steps = interleaved_stage_steps(P.plan, P.pp_rank);
    const Takers takers = takers_of(P, steps);
    const Slots slots = assign_slots(P, steps, takers);
    const Templates templates = make_templates(B, slots);
    std::vector<PeriodItem> items;
    std::vector<Exchange> exchanges;       // the exchanges, in order
    std::vector<std::size_t> exchange_of;  // item -> its index in exchanges (npos for a pass)
    std::vector<const PassTemplate*> pass_of;  // item -> its pass's template (nullptr for an exchange)
    std::set<ExchangeShape> shapes;        // interned: an exchange's key is its shape's address
    std::size_t received_forward = 0, received_backward = 0;
    Phase last_phase{PhaseKind::forward, P.dims.chunks.front().first, 1};
    for (const PipelineStep& st : steps) {
        if (st.compute) {
            const PassTemplate& t = templates.of(st.pass);
            items.push_back({&t, st.pass.micro_batch});
            pass_of.push_back(&t);
            exchange_of.push_back(std::string::npos);
            if (!t.ops.empty()) last_phase = t.ops.back().phase, last_phase.micro_batch = st.pass.micro_batch;
            continue;
        }
        Exchange x{st.sends, {}, last_phase};
        if (st.recv_forward) x.receives.push_back({takers.forward.at(received_forward++), 1});
        if (st.recv_backward) x.receives.push_back({takers.backward.at(received_backward++), 3});
        ExchangeShape shape;
        for (const PipelinePass& ps : x.sends) shape.emplace_back(&templates.of(ps), 0, ps.micro_batch - last_phase.micro_batch);
        for (const auto& [ps, v] : x.receives) shape.emplace_back(&templates.of(ps), v, ps.micro_batch - last_phase.micro_batch);
        shape.emplace_back(nullptr, static_cast<std::size_t>(last_phase.kind), last_phase.layer);
        items.push_back({&*shapes.insert(std::move(shape)).first, last_phase.micro_batch});
        pass_of.push_back(nullptr);
        exchange_of.push_back(exchanges.size());
        exchanges.push_back(std::move(x));
    }
    const auto append = [&](std::size_t from, std::size_t to) {
        for (std::size_t k = from; k < to; ++k) {
            if (exchange_of[k] != std::string::npos) {
                emit_exchange(P, B, templates, exchanges[exchange_of[k]]);
                continue;
            }
            for (Op o : pass_of[k]->ops) {
                o.phase.micro_batch = items[k].mb;
                P.step.push_back(std::move(o));
            }
        }
    };
    // A period: the slots' cycle of k micro-batches, each a forward and a backward through every
    // chunk and up to v exchanges (3 v k items).
    append_repeating(P, items, 4 * static_cast<std::size_t>(P.plan.vpp * slots.per_chunk), append);
}

}  // namespace preflight::runtime::program_detail
