// FLOP counts against published formulas.
#include <gtest/gtest.h>

#include <cmath>

#include "catalog_fixture.hpp"
#include "preflight/planner/throughput.hpp"

using namespace preflight;

namespace {

// A Llama-3-8B-shaped config (GQA, SwiGLU, RMSNorm, untied head).
ModelConfig llama_like() { return test::llama_model(4096, 32, 32, 8, 14336, 128256, 8192); }

// GPT-3 175B as in Narayanan et al. 2021, sec. 5.1: h=12288, l=96, a=96, V=51200, s=2048, f=4h, MHA.
ModelConfig gpt3_175b() { return test::gpt_model(12288, 96, 96, 51200, 2048); }

Plan one_sequence(std::int64_t seq) {
    Plan p;
    p.seq = seq;
    return p;
}

}  // namespace

// PaLM (Chowdhery et al. 2022, App. B): model FLOPs per token = 6N + 12*L*H*Q*T with N
// the parameters multiplied per token (here: every matrix of every layer plus the LM head).
TEST(Flops, PalmFormulaPerTokenGqaSwiglu) {
    const ModelConfig m = llama_like();
    const double h = 4096, L = 32, H = 32, Q = 128, kv = 8 * 128, f = 14336, V = 128256, T = 4096;
    const double N = L * (h * (H * Q + 2 * kv) + H * Q * h + 3 * h * f) + h * V;
    const FlopCounts c = step_flops(m, one_sequence(4096), AttentionFlops::full);
    EXPECT_DOUBLE_EQ(c.model_flops_per_token, 6 * N + 12 * L * H * Q * T);
    EXPECT_DOUBLE_EQ(c.model_flops_per_step, (6 * N + 12 * L * H * Q * T) * T);  // one sequence of T tokens
    EXPECT_DOUBLE_EQ(c.hardware_flops_per_token, c.model_flops_per_token);     // no recompute
}

TEST(Flops, CausalConventionHalvesTheAttentionTerm) {
    const ModelConfig m = llama_like();
    const double L = 32, H = 32, Q = 128, T = 4096;
    const FlopCounts full = step_flops(m, one_sequence(4096), AttentionFlops::full);
    const FlopCounts causal = step_flops(m, one_sequence(4096), AttentionFlops::causal);
    EXPECT_DOUBLE_EQ(full.model_flops_per_token - causal.model_flops_per_token, 6 * L * H * Q * T);
}

TEST(Flops, MoeCountsActiveExpertsAndRouter) {
    ModelConfig m = llama_like();  // Mixtral-8x7B-like: 8 experts, top-2
    m.vocab = 32000;
    m.experts = 8;
    m.experts_per_token = 2;
    m.family = ModelFamily::mixtral;
    const double h = 4096, L = 32, H = 32, Q = 128, kv = 1024, f = 14336, V = 32000, T = 2048;
    const double N_active = L * (h * (H * Q + 2 * kv) + H * Q * h + 2 * 3 * h * f + h * 8) + h * V;
    const FlopCounts c = step_flops(m, one_sequence(2048));
    EXPECT_DOUBLE_EQ(c.model_flops_per_token, 6 * N_active + 12 * L * H * Q * T);
}

// Narayanan et al. 2021, eq. 3: with full recompute a step costs
// 96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)) FLOPs; without it (model FLOPs) 72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)).
TEST(Flops, NarayananEq3Gpt3FullRecompute) {
    const ModelConfig m = gpt3_175b();
    Plan p = one_sequence(2048);
    p.mbs = 1;
    p.dp = 1536;  // B = 1536 sequences (the paper's GPT-3 batch)
    p.recompute = Recompute::full;
    const long double B = 1536, s = 2048, l = 96, h = 12288, V = 51200;
    const long double hw = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
    const long double model = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
    const FlopCounts c = step_flops(m, p, AttentionFlops::full);
    EXPECT_NEAR(c.hardware_flops_per_step / static_cast<double>(hw), 1.0, 1e-14);
    EXPECT_NEAR(c.model_flops_per_step / static_cast<double>(model), 1.0, 1e-14);
}

TEST(Flops, SelectiveRecomputeAddsTheAttentionCoreForward) {
    const ModelConfig m = gpt3_175b();
    Plan p = one_sequence(2048);
    p.recompute = Recompute::selective;
    const FlopCounts c = step_flops(m, p);
    // Q K^T and P V forward: 2 * 2 * s * h per token per layer (Korthikanti et al. 2022, sec. 5).
    const double per_token = 96.0 * 4.0 * 2048.0 * 12288.0;
    EXPECT_DOUBLE_EQ(c.hardware_flops_per_token - c.model_flops_per_token, per_token);
}

