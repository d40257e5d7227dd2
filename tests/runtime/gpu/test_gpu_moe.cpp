// The mixture-of-experts kernels (runtime/kernels/moe.cu) and grouped GEMMs (DeviceRunner,
// device_runner_moe.cpp) against the CPU reference in double (reference_moe.hpp), fp32 and bf16,
// outputs poisoned first; then a Mixtral-shaped model's whole bf16 step on the device against the
// host executor of the same program fed the device's weights (the fp32 step is
// test_gpu_gradients.cpp's, against the whole-model reference). Label: gpu. Skips without a device.
//
// Error bounds (|gpu - ref| <= atol + rtol * max|ref| per tensor, inputs rounded to the kernel's
// dtype before the reference runs, as gpu_util.hpp's rtol<T>):
// - the routing table: exact (integer; the logits compare exactly in fp32, bf16 widens exactly),
//   ties included; the gates (fp32 softmax over k values, expf): 1e-5 relative + 1e-6;
// - dispatch: exact (a copy); combine, the combine's dy, the routing and dispatch backward and
//   the grouped GEMMs: rtol<T> (fp32 1e-4: accumulation order; bf16 2e-2: the output's rounding);
//   the gate weights' gradient (fp32 dot over h of T products): 1e-4 for both.
// - the whole step (fp32: test_gpu_gradients.cpp; a top-k flip between the device's fp32 and the
//   reference's double router logits needs a near tie within ~1e-7, ~1e-4 of a chance over the
//   test's tokens). The bf16-mixed step: the device rounds the router logits to
//   bf16 (2^-9 relative) while the host keeps doubles, so a near-tied token may take another
//   expert on one side (its gates then nearly equal); the loss within 1e-2, every tensor's
//   relative 2-norm error within 0.25 and all parameters' together within 0.1 (a wrong slot,
//   offset or gate gives O(1)).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "device_runner.hpp"
#include "gemm.cuh"
#include "gpu_util.hpp"
#include "moe_gemm.hpp"
#include "kernels.cuh"
#include "preflight/runtime/device.hpp"
#include "preflight/runtime/host_runner.hpp"
#include "preflight/runtime/reference_moe.hpp"

