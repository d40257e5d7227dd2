// Exact parameter counts of every catalog model, against published figures
// (Hugging Face model cards / safetensors metadata; GPT-2 sizes as reported by
// transformers' num_parameters()).
#include <gtest/gtest.h>

#include <tuple>

#include "catalog_fixture.hpp"
#include "preflight/planner/error.hpp"

namespace preflight {
namespace {

struct Published {
    const char* name;
    std::int64_t params;
};

class CatalogParams : public ::testing::TestWithParam<Published> {};

TEST_P(CatalogParams, TotalMatchesPublishedCount) {
    const auto& p = GetParam();
    const ParamCounts c = count_params(test::catalog_model(p.name));
    EXPECT_EQ(c.total, p.params) << p.name;
}

INSTANTIATE_TEST_SUITE_P(
    Catalog, CatalogParams,
    ::testing::Values(Published{"gpt2", 124'439'808}, Published{"gpt2-medium", 354'823'168},
                      Published{"gpt2-large", 774'030'080}, Published{"gpt2-xl", 1'557'611'200},
                      Published{"llama-2-7b", 6'738'415'616}, Published{"llama-2-13b", 13'015'864'320},
                      Published{"llama-2-70b", 68'976'648'192}, Published{"llama-3-8b", 8'030'261'248},
                      Published{"llama-3-70b", 70'553'706'496}, Published{"llama-3.1-405b", 405'853'388'800},
                      Published{"llama-3.2-1b", 1'235'814'400}, Published{"llama-3.2-3b", 3'212'749'824},
                      Published{"smollm-360m", 361'821'120}, Published{"smollm-1.7b", 1'711'376'384},
                      Published{"mistral-7b", 7'241'732'096}, Published{"qwen2.5-7b", 7'615'616'512},
                      Published{"mixtral-8x7b", 46'702'792'704},
                      // Qwen3: the model cards give 8.2B and 30.5B (Params.Qwen3*ByHand derives the counts).
                      Published{"qwen3-8b", 8'190'735'360}, Published{"qwen3-30b-a3b", 30'532'122'624},
                      // Phi-3-mini: 3,821,079,552, as keras-hub's phi3_presets.py lists it; Phi-4: the
                      // model card's 14B (Params.Phi3FusedProjectionsByHand derives both).
                      Published{"phi-3-mini-4k", 3'821'079'552}, Published{"phi-4", 14'659'507'200},
                      // Gemma 3 1B: the model card's 1B (Params.Gemma3TextByHand derives the count).
                      Published{"gemma-3-1b", 999'885'952},
                      // OLMo 2 13B: its checkpoint's model.safetensors.index.json holds 54,864,793,600 bytes of
                      // fp32 tensors; OLMo 2 7B: the model card's 7B (Params.Olmo2ByHand derives both).
                      Published{"olmo-2-13b", 54'864'793'600 / 4}, Published{"olmo-2-7b", 7'298'617'344},
                      // OLMoE-1B-7B: 6,919,161,856, the parameter count the Hugging Face API reports for its
                      // safetensors (F32) and llama.cpp for its GGUF (Params.OlmoeByHand derives it).
                      Published{"olmoe-1b-7b", 6'919'161'856},
                      // gpt-oss: OpenAI's model card gives 20.91B and 116.83B (Params.GptOssByHand).
                      Published{"gpt-oss-20b", 20'914'757'184}, Published{"gpt-oss-120b", 116'829'156'672},
                      // MPT builds of llm-foundry's benchmark tables (NumParams at seq 2048,
                      // scripts/train/benchmarking/README.md).
                      Published{"mpt-125m", 125'311'488}, Published{"mpt-350m", 355'985'408},
                      Published{"mpt-760m", 760'470'528}, Published{"mpt-1b", 1'315'950'592},
                      Published{"mpt-3b", 2'651'837'440}, Published{"mpt-7b", 6'658'859'008},
                      Published{"mpt-13b", 12'853'954'560}, Published{"mpt-30b", 29'975'214'080},
                      Published{"mpt-70b", 64'862'437'376}),
    [](const auto& info) {
        std::string n = info.param.name;
        for (char& ch : n)
            if (ch == '-' || ch == '.') ch = '_';
        return n;
    });

TEST(Params, CatalogHoldsExactlyTheThirtySixModels) {
    EXPECT_EQ(catalog_models(test::data_dir()).size(), 36u);
}

TEST(Params, DenseModelsAreFullyActive) {
    for (const char* name : {"gpt2", "llama-3-8b", "qwen2.5-7b"}) {
        const ParamCounts c = count_params(test::catalog_model(name));
        EXPECT_EQ(c.active, c.total) << name;
    }
}

TEST(Params, MixtralActiveParamsByHand) {
    // Per layer: q,o 4096x4096 each; k,v 1024x4096 each; two RMSNorms; router 8x4096;
    // two of eight experts, each 3 x 4096x14336 (Jiang et al. 2024: "13B active").
    const std::int64_t attn = 2 * 4096LL * 4096 + 2 * 1024LL * 4096;
    const std::int64_t norms = 2 * 4096;
    const std::int64_t router = 8 * 4096;
    const std::int64_t expert = 3 * 4096LL * 14336;
    const std::int64_t per_layer_active = attn + norms + router + 2 * expert;
    const std::int64_t outside = 2 * 32000LL * 4096 + 4096;  // untied embedding + head, final norm
    const ParamCounts c = count_params(test::catalog_model("mixtral-8x7b"));
    EXPECT_EQ(c.active, outside + 32 * per_layer_active);
    EXPECT_EQ(c.active, 12'879'925'248);
}

TEST(Params, Qwen3DenseByHand) {
    // Qwen3-8B (model card: 8.2B, 6.95B without the embeddings): q and o 4096 x (32 x 128), k and v
    // (8 x 128) x 4096, the SwiGLU 3 x 4096 x 12288, two RMSNorms of 4096 and the q/k norms of
    // head_dim 128; untied embedding and head of 151,936 x 4096, the final norm.
    const std::int64_t layer = 2 * 4096LL * 4096 + 2 * 1024LL * 4096 + 3 * 4096LL * 12288 + 2 * 4096 + 2 * 128;
    const ModelConfig m = test::catalog_model("qwen3-8b");
    EXPECT_TRUE(m.qk_norm);
    const ParamCounts c = count_params(m);
    EXPECT_EQ(c.per_layer, layer);
    EXPECT_EQ(c.total, 2 * 151936LL * 4096 + 36 * layer + 4096);
    EXPECT_EQ(c.total - c.embedding - c.lm_head, 6'946'075'648);  // "6.95B non-embedding"
    EXPECT_EQ(c.active, c.total);
}

TEST(Params, Qwen3MoeByHand) {
    // Qwen3-30B-A3B (model card: 30.5B, 3.3B activated, 29.9B without the embeddings): q and o
    // 2048 x 4096, k and v 512 x 2048, q/k norms 2 x 128, two RMSNorms of 2048, a router of
    // 128 x 2048 and 128 SwiGLU experts of 3 x 2048 x 768, 8 of them routed per token; 48 layers.
    const std::int64_t attn = 2 * 2048LL * 4096 + 2 * 512LL * 2048, norms = 2 * 2048 + 2 * 128;
    const std::int64_t router = 128 * 2048, expert = 3 * 2048LL * 768;
    const std::int64_t outside = 2 * 151936LL * 2048 + 2048;
    const ParamCounts c = count_params(test::catalog_model("qwen3-30b-a3b"));
    EXPECT_EQ(c.total, outside + 48 * (attn + norms + router + 128 * expert));
    EXPECT_EQ(c.active, outside + 48 * (attn + norms + router + 8 * expert));
    EXPECT_EQ(c.active, 3'353'032'704);
}

TEST(Params, GptOssByHand) {
    // gpt-oss (OpenAI's model card, table 1: gpt-oss-20b 20.91B total, 3.61B active; gpt-oss-120b
    // 116.83B, 5.13B). A layer: q 2880 -> 64 x 64 and o back, k and v 2880 -> 8 x 64, each with its
    // bias; 64 sink logits; two RMSNorms of 2880; a router 2880 -> E with a bias; E experts of a
    // gate|up 2880 -> 2 x 2880 and a down 2880 -> 2880, with their biases. Untied 201,088 x 2880
    // embedding and head, and the final norm.
    const std::int64_t attn = 2 * (2880LL * 4096) + 4096 + 2880 + 2 * (2880LL * 512 + 512) + 64, norms = 2 * 2880;
    const std::int64_t expert = 2880LL * 5760 + 5760 + 2880LL * 2880 + 2880;
    const std::int64_t embed = 201088LL * 2880;
    const auto layer = [&](std::int64_t e, std::int64_t used) { return attn + norms + 2881 * e + used * expert; };
    const ModelConfig small = test::catalog_model("gpt-oss-20b"), large = test::catalog_model("gpt-oss-120b");
    EXPECT_TRUE(small.attention_sinks && small.router_bias && small.fused_gate_up && small.mlp_bias);
    EXPECT_EQ(small.glu_clamp, 7.0);
    const ParamCounts s = count_params(small), l = count_params(large);
    EXPECT_EQ(s.per_layer, layer(32, 32));
    EXPECT_EQ(s.total, 2 * embed + 24 * layer(32, 32) + 2880);
    EXPECT_EQ(l.total, 2 * embed + 36 * layer(128, 128) + 2880);
    EXPECT_EQ(s.active, 2 * embed + 24 * layer(32, 4) + 2880);
    // The card's active count leaves the embedding out and keeps the head (and the final norm):
    // 3,608,307,264 and 5,132,849,472 round to its 3.61B and 5.13B.
    EXPECT_EQ(s.active - embed, 3'608'307'264);
    EXPECT_EQ(l.active - embed, 5'132'849'472);
    // Every second layer attends through 128 keys (layer_types: sliding first), 12 of 24 and 18 of
    // 36 see the whole sequence, every 2nd in Megatron-LM's count.
    EXPECT_EQ(small.sliding_window, 128);
    EXPECT_EQ(small.full_attention_layers, 12);
    EXPECT_EQ(large.full_attention_layers, 18);
    EXPECT_EQ(small.full_attention_period, 2);
}

TEST(Params, Phi3FusedProjectionsByHand) {
    // Phi-3's qkv_proj holds q, k and v in one (q + 2 kv) x h weight and gate_up_proj gate and up in
    // one 2f x h: the counts are Llama's. Phi-4: q 40 x 128 = 5120, kv 10 x 128 = 1280, f 17920,
    // 40 layers, untied 100,352 x 5120 embedding and head. Phi-3-mini: MHA, h 3072, f 8192, 32
    // layers, untied 32,064 x 3072.
    const std::int64_t phi4_layer = 5120LL * (5120 + 2 * 1280) + 5120LL * 5120 + 5120LL * 2 * 17920 + 17920LL * 5120 + 2 * 5120;
    const ModelConfig phi4 = test::catalog_model("phi-4");
    EXPECT_TRUE(phi4.fused_qkv && phi4.fused_gate_up);
    EXPECT_FALSE(phi4.qkv_bias || phi4.out_bias || phi4.mlp_bias);
    const ParamCounts c4 = count_params(phi4);
    EXPECT_EQ(c4.per_layer, phi4_layer);
    EXPECT_EQ(c4.total, 2 * 100352LL * 5120 + 40 * phi4_layer + 5120);
    const std::int64_t mini_layer = 3072LL * 3 * 3072 + 3072LL * 3072 + 3072LL * 2 * 8192 + 8192LL * 3072 + 2 * 3072;
    EXPECT_EQ(count_params(test::catalog_model("phi-3-mini-4k")).total, 2 * 32064LL * 3072 + 32 * mini_layer + 3072);
    // Phi-3-mini-4k attends through a 2,047-key window (Phi3Model's sliding-window mask).
    EXPECT_EQ(test::catalog_model("phi-3-mini-4k").sliding_window, 2047);
    EXPECT_EQ(phi4.sliding_window, 0);
}

TEST(Params, Gemma3TextByHand) {
    // Gemma 3 1B (google/gemma-3-1b-pt): q 4 x 256 = 1024 and o from 1024 to 1152, k and v 1 x 256,
    // the gated MLP 3 x 1152 x 6912, four RMSNorms of 1152 (two before, two after the sublayers) and
    // the q/k norms of head_dim 256; 26 layers; the tied embedding 262,144 x 1152 and the final norm.
    const std::int64_t layer = 2 * 1152LL * 1024 + 2 * 1152LL * 256 + 3 * 1152LL * 6912 + 4 * 1152 + 2 * 256;
    const ModelConfig m = test::catalog_model("gemma-3-1b");
    EXPECT_TRUE(m.post_norms && m.qk_norm && m.tied_embeddings);
    const ParamCounts c = count_params(m);
    EXPECT_EQ(c.per_layer, layer);
    EXPECT_EQ(c.total, 262144LL * 1152 + 26 * layer + 1152);
    // Five layers in six attend through 512 keys: layers 5, 11, 17 and 23 see the whole sequence.
    EXPECT_EQ(m.sliding_window, 512);
    EXPECT_EQ(m.full_attention_layers, 4);
    EXPECT_EQ(m.full_attention_period, 6);
}

TEST(Params, Olmo2ByHand) {
    // OLMo 2 (allenai/OLMo-2-1124-13B and -7B): q, k, v and o of h x h (40 and 32 heads of 128, no
    // grouping), the gated MLP 3 x h x f, no norm on the sublayer inputs but one of h on each output,
    // and the q and k norms over the whole projections (h weights each); an untied 100,352-token head.
    for (const auto& [name, hh, f, layers] : {std::tuple{"olmo-2-13b", 5120LL, 13824LL, 40LL},
                                             std::tuple{"olmo-2-7b", 4096LL, 11008LL, 32LL}}) {
        const ModelConfig m = test::catalog_model(name);
        EXPECT_TRUE(m.post_norms && !m.pre_norms && m.qk_norm && m.qk_norm_whole && !m.tied_embeddings) << name;
        const std::int64_t layer = 4 * hh * hh + 3 * hh * f + 2 * hh + 2 * hh;
        const ParamCounts c = count_params(m);
        EXPECT_EQ(c.per_layer, layer) << name;
        EXPECT_EQ(c.total, 2 * 100352 * hh + layers * layer + hh) << name;
    }
    // The 13B's: 13,716,198,400, a quarter of its fp32 checkpoint's 54,864,793,600 bytes.
    EXPECT_EQ(count_params(test::catalog_model("olmo-2-13b")).total, 13'716'198'400);
    // The q/k norm weights split with the heads under tensor parallelism; no input norms at all.
    for (const ParamTensor& t : param_tensors(test::catalog_model("olmo-2-7b"))) {
        EXPECT_NE(t.name, "attn_norm.weight");
        EXPECT_NE(t.name, "mlp_norm.weight");
        if (t.name == "q_norm.weight" || t.name == "k_norm.weight") {
            EXPECT_EQ(t.rows, 4096);
            EXPECT_EQ(t.split, TpSplit::column);
        }
    }
}

TEST(Params, OlmoeByHand) {
    // OLMoE-1B-7B (allenai/OLMoE-1B-7B-0924): q, k, v and o of 2048 x 2048, q and k norms over the whole
    // projections (2048 each), two pre-norms of 2048, a router of 64 x 2048 and 64 SwiGLU experts of
    // 3 x 2048 x 1024, 8 routed; 16 layers, an untied 50,304-token head. Active: 8 experts a layer, the
    // 1B of its name (1.28B with the embedding and the head).
    const std::int64_t expert = 3 * 2048LL * 1024;
    const std::int64_t shared = 4 * 2048LL * 2048 + 2 * 2048 + 2 * 2048 + 64 * 2048;
    const ModelConfig m = test::catalog_model("olmoe-1b-7b");
    EXPECT_TRUE(m.qk_norm && m.qk_norm_whole && m.pre_norms && !m.post_norms);
    const ParamCounts c = count_params(m);
    EXPECT_EQ(c.per_layer, shared + 64 * expert);
    EXPECT_EQ(c.total, 2 * 50304LL * 2048 + 16 * (shared + 64 * expert) + 2048);
    EXPECT_EQ(c.active, 2 * 50304LL * 2048 + 16 * (shared + 8 * expert) + 2048);
    EXPECT_EQ(c.active, 1'282'017'280);
}

TEST(Params, Gpt2SmallByHand) {
    // wte 50257x768 (tied head), wpe 1024x768; per layer: 2 LayerNorms (w+b), c_attn 768x2304+2304,
    // attn c_proj 768x768+768, c_fc 768x3072+3072, mlp c_proj 3072x768+768; final LayerNorm.
    const std::int64_t h = 768;
    const std::int64_t layer = 2 * 2 * h + (h * 3 * h + 3 * h) + (h * h + h) + (h * 4 * h + 4 * h) + (4 * h * h + h);
    const std::int64_t total = 50257 * h + 1024 * h + 12 * layer + 2 * h;
    const ParamCounts c = count_params(test::catalog_model("gpt2"));
    EXPECT_EQ(c.per_layer, layer);
    EXPECT_EQ(c.total, total);
    EXPECT_EQ(c.lm_head, 0);  // tied: counted once, as the embedding
}

TEST(Params, TiedLlamaCountsEmbeddingOnce) {
    const ModelConfig m = test::catalog_model("llama-3.2-1b");
    ASSERT_TRUE(m.tied_embeddings);
    const ParamCounts c = count_params(m);
    EXPECT_EQ(c.lm_head, 0);
    EXPECT_EQ(c.embedding, 128256LL * 2048);
}

TEST(Params, Qwen2HasQkvBiasOnly) {
    const ModelConfig m = test::catalog_model("qwen2.5-7b");
    EXPECT_TRUE(m.qkv_bias);
    EXPECT_FALSE(m.out_bias);
    EXPECT_FALSE(m.mlp_bias);
}

TEST(Params, HeadDimFromConfigOverridesHiddenOverHeads) {
    nlohmann::json cfg = {{"model_type", "llama"},      {"hidden_size", 64},     {"num_hidden_layers", 1},
                          {"num_attention_heads", 4},   {"num_key_value_heads", 2}, {"head_dim", 32},
                          {"intermediate_size", 128},   {"vocab_size", 100},     {"max_position_embeddings", 16}};
    const ModelConfig m = model_from_hf_config(cfg, "t");
    // q: 4*32 x 64, k,v: 2*32 x 64, o: 64 x 128, MLP 3 x 64x128, 2 norms.
    const std::int64_t layer = 128 * 64 + 2 * 64 * 64 + 64 * 128 + 3 * 64 * 128 + 2 * 64;
    EXPECT_EQ(count_params(m).per_layer, layer);
}

}  // namespace
}  // namespace preflight
