// The whole-model CPU reference (reference_model.hpp): its gradients against central
// finite differences on tiny Llama-, GPT-2-, Mixtral- and OLMo 2-style models, the hand-derived loss
// of an all-zero model, and the synthetic batches against their definition.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "catalog_fixture.hpp"
#include "preflight/runtime/reference_model.hpp"

namespace preflight::runtime {
namespace {

// Hand-checkable sizes: h 8, 2 layers, 2 query heads sharing 1 KV head (GQA) of width 4,
// SwiGLU width 12, vocabulary 11 (padded to 128 rows), untied head.
ModelConfig micro_llama() { return preflight::test::llama_model(8, 2, 2, 1, 12, 11, 16); }

// GPT-2 style: h 8, 2 layers, 2 heads of width 4, GeLU 4h = 32, biases, learned
// positions (16), vocabulary 11, tied embeddings.
ModelConfig micro_gpt() { return preflight::test::gpt_model(8, 2, 2, 11, 16); }

// Mixtral style: the Llama shape above with 4 SwiGLU experts of width 12 a layer, top-2 routing.
ModelConfig micro_mixtral() {
    const nlohmann::json cfg = {{"model_type", "mixtral"}, {"hidden_size", 8},  {"num_hidden_layers", 2},
                                {"num_attention_heads", 2}, {"num_key_value_heads", 1}, {"intermediate_size", 12},
                                {"vocab_size", 11},         {"max_position_embeddings", 16},
                                {"num_local_experts", 4},   {"num_experts_per_tok", 2}};
    return model_from_hf_config(cfg, "mixtral-test");
}

// OLMo 2 style: the Llama shape above with norms on the sublayer outputs, none on their inputs, and
// q/k norms over the whole q (8) and k (4) projections.
ModelConfig micro_olmo2() { return preflight::test::olmo2_model(8, 2, 2, 1, 12, 11, 16); }

Program micro_program(const ModelConfig& m, std::int64_t grad_acc) {
    Plan p;
    p.seq = 5;
    p.mbs = 2;
    p.grad_acc = grad_acc;
    p.precision = Precision::fp32;
    return build_program(m, p);
}

// Parameters that are real (not alignment or vocabulary padding), as flat indices.
std::vector<std::size_t> real_indices(const Program& P) {
    std::vector<std::size_t> idx;
    for (std::size_t i = 0; i < P.params.size(); ++i) {
        const ParamSpec& ps = P.params[i];
        std::int64_t n = ps.numel();
        if (static_cast<ParamId>(i) == P.wte || static_cast<ParamId>(i) == P.head) n = P.dims.vocab * P.dims.h;
        for (std::int64_t k = 0; k < n; ++k) idx.push_back(static_cast<std::size_t>(ps.offset + k));
    }
    return idx;
}

void expect_gradients_match_finite_differences(const ModelConfig& m) {
    const Program P = micro_program(m, 2);
    const auto batches = ref::synthetic_batches(P, 42, 1);
    // std 0.5: attention far from uniform, GeLU/SiLU away from their linear region.
    std::vector<double> w = ref::random_params(P, 7, 0.5);
    std::vector<double> g;
    const double loss = ref::model_loss(P, w, batches, &g);
    ASSERT_TRUE(std::isfinite(loss));
    EXPECT_EQ(ref::model_loss(P, w, batches, nullptr), loss);  // loss without gradients: same number
    // Central differences: truncation error (eps^2/6) |f'''|, with |f'''| up to ~1e3 at std 0.5 (~2e-8);
    // round-off ~ 1e-16 * loss / eps ~ 1e-11. A wrong gradient term is off by O(|g|) ~ 1e-2..1, so 1e-7
    // absolute separates the two by five orders.
    const double eps = 1e-5;
    double worst = 0, gmax = 0;
    std::size_t checked = 0;
    for (std::size_t i : real_indices(P)) {
        const double w0 = w[i];
        w[i] = w0 + eps;
        const double lp = ref::model_loss(P, w, batches, nullptr);
        w[i] = w0 - eps;
        const double lm = ref::model_loss(P, w, batches, nullptr);
        w[i] = w0;
        const double fd = (lp - lm) / (2 * eps);
        worst = std::max(worst, std::abs(fd - g[i]));
        gmax = std::max(gmax, std::abs(g[i]));
        ++checked;
    }
    EXPECT_LT(worst, 1e-7) << m.name << ": worst |fd - analytic| over " << checked << " parameters";
    std::printf("%s: %zu parameters, max |g| %.3g, worst |fd - g| %.3g\n", m.name.c_str(), checked, gmax, worst);
    EXPECT_GT(gmax, 1e-2) << m.name << ": gradients are not trivially zero";
    // Padding (alignment and vocabulary rows) never receives a gradient.
    std::vector<bool> real(g.size(), false);
    for (std::size_t i : real_indices(P)) real[i] = true;
    for (std::size_t i = 0; i < g.size(); ++i)
        if (!real[i]) ASSERT_EQ(g[i], 0.0) << "padding element " << i;
}

TEST(ReferenceModel, LlamaGradientsMatchCentralFiniteDifferences) {
    expect_gradients_match_finite_differences(micro_llama());
}

TEST(ReferenceModel, Gpt2GradientsMatchCentralFiniteDifferences) {
    expect_gradients_match_finite_differences(micro_gpt());
}

// The post-norm layer's backward (program_post_norm.cpp's order: each norm's input gradient apart,
// the first GEMMs' input gradients added into the residual's) and the whole-projection q/k norms'.
TEST(ReferenceModel, Olmo2GradientsMatchCentralFiniteDifferences) {
    expect_gradients_match_finite_differences(micro_olmo2());
}

// The sparse MLP's backward (the experts', the renormalised top-k softmax's and the router's): a
// tie in the routing would make the loss non-differentiable, and random parameters make none.
TEST(ReferenceModel, MixtralGradientsMatchCentralFiniteDifferences) {
    expect_gradients_match_finite_differences(micro_mixtral());
}

// All matrices, embeddings and biases zero, norm weights one: every hidden state is 0
// (a norm of 0 is 0; attention over V = 0 gives 0), so every logit is 0 and the loss is
// ln V = ln 11 = 2.397895272798371 for any tokens; dlogits = (1/V - onehot)/N meets a zero
// final-norm output and a zero head, so every gradient is exactly 0.
TEST(ReferenceModel, ZeroModelLossIsLnVocabAndGradientsVanish) {
    for (const ModelConfig& m : {micro_llama(), micro_gpt()}) {
        const Program P = micro_program(m, 1);
        const auto w = ref::random_params(P, 1, 0.0);
        std::vector<double> g;
        EXPECT_NEAR(ref::model_loss(P, w, ref::synthetic_batches(P, 3, 1), &g), 2.397895272798371, 1e-15) << m.name;
        for (double v : g) ASSERT_EQ(v, 0.0) << m.name;
    }
}

// A micro-batch of the mean loss is the mean of micro-batch losses (equal sizes), and the
// gradient of grad_acc = 2 is the mean of each micro-batch's gradient.
TEST(ReferenceModel, GradientAccumulationAveragesMicroBatches) {
    const Program P2 = micro_program(micro_llama(), 2);
    const auto batches = ref::synthetic_batches(P2, 5, 1);
    const auto w = ref::random_params(P2, 9, 0.3);
    std::vector<double> g, ga, gb;
    const double l = ref::model_loss(P2, w, batches, &g);
    const double la = ref::model_loss(P2, w, {batches[0]}, &ga), lb = ref::model_loss(P2, w, {batches[1]}, &gb);
    EXPECT_NEAR(l, 0.5 * (la + lb), 1e-14);
    for (std::size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], 0.5 * (ga[i] + gb[i]), 1e-14);
}

// synthetic.hpp: labels are the next tokens; tokens stay inside min(vocab, 256); each
// micro-batch of a step differs.
TEST(ReferenceModel, SyntheticBatchesAreNextTokenPairs) {
    const Program P = micro_program(micro_gpt(), 2);
    const auto b = ref::synthetic_batches(P, 11, 3);
    ASSERT_EQ(b.size(), 2u);
    for (const auto& tb : b) {
        ASSERT_EQ(tb.tokens.size(), 10u);
        for (std::size_t i = 0; i < tb.tokens.size(); ++i) {
            EXPECT_GE(tb.tokens[i], 0);
            EXPECT_LT(tb.tokens[i], 11);
            if (i % 5 != 4) EXPECT_EQ(tb.labels[i], tb.tokens[i + 1]) << i;
        }
    }
    EXPECT_NE(b[0].tokens, b[1].tokens);
}

}  // namespace
}  // namespace preflight::runtime
