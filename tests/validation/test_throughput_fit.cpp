// Step-time calibration on external runs: nanotron's stage split, folds, and that the fit
// recovers constants it generated its own data from.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "preflight/planner/catalog.hpp"
#include "preflight/validation/external_runs.hpp"
#include "preflight/validation/nelder_mead.hpp"
#include "preflight/validation/throughput_fit.hpp"

using namespace preflight;
using namespace preflight::validation;

namespace {
ModelConfig llama_1b_shape() {
    // The sweep's 1B: hidden 2048, 16 layers, 32 heads (MHA), ffn 8192, vocab 131072, tied.
    ModelConfig m;
    m.name = "1B";
    m.hidden = 2048;
    m.layers = 16;
    m.heads = 32;
    m.kv_heads = 32;
    m.head_dim = 64;
    m.ffn_hidden = 8192;
    m.vocab = 131072;
    m.max_positions = 4096;
    m.tied_embeddings = true;
    return m;
}
}  // namespace

TEST(ThroughputFit, NanotronStageSplitCountsTheOutputLayer) {
    // Layer cost 4*2048*2048 + 3*8192*2048 = 67,108,864; the head 131072*2048 = 268,435,456 =
    // exactly 4 layers, so the total is 20 layer-units. pp 2: the first stage closes once the
    // cumulative cost reaches 10 units (the sweep's measured split), after its 10th layer ->
    // 10 + (6 + head).
    const ModelConfig m = llama_1b_shape();
    EXPECT_EQ(nanotron_stage_layers(m, 2), (std::vector<std::int64_t>{10, 6}));
    // pp 4: thresholds 5, 10, 15 units -> stages close after layers 5, 10, 15.
    EXPECT_EQ(nanotron_stage_layers(m, 4), (std::vector<std::int64_t>{5, 5, 5, 1}));
    EXPECT_EQ(nanotron_stage_layers(m, 1), (std::vector<std::int64_t>{16}));
}

TEST(ThroughputFit, FoldsAreStableAndGroupWholeFamilies) {
    for (int k : {2, 5, 7}) {
        const int f = family_fold("8B/tp4/pp2", k);
        EXPECT_GE(f, 0);
        EXPECT_LT(f, k);
        EXPECT_EQ(f, family_fold("8B/tp4/pp2", k));
    }
    EXPECT_EQ(family_fold("anything", 1), 0);
}

TEST(ThroughputFit, RecoversTheConstantsThatMadeTheData) {
    // Synthetic "measurements" from known constants; the fit starts from the defaults and
    // must bring the held-out error close to zero.
    const GpuSpec base = load_gpu("h100-sxm-80gb", PREFLIGHT_TEST_DATA_DIR);
    GpuSpec truth = base;
    truth.efficiency = Efficiency{};
    truth.efficiency.gemm_max_fraction_of_peak = 0.55;
    truth.efficiency.layer_launch_overhead_s = 3e-3;
    truth.efficiency.inter_node_bus_efficiency = 0.4;
    std::vector<ThroughputSample> samples;
    const ModelConfig m = llama_1b_shape();
    for (std::int64_t tp : {1, 2, 4, 8, 16})
        for (std::int64_t pp : {1, 2, 4})
            for (std::int64_t mbs : {1, 4})
                for (std::int64_t dp : {2, 8}) {
                    ThroughputSample s;
                    s.family = "1B/tp" + std::to_string(tp) + "/pp" + std::to_string(pp);
                    s.model = m;
                    s.plan.seq = 4096;
                    s.plan.mbs = mbs;
                    s.plan.grad_acc = 8;
                    s.plan.dp = dp;
                    s.plan.tp = tp;
                    s.plan.pp = pp;
                    s.plan.sp = tp > 1;
                    s.plan.zero = ZeroStage{1};
                    s.plan.precision = Precision::bf16_mixed_fp32_grads;
                    s.options.breakdown = false;
                    s.measured_tokens_per_s_per_gpu = predicted_tokens_per_s_per_gpu(s, truth);
                    samples.push_back(s);
                }
    const ThroughputCv cv = cross_validate_throughput(samples, base, 3);
    EXPECT_EQ(cv.held_out.n, static_cast<int>(samples.size()));
    EXPECT_GT(cv.before.p50, 0.10);     // the defaults are off
    EXPECT_LT(cv.held_out.p50, 0.03);   // the fit is not
    EXPECT_LT(cv.held_out.p95, 0.10);
    EXPECT_NEAR(cv.full_fit.gemm_max_fraction_of_peak, 0.55, 0.05);
}

