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

// Where the rank's experts' slots are: experts first .. first + count - 1 (all of them without
// expert parallelism). capacity 0: the routing's own slots, one per pair (dropless: slot s is row s,
// every expert local). capacity C > 0 (expert parallelism): local expert i's rows [i C, (i + 1) C)
// hold the first min(its pairs, C) of its pairs in order (the rest dropped, Megatron-LM's "position"
// drop policy), and zeros after them.
struct ExpertSlots {
    i64 first = 0, count = 0, capacity = 0;
    i64 rows() const { return count * capacity; }
};
// The row of pair p in the rank's expert buffers, or -1 (another rank's expert, or dropped).
inline i64 local_row(const Routing& r, i64 p, const ExpertSlots& es) {
    const i64 e = r.expert(p);
    if (e < es.first || e >= es.first + es.count) return -1;
    if (es.capacity == 0) return r.slot(p);
    const i64 j = r.slot(p) - r.begin(e);
    return j < es.capacity ? (e - es.first) * es.capacity + j : -1;
}

// logits [rows, E] -> gates [rows, k], routing. Top-k by logit, the lower index first on a tie
// (torch.topk's order for equal values is unspecified). `renormalize`: gates = softmax over the k
// chosen logits (= Mixtral's softmax over all E, top-k, renormalised to sum 1; norm_topk_prob true);
// otherwise the softmax over all E at the chosen experts (OlmoeSparseMoeBlock, norm_topk_prob false).
void moe_route(const double* logits, i64 rows, i64 experts, i64 k, bool renormalize, double* gates, i64* routing);
// The rank's expert rows from the routed tokens x [rows, h]: row local_row(p) = x[p / k] (capacity
// layout: zeros where a local expert has fewer pairs than C).
void moe_dispatch(const double* x, const i64* routing, i64 rows, i64 k, i64 experts, i64 h, const ExpertSlots& es,
                  double* xd);
// Per local expert i (expert first + i), on its rows: Y = X W_i^T, W_i = rows [i N, (i + 1) N) of w
// [count N, K] (capacity layout: all C rows, zeros included).
void moe_linear_fwd(const double* x, const double* w, const i64* routing, i64 pairs, i64 experts, i64 N, i64 K,
                    const ExpertSlots& es, double* y);
// dX = dY W_i (overwrites), dW_i += alpha dY^T X.
void moe_linear_bwd_data(const double* dy, const double* w, const i64* routing, i64 pairs, i64 experts, i64 N, i64 K,
                         const ExpertSlots& es, double* dx);
void moe_linear_bwd_weight(const double* dy, const double* x, const i64* routing, i64 pairs, i64 experts, i64 N, i64 K,
                           const ExpertSlots& es, double* dw, double alpha = 1.0);
// out[t] = res[t] (res may be null) + sum over the rank's kept pairs j of gates[t, j] y[local_row(t k + j)].
void moe_combine(const double* y, const double* gates, const i64* routing, const double* res, i64 rows, i64 k,
                 i64 experts, i64 h, const ExpertSlots& es, double* out);
// For the rank's kept pairs dy[row] = gates[t, j] dout[t] and dgates[t, j] = <dout[t], y[row]>; the
// other pairs' dgates 0, and (capacity layout) the rows no pair fills 0.
void moe_combine_bwd(const double* dout, const double* y, const double* gates, const i64* routing, i64 rows, i64 k,
                     i64 experts, i64 h, const ExpertSlots& es, double* dy, double* dgates);
// The routing's backward. Without `logits` (renormalised gates, the softmax over the chosen logits):
// dlogits[t, e_j] = g_j (dg_j - sum_m g_m dg_m), 0 elsewhere. With them (gates = p at the chosen
// experts, p the softmax over all E): dlogits[t, e] = p_e ([e chosen] dg_e - sum_m g_m dg_m) for every e.
void moe_route_bwd(const double* dgates, const double* gates, const i64* routing, const double* logits, i64 rows,
                   i64 experts, i64 k, double* dlogits);
// dx[t] (= or += when accumulate) sum over the rank's kept pairs j of dxd[local_row(t k + j)].
void moe_dispatch_bwd(const double* dxd, const i64* routing, i64 rows, i64 k, i64 experts, i64 h, const ExpertSlots& es,
                      double* dx, bool accumulate);

}  // namespace preflight::runtime::ref
