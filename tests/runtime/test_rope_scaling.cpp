// RoPE frequencies from the model config: rope_theta and Llama-3 scaling (HF
// transformers _compute_llama3_parameters), as the runtime and its CPU reference use them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "catalog_fixture.hpp"
#include "host_parity.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/runtime/program.hpp"
#include "preflight/runtime/reference.hpp"
#include "preflight/runtime/reference_model.hpp"

namespace preflight::runtime {
namespace {

TEST(RopeScaling, CatalogLlama32ReadsThetaAndLlama3Scaling) {
    const ModelConfig m = test::catalog_model("llama-3.2-1b");
    EXPECT_DOUBLE_EQ(m.rope_theta, 500000.0);
    EXPECT_EQ(m.rope_scaling.type, "llama3");
    EXPECT_DOUBLE_EQ(m.rope_scaling.factor, 32.0);
    EXPECT_DOUBLE_EQ(m.rope_scaling.low_freq_factor, 1.0);
    EXPECT_DOUBLE_EQ(m.rope_scaling.high_freq_factor, 4.0);
    EXPECT_EQ(m.rope_scaling.original_max_positions, 8192);
    Plan p;
    p.seq = 128;
    const Program prog = build_program(m, p);
    EXPECT_DOUBLE_EQ(prog.hyper.rope_base, 500000.0);
    EXPECT_EQ(prog.hyper.rope_scaling.type, "llama3");
}

// The norms' epsilon the runtime trains with is the config's: Qwen3-8B's rms_norm_eps 1e-6 (its file),
// Llama 3.2's 1e-5, GPT-2's layer_norm_epsilon 1e-5; a Qwen3 config without the key takes Qwen3Config's
// default, 1e-6, and a Mixtral one MixtralConfig's, 1e-5.
TEST(RopeScaling, NormEpsilonComesFromTheConfig) {
    Plan p;
    p.seq = 128;
    for (const auto& [name, eps] : {std::pair{"qwen3-8b", 1e-6}, std::pair{"llama-3.2-1b", 1e-5}, std::pair{"gpt2", 1e-5}}) {
        const ModelConfig m = test::catalog_model(name);
        EXPECT_DOUBLE_EQ(m.norm_eps, eps) << name;
        EXPECT_DOUBLE_EQ(build_program(m, p).hyper.norm_eps, eps) << name;
    }
    nlohmann::json cfg = {{"model_type", "qwen3"},       {"hidden_size", 64},         {"num_hidden_layers", 2},
                          {"num_attention_heads", 4},    {"num_key_value_heads", 2},  {"intermediate_size", 128},
                          {"vocab_size", 300},           {"max_position_embeddings", 256}};
    EXPECT_DOUBLE_EQ(model_from_hf_config(cfg, "q").norm_eps, 1e-6);
    cfg["model_type"] = "mixtral";
    cfg["num_local_experts"] = 4;
    cfg["num_experts_per_tok"] = 2;
    EXPECT_DOUBLE_EQ(model_from_hf_config(cfg, "m").norm_eps, 1e-5);
    for (const nlohmann::json bad : {nlohmann::json(0.0), nlohmann::json(-1e-6), nlohmann::json(1.0), nlohmann::json("1e-6")}) {
        cfg["rms_norm_eps"] = bad;
        try {
            model_from_hf_config(cfg, "m");
            ADD_FAILURE() << "rms_norm_eps " << bad.dump() << " accepted";
        } catch (const InputError& e) {
            EXPECT_NE(std::string(e.what()).find("rms_norm_eps"), std::string::npos) << e.what();
        }
    }
}

TEST(RopeScaling, Llama3FrequenciesByHand) {
    // d = 64, theta = 5e5: f_i = theta^(-2i/64). Wavelength 2 pi / f_i against
    // 8192 / 1 (low) and 8192 / 4 = 2048 (high).
    RopeScaling sc;
    sc.type = "llama3";
    sc.factor = 32;
    const auto f = ref::rope_inv_freq(64, 500000.0, sc);
    ASSERT_EQ(f.size(), 32u);
    EXPECT_DOUBLE_EQ(f[0], 1.0);  // wavelength 6.28 < 2048: kept
    // i = 31: f = 3.01386e-6, wavelength 2.08e6 > 8192: divided by 32.
    EXPECT_NEAR(f[31], 9.41830672543491e-08, 1e-20);
    // i = 15: f = 2.13112e-3, wavelength 2948.3 in [2048, 8192]: smooth = (8192/2948.3 - 1)/3 = 0.592849,
    // f * ((1 - smooth)/32 + smooth) = 1.290548e-3.
    EXPECT_NEAR(f[15], 0.0012905479282092638, 1e-15);
    // i = 14: f = 3.2104e-3 (wavelength 1957 < 2048): kept.
    EXPECT_DOUBLE_EQ(f[14], std::pow(500000.0, -28.0 / 64.0));
}

TEST(RopeScaling, NoScalingIsThePlainBase) {
    const auto f = ref::rope_inv_freq(8, 10000.0, {});
    EXPECT_DOUBLE_EQ(f[1], 0.1);   // 10000^(-2/8)
    EXPECT_DOUBLE_EQ(f[2], 0.01);  // 10000^(-4/8)
}

TEST(RopeScaling, OtherRopeTypesAreRefusedByName) {
    RopeScaling sc;
    sc.type = "yarn";
    sc.factor = 4;
    try {
        ref::rope_inv_freq(64, 10000.0, sc);
        FAIL();
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("yarn"), std::string::npos);
    }
}

// A Phi-3.5-shaped config (transformers Phi3Config): rope_scaling longrope with one short and one long
// factor per rotary frequency, the pretrained context as original_max_position_embeddings at the top.
nlohmann::json longrope_config() {
    return {{"model_type", "phi3"},
            {"hidden_size", 64},
            {"num_hidden_layers", 2},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 4},
            {"intermediate_size", 96},
            {"vocab_size", 300},
            {"max_position_embeddings", 2048},
            {"original_max_position_embeddings", 64},
            {"rope_scaling",
             {{"type", "longrope"},
              {"short_factor", {1.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.5}},
              {"long_factor", {1.0, 4.0, 1.0, 1.0, 1.0, 1.0, 2.0, 8.0}}}}};
}

