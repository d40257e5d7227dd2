#include "preflight/runtime/reference.hpp"

#include "preflight/runtime/context_parallel.hpp"
#include "preflight/planner/error.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace preflight::runtime::ref {

float round_bf16(float x) {
    std::uint32_t u;
    std::memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) {  // inf / nan: truncate (keep nan quiet)
        if (u & 0x007fffffu) u |= 0x00400000u;
        u &= 0xffff0000u;
    } else {
        u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
        u &= 0xffff0000u;
    }
    float r;
    std::memcpy(&r, &u, 4);
    return r;
}

void linear_fwd(const double* x, const double* w, const double* b, const double* r, double* y, i64 M, i64 N, i64 K) {
    for (i64 i = 0; i < M; ++i)
        for (i64 j = 0; j < N; ++j) {
            double acc = b ? b[j] : 0.0;
            for (i64 k = 0; k < K; ++k) acc += x[i * K + k] * w[j * K + k];
            y[i * N + j] = acc + (r ? r[i * N + j] : 0.0);
        }
}

void linear_bwd(const double* dy, const double* x, const double* w, double* dx, double* dw, double* db, i64 M, i64 N,
                i64 K) {
    for (i64 i = 0; i < M; ++i)
        for (i64 k = 0; k < K; ++k) {
            double acc = 0;
            for (i64 j = 0; j < N; ++j) acc += dy[i * N + j] * w[j * K + k];
            dx[i * K + k] = acc;
        }
    for (i64 j = 0; j < N; ++j) {
        for (i64 k = 0; k < K; ++k) {
            double acc = 0;
            for (i64 i = 0; i < M; ++i) acc += dy[i * N + j] * x[i * K + k];
            dw[j * K + k] += acc;
        }
        if (db)
            for (i64 i = 0; i < M; ++i) db[j] += dy[i * N + j];
    }
}

void layernorm_fwd(const double* x, const double* w, const double* b, double* y, i64 rows, i64 h, double eps) {
    for (i64 r = 0; r < rows; ++r) {
        const double* xr = x + r * h;
        double mean = 0, var = 0;
        for (i64 i = 0; i < h; ++i) mean += xr[i];
        mean /= static_cast<double>(h);
        for (i64 i = 0; i < h; ++i) var += (xr[i] - mean) * (xr[i] - mean);
        const double rstd = 1.0 / std::sqrt(var / static_cast<double>(h) + eps);
        for (i64 i = 0; i < h; ++i) y[r * h + i] = (xr[i] - mean) * rstd * w[i] + (b ? b[i] : 0.0);
    }
}

void layernorm_bwd(const double* x, const double* w, const double* dy, double* dx, double* dw, double* db, i64 rows,
                   i64 h, double eps, bool accumulate) {
    const double hd = static_cast<double>(h);
    for (i64 r = 0; r < rows; ++r) {
        const double* xr = x + r * h;
        const double* g = dy + r * h;
        double mean = 0, var = 0;
        for (i64 i = 0; i < h; ++i) mean += xr[i];
        mean /= hd;
        for (i64 i = 0; i < h; ++i) var += (xr[i] - mean) * (xr[i] - mean);
        const double rstd = 1.0 / std::sqrt(var / hd + eps);
        // dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * w.
        double m1 = 0, m2 = 0;
        for (i64 i = 0; i < h; ++i) {
            const double xhat = (xr[i] - mean) * rstd;
            m1 += g[i] * w[i];
            m2 += g[i] * w[i] * xhat;
            dw[i] += g[i] * xhat;
            if (db) db[i] += g[i];
        }
        m1 /= hd;
        m2 /= hd;
        for (i64 i = 0; i < h; ++i) {
            const double xhat = (xr[i] - mean) * rstd;
            const double v = rstd * (g[i] * w[i] - m1 - xhat * m2);
            dx[r * h + i] = accumulate ? dx[r * h + i] + v : v;
        }
    }
}

