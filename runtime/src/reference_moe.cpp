// CPU reference of the mixture-of-experts kernels (reference_moe.hpp).
#include "preflight/runtime/reference_moe.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace preflight::runtime::ref {

void moe_route(const double* logits, i64 rows, i64 experts, i64 k, bool renormalize, double* gates, i64* routing) {
    const i64 P = rows * k;
    i64* expert_of = routing + 2 * P + experts + 1;
    std::vector<i64> order(static_cast<std::size_t>(experts));
    for (i64 t = 0; t < rows; ++t) {
        const double* l = logits + t * experts;
        std::iota(order.begin(), order.end(), i64{0});
        // Largest first, the lower index first on a tie.
        std::stable_sort(order.begin(), order.end(), [l](i64 a, i64 b) { return l[a] > l[b]; });
        // Softmax over the k chosen (Mixtral: softmax over all E, then renormalised over the top k), or
        // over all E (OLMoE: not renormalised).
        const double top = l[order[0]];
        double sum = 0;
        for (i64 j = 0; j < (renormalize ? k : experts); ++j) sum += std::exp(l[order[static_cast<std::size_t>(j)]] - top);
        for (i64 j = 0; j < k; ++j) {
            const i64 e = order[static_cast<std::size_t>(j)];
            gates[t * k + j] = std::exp(l[e] - top) / sum;
            expert_of[t * k + j] = e;
        }
    }
    // Counting sort of the pairs by expert, stable: expert e's slots hold its pairs in order.
    i64* off = routing + 2 * P;
    std::fill_n(off, experts + 1, i64{0});
    for (i64 p = 0; p < P; ++p) ++off[expert_of[p] + 1];
    for (i64 e = 0; e < experts; ++e) off[e + 1] += off[e];
    std::vector<i64> next(off, off + experts);
    for (i64 p = 0; p < P; ++p) {
        const i64 s = next[static_cast<std::size_t>(expert_of[p])]++;
        routing[p] = s;
        routing[P + s] = p;
    }
}

namespace {
// The rows [lo, hi) of the rank's expert buffers local expert i runs on, its routing slots starting
// at `slot0` (dropless: every expert's own slots; capacity layout: C rows, its pairs first).
struct Segment {
    i64 lo, hi, filled, slot0;
};
Segment segment(const Routing& r, i64 i, const ExpertSlots& es) {
    const i64 e = es.first + i, n = r.end(e) - r.begin(e);
    if (es.capacity == 0) return {r.begin(e), r.end(e), n, r.begin(e)};
    return {i * es.capacity, (i + 1) * es.capacity, std::min(n, es.capacity), r.begin(e)};
}
}  // namespace

void moe_dispatch(const double* x, const i64* routing, i64 rows, i64 k, i64 experts, i64 h, const ExpertSlots& es,
                  double* xd) {
    const Routing r{routing, rows * k, experts};
    for (i64 i = 0; i < es.count; ++i) {
        const Segment g = segment(r, i, es);
        for (i64 j = 0; j < g.hi - g.lo; ++j) {
            double* out = xd + (g.lo + j) * h;
            if (j < g.filled)
                std::copy_n(x + r.pair(g.slot0 + j) / k * h, h, out);
            else
                std::fill_n(out, h, 0.0);
        }
    }
}

void moe_linear_fwd(const double* x, const double* w, const i64* routing, i64 pairs, i64 experts, i64 N, i64 K,
                    const ExpertSlots& es, double* y) {
    const Routing r{routing, pairs, experts};
    for (i64 i = 0; i < es.count; ++i) {
        const double* W = w + i * N * K;
        const Segment g = segment(r, i, es);
        for (i64 s = g.lo; s < g.hi; ++s)
            for (i64 n = 0; n < N; ++n) {
                double acc = 0;
                for (i64 c = 0; c < K; ++c) acc += x[s * K + c] * W[n * K + c];
                y[s * N + n] = acc;
            }
    }
}

void moe_linear_bwd_data(const double* dy, const double* w, const i64* routing, i64 pairs, i64 experts, i64 N, i64 K,
                         const ExpertSlots& es, double* dx) {
    const Routing r{routing, pairs, experts};
    for (i64 i = 0; i < es.count; ++i) {
        const double* W = w + i * N * K;
        const Segment g = segment(r, i, es);
        for (i64 s = g.lo; s < g.hi; ++s)
            for (i64 c = 0; c < K; ++c) {
                double acc = 0;
                for (i64 n = 0; n < N; ++n) acc += dy[s * N + n] * W[n * K + c];
                dx[s * K + c] = acc;
            }
    }
}

