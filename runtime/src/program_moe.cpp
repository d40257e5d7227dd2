// The mixture-of-experts MLP of a decoder layer (Mixtral's sparse MLP, Jiang et al. 2024, sec.
// 2.1): router, top-k routing, the tokens dispatched to their experts' slots (dropless: every
// (token, choice) pair has one, reference_moe.hpp), the experts' SwiGLU on their slots, and the
// gate-weighted sum back onto the tokens; then its backward. Every GPU runs every expert (no expert
// parallelism: check_runtime_plan). Under tensor parallelism each rank holds a 1/tp slice of every
// expert (gate|up column-parallel, down row-parallel, as the dense MLP) and routes all the
// micro-batch's tokens (sequence parallelism gathers them first) with the replicated router, so the
// ranks route alike; the combine sums partial expert outputs, which are all-reduced (reduce-scattered
// under sp) as the dense down projection's are.
#include "program_builder.hpp"

namespace preflight::runtime::program_detail {

namespace {
View rows_view(BufferId b, std::int64_t rows, std::int64_t cols) { return {b, rows, cols, cols, 0}; }
}  // namespace

// Kept for the backward (program_layer.cpp layer_kept): the norm output (the router's weight
// gradient), gate weights, routing, the dispatched tokens, the experts' gate|up and SwiGLU outputs
// (their GEMMs' weight gradients and the SwiGLU backward) and their outputs (the gate weights'
// gradient). The router logits are freed by the routing.
void emit_moe_forward(Builder& B, std::vector<Op>& out, std::int64_t l, const std::string& n, const Phase& ph,
                      LayerFwd& f, bool produce_output) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    const LayerParams& lp = P.layer_params[static_cast<std::size_t>(l - 1)];
    const std::int64_t E = d.experts, pairs = d.rows * d.topk;
    // Sequence parallelism: the router and the dispatch read all the rows, gathered here and freed
    // once dispatched (the backward gathers them again for the router's weight gradient).
    const BufferId xg = B.gather_seq(out, n + "mlp norm out", ph, f.xn2, d.h);
    const BufferId logits = B.buffer(n + "router logits", Category::temporary, P.act, d.rows * E);
    emit_linear_fwd(B, out, n + "router", ph, B.full(xg, d.h), B.full(logits, E), lp.router_w, kNoParam);
    f.gates = B.buffer(n + "gate weights", Category::activations, DType::f32, pairs);
    f.routing = B.buffer(n + "routing", Category::activations, DType::i64, d.routing_elements());
    const View routing = rows_view(f.routing, 1, d.routing_elements());
    {  // moe_route: v0 = logits -> v1 = gate weights, v2 = routing
        Op& o = B.emit(out, OpKind::moe_route, n + "top-" + std::to_string(d.topk) + " routing", ph);
        o.alloc = {f.gates, f.routing};
        o.v[0] = B.full(logits, E);
        o.v[1] = B.full(f.gates, d.topk);
        o.v[2] = routing;
        o.free = {logits};
    }
    f.xd = B.buffer(n + "dispatched tokens", Category::activations, P.act, pairs * d.h);
    {  // moe_dispatch: v0 = x, v2 = routing -> v1 = [rows k, h]
        Op& o = B.emit(out, OpKind::moe_dispatch, n + "dispatch", ph);
        o.alloc = {f.xd};
        o.v[0] = B.full(xg, d.h);
        o.v[1] = rows_view(f.xd, pairs, d.h);
        o.v[2] = routing;
        if (xg != f.xn2) o.free = {xg};
    }
    auto grouped = [&](const std::string& name, BufferId in, std::int64_t in_cols, BufferId y, std::int64_t y_cols,
                       ParamId w) {  // moe_linear_fwd: v0 = in, v1 = out (allocated), v2 = routing; p0 = stacked W
        Op& o = B.emit(out, OpKind::moe_linear_fwd, name, ph);
        o.alloc = {y};
        o.v[0] = rows_view(in, pairs, in_cols);
        o.v[1] = rows_view(y, pairs, y_cols);
        o.v[2] = routing;
        o.p0 = w;
    };
    f.up = B.buffer(n + "experts gate|up", Category::activations, P.act, pairs * d.up_width);
    grouped(n + "experts up proj", f.xd, d.h, f.up, d.up_width, lp.up_w);
    f.act = B.buffer(n + "experts down in", Category::activations, P.act, pairs * d.ffn);
    {  // swiglu_fwd on the slots
        Op& o = B.emit(out, OpKind::swiglu_fwd, n + "experts activation", ph);
        o.alloc = {f.act};
        o.v[0] = rows_view(f.up, pairs, d.up_width);
        o.v[1] = rows_view(f.act, pairs, d.ffn);
    }
    // The experts' outputs (this rank's partial sums under tp) are kept: the gate weights' gradient
    // reads them, so a full-recompute re-forward runs the down projection too and stops before the
    // combine.
    f.y = B.buffer(n + "expert outputs", Category::activations, P.act, pairs * d.h);
    grouped(n + "experts down proj", f.act, d.ffn, f.y, d.h, lp.down_w);
    if (!produce_output) return;
    // moe_combine: v0 = expert outputs, v1 = gate weights, v2 = routing, v3 = out (allocated), v4 =
    // residual. Under tp the residual is added by rank 0 alone (alone, an emulated rank adds it), into
    // the output that is all-reduced; under sp it is added to this rank's rows after the reduce-scatter.
    const bool adds = P.tp_rank == 0 || P.emulated;
    const BufferId combined =
        d.sp ? B.act(n + "combine partial sums", d.h, Category::temporary) : B.act(layer_label(d, l + 1) + "attn norm in", d.h);
    Op& o = B.emit(out, OpKind::moe_combine, n + "combine", ph);
    o.alloc = {combined};
    o.v[0] = rows_view(f.y, pairs, d.h);
    o.v[1] = B.full(f.gates, d.topk);
    o.v[2] = routing;
    o.v[3] = B.full(combined, d.h);
    if (adds && !d.sp) o.v[4] = B.full(f.x1, d.h);
    f.out = B.reduce_seq(out, layer_label(d, l + 1) + "attn norm in", ph, combined, d.h, f.x1, Category::activations);
}