void rmsnorm_fwd(const double* x, const double* w, double* y, i64 rows, i64 h, double eps) {
    for (i64 r = 0; r < rows; ++r) {
        double ms = 0;
        for (i64 i = 0; i < h; ++i) ms += x[r * h + i] * x[r * h + i];
        const double rstd = 1.0 / std::sqrt(ms / static_cast<double>(h) + eps);
        for (i64 i = 0; i < h; ++i) y[r * h + i] = x[r * h + i] * rstd * w[i];
    }
}

void rmsnorm_bwd(const double* x, const double* w, const double* dy, double* dx, double* dw, i64 rows, i64 h,
                 double eps, bool accumulate) {
    const double hd = static_cast<double>(h);
    for (i64 r = 0; r < rows; ++r) {
        const double* xr = x + r * h;
        const double* g = dy + r * h;
        double ms = 0;
        for (i64 i = 0; i < h; ++i) ms += xr[i] * xr[i];
        const double rstd = 1.0 / std::sqrt(ms / hd + eps);
        // dx = rstd * (dxhat - xhat * mean(dxhat * xhat)), xhat = x * rstd.
        double m2 = 0;
        for (i64 i = 0; i < h; ++i) {
            m2 += g[i] * w[i] * xr[i] * rstd;
            dw[i] += g[i] * xr[i] * rstd;
        }
        m2 /= hd;
        for (i64 i = 0; i < h; ++i) {
            const double v = rstd * (g[i] * w[i] - xr[i] * rstd * m2);
            dx[r * h + i] = accumulate ? dx[r * h + i] + v : v;
        }
    }
}

// Each (token, head) of the Q|K columns is one RMSNorm row of width d (rmsnorm_fwd / _bwd on it).
namespace {
// Where the j-th group of a row begins among the Q|K columns, and its width (Q's groups, then K's).
i64 group_offset(const QkNormGroups& g, i64 j) {
    return j < g.q_groups ? j * g.q_width : g.q_groups * g.q_width + (j - g.q_groups) * g.k_width;
}
i64 group_width(const QkNormGroups& g, i64 j) { return j < g.q_groups ? g.q_width : g.k_width; }
}  // namespace

void head_rmsnorm_fwd(double* qkv, double* saved, const double* wq, const double* wk, i64 rows, i64 ld,
                      const QkNormGroups& g, double eps) {
    for (i64 r = 0; r < rows; ++r)
        for (i64 j = 0; j < g.per_row(); ++j) {
            const i64 at = group_offset(g, j), n = group_width(g, j);
            double* x = qkv + r * ld + at;
            double* kept = saved + r * g.columns() + at;
            std::copy(x, x + n, kept);
            rmsnorm_fwd(kept, j < g.q_groups ? wq : wk, x, 1, n, eps);
        }
}

void head_rmsnorm_bwd(const double* saved, double* dqkv, const double* wq, const double* wk, double* dwq, double* dwk,
                      i64 rows, i64 ld, const QkNormGroups& g, double eps) {
    std::vector<double> dy(static_cast<std::size_t>(std::max(g.q_width, g.k_width)));
    for (i64 r = 0; r < rows; ++r)
        for (i64 j = 0; j < g.per_row(); ++j) {
            const i64 at = group_offset(g, j), n = group_width(g, j);
            double* d = dqkv + r * ld + at;
            std::copy(d, d + n, dy.begin());
            const bool q = j < g.q_groups;
            rmsnorm_bwd(saved + r * g.columns() + at, q ? wq : wk, dy.data(), d, q ? dwq : dwk, 1, n, eps, false);
        }
}

void head_rmsnorm_fwd(double* qkv, double* saved, const double* wq, const double* wk, const AttnShape& a, double eps) {
    head_rmsnorm_fwd(qkv, saved, wq, wk, a.b * a.s, a.qkv_width(), qk_norm_groups(false, a.heads, a.kv_heads, a.d), eps);
}

void head_rmsnorm_bwd(const double* saved, double* dqkv, const double* wq, const double* wk, double* dwq, double* dwk,
                      const AttnShape& a, double eps) {
    head_rmsnorm_bwd(saved, dqkv, wq, wk, dwq, dwk, a.b * a.s, a.qkv_width(),
                     qk_norm_groups(false, a.heads, a.kv_heads, a.d), eps);
}

