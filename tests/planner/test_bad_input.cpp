// Every malformed or inconsistent input raises InputError naming the field, flag or file.
#include <gtest/gtest.h>

#include <fstream>

#include "catalog_fixture.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/memory.hpp"
#include "preflight/planner/profiles.hpp"

namespace preflight {
namespace {

nlohmann::json llama_cfg() {
    return {{"model_type", "llama"},       {"hidden_size", 256},       {"num_hidden_layers", 2},
            {"num_attention_heads", 8},    {"num_key_value_heads", 4}, {"intermediate_size", 512},
            {"vocab_size", 1000},          {"max_position_embeddings", 512}};
}

// Runs f and returns the subject of the InputError it throws ("" if none).
template <typename F>
std::string subject_of(F f) {
    try {
        f();
    } catch (const InputError& e) {
        return e.subject();
    }
    return "";
}

TEST(BadInput, ValidConfigLoads) { EXPECT_NO_THROW(model_from_hf_config(llama_cfg(), "ok")); }

TEST(BadInput, MissingDimension) {
    auto cfg = llama_cfg();
    cfg.erase("hidden_size");
    EXPECT_EQ(subject_of([&] { model_from_hf_config(cfg, "x"); }), "hidden_size");
}

TEST(BadInput, NegativeDimension) {
    auto cfg = llama_cfg();
    cfg["num_hidden_layers"] = -2;
    EXPECT_EQ(subject_of([&] { model_from_hf_config(cfg, "x"); }), "num_hidden_layers");
}

TEST(BadInput, NonIntegerDimension) {
    auto cfg = llama_cfg();
    cfg["vocab_size"] = "many";
    EXPECT_EQ(subject_of([&] { model_from_hf_config(cfg, "x"); }), "vocab_size");
}

TEST(BadInput, HeadsNotDividingHidden) {
    auto cfg = llama_cfg();
    cfg["num_attention_heads"] = 6;
    cfg["num_key_value_heads"] = 6;
    EXPECT_EQ(subject_of([&] { model_from_hf_config(cfg, "x"); }), "num_attention_heads");
}

TEST(BadInput, KvHeadsNotDividingHeads) {
    auto cfg = llama_cfg();
    cfg["num_key_value_heads"] = 3;
    EXPECT_EQ(subject_of([&] { model_from_hf_config(cfg, "x"); }), "num_key_value_heads");
}

TEST(BadInput, UnknownModelType) {
    auto cfg = llama_cfg();
    cfg["model_type"] = "mamba";
    EXPECT_EQ(subject_of([&] { model_from_hf_config(cfg, "x"); }), "model_type");
}

TEST(BadInput, MoeTopKAboveExperts) {
    auto cfg = llama_cfg();
    cfg["model_type"] = "mixtral";
    cfg["num_local_experts"] = 2;
    cfg["num_experts_per_tok"] = 3;
    EXPECT_EQ(subject_of([&] { model_from_hf_config(cfg, "x"); }), "num_experts_per_tok");
}

// Qwen3-MoE (HF Qwen3MoeDecoderLayer): dense MLP layers among the sparse ones cannot be planned
// as identical layers; the refusal names the key.
TEST(BadInput, Qwen3MoeWithDenseLayersIsRefused) {
    auto cfg = llama_cfg();
    cfg["model_type"] = "qwen3_moe";
    cfg["num_experts"] = 4;
    cfg["num_experts_per_tok"] = 2;
    cfg["moe_intermediate_size"] = 128;
    EXPECT_EQ(subject_of([&] { model_from_hf_config(cfg, "x"); }), "");
    cfg["mlp_only_layers"] = {0};
    EXPECT_EQ(subject_of([&] { model_from_hf_config(cfg, "x"); }), "mlp_only_layers");
    cfg["mlp_only_layers"] = nlohmann::json::array();
    cfg["decoder_sparse_step"] = 2;
    EXPECT_EQ(subject_of([&] { model_from_hf_config(cfg, "x"); }), "decoder_sparse_step");
    cfg["decoder_sparse_step"] = 1;
    cfg.erase("moe_intermediate_size");
    EXPECT_EQ(subject_of([&] { model_from_hf_config(cfg, "x"); }), "moe_intermediate_size");
}

// Qwen3-MoE's and OLMoE's norm_topk_prob (false by their config classes' default): gate weights
// renormalised over the chosen experts, or the softmax over all experts as it is. The runtime trains
// either (since 2026-12-03; it refused the latter before).
TEST(BadInput, MoeGateRenormalisationAsConfigsSayIt) {
    auto cfg = llama_cfg();
    cfg["model_type"] = "qwen3_moe";
    cfg["num_experts"] = 4;
    cfg["num_experts_per_tok"] = 2;
    cfg["moe_intermediate_size"] = 128;
    ModelConfig m = model_from_hf_config(cfg, "x");
    EXPECT_FALSE(m.moe_renormalize);
    EXPECT_EQ(subject_of([&] { check_runtime_model(m); }), "");
    cfg["norm_topk_prob"] = true;
    m = model_from_hf_config(cfg, "x");
    EXPECT_TRUE(m.moe_renormalize);
    EXPECT_EQ(subject_of([&] { check_runtime_model(m); }), "");
    cfg["norm_topk_prob"] = "yes";
    EXPECT_EQ(subject_of([&] { model_from_hf_config(cfg, "x"); }), "norm_topk_prob");
    EXPECT_TRUE(test::catalog_model("qwen3-30b-a3b").moe_renormalize);
    EXPECT_FALSE(test::catalog_model("olmoe-1b-7b").moe_renormalize);
    EXPECT_TRUE(test::catalog_model("mixtral-8x7b").moe_renormalize);
}

// Sliding windows as transformers apply them: Mistral's whenever set; Qwen2's and Qwen3's only with
// use_sliding_window, on the layers from max_window_layers on; Llama has none. Layers of two kinds
// are refused naming the key. `preflight run` windows every layer alike: a window on every layer runs
// at any length, one on some layers only (Gemma 3's) is refused past the window.
TEST(BadInput, SlidingWindowsAsTransformersApplyThem) {
    auto qwen = llama_cfg();  // 2 layers
    qwen["model_type"] = "qwen2";
    qwen["sliding_window"] = 128;
    EXPECT_EQ(model_from_hf_config(qwen, "x").sliding_window, 0);
    qwen["use_sliding_window"] = true;
    qwen["max_window_layers"] = 0;
    EXPECT_EQ(model_from_hf_config(qwen, "x").sliding_window, 128);
    qwen["max_window_layers"] = 2;
    EXPECT_EQ(model_from_hf_config(qwen, "x").sliding_window, 0);
    qwen["max_window_layers"] = 1;
    EXPECT_EQ(subject_of([&] { model_from_hf_config(qwen, "x"); }), "max_window_layers");
    auto mistral = llama_cfg();
    mistral["model_type"] = "mistral";
    mistral["sliding_window"] = 64;
    const ModelConfig m = model_from_hf_config(mistral, "x");
    EXPECT_EQ(m.sliding_window, 64);
    mistral["layer_types"] = {"full_attention", "sliding_attention"};
    EXPECT_EQ(subject_of([&] { model_from_hf_config(mistral, "x"); }), "layer_types");
    mistral["layer_types"] = {"sliding_attention"};  // one kind for 2 layers: refused, not read as all
    EXPECT_EQ(subject_of([&] { model_from_hf_config(mistral, "x"); }), "layer_types");
    mistral["layer_types"] = {"sliding_attention", "sliding_attention"};
    EXPECT_EQ(model_from_hf_config(mistral, "x").sliding_window, 64);
    auto llama = llama_cfg();
    llama["sliding_window"] = 64;
    EXPECT_EQ(model_from_hf_config(llama, "x").sliding_window, 0);
    Plan p;
    p.seq = 64;
    EXPECT_EQ(subject_of([&] { check_runtime_plan(m, p); }), "");
    p.seq = 128;
    EXPECT_EQ(subject_of([&] { check_runtime_plan(m, p); }), "");
    ModelConfig two_kinds = m;  // one layer of the two full, as Gemma 3's one in six
    two_kinds.full_attention_layers = 1;
    two_kinds.full_attention_period = 2;
    EXPECT_EQ(subject_of([&] { check_runtime_plan(two_kinds, p); }), "");  // since 2026-12-04 (Dims::window_of)
    two_kinds.full_attention_period = 0;  // a layer_types list that follows no period
    EXPECT_EQ(subject_of([&] { check_runtime_plan(two_kinds, p); }), "--seq");
    p.seq = 64;
    EXPECT_EQ(subject_of([&] { check_runtime_plan(two_kinds, p); }), "");
}

TEST(BadInput, AnErrorWhoseSubjectHoldsANulByteKeepsItsDetail) {
    // Found by the fuzzer (a Megatron script with NUL bytes in a line the error quotes): detail() was
    // cut from what(), which ends at the first NUL, and threw std::out_of_range past its end.
    const InputError e(std::string("script.sh:3\0\0x", 14), "names no model we know");
    EXPECT_EQ(e.detail(), "names no model we know");
    EXPECT_EQ(e.subject().size(), 14u);
}

TEST(BadInput, Gemma3TextAsTransformersBuildIt) {
    // Gemma3TextConfig: sliding unless (i + 1) % sliding_window_pattern == 0 (default 6, window 4096),
    // head_dim 256 and 4 key/value heads by default, a tied head, hidden_activation for the gate.
    auto g = llama_cfg();  // hidden 256, 8 heads
    g["model_type"] = "gemma3_text";
    g["num_hidden_layers"] = 12;
    g.erase("num_key_value_heads");
    ModelConfig m = model_from_hf_config(g, "g");
    EXPECT_EQ(m.sliding_window, 4096);
    EXPECT_EQ(m.full_attention_layers, 2);  // layers 5 and 11 of 0..11
    EXPECT_EQ(m.head_dim, 256);
    EXPECT_EQ(m.kv_heads, 4);
    EXPECT_TRUE(m.tied_embeddings && m.qk_norm && m.post_norms);
    EXPECT_EQ(m.activation, "gelu_pytorch_tanh");
    g["sliding_window_pattern"] = 4;
    EXPECT_EQ(model_from_hf_config(g, "g").full_attention_layers, 3);
    g["layer_types"] = nlohmann::json::array();
    for (int i = 0; i < 12; ++i) g["layer_types"].push_back(i < 9 ? "sliding_attention" : "full_attention");
    EXPECT_EQ(model_from_hf_config(g, "g").full_attention_layers, 3);
    // transformers 5: rope_parameters keyed by layer type; the global (full_attention) entry is read.
    g["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e6}}},
                            {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 1e4}}}};
    EXPECT_DOUBLE_EQ(model_from_hf_config(g, "g").rope_theta, 1e6);
    g["final_logit_softcapping"] = 30.0;  // Gemma 2's tanh over the logits: not counted, refused
    EXPECT_EQ(subject_of([&] { model_from_hf_config(g, "g"); }), "final_logit_softcapping");
    g.erase("final_logit_softcapping");
    g["model_type"] = "gemma3";  // the multimodal model: its vision tower is not modelled
    EXPECT_EQ(subject_of([&] { model_from_hf_config(g, "g"); }), "model_type");
    // Neither the runtime nor the pytorch profile (Hugging Face's modules op by op) has Gemma's norms.
    g["model_type"] = "gemma3_text";
    m = model_from_hf_config(g, "g");
    EXPECT_EQ(subject_of([&] { check_runtime_model(m); }), "--model");
    Plan p;
    p.seq = 256;
    EXPECT_EQ(subject_of([&] { pytorch_profile().check_plan(m, p); }), "--model");
}