// _compute_longrope_parameters: inv_freq_i = 1 / (ext_i base^(2i/d)), ext the short factors while the
// sequence stays within original_max_position_embeddings (64), the long ones beyond
// (longrope_frequency_update); cos and sin times sqrt(1 + ln(factor) / ln(original)), factor = 2048 / 64
// = 32: sqrt(1 + 5 ln 2 / (6 ln 2)) = sqrt(11 / 6).
TEST(RopeScaling, LongRopeByHand) {
    const ModelConfig m = model_from_hf_config(longrope_config(), "phi3.5-like");
    ASSERT_EQ(m.head_dim, 16);
    EXPECT_EQ(m.rope_scaling.type, "longrope");
    EXPECT_EQ(m.rope_scaling.original_max_positions, 64);
    ASSERT_EQ(m.rope_scaling.short_factor.size(), 8u);
    const ref::RopeFrequencies within = ref::rope_frequencies(16, 10000.0, m.rope_scaling, 64, m.max_positions);
    EXPECT_DOUBLE_EQ(within.inv_freq[0], 1.0);
    EXPECT_NEAR(within.inv_freq[1], 0.5 * std::pow(10.0, -0.5), 1e-15);  // 1 / (2 x 10000^(2/16))
    EXPECT_NEAR(within.attention_factor, std::sqrt(11.0 / 6.0), 1e-12);
    const ref::RopeFrequencies beyond = ref::rope_frequencies(16, 10000.0, m.rope_scaling, 65, m.max_positions);
    EXPECT_NEAR(beyond.inv_freq[1], 0.25 * std::pow(10.0, -0.5), 1e-15);
    EXPECT_NEAR(beyond.inv_freq[7], 1.0 / (8.0 * std::pow(10000.0, 14.0 / 16.0)), 1e-18);
    EXPECT_NEAR(beyond.attention_factor, std::sqrt(11.0 / 6.0), 1e-12);
    // The tables carry the factor: position 0's cos is the factor itself, its sin 0.
    std::vector<double> c(3 * 16), sn(3 * 16);
    ref::rope_tables(c.data(), sn.data(), 3, 16, beyond);
    EXPECT_NEAR(c[0], std::sqrt(11.0 / 6.0), 1e-12);
    EXPECT_EQ(sn[0], 0.0);
    EXPECT_NEAR(c[16 + 1], std::sqrt(11.0 / 6.0) * std::cos(beyond.inv_freq[1]), 1e-12);
    // The rotation carries it too: position 1's query (1, 0, ...) turns by inv_freq 1 and grows by the factor.
    const ref::AttnShape one{1, 2, 1, 1, 16};
    std::vector<double> qkv(static_cast<std::size_t>(2 * one.qkv_width()), 0.0);
    qkv[static_cast<std::size_t>(one.qkv_width())] = 1.0;
    ref::rope_fwd(qkv.data(), one, beyond);
    EXPECT_NEAR(qkv[static_cast<std::size_t>(one.qkv_width())], std::sqrt(11.0 / 6.0) * std::cos(1.0), 1e-12);
    EXPECT_NEAR(qkv[static_cast<std::size_t>(one.qkv_width() + 8)], std::sqrt(11.0 / 6.0) * std::sin(1.0), 1e-12);
    // A given attention_factor, and a given factor, are taken as they are.
    nlohmann::json cfg = longrope_config();
    cfg["rope_scaling"]["attention_factor"] = 1.25;
    EXPECT_DOUBLE_EQ(ref::rope_frequencies(16, 10000.0, model_from_hf_config(cfg, "a").rope_scaling, 8, 2048).attention_factor,
                     1.25);
    cfg = longrope_config();
    cfg["max_position_embeddings"] = 64;  // no extension: factor 1, no scaling of cos and sin
    EXPECT_DOUBLE_EQ(ref::rope_frequencies(16, 10000.0, model_from_hf_config(cfg, "b").rope_scaling, 8, 64).attention_factor,
                     1.0);
}