std::vector<double> rope_inv_freq(i64 d, double base, const RopeScaling& sc) {
    std::vector<double> f(static_cast<std::size_t>(d / 2));
    for (i64 i = 0; i < d / 2; ++i)
        f[static_cast<std::size_t>(i)] = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(d));
    if (sc.type == "longrope")
        throw std::logic_error("rope_inv_freq: longrope's frequencies depend on the sequence (rope_frequencies)");
    if (sc.type.empty() || sc.factor == 0) return f;
    if (sc.type != "llama3")
        throw InputError("rope_scaling.rope_type",
                         "'" + sc.type + "' is not implemented by the runtime (llama3 and longrope are)");
    const double old_len = static_cast<double>(sc.original_max_positions);
    const double low_wavelen = old_len / sc.low_freq_factor, high_wavelen = old_len / sc.high_freq_factor;
    constexpr double kPi = 3.14159265358979323846;
    for (double& x : f) {
        const double wavelen = 2 * kPi / x;
        if (wavelen > low_wavelen) {
            x /= sc.factor;  // low frequencies: scaled
        } else if (wavelen >= high_wavelen) {  // medium: interpolated
            const double smooth = (old_len / wavelen - sc.low_freq_factor) / (sc.high_freq_factor - sc.low_freq_factor);
            x = (1 - smooth) * x / sc.factor + smooth * x;
        }
    }
    return f;
}

RopeFrequencies rope_frequencies(i64 d, double base, const RopeScaling& sc, i64 seq, i64 max_positions) {
    if (sc.type != "longrope") return {rope_inv_freq(d, base, sc)};
    const double original = static_cast<double>(sc.original_max_positions);
    const bool beyond = seq > sc.original_max_positions;
    const std::vector<double>& ext = beyond ? sc.long_factor : sc.short_factor;
    if (static_cast<i64>(ext.size()) != d / 2)
        throw InputError(beyond ? "rope_scaling.long_factor" : "rope_scaling.short_factor",
                         "longrope needs " + std::to_string(d / 2) + " factors (rotated dimensions / 2), got " +
                             std::to_string(ext.size()));
    RopeFrequencies r{std::vector<double>(static_cast<std::size_t>(d / 2))};
    r.longrope_factors = beyond ? "long" : "short";
    for (i64 i = 0; i < d / 2; ++i)  // inv_freq = 1 / (ext_factors * base^(2i/d))
        r.inv_freq[static_cast<std::size_t>(i)] =
            1.0 / (ext[static_cast<std::size_t>(i)] * std::pow(base, 2.0 * static_cast<double>(i) / static_cast<double>(d)));
    const double factor = sc.factor > 0 ? sc.factor : static_cast<double>(max_positions) / original;
    r.attention_factor = sc.attention_factor > 0 ? sc.attention_factor
                         : factor <= 1.0        ? 1.0
                                                : std::sqrt(1.0 + std::log(factor) / std::log(original));
    return r;
}

void rope_tables_cp(double* cos_t, double* sin_t, const AttnShape& a, const RopeFrequencies& f) {
    const i64 r = a.rotary();
    for (i64 t = 0; t < a.s; ++t)
        for (i64 i = 0; i < a.d; ++i) {
            if (i >= r) {  // past the rotated dimensions: the identity
                cos_t[t * a.d + i] = 1.0;
                sin_t[t * a.d + i] = 0.0;
                continue;
            }
            const double ang = static_cast<double>(cp_position(t, a.s, a.cp, a.cp_rank)) *
                               f.inv_freq[static_cast<std::size_t>(i % (r / 2))];
            cos_t[t * a.d + i] = f.attention_factor * std::cos(ang);
            sin_t[t * a.d + i] = f.attention_factor * std::sin(ang);
        }
}

void rope_tables(double* cos_t, double* sin_t, i64 s, i64 d, const RopeFrequencies& f) {
    AttnShape a;
    a.s = s;
    a.d = d;
    rope_tables_cp(cos_t, sin_t, a, f);
}

