#include "preflight/runtime/reference_model.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "preflight/runtime/reference.hpp"
#include "preflight/runtime/synthetic.hpp"

namespace preflight::runtime::ref {

std::vector<TokenBatch> synthetic_batches(const Program& P, std::uint64_t seed, std::int64_t step) {
    const Dims& d = P.dims;
    std::vector<TokenBatch> out(static_cast<std::size_t>(d.grad_acc));
    for (std::int64_t mb = 1; mb <= d.grad_acc; ++mb) {
        TokenBatch& tb = out[static_cast<std::size_t>(mb - 1)];
        tb.tokens.resize(static_cast<std::size_t>(d.rows));
        tb.labels.resize(static_cast<std::size_t>(d.rows));
        for (std::int64_t i = 0; i < d.rows; ++i) {  // as synthetic.cu: row i / s, position i % s (+1 for labels)
            const std::int64_t data = P.data_micro_batch(mb);
            tb.tokens[static_cast<std::size_t>(i)] = synthetic_token(seed, step, data, i / d.s, i % d.s, d.vocab);
            tb.labels[static_cast<std::size_t>(i)] = synthetic_token(seed, step, data, i / d.s, i % d.s + 1, d.vocab);
        }
    }
    return out;
}

namespace {

using Vec = std::vector<double>;
Vec zeros(std::int64_t n) { return Vec(static_cast<std::size_t>(n), 0.0); }

// What one layer's forward keeps for its backward (the program's saved set, in double).
struct LayerSaved {
    Vec x, xn1, qk_in, qkv, attn, x1, xn2, up, act;  // qk_in: the per-head q/k norms' input (Qwen3)
    Vec ya, ym;  // post-norms (OLMo 2): the o_proj and down_proj outputs, the norms' inputs
    i64 window = 0;  // the layer's attention window (0: every key before the query)
};

class ModelRef {
public:
    ModelRef(const Program& p, const Vec& params, Vec* grads)
        : P(p), d(p.dims), w_(params), g_(grads),
          a_{d.b, d.s, d.heads, d.kv_heads, d.head_dim, 1, 0, p.model.attention_window(d.s), p.model.rope_dims()},
          ln_(p.model.norm == NormKind::layernorm), swiglu_(p.model.mlp == MlpKind::swiglu),
          rope_(p.model.position == PositionKind::rope),
          rope_freq_(rope_ ? rope_frequencies(a_.rotary(), p.hyper.rope_base, p.hyper.rope_scaling, d.s, p.model.max_positions)
                           : RopeFrequencies{}) {}

    // Summed per-token loss of one micro-batch; gradients (scaled by `scale`) added to g_.
    double micro_batch(const TokenBatch& tb, double scale) {
        const i64 R = d.rows, h = d.h;
        Vec x = zeros(R * h);
        embedding_fwd(tb.tokens.data(), w(P.wte), w(P.wpe), x.data(), d.b, d.s, h);
        std::vector<LayerSaved> saved(static_cast<std::size_t>(d.layers));
        for (i64 l = 1; l <= d.layers; ++l) x = layer_forward(l, std::move(x), saved[static_cast<std::size_t>(l - 1)]);
        // Output layer: final norm, LM head (no bias; tied = the word embedding), cross-entropy.
        Vec xnf = zeros(R * h), logits = zeros(R * d.vocab_padded);
        norm_fwd(x, P.normf_w, P.normf_b, xnf);
        linear_fwd(xnf.data(), w(P.head), nullptr, nullptr, logits.data(), R, d.vocab_padded, h);
        Vec dlogits = g_ ? zeros(R * d.vocab_padded) : Vec{};
        const double loss = cross_entropy(logits.data(), tb.labels.data(), nullptr, g_ ? dlogits.data() : nullptr, R,
                                          d.vocab, d.vocab_padded, scale);
        if (!g_) return loss;

        Vec dxnf = zeros(R * h), dres = zeros(R * h);
        linear_bwd(dlogits.data(), xnf.data(), w(P.head), dxnf.data(), g(P.head), nullptr, R, d.vocab_padded, h);
        norm_bwd(x, P.normf_w, P.normf_b, dxnf, dres, false);
        for (i64 l = d.layers; l >= 1; --l) layer_backward(l, saved[static_cast<std::size_t>(l - 1)], dres);
        embedding_bwd(tb.tokens.data(), dres.data(), g(P.wte), g(P.wpe), d.b, d.s, h);
        return loss;
    }

private:
    const Program& P;
    const Dims& d;
    const Vec& w_;
    Vec* g_;
    AttnShape a_;
    bool ln_, swiglu_, rope_;
    RopeFrequencies rope_freq_;  // RoPE inverse frequencies and attention factor (the model's rope_scaling)

