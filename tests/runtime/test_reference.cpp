// CPU reference kernels: hand-computed values, and every backward against central
// finite differences of its forward (L = sum(dY * f(X)) for a random dY).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "preflight/runtime/reference.hpp"

namespace preflight::runtime::ref {
namespace {

std::vector<double> randn(std::size_t n, unsigned seed, double scale = 1.0) {
    std::mt19937 g(seed);
    std::normal_distribution<double> d(0.0, scale);
    std::vector<double> v(n);
    for (auto& x : v) x = d(g);
    return v;
}

// Checks analytic d(sum(dy * f(x)))/dx against central differences.
void expect_grad(const std::function<void(const std::vector<double>&, std::vector<double>&)>& f,
                 std::vector<double> x, std::size_t ny, const std::vector<double>& dy,
                 const std::vector<double>& analytic, double tol = 1e-6) {
    ASSERT_EQ(analytic.size(), x.size());
    std::vector<double> y(ny);
    const double h = 1e-6;
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double x0 = x[i];
        x[i] = x0 + h;
        f(x, y);
        double lp = 0;
        for (std::size_t k = 0; k < ny; ++k) lp += dy[k] * y[k];
        x[i] = x0 - h;
        f(x, y);
        double lm = 0;
        for (std::size_t k = 0; k < ny; ++k) lm += dy[k] * y[k];
        x[i] = x0;
        EXPECT_NEAR(analytic[i], (lp - lm) / (2 * h), tol * (1 + std::abs(analytic[i]))) << "element " << i;
    }
}

TEST(Reference, Bf16RoundsToNearestEven) {
    EXPECT_EQ(round_bf16(1.0f), 1.0f);
    EXPECT_EQ(round_bf16(1.0f + 1.0f / 256), 1.0f);               // halfway: to even (1.0)
    EXPECT_EQ(round_bf16(1.0f + 3.0f / 256), 1.0f + 4.0f / 256);  // halfway: to even (1 + 2^-6)
    EXPECT_EQ(round_bf16(1.0f + 1.5f / 256), 1.0f + 2.0f / 256);
    EXPECT_TRUE(std::isinf(round_bf16(INFINITY)));
    EXPECT_TRUE(std::isnan(round_bf16(NAN)));
}

TEST(Reference, LinearByHand) {
    // X = [[1, 2]], W = [[3, 4], [5, 6]], b = [1, -1], R = [[10, 20]]: Y = [1*3+2*4+1+10, 1*5+2*6-1+20] = [22, 36].
    const double x[] = {1, 2}, w[] = {3, 4, 5, 6}, b[] = {1, -1}, r[] = {10, 20};
    double y[2];
    linear_fwd(x, w, b, r, y, 1, 2, 2);
    EXPECT_DOUBLE_EQ(y[0], 22);
    EXPECT_DOUBLE_EQ(y[1], 36);
    const double dy[] = {1, 2};
    double dx[2], dw[4] = {0, 0, 0, 0}, db[2] = {0, 0};
    linear_bwd(dy, x, w, dx, dw, db, 1, 2, 2);
    EXPECT_DOUBLE_EQ(dx[0], 1 * 3 + 2 * 5);
    EXPECT_DOUBLE_EQ(dx[1], 1 * 4 + 2 * 6);
    EXPECT_DOUBLE_EQ(dw[2], 2 * 1);
    EXPECT_DOUBLE_EQ(dw[3], 2 * 2);
    EXPECT_DOUBLE_EQ(db[1], 2);
}

TEST(Reference, NormsByHand) {
    // x = [1, 3]: mean 2, var 1 -> xhat = [-1, 1]; rms = sqrt(5) -> [1, 3]/sqrt(5).
    const double x[] = {1, 3}, w[] = {2, 2}, b[] = {0.5, 0.5};
    double y[2];
    layernorm_fwd(x, w, b, y, 1, 2, 0.0);
    EXPECT_NEAR(y[0], -1.5, 1e-12);
    EXPECT_NEAR(y[1], 2.5, 1e-12);
    rmsnorm_fwd(x, w, y, 1, 2, 0.0);
    EXPECT_NEAR(y[0], 2 / std::sqrt(5.0), 1e-12);
    EXPECT_NEAR(y[1], 6 / std::sqrt(5.0), 1e-12);
}

TEST(Reference, ActivationsByHand) {
    const double x[] = {0.0, 1.0};
    double y[2];
    gelu_fwd(x, y, 2);
    EXPECT_DOUBLE_EQ(y[0], 0.0);
    EXPECT_NEAR(y[1], 0.8411919906082768, 1e-12);  // tanh-approximation GeLU(1)
    const double gu[] = {1.0, 2.0};                  // gate 1, up 2: silu(1) * 2
    double a[1];
    swiglu_fwd(gu, a, 1, 1);
    EXPECT_NEAR(a[0], 2.0 / (1.0 + std::exp(-1.0)), 1e-12);
}

TEST(Reference, CrossEntropyByHand) {
    // Uniform logits over 4 classes (padded to 8): loss ln 4, gradient (1/4 - onehot) * scale.
    const double z[8] = {0, 0, 0, 0, 99, 99, 99, 99};
    const std::int64_t lab[] = {2};
    double loss, dz[8];
    const double total = cross_entropy(z, lab, &loss, dz, 1, 4, 8, 0.5);
    EXPECT_NEAR(total, std::log(4.0), 1e-12);
    EXPECT_NEAR(dz[0], 0.125, 1e-12);
    EXPECT_NEAR(dz[2], -0.375, 1e-12);
    EXPECT_EQ(dz[5], 0.0);  // padding ignored
}

TEST(Reference, AttentionByHand) {
    // One head, d = 1, s = 2: position 0 sees only itself; position 1 averages with
    // weights softmax([q1 k0, q1 k1]).
    AttnShape a{1, 2, 1, 1, 1};
    // per token: q, k, v
    const double qkv[] = {1, 0, 10, 1, std::log(3.0), 20};
    double out[2], lse[2];
    attention_fwd(qkv, out, lse, a);
    EXPECT_NEAR(out[0], 10, 1e-12);
    EXPECT_NEAR(out[1], 0.25 * 10 + 0.75 * 20, 1e-12);
    EXPECT_NEAR(lse[1], std::log(1 + 3.0), 1e-12);
}

// A sliding window of 2 keys (Mistral's and Phi-3's mask, transformers' kv > q - window): d = 1, one
// head, s = 3. Position 2 sees keys 1 and 2 only: weights softmax([q2 k1, q2 k2]) = [1/3, 2/3] with
// q2 = 1, k1 = 0, k2 = log 2; key 0 (v = 1000) would move the output by hundreds were it seen.
TEST(Reference, SlidingWindowByHand) {
    AttnShape a{1, 3, 1, 1, 1};
    a.window = 2;
    EXPECT_EQ(a.first_key(0), 0);
    EXPECT_EQ(a.first_key(1), 0);
    EXPECT_EQ(a.first_key(2), 1);
    const double qkv[] = {1, 5, 1000, 1, 0, 10, 1, std::log(2.0), 40};  // per token: q, k, v
    double out[3], lse[3];
    attention_fwd(qkv, out, lse, a);
    EXPECT_NEAR(out[2], 10.0 / 3 + 2 * 40.0 / 3, 1e-12);
    EXPECT_NEAR(lse[2], std::log(1 + 2.0), 1e-12);
    // Position 1 sees keys 0 and 1 (weights e^5 and 1), as without the window.
    EXPECT_NEAR(out[1], (std::exp(5.0) * 1000 + 10) / (std::exp(5.0) + 1), 1e-9);
    std::vector<double> p(9);
    attention_probs(qkv, p.data(), a);
    EXPECT_EQ(p[6], 0.0);  // row 2, key 0: outside the window
    EXPECT_NEAR(p[7], 1.0 / 3, 1e-12);
    // A window of one key: each position returns its own value.
    a.window = 1;
    attention_fwd(qkv, out, lse, a);
    EXPECT_NEAR(out[0], 1000, 1e-12);
    EXPECT_NEAR(out[1], 10, 1e-12);
    EXPECT_NEAR(out[2], 40, 1e-12);
}

// The windowed backward against finite differences of the windowed forward, and the context-parallel
// reference (another loop) against the whole sequence's: windows inside a chunk, across chunks.
TEST(Reference, SlidingWindowBackwardAndContextParallel) {
    for (const std::int64_t window : {1, 2, 3, 5}) {
        AttnShape a{1, 6, 4, 2, 2};  // GQA
        a.window = window;
        const std::int64_t n = a.b * a.s * a.qkv_width(), no = a.b * a.s * a.heads * a.d;
        const auto qkv = randn(static_cast<std::size_t>(n), 15), dout = randn(static_cast<std::size_t>(no), 16);
        std::vector<double> dqkv(static_cast<std::size_t>(n));
        attention_bwd(qkv.data(), dout.data(), dqkv.data(), a);
        auto f = [&](const std::vector<double>& x, std::vector<double>& y) { attention_fwd(x.data(), y.data(), nullptr, a); };
        expect_grad(f, qkv, static_cast<std::size_t>(no), dout, dqkv);
        // Without the window position 5 would see 6 keys: the outputs differ (the mask is applied).
        AttnShape whole = a;
        whole.window = 0;
        std::vector<double> o(static_cast<std::size_t>(no)), o_whole(o.size());
        attention_fwd(qkv.data(), o.data(), nullptr, a);
        attention_fwd(qkv.data(), o_whole.data(), nullptr, whole);
        EXPECT_NE(o.back(), o_whole.back()) << "window " << window;
    }
}

TEST(Reference, AdamWFirstStepMovesByLr) {
    // Step 1 with bias correction: mhat = g, vhat = g^2 -> update lr * sign(g) (eps -> 0).
    double p[] = {1.0, -1.0}, g[] = {0.3, -2.0}, m[] = {0, 0}, v[] = {0, 0};
    adamw(p, g, m, v, 2, 0.1, 0.9, 0.95, 1e-12, 0.0, 1);
    EXPECT_NEAR(p[0], 0.9, 1e-9);
    EXPECT_NEAR(p[1], -0.9, 1e-9);
    double q[] = {1.0}, gq[] = {0.5}, mom[] = {0.0};
    sgd(q, gq, mom, 1, 0.1, 0.9, 0.0);
    sgd(q, gq, mom, 1, 0.1, 0.9, 0.0);
    EXPECT_NEAR(q[0], 1.0 - 0.05 - 0.1 * (0.9 * 0.5 + 0.5), 1e-12);
}

TEST(Reference, NormBackwardsMatchFiniteDifferences) {
    const std::int64_t rows = 3, h = 5;
    const auto x = randn(rows * h, 1), w = randn(h, 2), b = randn(h, 3), dy = randn(rows * h, 4);
    for (bool ln : {true, false}) {
        std::vector<double> dx(rows * h), dw(h), db(h);
        if (ln)
            layernorm_bwd(x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data(), rows, h, 1e-5, false);
        else
            rmsnorm_bwd(x.data(), w.data(), dy.data(), dx.data(), dw.data(), rows, h, 1e-5, false);
        auto fx = [&](const std::vector<double>& xx, std::vector<double>& y) {
            if (ln) layernorm_fwd(xx.data(), w.data(), b.data(), y.data(), rows, h, 1e-5);
            else rmsnorm_fwd(xx.data(), w.data(), y.data(), rows, h, 1e-5);
        };
        expect_grad(fx, x, rows * h, dy, dx);
        auto fw = [&](const std::vector<double>& ww, std::vector<double>& y) {
            if (ln) layernorm_fwd(x.data(), ww.data(), b.data(), y.data(), rows, h, 1e-5);
            else rmsnorm_fwd(x.data(), ww.data(), y.data(), rows, h, 1e-5);
        };
        expect_grad(fw, w, rows * h, dy, dw);
    }
}

TEST(Reference, AttentionAndRopeBackwardsMatchFiniteDifferences) {
    for (AttnShape a : {AttnShape{2, 3, 2, 2, 4}, AttnShape{1, 4, 4, 2, 2}}) {  // MHA and GQA
        const std::int64_t n = a.b * a.s * a.qkv_width(), no = a.b * a.s * a.heads * a.d;
        const auto qkv = randn(static_cast<std::size_t>(n), 5), dout = randn(static_cast<std::size_t>(no), 6);
        std::vector<double> dqkv(static_cast<std::size_t>(n));
        attention_bwd(qkv.data(), dout.data(), dqkv.data(), a);
        auto f = [&](const std::vector<double>& x, std::vector<double>& y) { attention_fwd(x.data(), y.data(), nullptr, a); };
        expect_grad(f, qkv, static_cast<std::size_t>(no), dout, dqkv);

        const auto dy = randn(static_cast<std::size_t>(n), 7);
        std::vector<double> drope = dy;
        rope_bwd(drope.data(), a, 10000.0);
        auto fr = [&](const std::vector<double>& x, std::vector<double>& y) {
            y = x;
            rope_fwd(y.data(), a, 10000.0);
        };
        expect_grad(fr, qkv, static_cast<std::size_t>(n), dy, drope);
    }
}

// Qwen3's q_norm / k_norm: each (token, head) of Q and K normalized over its d, V left alone.
TEST(Reference, HeadNormsByHand) {
    const AttnShape a{1, 1, 1, 1, 2};  // one token: q = [1, 3], k = [0, 2], v = [5, 7]
    std::vector<double> qkv = {1, 3, 0, 2, 5, 7}, saved(4);
    const double wq[] = {2, 2}, wk[] = {1, 3};
    head_rmsnorm_fwd(qkv.data(), saved.data(), wq, wk, a, 0.0);
    // q: rms sqrt(5) -> 2 [1, 3] / sqrt(5); k: rms sqrt(2) -> [0, 3 * 2 / sqrt(2)].
    EXPECT_NEAR(qkv[0], 2 / std::sqrt(5.0), 1e-12);
    EXPECT_NEAR(qkv[1], 6 / std::sqrt(5.0), 1e-12);
    EXPECT_NEAR(qkv[2], 0.0, 1e-12);
    EXPECT_NEAR(qkv[3], 6 / std::sqrt(2.0), 1e-12);
    EXPECT_EQ(qkv[4], 5.0);
    EXPECT_EQ(qkv[5], 7.0);
    EXPECT_EQ(saved, (std::vector<double>{1, 3, 0, 2}));
}

TEST(Reference, HeadNormBackwardMatchesFiniteDifferences) {
    const AttnShape a{2, 3, 4, 2, 4};  // GQA: 4 query heads, 2 key/value heads of 4
    const std::int64_t n = a.b * a.s * a.qkv_width(), nk = a.b * a.s * (a.heads + a.kv_heads) * a.d;
    const auto qkv = randn(static_cast<std::size_t>(n), 11), dy = randn(static_cast<std::size_t>(n), 12);
    const auto wq = randn(static_cast<std::size_t>(a.d), 13), wk = randn(static_cast<std::size_t>(a.d), 14);
    std::vector<double> saved(static_cast<std::size_t>(nk)), y = qkv;
    head_rmsnorm_fwd(y.data(), saved.data(), wq.data(), wk.data(), a, 1e-6);
    std::vector<double> dx = dy, dwq(wq.size()), dwk(wk.size());
    head_rmsnorm_bwd(saved.data(), dx.data(), wq.data(), wk.data(), dwq.data(), dwk.data(), a, 1e-6);
    auto run = [&](const std::vector<double>& x, const std::vector<double>& q, const std::vector<double>& k,
                   std::vector<double>& out) {
        std::vector<double> keep(static_cast<std::size_t>(nk));
        out = x;
        head_rmsnorm_fwd(out.data(), keep.data(), q.data(), k.data(), a, 1e-6);
    };
    // The V columns pass through: their gradient is dy's, which the backward leaves in place.
    expect_grad([&](const std::vector<double>& x, std::vector<double>& o) { run(x, wq, wk, o); }, qkv,
                static_cast<std::size_t>(n), dy, dx);
    expect_grad([&](const std::vector<double>& q, std::vector<double>& o) { run(qkv, q, wk, o); }, wq,
                static_cast<std::size_t>(n), dy, dwq);
    expect_grad([&](const std::vector<double>& k, std::vector<double>& o) { run(qkv, wq, k, o); }, wk,
                static_cast<std::size_t>(n), dy, dwk);
}

TEST(Reference, EagerPiecesComposeToAttention) {
    AttnShape a{1, 3, 2, 1, 2};
    const auto qkv = randn(static_cast<std::size_t>(a.b * a.s * a.qkv_width()), 8);
    std::vector<double> p(static_cast<std::size_t>(a.b * a.heads * a.s * a.s));
    attention_probs(qkv.data(), p.data(), a);
    for (std::int64_t r = 0; r < a.heads * a.s; ++r) {
        double sum = 0;
        for (std::int64_t c = 0; c < a.s; ++c) sum += p[static_cast<std::size_t>(r * a.s + c)];
        EXPECT_NEAR(sum, 1.0, 1e-12);
        EXPECT_EQ(p[static_cast<std::size_t>(r * a.s + a.s - 1)] == 0.0, r % a.s < a.s - 1);  // causal mask
    }
    const auto dp = randn(p.size(), 9);
    std::vector<double> ds(p.size());
    softmax_bwd(p.data(), dp.data(), ds.data(), a.heads * a.s, a.s);
    for (std::int64_t r = 0; r < a.heads * a.s; ++r) {
        double sum = 0;
        for (std::int64_t c = 0; c < a.s; ++c) sum += ds[static_cast<std::size_t>(r * a.s + c)];
        EXPECT_NEAR(sum, 0.0, 1e-12);  // softmax gradients sum to zero per row
    }
}

TEST(Reference, ActivationAndLossBackwardsMatchFiniteDifferences) {
    const std::int64_t rows = 2, f = 3;
    const auto gu = randn(rows * 2 * f, 10), dact = randn(rows * f, 11);
    std::vector<double> dgu(rows * 2 * f);
    swiglu_bwd(gu.data(), dact.data(), dgu.data(), rows, f);
    expect_grad([&](const std::vector<double>& x, std::vector<double>& y) { swiglu_fwd(x.data(), y.data(), rows, f); },
                gu, rows * f, dact, dgu);
    const auto x = randn(7, 12), dy = randn(7, 13);
    std::vector<double> dx(7);
    gelu_bwd(x.data(), dy.data(), dx.data(), 7);
    expect_grad([&](const std::vector<double>& xx, std::vector<double>& y) { gelu_fwd(xx.data(), y.data(), 7); }, x, 7,
                dy, dx);
    const auto z = randn(2 * 8, 14);
    const std::int64_t lab[] = {1, 4};
    std::vector<double> dz(16);
    cross_entropy(z.data(), lab, nullptr, dz.data(), 2, 5, 8, 1.0);
    expect_grad(
        [&](const std::vector<double>& zz, std::vector<double>& y) {
            y[0] = cross_entropy(zz.data(), lab, nullptr, nullptr, 2, 5, 8, 1.0);
        },
        z, 1, {1.0}, dz);
}

TEST(Reference, EmbeddingBackwardScattersEveryOccurrence) {
    const std::int64_t tok[] = {1, 0, 1, 1};  // b = 2, s = 2
    const double dx[] = {1, 2, 3, 4};        // h = 1
    double dwte[2] = {0, 0}, dwpe[2] = {0, 0};
    embedding_bwd(tok, dx, dwte, dwpe, 2, 2, 1);
    EXPECT_DOUBLE_EQ(dwte[1], 1 + 3 + 4);
    EXPECT_DOUBLE_EQ(dwte[0], 2);
    EXPECT_DOUBLE_EQ(dwpe[0], 1 + 3);
    EXPECT_DOUBLE_EQ(dwpe[1], 2 + 4);
}

}  // namespace
}  // namespace preflight::runtime::ref
