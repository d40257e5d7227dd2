// RoPE frequencies from the model config: rope_theta and Llama-3 scaling (HF
// transformers _compute_llama3_parameters), as the runtime and its CPU reference use them.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>

#include <nlohmann/json.hpp>

#include "catalog_fixture.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/runtime/program.hpp"
#include "preflight/runtime/reference.hpp"

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

TEST(RopeScaling, WeightDecayDefaultsToTheReferenceScript) {
    // validation/pytorch/train.py: AdamW(lr 1e-3, betas (0.9, 0.95), weight_decay 0.1) on the matrices.
    const TrainHyper h;
    EXPECT_DOUBLE_EQ(h.weight_decay, 0.1);
    EXPECT_DOUBLE_EQ(h.beta2, 0.95);
}

}  // namespace
}  // namespace preflight::runtime