// The backward is the forward's transpose, the attention factor included: <R x, y> = <x, R^T y>.
TEST(RopeScaling, LongRopeBackwardIsTheTranspose) {
    const ModelConfig m = model_from_hf_config(longrope_config(), "phi3.5-like");
    const ref::AttnShape a{1, 5, 4, 4, 16};
    const ref::RopeFrequencies f = ref::rope_frequencies(16, 10000.0, m.rope_scaling, 100, m.max_positions);
    const std::size_t n = static_cast<std::size_t>(a.s * a.qkv_width());
    std::vector<double> x(n), y(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = std::sin(0.37 * static_cast<double>(i)), y[i] = std::cos(0.11 * static_cast<double>(i));
    std::vector<double> rx = x, ry = y;
    ref::rope_fwd(rx.data(), a, f);
    ref::rope_bwd(ry.data(), a, f);
    double lhs = 0, rhs = 0, moved = 0;
    for (std::size_t i = 0; i < n; ++i) lhs += rx[i] * y[i], rhs += x[i] * ry[i], moved = std::max(moved, std::abs(rx[i] - x[i]));
    EXPECT_NEAR(lhs, rhs, 1e-12 * std::abs(lhs));
    EXPECT_GT(moved, 0.1);
}

TEST(RopeScaling, LongRopeFactorsAreChecked) {
    nlohmann::json cfg = longrope_config();
    for (const auto& [change, key] :
         {std::pair<nlohmann::json, const char*>{nlohmann::json::array({1.0, 1.0}), "rope_scaling.short_factor"},
          {nlohmann::json::array({1, 1, 1, 1, 1, 1, 1, -1}), "rope_scaling.short_factor"},
          {nlohmann::json("x"), "rope_scaling.short_factor"}}) {
        cfg["rope_scaling"]["short_factor"] = change;
        try {
            model_from_hf_config(cfg, "bad");
            ADD_FAILURE() << change.dump() << " accepted";
        } catch (const InputError& e) {
            EXPECT_EQ(e.subject(), key) << e.what();
        }
    }
    cfg = longrope_config();
    cfg["rope_scaling"].erase("long_factor");
    EXPECT_THROW(model_from_hf_config(cfg, "bad"), InputError);
}

// The program on the host against the whole-model reference past the original context (4 positions:
// the long factors, cos and sin times sqrt(1 + ln 512 / ln 4)), both attention kinds; the scaling
// changes the loss against the same parameters under plain RoPE.
TEST(RopeScaling, LongRopeProgramMatchesTheReference) {
    nlohmann::json cfg = longrope_config();
    cfg["original_max_position_embeddings"] = 4;
    const ModelConfig m = model_from_hf_config(cfg, "phi3.5-like");
    for (const AttentionKind at : {AttentionKind::flash, AttentionKind::eager}) {
        Plan p = test_support::micro_plan(1, 1, 0, Precision::fp32);  // seq 6
        p.attention = at;
        test_support::expect_host_matches_reference(build_program(m, p), "longrope " + to_flags(p));
    }
    cfg.erase("rope_scaling");
    const Plan p = test_support::micro_plan(1, 1, 0, Precision::fp32);
    const Program scaled = build_program(m, p), plain = build_program(model_from_hf_config(cfg, "plain"), p);
    const std::vector<double> params = ref::random_params(scaled, 5, 0.4);
    const double a = test_support::host_step_loss(scaled, params).loss, b = test_support::host_step_loss(plain, params).loss;
    EXPECT_GT(std::abs(a - b), 1e-6 * b) << "longrope " << a << ", plain " << b;
}

// Partial rotary (transformers' Phi3 apply_rotary_pos_emb: q[..., :rotary_dim] rotated, the rest passed
// through): d 4, 2 rotated. Position 1 turns (1, 0) by base^0 = 1 radian; dimensions 2 and 3 stay.
TEST(RopeScaling, PartialRotaryByHand) {
    ref::AttnShape a{1, 2, 1, 1, 4};
    a.rot = 2;
    std::vector<double> qkv(static_cast<std::size_t>(2 * a.qkv_width()), 0.0);
    double* q1 = qkv.data() + a.qkv_width();  // position 1's query
    q1[0] = 1, q1[2] = 5, q1[3] = 7;
    ref::rope_fwd(qkv.data(), a, 10000.0);
    EXPECT_NEAR(q1[0], std::cos(1.0), 1e-15);
    EXPECT_NEAR(q1[1], std::sin(1.0), 1e-15);
    EXPECT_EQ(q1[2], 5.0);
    EXPECT_EQ(q1[3], 7.0);
    std::vector<double> c(2 * 4), sn(2 * 4);
    ref::rope_tables_cp(c.data(), sn.data(), a, ref::rope_inv_freq(2, 10000.0, {}));
    EXPECT_EQ(c[4 + 3], 1.0);  // past the rotated dimensions: the identity
    EXPECT_EQ(sn[4 + 3], 0.0);
}

// A partial rotary LongRoPE model (half of each head rotated, 4 factors for head_dim 16: Phi-4-mini's
// layout) on the host against the whole-model reference; rotating the whole head gives another loss.
TEST(RopeScaling, PartialRotaryProgramMatchesTheReference) {
    nlohmann::json cfg = longrope_config();
    cfg["original_max_position_embeddings"] = 4;
    cfg["partial_rotary_factor"] = 0.5;
    cfg["rope_scaling"]["short_factor"] = {1.0, 2.0, 1.0, 1.5};
    cfg["rope_scaling"]["long_factor"] = {1.0, 4.0, 2.0, 8.0};
    const ModelConfig m = model_from_hf_config(cfg, "phi4-mini-like");
    ASSERT_EQ(m.rope_dims(), 8);
    Plan p = test_support::micro_plan(1, 1, 0, Precision::fp32);
    const Program P = build_program(m, p);
    EXPECT_EQ(P.dims.rope_dims, 8);
    test_support::expect_host_matches_reference(P, "partial rotary longrope");
    p.attention = AttentionKind::eager;
    test_support::expect_host_matches_reference(build_program(m, p), "partial rotary longrope, eager");
    cfg["partial_rotary_factor"] = 1.0;
    cfg["rope_scaling"]["short_factor"] = {1.0, 2.0, 1.0, 1.5, 1.0, 1.0, 1.0, 1.0};
    cfg["rope_scaling"]["long_factor"] = {1.0, 4.0, 2.0, 8.0, 1.0, 1.0, 1.0, 1.0};
    const Program whole = build_program(model_from_hf_config(cfg, "whole"), test_support::micro_plan(1, 1, 0, Precision::fp32));
    const std::vector<double> params = ref::random_params(P, 5, 0.4);
    const double a = test_support::host_step_loss(P, params).loss, b = test_support::host_step_loss(whole, params).loss;
    EXPECT_GT(std::abs(a - b), 1e-6 * b) << "half rotated " << a << ", whole " << b;
    // An odd number of rotated dimensions has no pairs to rotate: refused naming the key.
    cfg["partial_rotary_factor"] = 0.3125;  // 5 of 16
    cfg.erase("rope_scaling");
    try {
        build_program(model_from_hf_config(cfg, "odd"), test_support::micro_plan(1, 1, 0, Precision::fp32));
        ADD_FAILURE() << "5 rotated dimensions accepted";
    } catch (const InputError& e) {
        EXPECT_EQ(e.subject(), "partial_rotary_factor") << e.what();
    }
}

TEST(RopeScaling, WeightDecayDefaultsToTheReferenceScript) {
    // validation/pytorch/train.py: AdamW(lr 1e-3, betas (0.9, 0.95), weight_decay 0.1) on the matrices.
    const TrainHyper h;
    EXPECT_DOUBLE_EQ(h.weight_decay, 0.1);
    EXPECT_DOUBLE_EQ(h.beta2, 0.95);
}

}  // namespace
}  // namespace preflight::runtime