    // The attention's shape on the layer `s` was saved from (its own window).
    AttnShape shape_of(const LayerSaved& s) const {
        AttnShape a = a_;
        a.window = s.window;
        return a;
    }
    // The q/k norms' groups, read from the config (transformers: Qwen3's per head, OLMoE's whole).
    QkNormGroups qk_groups() const { return qk_norm_groups(P.model.qk_norm_whole, a_.heads, a_.kv_heads, a_.d); }

    const double* w(ParamId id) const {
        return id == kNoParam ? nullptr : w_.data() + P.params[static_cast<std::size_t>(id)].offset;
    }
    double* g(ParamId id) const {
        return id == kNoParam ? nullptr : g_->data() + P.params[static_cast<std::size_t>(id)].offset;
    }

    void norm_fwd(const Vec& x, ParamId wt, ParamId bias, Vec& y) const {
        if (ln_)
            layernorm_fwd(x.data(), w(wt), w(bias), y.data(), d.rows, d.h, P.hyper.norm_eps);
        else
            rmsnorm_fwd(x.data(), w(wt), y.data(), d.rows, d.h, P.hyper.norm_eps);
    }
    void norm_bwd(const Vec& x, ParamId wt, ParamId bias, const Vec& dy, Vec& dx, bool accumulate) const {
        if (ln_)
            layernorm_bwd(x.data(), w(wt), dy.data(), dx.data(), g(wt), g(bias), d.rows, d.h, P.hyper.norm_eps,
                          accumulate);
        else
            rmsnorm_bwd(x.data(), w(wt), dy.data(), dx.data(), g(wt), d.rows, d.h, P.hyper.norm_eps, accumulate);
    }