TEST(BadInput, OlmoAsTransformersBuildIt) {
    // Olmo2Config: Llama's keys, norms on the sublayer outputs only, q/k norms over the whole projections.
    auto g = llama_cfg();  // hidden 256, 8 heads of 32, 4 kv heads
    g["model_type"] = "olmo2";
    g["num_hidden_layers"] = 8;
    ModelConfig m = model_from_hf_config(g, "o");
    EXPECT_TRUE(m.post_norms && !m.pre_norms && m.qk_norm && m.qk_norm_whole);
    EXPECT_EQ(m.sliding_window, 0);
    EXPECT_NO_THROW(check_runtime_model(m));  // preflight run executes it (at tp 1: test_olmo2.cpp)
    // Olmo3Config: a window of 4096 keys, every fourth layer full when layer_types is not given.
    g["model_type"] = "olmo3";
    m = model_from_hf_config(g, "o");
    EXPECT_EQ(m.sliding_window, 4096);
    EXPECT_EQ(m.full_attention_layers, 2);  // layers 3 and 7 of 0..7
    EXPECT_EQ(m.full_attention_period, 4);
    EXPECT_TRUE(m.post_norms && !m.pre_norms && m.qk_norm_whole);
    g["sliding_window"] = 64;
    g["layer_types"] = nlohmann::json::array();
    for (int i = 0; i < 8; ++i) g["layer_types"].push_back(i % 2 ? "full_attention" : "sliding_attention");
    m = model_from_hf_config(g, "o");
    EXPECT_EQ(m.sliding_window, 64);
    EXPECT_EQ(m.full_attention_period, 2);
    // transformers 5: rope_parameters keyed by layer type; the full layers' (YaRN) entry is read.
    g["rope_parameters"] = {{"full_attention", {{"rope_type", "yarn"}, {"rope_theta", 5e5}, {"factor", 8.0},
                                                {"original_max_position_embeddings", 128}}},
                            {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 5e5}}}};
    m = model_from_hf_config(g, "o");
    EXPECT_EQ(m.rope_scaling.type, "yarn");
    EXPECT_DOUBLE_EQ(m.rope_scaling.factor, 8.0);
    // The runtime runs OLMo's norms (since 2026-12-04) but not YaRN; neither the pytorch profile
    // (Hugging Face's modules op by op) nor nanotron's models have them.
    EXPECT_EQ(subject_of([&] { check_runtime_model(m); }), "rope_scaling.rope_type");
    Plan p;
    p.seq = 256;
    EXPECT_EQ(subject_of([&] { pytorch_profile().check_plan(m, p); }), "--model");
    EXPECT_EQ(subject_of([&] { profile_by_name("nanotron")->check_model(m); }), "--model");
}