TEST(Flops, StepScalesWithGlobalBatch) {
    const ModelConfig m = llama_like();
    Plan p = one_sequence(4096);
    const double one = step_flops(m, p).model_flops_per_step;
    p.mbs = 2;
    p.grad_acc = 3;
    p.dp = 4;
    p.tp = 2;  // tensor parallelism does not change the step's FLOPs
    EXPECT_DOUBLE_EQ(step_flops(m, p).model_flops_per_step, 24 * one);
}

TEST(Flops, ParseConvention) {
    EXPECT_EQ(parse_attention_flops("full"), AttentionFlops::full);
    EXPECT_EQ(parse_attention_flops("causal"), AttentionFlops::causal);
    EXPECT_FALSE(parse_attention_flops("half"));
    EXPECT_EQ(to_string(AttentionFlops::causal), "causal");
}

// Sliding-window attention (Mistral-7B: sliding_window 4096, Jiang et al. 2023, sec. 2): each query
// scores at most the last 4,096 keys. At seq 8192 the full convention counts 4,096 keys a query,
// the causal one the triangle less the part beyond the window, (8192^2 - 4096^2)/2 / 8192 = 3,072;
// at seq 4096 the window changes nothing.
TEST(Flops, SlidingWindowCapsTheKeysAQueryScores) {
    const ModelConfig m = test::catalog_model("mistral-7b");
    ASSERT_EQ(m.sliding_window, 4096);
    const double q = 32 * 128;
    EXPECT_DOUBLE_EQ(forward_flops_per_token(m, 8192, AttentionFlops::full).attention_scores, 2 * 4096 * q);
    EXPECT_DOUBLE_EQ(forward_flops_per_token(m, 8192, AttentionFlops::causal).attention_scores, 2 * 3072 * q);
    EXPECT_DOUBLE_EQ(forward_flops_per_token(m, 4096, AttentionFlops::full).attention_values, 2 * 4096 * q);
    EXPECT_DOUBLE_EQ(forward_flops_per_token(m, 4096, AttentionFlops::causal).attention_values, 2 * 2048 * q);
    EXPECT_DOUBLE_EQ(causal_attention_pairs(8192, 4096), 25'165'824.0);
    EXPECT_DOUBLE_EQ(causal_attention_pairs(8192, 0), 33'554'432.0);
    // The flash kernel's time follows the pairs: the step at seq 8192 is shorter with the window.
    ModelConfig full = m;
    full.sliding_window = 0;
    Plan p;
    p.seq = 8192;
    const GpuSpec g = test::catalog_gpu("h100-sxm-80gb");
    EXPECT_LT(estimate_throughput(m, g, p).step_time_s, estimate_throughput(full, g, p).step_time_s);
    p.seq = 4096;
    EXPECT_DOUBLE_EQ(estimate_throughput(m, g, p).step_time_s, estimate_throughput(full, g, p).step_time_s);
}

TEST(Flops, LayersOfTwoKindsCountAtTheirMean) {
    // Gemma 3 1B at seq 4096: 22 layers attend through 512 keys, s^2/2 - (s - 512)^2/2 = 8,388,608 -
    // 6,422,528 = 1,966,080 pairs; the 4 others through all 8,388,608: a layer's mean is
    // (22 x 1,966,080 + 4 x 8,388,608) / 26 = 76,808,192 / 26.
    const ModelConfig m = test::catalog_model("gemma-3-1b");
    EXPECT_DOUBLE_EQ(mean_causal_pairs(m, 4096), 76'808'192.0 / 26);
    const double q = 4 * 256;
    EXPECT_DOUBLE_EQ(forward_flops_per_token(m, 4096, AttentionFlops::causal).attention_scores,
                     2 * q * 76'808'192.0 / 26 / 4096);
    // Full convention: a windowed layer's query scores 512 keys, a full one's 4096.
    EXPECT_DOUBLE_EQ(forward_flops_per_token(m, 4096, AttentionFlops::full).attention_scores,
                     2 * q * (22 * 512.0 + 4 * 4096.0) / 26);
    // Within the window every layer sees the whole sequence.
    EXPECT_DOUBLE_EQ(mean_causal_pairs(m, 512), causal_attention_pairs(512, 0));
}
