// The mixture-of-experts MLP of a decoder layer (Mixtral's sparse MLP, Jiang et al. 2024, sec.
// 2.1): router, top-k routing, the tokens dispatched to their experts' rows (reference_moe.hpp), the
// experts' SwiGLU on their rows, and the gate-weighted sum back onto the tokens; then its backward.
// Under tensor parallelism each rank holds a 1/tp slice of its experts (gate|up column-parallel,
// down row-parallel, as the dense MLP) and routes all the micro-batch's tokens (sequence parallelism
// gathers them first) with the replicated router, so the ranks route alike; the combine sums
// partial expert outputs, which are all-reduced (reduce-scattered under sp) as the dense down
// projection's are. Without expert parallelism every rank runs every expert, dropless. Under it
// (ep > 1; Megatron-LM's all-gather token dispatcher) the ep consecutive data-parallel ranks of a
// block all-gather their tokens, each routes them all and runs its E / ep experts on the pairs they
// take, each expert at most `capacity` of them (the rest dropped, reference_moe.hpp ExpertSlots);
// the partial combine is reduce-scattered back to each rank's tokens, and in backward the output
// gradient is gathered and the input gradient reduce-scattered the same way.
#include "program_builder.hpp"

namespace preflight::runtime::program_detail {

namespace {
View rows_view(BufferId b, std::int64_t rows, std::int64_t cols) { return {b, rows, cols, cols, 0}; }

// Expert parallelism: `mine` [rows, h] all-gathered over the ep ranks into a new [ep x rows, h]
// (returned; rank q's rows at q x rows), `mine` freed after when `free_mine`; `mine` itself at ep 1.
BufferId gather_ep(Builder& B, std::vector<Op>& out, const std::string& name, const Phase& ph, BufferId mine,
                   bool free_mine) {
    const Dims& d = B.d_;
    if (d.ep <= 1) return mine;
    const BufferId all = B.buffer(name + " (expert-parallel all-gather)", Category::temporary, B.p_.act, d.route_rows() * d.h);
    // all_gather: v0 = the block's rows (allocated here), v1 = this rank's rows
    Op& o = B.emit_collective(out, OpKind::all_gather, name + " expert-parallel all-gather", ph, -1);
    o.group = CommGroup::ep;
    o.alloc = {all};
    o.v[0] = rows_view(all, d.route_rows(), d.h);
    o.v[1] = B.full(mine, d.h);
    B.emit_wait(out, B.last_collective, ph, free_mine ? std::vector<BufferId>{mine} : std::vector<BufferId>{});
    return all;
}

// Expert parallelism: the block's partial sums `all` [ep x rows, h] summed over the ep ranks, this
// rank's rows (plus `residual`, may be kNoBuffer) into a new [rows, h] `name` (returned), `all` freed.
BufferId reduce_scatter_ep(Builder& B, std::vector<Op>& out, const std::string& name, const Phase& ph, BufferId all,
                           BufferId residual, Category c) {
    const Dims& d = B.d_;
    Op& rs = B.emit_collective(out, OpKind::reduce_scatter, name + " expert-parallel reduce-scatter", ph, -1);
    rs.group = CommGroup::ep;
    rs.reduce = ReduceOp::sum;
    rs.v[0] = {all, 1, d.route_rows() * d.h, d.route_rows() * d.h, 0};
    B.emit_wait(out, B.last_collective, ph);
    const BufferId mine = B.act(name, d.h, c);
    // seq_chunk: v2 = v0 (this rank's rows of the reduce-scattered buffer) + v1 (the residual)
    Op& o = B.emit(out, OpKind::seq_chunk, name + " (this rank's rows)", ph);
    o.alloc = {mine};
    o.v[0] = {all, d.rows, d.h, d.h, d.ep_rank * d.rows * d.h};
    if (residual != kNoBuffer) o.v[1] = B.full(residual, d.h);
    o.v[2] = B.full(mine, d.h);
    o.free = {all};
    return mine;
}

// The router on the routed rows `xe` and the routing: the gate weights and the routing table (kept).
// The routing frees the router logits, but for gates left unrenormalised (OLMoE's), whose backward is
// the softmax's over all E logits: they are kept then (f.logits).
void emit_router_forward(Builder& B, std::vector<Op>& out, const std::string& n, const Phase& ph, const LayerParams& lp,
                         BufferId xe, LayerFwd& f) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    const std::int64_t E = d.experts, R = d.route_rows();
    const BufferId logits =
        B.buffer(n + "router logits", d.renormalize_gates ? Category::temporary : Category::activations, P.act, R * E);
    emit_linear_fwd(B, out, n + "router", ph, rows_view(xe, R, d.h), rows_view(logits, R, E), lp.router_w, kNoParam);
    f.gates = B.buffer(n + "gate weights", Category::activations, DType::f32, R * d.topk);
    f.routing = B.buffer(n + "routing", Category::activations, DType::i64, d.routing_elements());
    // moe_route: v0 = logits -> v1 = gate weights, v2 = routing
    Op& o = B.emit(out, OpKind::moe_route, n + "top-" + std::to_string(d.topk) + " routing", ph);
    o.alloc = {f.gates, f.routing};
    o.v[0] = rows_view(logits, R, E);
    o.v[1] = rows_view(f.gates, R, d.topk);
    o.v[2] = rows_view(f.routing, 1, d.routing_elements());
    if (d.renormalize_gates)
        o.free = {logits};
    else
        f.logits = logits;
}
}  // namespace

