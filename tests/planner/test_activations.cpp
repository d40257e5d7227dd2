// Per-layer activation memory against Korthikanti et al. 2022, "Reducing Activation
// Recomputation in Large Transformer Models", eqs. 1-6, for GPT-3 175B
// (h = 12288, a = 96, L = 96, s = 2048, V = 51200), plus hand-derived inventories.
#include <gtest/gtest.h>

#include "catalog_fixture.hpp"
#include "preflight/planner/memory.hpp"
#include "preflight/planner/profiles.hpp"

namespace preflight {
namespace {

constexpr std::int64_t s = 2048, b = 1, h = 12288, a = 96, L = 96, t = 8;

ModelConfig gpt3() { return test::gpt_model(h, L, a, 51200, s); }

// GPT layer with dropout, eager attention, 16-bit activations (the paper's setting).
Plan paper_plan() {
    Plan p;
    p.seq = s;
    p.mbs = b;
    p.dropout = 0.1;
    p.attention = AttentionKind::eager;
    p.precision = Precision::bf16_mixed;
    return p;
}

TEST(Korthikanti, Eq1NoParallelism) {
    // sbh(34 + 5as/h) = 34 sbh + 5 a s^2 b
    EXPECT_EQ(layer_activation_bytes(gpt3(), paper_plan()), 34 * s * b * h + 5 * a * s * s * b);
}

TEST(Korthikanti, Eq2TensorParallel) {
    // sbh(10 + 24/t + 5as/(ht))
    Plan p = paper_plan();
    p.tp = t;
    EXPECT_EQ(layer_activation_bytes(gpt3(), p), 10 * s * b * h + 24 * s * b * h / t + 5 * a * s * s * b / t);
}

TEST(Korthikanti, Eq3TensorAndSequenceParallel) {
    // sbh/t (34 + 5as/h)
    Plan p = paper_plan();
    p.tp = t;
    p.sp = true;
    EXPECT_EQ(layer_activation_bytes(gpt3(), p), (34 * s * b * h + 5 * a * s * s * b) / t);
}

TEST(Korthikanti, Eq4FirstPipelineStageHoldsLLayersWorth) {
    // With 1F1B the first stage keeps p micro-batches of L/p layers: sbhL/t (34 + 5as/h).
    Plan p = paper_plan();
    p.tp = t;
    p.sp = true;
    p.pp = 8;
    p.grad_acc = 16;
    p.dp = 1;
    const MemoryReport r = evaluate_memory(gpt3(), test::catalog_gpu("h100-sxm-80gb"), p);
    ASSERT_EQ(r.pipeline_stage, 0);
    EXPECT_EQ(r.micro_batches_in_flight, 8);
    EXPECT_EQ(r.layers_on_stage, L / 8);
    EXPECT_EQ(r.micro_batches_in_flight * r.layers_on_stage * r.activations_per_layer_bytes,
              L * (34 * s * b * h + 5 * a * s * s * b) / t);
}

TEST(Korthikanti, Eq5FullRecomputeKeepsLayerInputs) {
    // Full recomputation stores only each layer's input: 2sbhL in total, 2sbhL/t with SP.
    Plan p = paper_plan();
    p.recompute = Recompute::full;
    EXPECT_EQ(L * layer_activation_bytes(gpt3(), p), 2 * s * b * h * L);
    p.tp = t;
    p.sp = true;
    EXPECT_EQ(L * layer_activation_bytes(gpt3(), p), 2 * s * b * h * L / t);
}

TEST(Korthikanti, Eq6SelectiveRecomputeWithSequenceParallel) {
    // Selective recomputation drops the 5as/h term: 34 sbh / t per layer.
    Plan p = paper_plan();
    p.recompute = Recompute::selective;
    p.tp = t;
    p.sp = true;
    EXPECT_EQ(layer_activation_bytes(gpt3(), p), 34 * s * b * h / t);
    p.sp = false;
    EXPECT_EQ(layer_activation_bytes(gpt3(), p), 10 * s * b * h + 24 * s * b * h / t);
}

TEST(Korthikanti, SelectiveRecomputeSavesSeventyPercentOnGpt3) {
    // Sec. 5: for GPT-3 the s^2 terms are most of the activation memory; selective
    // recompute cuts ~70 %. 5as/h = 80 vs 34: (80) / (114) = 70.2 %.
    const double full = static_cast<double>(layer_activation_bytes(gpt3(), paper_plan()));
    Plan p = paper_plan();
    p.recompute = Recompute::selective;
    const double sel = static_cast<double>(layer_activation_bytes(gpt3(), p));
    EXPECT_NEAR(1.0 - sel / full, 80.0 / 114.0, 1e-12);
}

TEST(Activations, NoDropoutDropsMasksAndDropoutOutputs) {
    // Without dropout: no 1-byte masks (2 sbh + a s^2 b) and no dropout output copy (2 a s^2 b).
    Plan p = paper_plan();
    p.dropout = 0.0;
    EXPECT_EQ(layer_activation_bytes(gpt3(), p), 32 * s * b * h + 2 * a * s * s * b);
}

TEST(Activations, FlashKeepsRowStatisticsInsteadOfScores) {
    // Flash attention: the s^2 tensors vanish; the fp32 log-sum-exp (4 a s b) is kept.
    Plan p = paper_plan();
    p.dropout = 0.0;
    p.attention = AttentionKind::flash;
    EXPECT_EQ(layer_activation_bytes(gpt3(), p), 32 * s * b * h + 4 * a * s * b);
}

TEST(Activations, Llama3GqaSwigluByHand) {
    // llama-3-8b, s = 4096, b = 2, flash, no dropout, bf16: norm inputs and outputs 4 x 2h,
    // Q 2h, K and V 2 x 2(8*128), attention output 2h, log-sum-exp 4a, SwiGLU gate/up/product 3 x 2f.
    const ModelConfig m = test::catalog_model("llama-3-8b");
    Plan p;
    p.seq = 4096;
    p.mbs = 2;
    const std::int64_t sb = 4096 * 2, hh = 4096, kv = 8 * 128, f = 14336, heads = 32;
    const std::int64_t expected = sb * (4 * 2 * hh + 2 * hh + 2 * 2 * kv + 2 * hh + 4 * heads + 3 * 2 * f);
    EXPECT_EQ(layer_activation_bytes(m, p), expected);
    // Selective recompute (attention core) removes only the log-sum-exp under flash.
    p.recompute = Recompute::selective;
    EXPECT_EQ(layer_activation_bytes(m, p), expected - sb * 4 * heads);
}

TEST(Activations, Qwen3QkNormsKeepTheirInputs) {
    // qwen3-8b, s = 4096, b = 2, flash, bf16: Llama-3-8B's inventory at Qwen3's widths (q 32 x 128,
    // kv 8 x 128, f 12288), plus the q and k projections the per-head norms save for their
    // backward (Megatron-Core's q_layernorm / k_layernorm): 2q + 2kv.
    const ModelConfig m = test::catalog_model("qwen3-8b");
    Plan p;
    p.seq = 4096;
    p.mbs = 2;
    const std::int64_t sb = 4096 * 2, hh = 4096, q = 32 * 128, kv = 8 * 128, f = 12288, heads = 32;
    const std::int64_t llama = sb * (4 * 2 * hh + 2 * q + 2 * 2 * kv + 2 * q + 4 * heads + 3 * 2 * f);
    EXPECT_EQ(layer_activation_bytes(m, p), llama + sb * (2 * q + 2 * kv));
    // Hugging Face's Qwen3RMSNorm under autocast (the pytorch profile): pow saves the fp32 copy of
    // each projection, the weight product its normalized bf16 cast, rsqrt one fp32 per head and token.
    ModelConfig plain = m;
    plain.qk_norm = false;
    p.precision = Precision::bf16_mixed;
    const FrameworkProfile hf = pytorch_profile();
    EXPECT_EQ(layer_activation_bytes(m, p, hf) - layer_activation_bytes(plain, p, hf),
              sb * (4 * q + 2 * q + 4 * kv + 2 * kv + 4 * (32 + 8)));
}

TEST(Activations, Phi3FusedQkvKeepsTheWholeProjectionForV) {
    // phi-4, s = 4096, b = 1, flash, bf16 (q 40 x 128 = 5120, kv 10 x 128 = 1280, f 17920): under
    // Megatron-like profiles Llama-3-8B's inventory at Phi-4's widths, the fusion changing nothing.
    const ModelConfig m = test::catalog_model("phi-4");
    Plan p;
    p.seq = 4096;
    const std::int64_t sb = 4096, hh = 5120, q = 5120, kv = 1280, f = 17920, heads = 40;
    EXPECT_EQ(layer_activation_bytes(m, p), sb * (4 * 2 * hh + 2 * q + 2 * 2 * kv + 2 * q + 4 * heads + 3 * 2 * f));
    // Hugging Face's Phi3Attention slices V out of the qkv_proj output: SDPA saving V keeps all
    // q + 2 kv of it (2 B each), q + kv more than a separate v_proj's output; gate and up are views
    // of gate_up_proj's output, which silu and the product keep whole, as much as Llama's two.
    ModelConfig apart = m;
    apart.fused_qkv = apart.fused_gate_up = false;
    p.precision = Precision::bf16_mixed;
    const FrameworkProfile hf = pytorch_profile();
    EXPECT_EQ(layer_activation_bytes(m, p, hf) - layer_activation_bytes(apart, p, hf), sb * 2 * (q + kv));
    // Eager attention with GQA repeats V (repeat_kv): the saved copy is no view, the projection is freed.
    p.attention = AttentionKind::eager;
    EXPECT_EQ(layer_activation_bytes(m, p, hf), layer_activation_bytes(apart, p, hf));
}

TEST(Activations, Gemma3SandwichNormsKeepTheSublayerOutputs) {
    // gemma-3-1b, s = 4096, b = 1, flash, bf16 (h 1152, q 4 x 256, kv 256, f 6912, 4 heads): Llama's
    // inventory at these widths (norm inputs and outputs 4 x 2h, Q 2q, K and V 2 x 2kv, attention output
    // 2q, log-sum-exp 4a, the gated MLP's gate, up and product 3 x 2f), the q and k projections the
    // per-head norms keep (2q + 2kv), and the attention and MLP outputs the post-sublayer norms keep (2 x 2h).
    const ModelConfig m = test::catalog_model("gemma-3-1b");
    Plan p;
    p.seq = 4096;
    const std::int64_t sb = 4096, hh = 1152, q = 1024, kv = 256, f = 6912, heads = 4;
    const std::int64_t llama = sb * (4 * 2 * hh + 2 * q + 2 * 2 * kv + 2 * q + 4 * heads + 3 * 2 * f);
    EXPECT_EQ(layer_activation_bytes(m, p), llama + sb * (2 * q + 2 * kv) + sb * 2 * 2 * hh);
    EXPECT_EQ(layer_activation_bytes(m, p), 4096LL * 62'992);
}

TEST(Activations, Olmo2PostNormsAndWholeQkNormsKeepTheirInputs) {
    // olmo-2-7b, s = 4096, b = 1, flash, bf16 (h = q = kv = 4096, f 11008, 32 heads). No norm on the
    // sublayer inputs: the QKV and MLP GEMMs keep the residual stream they read (2h each, as a pre-norm
    // layer keeps its norms' outputs), and nothing keeps a norm input there. Q 2q, K and V 2 x 2kv,
    // attention output 2q, log-sum-exp 4a, the gated MLP's gate, up and product 3 x 2f; the q and k norms
    // keep the whole projections (2q + 2kv) and the output norms the attention and MLP outputs (2 x 2h).
    const ModelConfig m = test::catalog_model("olmo-2-7b");
    Plan p;
    p.seq = 4096;
    const std::int64_t sb = 4096, hh = 4096, q = 4096, kv = 4096, f = 11008, heads = 32;
    const std::int64_t inventory =
        sb * (2 * 2 * hh + 2 * q + 2 * 2 * kv + 2 * q + 4 * heads + 3 * 2 * f + (2 * q + 2 * kv) + 2 * 2 * hh);
    EXPECT_EQ(layer_activation_bytes(m, p), inventory);
    EXPECT_EQ(layer_activation_bytes(m, p), 4096LL * 148'096);
    // A Llama layer of the same widths keeps its two norm inputs in place of the two output norms' inputs:
    // OLMo's layer keeps exactly its q and k norms' inputs more.
    ModelConfig llama = m;
    llama.pre_norms = true, llama.post_norms = llama.qk_norm = llama.qk_norm_whole = false;
    EXPECT_EQ(layer_activation_bytes(m, p), layer_activation_bytes(llama, p) + sb * (2 * q + 2 * kv));
    // With row statistics (torchtitan's profile) the whole-projection norms keep one fp32 rstd per token
    // each, on every tensor-parallel rank (the sum of squares runs over the ranks), where per-head
    // norms keep one per head: 2 x 4 bytes a token against (32 + 32) x 4 / tp.
    const FrameworkProfile tt = *profile_by_name("torchtitan");
    p.tp = 2;
    ModelConfig per_head = m;
    per_head.qk_norm_whole = false;
    EXPECT_EQ(layer_activation_bytes(per_head, p, tt) - layer_activation_bytes(m, p, tt), sb * (64 * 4 / 2 - 2 * 4));
}

TEST(Activations, Fp32DoublesAndFp8HalvesGemmInputs) {
    const ModelConfig m = test::catalog_model("gpt2");
    Plan p;
    p.seq = 1024;
    const std::int64_t sb = 1024, hh = 768, f = 3072, heads = 12;
    // bf16: norm in 2h x2, GEMM inputs (qkv, out-proj, fc1, fc2) 2h+2h+2h+2f, Q/K/V 3 x 2h,
    // GeLU input 2f, lse 4a.
    const std::int64_t bf16 = sb * (2 * 2 * hh + (2 * hh + 2 * hh + 2 * hh + 2 * f) + 3 * 2 * hh + 2 * f + 4 * heads);
    EXPECT_EQ(layer_activation_bytes(m, p), bf16);
    p.precision = Precision::fp32;
    EXPECT_EQ(layer_activation_bytes(m, p), 2 * bf16 - sb * 4 * heads);  // lse is fp32 in both
    // fp8: the four GEMM inputs at 1 byte, and (Transformer Engine's fused attention, Megatron-LM's
    // profile) the attention's bf16 output kept beside the out-projection's fp8 copy of it.
    p.precision = Precision::fp8_mixed;
    EXPECT_EQ(layer_activation_bytes(m, p), bf16 - sb * (hh + hh + hh + f) + sb * 2 * hh);
}

TEST(Activations, MixtralRoutesEachTokenThroughTwoExperts) {
    // MoE MLP: router probabilities (fp32, 8 experts), dispatched tokens (k = 2 copies of 2h),
    // SwiGLU intermediates for 2 tokens-per-token (3 x 2f x 2); Megatron-LM keeps no expert
    // outputs for the combine (the probabilities are applied inside the activation).
    const ModelConfig m = test::catalog_model("mixtral-8x7b");
    Plan p;
    p.seq = 4096;
    const std::int64_t sb = 4096, hh = 4096, kv = 1024, f = 14336, heads = 32;
    const std::int64_t attn = sb * (2 * hh + 2 * hh + 2 * hh + 2 * 2 * kv + 4 * heads + 2 * hh);
    const std::int64_t mlp = sb * (2 * hh + 2 * hh + 8 * 4 + 2 * 2 * hh + 2 * 3 * 2 * f);
    EXPECT_EQ(layer_activation_bytes(m, p), attn + mlp);
}

}  // namespace
}  // namespace preflight
