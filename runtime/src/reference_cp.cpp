// CPU reference of context-parallel attention (runtime/src/program_cp.cpp), in double: the rank's
// queries at their positions in the sequence (context_parallel.hpp) against the whole sequence's
// keys and values, causal (through a.window's sliding window when set), scale 1/sqrt(d), GQA; and
// the moves of K|V between a rank's rows, the rank-major gather buffer and sequence order. Independent of reference.cpp's attention loops
// on purpose: the CPU test checks that cp ranks together give what one GPU does.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "preflight/runtime/context_parallel.hpp"
#include "preflight/runtime/reference.hpp"

namespace preflight::runtime::ref {

namespace {

struct CpIdx {
    const AttnShape& a;
    i64 C, W, S, g;  // qkv row width, K|V row width, whole sequence, query heads per KV head
    explicit CpIdx(const AttnShape& s)
        : a(s), C(s.qkv_width()), W(2 * s.kv_width()), S(s.cp * s.s), g(s.heads / s.kv_heads) {}
    i64 q(i64 b, i64 t, i64 h) const { return (b * a.s + t) * C + h * a.d; }
    i64 o(i64 b, i64 t, i64 h) const { return (b * a.s + t) * a.heads * a.d + h * a.d; }
    i64 k(i64 b, i64 u, i64 h) const { return (b * S + u) * W + (h / g) * a.d; }
    i64 v(i64 b, i64 u, i64 h) const { return (b * S + u) * W + a.kv_width() + (h / g) * a.d; }
    i64 pos(i64 t) const { return cp_position(t, a.s, a.cp, a.cp_rank); }
};

// Softmax probabilities of query (b, t, h) over keys first_key(pos(t))..pos(t) (the sliding window's,
// 0.. without one); returns the log-sum-exp.
double probabilities(const double* qkv, const double* kv, const CpIdx& ix, i64 b, i64 t, i64 h, std::vector<double>& p) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(ix.a.d));
    const i64 last = ix.pos(t), first = ix.a.first_key(last);
    double mx = -std::numeric_limits<double>::infinity();
    for (i64 u = first; u <= last; ++u) {
        double sc = 0;
        for (i64 i = 0; i < ix.a.d; ++i) sc += qkv[ix.q(b, t, h) + i] * kv[ix.k(b, u, h) + i];
        p[static_cast<std::size_t>(u)] = sc * scale;
        mx = std::max(mx, sc * scale);
    }
    double sum = 0;
    for (i64 u = first; u <= last; ++u) sum += std::exp(p[static_cast<std::size_t>(u)] - mx);
    for (i64 u = 0; u <= last; ++u)
        p[static_cast<std::size_t>(u)] = u < first ? 0.0 : std::exp(p[static_cast<std::size_t>(u)] - mx) / sum;
    return mx + std::log(sum);
}

}  // namespace

void attention_fwd_cp(const double* qkv, const double* kv, double* out, double* lse, const AttnShape& a) {
    const CpIdx ix(a);
    std::vector<double> p(static_cast<std::size_t>(ix.S));
    for (i64 b = 0; b < a.b; ++b)
        for (i64 h = 0; h < a.heads; ++h)
            for (i64 t = 0; t < a.s; ++t) {
                const double l = probabilities(qkv, kv, ix, b, t, h, p);
                if (lse) lse[(b * a.heads + h) * a.s + t] = l;
                for (i64 i = 0; i < a.d; ++i) {
                    double acc = 0;
                    for (i64 u = a.first_key(ix.pos(t)); u <= ix.pos(t); ++u)
                        acc += p[static_cast<std::size_t>(u)] * kv[ix.v(b, u, h) + i];
                    out[ix.o(b, t, h) + i] = acc;
                }
            }
}

void attention_bwd_cp(const double* qkv, const double* kv, const double* dout, double* dqkv, double* dkv,
                      const AttnShape& a) {
    const CpIdx ix(a);
    const double scale = 1.0 / std::sqrt(static_cast<double>(a.d));
    std::fill(dkv, dkv + a.b * ix.S * ix.W, 0.0);
    for (i64 b = 0; b < a.b; ++b)
        for (i64 t = 0; t < a.s; ++t)
            for (i64 h = 0; h < a.heads; ++h) std::fill_n(dqkv + ix.q(b, t, h), a.d, 0.0);
    std::vector<double> p(static_cast<std::size_t>(ix.S)), dp(static_cast<std::size_t>(ix.S));
    for (i64 b = 0; b < a.b; ++b)
        for (i64 h = 0; h < a.heads; ++h)
            for (i64 t = 0; t < a.s; ++t) {
                probabilities(qkv, kv, ix, b, t, h, p);
                const i64 last = ix.pos(t), first = a.first_key(last);
                double dot = 0;  // softmax backward: dS = P (dP - rowsum(P dP))
                for (i64 u = first; u <= last; ++u) {
                    double acc = 0;
                    for (i64 i = 0; i < a.d; ++i) acc += dout[ix.o(b, t, h) + i] * kv[ix.v(b, u, h) + i];
                    dp[static_cast<std::size_t>(u)] = acc;
                    dot += p[static_cast<std::size_t>(u)] * acc;
                }
                for (i64 u = first; u <= last; ++u) {
                    const double pu = p[static_cast<std::size_t>(u)];
                    const double ds = pu * (dp[static_cast<std::size_t>(u)] - dot) * scale;
                    for (i64 i = 0; i < a.d; ++i) {
                        dqkv[ix.q(b, t, h) + i] += ds * kv[ix.k(b, u, h) + i];
                        dkv[ix.k(b, u, h) + i] += ds * qkv[ix.q(b, t, h) + i];
                        dkv[ix.v(b, u, h) + i] += pu * dout[ix.o(b, t, h) + i];
                    }
                }
            }
}

void cp_kv_pack(const double* qkv, double* rows_out, const AttnShape& a) {
    const i64 C = a.qkv_width(), W = 2 * a.kv_width(), rows = a.b * a.s;
    for (i64 r = 0; r < rows; ++r) std::copy_n(qkv + r * C + a.heads * a.d, W, rows_out + r * W);
}

void cp_kv_order(const double* gathered, double* ordered, const AttnShape& a) {
    const i64 W = 2 * a.kv_width(), S = a.cp * a.s;
    for (i64 b = 0; b < a.b; ++b)
        for (i64 p = 0; p < S; ++p)
            std::copy_n(gathered + cp_gathered_row(b, p, a.b, a.s, a.cp) * W, W, ordered + (b * S + p) * W);
}

void cp_kv_unorder(const double* ordered, double* gathered, const AttnShape& a) {
    const i64 W = 2 * a.kv_width(), S = a.cp * a.s;
    for (i64 b = 0; b < a.b; ++b)
        for (i64 p = 0; p < S; ++p)
            std::copy_n(ordered + (b * S + p) * W, W, gathered + cp_gathered_row(b, p, a.b, a.s, a.cp) * W);
}

void cp_kv_unpack(const double* gathered, double* qkv, const AttnShape& a) {
    const i64 C = a.qkv_width(), W = 2 * a.kv_width(), rows = a.b * a.s;
    const double* mine = gathered + a.cp_rank * rows * W;
    for (i64 r = 0; r < rows; ++r) std::copy_n(mine + r * W, W, qkv + r * C + a.heads * a.d);
}

}  // namespace preflight::runtime::ref
