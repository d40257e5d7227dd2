// The 16-byte kernels against the CPU reference: multi-tensor AdamW (one launch, 4
// elements per thread; weight decay on some tensors only; fp32 master + bf16 weights and
// gradients, and pure fp32), SwiGLU and GeLU on widths that take the vector path and widths
// that fall back to the scalar one.
#include <gtest/gtest.h>

#include "gpu_util.hpp"
#include "kernels.cuh"
#include "preflight/runtime/reference.hpp"

namespace preflight::runtime::test {
namespace {

template <class T>
class AdamwMulti : public ::testing::Test {};
using Types = ::testing::Types<float, cuda::bf16>;
TYPED_TEST_SUITE(AdamwMulti, Types);

TYPED_TEST(AdamwMulti, MatchesPerTensorReference) {
    PF_REQUIRE_GPU();
    using T = TypeParam;
    // Three tensors at 64-element-aligned offsets (the program's layout), the middle one not decayed.
    const std::vector<std::int64_t> begin = {0, 192, 256}, sizes = {130, 64, 70};
    const std::vector<bool> decay_v = {true, false, true};
    const std::int64_t total = 384;
    std::vector<double> p0 = randn(total, 31, 0.5), g = rounded<T>(randn(total, 32, 0.1));
    for (std::size_t k = 0; k < begin.size(); ++k)  // padding: zero weight and gradient
        for (std::int64_t i = begin[k] + sizes[k]; i < (k + 1 < begin.size() ? begin[k + 1] : total); ++i) p0[i] = g[i] = 0;
    DeviceBuffer<float> master(p0), m(std::vector<double>(total, 0.0)), v(std::vector<double>(total, 0.0));
    DeviceBuffer<T> w(p0), grad(g);
    std::vector<double> p = p0, pm(total, 0.0), pv(total, 0.0);
    const bool decay[3] = {true, false, true};
    for (std::int64_t step = 1; step <= 3; ++step) {
        cuda::OptimizerArgs a;
        a.grad = grad.get();
        a.grad_f32 = sizeof(T) == 4;
        a.master = master.get();
        a.weights = w.get();
        a.weights_f32 = sizeof(T) == 4;
        a.m = m.get();
        a.v = v.get();
        a.lr = 1e-2f, a.beta1 = 0.9f, a.beta2 = 0.95f, a.eps = 1e-8f, a.weight_decay = 0.1f;
        a.step = step;
        cuda::launch_adamw_multi(a, begin.data(), decay, 3, total, nullptr);
        for (std::size_t k = 0; k < begin.size(); ++k) {
            const std::int64_t o = begin[k], n = (k + 1 < begin.size() ? begin[k + 1] : total) - o;
            ref::adamw(p.data() + o, g.data() + o, pm.data() + o, pv.data() + o, n, 1e-2, 0.9, 0.95, 1e-8,
                       decay_v[k] ? 0.1 : 0.0, step);
        }
    }
    expect_close(master.download(), p, 1e-5, "adamw multi master");
    expect_close(w.download(), p, rtol<T>(), "adamw multi weights copy");
    expect_close(m.download(), pm, 1e-5, "adamw multi m", 1e-7);
}

TYPED_TEST(AdamwMulti, SwigluAndGeluVectorAndScalarPaths) {
    PF_REQUIRE_GPU();
    using T = TypeParam;
    for (std::int64_t f : {64, 36, 8}) {  // 64, 8: packs of 4 (fp32) / 8 (bf16); 36: bf16 falls back
        const std::int64_t rows = 5;
        const auto gu = rounded<T>(randn(rows * 2 * f, 41)), dact = rounded<T>(randn(rows * f, 42));
        DeviceBuffer<T> dgu_in(gu), act_out(rows * f), dgu(rows * 2 * f);
        cuda::launch_swiglu_fwd<T>(dgu_in.get(), act_out.get(), rows, f, nullptr);
        std::vector<double> act(rows * f), dref(rows * 2 * f), packed(rows * 2 * f, 0.0);
        ref::swiglu_fwd(gu.data(), act.data(), rows, f);
        expect_close(act_out.download(), act, rtol<T>(), "swiglu fwd");
        for (std::int64_t i = 0; i < rows; ++i)
            for (std::int64_t c = 0; c < f; ++c) packed[i * 2 * f + c] = dact[i * f + c];
        dgu.upload(packed);
        cuda::launch_swiglu_bwd<T>(dgu_in.get(), dgu.get(), rows, f, nullptr);
        ref::swiglu_bwd(gu.data(), dact.data(), dref.data(), rows, f);
        expect_close(dgu.download(), dref, rtol<T>(), "swiglu bwd");
    }
    for (std::int64_t n : {4096, 4100, 37}) {
        const auto x = rounded<T>(randn(n, 43)), dy = rounded<T>(randn(n, 44));
        DeviceBuffer<T> gx(x), gy(n), gdx(dy);
        std::vector<double> y(n), dx(n);
        cuda::launch_gelu_fwd<T>(gx.get(), gy.get(), n, nullptr);
        ref::gelu_fwd(x.data(), y.data(), n);
        expect_close(gy.download(), y, rtol<T>(), "gelu fwd");
        cuda::launch_gelu_bwd<T>(gx.get(), gdx.get(), gdx.get(), n, nullptr);
        ref::gelu_bwd(x.data(), dy.data(), dx.data(), n);
        expect_close(gdx.download(), dx, rtol<T>(), "gelu bwd");
    }
}

TYPED_TEST(AdamwMulti, RopeVectorAndScalarPathsWithLlama3Scaling) {
    PF_REQUIRE_GPU();
    using T = TypeParam;
    RopeScaling sc;
    sc.type = "llama3";
    sc.factor = 32;
    // An attention factor of 1.3 too (LongRoPE's: the tables carry it, the backward is the transpose),
    // and partial rotary: 48 of 64 dimensions (Phi-4-mini's 0.75: 24 pairs, the vector path) and 20 of
    // 64 (10 pairs, the scalar path); the dimensions past them must come back untouched.
    for (const double factor : {1.0, 1.3})
        for (const auto [d, rot] : {std::pair<std::int64_t, std::int64_t>{64, 64}, {12, 12}, {64, 48}, {64, 20}}) {
            ref::AttnShape a{2, 33, 4, 2, d};  // 64: packs of 4/8 pairs; 12: 6 pairs, scalar path
            a.rot = rot;
            const ref::RopeFrequencies f(ref::rope_inv_freq(rot, 500000.0, sc), factor);
            std::vector<double> ct(a.s * a.d), st(a.s * a.d);
            ref::rope_tables_cp(ct.data(), st.data(), a, f);
            DeviceBuffer<float> dc(ct), ds(st);
            const auto qkv = rounded<T>(randn(a.b * a.s * a.qkv_width(), 45));
            DeviceBuffer<T> dq(qkv);
            cuda::launch_rope<T>(dq.get(), dc.get(), ds.get(), a.b, a.s, a.heads, a.kv_heads, a.d, rot, false, nullptr);
            auto r = qkv;
            ref::rope_fwd(r.data(), a, f);
            expect_close(dq.download(), r, rtol<T>(), "rope fwd (llama3 scaling)");
            cuda::launch_rope<T>(dq.get(), dc.get(), ds.get(), a.b, a.s, a.heads, a.kv_heads, a.d, rot, true, nullptr);
            ref::rope_bwd(r.data(), a, f);  // the factor squared with 1.3; qkv itself with 1
            expect_close(dq.download(), r, 2 * rtol<T>(), "rope bwd is the transpose of fwd");
        }
}

}  // namespace
}  // namespace preflight::runtime::test