namespace {

// The combine's and the routing's backward: the output gradient (gathered under sp) into the
// experts' output gradient dy (returned) and the gate weights' gradient (summed over the
// tensor-parallel ranks, whose expert outputs are partial sums), then the router logits'
// gradient (`dlogits`, allocated here).
BufferId emit_gates_backward(Builder& B, std::vector<Op>& out, const std::string& n, const Phase& ph,
                             const LayerFwd& f, BufferId dres, const View& routing, BufferId& dlogits) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    const std::int64_t pairs = d.rows * d.topk;
    // Sequence parallelism: the reduce-scatter's backward all-gathers the output gradient.
    const BufferId dout = B.gather_seq(out, n + "d layer out", ph, dres, d.h);
    const BufferId dy = B.buffer(n + "d expert outputs", Category::temporary, P.act, pairs * d.h);
    const BufferId dg = B.buffer(n + "d gate weights", Category::temporary, DType::f32, pairs);
    {  // moe_combine_bwd: v0 = dOut, v1 = expert outputs, v2 = gate weights, v3 = routing -> v4 = dy, v5 = d gates
        Op& o = B.emit(out, OpKind::moe_combine_bwd, n + "combine bwd", ph);
        o.alloc = {dy, dg};
        o.v[0] = B.full(dout, d.h);
        o.v[1] = rows_view(f.y, pairs, d.h);
        o.v[2] = B.full(f.gates, d.topk);
        o.v[3] = routing;
        o.v[4] = rows_view(dy, pairs, d.h);
        o.v[5] = B.full(dg, d.topk);
        if (dout != dres) o.free = {dout};
    }
    B.tp_all_reduce(out, n + "d gate weights", ph, B.full(dg, d.topk));
    dlogits = B.buffer(n + "d router logits", Category::temporary, P.act, d.rows * d.experts);
    // moe_route_bwd: v0 = d gates, v1 = gates, v2 = routing -> v3 = d logits
    Op& o = B.emit(out, OpKind::moe_route_bwd, n + "routing bwd", ph);
    o.alloc = {dlogits};
    o.v[0] = B.full(dg, d.topk);
    o.v[1] = B.full(f.gates, d.topk);
    o.v[2] = routing;
    o.v[3] = B.full(dlogits, d.experts);
    o.free = {dg};
    return dy;
}