void rope_tables(double* cos_t, double* sin_t, i64 s, i64 d, double base) {
    rope_tables(cos_t, sin_t, s, d, rope_inv_freq(d, base, {}));
}

namespace {
void rope_apply(double* qkv, const AttnShape& a, const RopeFrequencies& f, double sign) {
    const i64 C = a.qkv_width(), d = a.d, half = a.rotary() / 2;  // dimensions past 2 half pass through
    for (i64 bb = 0; bb < a.b; ++bb)
        for (i64 t = 0; t < a.s; ++t)
            for (i64 hh = 0; hh < a.heads + a.kv_heads; ++hh) {  // Q heads then K heads
                double* v = qkv + (bb * a.s + t) * C + hh * d;
                for (i64 i = 0; i < half; ++i) {
                    const double ang = static_cast<double>(cp_position(t, a.s, a.cp, a.cp_rank)) *
                                       f.inv_freq[static_cast<std::size_t>(i)];
                    // The attention factor scales the rotation; its transpose (bwd) by the same.
                    const double c = f.attention_factor * std::cos(ang), sn = sign * f.attention_factor * std::sin(ang);
                    const double x0 = v[i], x1 = v[i + half];
                    v[i] = x0 * c - x1 * sn;
                    v[i + half] = x1 * c + x0 * sn;
                }
            }
}
}  // namespace

void rope_fwd(double* qkv, const AttnShape& a, const RopeFrequencies& f) { rope_apply(qkv, a, f, 1.0); }
void rope_bwd(double* dqkv, const AttnShape& a, const RopeFrequencies& f) { rope_apply(dqkv, a, f, -1.0); }
void rope_fwd(double* qkv, const AttnShape& a, double base) { rope_apply(qkv, a, rope_inv_freq(a.rotary(), base, {}), 1.0); }
void rope_bwd(double* dqkv, const AttnShape& a, double base) {
    rope_apply(dqkv, a, rope_inv_freq(a.rotary(), base, {}), -1.0);
}

namespace {
struct AttnIdx {
    const AttnShape& a;
    i64 C, g;
    explicit AttnIdx(const AttnShape& s) : a(s), C(s.qkv_width()), g(s.heads / s.kv_heads) {}
    i64 q(i64 b, i64 t, i64 h) const { return (b * a.s + t) * C + h * a.d; }
    i64 k(i64 b, i64 t, i64 h) const { return (b * a.s + t) * C + a.heads * a.d + (h / g) * a.d; }
    i64 v(i64 b, i64 t, i64 h) const { return (b * a.s + t) * C + (a.heads + a.kv_heads) * a.d + (h / g) * a.d; }
    i64 o(i64 b, i64 t, i64 h) const { return (b * a.s + t) * a.heads * a.d + h * a.d; }
};
}  // namespace

void attention_probs(const double* qkv, double* probs, const AttnShape& a) {
    const AttnIdx ix(a);
    const double scale = 1.0 / std::sqrt(static_cast<double>(a.d));
    for (i64 b = 0; b < a.b; ++b)
        for (i64 h = 0; h < a.heads; ++h)
            for (i64 t = 0; t < a.s; ++t) {
                double* p = probs + ((b * a.heads + h) * a.s + t) * a.s;
                const i64 first = a.first_key(t);
                double mx = -std::numeric_limits<double>::infinity();
                for (i64 u = first; u <= t; ++u) {
                    double sc = 0;
                    for (i64 i = 0; i < a.d; ++i) sc += qkv[ix.q(b, t, h) + i] * qkv[ix.k(b, u, h) + i];
                    p[u] = sc * scale;
                    mx = std::max(mx, p[u]);
                }
                double sum = 0;
                for (i64 u = first; u <= t; ++u) sum += (p[u] = std::exp(p[u] - mx));
                for (i64 u = 0; u < a.s; ++u) p[u] = u >= first && u <= t ? p[u] / sum : 0.0;
            }
}