    // Mixtral's sparse MLP for one token, written as HF transformers' MixtralSparseMoeBlock computes
    // it (apart from the runtime's routing table, reference_moe.hpp): p = softmax over all E router
    // logits, the k largest (the lower index first on a tie), gates = p / sum of the chosen p (OLMoE,
    // norm_topk_prob false: p itself), and out += sum_j gate_j down_e(silu(gate_e x) * up_e x). With
    // `dout`, the backward instead: the experts', the gates' (through the softmax) and the router's
    // gradients added to g_ and the input gradient written to dx.
    void sparse_moe(const LayerParams& lp, const double* x, double* out, const double* dout, double* dx) const {
        const i64 h = d.h, f = d.ffn, E = d.experts, k = d.topk;
        const double* router = w(lp.router_w);
        std::vector<double> logit(static_cast<std::size_t>(E)), p(logit.size());
        for (i64 e = 0; e < E; ++e) logit[static_cast<std::size_t>(e)] = std::inner_product(x, x + h, router + e * h, 0.0);
        const double top = *std::max_element(logit.begin(), logit.end());
        double z = 0;
        for (i64 e = 0; e < E; ++e) z += p[static_cast<std::size_t>(e)] = std::exp(logit[static_cast<std::size_t>(e)] - top);
        for (double& v : p) v /= z;
        std::vector<i64> order(static_cast<std::size_t>(E));
        std::iota(order.begin(), order.end(), i64{0});
        std::stable_sort(order.begin(), order.end(), [&](i64 a, i64 b) { return p[static_cast<std::size_t>(a)] > p[static_cast<std::size_t>(b)]; });
        double chosen = 0;
        for (i64 j = 0; j < k; ++j) chosen += p[static_cast<std::size_t>(order[static_cast<std::size_t>(j)])];
        std::vector<double> gate(static_cast<std::size_t>(k)), dgate(gate.size());
        for (i64 j = 0; j < k; ++j) {
            const i64 e = order[static_cast<std::size_t>(j)];
            gate[static_cast<std::size_t>(j)] = p[static_cast<std::size_t>(e)] / (d.renormalize_gates ? chosen : 1.0);
            const double* Wg = w(lp.up_w) + e * 2 * f * h;  // expert e's gate rows, then its up rows
            const double* Wu = Wg + f * h;
            const double* Wd = w(lp.down_w) + e * h * f;
            std::vector<double> gv(static_cast<std::size_t>(f)), uv(gv.size()), a(gv.size()), da(gv.size());
            for (i64 c = 0; c < f; ++c) {
                gv[static_cast<std::size_t>(c)] = std::inner_product(x, x + h, Wg + c * h, 0.0);
                uv[static_cast<std::size_t>(c)] = std::inner_product(x, x + h, Wu + c * h, 0.0);
                const double sg = 1 / (1 + std::exp(-gv[static_cast<std::size_t>(c)]));
                a[static_cast<std::size_t>(c)] = gv[static_cast<std::size_t>(c)] * sg * uv[static_cast<std::size_t>(c)];
            }
            for (i64 r = 0; r < h; ++r) {
                const double y = std::inner_product(a.begin(), a.end(), Wd + r * f, 0.0);
                if (!dout) {
                    out[r] += gate[static_cast<std::size_t>(j)] * y;
                    continue;
                }
                dgate[static_cast<std::size_t>(j)] += dout[r] * y;  // d gate_j = <dout, expert output>
                const double dy = gate[static_cast<std::size_t>(j)] * dout[r];
                double* dWd = g(lp.down_w) + e * h * f + r * f;
                for (i64 c = 0; c < f; ++c) {
                    dWd[c] += dy * a[static_cast<std::size_t>(c)];
                    da[static_cast<std::size_t>(c)] += dy * Wd[r * f + c];
                }
            }
            if (!dout) continue;
            double* dWg = g(lp.up_w) + e * 2 * f * h;
            double* dWu = dWg + f * h;
            for (i64 c = 0; c < f; ++c) {  // silu(g) u: d g = da u silu'(g), d u = da silu(g)
                const double gc = gv[static_cast<std::size_t>(c)], sg = 1 / (1 + std::exp(-gc));
                const double dg = da[static_cast<std::size_t>(c)] * uv[static_cast<std::size_t>(c)] * sg * (1 + gc * (1 - sg));
                const double du = da[static_cast<std::size_t>(c)] * gc * sg;
                for (i64 i = 0; i < h; ++i) {
                    dWg[c * h + i] += dg * x[i];
                    dWu[c * h + i] += du * x[i];
                    dx[i] += dg * Wg[c * h + i] + du * Wu[c * h + i];
                }
            }
        }
        if (!dout) return;
        // gate_j = p_ej / sum_m p_em = softmax over the chosen logits: d logit_ej = gate_j (dgate_j - sum_m
        // gate_m dgate_m). Not renormalised, gate_j = p_ej: d logit_e = p_e ([e chosen] dgate_e - sum_m gate_m dgate_m).
        const double dot = std::inner_product(gate.begin(), gate.end(), dgate.begin(), 0.0);
        std::vector<double> dl(static_cast<std::size_t>(E));
        if (!d.renormalize_gates)
            for (i64 e = 0; e < E; ++e) dl[static_cast<std::size_t>(e)] = -p[static_cast<std::size_t>(e)] * dot;
        for (i64 j = 0; j < k; ++j)
            dl[static_cast<std::size_t>(order[static_cast<std::size_t>(j)])] += gate[static_cast<std::size_t>(j)] *
                (dgate[static_cast<std::size_t>(j)] - (d.renormalize_gates ? dot : 0.0));
        for (i64 e = 0; e < E; ++e) {
            double* dR = g(lp.router_w) + e * h;
            for (i64 i = 0; i < h; ++i) {
                dR[i] += dl[static_cast<std::size_t>(e)] * x[i];
                dx[i] += dl[static_cast<std::size_t>(e)] * router[e * h + i];
            }
        }
    }

