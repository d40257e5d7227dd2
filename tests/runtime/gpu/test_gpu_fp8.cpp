// fp8-mixed on the device. Label: gpu; skips without a device.
//  - amax.cu and fp8_cast.cu against ref::quantize_fp8: the same fp32 scale and rounding, so every
//    byte decodes to the reference's value exactly, row-major and transposed, E4M3 and E5M2.
//  - cuBLASLt's fp8 GEMMs (forward with fast accumulation, data and weight gradients) against
//    the product of the dequantized operands in double: fp32 accumulation of exact fp8 products
//    (2^-24 relative per add) within 1e-4 of the output's scale; the forward's fast accumulation
//    (no periodic promotion) within 1e-2.
//  - A whole fp8 step's gradients against the host executor of the same program (HostRunner)
//    fed the device's weights: the device rounds activations to bf16, which moves the fp8 casts'
//    amax and ties a little: per-tensor relative 2-norm within 0.1, the loss within 1e-2.
//  - A device run's tracked peak equals its dry run, and so does an emulated ZeRO-3 rank's.
//  - Loopback data-parallel ranks (dp 2, ZeRO 0-3; ZeRO-3 casts each gathered layer after each
//    gather) against one GPU running the same micro-batches: the ranks cast the same weights and
//    micro-batches, so the bf16-mixed bounds hold (loss 1e-3, parameters 2^-8 in relative L2).
#include <gtest/gtest.h>

#include <cmath>

#include "catalog_fixture.hpp"
#include "gemm.cuh"
#include "gpu_util.hpp"
#include "kernels.cuh"
#include "parity.hpp"
#include "preflight/runtime/device.hpp"
#include "preflight/runtime/host_runner.hpp"
#include "preflight/runtime/reference.hpp"

