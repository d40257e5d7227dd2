// The dry run (the runtime's exact allocation behaviour) against the planner's
// prediction under the runtime profile: peak within 1 % over a grid of plans.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "catalog_fixture.hpp"
#include "dry_run_compare.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/runtime/runtime.hpp"
#include "preflight/runtime/walker.hpp"

namespace preflight::runtime {
namespace {

const GpuSpec& h100() {
    static const GpuSpec g = test::catalog_gpu("h100-sxm-80gb");
    return g;
}

struct GridResult {
    double max_error = 0;
    std::string worst;
    int plans = 0;
    std::map<PhaseKind, int> peak_phases;  // where the planner puts the peak
};

GridResult run_grid(const std::vector<std::string>& models, bool verbose) {
    GridResult g;
    for (const auto& name : models) {
        const ModelConfig m = test::catalog_model(name);
        for (std::int64_t seq : {512, 1024, 2048})
            if (seq <= m.max_positions)
            for (std::int64_t mbs : {1, 2, 4})
                for (std::int64_t ga : {1, 4})
                    for (auto rc : all_recomputes())
                        for (auto pr : {Precision::fp32, Precision::bf16_mixed, Precision::bf16_mixed_fp32_grads,
                                        Precision::bf16, Precision::fp8_mixed})
                            for (auto at : {AttentionKind::flash, AttentionKind::eager}) {
                                Plan p;
                                p.seq = seq;
                                p.mbs = mbs;
                                p.grad_acc = ga;
                                p.recompute = rc;
                                p.precision = pr;
                                p.attention = at;
                                const Program prog = build_program(m, p);
                                const DryRunResult d = dry_run(prog, 1, false);
                                MemoryOptions mo;
                                mo.profile = runtime_profile();
                                mo.overhead_bytes = 0;
                                const MemoryReport r = evaluate_memory(m, h100(), p, mo);
                                const double err = std::abs(static_cast<double>(d.peak_bytes - r.peak_bytes)) /
                                                   static_cast<double>(r.peak_bytes);
                                ++g.plans;
                                ++g.peak_phases[r.peak_phase.kind];
                                EXPECT_EQ(d.peak_phase, r.peak_phase.kind) << name;
                                const std::string label = name + " seq " + std::to_string(seq) + " mbs " +
                                                          std::to_string(mbs) + " ga " + std::to_string(ga) + " " +
                                                          std::string(to_string(rc)) + " " +
                                                          std::string(to_string(pr)) + " " +
                                                          std::string(to_string(at));
                                if (verbose && err > 1e-9)
                                    std::printf("%-70s dry %14lld planner %14lld err %.6f%% (dry peak at %s; planner %s)\n",
                                                label.c_str(), static_cast<long long>(d.peak_bytes),
                                                static_cast<long long>(r.peak_bytes), 100 * err, d.peak_where.c_str(),
                                                describe(r.peak_phase).c_str());
                                EXPECT_LT(err, 0.01) << label;
                                if (err >= g.max_error) {
                                    g.max_error = err;
                                    g.worst = label;
                                }
                            }
    }
    return g;
}

TEST(DryRun, PeakMatchesThePlannerWithinOnePercentOverTheGrid) {
    GridResult g = run_grid({"gpt2", "gpt2-medium", "llama-3.2-1b"}, std::getenv("PREFLIGHT_GRID_VERBOSE"));
    std::printf("dry run vs planner (runtime profile): %d plans, max |error| %.6f %% (%s)\n", g.plans,
                100 * g.max_error, g.worst.c_str());
    for (auto [k, n] : g.peak_phases) std::printf("  peak at %s: %d plans\n", std::string(to_string(k)).c_str(), n);
    EXPECT_GT(g.peak_phases[PhaseKind::output_loss], 0);
    EXPECT_GT(g.peak_phases[PhaseKind::backward], 0);
    EXPECT_EQ(g.plans, (2 + 2 + 3) * 3 * 2 * 3 * 5 * 2);  // gpt2 family: seq <= 1024 positions
}

// Eager attention's backward where a layer holds the peak (pipeline stage 0, no head): the softmax
// backward holds dP and dS beside d(attn out), then dQKV holds dS beside d(q|k|v), the wider below
// about 3 x head_dim tokens. Audit finding (2026-11-30): the planner counted neither dQKV's point
// (GPT-2 at seq 128: 196,608 B under) nor, without sequence parallelism, that d(attn out) is this
// tensor-parallel rank's heads only (a whole [s, b, h] over).
TEST(DryRun, EagerAttentionBackwardEqualsThePlannerToTheByte) {
    int walks = 0;
    for (const char* name : {"gpt2", "gpt2-medium", "llama-3.2-1b"})  // GQA in the last
        for (std::int64_t seq : {64, 128, 512})
            for (auto [tp, sp] : {std::pair{1, false}, std::pair{2, false}, std::pair{2, true}})
                for (Precision pr : {Precision::bf16_mixed, Precision::fp32}) {
                    Plan p;
                    p.seq = seq;
                    p.mbs = 2;
                    p.pp = 2;
                    p.tp = tp;
                    p.sp = sp;
                    p.precision = pr;
                    p.attention = AttentionKind::eager;
                    const test_support::Compared c = test_support::compare_with_planner(test::catalog_model(name), p, 0);
                    EXPECT_EQ(c.dry, c.planned) << name << " " << to_flags(p) << ": " << c.where;
                    ++walks;
                }
    EXPECT_EQ(walks, 3 * 3 * 3 * 2);
}

// With a small vocabulary the output layer's peak is the final norm's backward, after the logits
// went: the head's input gradient and the residual gradient (2 x 32,768 x 1,024 x 4 B in fp32) and
// the norm's row statistics (32,768 x 8 B). The planner counted the logits point only and was
// 16 B a token short at tp 2 (found by a review on 2026-11-30).
TEST(DryRun, FinalNormBackwardPeakEqualsThePlanner) {
    const ModelConfig m = test::llama_model(1024, 2, 8, 2, 2048, 256, 131072);
    int final_norm_peaks = 0;
    for (auto [tp, sp] : {std::pair{1, false}, std::pair{2, false}, std::pair{2, true}})
        for (Precision pr : {Precision::fp32, Precision::bf16_mixed}) {
            Plan p;
            p.seq = 32768;
            p.tp = tp;
            p.sp = sp;
            p.precision = pr;
            const test_support::Compared c = test_support::compare_with_planner(m, p, 0);
            EXPECT_EQ(c.dry, c.planned) << to_flags(p) << ": dry run peak at " << c.where;
            EXPECT_EQ(c.dry_phase, c.planned_phase) << to_flags(p) << ": dry run peak at " << c.where;
            final_norm_peaks += c.where.find("final norm bwd") != std::string::npos ? 1 : 0;
        }
    EXPECT_GE(final_norm_peaks, 1);
}

// Without sp, the q|k|v projection's input gradient [s, b, h] is computed beside d(q|k|v) and the
// residual gradient; with tp splitting q|k|v but not h, and a narrow MLP (ffn 64 of h 256), that
// point is the layer's widest and the walk peaks there: the planner counts it (a helper-70 audit
// found the runtime profile 7,936 B short on this dense shape at tp 2, ZeRO-3, fp32).
TEST(DryRun, QkvInputGradientPeakEqualsThePlanner) {
    const ModelConfig m = test::llama_model(256, 2, 8, 8, 64, 2048, 8192);
    int qkv_peaks = 0;
    for (std::int64_t tp : {1, 2, 4})
        for (Precision pr : {Precision::fp32, Precision::bf16_mixed})
            for (int zero : {0, 3}) {
                Plan p;
                p.seq = 16;
                p.tp = tp;
                p.dp = zero == 3 ? 2 : 1;
                p.zero = static_cast<ZeroStage>(zero);
                p.precision = pr;
                const test_support::Compared c = test_support::compare_with_planner(m, p, 0);
                EXPECT_EQ(c.dry, c.planned) << to_flags(p) << ": dry run peak at " << c.where;
                EXPECT_EQ(c.dry_phase, c.planned_phase) << to_flags(p) << ": dry run peak at " << c.where;
                qkv_peaks += c.where.find("qkv proj dgrad") != std::string::npos ? 1 : 0;
            }
    EXPECT_GE(qkv_peaks, 1);
}

TEST(DryRun, PersistentBytesAreTheModelStatesPlusWorkspace) {
    const ModelConfig m = test::catalog_model("gpt2");
    Plan p;
    p.seq = 1024;
    const Program prog = build_program(m, p);
    const DryRunResult d = dry_run(prog);
    // bf16-mixed AdamW: 2 + 2 + 4 + 8 bytes per (padded) parameter, plus workspace and scalars (no RoPE).
    EXPECT_EQ(d.persistent_bytes, 16 * prog.param_elements + kRuntimeGemmWorkspaceBytes + kRuntimeScalarsBytes);
    EXPECT_TRUE(d.leak_free);
}

TEST(DryRun, TimelineCoversOneStepAndItsMaximumIsThePeak) {
    const ModelConfig m = test::catalog_model("llama-3.2-1b");
    Plan p;
    p.seq = 512;
    p.grad_acc = 2;
    const Program prog = build_program(m, p);
    const DryRunResult d = dry_run(prog, 2, true);
    ASSERT_EQ(d.timeline.size(), prog.step.size());
    std::int64_t mx = 0;
    for (const auto& s : d.timeline) mx = std::max(mx, total(s.bytes));
    EXPECT_EQ(mx, d.peak_bytes);
    EXPECT_EQ(d.timeline.front().phase, PhaseKind::step_start);
    EXPECT_EQ(d.timeline.back().phase, PhaseKind::optimizer_step);
    EXPECT_EQ(total(d.timeline.back().bytes), d.persistent_bytes);
}

TEST(DryRun, TimelineKeepsTheFirstAndLastMicroBatchSoItsSizeDoesNotGrow) {
    // Was: one sample per op of every micro-batch (Llama-3-8B, 635 micro-batches, full
    // recompute: 616,587 samples, a 242 MB report).
    const ModelConfig m = test::catalog_model("llama-3.2-1b");
    Plan p;
    p.seq = 256;
    p.grad_acc = 2;
    const Program two = build_program(m, p);
    p.grad_acc = 64;
    const Program many = build_program(m, p);
    const DryRunResult d2 = dry_run(two, 1, true);
    const DryRunResult d64 = dry_run(many, 1, true);
    ASSERT_EQ(d2.timeline.size(), two.step.size());  // two micro-batches: every op
    ASSERT_EQ(d64.timeline.size(), d2.timeline.size());
    // The kept samples are micro-batches 1 and 64 with the same bytes as 1 and 2.
    for (std::size_t i = 0; i < d2.timeline.size(); ++i)
        ASSERT_EQ(d64.timeline[i].bytes, d2.timeline[i].bytes) << d64.timeline[i].label;
    EXPECT_NE(d64.timeline[d64.timeline.size() - 2].label.find("(micro-batch 64)"), std::string::npos)
        << d64.timeline[d64.timeline.size() - 2].label;
    EXPECT_EQ(d64.peak_bytes, d2.peak_bytes);
    EXPECT_EQ(d64.allocations_per_step, 32 * d2.allocations_per_step);  // the walk still visits every op
    RunOptions o;
    const RunReport r = dry_run_report(m, h100(), p, o);
    EXPECT_EQ(run_report_to_json(r)["timeline"]["omitted_micro_batches"], 62);
}

TEST(DryRun, ReportCarriesPredictionAndAgreement) {
    const ModelConfig m = test::catalog_model("gpt2");
    Plan p;
    p.seq = 1024;
    p.mbs = 4;
    RunOptions o;
    const RunReport r = dry_run_report(m, h100(), p, o);
    EXPECT_EQ(r.mode, "dry-run");
    // The runtime's own measured non-tensor memory (the spec's "runtime" block), not the generic 1 GiB.
    ASSERT_TRUE(h100().runtime.has_value());
    EXPECT_EQ(r.predicted.memory.at_peak.overhead, h100().runtime->overhead_bytes);
    EXPECT_EQ(r.predicted.tracked_peak_bytes, r.predicted.memory.peak_bytes - h100().runtime->overhead_bytes);
    EXPECT_LT(peak_relative_error(r), 0.01);
    EXPECT_FALSE(r.timeline.empty());
    EXPECT_GT(r.predicted.model_flops_per_step, 0);
}

}  // namespace
}  // namespace preflight::runtime