    // q|k|v from `in`, the q/k norms (before RoPE: Qwen3's per head, OLMo's over each projection),
    // RoPE and the attention into s.attn.
    void attention_forward(const LayerParams& lp, const Vec& in, LayerSaved& s) const {
        const i64 R = d.rows;
        s.qkv = zeros(R * d.qkv_width);
        linear_fwd(in.data(), w(lp.qkv_w), w(lp.qkv_b), nullptr, s.qkv.data(), R, d.qkv_width, d.h);
        if (P.model.qk_norm) {
            s.qk_in = zeros(R * (d.q_width + d.kv_width));
            head_rmsnorm_fwd(s.qkv.data(), s.qk_in.data(), w(lp.q_norm_w), w(lp.k_norm_w), R, d.qkv_width, qk_groups(),
                             P.hyper.norm_eps);
        }
        if (rope_) rope_fwd(s.qkv.data(), a_, rope_freq_);
        s.attn = zeros(R * d.q_width);
        attention_fwd(s.qkv.data(), s.attn.data(), nullptr, shape_of(s));
    }
    // d(attn out) back to d(q|k|v) through the attention, RoPE and the q/k norms.
    Vec attention_backward(const LayerParams& lp, const LayerSaved& s, const Vec& dattn) const {
        Vec dqkv = zeros(d.rows * d.qkv_width);
        attention_bwd(s.qkv.data(), dattn.data(), dqkv.data(), shape_of(s));
        if (rope_) rope_bwd(dqkv.data(), a_, rope_freq_);
        if (P.model.qk_norm)
            head_rmsnorm_bwd(s.qk_in.data(), dqkv.data(), w(lp.q_norm_w), w(lp.k_norm_w), g(lp.q_norm_w), g(lp.k_norm_w),
                             d.rows, d.qkv_width, qk_groups(), P.hyper.norm_eps);
        return dqkv;
    }
    // gate|up (fc1) from `in` and the activation into s.up and s.act.
    void mlp_up_forward(const LayerParams& lp, const Vec& in, LayerSaved& s) const {
        const i64 R = d.rows;
        s.up = zeros(R * d.up_width);
        linear_fwd(in.data(), w(lp.up_w), w(lp.up_b), nullptr, s.up.data(), R, d.up_width, d.h);
        s.act = zeros(R * d.ffn);
        if (swiglu_)
            swiglu_fwd(s.up.data(), s.act.data(), R, d.ffn);
        else
            gelu_fwd(s.up.data(), s.act.data(), R * d.ffn);
    }
    // d(down out) back to d(gate|up input) through down, the activation and gate|up (fc1): returned.
    Vec mlp_backward(const LayerParams& lp, const LayerSaved& s, const Vec& dy, const Vec& in) const {
        const i64 R = d.rows, h = d.h;
        Vec dact = zeros(R * d.ffn), dup = zeros(R * d.up_width), dx = zeros(R * h);
        linear_bwd(dy.data(), s.act.data(), w(lp.down_w), dact.data(), g(lp.down_w), g(lp.down_b), R, h, d.ffn);
        if (swiglu_)
            swiglu_bwd(s.up.data(), dact.data(), dup.data(), R, d.ffn);
        else
            gelu_bwd(s.up.data(), dact.data(), dup.data(), R * d.ffn);
        linear_bwd(dup.data(), in.data(), w(lp.up_w), dx.data(), g(lp.up_w), g(lp.up_b), R, d.up_width, h);
        return dx;
    }
    static void add_into(Vec& y, const Vec& x) {
        for (std::size_t i = 0; i < y.size(); ++i) y[i] += x[i];
    }

