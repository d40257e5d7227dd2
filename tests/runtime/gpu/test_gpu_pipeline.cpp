// Pipeline parallelism (1F1B, and interleaved 1F1B) on the device. Label: gpu; skips without a device.
//  - loopback parity: pp 2 and 4, alone and with dp 2 x tp 2, tied (GPT-2 style) and untied
//    (Llama), also ZeRO-2 at dp 2 and ZeRO-3 at dp 2 x tp 2 (every micro-batch reduce-scattered; a
//    tied embedding's unit once, after its copies are summed), against one GPU running the same global batch, 3 steps; bounds as the data-parallel
//    test derives them (test_gpu_data_parallel.cpp): fp32 1e-5, bf16-mixed 1e-3 of the loss and
//    2^-8 of the parameters' norm (the stages run
//    the same kernels on the same micro-batches; only the tied embedding's two gradient copies
//    are summed in another order);
//  - an emulated stage (every send going nowhere, every receive zeros) tracks the peak of its
//    dry run to the byte, and only the last stage reports a loss; an interleaved stage whose
//    steady state repeats runs its arena's bands.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "gpu_util.hpp"
#include "parity.hpp"
#include "../pipeline_support.hpp"
#include "preflight/runtime/arena.hpp"
#include "preflight/runtime/device.hpp"
#include "preflight/runtime/walker.hpp"