TEST(BadInput, OlmoeAsTransformersBuildIt) {
    // OlmoeConfig: num_experts experts of intermediate_size, num_experts_per_tok routed; pre-norms kept,
    // q/k norms over the whole projections; clip_qkv (null in the released configs) refused.
    auto g = llama_cfg();
    g["model_type"] = "olmoe";
    g["num_experts"] = 8;
    g["num_experts_per_tok"] = 2;
    ModelConfig m = model_from_hf_config(g, "e");
    EXPECT_EQ(m.experts, 8);
    EXPECT_EQ(m.experts_per_token, 2);
    EXPECT_EQ(m.ffn_hidden, 512);
    EXPECT_TRUE(m.pre_norms && !m.post_norms && m.qk_norm && m.qk_norm_whole);
    g["clip_qkv"] = nullptr;
    EXPECT_NO_THROW(model_from_hf_config(g, "e"));
    g["clip_qkv"] = 8.0;
    EXPECT_EQ(subject_of([&] { model_from_hf_config(g, "e"); }), "clip_qkv");
    g.erase("clip_qkv");
    g["num_experts_per_tok"] = 9;
    EXPECT_EQ(subject_of([&] { model_from_hf_config(g, "e"); }), "num_experts_per_tok");
    g.erase("num_experts");
    EXPECT_EQ(subject_of([&] { model_from_hf_config(g, "e"); }), "num_experts");
    g["num_experts"] = 8;
    g["num_experts_per_tok"] = 2;
    m = model_from_hf_config(g, "e");
    // The runtime trains it (since 2026-12-03) but under tensor parallelism: its norms span every head.
    EXPECT_EQ(subject_of([&] { check_runtime_model(m); }), "");
    Plan p;
    p.seq = 256;
    EXPECT_EQ(subject_of([&] { check_runtime_plan(m, p); }), "");
    p.tp = 2;
    EXPECT_EQ(subject_of([&] { check_runtime_plan(m, p); }), "--tp");
    p.tp = 1;
    EXPECT_EQ(subject_of([&] { pytorch_profile().check_plan(m, p); }), "--model");
}

