// The ranks of a plan (loopback ranks in threads, in double) against one GPU running the same
// global batch (single_gpu_plan) from the same parameters: the worst relative loss and parameter
// differences after `steps` optimizer steps. Shared by the context-parallel and MoE tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "preflight/runtime/host_runner.hpp"
#include "preflight/runtime/reference_model.hpp"
#include "preflight/runtime/walker.hpp"

namespace preflight::runtime::test_support {

struct Worst {
    double loss = 0, param = 0;
};

// The plan's dp x tp x pp x cp ranks against one GPU with dp x grad_acc micro-batches of whole
// sequences, `steps` optimizer steps from the same parameters.
inline Worst compare(const ModelConfig& m, const Plan& multi, int steps) {
    const Plan single = single_gpu_plan(multi);
    const Program whole = build_program(m, single, 0);
    std::vector<Program> ranks;
    for (std::int64_t r = 0; r < multi.gpus(); ++r) ranks.push_back(build_program(m, multi, r));
    const std::vector<double> init = ref::random_params(whole, 5, 0.4);
    const std::vector<RankResult> a = run_host_ranks(whole, {whole}, init, 77, steps);
    const std::vector<RankResult> b = run_host_ranks(whole, ranks, init, 77, steps);
    Worst w;
    for (int s = 0; s < steps; ++s) {  // the global loss: the mean over the loss-holding ranks (equal-sized)
        double sum = 0;
        int n = 0;
        for (std::size_t r = 0; r < ranks.size(); ++r)
            if (ranks[r].dims.last_stage) {
                sum += b[r].losses[static_cast<std::size_t>(s)];
                ++n;
            }
        const double want = a[0].losses[static_cast<std::size_t>(s)];
        w.loss = std::max(w.loss, std::abs(sum / n - want) / want);
    }
    double scale = 0, moved = 0;
    for (std::size_t i = 0; i < b[0].updated.size(); ++i) {
        w.param = std::max(w.param, std::abs(b[0].updated[i] - a[0].updated[i]));
        scale = std::max(scale, std::abs(a[0].updated[i]));
        moved = std::max(moved, std::abs(a[0].updated[i] - init[i]));
    }
    EXPECT_GT(moved, 1e-4) << "the optimizer did not move the parameters";
    w.param /= scale;
    return w;
}

// The micro plans of the host parity tests: seq 6, mbs 2, 2 micro-batches, dp x tp ranks under ZeRO `zero`.
inline Plan micro_plan(std::int64_t tp, std::int64_t dp, int zero, Precision pr) {
    Plan p;
    p.seq = 6;
    p.mbs = 2;
    p.tp = tp;
    p.dp = dp;
    p.grad_acc = 2;
    p.zero = static_cast<ZeroStage>(zero);
    p.precision = pr;
    return p;
}

// The single-GPU matrix of the host parity tests: micro_plan(1, 1, 0) under every recompute mode,
// both attention kinds and three recipes (fp32, bf16-mixed, bf16-mixed with fp32 gradients).
inline std::vector<Plan> single_gpu_matrix() {
    std::vector<Plan> out;
    for (auto rc : all_recomputes())
        for (auto at : {AttentionKind::flash, AttentionKind::eager})
            for (auto pr : {Precision::fp32, Precision::bf16_mixed, Precision::bf16_mixed_fp32_grads}) {
                Plan p = micro_plan(1, 1, 0, pr);
                p.recompute = rc;
                p.attention = at;
                out.push_back(p);
            }
    return out;
}

// One step of a single-GPU program on the host (HostRunner seed `seed`: the synthetic tokens) from
// `params`: the mean loss per token and the gradients the optimizer reads.
struct HostLoss {
    double loss = 0;
    std::vector<double> grads;
};
inline HostLoss host_step_loss(const Program& P, const std::vector<double>& params, std::uint64_t seed = 77) {
    HostRunner host(P, seed);
    host.params = params;
    DryBackend backend;
    TrackingAllocator alloc(backend);
    BufferTable table;
    walk(P, P.setup, alloc, table, &host, "set-up");
    walk(P, P.step, alloc, table, &host, "step", 1);
    HostLoss r;
    r.grads = host.buffer(P.optimizer_grads());
    r.loss = host.loss_sum / static_cast<double>(P.dims.rows * P.dims.grad_acc);
    walk(P, P.teardown, alloc, table, &host, "teardown");
    return r;
}

// host_step_loss from ref::random_params(P, 5, 0.4) against the whole-model reference from the same
// parameters: the mean loss within 1e-12 and every gradient within 1e-12 of the largest (the same
// double arithmetic in another order), none NaN (buffers are NaN-poisoned, so a NaN means a dead
// buffer was read). Returns the reference gradients.
inline std::vector<double> expect_host_matches_reference(const Program& P, const std::string& what) {
    const std::vector<double> params = ref::random_params(P, 5, 0.4);
    const HostLoss host = host_step_loss(P, params);
    const std::vector<double>& got = host.grads;
    const double loss = host.loss;
    std::vector<double> want;
    const double want_loss = ref::model_loss(P, params, ref::synthetic_batches(P, 77, 1), &want);
    EXPECT_EQ(got.size(), want.size()) << what;
    if (got.size() != want.size()) return want;
    EXPECT_NEAR(loss, want_loss, 1e-12 * want_loss) << what;
    double worst = 0, gmax = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        if (std::isnan(got[i])) {
            ADD_FAILURE() << what << ": NaN gradient at " << i << " (a dead buffer was read)";
            return want;
        }
        worst = std::max(worst, std::abs(got[i] - want[i]));
        gmax = std::max(gmax, std::abs(want[i]));
    }
    EXPECT_LE(worst, 1e-12 * gmax) << what << ": worst " << worst << " of max " << gmax;
    return want;
}

// The whole-model reference's loss of model m under plan p, from the parameters and tokens
// expect_host_matches_reference uses (ref::random_params(P, 5, 0.4), synthetic batch 77): to tell
// two layer variants apart on the same weights.
inline double reference_loss(const ModelConfig& m, const Plan& p) {
    const Program P = build_program(m, p);
    return ref::model_loss(P, ref::random_params(P, 5, 0.4), ref::synthetic_batches(P, 77, 1), nullptr);
}

}  // namespace preflight::runtime::test_support
