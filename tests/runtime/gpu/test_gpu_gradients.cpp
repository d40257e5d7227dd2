// A tiny model's gradients after one step on the device against the whole-model CPU
// reference in double (reference_model.hpp), fed the device's own parameters (read back
// after initialisation) and the same synthetic tokens. Label: gpu. Skips without a device.
//
// Error bounds, per parameter tensor, with scale = max |reference| over the tensor:
// - fp32 recipe (fp32 storage, CUBLAS_COMPUTE_32F, no TF32): every element within
//   1e-4 * scale + 1e-7. Unit round-off is 2^-24 = 6e-8; reductions here are at most a
//   few hundred terms and the flash kernel's __expf adds ~2 ulp, so the true error is
//   ~1e-6 relative: a 100x margin that still catches any wrong term (off by O(scale)).
// - bf16 recipes (bf16 weights, activations and gradients; fp32 accumulation): bf16 has
//   8 significant bits, unit round-off 2^-9 = 2e-3. A gradient passes through ~20 bf16
//   roundings (stored activations forward, stored input gradients backward, the stored
//   gradient itself); independent roundings add up like a random walk, sqrt(20) * 2e-3
//   = 1e-2 relative in the 2-norm. Bound: ||g - ref||_2 <= 5e-2 ||ref||_2 per tensor, and
//   every element within 0.1 * scale (+ 1e-6). The loss: 1e-5 relative (fp32), 1e-2 (bf16).
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "catalog_fixture.hpp"
#include "gpu_util.hpp"
#include "preflight/runtime/reference_model.hpp"

