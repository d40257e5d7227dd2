// Every kernel against its CPU reference (double) on random inputs, fp32 and bf16,
// outputs poisoned first. Label: gpu. Skips without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "gemm.cuh"
#include "gpu_util.hpp"
#include "kernels.cuh"
#include "preflight/planner/profiles.hpp"
#include "preflight/runtime/reference.hpp"

namespace preflight::runtime {
namespace {

using namespace test;
using cuda::bf16;

template <class T>
class Kernels : public ::testing::Test {};
using Types = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(Kernels, Types);

TYPED_TEST(Kernels, Norms) {
    PF_REQUIRE_GPU();
    using T = TypeParam;
    const std::int64_t rows = 37;
    for (std::int64_t h : {200, 202})  // 16-byte path, scalar path
    for (bool ln : {true, false}) {
        const auto x = rounded<T>(randn(rows * h, 1)), w = rounded<T>(randn(h, 2)), b = rounded<T>(randn(h, 3)),
                   dy = rounded<T>(randn(rows * h, 4)), dx0 = rounded<T>(randn(rows * h, 5));
        DeviceBuffer<T> dx_(x), dw_(w), db_(b), ddy(dy), dyout(rows * h), ddx(dx0), dgw(std::vector<double>(h, 0.0)),
            dgb(std::vector<double>(h, 0.0));
        DeviceBuffer<float> stats(rows * 2);
        cuda::launch_norm_fwd<T>(dx_.get(), dw_.get(), ln ? db_.get() : nullptr, nullptr, dyout.get(), rows, h, 1e-5f, ln,
                                 nullptr);
        std::vector<double> y(rows * h), dx = dx0, gw(h), gb(h);
        if (ln)
            ref::layernorm_fwd(x.data(), w.data(), b.data(), y.data(), rows, h, 1e-5);
        else
            ref::rmsnorm_fwd(x.data(), w.data(), y.data(), rows, h, 1e-5);
        expect_close(dyout.download(), y, rtol<T>(), "norm fwd");
        {  // a post-norm's: the residual (here dx0) added to the output
            DeviceBuffer<T> with_res(rows * h);
            cuda::launch_norm_fwd<T>(dx_.get(), dw_.get(), ln ? db_.get() : nullptr, ddx.get(), with_res.get(), rows, h,
                                     1e-5f, ln, nullptr);
            std::vector<double> want = y;
            for (std::size_t i = 0; i < want.size(); ++i) want[i] += dx0[i];
            expect_close(with_res.download(), want, rtol<T>(), "norm fwd + residual");
        }
        cuda::launch_norm_bwd<T>(dx_.get(), dw_.get(), ddy.get(), ddx.get(), stats.get(), dgw.get(), dgb.get(), rows, h,
                                 1e-5f, ln, true, nullptr);
        if (ln)
            ref::layernorm_bwd(x.data(), w.data(), dy.data(), dx.data(), gw.data(), gb.data(), rows, h, 1e-5, true);
        else
            ref::rmsnorm_bwd(x.data(), w.data(), dy.data(), dx.data(), gw.data(), rows, h, 1e-5, true);
        expect_close(ddx.download(), dx, rtol<T>(), "norm bwd dx");
        expect_close(dgw.download(), gw, rtol<T>(), "norm bwd dw");
        if (ln) expect_close(dgb.download(), gb, rtol<T>(), "norm bwd db");
    }
}

// The q/k norms (head_norm.cu) on the Q|K heads of a fused q|k|v. Qwen3's per head: head_dim 128 (four
// elements a lane) and 40 (lanes idle in the last pass), GQA, weight gradients accumulated; the third
// shape's 2,400 query groups take 5 slices of partial sums (runtime_head_norm_slices). OLMoE's over
// each whole projection: the same shapes, one group of 512, 120 or 256 query columns and one of 256,
// 40 or 128 key columns a token (the third's 600 rows: 2 slices).
TYPED_TEST(Kernels, HeadNorms) {
    PF_REQUIRE_GPU();
    using T = TypeParam;
    for (bool whole : {false, true})
        for (const ref::AttnShape a :
             {ref::AttnShape{2, 7, 4, 2, 128}, ref::AttnShape{1, 5, 3, 1, 40}, ref::AttnShape{2, 300, 4, 2, 64}}) {
            const QkNormGroups g = qk_norm_groups(whole, a.heads, a.kv_heads, a.d);
            const std::int64_t rows = a.b * a.s, n = rows * a.qkv_width(), nk = rows * g.columns();
            const auto qkv = rounded<T>(randn(n, 21)), dy = rounded<T>(randn(n, 22));
            const auto wq = rounded<T>(randn(g.q_width, 23)), wk = rounded<T>(randn(g.k_width, 24));
            const auto gq0 = rounded<T>(randn(g.q_width, 25)), gk0 = rounded<T>(randn(g.k_width, 26));
            DeviceBuffer<T> dqkv(qkv), dsaved(nk), dwq(wq), dwk(wk), ddy(dy), dgq(gq0), dgk(gk0);
            DeviceBuffer<float> stats(runtime_head_norm_scratch_elements(rows, g));
            cuda::launch_head_norm_fwd<T>(dqkv.get(), dsaved.get(), dwq.get(), dwk.get(), rows, a.qkv_width(), g, 1e-6f,
                                          nullptr);
            std::vector<double> y = qkv, saved(nk);
            ref::head_rmsnorm_fwd(y.data(), saved.data(), wq.data(), wk.data(), rows, a.qkv_width(), g, 1e-6);
            const std::string what = std::string(whole ? "whole-projection" : "per-head") + " norm, d " +
                                     std::to_string(a.d) + ", rows " + std::to_string(rows);
            expect_close(dqkv.download(), y, rtol<T>(), (what + " fwd").c_str());
            expect_close(dsaved.download(), saved, 0.0, (what + " fwd: the kept input").c_str());
            cuda::launch_head_norm_bwd<T>(dsaved.get(), ddy.get(), stats.get(), dwq.get(), dwk.get(), dgq.get(),
                                          dgk.get(), rows, a.qkv_width(), g, 1e-6f, nullptr);
            std::vector<double> dx = dy, gq = gq0, gk = gk0;
            ref::head_rmsnorm_bwd(saved.data(), dx.data(), wq.data(), wk.data(), gq.data(), gk.data(), rows,
                                  a.qkv_width(), g, 1e-6);
            expect_close(ddy.download(), dx, rtol<T>(), (what + " bwd dx").c_str());
            expect_close(dgq.download(), gq, rtol<T>(), (what + " bwd dwq").c_str());
            expect_close(dgk.download(), gk, rtol<T>(), (what + " bwd dwk").c_str());
        }
}

TYPED_TEST(Kernels, RopeActivationsSoftmax) {
    PF_REQUIRE_GPU();
    using T = TypeParam;
    const ref::AttnShape a{2, 9, 4, 2, 16};
    const std::int64_t n = a.b * a.s * a.qkv_width();
    auto qkv = rounded<T>(randn(n, 6));
    std::vector<double> ct(a.s * a.d), st(a.s * a.d);
    ref::rope_tables(ct.data(), st.data(), a.s, a.d, 10000.0);
    DeviceBuffer<float> dc(ct), ds(st);
    DeviceBuffer<T> dq(qkv);
    cuda::launch_rope<T>(dq.get(), dc.get(), ds.get(), a.b, a.s, a.heads, a.kv_heads, a.d, a.d, false, nullptr);
    auto r = qkv;
    ref::rope_fwd(r.data(), a, 10000.0);
    expect_close(dq.download(), r, rtol<T>(), "rope fwd");
    cuda::launch_rope<T>(dq.get(), dc.get(), ds.get(), a.b, a.s, a.heads, a.kv_heads, a.d, a.d, true, nullptr);
    expect_close(dq.download(), qkv, 2 * rtol<T>(), "rope bwd undoes fwd");

    const std::int64_t rows = 13, f = 40;
    const auto gu = rounded<T>(randn(rows * 2 * f, 7)), dact = rounded<T>(randn(rows * f, 8));
    DeviceBuffer<T> dgu_in(gu), dact_out(rows * f), dgu(rows * 2 * f);
    cuda::launch_swiglu_fwd<T>(dgu_in.get(), dact_out.get(), rows, f, nullptr);
    std::vector<double> act(rows * f), dref(rows * 2 * f);
    ref::swiglu_fwd(gu.data(), act.data(), rows, f);
    expect_close(dact_out.download(), act, rtol<T>(), "swiglu fwd");
    std::vector<double> packed(rows * 2 * f, 0.0);  // dact in the first f columns
    for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t c = 0; c < f; ++c) packed[i * 2 * f + c] = dact[i * f + c];
    dgu.upload(packed);
    cuda::launch_swiglu_bwd<T>(dgu_in.get(), dgu.get(), rows, f, nullptr);
    ref::swiglu_bwd(gu.data(), dact.data(), dref.data(), rows, f);
    expect_close(dgu.download(), dref, rtol<T>(), "swiglu bwd");