void attention_fwd(const double* qkv, double* out, double* lse, const AttnShape& a) {
    const AttnIdx ix(a);
    const double scale = 1.0 / std::sqrt(static_cast<double>(a.d));
    std::vector<double> p(static_cast<std::size_t>(a.s));
    for (i64 b = 0; b < a.b; ++b)
        for (i64 h = 0; h < a.heads; ++h)
            for (i64 t = 0; t < a.s; ++t) {
                const i64 first = a.first_key(t);
                double mx = -std::numeric_limits<double>::infinity();
                for (i64 u = first; u <= t; ++u) {
                    double sc = 0;
                    for (i64 i = 0; i < a.d; ++i) sc += qkv[ix.q(b, t, h) + i] * qkv[ix.k(b, u, h) + i];
                    p[static_cast<std::size_t>(u)] = sc * scale;
                    mx = std::max(mx, sc * scale);
                }
                double sum = 0;
                for (i64 u = first; u <= t; ++u) sum += std::exp(p[static_cast<std::size_t>(u)] - mx);
                if (lse) lse[(b * a.heads + h) * a.s + t] = mx + std::log(sum);
                for (i64 i = 0; i < a.d; ++i) {
                    double acc = 0;
                    for (i64 u = first; u <= t; ++u) acc += std::exp(p[static_cast<std::size_t>(u)] - mx) / sum * qkv[ix.v(b, u, h) + i];
                    out[ix.o(b, t, h) + i] = acc;
                }
            }
}

void softmax_bwd(const double* p, const double* dp, double* ds, i64 rows, i64 cols) {
    for (i64 r = 0; r < rows; ++r) {
        double dot = 0;
        for (i64 c = 0; c < cols; ++c) dot += p[r * cols + c] * dp[r * cols + c];
        for (i64 c = 0; c < cols; ++c) ds[r * cols + c] = p[r * cols + c] * (dp[r * cols + c] - dot);
    }
}

void attention_bwd(const double* qkv, const double* dout, double* dqkv, const AttnShape& a) {
    const AttnIdx ix(a);
    const double scale = 1.0 / std::sqrt(static_cast<double>(a.d));
    std::fill(dqkv, dqkv + a.b * a.s * ix.C, 0.0);
    std::vector<double> probs(static_cast<std::size_t>(a.b * a.heads * a.s * a.s));
    attention_probs(qkv, probs.data(), a);
    std::vector<double> dp(static_cast<std::size_t>(a.s)), ds(static_cast<std::size_t>(a.s));
    for (i64 b = 0; b < a.b; ++b)
        for (i64 h = 0; h < a.heads; ++h)
            for (i64 t = 0; t < a.s; ++t) {
                const double* p = probs.data() + ((b * a.heads + h) * a.s + t) * a.s;
                for (i64 u = 0; u < a.s; ++u) {
                    double acc = 0;
                    for (i64 i = 0; i < a.d; ++i) acc += dout[ix.o(b, t, h) + i] * qkv[ix.v(b, u, h) + i];
                    dp[static_cast<std::size_t>(u)] = acc;
                }
                softmax_bwd(p, dp.data(), ds.data(), 1, a.s);
                for (i64 u = a.first_key(t); u <= t; ++u) {
                    const double dsu = ds[static_cast<std::size_t>(u)] * scale;
                    for (i64 i = 0; i < a.d; ++i) {
                        dqkv[ix.q(b, t, h) + i] += dsu * qkv[ix.k(b, u, h) + i];
                        dqkv[ix.k(b, u, h) + i] += dsu * qkv[ix.q(b, t, h) + i];
                        dqkv[ix.v(b, u, h) + i] += p[u] * dout[ix.o(b, t, h) + i];
                    }
                }
            }
}

namespace {
constexpr double kGeluC = 0.7978845608028654;  // sqrt(2/pi)
}

void gelu_fwd(const double* x, double* y, i64 n) {
    for (i64 i = 0; i < n; ++i) {
        const double v = x[i];
        y[i] = 0.5 * v * (1.0 + std::tanh(kGeluC * (v + 0.044715 * v * v * v)));
    }
}

