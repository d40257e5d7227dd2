// Sliding-window attention in the runtime (Mistral's and Phi-3's every layer; Dims::window):
//  - the program carries the model's window when it is narrower than the sequence, and none else;
//  - the program, run on the host in double, gives the whole-model reference's loss and gradients
//    (flash and eager attention, every recompute mode, three recipes), and the window changes them;
//  - tensor-, context- and pipeline-parallel ranks match one GPU through the window;
//  - the dry runs of Phi-3-mini-4k at 4,096 tokens and Mistral-7B at 8,192 (past their windows)
//    equal the preflight-runtime profile's peak to the byte (a window keeps no extra tensor).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "catalog_fixture.hpp"
#include "dry_run_compare.hpp"
#include "host_parity.hpp"
#include "preflight/runtime/reference_model.hpp"

namespace preflight::runtime {
namespace {

using Vec = std::vector<double>;

// Mistral-shaped: 4 query heads on 2 key/value heads of 4, SwiGLU of 24, a window of `window` keys
// (0: the config sets none).
ModelConfig micro_mistral(std::int64_t window) {
    nlohmann::json cfg = {{"model_type", "mistral"},     {"hidden_size", 16},        {"num_hidden_layers", 2},
                          {"num_attention_heads", 4},    {"num_key_value_heads", 2}, {"intermediate_size", 24},
                          {"vocab_size", 300},           {"max_position_embeddings", 32}};
    if (window > 0) cfg["sliding_window"] = window;
    return model_from_hf_config(cfg, "mistral-window-" + std::to_string(window));
}

TEST(SlidingWindowProgram, DimsCarryAWindowNarrowerThanTheSequence) {
    Plan p = test_support::micro_plan(1, 1, 0, Precision::bf16_mixed);  // seq 6
    EXPECT_EQ(build_program(micro_mistral(3), p).dims.window, 3);
    EXPECT_EQ(build_program(micro_mistral(6), p).dims.window, 0);  // spans the sequence: masks nothing
    EXPECT_EQ(build_program(micro_mistral(0), p).dims.window, 0);
    p.tp = 2;
    p.cp = 2;
    p.seq = 8;  // a cp rank holds 4 tokens, at positions of the whole 8: the window compares positions
    EXPECT_EQ(build_program(micro_mistral(5), p, 1).dims.window, 5);
}

TEST(SlidingWindowProgram, HostExecutionGivesTheReferenceGradients) {
    int cases = 0;
    const ModelConfig m = micro_mistral(2);
    for (const Plan& p : test_support::single_gpu_matrix()) {
        const Program P = build_program(m, p);
        ASSERT_EQ(P.dims.window, 2);
        test_support::expect_host_matches_reference(P, m.name + " " + to_flags(p));
        ++cases;
    }
    EXPECT_EQ(cases, 3 * 2 * 3);
    // The window is applied: the same parameters without it give another loss.
    const Plan p = test_support::micro_plan(1, 1, 0, Precision::fp32);
    const Program windowed = build_program(micro_mistral(2), p), whole = build_program(micro_mistral(0), p);
    const Vec params = ref::random_params(windowed, 5, 0.4);
    const double a = test_support::host_step_loss(windowed, params).loss, b = test_support::host_step_loss(whole, params).loss;
    EXPECT_GT(std::abs(a - b), 1e-6 * b) << "window 2: " << a << ", none: " << b;
}

// dp 2 x tp 2 with sequence parallelism under ZeRO-1; cp 2 over 8 tokens in 4 chunks of 2, where a
// window of 3 keys reaches across chunks the other rank holds; a pipeline of 2.
TEST(SlidingWindowParity, ParallelRanksMatchOneGpu) {
    struct Case {
        const char* what;
        std::int64_t window;
        Plan plan;
    };
    std::vector<Case> cases;
    Plan tp = test_support::micro_plan(2, 2, 1, Precision::bf16_mixed_fp32_grads);
    tp.sp = true;
    cases.push_back({"dp 2 tp 2 sp", 3, tp});
    Plan cp = test_support::micro_plan(1, 1, 0, Precision::bf16_mixed_fp32_grads);
    cp.cp = 2;
    cp.seq = 8;
    cases.push_back({"cp 2", 3, cp});
    Plan pp = test_support::micro_plan(1, 1, 0, Precision::bf16_mixed_fp32_grads);
    pp.pp = 2;
    pp.grad_acc = 4;
    cases.push_back({"pp 2", 2, pp});
    for (const Case& c : cases) {
        const test_support::Worst w = test_support::compare(micro_mistral(c.window), c.plan, 2);
        EXPECT_LE(w.loss, 1e-9) << c.what;
        EXPECT_LE(w.param, 1e-9) << c.what;
        std::printf("window %lld, %s vs one GPU, 2 steps: worst loss %.2e, parameter %.2e\n",
                    static_cast<long long>(c.window), c.what, w.loss, w.param);
    }
}

// Phi-3-mini-4k (a window of 2,047 keys, every layer) at its 4,096 tokens, and Mistral-7B (4,096 keys)
// at 8,192: the dry run's peak equals the planner's to the byte, for flash and eager attention.
TEST(SlidingWindowDryRun, PastTheWindowEqualsThePlanner) {
    int plans = 0;
    for (const auto& [name, seq] : {std::pair<const char*, std::int64_t>{"phi-3-mini-4k", 4096}, {"mistral-7b", 8192}})
        for (auto at : {AttentionKind::flash, AttentionKind::eager})
            for (Recompute rc : {Recompute::none, Recompute::selective}) {
                const ModelConfig m = test::catalog_model(name);
                Plan p;
                p.seq = seq;
                p.mbs = 1;
                p.tp = 8;
                p.sp = true;
                p.attention = at;
                p.recompute = rc;
                p.precision = Precision::bf16_mixed;
                ASSERT_GT(p.seq, m.sliding_window);
                const Program P = build_program(m, p, 0);
                EXPECT_EQ(P.dims.window, m.sliding_window) << name;
                const test_support::Compared c = test_support::compare_with_planner(m, p, 0);
                EXPECT_EQ(c.dry, c.planned) << name << " " << to_flags(p) << ": dry run peak at " << c.where;
                ++plans;
            }
    EXPECT_EQ(plans, 2 * 2 * 2);
}

}  // namespace
}  // namespace preflight::runtime
