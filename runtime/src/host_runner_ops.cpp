// The host executor's attention and elementwise ops (host_runner.hpp), read as the CUDA
// executor reads them: flash attention and eager attention over [b, heads, s, s] score rows
// (row (b * heads + head) * s + t; GQA: query head hh reads KV head hh / (heads / kv_heads)),
// RoPE, the MLP activations, the loss and the fp32 gradient accumulation.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "preflight/runtime/host_runner.hpp"
#include "preflight/runtime/reference.hpp"

namespace preflight::runtime {

void HostRunner::run_attention(const Op& op) {
    const ref::AttnShape a = ref::attn_shape(d, op.phase.layer);  // the layer's own window
    switch (op.kind) {
        case OpKind::flash_fwd:
            if (d.cp > 1)
                ref::attention_fwd_cp(at(op.v[0]), at(op.v[3]), at(op.v[1]), at(op.v[2]), a);
            else
                ref::attention_fwd(at(op.v[0]), at(op.v[1]), at(op.v[2]), a);
            break;
        case OpKind::cp_kv_pack: ref::cp_kv_pack(at(op.v[0]), at(op.v[1]), a); break;
        case OpKind::cp_kv_order: ref::cp_kv_order(at(op.v[0]), at(op.v[1]), a); break;
        case OpKind::cp_kv_unorder: ref::cp_kv_unorder(at(op.v[0]), at(op.v[1]), a); break;
        case OpKind::cp_kv_unpack: ref::cp_kv_unpack(at(op.v[0]), at(op.v[1]), a); break;
        case OpKind::flash_bwd: {
            // The kernel reads O and the log-sum-exp: they must be live (not NaN-poisoned).
            const double* o = at(op.v[1]);
            const double* l = at(op.v[2]);
            for (std::int64_t i = 0; i < d.rows * d.q_width; ++i)
                if (std::isnan(o[i])) throw std::logic_error(describe(P, op) + " reads a dead attention output");
            for (std::int64_t i = 0; i < d.b * d.heads * d.s; ++i)
                if (std::isnan(l[i])) throw std::logic_error(describe(P, op) + " reads a dead log-sum-exp");
            if (d.cp > 1)
                ref::attention_bwd_cp(at(op.v[0]), at(op.v[6]), at(op.v[3]), at(op.v[4]), at(op.v[7]), a);
            else
                ref::attention_bwd(at(op.v[0]), at(op.v[3]), at(op.v[4]), a);
            break;
        }
        case OpKind::eager_softmax: {
            const double* S = at(op.v[0]);
            double* Pr = at(op.v[1]);
            const std::int64_t s = d.s;
            for (std::int64_t r = 0; r < op.v[0].rows; ++r) {
                const std::int64_t t = r % s, first = a.first_key(t);  // the sliding window's first key
                double mx = -INFINITY, sum = 0;
                for (std::int64_t u = first; u <= t; ++u) mx = std::max(mx, S[r * s + u]);
                for (std::int64_t u = first; u <= t; ++u) sum += std::exp(S[r * s + u] - mx);
                for (std::int64_t u = 0; u < s; ++u)
                    Pr[r * s + u] = u >= first && u <= t ? std::exp(S[r * s + u] - mx) / sum : 0.0;
            }
            break;
        }
        case OpKind::eager_softmax_bwd: ref::softmax_bwd(at(op.v[0]), at(op.v[1]), at(op.v[2]), op.v[0].rows, d.s); break;
        default: run_eager(op); break;
    }
}

// The eager attention GEMMs: S = scale Q K^T, O = P V, dP = dO V^T, and dQ, dK, dV.
void HostRunner::run_eager(const Op& op) {
    const std::int64_t H = d.heads, G = d.heads / d.kv_heads, dh = d.head_dim, C = d.qkv_width, s = d.s;
    const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
    auto q_at = [&](std::int64_t bb, std::int64_t t, std::int64_t hh) { return (bb * s + t) * C + hh * dh; };
    auto k_at = [&](std::int64_t bb, std::int64_t u, std::int64_t hh) { return (bb * s + u) * C + d.q_width + (hh / G) * dh; };
    auto o_at = [&](std::int64_t bb, std::int64_t t, std::int64_t hh) { return (bb * s + t) * d.q_width + hh * dh; };
    auto e_at = [&](std::int64_t bb, std::int64_t hh, std::int64_t t, std::int64_t u) { return ((bb * H + hh) * s + t) * s + u; };
    if (op.kind == OpKind::eager_dqkv) std::fill_n(at(op.v[4]), d.rows * C, 0.0);
    for (std::int64_t bb = 0; bb < d.b; ++bb)
        for (std::int64_t hh = 0; hh < H; ++hh)
            for (std::int64_t t = 0; t < s; ++t)
                for (std::int64_t u = 0; u < s; ++u) {
                    const std::int64_t e = e_at(bb, hh, t, u), q = q_at(bb, t, hh), k = k_at(bb, u, hh), v = k + d.kv_width;
                    switch (op.kind) {
                        case OpKind::eager_scores: {
                            const double* qkv = at(op.v[0]);
                            double acc = 0;
                            for (std::int64_t i = 0; i < dh; ++i) acc += qkv[q + i] * qkv[k + i];
                            at(op.v[1])[e] = scale * acc;
                            break;
                        }
                        case OpKind::eager_pv: {  // O[t] += P[t, u] V[u]
                            const double *Pr = at(op.v[0]), *qkv = at(op.v[1]);
                            double* O = at(op.v[2]) + o_at(bb, t, hh);
                            if (u == 0) std::fill_n(O, dh, 0.0);
                            for (std::int64_t i = 0; i < dh; ++i) O[i] += Pr[e] * qkv[v + i];
                            break;
                        }
                        case OpKind::eager_dp: {
                            const double *dO = at(op.v[0]) + o_at(bb, t, hh), *qkv = at(op.v[1]);
                            double acc = 0;
                            for (std::int64_t i = 0; i < dh; ++i) acc += dO[i] * qkv[v + i];
                            at(op.v[2])[e] = acc;
                            break;
                        }
                        case OpKind::eager_dqkv: {
                            const double dS = at(op.v[0])[e], Pr = at(op.v[1])[e];
                            const double *dO = at(op.v[2]) + o_at(bb, t, hh), *qkv = at(op.v[3]);
                            double* dqkv = at(op.v[4]);
                            for (std::int64_t i = 0; i < dh; ++i) {
                                dqkv[q + i] += scale * dS * qkv[k + i];
                                dqkv[k + i] += scale * dS * qkv[q + i];
                                dqkv[v + i] += Pr * dO[i];
                            }
                            break;
                        }
                        default: throw std::logic_error("HostRunner: not an eager attention op");
                    }
                }
}

void HostRunner::run_elementwise(const Op& op) {
    const std::int64_t R = d.rows;
    const ref::AttnShape a = ref::attn_shape(d);
    switch (op.kind) {
        case OpKind::rope_fwd: ref::rope_fwd(at(op.v[0]), a, rope_); break;
        case OpKind::rope_bwd: ref::rope_bwd(at(op.v[0]), a, rope_); break;
        // v0 / v1: qkv's (dqkv's) Q|K heads at offset 0 of the buffer, whose rows qkv_width apart.
        case OpKind::head_norm_fwd:
            ref::head_rmsnorm_fwd(at(op.v[0]), at(op.v[1]), w(op.p0), w(op.p1), op.v[0].rows, d.qkv_width, d.qk_norm,
                                  P.hyper.norm_eps);
            break;
        case OpKind::head_norm_bwd:
            ref::head_rmsnorm_bwd(at(op.v[0]), at(op.v[1]), w(op.p0), w(op.p1), g(op.p0), g(op.p1), op.v[1].rows,
                                  d.qkv_width, d.qk_norm, P.hyper.norm_eps);
            break;
        // The view's rows: a micro-batch's, or a mixture of experts' rows x k slots.
        case OpKind::swiglu_fwd: ref::swiglu_fwd(at(op.v[0]), at(op.v[1]), op.v[0].rows, d.ffn); break;
        case OpKind::swiglu_bwd: {  // v0: dact in the first f of 2f columns in, dgate|dup out; v1: gate|up
            const std::int64_t n = op.v[0].rows;
            Vec dact(static_cast<std::size_t>(n * d.ffn)), dgu(static_cast<std::size_t>(n * 2 * d.ffn));
            const double* in = at(op.v[0]);
            for (std::int64_t r = 0; r < n; ++r)
                for (std::int64_t c = 0; c < d.ffn; ++c) dact[static_cast<std::size_t>(r * d.ffn + c)] = in[r * 2 * d.ffn + c];
            ref::swiglu_bwd(at(op.v[1]), dact.data(), dgu.data(), n, d.ffn);
            std::copy(dgu.begin(), dgu.end(), at(op.v[0]));
            break;
        }
        case OpKind::gelu_fwd: ref::gelu_fwd(at(op.v[0]), at(op.v[1]), R * d.ffn); break;
        case OpKind::gelu_bwd: {
            const Vec dy(at(op.v[0]), at(op.v[0]) + R * d.ffn);
            ref::gelu_bwd(at(op.v[1]), dy.data(), at(op.v[0]), R * d.ffn);
            break;
        }
        case OpKind::cross_entropy:
            if (op.v[3].buffer != kNoBuffer) {
                vocab_parallel_cross_entropy(op);
                break;
            }
            {
                const Vec z(at(op.v[0]), at(op.v[0]) + R * d.vocab_padded);
                ref::cross_entropy(z.data(), tok(op.v[1]), at(op.v[2]), at(op.v[0]), R, d.vocab, d.vocab_padded,
                                   1.0 / static_cast<double>(R * d.grad_acc));
            }
            break;
        case OpKind::ce_max:
        case OpKind::ce_sums: vocab_parallel_cross_entropy(op); break;
        case OpKind::seq_chunk: {  // v2 = v0 (this rank's rows) + v1 (the residual, may be empty)
            const std::int64_t n = op.v[2].rows * op.v[2].cols;
            const double *a = at(op.v[0]), *r = op.v[1].buffer != kNoBuffer ? at(op.v[1]) : nullptr;
            double* y = at(op.v[2]);
            for (std::int64_t i = 0; i < n; ++i) y[i] = a[i] + (r ? r[i] : 0.0);
            break;
        }
        case OpKind::loss_accumulate:
            for (std::int64_t i = 0; i < R; ++i) loss_sum += at(op.v[0])[i];
            break;
        case OpKind::grad_accumulate: {
            Vec& acc = buf_.at(P.grads_fp32);
            Vec& gr = buf_.at(P.grads);
            // v0: the region (a model chunk's units), else the whole buffer.
            const bool region = op.v[0].buffer != kNoBuffer;
            const auto from = static_cast<std::size_t>(region ? op.v[0].offset : 0);
            const std::size_t to = region ? from + static_cast<std::size_t>(op.v[0].cols) : acc.size();
            for (std::size_t i = from; i < to; ++i) acc[i] += gr[i], gr[i] = 0.0;
            break;
        }
        default: throw std::logic_error("HostRunner: op kind " + std::string(to_string(op.kind)) + " not handled");
    }
}

// Vocabulary-parallel embedding: this rank's rows hold tokens [vocab_begin, vocab_begin + rows);
// another rank's tokens give 0 (forward) and no gradient here (backward).
void HostRunner::run_embedding(const Op& op) {
    const std::int64_t* t = tok(op.v[0]);
    const std::int64_t n = d.b * d.s, h = d.h;
    const double *wte = w(op.p0), *wpe = w(op.p1);
    double *dwte = op.kind == OpKind::embedding_bwd ? g(op.p0) : nullptr, *dwpe = op.kind == OpKind::embedding_bwd ? g(op.p1) : nullptr;
    double* x = at(op.v[1]);
    for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t row = t[i] - d.vocab_begin, pos = i % d.s;
        const bool mine = row >= 0 && row < d.vocab_padded;
        for (std::int64_t c = 0; c < h; ++c) {
            if (op.kind == OpKind::embedding_fwd) {
                x[i * h + c] = (mine ? wte[row * h + c] : 0.0) + (wpe ? wpe[pos * h + c] : 0.0);
            } else {
                if (mine) dwte[row * h + c] += x[i * h + c];
                if (dwpe) dwpe[pos * h + c] += x[i * h + c];
            }
        }
    }
}