namespace {
// The sweep's 1B on one node, dp 8, ZeRO-1, at the given sequence length and micro-batch.
ThroughputSample one_node_sample(std::int64_t seq, std::int64_t mbs) {
    ThroughputSample s;
    s.family = "1B/tp1/pp1";
    s.model = llama_1b_shape();
    s.model.max_positions = 32768;
    s.plan.seq = seq;
    s.plan.mbs = mbs;
    s.plan.grad_acc = 4;
    s.plan.dp = 8;
    s.plan.zero = ZeroStage{1};
    s.plan.precision = Precision::bf16_mixed_fp32_grads;
    s.options.breakdown = false;
    return s;
}
}  // namespace

TEST(ThroughputFit, AttentionIsFittedOnlyWhenSequenceLengthsVary) {
    // "Measurements" from an attention kernel at 25 % of peak (the default is 40 %). At one
    // sequence length attention is a fixed share of the step and the fit cannot tell it from
    // the GEMMs: it leaves the constant where it started. Across lengths its share grows as
    // s^2 against s, and the fit finds it.
    const GpuSpec base = load_gpu("h100-sxm-80gb", PREFLIGHT_TEST_DATA_DIR);
    GpuSpec truth = base;
    truth.efficiency = Efficiency{};
    truth.efficiency.attention_fraction_of_peak = 0.25;
    GpuSpec start = base;
    start.efficiency = Efficiency{};
    auto fit_on = [&](const std::vector<std::int64_t>& seqs) {
        std::vector<ThroughputSample> samples;
        for (std::int64_t seq : seqs)
            for (std::int64_t mbs : {1, 2, 4}) {
                ThroughputSample s = one_node_sample(seq, mbs);
                s.measured_tokens_per_s_per_gpu = predicted_tokens_per_s_per_gpu(s, truth);
                samples.push_back(s);
            }
        std::vector<std::size_t> all(samples.size());
        for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
        return fit_step_constants(samples, all, start);
    };
    EXPECT_DOUBLE_EQ(fit_on({4096}).attention_fraction_of_peak, 0.40);
    EXPECT_NEAR(fit_on({2048, 8192, 32768}).attention_fraction_of_peak, 0.25, 0.03);
}

// `preflight calibrate` starts every constant it fits from the built-in default, and keeps the
// spec's own value of every constant the runs cannot show: the H100 spec's sourced
// FlashAttention-2 figure (0.31) on the nanotron sweep's single sequence length, and the
// fused-attention figure no fit touches. Resetting them to the defaults would silently undo them.
TEST(ThroughputFit, ARefitKeepsTheSpecsValuesOfConstantsTheRunsCannotShow) {
    GpuSpec spec = load_gpu("h100-sxm-80gb", PREFLIGHT_TEST_DATA_DIR);
    spec.efficiency.attention_fraction_of_peak = 0.33;
    spec.efficiency.fused_attention_fraction_of_peak = 0.5;
    spec.efficiency.fp8_gemm_max_fraction_of_peak = 0.45;
    GpuSpec truth = spec;
    truth.efficiency = Efficiency{};
    truth.efficiency.attention_fraction_of_peak = 0.25;
    auto cv_on = [&](const std::vector<std::int64_t>& seqs) {
        std::vector<ThroughputSample> samples;
        for (std::int64_t seq : seqs)
            for (std::int64_t mbs : {1, 2, 4}) {
                ThroughputSample s = one_node_sample(seq, mbs);
                s.family = "1B/seq" + std::to_string(seq) + "/mbs" + std::to_string(mbs);
                s.options.fused_attention = false;  // a FlashAttention-2 framework, as nanotron
                s.measured_tokens_per_s_per_gpu = predicted_tokens_per_s_per_gpu(s, truth);
                samples.push_back(s);
            }
        return cross_validate_throughput(samples, spec, 2).full_fit;
    };
    const Efficiency one = cv_on({4096});
    EXPECT_DOUBLE_EQ(one.attention_fraction_of_peak, 0.33);
    EXPECT_DOUBLE_EQ(one.fused_attention_fraction_of_peak, 0.5);
    EXPECT_DOUBLE_EQ(one.fp8_gemm_max_fraction_of_peak, 0.45);
    const Efficiency several = cv_on({2048, 8192, 32768});
    EXPECT_NEAR(several.attention_fraction_of_peak, 0.25, 0.03);  // fitted from the default
    EXPECT_DOUBLE_EQ(several.fused_attention_fraction_of_peak, 0.5);
}