    // OLMo 2 (transformers' Olmo2DecoderLayer), norms on the sublayer outputs before each residual add:
    // x1 = x + norm1(o_proj(attention(q|k|v(x)))), out = x1 + norm2(down(act(gate|up(x1)))).
    Vec post_norm_layer_forward(const LayerParams& lp, Vec x, LayerSaved& s) const {
        const i64 R = d.rows, h = d.h;
        attention_forward(lp, x, s);
        s.ya = zeros(R * h);
        linear_fwd(s.attn.data(), w(lp.out_w), w(lp.out_b), nullptr, s.ya.data(), R, h, d.q_width);
        s.x1 = zeros(R * h);
        norm_fwd(s.ya, lp.norm1_w, lp.norm1_b, s.x1);
        add_into(s.x1, x);
        mlp_up_forward(lp, s.x1, s);
        s.ym = zeros(R * h);
        linear_fwd(s.act.data(), w(lp.down_w), w(lp.down_b), nullptr, s.ym.data(), R, h, d.ffn);
        Vec out = zeros(R * h);
        norm_fwd(s.ym, lp.norm2_w, lp.norm2_b, out);
        add_into(out, s.x1);
        s.x = std::move(x);
        return out;
    }
    void post_norm_layer_backward(const LayerParams& lp, const LayerSaved& s, Vec& dres) const {
        const i64 R = d.rows, h = d.h;
        Vec dym = zeros(R * h), dya = zeros(R * h), dattn = zeros(R * d.q_width), dx = zeros(R * h);
        norm_bwd(s.ym, lp.norm2_w, lp.norm2_b, dres, dym, false);
        add_into(dres, mlp_backward(lp, s, dym, s.x1));  // now dLoss/dx1
        norm_bwd(s.ya, lp.norm1_w, lp.norm1_b, dres, dya, false);
        linear_bwd(dya.data(), s.attn.data(), w(lp.out_w), dattn.data(), g(lp.out_w), g(lp.out_b), R, h, d.q_width);
        const Vec dqkv = attention_backward(lp, s, dattn);
        linear_bwd(dqkv.data(), s.x.data(), w(lp.qkv_w), dx.data(), g(lp.qkv_w), g(lp.qkv_b), R, d.qkv_width, h);
        add_into(dres, dx);  // now dLoss/dx
    }

    // program.cpp emit_layer_forward, op for op.
    Vec layer_forward(i64 l, Vec x, LayerSaved& s) const {
        const LayerParams& lp = P.layer_params[static_cast<std::size_t>(l - 1)];
        const i64 R = d.rows, h = d.h;
        // The model's layers of two kinds (OLMo 3's, Gemma 3's), from the config's own rule.
        s.window = P.model.layer_attention_window(d.model_layer(l), d.s);
        if (P.model.post_norms) return post_norm_layer_forward(lp, std::move(x), s);
        s.xn1 = zeros(R * h);
        norm_fwd(x, lp.norm1_w, lp.norm1_b, s.xn1);
        attention_forward(lp, s.xn1, s);
        s.x1 = zeros(R * h);
        linear_fwd(s.attn.data(), w(lp.out_w), w(lp.out_b), x.data(), s.x1.data(), R, h, d.q_width);
        s.xn2 = zeros(R * h);
        norm_fwd(s.x1, lp.norm2_w, lp.norm2_b, s.xn2);
        if (d.moe()) {  // out = x1 + the experts' gate-weighted outputs (sparse_moe below)
            Vec out = s.x1;
            for (i64 t = 0; t < R; ++t) sparse_moe(lp, s.xn2.data() + t * h, out.data() + t * h, nullptr, nullptr);
            s.x = std::move(x);
            return out;
        }
        mlp_up_forward(lp, s.xn2, s);
        Vec out = zeros(R * h);
        linear_fwd(s.act.data(), w(lp.down_w), w(lp.down_b), s.x1.data(), out.data(), R, h, d.ffn);
        s.x = std::move(x);
        return out;
    }

