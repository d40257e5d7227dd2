// CPU reference of the mixture-of-experts kernels (runtime/kernels/moe.cu), in double: Mixtral's
// sparse MLP (Jiang et al. 2024, sec. 2.1; HF transformers MixtralSparseMoeBlock): each token's
// router logits, its top-k experts, gate weights = softmax over those k logits, and the output
// sum_j gate_j * expert_j(x). Dropless: every (token, choice) pair gets a slot, grouped by expert.
//
// The routing table (i64, routing_elements(rows, k, E) of them), written by moe_route:
//   [0, P)            slot of pair p = t k + j (P = rows k pairs)
//   [P, 2P)           pair of slot s
//   [2P, 2P + E + 1)  expert offsets: expert e's slots are [off[e], off[e + 1]), its pairs in order
//   [2P + E + 1, ..)  expert of pair p
#pragma once

#include <cstdint>

namespace preflight::runtime::ref {

using i64 = std::int64_t;

constexpr i64 routing_elements(i64 rows, i64 k, i64 experts) { return 3 * rows * k + experts + 1; }
struct Routing {
    const i64* t;
    i64 pairs, experts;
    i64 slot(i64 p) const { return t[p]; }
    i64 pair(i64 s) const { return t[pairs + s]; }
    i64 begin(i64 e) const { return t[2 * pairs + e]; }
    i64 end(i64 e) const { return t[2 * pairs + e + 1]; }
    i64 expert(i64 p) const { return t[2 * pairs + experts + 1 + p]; }
};

// logits [rows, E] -> gates [rows, k], routing. Top-k by logit, the lower index first on a tie
// (torch.topk's order for equal values is unspecified); gates = softmax over the k chosen logits
// (= Mixtral's softmax over all E, top-k, renormalised to sum 1).
void moe_route(const double* logits, i64 rows, i64 experts, i64 k, double* gates, i64* routing);
// xd[s] = x[pair(s) / k]: [rows k, h] from [rows, h].
void moe_dispatch(const double* x, const i64* routing, i64 rows, i64 k, i64 experts, i64 h, double* xd);
// Per expert e, on its slots: Y = X W_e^T, W_e = rows [e N, (e + 1) N) of w [E N, K].
void moe_linear_fwd(const double* x, const double* w, const i64* routing, i64 pairs, i64 experts, i64 N, i64 K,
                    double* y);
// dX = dY W_e (overwrites), dW_e += dY^T X.
void moe_linear_bwd_data(const double* dy, const double* w, const i64* routing, i64 pairs, i64 experts, i64 N, i64 K,
                         double* dx);
void moe_linear_bwd_weight(const double* dy, const double* x, const i64* routing, i64 pairs, i64 experts, i64 N, i64 K,
                           double* dw);
// out[t] = res[t] (res may be null) + sum_j gates[t, j] y[slot(t k + j)].
void moe_combine(const double* y, const double* gates, const i64* routing, const double* res, i64 rows, i64 k,
                 i64 experts, i64 h, double* out);
// dy[slot(t k + j)] = gates[t, j] dout[t]; dgates[t, j] = <dout[t], y[slot(t k + j)]>.
void moe_combine_bwd(const double* dout, const double* y, const double* gates, const i64* routing, i64 rows, i64 k,
                     i64 experts, i64 h, double* dy, double* dgates);
// The softmax over the chosen logits backward: dlogits[t, e_j] = g_j (dg_j - sum_m g_m dg_m), 0 elsewhere.
void moe_route_bwd(const double* dgates, const double* gates, const i64* routing, i64 rows, i64 experts, i64 k,
                   double* dlogits);
// dx[t] (= or += when accumulate) sum_j dxd[slot(t k + j)].
void moe_dispatch_bwd(const double* dxd, const i64* routing, i64 rows, i64 k, i64 experts, i64 h, double* dx,
                      bool accumulate);

}  // namespace preflight::runtime::ref