// Kept for the backward (program_layer.cpp layer_kept): the norm output (the router's weight
// gradient), gate weights, routing, the dispatched tokens, the experts' gate|up and SwiGLU outputs
// (their GEMMs' weight gradients and the SwiGLU backward) and their outputs (the gate weights'
// gradient), and OLMoE's router logits (emit_router_forward).
void emit_moe_forward(Builder& B, std::vector<Op>& out, std::int64_t l, const std::string& n, const Phase& ph,
                      LayerFwd& f, bool produce_output) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    const LayerParams& lp = P.layer_params[static_cast<std::size_t>(l - 1)];
    const std::int64_t R = d.route_rows(), S = d.slots();
    // Sequence parallelism: the router and the dispatch read all the rows, gathered here and freed
    // once dispatched (the backward gathers them again for the router's weight gradient); expert
    // parallelism gathers the block's rows on top.
    const BufferId xg = B.gather_seq(out, n + "mlp norm out", ph, f.xn2, d.h);
    const BufferId xe = gather_ep(B, out, n + "mlp norm out", ph, xg, xg != f.xn2);
    emit_router_forward(B, out, n, ph, lp, xe, f);
    const View routing = rows_view(f.routing, 1, d.routing_elements());
    f.xd = B.buffer(n + "dispatched tokens", Category::activations, P.act, S * d.h);
    {  // moe_dispatch: v0 = the routed tokens, v2 = routing -> v1 = the rank's expert rows
        Op& o = B.emit(out, OpKind::moe_dispatch, n + "dispatch", ph);
        o.alloc = {f.xd};
        o.v[0] = rows_view(xe, R, d.h);
        o.v[1] = rows_view(f.xd, S, d.h);
        o.v[2] = routing;
        if (xe != f.xn2) o.free = {xe};
    }
    auto grouped = [&](const std::string& name, BufferId in, std::int64_t in_cols, BufferId y, std::int64_t y_cols,
                       ParamId w) {  // moe_linear_fwd: v0 = in, v1 = out (allocated), v2 = routing; p0 = stacked W
        Op& o = B.emit(out, OpKind::moe_linear_fwd, name, ph);
        o.alloc = {y};
        o.v[0] = rows_view(in, S, in_cols);
        o.v[1] = rows_view(y, S, y_cols);
        o.v[2] = routing;
        o.p0 = w;
    };
    f.up = B.buffer(n + "experts gate|up", Category::activations, P.act, S * d.up_width);
    grouped(n + "experts up proj", f.xd, d.h, f.up, d.up_width, lp.up_w);
    f.act = B.buffer(n + "experts down in", Category::activations, P.act, S * d.ffn);
    {  // swiglu_fwd on the rows
        Op& o = B.emit(out, OpKind::swiglu_fwd, n + "experts activation", ph);
        o.alloc = {f.act};
        o.v[0] = rows_view(f.up, S, d.up_width);
        o.v[1] = rows_view(f.act, S, d.ffn);
    }
    // The experts' outputs (this rank's partial sums under tp) are kept: the gate weights' gradient
    // reads them, so a full-recompute re-forward runs the down projection too and stops before the
    // combine.
    f.y = B.buffer(n + "expert outputs", Category::activations, P.act, S * d.h);
    grouped(n + "experts down proj", f.act, d.ffn, f.y, d.h, lp.down_w);
    if (!produce_output) return;
    // moe_combine: v0 = expert outputs, v1 = gate weights, v2 = routing, v3 = out (allocated), v4 =
    // residual. Under tp the residual is added by rank 0 alone (alone, an emulated rank adds it), into
    // the output that is all-reduced; under sp it is added to this rank's rows after the reduce-scatter.
    const bool adds = P.tp_rank == 0 || P.emulated;
    const std::string next = layer_label(d, l + 1) + "attn norm in";
    const BufferId combined = d.ep > 1 ? B.buffer(n + "combine partial sums (expert-parallel)", Category::temporary, P.act, R * d.h)
                              : d.sp   ? B.act(n + "combine partial sums", d.h, Category::temporary)
                                       : B.act(next, d.h);
    Op& o = B.emit(out, OpKind::moe_combine, n + "combine", ph);
    o.alloc = {combined};
    o.v[0] = rows_view(f.y, S, d.h);
    o.v[1] = rows_view(f.gates, R, d.topk);
    o.v[2] = routing;
    o.v[3] = rows_view(combined, R, d.h);
    if (adds && !d.sp && d.ep <= 1) o.v[4] = B.full(f.x1, d.h);
    BufferId mine = combined;
    if (d.ep > 1)
        mine = reduce_scatter_ep(B, out, d.sp ? n + "combine partial sums" : next, ph, combined,
                                 adds && !d.sp ? f.x1 : kNoBuffer, d.sp ? Category::temporary : Category::activations);
    f.out = B.reduce_seq(out, next, ph, mine, d.h, f.x1, Category::activations);
}