namespace preflight::runtime {
namespace {

using namespace test;

// A pipeline plan (seq 64, mbs 2) on the loopback group against one GPU, 3 steps, within the
// data-parallel test's bounds; `schedule`: its --pp-schedule and --vpp.
void expect_loopback_parity(const ModelConfig& m, std::int64_t pp, std::int64_t ga, std::int64_t dp, std::int64_t tp,
                            int zero, Precision pr, PpSchedule schedule = PpSchedule::one_f_one_b, std::int64_t vpp = 1) {
    const int steps = 3;
    Plan p = test_support::pipeline_plan(pp, ga, dp, zero);
    p.seq = 64;
    p.pp_schedule = schedule;
    p.vpp = vpp;
    p.tp = tp;
    p.sp = tp > 1;
    p.precision = pr;
    const Parity r = parity(m, p, steps);
    const bool fp32 = pr == Precision::fp32;
    const std::string what = m.name + " " + to_flags(p);
    std::printf("loopback parity %-120s loss %.2e  params L2 %.2e  max %.2e\n", what.c_str(), r.loss, r.param_l2,
                r.param_max);
    EXPECT_LE(r.loss, fp32 ? 1e-5 : 1e-3) << what;
    EXPECT_LE(r.param_l2, fp32 ? 1e-5 : kBf16ParamL2) << what;
    EXPECT_LE(r.param_max, 2 * RunOptions{}.hyper.lr * steps) << what;
}

TEST(GpuPipeline, LoopbackParity) {
    PF_REQUIRE_GPU();
    for (const ModelConfig& m : {dp_llama(4), dp_gpt(4)})
        for (auto [pp, ga, dp, tp, zero] : {std::tuple{2, 3, 1, 1, 0}, std::tuple{4, 6, 1, 1, 0}, std::tuple{2, 4, 2, 2, 1},
                                            std::tuple{2, 4, 2, 1, 2}, std::tuple{2, 4, 2, 2, 3}})
            for (Precision pr : {Precision::fp32, Precision::bf16_mixed}) expect_loopback_parity(m, pp, ga, dp, tp, zero, pr);
}

TEST(GpuPipeline, AnEmulatedStagesTrackedPeakEqualsItsDryRun) {
    PF_REQUIRE_GPU();
    const GpuSpec gpu = preflight::test::catalog_gpu("h100-sxm-80gb");
    for (std::int64_t stage : {0, 1, 3}) {
        Plan p;
        p.seq = 64;
        p.mbs = 2;
        p.pp = 4;
        p.grad_acc = 6;
        RunOptions o;
        o.steps = 2;
        o.warmup = 1;
        o.rank = stage;
        const RunReport r = run_on_device(dp_gpt(4), gpu, p, o);
        ASSERT_EQ(r.status, "ok") << (r.failure ? r.failure->message : "");
        EXPECT_EQ(r.parallel.backend, "emulated");
        EXPECT_EQ(r.parallel.pp_rank, stage);
        EXPECT_EQ(r.measured.tracked_peak_bytes, dry_run(build_program(dp_gpt(4), p, stage), 1, false).peak_bytes);
        EXPECT_EQ(r.measured.tracked_peak_bytes, r.predicted.tracked_peak_bytes) << "stage " << stage;
        EXPECT_EQ(r.measured.losses.empty(), stage != 3);
        for (double l : r.measured.losses) EXPECT_TRUE(std::isfinite(l));
        std::printf("emulated stage %lld of 4: tracked %lld B, step %.4f s\n", static_cast<long long>(stage),
                    static_cast<long long>(r.measured.tracked_peak_bytes), r.measured.step_time_s.value_or(-1));
    }
}

// The interleaved schedule (since 2026-11-29): its grouped exchanges of up to two sends and two
// receives around the ring of stages, on the loopback group; the same bounds as 1F1B's.
TEST(GpuPipeline, InterleavedLoopbackParity) {
    PF_REQUIRE_GPU();
    for (const ModelConfig& m : {dp_llama(8), dp_gpt(8)})
        for (auto [pp, vpp, ga, dp, tp, zero] : {std::tuple{2, 2, 4, 1, 1, 0}, std::tuple{4, 2, 4, 1, 1, 0},
                                                 std::tuple{2, 4, 2, 2, 2, 1}, std::tuple{2, 2, 4, 2, 1, 2}})
            for (Precision pr : {Precision::fp32, Precision::bf16_mixed})
                expect_loopback_parity(m, pp, ga, dp, tp, zero, pr, PpSchedule::interleaved, vpp);
}

// At 64 micro-batches the steady state repeats (13 runs of it) and stage 0's arena holds its
// stashed activations in bands (arena.hpp ArenaBand), whose slots the device walk hands out
// lowest free first on every run: the run must fit the planned arena and track its dry run.
TEST(GpuPipeline, AnEmulatedInterleavedStagesTrackedPeakEqualsItsDryRun) {
    PF_REQUIRE_GPU();
    const GpuSpec gpu = preflight::test::catalog_gpu("h100-sxm-80gb");
    for (std::int64_t grad_acc : {4, 64})
        for (std::int64_t stage : {0, 1}) {
            Plan p;
            p.seq = 64;
            p.mbs = 2;
            p.pp = 2;
            p.vpp = 2;
            p.pp_schedule = PpSchedule::interleaved;
            p.grad_acc = grad_acc;
            RunOptions o;
            o.steps = 2;
            o.warmup = 1;
            o.rank = stage;
            const Program prog = build_program(dp_llama(8), p, stage);
            const ArenaPlan arena = plan_arena(prog);
            if (grad_acc == 64 && stage == 0) EXPECT_FALSE(arena.bands.empty());
            const RunReport r = run_on_device(dp_llama(8), gpu, p, o);
            ASSERT_EQ(r.status, "ok") << (r.failure ? r.failure->message : "");
            EXPECT_EQ(r.measured.tracked_peak_bytes, dry_run(prog, 1, false).peak_bytes);
            EXPECT_EQ(r.measured.tracked_peak_bytes, r.predicted.tracked_peak_bytes) << "stage " << stage;
            EXPECT_EQ(r.measured.arena_bytes, arena.arena_bytes);
            EXPECT_EQ(r.measured.losses.empty(), stage != 1);
            for (double l : r.measured.losses) EXPECT_TRUE(std::isfinite(l));
        }
}

}  // namespace
}  // namespace preflight::runtime
