#include "preflight/runtime/reference_model.hpp"

#include <algorithm>
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
    Vec x, xn1, qkv, attn, x1, xn2, up, act;
};

class ModelRef {
public:
    ModelRef(const Program& p, const Vec& params, Vec* grads)
        : P(p), d(p.dims), w_(params), g_(grads),
          a_{d.b, d.s, d.heads, d.kv_heads, d.head_dim},
          ln_(p.model.norm == NormKind::layernorm), swiglu_(p.model.mlp == MlpKind::swiglu),
          rope_(p.model.position == PositionKind::rope),
          inv_freq_(rope_ ? rope_inv_freq(d.head_dim, p.hyper.rope_base, p.hyper.rope_scaling) : std::vector<double>{}) {}

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
    std::vector<double> inv_freq_;  // RoPE inverse frequencies (scaled per the model's rope_scaling)

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

    // program.cpp emit_layer_forward, op for op.
    Vec layer_forward(i64 l, Vec x, LayerSaved& s) const {
        const LayerParams& lp = P.layer_params[static_cast<std::size_t>(l - 1)];
        const i64 R = d.rows, h = d.h;
        s.xn1 = zeros(R * h);
        norm_fwd(x, lp.norm1_w, lp.norm1_b, s.xn1);
        s.qkv = zeros(R * d.qkv_width);
        linear_fwd(s.xn1.data(), w(lp.qkv_w), w(lp.qkv_b), nullptr, s.qkv.data(), R, d.qkv_width, h);
        if (rope_) rope_fwd(s.qkv.data(), a_, inv_freq_);
        s.attn = zeros(R * d.q_width);
        attention_fwd(s.qkv.data(), s.attn.data(), nullptr, a_);
        s.x1 = zeros(R * h);
        linear_fwd(s.attn.data(), w(lp.out_w), w(lp.out_b), x.data(), s.x1.data(), R, h, d.q_width);
        s.xn2 = zeros(R * h);
        norm_fwd(s.x1, lp.norm2_w, lp.norm2_b, s.xn2);
        s.up = zeros(R * d.up_width);
        linear_fwd(s.xn2.data(), w(lp.up_w), w(lp.up_b), nullptr, s.up.data(), R, d.up_width, h);
        s.act = zeros(R * d.ffn);
        if (swiglu_)
            swiglu_fwd(s.up.data(), s.act.data(), R, d.ffn);
        else
            gelu_fwd(s.up.data(), s.act.data(), R * d.ffn);
        Vec out = zeros(R * h);
        linear_fwd(s.act.data(), w(lp.down_w), w(lp.down_b), s.x1.data(), out.data(), R, h, d.ffn);
        s.x = std::move(x);
        return out;
    }

    // program.cpp emit_layer_backward: dres = dLoss/d(layer output) in, dLoss/d(layer input) out.
    void layer_backward(i64 l, const LayerSaved& s, Vec& dres) const {
        const LayerParams& lp = P.layer_params[static_cast<std::size_t>(l - 1)];
        const i64 R = d.rows, h = d.h;
        // MLP: out = x1 + down(act(up(norm2(x1)))).
        Vec dact = zeros(R * d.ffn), dup = zeros(R * d.up_width), dxn2 = zeros(R * h);
        linear_bwd(dres.data(), s.act.data(), w(lp.down_w), dact.data(), g(lp.down_w), g(lp.down_b), R, h, d.ffn);
        if (swiglu_)
            swiglu_bwd(s.up.data(), dact.data(), dup.data(), R, d.ffn);
        else
            gelu_bwd(s.up.data(), dact.data(), dup.data(), R * d.ffn);
        linear_bwd(dup.data(), s.xn2.data(), w(lp.up_w), dxn2.data(), g(lp.up_w), g(lp.up_b), R, d.up_width, h);
        norm_bwd(s.x1, lp.norm2_w, lp.norm2_b, dxn2, dres, true);  // dres += through the norm: now dLoss/dx1
        // Attention: x1 = x + out_proj(attention(rope(qkv(norm1(x))))).
        Vec dattn = zeros(R * d.q_width), dqkv = zeros(R * d.qkv_width), dxn1 = zeros(R * h);
        linear_bwd(dres.data(), s.attn.data(), w(lp.out_w), dattn.data(), g(lp.out_w), g(lp.out_b), R, h, d.q_width);
        attention_bwd(s.qkv.data(), dattn.data(), dqkv.data(), a_);
        if (rope_) rope_bwd(dqkv.data(), a_, inv_freq_);
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
        const bool norm_weight = ps.cols == 1 && ps.name.find("norm") != std::string::npos &&
                                 ps.name.find(".weight") != std::string::npos;
        for (std::int64_t k = 0; k < n; ++k)
            p[static_cast<std::size_t>(ps.offset + k)] = (norm_weight ? 1.0 : 0.0) + nd(gen);
    }
    return p;
}

}  // namespace preflight::runtime::ref