namespace {

// The combine's and the routing's backward: the output gradient (gathered under sp, and over the ep
// block) into the experts' output gradient dy (returned) and the gate weights' gradient (summed over
// the tensor-parallel ranks, whose expert outputs are partial sums, and the ep ranks, each of whose
// holds its experts' share), then the router logits' gradient (`dlogits`, allocated here).
BufferId emit_gates_backward(Builder& B, std::vector<Op>& out, const std::string& n, const Phase& ph,
                             const LayerFwd& f, BufferId dres, const View& routing, BufferId& dlogits) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    const std::int64_t R = d.route_rows(), S = d.slots();
    // Sequence parallelism: the reduce-scatter's backward all-gathers the output gradient.
    const BufferId dout = B.gather_seq(out, n + "d layer out", ph, dres, d.h);
    const BufferId de = gather_ep(B, out, n + "d layer out", ph, dout, dout != dres);
    const BufferId dy = B.buffer(n + "d expert outputs", Category::temporary, P.act, S * d.h);
    const BufferId dg = B.buffer(n + "d gate weights", Category::temporary, DType::f32, R * d.topk);
    {  // moe_combine_bwd: v0 = dOut, v1 = expert outputs, v2 = gate weights, v3 = routing -> v4 = dy, v5 = d gates
        Op& o = B.emit(out, OpKind::moe_combine_bwd, n + "combine bwd", ph);
        o.alloc = {dy, dg};
        o.v[0] = rows_view(de, R, d.h);
        o.v[1] = rows_view(f.y, S, d.h);
        o.v[2] = rows_view(f.gates, R, d.topk);
        o.v[3] = routing;
        o.v[4] = rows_view(dy, S, d.h);
        o.v[5] = rows_view(dg, R, d.topk);
        if (de != dres) o.free = {de};
    }
    B.tp_all_reduce(out, n + "d gate weights", ph, rows_view(dg, R, d.topk));
    if (d.ep > 1) {
        Op& o = B.emit_collective(out, OpKind::all_reduce, n + "d gate weights expert-parallel all-reduce", ph, -1);
        o.group = CommGroup::ep;
        o.reduce = ReduceOp::sum;
        o.v[0] = rows_view(dg, R, d.topk);
        B.emit_wait(out, B.last_collective, ph);
    }
    dlogits = B.buffer(n + "d router logits", Category::temporary, P.act, R * d.experts);
    // moe_route_bwd: v0 = d gates, v1 = gates, v2 = routing, v4 = the kept router logits (gates left
    // unrenormalised only) -> v3 = d logits
    Op& o = B.emit(out, OpKind::moe_route_bwd, n + "routing bwd", ph);
    o.alloc = {dlogits};
    o.v[0] = rows_view(dg, R, d.topk);
    o.v[1] = rows_view(f.gates, R, d.topk);
    o.v[2] = routing;
    o.v[3] = rows_view(dlogits, R, d.experts);
    if (!d.renormalize_gates) o.v[4] = rows_view(f.logits, R, d.experts);
    o.free = {dg};
    return dy;
}