    // program.cpp emit_layer_backward: dres = dLoss/d(layer output) in, dLoss/d(layer input) out.
    void layer_backward(i64 l, const LayerSaved& s, Vec& dres) const {
        const LayerParams& lp = P.layer_params[static_cast<std::size_t>(l - 1)];
        const i64 R = d.rows, h = d.h;
        if (P.model.post_norms) return post_norm_layer_backward(lp, s, dres);
        // MLP: out = x1 + down(act(up(norm2(x1)))), or the experts' (sparse_moe).
        Vec dxn2 = zeros(R * h);
        if (d.moe()) {
            for (i64 t = 0; t < R; ++t) {
                Vec unused(static_cast<std::size_t>(h));
                sparse_moe(lp, s.xn2.data() + t * h, unused.data(), dres.data() + t * h, dxn2.data() + t * h);
            }
        } else {
            dxn2 = mlp_backward(lp, s, dres, s.xn2);
        }
        norm_bwd(s.x1, lp.norm2_w, lp.norm2_b, dxn2, dres, true);  // dres += through the norm: now dLoss/dx1
        // Attention: x1 = x + out_proj(attention(rope(qkv(norm1(x))))).
        Vec dattn = zeros(R * d.q_width), dxn1 = zeros(R * h);
        linear_bwd(dres.data(), s.attn.data(), w(lp.out_w), dattn.data(), g(lp.out_w), g(lp.out_b), R, h, d.q_width);
        const Vec dqkv = attention_backward(lp, s, dattn);
        linear_bwd(dqkv.data(), s.xn1.data(), w(lp.qkv_w), dxn1.data(), g(lp.qkv_w), g(lp.qkv_b), R, d.qkv_width, h);
        norm_bwd(s.x, lp.norm1_w, lp.norm1_b, dxn1, dres, true);  // now dLoss/dx
    }
};

}  // namespace

double model_loss(const Program& P, const std::vector<double>& params, const std::vector<TokenBatch>& batches,
                  std::vector<double>* grads) {
    if (grads) grads->assign(static_cast<std::size_t>(P.param_elements), 0.0);
    const double n = static_cast<double>(P.dims.rows) * static_cast<double>(batches.size());
    ModelRef m(P, params, grads);
    double total = 0;
    // Cross-entropy gradient scaled by 1 / (rows * micro-batches), as the runtime does.
    for (const TokenBatch& tb : batches) total += m.micro_batch(tb, 1.0 / n);
    return total / n;
}

std::vector<double> random_params(const Program& P, std::uint64_t seed, double std_dev) {
    std::vector<double> p(static_cast<std::size_t>(P.param_elements), 0.0);
    std::mt19937_64 gen(seed);
    std::normal_distribution<double> nd(0.0, std_dev);
    for (std::size_t i = 0; i < P.params.size(); ++i) {
        const ParamSpec& ps = P.params[i];
        std::int64_t n = ps.numel();
        const auto id = static_cast<ParamId>(i);
        if (id == P.wte || id == P.head) n = P.dims.vocab * P.dims.h;  // padding rows stay 0, as on the device
        for (std::int64_t k = 0; k < n; ++k)
            p[static_cast<std::size_t>(ps.offset + k)] = (ps.norm_weight ? 1.0 : 0.0) + nd(gen);
    }
    return p;
}

}  // namespace preflight::runtime::ref
