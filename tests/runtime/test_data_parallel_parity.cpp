// Numerical parity of the data-parallel programs on the host (HostRunner, loopback ranks in
// threads): dp = N with ZeRO-k gives the loss and the updated parameters of one GPU running the
// same global batch as N x the accumulation, for k = 0..3, every precision recipe, tied and
// untied models, after 3 optimizer steps. The host computes in double, so the two differ only
// by the order of the gradient sums: 1e-9 relative is ample (the fp32 bound is 1e-5).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <tuple>

#include "catalog_fixture.hpp"
#include "preflight/runtime/host_runner.hpp"
#include "preflight/runtime/reference_model.hpp"

namespace preflight::runtime {
namespace {

using Vec = std::vector<double>;

ModelConfig micro_llama() { return preflight::test::llama_model(16, 2, 4, 2, 24, 13, 16); }  // untied, GQA
ModelConfig micro_gpt() { return preflight::test::gpt_model(16, 2, 2, 13, 16); }             // tied, learned positions

std::vector<Program> ranks_of(const ModelConfig& m, const Plan& p) {
    std::vector<Program> out;
    for (std::int64_t r = 0; r < p.dp * p.tp; ++r) out.push_back(build_program(m, p, r));
    return out;
}

struct Worst {
    double loss = 0, param = 0;
};

// One GPU with dp * grad_acc micro-batches against dp ranks with grad_acc each.
Worst compare(const ModelConfig& m, Plan multi, int steps) {
    Plan single = multi;
    single.grad_acc = multi.grad_acc * multi.dp;
    single.dp = 1;
    single.zero = zero_none;
    const std::vector<Program> one = ranks_of(m, single), many = ranks_of(m, multi);
    const Vec init = ref::random_params(one[0], 5, 0.4);
    const std::vector<RankResult> a = run_host_ranks(one[0], one, init, 77, steps);
    const std::vector<RankResult> b = run_host_ranks(one[0], many, init, 77, steps);
    Worst w;
    for (int s = 0; s < steps; ++s) {  // the global loss: the mean of the ranks' (equal-sized) losses
        double mean = 0;
        for (const RankResult& r : b) mean += r.losses[static_cast<std::size_t>(s)] / static_cast<double>(b.size());
        w.loss = std::max(w.loss, std::abs(mean - a[0].losses[static_cast<std::size_t>(s)]) / a[0].losses[static_cast<std::size_t>(s)]);
    }
    const Vec& got = b[0].updated;  // in one[0]'s layout
    double scale = 0, moved = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        w.param = std::max(w.param, std::abs(got[i] - a[0].updated[i]));
        scale = std::max(scale, std::abs(a[0].updated[i]));
        moved = std::max(moved, std::abs(a[0].updated[i] - init[i]));
    }
    EXPECT_GT(moved, 1e-4) << "the optimizer did not move the parameters";
    w.param /= scale;
    return w;
}

TEST(DataParallelParity, EveryZeroStageMatchesOneGpuRunningTheSameGlobalBatch) {
    int cases = 0;
    Worst worst;
    for (const ModelConfig& m : {micro_llama(), micro_gpt()})
        for (int zero : {0, 1, 2, 3})
            for (Precision pr : {Precision::fp32, Precision::bf16_mixed, Precision::bf16_mixed_fp32_grads, Precision::bf16})
                for (auto [dp, ga] : {std::pair{2, 1}, std::pair{3, 2}}) {
                    Plan p;
                    p.seq = 6;
                    p.mbs = 2;
                    p.dp = dp;
                    p.grad_acc = ga;
                    p.zero = static_cast<ZeroStage>(zero);
                    p.precision = pr;
                    const Worst w = compare(m, p, 3);
                    const std::string what = m.name + " " + to_flags(p);
                    EXPECT_LE(w.loss, 1e-9) << what;
                    EXPECT_LE(w.param, 1e-9) << what;
                    worst.loss = std::max(worst.loss, w.loss);
                    worst.param = std::max(worst.param, w.param);
                    ++cases;
                }
    std::printf("dp = N (ZeRO 0-3) vs one GPU, 3 steps, %d cases: worst loss %.2e, worst parameter %.2e (relative)\n",
                cases, worst.loss, worst.param);
    EXPECT_EQ(cases, 2 * 4 * 4 * 2);
}

TEST(DataParallelParity, SgdAndRecomputeAndEagerAttentionToo) {
    for (Recompute rc : all_recomputes())
        for (AttentionKind at : {AttentionKind::flash, AttentionKind::eager})
            for (Optimizer opt : {Optimizer::adamw, Optimizer::sgd}) {
                Plan p;
                p.seq = 6;
                p.mbs = 1;
                p.dp = 2;
                p.grad_acc = 2;
                p.zero = zero_weights;
                p.recompute = rc;
                p.attention = at;
                p.optimizer = opt;
                const Worst w = compare(micro_llama(), p, 2);
                EXPECT_LE(w.loss, 1e-9) << to_flags(p);
                EXPECT_LE(w.param, 1e-9) << to_flags(p);
            }
}

// A long accumulation without a pipeline holds four micro-batches' ops and runs the fourth again
// for the later ones (Program::repeat), each run on its own micro-batch's tokens: one GPU at 12
// micro-batches (micro-batch 4's ops run 9 times) equals dp 4 x 3 under ZeRO-0 (nothing repeated:
// the last micro-batch reduces) and dp 2 x 6 under ZeRO-2 (every micro-batch reduce-scatters, the
// fourth's ops run 3 times), over 2 steps. With each run's tokens those of micro-batch 4, the
// loss would differ by the data.
TEST(DataParallelParity, ARepeatedMicroBatchRunsOnEachMicroBatchsOwnTokens) {
    Plan one;
    one.seq = 6;
    one.mbs = 1;
    one.grad_acc = 12;
    EXPECT_EQ(build_program(micro_llama(), one).repeat.times, 9);
    for (auto [dp, ga, zero, times] : {std::tuple{4, 3, 0, 1}, std::tuple{2, 6, 2, 3}}) {
        Plan p = one;
        p.dp = dp;
        p.grad_acc = ga;
        p.zero = static_cast<ZeroStage>(zero);
        p.recompute = Recompute::selective;
        EXPECT_EQ(build_program(micro_llama(), p).repeat.times, times) << to_flags(p);
        const Worst w = compare(micro_llama(), p, 2);
        EXPECT_LE(w.loss, 1e-9) << to_flags(p);
        EXPECT_LE(w.param, 1e-9) << to_flags(p);
    }
}

// An emulated rank runs alone: its collectives are local (a mean over identical ranks is the
// value itself; a gather repeats its own chunk), so its step runs with finite numbers.
TEST(DataParallelParity, AnEmulatedRankRunsItsProgramAlone) {
    Plan p;
    p.seq = 6;
    p.mbs = 2;
    p.dp = 4;
    p.zero = zero_weights;
    const Program prog = build_program(micro_gpt(), p, 3);
    HostEmulatedRank comm(3, 4);
    HostRunner run(prog, 9, &comm);
    run.params = ref::random_params(prog, 5, 0.4);
    DryBackend backend;
    TrackingAllocator alloc(backend);
    BufferTable table;
    walk(prog, prog.setup, alloc, table, &run, "set-up");
    walk(prog, prog.step, alloc, table, &run, "step", 1);
    EXPECT_TRUE(std::isfinite(run.loss_sum));
    EXPECT_GT(run.loss_sum, 0);
    walk(prog, prog.teardown, alloc, table, &run, "teardown");
}

}  // namespace
}  // namespace preflight::runtime