void gelu_bwd(const double* x, const double* dy, double* dx, i64 n) {
    for (i64 i = 0; i < n; ++i) {
        const double v = x[i];
        const double u = kGeluC * (v + 0.044715 * v * v * v);
        const double th = std::tanh(u);
        const double du = kGeluC * (1.0 + 3.0 * 0.044715 * v * v);
        dx[i] = dy[i] * (0.5 * (1.0 + th) + 0.5 * v * (1.0 - th * th) * du);
    }
}

void swiglu_fwd(const double* gu, double* act, i64 rows, i64 f) {
    for (i64 r = 0; r < rows; ++r)
        for (i64 i = 0; i < f; ++i) {
            const double g = gu[r * 2 * f + i], u = gu[r * 2 * f + f + i];
            act[r * f + i] = g / (1.0 + std::exp(-g)) * u;
        }
}

void swiglu_bwd(const double* gu, const double* dact, double* dgu, i64 rows, i64 f) {
    for (i64 r = 0; r < rows; ++r)
        for (i64 i = 0; i < f; ++i) {
            const double g = gu[r * 2 * f + i], u = gu[r * 2 * f + f + i], da = dact[r * f + i];
            const double sig = 1.0 / (1.0 + std::exp(-g));
            dgu[r * 2 * f + i] = da * u * sig * (1.0 + g * (1.0 - sig));
            dgu[r * 2 * f + f + i] = da * g * sig;
        }
}

double cross_entropy(const double* logits, const std::int64_t* labels, double* loss_rows, double* dlogits, i64 rows,
                     i64 vocab, i64 vocab_padded, double scale) {
    double total = 0;
    for (i64 r = 0; r < rows; ++r) {
        const double* z = logits + r * vocab_padded;
        double mx = -std::numeric_limits<double>::infinity();
        for (i64 c = 0; c < vocab; ++c) mx = std::max(mx, z[c]);
        double sum = 0;
        for (i64 c = 0; c < vocab; ++c) sum += std::exp(z[c] - mx);
        const double lse = mx + std::log(sum);
        const double loss = lse - z[labels[r]];
        if (loss_rows) loss_rows[r] = loss;
        total += loss;
        if (dlogits)
            for (i64 c = 0; c < vocab_padded; ++c)
                dlogits[r * vocab_padded + c] =
                    c < vocab ? scale * (std::exp(z[c] - lse) - (c == labels[r] ? 1.0 : 0.0)) : 0.0;
    }
    return total;
}

void embedding_fwd(const std::int64_t* tokens, const double* wte, const double* wpe, double* x, i64 b, i64 s, i64 h) {
    for (i64 r = 0; r < b * s; ++r)
        for (i64 i = 0; i < h; ++i) x[r * h + i] = wte[tokens[r] * h + i] + (wpe ? wpe[(r % s) * h + i] : 0.0);
}

void embedding_bwd(const std::int64_t* tokens, const double* dx, double* dwte, double* dwpe, i64 b, i64 s, i64 h) {
    for (i64 r = 0; r < b * s; ++r)
        for (i64 i = 0; i < h; ++i) {
            dwte[tokens[r] * h + i] += dx[r * h + i];
            if (dwpe) dwpe[(r % s) * h + i] += dx[r * h + i];
        }
}

void adamw(double* p, const double* g, double* m, double* v, i64 n, double lr, double beta1, double beta2, double eps,
           double weight_decay, i64 step) {
    const double c1 = 1.0 - std::pow(beta1, static_cast<double>(step));
    const double c2 = 1.0 - std::pow(beta2, static_cast<double>(step));
    for (i64 i = 0; i < n; ++i) {
        m[i] = beta1 * m[i] + (1.0 - beta1) * g[i];
        v[i] = beta2 * v[i] + (1.0 - beta2) * g[i] * g[i];
        const double mhat = m[i] / c1, vhat = v[i] / c2;
        p[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + weight_decay * p[i]);
    }
}

void sgd(double* p, const double* g, double* mom, i64 n, double lr, double momentum, double weight_decay) {
    for (i64 i = 0; i < n; ++i) {
        const double gi = g[i] + weight_decay * p[i];
        mom[i] = momentum * mom[i] + gi;
        p[i] -= lr * mom[i];
    }
}

}  // namespace preflight::runtime::ref