namespace preflight::runtime {
namespace {

using namespace test;
using cuda::bf16;
using I64 = std::vector<std::int64_t>;
using Vec = std::vector<double>;

template <class T>
class MoeKernels : public ::testing::Test {};
using Types = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(MoeKernels, Types);

// The routing table on the device: poisoned (-1), uploaded, downloaded.
class DeviceTable {
public:
    explicit DeviceTable(std::size_t n) : buf_(n) { PF_CUDA_CHECK(cudaMemset(buf_.get(), 0xFF, n * sizeof(std::int64_t))); }
    explicit DeviceTable(const I64& v) : buf_(v.size()) {
        PF_CUDA_CHECK(cudaMemcpy(buf_.get(), v.data(), v.size() * sizeof(std::int64_t), cudaMemcpyHostToDevice));
    }
    I64 download() {
        PF_CUDA_CHECK(cudaDeviceSynchronize());
        I64 h(buf_.size());
        PF_CUDA_CHECK(cudaMemcpy(h.data(), buf_.get(), h.size() * sizeof(std::int64_t), cudaMemcpyDeviceToHost));
        return h;
    }
    std::int64_t* get() { return buf_.get(); }

private:
    DeviceBuffer<std::int64_t> buf_;
};

// Random logits rounded to T, with ties: every third row coarse (multiples of 1/2, many equal
// values), row 0 all equal, row 1's largest value repeated on its last expert.
template <class T>
Vec tied_logits(std::int64_t rows, std::int64_t E, unsigned seed) {
    Vec l = randn(static_cast<std::size_t>(rows * E), seed);
    for (std::int64_t t = 0; t < rows; ++t)
        for (std::int64_t e = 0; e < E; ++e) {
            double& v = l[static_cast<std::size_t>(t * E + e)];
            if (t == 0) v = 0.25;
            else if (t % 3 == 0) v = std::round(2 * v) / 2;
        }
    if (rows > 1) {
        double mx = -1e300;
        for (std::int64_t e = 0; e < E; ++e) mx = std::max(mx, l[static_cast<std::size_t>(E + e)]);
        l[static_cast<std::size_t>(2 * E - 1)] = mx;
    }
    return rounded<T>(l);
}

// The reference's routing of random logits (no near ties needed: the table is an input here).
struct HostRouting {
    Vec gates;  // rounded to fp32, as the device holds them
    I64 table;
    Vec logits;
};
HostRouting host_routing(std::int64_t rows, std::int64_t E, std::int64_t k, unsigned seed, std::int64_t unused_expert = -1) {
    Vec l = randn(static_cast<std::size_t>(rows * E), seed);
    if (unused_expert >= 0)
        for (std::int64_t t = 0; t < rows; ++t) l[static_cast<std::size_t>(t * E + unused_expert)] = -100;
    HostRouting r;
    r.gates.resize(static_cast<std::size_t>(rows * k));
    r.table.resize(static_cast<std::size_t>(ref::routing_elements(rows, k, E)));
    ref::moe_route(l.data(), rows, E, k, true, r.gates.data(), r.table.data());
    r.gates = rounded<float>(r.gates);
    r.logits = std::move(l);
    return r;
}

TYPED_TEST(MoeKernels, RouteMatchesTheReferenceExactly) {
    PF_REQUIRE_GPU();
    using T = TypeParam;
    struct Case {
        std::int64_t rows, E, k;
    };
    // Several sort chunks (2800 pairs > 1024), k = E, top-1, and the most experts the sort takes.
    // Gates renormalised over the chosen (Mixtral's) and not (OLMoE's: the softmax over all E).
    for (const Case c : {Case{37, 8, 2}, Case{700, 64, 4}, Case{50, 4, 4}, Case{300, 16, 1}, Case{9, cuda::kMoeMaxExperts, 8}})
        for (bool renormalize : {true, false}) {
            const Vec logits = tied_logits<T>(c.rows, c.E, 31);
            DeviceBuffer<T> dl(logits);
            DeviceBuffer<float> dg(static_cast<std::size_t>(c.rows * c.k));
            DeviceTable dt(static_cast<std::size_t>(ref::routing_elements(c.rows, c.k, c.E)));
            cuda::launch_moe_route<T>(dl.get(), dg.get(), dt.get(), c.rows, c.E, c.k, renormalize, nullptr);
            Vec gates(static_cast<std::size_t>(c.rows * c.k));
            I64 table(static_cast<std::size_t>(ref::routing_elements(c.rows, c.k, c.E)));
            ref::moe_route(logits.data(), c.rows, c.E, c.k, renormalize, gates.data(), table.data());
            const std::string what = "route rows " + std::to_string(c.rows) + " E " + std::to_string(c.E) + " k " +
                                     std::to_string(c.k) + (renormalize ? "" : " not renormalised");
            EXPECT_EQ(dt.download(), table) << what;
            expect_close(dg.download(), gates, 1e-5, what.c_str(), 1e-6);
        }
}

TYPED_TEST(MoeKernels, DispatchCombineAndTheirBackward) {
    PF_REQUIRE_GPU();
    using T = TypeParam;
    const std::int64_t rows = 37, E = 4, k = 2, P = rows * k;
    const HostRouting r = host_routing(rows, E, k, 41);
    DeviceTable dt(r.table);
    DeviceBuffer<float> dgates(r.gates);
    // Dropless (every expert local, the routing's slots), and the capacity layout of expert
    // parallelism: experts 1 and 2 of 4, 12 rows each (some of their pairs dropped, some rows zero).
    for (const ref::ExpertSlots es : {ref::ExpertSlots{0, E, 0}, ref::ExpertSlots{1, 2, 12}})
        for (std::int64_t h : {64, 66}) {  // the 16-byte dispatch path, the scalar one
            const cuda::MoeSlots ms{E, es.first, es.count, es.capacity};
            const std::int64_t S = es.capacity > 0 ? es.rows() : P;
            const std::string hs = " h " + std::to_string(h) + (es.capacity > 0 ? " capacity" : " dropless");
            const auto x = rounded<T>(randn(static_cast<std::size_t>(rows * h), 42));
            DeviceBuffer<T> dx(x), dxd(static_cast<std::size_t>(S * h));
            dxd.poison();
            cuda::launch_moe_dispatch<T>(dx.get(), dt.get(), rows, k, h, ms, dxd.get(), nullptr);
            Vec xd(static_cast<std::size_t>(S * h));
            ref::moe_dispatch(x.data(), r.table.data(), rows, k, E, h, es, xd.data());
            expect_close(dxd.download(), xd, 0.0, ("dispatch" + hs).c_str(), 0.0);

            // Combine, with and without the residual.
            const auto y = rounded<T>(randn(static_cast<std::size_t>(S * h), 43)),
                       res = rounded<T>(randn(static_cast<std::size_t>(rows * h), 44));
            DeviceBuffer<T> dy_(y), dres(res), dout(static_cast<std::size_t>(rows * h));
            for (bool with_res : {true, false}) {
                dout.poison();
                cuda::launch_moe_combine<T>(dy_.get(), dgates.get(), dt.get(), with_res ? dres.get() : nullptr, rows, k,
                                            h, ms, dout.get(), nullptr);
                Vec out(static_cast<std::size_t>(rows * h));
                ref::moe_combine(y.data(), r.gates.data(), r.table.data(), with_res ? res.data() : nullptr, rows, k, E, h,
                                 es, out.data());
                expect_close(dout.download(), out, rtol<T>(), ("combine" + hs + (with_res ? " + residual" : "")).c_str());
            }

            // The combine's backward: the expert outputs' and gate weights' gradients.
            const auto dO = rounded<T>(randn(static_cast<std::size_t>(rows * h), 45));
            DeviceBuffer<T> ddO(dO), ddy(static_cast<std::size_t>(S * h));
            DeviceBuffer<float> ddg(static_cast<std::size_t>(P));
            ddy.poison();
            cuda::launch_moe_combine_bwd<T>(ddO.get(), dy_.get(), dgates.get(), dt.get(), rows, k, h, ms, ddy.get(),
                                            ddg.get(), nullptr);
            Vec dyr(static_cast<std::size_t>(S * h)), dgr(static_cast<std::size_t>(P));
            ref::moe_combine_bwd(dO.data(), y.data(), r.gates.data(), r.table.data(), rows, k, E, h, es, dyr.data(),
                                 dgr.data());
            // (capacity layout: the rows no pair fills are zeroed too, as the reference's)
            expect_close(ddy.download(), dyr, rtol<T>(), ("combine bwd dy" + hs).c_str());
            expect_close(ddg.download(), dgr, 1e-4, ("combine bwd d gates" + hs).c_str());

            // The dispatch's backward, overwriting and accumulating.
            const auto dxdv = rounded<T>(randn(static_cast<std::size_t>(S * h), 46)),
                       dx0 = rounded<T>(randn(static_cast<std::size_t>(rows * h), 47));
            DeviceBuffer<T> ddxd(dxdv), ddx(static_cast<std::size_t>(rows * h));
            for (bool acc : {false, true}) {
                if (acc) ddx.upload(dx0); else ddx.poison();
                cuda::launch_moe_dispatch_bwd<T>(ddxd.get(), dt.get(), rows, k, h, ms, ddx.get(), acc, nullptr);
                Vec dxr = dx0;
                ref::moe_dispatch_bwd(dxdv.data(), r.table.data(), rows, k, E, h, es, dxr.data(), acc);
                expect_close(ddx.download(), dxr, rtol<T>(), ("dispatch bwd" + hs + (acc ? " +=" : "")).c_str());
            }
        }

    // The routing's backward: the softmax over the chosen logits, 0 on the others.
    const Vec dg = rounded<float>(randn(static_cast<std::size_t>(P), 48));
    DeviceBuffer<float> ddg(dg);
    DeviceBuffer<T> ddl(static_cast<std::size_t>(rows * E));
    cuda::launch_moe_route_bwd<T>(ddg.get(), dgates.get(), dt.get(), static_cast<const T*>(nullptr), rows, E, k,
                                  ddl.get(), nullptr);
    Vec dl(static_cast<std::size_t>(rows * E));
    ref::moe_route_bwd(dg.data(), r.gates.data(), r.table.data(), nullptr, rows, E, k, dl.data());
    expect_close(ddl.download(), dl, rtol<T>(), "route bwd");
    // Gates not renormalised (OLMoE's): the softmax over all E of the kept logits, every logit a gradient.
    const Vec logits = rounded<T>(r.logits);
    Vec gates(static_cast<std::size_t>(P));
    I64 table(r.table.size());
    ref::moe_route(logits.data(), rows, E, k, false, gates.data(), table.data());
    gates = rounded<float>(gates);
    DeviceBuffer<T> dlogits(logits);
    DeviceBuffer<float> dgates_all(gates);
    DeviceTable dt_all(table);
    cuda::launch_moe_route_bwd<T>(ddg.get(), dgates_all.get(), dt_all.get(), dlogits.get(), rows, E, k, ddl.get(),
                                  nullptr);
    ref::moe_route_bwd(dg.data(), gates.data(), table.data(), logits.data(), rows, E, k, dl.data());
    expect_close(ddl.download(), dl, rtol<T>(), "route bwd, not renormalised");
}

// The experts' grouped GEMMs as the DeviceRunner issues them (moe_expert_offsets, then
// moe_expert_gemms): expert 2 gets no slot (no GEMM, its gradient rows untouched); the data
// gradient writes a column window of a wider buffer (the down projection's into d(gate|up)) and
// leaves the other columns alone.
TYPED_TEST(MoeKernels, GroupedLinearsMatchTheReference) {
    PF_REQUIRE_GPU();
    using T = TypeParam;
    const std::int64_t rows = 37, E = 4, k = 2, P = rows * k, N = 48, K = 40, ldx = 64;
    const HostRouting r = host_routing(rows, E, k, 51, 2);
    DeviceTable dt(r.table);
    const I64 off = cuda::moe_expert_offsets(dt.get(), P, E, nullptr);
    ASSERT_EQ(off, I64(r.table.begin() + 2 * P, r.table.begin() + 2 * P + E + 1));
    ASSERT_EQ(off[2], off[3]);  // expert 2 empty
    DeviceBuffer<char> ws(32 << 20);
    cuda::Gemm gemm(sizeof(T) == 4);
    gemm.set_workspace(ws.get(), 32 << 20);
    auto run_all = [&](OpKind kind, void* x, std::int64_t lx, void* y, std::int64_t ly, void* w) {
        const auto gs = cuda::moe_expert_gemms(kind, off, x, lx, y, ly, w, N, K, sizeof(T));
        EXPECT_EQ(gs.size(), 3u);  // one per expert with slots
        for (const cuda::GemmArgs& g : gs) gemm.run(g, nullptr);
    };
    const auto x = rounded<T>(randn(static_cast<std::size_t>(P * K), 52)),
               w = rounded<T>(randn(static_cast<std::size_t>(E * N * K), 53, 0.2)),
               dy = rounded<T>(randn(static_cast<std::size_t>(P * N), 54)),
               dw0 = rounded<T>(randn(static_cast<std::size_t>(E * N * K), 55));
    DeviceBuffer<T> dxv(x), dwv(w), ddy(dy), dyv(static_cast<std::size_t>(P * N)), dgw(dw0);
    run_all(OpKind::moe_linear_fwd, dxv.get(), K, dyv.get(), N, dwv.get());
    Vec yr(static_cast<std::size_t>(P * N));
    ref::moe_linear_fwd(x.data(), w.data(), r.table.data(), P, E, N, K, ref::ExpertSlots{0, E, 0}, yr.data());
    expect_close(dyv.download(), yr, rtol<T>(), "grouped linear fwd");

    const Vec fill(static_cast<std::size_t>(P * ldx), 7.0);  // the window's neighbours keep 7
    DeviceBuffer<T> ddx(fill);
    run_all(OpKind::moe_linear_bwd_data, ddx.get(), ldx, ddy.get(), N, dwv.get());
    Vec dxr(static_cast<std::size_t>(P * K));
    ref::moe_linear_bwd_data(dy.data(), w.data(), r.table.data(), P, E, N, K, ref::ExpertSlots{0, E, 0}, dxr.data());
    Vec want = fill;
    for (std::int64_t s = 0; s < P; ++s)
        for (std::int64_t c = 0; c < K; ++c)
            want[static_cast<std::size_t>(s * ldx + c)] = dxr[static_cast<std::size_t>(s * K + c)];
    expect_close(ddx.download(), want, rtol<T>(), "grouped linear bwd data (column window)");

    run_all(OpKind::moe_linear_bwd_weight, dxv.get(), K, ddy.get(), N, dgw.get());
    Vec dwr = dw0;
    ref::moe_linear_bwd_weight(dy.data(), x.data(), r.table.data(), P, E, N, K, ref::ExpertSlots{0, E, 0}, dwr.data());
    expect_close(dgw.download(), dwr, rtol<T>(), "grouped linear bwd weight (+=)");
}

// A Mixtral-shaped model the device kernels take (head_dim 32): 4 SwiGLU experts of width 160, top 2.
ModelConfig gpu_mixtral() {
    nlohmann::json cfg = {{"model_type", "mixtral"},      {"hidden_size", 128},        {"num_hidden_layers", 2},
                          {"num_attention_heads", 4},     {"num_key_value_heads", 2},  {"intermediate_size", 160},
                          {"vocab_size", 300},            {"max_position_embeddings", 64},
                          {"num_local_experts", 4},       {"num_experts_per_tok", 2},  {"tie_word_embeddings", false}};
    return model_from_hf_config(cfg, "gpu-mixtral");
}

struct StepBounds {
    double loss_rtol, elem_rtol, elem_atol, tensor_l2, total_l2;  // elem_rtol 0: no element bound
};

// One step's gradients on the device against the host executor of the same program fed the
// device's initial weights and the same synthetic tokens (test_gpu_fp8.cpp's pattern).
void expect_step_matches_host(const Plan& p, const StepBounds& bd) {
    const ModelConfig m = gpu_mixtral();
    RunOptions o;
    o.seed = 99;
    const StepGradients dev = capture_step_gradients(m, p, o);
    const Program P = build_program(m, p);
    ASSERT_EQ(dev.gradients.size(), static_cast<std::size_t>(P.param_elements));
    HostRunner host(P, o.seed);
    host.params = dev.weights;
    DryBackend backend;
    TrackingAllocator alloc(backend);
    BufferTable table;
    walk(P, P.setup, alloc, table, &host, "set-up");
    walk(P, P.step, alloc, table, &host, "step", 1);
    const std::vector<double>& g = host.buffer(P.optimizer_grads());
    const double loss = host.loss_sum / static_cast<double>(P.dims.rows * P.dims.grad_acc);
    const std::string what = to_flags(p);
    EXPECT_NEAR(dev.loss, loss, bd.loss_rtol * loss) << what;
    double d2_all = 0, r2_all = 0, worst_l2 = 0;
    for (const ParamSpec& ps : P.params) {
        double scale = 0, d2 = 0, r2 = 0, worst = 0;
        for (std::int64_t i = 0; i < ps.numel(); ++i)
            scale = std::max(scale, std::abs(g[static_cast<std::size_t>(ps.offset + i)]));
        const double tol = bd.elem_atol + bd.elem_rtol * scale;
        std::size_t bad = 0;
        for (std::int64_t i = 0; i < ps.numel(); ++i) {
            const auto at = static_cast<std::size_t>(ps.offset + i);
            const double e = std::abs(dev.gradients[at] - g[at]);
            if (bd.elem_rtol > 0 && !(e <= tol)) ++bad;  // NaN counts as bad
            worst = std::max(worst, std::isnan(e) ? INFINITY : e);
            d2 += e * e;
            r2 += g[at] * g[at];
        }
        EXPECT_EQ(bad, 0u) << what << ": " << ps.name << ": " << bad << " of " << ps.numel() << " off; worst " << worst
                           << " > tol " << tol;
        if (r2 > 0) {
            const double rel = std::sqrt(d2 / r2);
            worst_l2 = std::max(worst_l2, rel);
            EXPECT_LE(rel, bd.tensor_l2) << what << ": " << ps.name << ": relative 2-norm error";
        }
        d2_all += d2;
        r2_all += r2;
    }
    const double total = std::sqrt(d2_all / r2_all);
    EXPECT_LE(total, bd.total_l2) << what << ": all parameters' relative 2-norm error";
    std::printf("%s: loss %.6f (host %.6f), worst per-tensor relative 2-norm error %.3g, all parameters %.3g\n",
                what.c_str(), dev.loss, loss, worst_l2, total);
}

// fp32: GpuGradients.Fp32MatchesTheCpuReferenceForEveryRecomputeAndAttention runs a Mixtral-shaped
// model against the whole-model reference. In bf16 a token whose top-k logits nearly tie may pick
// another expert on the device than in double, so the element bound is dropped here.
TEST(GpuMoe, Bf16StepGradientsMatchTheHostExecutorWithinBf16Bounds) {
    PF_REQUIRE_GPU();
    constexpr StepBounds kBf16{1e-2, 0, 0, 0.25, 0.1};  // no element bound: see the header
    expect_step_matches_host(step_plan(Precision::bf16_mixed, Recompute::none, AttentionKind::flash, 1), kBf16);
    expect_step_matches_host(step_plan(Precision::bf16_mixed_fp32_grads, Recompute::full, AttentionKind::flash, 2), kBf16);
    // fp8-mixed: the attention's GEMMs in fp8 (the host emulates the same casts), the experts bf16.
    expect_step_matches_host(step_plan(Precision::fp8_mixed, Recompute::selective, AttentionKind::flash, 1), kBf16);
}

}  // namespace
}  // namespace preflight::runtime
