// The ranks of a plan (loopback ranks in threads, in double) against one GPU running the same
// global batch (single_gpu_plan) from the same parameters: the worst relative loss and parameter
// differences after `steps` optimizer steps. Shared by the context-parallel and MoE tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "preflight/runtime/host_runner.hpp"
#include "preflight/runtime/reference_model.hpp"

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

}  // namespace preflight::runtime::test_support
