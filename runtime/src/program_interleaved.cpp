// The interleaved 1F1B schedule of a pipeline stage's step program (Narayanan et al. 2021, sec.
// 2.2.2): the stage's model chunks run their forwards and backwards in the planner's order, and
// the activations and gradients that cross stages go in the grouped exchanges Megatron-LM makes
// between passes (planner interleaved_stage_steps). Each pass is a template emitted once per
// buffer slot; its receive and send are taken out of it and issued in the exchanges instead.
#include <algorithm>
#include <map>
#include <stdexcept>

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
// the end of its backward; each takes the lowest slot of its chunk free then.
struct Slots {
    std::map<std::pair<std::int64_t, std::int64_t>, std::size_t> of;  // (chunk, micro-batch) -> slot
    std::vector<std::size_t> per_chunk;
};
Slots assign_slots(const Program& P, const std::vector<PipelineStep>& steps, const Takers& takers) {
    Slots s;
    s.per_chunk.assign(P.dims.chunks.size(), 0);
    std::vector<std::vector<bool>> busy(P.dims.chunks.size());
    auto start = [&](const PipelinePass& ps) {
        std::vector<bool>& b = busy[static_cast<std::size_t>(ps.chunk)];
        const auto free = std::find(b.begin(), b.end(), false);
        const auto slot = static_cast<std::size_t>(free - b.begin());
        if (free == b.end()) b.push_back(true);
        b[slot] = true;
        s.of[{ps.chunk, ps.micro_batch}] = slot;
        s.per_chunk[static_cast<std::size_t>(ps.chunk)] = std::max(s.per_chunk[static_cast<std::size_t>(ps.chunk)], b.size());
    };
    std::size_t received = 0;
    for (const PipelineStep& st : steps) {
        if (!st.compute) {
            if (st.recv_forward) start(takers.forward.at(received++));
        } else if (st.pass.forward && P.dims.model_first(static_cast<std::size_t>(st.pass.chunk))) {
            start(st.pass);
        } else if (!st.pass.forward) {
            busy[static_cast<std::size_t>(st.pass.chunk)][s.of.at({st.pass.chunk, st.pass.micro_batch})] = false;
        }
    }
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
        const std::size_t slot = slots->of.at({ps.chunk, ps.micro_batch});
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
        for (std::size_t slot = 0; slot < slots.per_chunk[c]; ++slot) {
            const std::size_t from = P.step.size();
            state[c].push_back(emit_forward_pass(B, c, static_cast<std::int64_t>(slot) + 1, false));
            t.fwd[c].push_back(split_template(take_from(P, from)));
        }
    for (std::size_t c = 0; c < chunks; ++c)
        for (std::size_t slot = 0; slot < slots.per_chunk[c]; ++slot) {
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

}  // namespace

void emit_interleaved(Builder& B) {
    Program& P = B.p_;
    const std::vector<PipelineStep> steps = interleaved_stage_steps(P.plan, P.pp_rank);
    const Takers takers = takers_of(P, steps);
    const Slots slots = assign_slots(P, steps, takers);
    const Templates templates = make_templates(B, slots);
    auto template_of = [&](const PipelinePass& ps) -> const PassTemplate& { return templates.of(ps); };
    std::size_t received_forward = 0, received_backward = 0;
    Phase last_phase{PhaseKind::forward, P.dims.chunks.front().first, 1};
    for (const PipelineStep& st : steps) {
        if (st.compute) {
            for (Op o : template_of(st.pass).ops) {
                o.phase.micro_batch = st.pass.micro_batch;
                P.step.push_back(std::move(o));
            }
            last_phase = P.step.back().phase;
            continue;
        }
        // p2p: v0 a forward's output to the next stage, v2 a backward's input gradient to the
        // previous one; v1 an activation from the previous stage, v3 a gradient from the next.
        Op& o = B.emit(P.step, OpKind::p2p, "exchange:", last_phase);
        // "activation of micro-batch 3, chunk 1": what a send or receive carries, for the op's name.
        auto what = [](const PipelinePass& ps) {
            std::string s = ps.forward ? " activation of micro-batch " : " gradient of micro-batch ";
            s += std::to_string(ps.micro_batch);
            s += ", chunk ";
            s += std::to_string(ps.chunk);
            return s;
        };
        for (const PipelinePass& ps : st.sends) {
            if (!template_of(ps).has_send) throw std::logic_error("interleaved schedule: a send from a pass that has none");
            const Op& send = template_of(ps).send;
            o.name += " send";
            o.name += what(ps);
            o.name += ';';
            o.v[ps.forward ? 0 : 2] = send.v[0];
            (ps.forward ? o.send_peer : o.send2_peer) = send.send_peer;
            o.free.insert(o.free.end(), send.free.begin(), send.free.end());
        }
        auto receive = [&](const PipelinePass& ps, std::size_t v, std::int8_t& peer) {
            if (!template_of(ps).has_recv) throw std::logic_error("interleaved schedule: a receive for a pass that takes none");
            const Op& recv = template_of(ps).recv;
            o.name += " receive";
            o.name += what(ps);
            o.name += ';';
            o.v[v] = recv.v[1];
            peer = recv.recv_peer;
            o.alloc.insert(o.alloc.end(), recv.alloc.begin(), recv.alloc.end());
        };
        if (st.recv_forward) receive(takers.forward.at(received_forward++), 1, o.recv_peer);
        if (st.recv_backward) receive(takers.backward.at(received_backward++), 3, o.recv2_peer);
        o.name.pop_back();  // the last ';'
    }
}

}  // namespace preflight::runtime::program_detail
