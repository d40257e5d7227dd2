// Shared by the pipeline tests (1F1B and interleaved): their plan, whether a stage holds a tensor, and a
// plan's ranks on the host executor against one GPU running the same global batch.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "preflight/runtime/host_runner.hpp"
#include "preflight/runtime/program.hpp"
#include "preflight/runtime/reference_model.hpp"

namespace preflight::runtime::test_support {

// A pipeline plan of the tests: seq 128, mbs 2, 1F1B.
inline Plan pipeline_plan(std::int64_t pp, std::int64_t grad_acc, std::int64_t dp = 1, int zero = 0) {
    Plan p;
    p.seq = 128;
    p.mbs = 2;
    p.pp = pp;
    p.grad_acc = grad_acc;
    p.dp = dp;
    p.zero = static_cast<ZeroStage>(zero);
    return p;
}

inline bool has_tensor(const Program& P, const std::string& name) {
    for (const ParamSpec& ps : P.params)
        if (ps.name == name) return true;
    return false;
}

// The largest relative difference over `steps` steps: of the last stages' mean loss, and of any
// updated parameter (relative to the largest parameter).
struct Worst {
    double loss = 0, param = 0;
};

// The plan's ranks (loopback groups in threads) against one GPU running the same global batch,
// from the same parameters (ref::random_params, seed 5, scale 0.4) and data (seed 77).
inline Worst compare_with_one_gpu(const ModelConfig& m, const Plan& multi, int steps) {
    const Program whole = build_program(m, single_gpu_plan(multi));
    std::vector<Program> many;
    for (std::int64_t r = 0; r < multi.gpus(); ++r) many.push_back(build_program(m, multi, r));
    const std::vector<double> init = ref::random_params(whole, 5, 0.4);
    const std::vector<RankResult> a = run_host_ranks(whole, {whole}, init, 77, steps);
    const std::vector<RankResult> b = run_host_ranks(whole, many, init, 77, steps);
    Worst w;
    for (int s = 0; s < steps; ++s) {
        double mean = 0;
        int n = 0;
        for (std::size_t r = 0; r < many.size(); ++r)
            if (many[r].dims.last_stage) mean += b[r].losses[static_cast<std::size_t>(s)], ++n;
        mean /= n;
        const double want = a[0].losses[static_cast<std::size_t>(s)];
        w.loss = std::max(w.loss, std::abs(mean - want) / want);
    }
    double scale = 0;
    for (std::size_t i = 0; i < init.size(); ++i) {
        w.param = std::max(w.param, std::abs(b[0].updated[i] - a[0].updated[i]));
        scale = std::max(scale, std::abs(a[0].updated[i]));
    }
    w.param /= scale;
    return w;
}

}  // namespace preflight::runtime::test_support
