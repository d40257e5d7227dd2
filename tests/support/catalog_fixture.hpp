// Test helpers: the repository's catalog and hand-built HF configs.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "preflight/planner/catalog.hpp"
#include "preflight/planner/memory.hpp"

namespace preflight::test {

inline std::filesystem::path data_dir() { return PREFLIGHT_TEST_DATA_DIR; }
inline ModelConfig catalog_model(const std::string& name) { return load_model(name, data_dir()); }
inline GpuSpec catalog_gpu(const std::string& name) { return load_gpu(name, data_dir()); }

// A GPT-style config (LayerNorm, GeLU 4h MLP, learned positions, biases) of any shape,
// e.g. GPT-3 175B for Korthikanti et al.'s equations.
inline ModelConfig gpt_model(std::int64_t hidden, std::int64_t layers, std::int64_t heads, std::int64_t vocab,
                             std::int64_t positions) {
    nlohmann::json cfg = {{"model_type", "gpt2"}, {"n_embd", hidden},    {"n_layer", layers},
                          {"n_head", heads},      {"vocab_size", vocab}, {"n_positions", positions}};
    return model_from_hf_config(cfg, "gpt-test");
}

// A config of Llama's keys (RMSNorm, RoPE, GQA, SwiGLU, untied head) of any shape, for `model_type`.
inline ModelConfig llama_keyed_model(const std::string& model_type, const std::string& name, std::int64_t hidden,
                                     std::int64_t layers, std::int64_t heads, std::int64_t kv_heads, std::int64_t ffn,
                                     std::int64_t vocab, std::int64_t positions) {
    nlohmann::json cfg = {{"model_type", model_type},      {"hidden_size", hidden},      {"num_hidden_layers", layers},
                          {"num_attention_heads", heads},   {"num_key_value_heads", kv_heads},
                          {"intermediate_size", ffn},       {"vocab_size", vocab},
                          {"max_position_embeddings", positions}, {"tie_word_embeddings", false}};
    return model_from_hf_config(cfg, name);
}

// A Llama-style config of any shape.
inline ModelConfig llama_model(std::int64_t hidden, std::int64_t layers, std::int64_t heads, std::int64_t kv_heads,
                               std::int64_t ffn, std::int64_t vocab, std::int64_t positions) {
    return llama_keyed_model("llama", "llama-test", hidden, layers, heads, kv_heads, ffn, vocab, positions);
}

// An OLMo 2 config (Olmo2ForCausalLM: the Llama shape with RMSNorms on the attention and MLP outputs in
// place of their inputs, and q/k RMSNorms over the whole q and k projections) of any shape.
inline ModelConfig olmo2_model(std::int64_t hidden, std::int64_t layers, std::int64_t heads, std::int64_t kv_heads,
                               std::int64_t ffn, std::int64_t vocab, std::int64_t positions) {
    return llama_keyed_model("olmo2", "olmo2-test", hidden, layers, heads, kv_heads, ffn, vocab, positions);
}

// Llama-3-8B's pre-training plan on one node: seq 4096, micro-batch 1 x 16 accumulation steps,
// 8-way data parallel, ZeRO-1 (524,288 tokens a step).
inline Plan llama3_8b_one_node_plan() {
    Plan p;
    p.seq = 4096;
    p.mbs = 1;
    p.grad_acc = 16;
    p.dp = 8;
    p.zero = ZeroStage{1};
    return p;
}

// The first steady-state timeline entry of a phase kind (and layer, when not 0) of a report made
// with MemoryOptions::timeline; throws when the timeline has none.
inline const TimelineEntry& timeline_at(const MemoryReport& r, PhaseKind kind, std::int64_t layer = 0) {
    for (const auto& e : r.timeline_steady)
        if (e.phase.kind == kind && (layer == 0 || e.phase.layer == layer)) return e;
    throw std::runtime_error("phase not found in the steady-state timeline");
}

}  // namespace preflight::test