// Megatron-LM's vocabulary-parallel cross-entropy over this rank's columns [vocab_begin,
// vocab_begin + vocab_valid) of the logits: ce_max and ce_sums, combined over the tensor-parallel
// ranks by the program's all-reduces, then the finish: loss = log(sum) + max - label logit, and
// dlogits = scale * (softmax - onehot) in place (0 in the padding).
void HostRunner::vocab_parallel_cross_entropy(const Op& op) {
    const std::int64_t R = d.rows, V = d.vocab_padded;
    double* z = at(op.v[0]);
    const std::int64_t* labels = op.kind == OpKind::ce_max ? nullptr : tok(op.v[1]);  // ce_max's v1 is its output
    for (std::int64_t r = 0; r < R; ++r) {
        double* row = z + r * V;
        const std::int64_t mine = labels ? labels[r] - d.vocab_begin : -1;
        if (op.kind == OpKind::ce_max) {
            double m = -INFINITY;
            for (std::int64_t c = 0; c < d.vocab_valid; ++c) m = std::max(m, row[c]);
            at(op.v[1])[r] = m;
        } else if (op.kind == OpKind::ce_sums) {
            const double m = at(op.v[2])[r];
            double s = 0;
            for (std::int64_t c = 0; c < d.vocab_valid; ++c) s += std::exp(row[c] - m);
            at(op.v[3])[2 * r] = s;
            at(op.v[3])[2 * r + 1] = mine >= 0 && mine < d.vocab_valid ? row[mine] : 0.0;
        } else {  // cross_entropy, finishing
            const double m = at(op.v[3])[r], s = at(op.v[4])[2 * r], zl = at(op.v[4])[2 * r + 1];
            at(op.v[2])[r] = std::log(s) + m - zl;
            const double scale = 1.0 / static_cast<double>(R * d.grad_acc);
            for (std::int64_t c = 0; c < V; ++c)
                row[c] = c < d.vocab_valid ? scale * (std::exp(row[c] - m) / s - (c == mine ? 1.0 : 0.0)) : 0.0;
        }
    }
}

}  // namespace preflight::runtime
