// Context parallelism on the device (runtime/src/program_cp.cpp): the cp flash kernels and the
// K|V moves against their CPU references, the ranks of cp plans on one GPU (loopback) against one
// GPU running whole sequences, and an emulated cp rank's tracked peak against its dry run.
// Label: gpu. Skips without a device.
#include <gtest/gtest.h>

#include <cstdio>

#include "gpu_util.hpp"
#include "kernels.cuh"
#include "parity.hpp"
#include "preflight/runtime/context_parallel.hpp"
#include "preflight/runtime/reference.hpp"
#include "preflight/runtime/walker.hpp"

namespace preflight::runtime {
namespace {

using namespace test;
using cuda::bf16;

template <class T>
class CpKernels : public ::testing::Test {};
using Types = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(CpKernels, Types);

// A rank's queries (its q|k|v rows) and the whole sequence's K|V in sequence order, random.
TYPED_TEST(CpKernels, FlashAttentionMatchesTheCpReference) {
    PF_REQUIRE_GPU();
    using T = TypeParam;
    // The last: a sliding window of 50 keys over the 4 x 40 positions (ranks' chunks of 20 each).
    for (auto [a, cp] : {std::pair{ref::AttnShape{2, 40, 4, 2, 64}, 2}, std::pair{ref::AttnShape{1, 36, 8, 2, 128}, 3},
                         std::pair{ref::AttnShape{1, 64, 2, 1, 32}, 4}, std::pair{ref::AttnShape{1, 40, 4, 2, 64, 1, 0, 50}, 4}})
        for (std::int64_t rank = 0; rank < cp; ++rank) {
            a.cp = cp;
            a.cp_rank = rank;
            const std::int64_t n = a.b * a.s * a.qkv_width(), no = a.b * a.s * a.heads * a.d;
            const std::int64_t nkv = a.b * cp * a.s * 2 * a.kv_width();
            const auto qkv = rounded<T>(randn(n, 13)), kv = rounded<T>(randn(nkv, 15)), dout = rounded<T>(randn(no, 14));
            DeviceBuffer<T> dq(qkv), dkv_in(kv), dout_(dout), out(no), dqkv(n), dkv(nkv);
            DeviceBuffer<float> lse(a.b * a.heads * a.s), dsum(a.b * a.heads * a.s);
            cuda::launch_flash_fwd_cp<T>(dq.get(), dkv_in.get(), out.get(), lse.get(), a.b, a.s, a.heads, a.kv_heads, a.d,
                                         cp, rank, a.window, nullptr);
            std::vector<double> o(no), l(a.b * a.heads * a.s), g(qkv), gkv(nkv);
            ref::attention_fwd_cp(qkv.data(), kv.data(), o.data(), l.data(), a);
            expect_close(out.download(), o, rtol<T>(), "cp flash fwd out");
            expect_close(lse.download(), l, 1e-4, "cp flash fwd lse", 1e-3);
            dqkv.upload(qkv);  // the kernel writes the Q columns only: the K|V columns keep these
            cuda::launch_flash_bwd_cp<T>(dq.get(), dkv_in.get(), out.get(), lse.get(), dout_.get(), dqkv.get(), dkv.get(),
                                         dsum.get(), a.b, a.s, a.heads, a.kv_heads, a.d, cp, rank, a.window, nullptr);
            ref::attention_bwd_cp(qkv.data(), kv.data(), dout.data(), g.data(), gkv.data(), a);
            expect_close(dqkv.download(), g, 2 * rtol<T>(), "cp flash bwd dq (K|V columns untouched)");
            expect_close(dkv.download(), gkv, 2 * rtol<T>(), "cp flash bwd dkv");
        }
}

TYPED_TEST(CpKernels, KvMovesMatchTheReference) {
    PF_REQUIRE_GPU();
    using T = TypeParam;
    ref::AttnShape a{2, 12, 4, 2, 8};
    a.cp = 3;
    a.cp_rank = 1;
    const std::int64_t rows = a.b * a.s, C = a.qkv_width(), W = 2 * a.kv_width(), all = a.cp * rows * W;
    const cuda::CpKvShape g{a.b, a.s, a.cp, a.cp_rank, C, a.heads * a.d, W};
    const auto qkv = rounded<T>(randn(rows * C, 3)), gathered = rounded<T>(randn(all, 4));
    DeviceBuffer<T> dq(qkv), dg(gathered), packed(rows * W), ordered(all), back(all), unpacked(qkv);
    std::vector<double> want_packed(rows * W), want_ordered(all), want_back(all), want_unpacked(qkv);
    cuda::launch_cp_kv<T>(dq.get(), packed.get(), cuda::CpKvMove::pack, g, nullptr);
    ref::cp_kv_pack(qkv.data(), want_packed.data(), a);
    EXPECT_EQ(packed.download(), want_packed);
    cuda::launch_cp_kv<T>(dg.get(), ordered.get(), cuda::CpKvMove::order, g, nullptr);
    ref::cp_kv_order(gathered.data(), want_ordered.data(), a);
    EXPECT_EQ(ordered.download(), want_ordered);
    cuda::launch_cp_kv<T>(ordered.get(), back.get(), cuda::CpKvMove::unorder, g, nullptr);
    EXPECT_EQ(back.download(), gathered);
    cuda::launch_cp_kv<T>(dg.get(), unpacked.get(), cuda::CpKvMove::unpack, g, nullptr);
    ref::cp_kv_unpack(gathered.data(), want_unpacked.data(), a);
    EXPECT_EQ(unpacked.download(), want_unpacked);
}

// The plan's ranks as threads on one GPU (loopback collectives) against one GPU with whole
// sequences: the bounds of the data- and tensor-parallel parity tests.
TEST(GpuContextParallel, LoopbackParity) {
    PF_REQUIRE_GPU();
    const int steps = 3;
    const double lr = RunOptions{}.hyper.lr;
    struct Case {
        std::int64_t cp, dp, tp;
        int zero;
        bool sp;
    };
    for (const Case& c : {Case{2, 1, 1, 0, false}, Case{4, 1, 1, 0, false}, Case{2, 2, 1, 1, false},
                          Case{2, 1, 2, 0, true}, Case{2, 2, 1, 3, false}})
        for (Precision pr : {Precision::fp32, Precision::bf16_mixed}) {
            Plan p;
            p.seq = 64;
            p.mbs = 2;
            p.grad_acc = 2;
            p.cp = c.cp;
            p.dp = c.dp;
            p.tp = c.tp;
            p.sp = c.sp;
            p.zero = static_cast<ZeroStage>(c.zero);
            p.precision = pr;
            const Parity r = parity(dp_llama(), p, steps);
            const bool fp32 = pr == Precision::fp32;
            const std::string what = to_flags(p);
            std::printf("cp loopback parity %-110s loss %.2e  params L2 %.2e  max %.2e\n", what.c_str(), r.loss,
                        r.param_l2, r.param_max);
            EXPECT_LE(r.loss, fp32 ? 1e-5 : 1e-3) << what;
            EXPECT_LE(r.param_l2, fp32 ? 1e-5 : kBf16ParamL2) << what;
            EXPECT_LE(r.param_max, 2 * lr * steps) << what;
        }
}

// A cp rank alone (emulated: it gathers its own K and V into every rank's chunk) holds what its
// dry run walks, and trains on finite numbers.
TEST(GpuContextParallel, AnEmulatedCpRanksTrackedPeakEqualsItsDryRun) {
    PF_REQUIRE_GPU();
    const GpuSpec gpu = preflight::test::catalog_gpu("h100-sxm-80gb");
    for (auto [cp, dp, zero] : {std::tuple{2, 1, 0}, std::tuple{4, 2, 1}}) {
        Plan p;
        p.seq = 64;
        p.mbs = 2;
        p.grad_acc = 2;
        p.cp = cp;
        p.dp = dp;
        p.zero = static_cast<ZeroStage>(zero);
        RunOptions o;
        o.steps = 2;
        o.warmup = 1;
        o.rank = p.gpus() - 1;
        const RunReport r = run_on_device(dp_llama(), gpu, p, o);
        ASSERT_EQ(r.status, "ok") << (r.failure ? r.failure->message : "");
        EXPECT_EQ(r.parallel.backend, "emulated");
        EXPECT_EQ(r.parallel.cp_rank, cp - 1);
        EXPECT_EQ(r.measured.attention_backend, "kernel");
        EXPECT_EQ(r.measured.tracked_peak_bytes, dry_run(build_program(dp_llama(), p, o.rank), 1, false).peak_bytes)
            << to_flags(p);
        EXPECT_EQ(r.measured.tracked_peak_bytes, r.predicted.tracked_peak_bytes) << to_flags(p);
        for (double l : r.measured.losses) EXPECT_TRUE(std::isfinite(l));
    }
}

}  // namespace
}  // namespace preflight::runtime