namespace preflight::runtime {
namespace {

// GQA (4 query heads over 2 KV heads of width 32), SwiGLU 160, vocabulary 300 (padded to 384).
ModelConfig grad_llama() {
    nlohmann::json cfg = {{"model_type", "llama"},         {"hidden_size", 128},       {"num_hidden_layers", 2},
                          {"num_attention_heads", 4},       {"num_key_value_heads", 2}, {"intermediate_size", 160},
                          {"vocab_size", 300},              {"max_position_embeddings", 64},
                          {"tie_word_embeddings", false}};
    return model_from_hf_config(cfg, "grad-llama");
}
// LayerNorm, GeLU 4h, biases, learned positions, tied embeddings.
ModelConfig grad_gpt() { return preflight::test::gpt_model(128, 2, 4, 300, 64); }
// The Llama shape above with 4 SwiGLU experts of width 160 a layer, top-2 (Mixtral's sparse MLP:
// the reference computes it as HF's MixtralSparseMoeBlock, the device through its routing table).
ModelConfig grad_mixtral() {
    nlohmann::json cfg = {{"model_type", "mixtral"},      {"hidden_size", 128},       {"num_hidden_layers", 2},
                          {"num_attention_heads", 4},     {"num_key_value_heads", 2}, {"intermediate_size", 160},
                          {"vocab_size", 300},            {"max_position_embeddings", 64},
                          {"num_local_experts", 4},       {"num_experts_per_tok", 2}, {"tie_word_embeddings", false}};
    return model_from_hf_config(cfg, "grad-mixtral");
}

// Qwen3's layer: the Llama shape above with per-head q/k RMSNorms (head_norm.cu) and head_dim 64, so
// the 4 query heads span 256 columns over a hidden size of 128.
ModelConfig grad_qwen3() {
    nlohmann::json cfg = {{"model_type", "qwen3"},        {"hidden_size", 128},       {"num_hidden_layers", 2},
                          {"num_attention_heads", 4},     {"num_key_value_heads", 2}, {"head_dim", 64},
                          {"intermediate_size", 160},     {"vocab_size", 300},        {"max_position_embeddings", 64},
                          {"tie_word_embeddings", false}};
    return model_from_hf_config(cfg, "grad-qwen3");
}

// OLMo 2's layer (program_post_norm.cpp): the Llama shape above with its two norms on the sublayer
// outputs, each adding the residual in its forward (norm.cu's residual path), and q/k norms over
// the whole projections.
ModelConfig grad_olmo2() {
    nlohmann::json cfg = {{"model_type", "olmo2"},        {"hidden_size", 128},       {"num_hidden_layers", 2},
                          {"num_attention_heads", 4},     {"num_key_value_heads", 2}, {"intermediate_size", 160},
                          {"vocab_size", 300},            {"max_position_embeddings", 64}, {"tie_word_embeddings", false}};
    return model_from_hf_config(cfg, "grad-olmo2");
}

// Layers of two kinds (Dims::window_of): OLMo 3's layer at the shape above over 4 layers, the fourth
// attending to all 32 tokens, the others through a window of 8 (cuDNN: two graphs).
ModelConfig grad_olmo3() {
    nlohmann::json cfg = {{"model_type", "olmo3"},        {"hidden_size", 128},       {"num_hidden_layers", 4},
                          {"num_attention_heads", 4},     {"num_key_value_heads", 2}, {"intermediate_size", 160},
                          {"vocab_size", 300},            {"max_position_embeddings", 64}, {"sliding_window", 8},
                          {"tie_word_embeddings", false}};
    return model_from_hf_config(cfg, "grad-olmo3");
}

struct Bounds {
    double elem_rtol, elem_atol, norm_rtol, loss_rtol;
};
constexpr Bounds kFp32{1e-4, 1e-7, 1e-4, 1e-5};
constexpr Bounds kBf16{1e-1, 1e-6, 5e-2, 1e-2};

void expect_gradients_match(const ModelConfig& m, const Plan& plan, const Bounds& bd) {
    RunOptions o;
    o.seed = 99;
    const StepGradients dev = capture_step_gradients(m, plan, o);
    Program P = build_program(m, plan);
    P.hyper = o.hyper;
    use_model_constants(P);  // as the device's program (step_gradients.cpp)
    ASSERT_EQ(dev.weights.size(), static_cast<std::size_t>(P.param_elements));
    ASSERT_EQ(dev.gradients.size(), static_cast<std::size_t>(P.param_elements));
    std::vector<double> g;
    const double loss = ref::model_loss(P, dev.weights, ref::synthetic_batches(P, o.seed, 1), &g);
    const std::string what = m.name + " " + std::string(to_string(plan.precision)) + " recompute " +
                             std::string(to_string(plan.recompute)) + " " + std::string(to_string(plan.attention));
    EXPECT_NEAR(dev.loss, loss, bd.loss_rtol * loss) << what;
    double worst_norm = 0;
    for (const ParamSpec& ps : P.params) {
        double scale = 0, diff2 = 0, ref2 = 0, worst = 0;
        std::size_t bad = 0;
        for (std::int64_t k = 0; k < ps.numel(); ++k) scale = std::max(scale, std::abs(g[static_cast<std::size_t>(ps.offset + k)]));
        const double tol = bd.elem_atol + bd.elem_rtol * scale;
        for (std::int64_t k = 0; k < ps.numel(); ++k) {
            const auto i = static_cast<std::size_t>(ps.offset + k);
            const double e = std::abs(dev.gradients[i] - g[i]);
            if (!(e <= tol)) ++bad;  // NaN counts as bad
            worst = std::max(worst, std::isnan(e) ? INFINITY : e);
            diff2 += e * e;
            ref2 += g[i] * g[i];
        }
        EXPECT_EQ(bad, 0u) << what << ": " << ps.name << ": " << bad << " of " << ps.numel() << " off; worst " << worst
                           << " > tol " << tol;
        if (ref2 > 0) {
            const double rel = std::sqrt(diff2 / ref2);
            worst_norm = std::max(worst_norm, rel);
            EXPECT_LE(rel, bd.norm_rtol) << what << ": " << ps.name << ": relative 2-norm error";
        }
    }
    std::printf("%s: loss %.6f (reference %.6f), worst per-tensor relative 2-norm error %.3g\n", what.c_str(), dev.loss,
                loss, worst_norm);
}

using test::step_plan;

TEST(GpuGradients, Fp32MatchesTheCpuReferenceForEveryRecomputeAndAttention) {
    PF_REQUIRE_GPU();
    for (const ModelConfig& m : {grad_llama(), grad_gpt(), grad_mixtral(), grad_qwen3(), grad_olmo2(), grad_olmo3()})
        for (auto rc : all_recomputes())
            for (auto at : {AttentionKind::flash, AttentionKind::eager})
                expect_gradients_match(m, step_plan(Precision::fp32, rc, at, 2), kFp32);
}

TEST(GpuGradients, Bf16RecipesMatchTheCpuReferenceWithinBf16Bounds) {
    PF_REQUIRE_GPU();
    for (const ModelConfig& m : {grad_llama(), grad_gpt(), grad_qwen3(), grad_olmo2(), grad_olmo3()})
        for (auto at : {AttentionKind::flash, AttentionKind::eager}) {
            expect_gradients_match(m, step_plan(Precision::bf16_mixed, Recompute::none, at, 1), kBf16);
            expect_gradients_match(m, step_plan(Precision::bf16_mixed_fp32_grads, Recompute::selective, at, 2), kBf16);
        }
}

}  // namespace
}  // namespace preflight::runtime