// The router's backward: its input gradient added to the experts' `dn` (partial sums under tp: by
// rank 0 alone, the same on every rank), its weight gradient from all the rows (gathered again
// under sp); then `dn` summed over the tensor-parallel ranks (reduce-scattered to this rank's rows
// under sp: returned).
BufferId emit_router_backward(Builder& B, std::vector<Op>& out, const std::string& n, const Phase& ph,
                              const LayerParams& lp, const LayerFwd& f, BufferId dlogits, BufferId dn) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    if (P.tp_rank == 0 || P.emulated) {
        Op& o = B.emit(out, OpKind::linear_bwd_data, n + "router dgrad", ph);
        o.v[0] = B.full(dlogits, d.experts);
        o.v[1] = B.full(dn, d.h);
        o.p0 = lp.router_w;
        o.accumulate = true;
    }
    const BufferId xg = B.gather_seq(out, n + "mlp norm out", ph, f.xn2, d.h);
    {
        Op& o = B.emit(out, OpKind::linear_bwd_weight, n + "router wgrad", ph);
        o.v[0] = B.full(dlogits, d.experts);
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
    const std::int64_t pairs = d.rows * d.topk;
    const View routing = rows_view(f.routing, 1, d.routing_elements());
    BufferId dlogits = kNoBuffer;
    const BufferId dy = emit_gates_backward(B, out, n, ph, f, dres, routing, dlogits);
    // moe_linear_bwd_data: v0 = dY, v1 = dX (allocated), v2 = routing; p0 = W.
    // moe_linear_bwd_weight: v0 = dY, v1 = X, v2 = routing; p0 = W.
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
        b.free = {done};
    };
    // d(gate|up): the down dgrad writes d(act) into its first f columns; the SwiGLU backward
    // turns it into d(gate)|d(up) in place (as the dense MLP's).
    const BufferId dgu = B.buffer(n + "d experts gate|up", Category::temporary, P.act, pairs * d.up_width);
    grouped_bwd(n + "experts down proj", rows_view(dy, pairs, d.h), {dgu, pairs, d.ffn, d.up_width, 0}, dgu,
                rows_view(f.act, pairs, d.ffn), lp.down_w, dy);
    {
        Op& o = B.emit(out, OpKind::swiglu_bwd, n + "experts activation bwd", ph);
        o.v[0] = rows_view(dgu, pairs, d.up_width);
        o.v[1] = rows_view(f.up, pairs, d.up_width);
    }
    const BufferId dxd = B.buffer(n + "d dispatched tokens", Category::temporary, P.act, pairs * d.h);
    grouped_bwd(n + "experts up proj", rows_view(dgu, pairs, d.up_width), rows_view(dxd, pairs, d.h), dxd,
                rows_view(f.xd, pairs, d.h), lp.up_w, dgu);
    const BufferId dn = B.act(d.sp ? n + "d mlp norm out partial sums" : n + "d mlp norm out", d.h, Category::temporary);
    {  // moe_dispatch_bwd: v0 = d dispatched, v2 = routing -> v1 = dx (allocated)
        Op& o = B.emit(out, OpKind::moe_dispatch_bwd, n + "dispatch bwd", ph);
        o.alloc = {dn};
        o.v[0] = rows_view(dxd, pairs, d.h);
        o.v[1] = B.full(dn, d.h);
        o.v[2] = routing;
        o.free = {dxd};
    }
    return emit_router_backward(B, out, n, ph, lp, f, dlogits, dn);
}

}  // namespace preflight::runtime::program_detail