// The router's backward on this rank's own tokens (its rows of the ep block): its input gradient
// added to the experts' `dn` (partial sums under tp: by rank 0 alone, the same on every rank), its
// weight gradient from all the rank's rows (gathered again under sp); then `dn` summed over the
// tensor-parallel ranks (reduce-scattered to this rank's rows under sp: returned).
BufferId emit_router_backward(Builder& B, std::vector<Op>& out, const std::string& n, const Phase& ph,
                              const LayerParams& lp, const LayerFwd& f, BufferId dlogits, BufferId dn) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    const View own{dlogits, d.rows, d.experts, d.experts, d.ep_rank * d.rows * d.experts};
    if (P.tp_rank == 0 || P.emulated) {
        Op& o = B.emit(out, OpKind::linear_bwd_data, n + "router dgrad", ph);
        o.v[0] = own;
        o.v[1] = B.full(dn, d.h);
        o.p0 = lp.router_w;
        o.accumulate = true;
    }
    const BufferId xg = B.gather_seq(out, n + "mlp norm out", ph, f.xn2, d.h);
    {
        Op& o = B.emit(out, OpKind::linear_bwd_weight, n + "router wgrad", ph);
        o.v[0] = own;
        o.v[1] = B.full(xg, d.h);
        o.p0 = lp.router_w;
        o.free = {dlogits};
        if (xg != f.xn2) o.free.push_back(xg);
    }
    if (!d.sp) {
        B.tp_all_reduce(out, n + "d mlp norm out", ph, B.full(dn, d.h));
        return dn;
    }
    return B.reduce_seq(out, n + "d mlp norm out", ph, dn, d.h, kNoBuffer, Category::temporary);
}

}  // namespace

BufferId emit_moe_backward(Builder& B, std::vector<Op>& out, const std::string& n, const Phase& ph,
                           const LayerParams& lp, const LayerFwd& f, BufferId dres) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    const std::int64_t R = d.route_rows(), S = d.slots();
    const View routing = rows_view(f.routing, 1, d.routing_elements());
    BufferId dlogits = kNoBuffer;
    const BufferId dy = emit_gates_backward(B, out, n, ph, f, dres, routing, dlogits);
    // moe_linear_bwd_data: v0 = dY, v1 = dX (allocated), v2 = routing; p0 = W.
    // moe_linear_bwd_weight: v0 = dY, v1 = X, v2 = routing; p0 = W; scaled by 1 / ep (Op::scale).
    auto grouped_bwd = [&](const std::string& name, const View& dY, const View& dX, BufferId alloc, const View& X,
                           ParamId w, BufferId done) {
        Op& a = B.emit(out, OpKind::moe_linear_bwd_data, name + " dgrad", ph);
        a.alloc = {alloc};
        a.v[0] = dY;
        a.v[1] = dX;
        a.v[2] = routing;
        a.p0 = w;
        Op& b = B.emit(out, OpKind::moe_linear_bwd_weight, name + " wgrad", ph);
        b.v[0] = dY;
        b.v[1] = X;
        b.v[2] = routing;
        b.p0 = w;
        b.scale = 1.0f / static_cast<float>(d.ep);
        b.free = {done};
    };
    // d(gate|up): the down dgrad writes d(act) into its first f columns; the SwiGLU backward
    // turns it into d(gate)|d(up) in place (as the dense MLP's).
    const BufferId dgu = B.buffer(n + "d experts gate|up", Category::temporary, P.act, S * d.up_width);
    grouped_bwd(n + "experts down proj", rows_view(dy, S, d.h), {dgu, S, d.ffn, d.up_width, 0}, dgu,
                rows_view(f.act, S, d.ffn), lp.down_w, dy);
    {
        Op& o = B.emit(out, OpKind::swiglu_bwd, n + "experts activation bwd", ph);
        o.v[0] = rows_view(dgu, S, d.up_width);
        o.v[1] = rows_view(f.up, S, d.up_width);
    }
    const BufferId dxd = B.buffer(n + "d dispatched tokens", Category::temporary, P.act, S * d.h);
    grouped_bwd(n + "experts up proj", rows_view(dgu, S, d.up_width), rows_view(dxd, S, d.h), dxd,
                rows_view(f.xd, S, d.h), lp.up_w, dgu);
    const std::string dn_name = d.sp ? n + "d mlp norm out partial sums" : n + "d mlp norm out";
    const BufferId dx = d.ep > 1 ? B.buffer(n + "d routed tokens (expert-parallel partial sums)", Category::temporary,
                                            P.act, R * d.h)
                                 : B.act(dn_name, d.h, Category::temporary);
    {  // moe_dispatch_bwd: v0 = d expert rows, v2 = routing -> v1 = the routed tokens' gradient (allocated)
        Op& o = B.emit(out, OpKind::moe_dispatch_bwd, n + "dispatch bwd", ph);
        o.alloc = {dx};
        o.v[0] = rows_view(dxd, S, d.h);
        o.v[1] = rows_view(dx, R, d.h);
        o.v[2] = routing;
        o.free = {dxd};
    }
    const BufferId dn = d.ep > 1 ? reduce_scatter_ep(B, out, dn_name, ph, dx, kNoBuffer, Category::temporary) : dx;
    return emit_router_backward(B, out, n, ph, lp, f, dlogits, dn);
}

}  // namespace preflight::runtime::program_detail