namespace preflight::runtime {
namespace {

// The preflight-runtime profile's peak for the plan, the overhead outside the tensors left out.
std::int64_t runtime_peak(const ModelConfig& m, const Plan& p) {
    MemoryOptions mo;
    mo.profile = runtime_profile();
    mo.overhead_bytes = 0;
    return evaluate_memory(m, h100(), p, mo).peak_bytes;
}

// fp8-mixed, where the peak is in a layer's backward at the casts of an output gradient (an
// MLP-heavy model with a small vocabulary): the up projection's and q|k|v's fp8 gradient copies
// are what the planner's runtime profile adds; with data parallelism and ZeRO 0-3 too (ZeRO-3:
// each layer's fp8 cache beside its gathered weights, from its cast to its release), and at tp 2
// with sequence parallelism (the gathered output gradients and their casts, the kept fp8 copy
// of every row of the norm outputs).
TEST(DryRun, Fp8PeaksAtTheGradientCastsMatchThePlanner) {
    int plans = 0, at_casts = 0;
    for (std::int64_t ffn : {128, 512, 2048, 8192})
        for (const bool llama : {true, false})
            for (auto rc : all_recomputes())
                for (auto at : {AttentionKind::flash, AttentionKind::eager})
                    for (int zero : {0, 2, 3})
                        for (std::int64_t tp : {1, 2}) {
                        const ModelConfig m = llama ? test::llama_model(256, 4, 4, 2, ffn, 1000, 1024)
                                                    : test::gpt_model(256, 4, 4, 1000, 1024);
                        ModelConfig mm = m;
                        if (!llama) mm.ffn_hidden = ffn;
                        Plan p;
                        p.seq = 512;
                        p.mbs = 4;
                        p.dp = zero > 0 ? 4 : 1;
                        p.tp = tp;
                        p.sp = tp > 1;
                        p.zero = static_cast<ZeroStage>(zero);
                        p.precision = Precision::fp8_mixed;
                        p.recompute = rc;
                        p.attention = at;
                        const DryRunResult d = dry_run(build_program(mm, p, p.gpus() - 1), 1, false);
                        EXPECT_EQ(d.peak_bytes, runtime_peak(mm, p)) << mm.name << " ffn " << ffn << " " << to_flags(p)
                                                                      << ": " << d.peak_where;
                        ++plans;
                        if (d.peak_where.find("proj dgrad") != std::string::npos) ++at_casts;
                    }
    EXPECT_EQ(plans, 4 * 2 * 3 * 2 * 3 * 2);
    EXPECT_GT(at_casts, 20);  // the grid reaches the casts' peak
}

// fp8 with sequence parallelism where the hidden width outweighs a rank's MLP slice (tp 4,
// Llama-3-70B's shape at tp 8 has it too): the peak is the row-parallel projection's gathered
// output gradient with its two fp8 casts beside its input gradient.
TEST(DryRun, Fp8SequenceParallelPeaksAtTheGatheredOutputGradientMatchThePlanner) {
    const ModelConfig m = test::llama_model(256, 4, 8, 4, 256, 1000, 1024);
    int plans = 0, at_row_parallel = 0;
    for (auto rc : all_recomputes())
        for (auto at : {AttentionKind::flash, AttentionKind::eager})
            for (auto [dp, zero] : {std::pair{1, 0}, std::pair{2, 1}, std::pair{2, 3}}) {
                Plan p;
                p.seq = 512;
                p.mbs = 4;
                p.tp = 4;
                p.sp = true;
                p.dp = dp;
                p.zero = static_cast<ZeroStage>(zero);
                p.precision = Precision::fp8_mixed;
                p.recompute = rc;
                p.attention = at;
                const DryRunResult d = dry_run(build_program(m, p, p.gpus() - 1), 1, false);
                EXPECT_EQ(d.peak_bytes, runtime_peak(m, p)) << to_flags(p) << ": " << d.peak_where;
                ++plans;
                if (d.peak_where.find("down proj") != std::string::npos) ++at_row_parallel;
            }
    EXPECT_EQ(plans, 3 * 2 * 3);
    EXPECT_GT(at_row_parallel, 0);
}

// `run` refuses a step over its work bounds naming --grad-acc max(2, pp) as holding the same
// per-GPU peak (runtime_support.cpp): micro-batches beyond those in flight reuse their buffers.
// Every stage's dry run at that count and at a larger one: the same peak, to the byte.
TEST(DryRun, MaxOfTwoAndPpMicroBatchesHoldTheStepsPeak) {
    const ModelConfig untied = test::llama_model(256, 8, 4, 2, 512, 1000, 1024);
    struct Case {
        ModelConfig m;
        Plan p;
    };
    auto plan = [](std::int64_t dp, std::int64_t tp, std::int64_t pp, int zero, Precision pr) {
        Plan p;
        p.seq = 256;
        p.mbs = 2;
        p.dp = dp;
        p.tp = tp;
        p.sp = tp > 1;
        p.pp = pp;
        p.zero = static_cast<ZeroStage>(zero);
        p.precision = pr;
        return p;
    };
    int compared = 0;
    for (const Case& c : {Case{test::catalog_model("gpt2"), plan(2, 1, 1, 1, Precision::bf16_mixed_fp32_grads)},
                          Case{test::catalog_model("gpt2"), plan(1, 2, 4, 0, Precision::bf16_mixed)},
                          Case{untied, plan(2, 1, 2, 2, Precision::fp8_mixed)},
                          Case{untied, plan(2, 2, 4, 3, Precision::bf16_mixed)},
                          Case{untied, plan(4, 2, 1, 0, Precision::fp8_mixed)}})
        for (std::int64_t stage = 0; stage < c.p.pp; ++stage) {
            const std::int64_t rank = stage * c.p.dp * c.p.tp;
            Plan at = c.p, more = c.p;
            at.grad_acc = std::max<std::int64_t>(2, c.p.pp);
            more.grad_acc = at.grad_acc + 7;
            EXPECT_EQ(dry_run(build_program(c.m, at, rank), 1, false).peak_bytes,
                      dry_run(build_program(c.m, more, rank), 1, false).peak_bytes)
                << c.m.name << " " << to_flags(at) << " stage " << stage;
            ++compared;
        }
    EXPECT_EQ(compared, 1 + 4 + 2 + 4 + 1);
}

}  // namespace
}  // namespace preflight::runtime