void moe_linear_bwd_weight(const double* dy, const double* x, const i64* routing, i64 pairs, i64 experts, i64 N, i64 K,
                           const ExpertSlots& es, double* dw, double alpha) {
    const Routing r{routing, pairs, experts};
    for (i64 i = 0; i < es.count; ++i) {
        double* dW = dw + i * N * K;
        const Segment g = segment(r, i, es);
        for (i64 s = g.lo; s < g.hi; ++s)
            for (i64 n = 0; n < N; ++n)
                for (i64 c = 0; c < K; ++c) dW[n * K + c] += alpha * dy[s * N + n] * x[s * K + c];
    }
}

void moe_combine(const double* y, const double* gates, const i64* routing, const double* res, i64 rows, i64 k,
                 i64 experts, i64 h, const ExpertSlots& es, double* out) {
    const Routing r{routing, rows * k, experts};
    for (i64 t = 0; t < rows; ++t)
        for (i64 c = 0; c < h; ++c) {
            double acc = res ? res[t * h + c] : 0.0;
            for (i64 j = 0; j < k; ++j) {
                const i64 row = local_row(r, t * k + j, es);
                if (row >= 0) acc += gates[t * k + j] * y[row * h + c];
            }
            out[t * h + c] = acc;
        }
}

void moe_combine_bwd(const double* dout, const double* y, const double* gates, const i64* routing, i64 rows, i64 k,
                     i64 experts, i64 h, const ExpertSlots& es, double* dy, double* dgates) {
    const Routing r{routing, rows * k, experts};
    if (es.capacity > 0) std::fill_n(dy, es.rows() * h, 0.0);
    for (i64 t = 0; t < rows; ++t)
        for (i64 j = 0; j < k; ++j) {
            const i64 row = local_row(r, t * k + j, es);
            double dot = 0;
            if (row >= 0)
                for (i64 c = 0; c < h; ++c) {
                    dy[row * h + c] = gates[t * k + j] * dout[t * h + c];
                    dot += dout[t * h + c] * y[row * h + c];
                }
            dgates[t * k + j] = dot;
        }
}

void moe_route_bwd(const double* dgates, const double* gates, const i64* routing, const double* logits, i64 rows,
                   i64 experts, i64 k, double* dlogits) {
    const Routing r{routing, rows * k, experts};
    std::vector<double> p(static_cast<std::size_t>(experts));
    for (i64 t = 0; t < rows; ++t) {
        double dot = 0;
        for (i64 j = 0; j < k; ++j) dot += gates[t * k + j] * dgates[t * k + j];
        double* dl = dlogits + t * experts;
        if (!logits) {
            std::fill_n(dl, experts, 0.0);
            // d softmax: dl_j = g_j (dg_j - sum_m g_m dg_m) over the chosen experts.
            for (i64 j = 0; j < k; ++j) dl[r.expert(t * k + j)] = gates[t * k + j] * (dgates[t * k + j] - dot);
            continue;
        }
        // d softmax over all E, read at the chosen: dl_e = p_e ([e chosen] dg_e - sum_m g_m dg_m).
        const double* l = logits + t * experts;
        const double top = *std::max_element(l, l + experts);
        double z = 0;
        for (i64 e = 0; e < experts; ++e) z += p[static_cast<std::size_t>(e)] = std::exp(l[e] - top);
        for (i64 e = 0; e < experts; ++e) dl[e] = -p[static_cast<std::size_t>(e)] / z * dot;
        for (i64 j = 0; j < k; ++j) {
            const i64 e = r.expert(t * k + j);
            dl[e] += p[static_cast<std::size_t>(e)] / z * dgates[t * k + j];
        }
    }
}

void moe_dispatch_bwd(const double* dxd, const i64* routing, i64 rows, i64 k, i64 experts, i64 h, const ExpertSlots& es,
                      double* dx, bool accumulate) {
    const Routing r{routing, rows * k, experts};
    for (i64 t = 0; t < rows; ++t)
        for (i64 c = 0; c < h; ++c) {
            double acc = accumulate ? dx[t * h + c] : 0.0;
            for (i64 j = 0; j < k; ++j) {
                const i64 row = local_row(r, t * k + j, es);
                if (row >= 0) acc += dxd[row * h + c];
            }
            dx[t * h + c] = acc;
        }
}

}  // namespace preflight::runtime::ref