TEST(BadInput, GptOssAsTransformersBuildIt) {
    // GptOssConfig: every second layer (sliding first) attends through 128 keys, 8 kv heads of 64, biases
    // on q/k/v/o (attention_bias true), the experts' gate clamped at swiglu_limit (7.0).
    auto g = llama_cfg();  // hidden 256, 8 heads
    g["model_type"] = "gpt_oss";
    g["num_hidden_layers"] = 6;
    g.erase("num_key_value_heads");
    g["num_local_experts"] = 4;
    g["num_experts_per_tok"] = 2;
    ModelConfig m = model_from_hf_config(g, "g");
    EXPECT_EQ(m.sliding_window, 128);
    EXPECT_EQ(m.full_attention_layers, 3);  // layers 1, 3 and 5 of 0..5
    EXPECT_EQ(m.full_attention_period, 2);
    EXPECT_EQ(m.head_dim, 64);
    EXPECT_EQ(m.kv_heads, 8);
    EXPECT_TRUE(m.qkv_bias && m.out_bias && m.mlp_bias && m.router_bias && m.attention_sinks);
    EXPECT_EQ(m.glu_clamp, 7.0);
    EXPECT_FALSE(m.tied_embeddings);
    // A layer_types list with no period (full layers 2 and 5 of 0..5) plans the mean, period unknown.
    g["layer_types"] = nlohmann::json::array();
    for (int i = 0; i < 6; ++i) g["layer_types"].push_back(i == 2 || i == 5 ? "full_attention" : "sliding_attention");
    m = model_from_hf_config(g, "g");
    EXPECT_EQ(m.full_attention_layers, 2);
    EXPECT_EQ(m.full_attention_period, 3);  // layers 3 and 6 counted from 1: every 3rd after all
    g["layer_types"][5] = "sliding_attention";
    g["layer_types"][4] = "full_attention";
    EXPECT_EQ(model_from_hf_config(g, "g").full_attention_period, 0);  // layers 3 and 5 counted from 1
    g.erase("layer_types");
    // YaRN (_compute_yarn_parameters): betas 32 and 1 and rounding by default, the context from the
    // config when rope_scaling gives none; truncate must be a boolean, the mscale pair from 0.
    g["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 32.0}, {"beta_fast", 16.0}, {"truncate", false}};
    m = model_from_hf_config(g, "g");
    EXPECT_EQ(m.rope_scaling.original_max_positions, 512);  // max_position_embeddings
    EXPECT_EQ(m.rope_scaling.beta_fast, 16.0);
    EXPECT_EQ(m.rope_scaling.beta_slow, 1.0);
    EXPECT_FALSE(m.rope_scaling.truncate);
    g["rope_scaling"]["truncate"] = "no";
    EXPECT_EQ(subject_of([&] { model_from_hf_config(g, "g"); }), "rope_scaling.truncate");
    g["rope_scaling"]["truncate"] = true;
    g["rope_scaling"]["mscale_all_dim"] = -1;
    EXPECT_EQ(subject_of([&] { model_from_hf_config(g, "g"); }), "rope_scaling.mscale_all_dim");
    g.erase("rope_scaling");
    // The original release's experts_per_token must agree with num_experts_per_tok.
    g["experts_per_token"] = 3;
    EXPECT_EQ(subject_of([&] { model_from_hf_config(g, "g"); }), "experts_per_token");
    g["experts_per_token"] = 2;
    g["swiglu_limit"] = -1;
    EXPECT_EQ(subject_of([&] { model_from_hf_config(g, "g"); }), "swiglu_limit");
    g.erase("swiglu_limit");
    g.erase("num_local_experts");
    EXPECT_EQ(subject_of([&] { model_from_hf_config(g, "g"); }), "num_local_experts");
    g["num_local_experts"] = 4;
    // Neither the runtime nor the pytorch profile (Hugging Face's modules op by op) has sink attention.
    m = model_from_hf_config(g, "g");
    EXPECT_EQ(subject_of([&] { check_runtime_model(m); }), "--model");
    Plan p;
    p.seq = 256;
    EXPECT_EQ(subject_of([&] { pytorch_profile().check_plan(m, p); }), "--model");
}

struct PlanCase {
    const char* flag;
    Plan plan;
};

class BadPlan : public ::testing::TestWithParam<PlanCase> {};

TEST_P(BadPlan, NamesTheFlag) {
    const ModelConfig m = model_from_hf_config(llama_cfg(), "x");  // 8 heads, 4 kv heads, 2 layers
    const GpuSpec gpu = test::catalog_gpu("h100-sxm-80gb");
    EXPECT_EQ(subject_of([&] { evaluate_memory(m, gpu, GetParam().plan); }), GetParam().flag);
}

Plan with(void (*f)(Plan&)) {
    Plan p;
    p.seq = 256;
    f(p);
    return p;
}

INSTANTIATE_TEST_SUITE_P(
    Flags, BadPlan,
    ::testing::Values(PlanCase{"--mbs", with([](Plan& p) { p.mbs = 0; })},
                      PlanCase{"--seq", with([](Plan& p) { p.seq = -5; })},
                      PlanCase{"--grad-acc", with([](Plan& p) { p.grad_acc = 0; })},
                      PlanCase{"--dp", with([](Plan& p) { p.dp = -1; })},
                      PlanCase{"--tp", with([](Plan& p) { p.tp = 3; })},   // 8 heads
                      PlanCase{"--tp", with([](Plan& p) { p.tp = 8; })},   // 4 kv heads
                      PlanCase{"--pp", with([](Plan& p) { p.pp = 3; })},   // 2 layers
                      PlanCase{"--sp", with([](Plan& p) { p.sp = true; })},  // tp 1
                      PlanCase{"--zero", with([](Plan& p) { p.zero = ZeroStage{4}; })},
                      PlanCase{"--dropout", with([](Plan& p) { p.dropout = 1.5; })},
                      PlanCase{"--dropout", with([](Plan& p) { p.dropout = -0.1; })}));

TEST(BadInput, SequenceBeyondLearnedPositions) {
    Plan p;
    p.seq = 2048;  // gpt2 has 1024 learned positions
    EXPECT_EQ(subject_of([&] { evaluate_memory(test::catalog_model("gpt2"), test::catalog_gpu("h100-sxm-80gb"), p); }),
              "--seq");
}

TEST(BadInput, UnknownCatalogNameListsTheCatalog) {
    try {
        load_model("llama-9", preflight::test::data_dir());
        FAIL() << "no error";
    } catch (const InputError& e) {
        EXPECT_EQ(e.subject(), "--model");
        EXPECT_NE(std::string(e.what()).find("llama-3-8b"), std::string::npos);
    }
}

TEST(BadInput, UnreadableAndMalformedFiles) {
    EXPECT_EQ(subject_of([] { load_model("/nonexistent/dir/config.json", preflight::test::data_dir()); }), "--model");
    const auto path = std::filesystem::temp_directory_path() / "preflight_bad_config.json";
    std::ofstream(path) << "{ \"model_type\": \"llama\", ";
    EXPECT_EQ(subject_of([&] { load_model(path.string(), preflight::test::data_dir()); }), "--model");
    std::filesystem::remove(path);
}

TEST(BadInput, GpuSpecMissingKeyAndExplicitUnknownPeak) {
    nlohmann::json spec = nlohmann::json::parse(R"({"memory_bytes": 1000, "peak_fp32_flops_per_s": 1e12,
        "peak_tf32_flops_per_s": null, "peak_bf16_flops_per_s": 2e12, "peak_fp16_flops_per_s": 2e12,
        "peak_fp8_flops_per_s": null, "intra_node_bandwidth_bytes_per_s": 1e9,
        "inter_node_bandwidth_bytes_per_s": 1e9, "gpus_per_node": 1, "overhead_bytes": 0})");
    EXPECT_EQ(subject_of([&] { gpu_from_json(spec, "g"); }), "hbm_bandwidth_bytes_per_s");
    spec["hbm_bandwidth_bytes_per_s"] = 1e12;
    const GpuSpec g = gpu_from_json(spec, "g");
    EXPECT_FALSE(g.peak.fp8_flops_per_s.has_value());  // unknown stays unknown
    spec["memory_bytes"] = -1;
    EXPECT_EQ(subject_of([&] { gpu_from_json(spec, "g"); }), "memory_bytes");
}