TEST(ThroughputFit, ConstantsTheRunsCannotShowStayNearTheirDefaults) {
    // llm-foundry's A100-40GB rows run FSDP on 8-128 GPUs without tensor parallelism: their
    // collectives hide behind the compute, so the runs say almost nothing about the NVLink
    // or network efficiency. Fitted without a prior, collective_bus_efficiency ran to its
    // 0.10 floor (8x slower tensor-parallel collectives for every A100 plan); the prior keeps
    // it and the network efficiency within a few points of the built-in 0.75.
    const ExternalDataset d = read_external_dataset(
        std::filesystem::path(PREFLIGHT_TEST_DATA_DIR) / "measurements" / "external" / "llm-foundry-a100-40gb",
        PREFLIGHT_TEST_DATA_DIR);
    const std::vector<ThroughputSample> samples = throughput_samples(d.runs, d.framework);
    ASSERT_EQ(samples.size(), 78u);
    std::vector<std::size_t> all(samples.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    GpuSpec start = load_gpu("a100-sxm-40gb", PREFLIGHT_TEST_DATA_DIR);
    start.efficiency = Efficiency{};
    const Efficiency fit = fit_step_constants(samples, all, start);
    EXPECT_NEAR(fit.collective_bus_efficiency, 0.75, 0.08);
    EXPECT_NEAR(fit.inter_node_bus_efficiency, 0.75, 0.08);
}

TEST(ThroughputFit, GateFailsWhenHeldOutErrorsExceedTheTargets) {
    // Six jobs of six families whose "measured" tokens/s no step-time model reaches
    // (1 token/s per GPU): the held-out error is near 100 % and beyond a 10 % target.
    ExternalDataset d;
    d.name = "synthetic";
    d.framework = "nanotron";
    for (int i = 0; i < 6; ++i) {
        ExternalRun r;
        r.id = "synthetic.csv:" + std::to_string(i + 2);
        r.model_label = std::string(1, static_cast<char>('A' + i));
        r.model = llama_1b_shape();
        r.plan.seq = 4096;
        r.plan.mbs = 1 + i;
        r.plan.dp = 8;
        r.plan.tp = i % 2 ? 2 : 1;
        r.plan.sp = r.plan.tp > 1;
        r.plan.precision = Precision::bf16_mixed_fp32_grads;
        r.outcome = RunOutcome::ok;
        r.tokens_per_s_per_gpu = 1.0;
        d.runs.push_back(r);
    }
    const GpuSpec gpu = load_gpu("h100-sxm-80gb", PREFLIGHT_TEST_DATA_DIR);
    d.targets = {{"folds", 2}, {"tokens_per_s_per_gpu_error_p50_max", 0.10}};
    ThroughputGate g = throughput_gate(d, gpu);
    EXPECT_EQ(g.cv.held_out.n, 6);
    ASSERT_EQ(g.failures.size(), 1u);
    EXPECT_NE(g.failures[0].find("p50"), std::string::npos);
    d.targets = {{"folds", 2}, {"tokens_per_s_per_gpu_error_p50_max", 1e9}, {"tokens_per_s_per_gpu_error_p95_max", 1e9}};
    EXPECT_TRUE(throughput_gate(d, gpu).failures.empty());
}

// The shared simplex minimiser finds the minimum of a coupled quadratic,
// f = (x - 1)^2 + 10 (y + 2)^2 + (x - 1)(y + 2): its only stationary point is (1, -2), f = 0.
TEST(NelderMead, FindsTheMinimumOfAQuadratic) {
    int evals = 0;
    const Point x = nelder_mead(
        [](const Point& v) {
            const double a = v[0] - 1.0, b = v[1] + 2.0;
            return a * a + 10.0 * b * b + a * b;
        },
        {0.0, 0.0}, 0.5, 2000, evals, 1e-14);
    EXPECT_NEAR(x[0], 1.0, 1e-4);
    EXPECT_NEAR(x[1], -2.0, 1e-4);
    EXPECT_LE(evals, 2000 + 4);  // the budget, plus one last iteration (reflection, contraction, 2-point shrink)
}