    const auto x = rounded<T>(randn(500, 9)), dy = rounded<T>(randn(500, 10));
    DeviceBuffer<T> gx(x), gy(500), gdx(dy);
    std::vector<double> y(500), dx(500);
    cuda::launch_gelu_fwd<T>(gx.get(), gy.get(), 500, nullptr);
    ref::gelu_fwd(x.data(), y.data(), 500);
    expect_close(gy.download(), y, rtol<T>(), "gelu fwd");
    cuda::launch_gelu_bwd<T>(gx.get(), gdx.get(), gdx.get(), 500, nullptr);
    ref::gelu_bwd(x.data(), dy.data(), dx.data(), 500);
    expect_close(gdx.download(), dx, rtol<T>(), "gelu bwd");

    // Causal softmax over [heads * s, s] rows, and its backward: whole, and through a sliding
    // window of 5 keys (row t sees t - 4 .. t).
    const std::int64_t s = 33, srows = 3 * s;
    const auto sc = rounded<T>(randn(srows * s, 11)), dp = rounded<T>(randn(srows * s, 12));
    for (const std::int64_t window : {0, 5}) {
        DeviceBuffer<T> dsc(sc), dprob(srows * s), ddp(dp), dds(srows * s);
        cuda::launch_causal_softmax_fwd<T>(dsc.get(), dprob.get(), srows, s, window, nullptr);
        std::vector<double> p(srows * s, 0.0);
        for (std::int64_t rr = 0; rr < srows; ++rr) {
            const std::int64_t t = rr % s, first = window > 0 ? std::max<std::int64_t>(0, t - window + 1) : 0;
            double mx = -1e300, sum = 0;
            for (std::int64_t c = first; c <= t; ++c) mx = std::max(mx, sc[rr * s + c]);
            for (std::int64_t c = first; c <= t; ++c) sum += std::exp(sc[rr * s + c] - mx);
            for (std::int64_t c = first; c <= t; ++c) p[rr * s + c] = std::exp(sc[rr * s + c] - mx) / sum;
        }
        const std::string label = window > 0 ? " (window 5)" : "";
        expect_close(dprob.download(), p, rtol<T>(), ("causal softmax fwd" + label).c_str());
        const auto pr = rounded<T>(p);
        DeviceBuffer<T> dpr(pr);
        cuda::launch_causal_softmax_bwd<T>(dpr.get(), ddp.get(), dds.get(), srows, s, window, nullptr);
        std::vector<double> dsr(srows * s);
        ref::softmax_bwd(pr.data(), dp.data(), dsr.data(), srows, s);
        expect_close(dds.download(), dsr, rtol<T>(), ("causal softmax bwd" + label).c_str());
    }
}

TYPED_TEST(Kernels, FlashAttentionMatchesReference) {
    PF_REQUIRE_GPU();
    using T = TypeParam;
    // Sliding windows too (the last field): narrower than a tile, across tiles, and an odd 37 keys.
    for (ref::AttnShape a : {ref::AttnShape{2, 70, 4, 4, 64}, ref::AttnShape{1, 45, 8, 2, 128}, ref::AttnShape{1, 32, 2, 1, 32},
                             ref::AttnShape{2, 70, 4, 2, 64, 1, 0, 5}, ref::AttnShape{1, 130, 4, 4, 32, 1, 0, 37},
                             ref::AttnShape{1, 96, 2, 1, 128, 1, 0, 64}}) {
        const std::int64_t n = a.b * a.s * a.qkv_width(), no = a.b * a.s * a.heads * a.d;
        const auto qkv = rounded<T>(randn(n, 13)), dout = rounded<T>(randn(no, 14));
        DeviceBuffer<T> dq(qkv), dout_(dout), out(no), dqkv(n);
        DeviceBuffer<float> lse(a.b * a.heads * a.s), dsum(a.b * a.heads * a.s);
        cuda::launch_flash_fwd<T>(dq.get(), out.get(), lse.get(), a.b, a.s, a.heads, a.kv_heads, a.d, a.window, nullptr);
        std::vector<double> o(no), l(a.b * a.heads * a.s), g(n);
        ref::attention_fwd(qkv.data(), o.data(), l.data(), a);
        expect_close(out.download(), o, rtol<T>(), "flash fwd out");
        expect_close(lse.download(), l, 1e-4, "flash fwd lse", 1e-3);
        // Backward from the kernel's own (rounded) output, as the runtime does.
        const auto o_dev = out.download();
        cuda::launch_flash_bwd<T>(dq.get(), out.get(), lse.get(), dout_.get(), dqkv.get(), dsum.get(), a.b, a.s, a.heads,
                                  a.kv_heads, a.d, a.window, nullptr);
        ref::attention_bwd(qkv.data(), dout.data(), g.data(), a);
        expect_close(dqkv.download(), g, 2 * rtol<T>(), "flash bwd dqkv");
        (void)o_dev;
    }
}

TYPED_TEST(Kernels, CrossEntropyEmbeddingOptimizer) {
    PF_REQUIRE_GPU();
    using T = TypeParam;
    const std::int64_t rows = 19, V = 300, Vp = 384;
    const auto z = rounded<T>(randn(rows * Vp, 15, 2.0));
    std::vector<std::int64_t> lab(rows);
    for (std::int64_t i = 0; i < rows; ++i) lab[i] = (i * 37) % V;
    DeviceBuffer<T> dz(z);
    DeviceBuffer<float> loss(rows), total(std::vector<double>{0.0});
    std::int64_t* dlab = nullptr;
    PF_CUDA_CHECK(cudaMalloc(&dlab, rows * 8));
    PF_CUDA_CHECK(cudaMemcpy(dlab, lab.data(), rows * 8, cudaMemcpyHostToDevice));
    cuda::launch_cross_entropy<T>(dz.get(), dlab, loss.get(), rows, V, Vp, 0.25f, nullptr);
    cuda::launch_loss_sum(loss.get(), rows, total.get(), nullptr);
    std::vector<double> lr(rows), dzr(rows * Vp);
    const double sum = ref::cross_entropy(z.data(), lab.data(), lr.data(), dzr.data(), rows, V, Vp, 0.25);
    expect_close(loss.download(), lr, 1e-4, "ce loss", 1e-4);
    expect_close(dz.download(), dzr, rtol<T>(), "ce dlogits");
    EXPECT_NEAR(total.download()[0], sum, 1e-3 * sum);

    const std::int64_t b = 2, s = 7, h = 24, vocab = 5;
    std::vector<std::int64_t> tok(b * s);
    for (std::int64_t i = 0; i < b * s; ++i) tok[i] = (i * 3) % vocab;
    PF_CUDA_CHECK(cudaMemcpy(dlab, tok.data(), b * s * 8, cudaMemcpyHostToDevice));
    const auto wte = rounded<T>(randn(vocab * h, 16)), wpe = rounded<T>(randn(s * h, 17)), dx = rounded<T>(randn(b * s * h, 18));
    DeviceBuffer<T> dwte(wte), dwpe(wpe), x(b * s * h), ddx(dx), gwte(std::vector<double>(vocab * h, 0.0)),
        gwpe(std::vector<double>(s * h, 0.0));
    cuda::launch_embedding_fwd<T>(dlab, dwte.get(), dwpe.get(), x.get(), b, s, h, nullptr);
    std::vector<double> xr(b * s * h), gw(vocab * h, 0.0), gp(s * h, 0.0);
    ref::embedding_fwd(tok.data(), wte.data(), wpe.data(), xr.data(), b, s, h);
    expect_close(x.download(), xr, rtol<T>(), "embedding fwd");
    cuda::launch_embedding_bwd<T>(dlab, ddx.get(), gwte.get(), gwpe.get(), b, s, h, nullptr);
    ref::embedding_bwd(tok.data(), dx.data(), gw.data(), gp.data(), b, s, h);
    expect_close(gwte.download(), gw, rtol<T>(), "embedding bwd wte");
    expect_close(gwpe.download(), gp, rtol<T>(), "embedding bwd wpe");
    cudaFree(dlab);

    // AdamW with an fp32 master and a T copy written back; two steps.
    const std::int64_t n = 1000;
    auto p = randn(n, 19), g = rounded<T>(randn(n, 20));
    DeviceBuffer<float> master(p), m(std::vector<double>(n, 0.0)), v(std::vector<double>(n, 0.0));
    DeviceBuffer<T> w(n), grad(g);
    std::vector<double> pm(n, 0.0), pv(n, 0.0);
    for (std::int64_t step = 1; step <= 2; ++step) {
        cuda::OptimizerArgs a;
        a.grad = grad.get();
        a.grad_f32 = sizeof(T) == 4;
        a.master = master.get();
        a.weights = w.get();
        a.weights_f32 = sizeof(T) == 4;
        a.m = m.get();
        a.v = v.get();
        a.n = n;
        a.lr = 1e-2f, a.beta1 = 0.9f, a.beta2 = 0.95f, a.eps = 1e-8f, a.weight_decay = 0.1f;
        a.step = step;
        cuda::launch_adamw(a, nullptr);
        ref::adamw(p.data(), g.data(), pm.data(), pv.data(), n, 1e-2, 0.9, 0.95, 1e-8, 0.1, step);
    }
    expect_close(master.download(), p, 1e-5, "adamw master");
    expect_close(w.download(), p, rtol<T>(), "adamw weights copy");
}

TYPED_TEST(Kernels, CublasLtLinearForwardAndBackward) {
    PF_REQUIRE_GPU();
    using T = TypeParam;
    const std::int64_t M = 48, N = 40, K = 56;
    const auto x = rounded<T>(randn(M * K, 21)), w = rounded<T>(randn(N * K, 22)), b = rounded<T>(randn(N, 23)),
               r = rounded<T>(randn(M * N, 24)), dy = rounded<T>(randn(M * N, 25));
    DeviceBuffer<T> dx(x), dw(w), db(b), dr(r), dyv(M * N), ddy(dy), dxg(M * K), dwg(std::vector<double>(N * K, 0.0));
    DeviceBuffer<char> ws(32 << 20);
    cuda::Gemm gemm(sizeof(T) == 4);
    gemm.set_workspace(ws.get(), 32 << 20);
    cuda::GemmArgs f;
    f.trans_b = true;
    f.M = M, f.N = N, f.K = K;
    f.A = dx.get(), f.lda = K, f.B = dw.get(), f.ldb = K;
    f.C = dr.get(), f.ldc = N, f.beta = 1.f;
    f.D = dyv.get(), f.ldd = N, f.bias = db.get();
    gemm.run(f, nullptr);
    std::vector<double> y(M * N), gx(M * K), gw(N * K, 0.0);
    ref::linear_fwd(x.data(), w.data(), b.data(), r.data(), y.data(), M, N, K);
    expect_close(dyv.download(), y, rtol<T>(), "linear fwd (bias + residual)");
    cuda::GemmArgs bd;  // dX = dY W
    bd.M = M, bd.N = K, bd.K = N;
    bd.A = ddy.get(), bd.lda = N, bd.B = dw.get(), bd.ldb = K, bd.D = dxg.get(), bd.ldd = K;
    gemm.run(bd, nullptr);
    cuda::GemmArgs bw;  // dW += dY^T X
    bw.trans_a = true;
    bw.M = N, bw.N = K, bw.K = M;
    bw.A = ddy.get(), bw.lda = N, bw.B = dx.get(), bw.ldb = K, bw.C = dwg.get(), bw.ldc = K, bw.beta = 1.f;
    bw.D = dwg.get(), bw.ldd = K;
    gemm.run(bw, nullptr);
    ref::linear_bwd(dy.data(), x.data(), w.data(), gx.data(), gw.data(), nullptr, M, N, K);
    expect_close(dxg.download(), gx, rtol<T>(), "linear bwd data");
    expect_close(dwg.download(), gw, rtol<T>(), "linear bwd weight");
}

}  // namespace
}  // namespace preflight::runtime