TEST(BadInput, A100HasNoFp8Peak) {
    EXPECT_FALSE(test::catalog_gpu("a100-sxm-80gb").peak.fp8_flops_per_s.has_value());
}

std::string unknown_name_error(const std::string& spec, bool gpu) {
    try {
        if (gpu) load_gpu(spec, preflight::test::data_dir());
        else load_model(spec, preflight::test::data_dir());
    } catch (const InputError& e) {
        return e.what();
    }
    return "accepted";
}

// A name that is not in the catalog names the nearest catalog names (was: the whole catalog only):
// case, '-', '_' and '.' aside, "Llama-3-8B" and "llama3-8b" are llama-3-8b; "H100" begins both
// H100 specs, the shorter (h100-sxm-80gb, 13 letters folded) first; "mistral" begins mistral-7b.
TEST(BadInput, AnUnknownCatalogNameNamesTheNearest) {
    EXPECT_NE(unknown_name_error("Llama-3-8B", false).find("did you mean 'llama-3-8b'?"), std::string::npos);
    EXPECT_NE(unknown_name_error("llama3-8b", false).find("did you mean 'llama-3-8b'"), std::string::npos);
    EXPECT_NE(unknown_name_error("mistral", false).find("did you mean 'mistral-7b'"), std::string::npos);
    const std::string h100 = unknown_name_error("H100", true);
    EXPECT_NE(h100.find("did you mean 'h100-sxm-80gb' or 'h100-pcie-80gb'"), std::string::npos) << h100;
    EXPECT_NE(h100.find("(catalog: "), std::string::npos) << h100;
    EXPECT_EQ(unknown_name_error("zzzzzzzzzz", false).find("did you mean"), std::string::npos);
    // A catalog file's name, and too short a string to point at one name (review 2026-11-30).
    EXPECT_NE(unknown_name_error("llama-3-8b.json", false).find("did you mean 'llama-3-8b'?"), std::string::npos);
    EXPECT_EQ(unknown_name_error("ll", false).find("did you mean"), std::string::npos);
}

}  // namespace
}  // namespace preflight