namespace preflight::runtime {
namespace {

using namespace test;

// The value of an fp8 byte (E4M3: bias 7, no infinities; E5M2: bias 15).
double decode_fp8(std::uint8_t b, bool e5m2) {
    const int mbits = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
    const int e = (b >> mbits) & (e5m2 ? 0x1f : 0x0f), m = b & ((1 << mbits) - 1);
    const double sign = (b & 0x80) ? -1.0 : 1.0;
    if (e == 0) return sign * std::ldexp(m, 1 - bias - mbits);
    return sign * std::ldexp(1.0 + m / static_cast<double>(1 << mbits), e - bias);
}

std::vector<double> decode_all(const DeviceBuffer<std::uint8_t>& d, bool e5m2) {
    std::vector<std::uint8_t> h(d.size());
    PF_CUDA_CHECK(cudaMemcpy(h.data(), const_cast<DeviceBuffer<std::uint8_t>&>(d).get(), h.size(), cudaMemcpyDeviceToHost));
    std::vector<double> v(h.size());
    for (std::size_t i = 0; i < h.size(); ++i) v[i] = decode_fp8(h[i], e5m2);
    return v;
}

}  // namespace

namespace test {
template <>
inline std::uint8_t from_d<std::uint8_t>(double) { return 0; }
inline double to_d(std::uint8_t x) { return x; }
}  // namespace test

namespace {

// Shapes for both kernels (fp8_cast.cu): runs of 8 on every row and column take the 64 x 64
// vector tiles (whole tiles, a partial last tile, many blocks), the others the 32 x 32 scalar ones.
TEST(GpuFp8, CastMatchesTheReferenceRowMajorAndTransposed) {
    PF_REQUIRE_GPU();
    for (const bool e5m2 : {false, true})
        for (auto [rows, cols, ld] : {std::tuple{64, 48, 48}, std::tuple{37, 100, 128}, std::tuple{136, 200, 256},
                                      std::tuple{1024, 3072, 3072}, std::tuple{40, 64, 72}}) {
            std::vector<double> x = rounded<cuda::bf16>(randn(static_cast<std::size_t>(rows * ld), 3, e5m2 ? 1e-3 : 2.0));
            DeviceBuffer<cuda::bf16> dx(x);
            DeviceBuffer<float> slot(2);
            DeviceBuffer<std::uint8_t> row(static_cast<std::size_t>(rows * cols)), col(static_cast<std::size_t>(rows * cols));
            cuda::launch_amax<cuda::bf16>(dx.get(), rows, cols, ld, slot.get(), nullptr);
            cuda::launch_fp8_cast<cuda::bf16>(dx.get(), rows, cols, ld, slot.get(), e5m2, row.get(), col.get(), nullptr);
            std::vector<double> dense;
            for (int r = 0; r < rows; ++r)
                for (int c = 0; c < cols; ++c) dense.push_back(x[static_cast<std::size_t>(r * ld + c)]);
            const ref::Fp8Tensor want = ref::quantize_fp8(dense.data(), rows * cols, e5m2 ? ref::Fp8Format::e5m2 : ref::Fp8Format::e4m3);
            const std::vector<double> s = slot.download(), got = decode_all(row, e5m2), got_t = decode_all(col, e5m2);
            EXPECT_FLOAT_EQ(static_cast<float>(s[0]), static_cast<float>(want.amax));
            EXPECT_FLOAT_EQ(static_cast<float>(s[1]), static_cast<float>(want.scale_inv));
            std::size_t bad = 0;
            for (int r = 0; r < rows; ++r)
                for (int c = 0; c < cols; ++c) {
                    const double w = want.q[static_cast<std::size_t>(r * cols + c)];
                    bad += got[static_cast<std::size_t>(r * cols + c)] != w;
                    bad += got_t[static_cast<std::size_t>(c * rows + r)] != w;
                }
            EXPECT_EQ(bad, 0u) << (e5m2 ? "e5m2" : "e4m3") << " " << rows << "x" << cols;
            // Either copy alone: the same bytes.
            DeviceBuffer<std::uint8_t> row_only(static_cast<std::size_t>(rows * cols)), col_only(static_cast<std::size_t>(rows * cols));
            cuda::launch_fp8_cast<cuda::bf16>(dx.get(), rows, cols, ld, slot.get(), e5m2, row_only.get(), nullptr, nullptr);
            cuda::launch_fp8_cast<cuda::bf16>(dx.get(), rows, cols, ld, slot.get(), e5m2, nullptr, col_only.get(), nullptr);
            EXPECT_EQ(decode_all(row_only, e5m2), got);
            EXPECT_EQ(decode_all(col_only, e5m2), got_t);
        }
}

// One fp8 GEMM D = s_a s_b A B^T (A [M, K], B [N, K], both K-major) against the dequantized product.
void check_gemm(int M, int N, int K, bool fast) {
    std::vector<double> a = rounded<cuda::bf16>(randn(static_cast<std::size_t>(M * K), 7)),
                        b = rounded<cuda::bf16>(randn(static_cast<std::size_t>(N * K), 8, 0.05));
    DeviceBuffer<cuda::bf16> da(a), db(b);
    DeviceBuffer<float> sa(2), sb(2);
    DeviceBuffer<std::uint8_t> a8(static_cast<std::size_t>(M * K)), b8(static_cast<std::size_t>(N * K));
    cuda::launch_amax<cuda::bf16>(da.get(), M, K, K, sa.get(), nullptr);
    cuda::launch_fp8_cast<cuda::bf16>(da.get(), M, K, K, sa.get(), false, a8.get(), nullptr, nullptr);
    cuda::launch_amax<cuda::bf16>(db.get(), N, K, K, sb.get(), nullptr);
    cuda::launch_fp8_cast<cuda::bf16>(db.get(), N, K, K, sb.get(), true, b8.get(), nullptr, nullptr);
    DeviceBuffer<cuda::bf16> d(static_cast<std::size_t>(M * N));
    DeviceBuffer<std::uint8_t> ws(32 << 20);
    cuda::Gemm gemm(false);
    gemm.set_workspace(ws.get(), 32 << 20);
    cuda::GemmArgs g;
    g.trans_b = true;
    g.M = M, g.N = N, g.K = K;
    g.A = a8.get(), g.lda = K, g.fp8_a = cuda::GemmArgs::Fp8::e4m3, g.a_scale = sa.get() + 1;
    g.B = b8.get(), g.ldb = K, g.fp8_b = cuda::GemmArgs::Fp8::e5m2, g.b_scale = sb.get() + 1;
    g.D = d.get(), g.ldd = N, g.fast_accum = fast;
    gemm.run(g, nullptr);
    const std::vector<double> qa = decode_all(a8, false), qb = decode_all(b8, true), s1 = sa.download(), s2 = sb.download();
    std::vector<double> want(static_cast<std::size_t>(M * N));
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            double acc = 0;
            for (int k = 0; k < K; ++k) acc += qa[static_cast<std::size_t>(i * K + k)] * qb[static_cast<std::size_t>(j * K + k)];
            want[static_cast<std::size_t>(i * N + j)] = acc * s1[1] * s2[1];
        }
    expect_close(d.download(), want, fast ? 1e-2 : 1e-4 + 8e-3 /* the bf16 output's rounding */, "fp8 GEMM");
}

TEST(GpuFp8, CublasLtFp8GemmsMatchTheDequantizedProduct) {
    PF_REQUIRE_GPU();
    check_gemm(128, 96, 64, true);
    check_gemm(64, 256, 512, false);
}

ModelConfig fp8_llama() {
    nlohmann::json cfg = {{"model_type", "llama"},         {"hidden_size", 128},       {"num_hidden_layers", 2},
                          {"num_attention_heads", 4},       {"num_key_value_heads", 2}, {"intermediate_size", 160},
                          {"vocab_size", 300},              {"max_position_embeddings", 64},
                          {"tie_word_embeddings", false}};
    return model_from_hf_config(cfg, "fp8-llama");
}

TEST(GpuFp8, AStepsGradientsFollowTheHostExecutorOfTheSameProgram) {
    PF_REQUIRE_GPU();
    Plan p;
    p.seq = 32;
    p.mbs = 2;
    p.precision = Precision::fp8_mixed;
    RunOptions o;
    o.seed = 99;
    const StepGradients dev = capture_step_gradients(fp8_llama(), p, o);
    const Program P = build_program(fp8_llama(), p);
    HostRunner host(P, o.seed);
    host.params = dev.weights;
    DryBackend backend;
    TrackingAllocator alloc(backend);
    BufferTable table;
    walk(P, P.setup, alloc, table, &host, "set-up");
    walk(P, P.step, alloc, table, &host, "step", 1);
    const std::vector<double>& g = host.buffer(P.optimizer_grads());
    const double loss = host.loss_sum / static_cast<double>(P.dims.rows);
    EXPECT_NEAR(dev.loss, loss, 1e-2 * loss);
    for (const ParamSpec& ps : P.params) {
        double d2 = 0, r2 = 0;
        for (std::int64_t k = 0; k < ps.numel(); ++k) {
            const auto i = static_cast<std::size_t>(ps.offset + k);
            d2 += (dev.gradients[i] - g[i]) * (dev.gradients[i] - g[i]);
            r2 += g[i] * g[i];
        }
        if (r2 > 0) EXPECT_LE(std::sqrt(d2 / r2), 0.1) << ps.name;
    }
}

TEST(GpuFp8, ARunsTrackedPeakEqualsItsDryRun) {
    PF_REQUIRE_GPU();
    Plan p;
    p.seq = 64;
    p.mbs = 2;
    p.grad_acc = 2;
    p.precision = Precision::fp8_mixed;
    RunOptions o;
    o.steps = 3;
    o.warmup = 1;
    const RunReport r = run_on_device(fp8_llama(), preflight::test::catalog_gpu("h100-sxm-80gb"), p, o);
    ASSERT_EQ(r.status, "ok") << (r.failure ? r.failure->message : "");
    EXPECT_EQ(r.measured.tracked_peak_bytes, dry_run(build_program(fp8_llama(), p), 1, false).peak_bytes);
    for (double l : r.measured.losses) EXPECT_TRUE(std::isfinite(l));
    // An emulated ZeRO-3 rank: each layer's fp8 cache comes and goes with its gathers.
    p.dp = 2;
    p.zero = zero_weights;
    o.rank = 1;
    const RunReport z3 = run_on_device(fp8_llama(), preflight::test::catalog_gpu("h100-sxm-80gb"), p, o);
    ASSERT_EQ(z3.status, "ok") << (z3.failure ? z3.failure->message : "");
    EXPECT_EQ(z3.measured.tracked_peak_bytes, dry_run(build_program(fp8_llama(), p, 1), 1, false).peak_bytes);
    EXPECT_EQ(z3.measured.tracked_peak_bytes, z3.predicted.tracked_peak_bytes);
    for (double l : z3.measured.losses) EXPECT_TRUE(std::isfinite(l));
}

TEST(GpuFp8, LoopbackDataParallelRanksMatchOneGpuUnderEveryZeroStage) {
    PF_REQUIRE_GPU();
    const int steps = 3;
    const double lr = RunOptions{}.hyper.lr;
    for (int zero : {0, 1, 2, 3}) {
        Plan p;
        p.seq = 64;
        p.mbs = 2;
        p.dp = 2;
        p.zero = static_cast<ZeroStage>(zero);
        p.precision = Precision::fp8_mixed;
        const Parity r = parity(dp_llama(), p, steps);
        const std::string what = to_flags(p);
        std::printf("fp8 loopback parity %-100s loss %.2e  params L2 %.2e  max %.2e\n", what.c_str(), r.loss, r.param_l2,
                    r.param_max);
        EXPECT_LE(r.loss, 1e-3) << what;
        EXPECT_LE(r.param_l2, kBf16ParamL2) << what;
        EXPECT_LE(r.param_max, 2 * lr * steps) << what;
    }
}

}  // namespace
}  // namespace preflight::runtime
