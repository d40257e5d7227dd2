// Parameter tensors of a model and their exact counts (model.hpp).
#include <string>
#include <string_view>
#include <vector>

#include "preflight/planner/checked.hpp"
#include "preflight/planner/model.hpp"

namespace preflight {

std::vector<ParamTensor> param_tensors(const ModelConfig& m) {
    const std::int64_t h = m.hidden, f = m.ffn_hidden;
    const bool ln = m.norm == NormKind::layernorm;
    std::vector<ParamTensor> t;
    t.reserve(24);
    auto add = [&](std::string_view name, std::int64_t rows, std::int64_t cols, TpSplit split, TensorPlace place,
                   bool gemm = false, std::int64_t copies = 1) {
        t.push_back(ParamTensor{name, rows, cols, split, place, gemm, copies});
    };
    // Embedding level. The word embedding also serves as the LM head when tied.
    add("word_embedding", m.vocab, h, TpSplit::vocab, TensorPlace::embedding, m.tied_embeddings);
    if (m.position == PositionKind::learned)
        add("position_embedding", m.max_positions, h, TpSplit::replicated, TensorPlace::embedding);

    // One transformer layer: pre-norm but OLMo's (ModelConfig::pre_norms).
    if (m.pre_norms) add("attn_norm.weight", h, 1, TpSplit::replicated, TensorPlace::layer);
    if (m.pre_norms && ln) add("attn_norm.bias", h, 1, TpSplit::replicated, TensorPlace::layer);
    const std::int64_t qkv_rows = m.q_width() + 2 * m.kv_width();
    if (m.fused_qkv) {  // each tensor-parallel rank holds its heads' q, k and v rows
        add("qkv_proj.weight", qkv_rows, h, TpSplit::column, TensorPlace::layer, true);
        if (m.qkv_bias) add("qkv_proj.bias", qkv_rows, 1, TpSplit::column, TensorPlace::layer);
    } else {
        add("q_proj.weight", m.q_width(), h, TpSplit::column, TensorPlace::layer, true);
        add("k_proj.weight", m.kv_width(), h, TpSplit::column, TensorPlace::layer, true);
        add("v_proj.weight", m.kv_width(), h, TpSplit::column, TensorPlace::layer, true);
        if (m.qkv_bias) {
            add("q_proj.bias", m.q_width(), 1, TpSplit::column, TensorPlace::layer);
            add("k_proj.bias", m.kv_width(), 1, TpSplit::column, TensorPlace::layer);
            add("v_proj.bias", m.kv_width(), 1, TpSplit::column, TensorPlace::layer);
        }
    }
    if (m.qk_norm && m.qk_norm_whole) {  // OLMo: one weight per q and k column, split with the heads
        add("q_norm.weight", m.q_width(), 1, TpSplit::column, TensorPlace::layer);
        add("k_norm.weight", m.kv_width(), 1, TpSplit::column, TensorPlace::layer);
    } else if (m.qk_norm) {  // one head_dim weight each, shared by every head (so by every TP rank)
        add("q_norm.weight", m.head_dim, 1, TpSplit::replicated, TensorPlace::layer);
        add("k_norm.weight", m.head_dim, 1, TpSplit::replicated, TensorPlace::layer);
    }
    add("o_proj.weight", h, m.q_width(), TpSplit::row, TensorPlace::layer, true);
    if (m.out_bias) add("o_proj.bias", h, 1, TpSplit::replicated, TensorPlace::layer);
    if (m.attention_sinks) add("sinks", m.heads, 1, TpSplit::column, TensorPlace::layer);  // one per head, with its rank
    if (m.post_norms) {  // Gemma 3, OLMo: post_attention_layernorm, post_feedforward_layernorm
        add("attn_post_norm.weight", h, 1, TpSplit::replicated, TensorPlace::layer);
        add("mlp_post_norm.weight", h, 1, TpSplit::replicated, TensorPlace::layer);
    }
    if (m.pre_norms) add("mlp_norm.weight", h, 1, TpSplit::replicated, TensorPlace::layer);
    if (m.pre_norms && ln) add("mlp_norm.bias", h, 1, TpSplit::replicated, TensorPlace::layer);
    const std::int64_t e = m.experts;
    if (m.is_moe()) add("router.weight", e, h, TpSplit::replicated, TensorPlace::layer);
    if (m.is_moe() && m.router_bias) add("router.bias", e, 1, TpSplit::replicated, TensorPlace::layer);
    if (m.mlp == MlpKind::swiglu && m.fused_gate_up) {  // Phi-3 (dense, no biases), gpt-oss's experts (biases)
        add("gate_up_proj.weight", 2 * f, h, TpSplit::column, TensorPlace::layer, true, e);
        if (m.mlp_bias) add("gate_up_proj.bias", 2 * f, 1, TpSplit::column, TensorPlace::layer, false, e);
        add("down_proj.weight", h, f, TpSplit::row, TensorPlace::layer, true, e);
        if (m.mlp_bias) add("down_proj.bias", h, 1, TpSplit::replicated, TensorPlace::layer, false, e);
    } else if (m.mlp == MlpKind::swiglu) {
        add("gate_proj.weight", f, h, TpSplit::column, TensorPlace::layer, true, e);
        add("up_proj.weight", f, h, TpSplit::column, TensorPlace::layer, true, e);
        if (m.mlp_bias) {
            add("gate_proj.bias", f, 1, TpSplit::column, TensorPlace::layer, false, e);
            add("up_proj.bias", f, 1, TpSplit::column, TensorPlace::layer, false, e);
        }
        add("down_proj.weight", h, f, TpSplit::row, TensorPlace::layer, true, e);
        if (m.mlp_bias) add("down_proj.bias", h, 1, TpSplit::replicated, TensorPlace::layer, false, e);
    } else {
        add("fc1.weight", f, h, TpSplit::column, TensorPlace::layer, true, e);
        if (m.mlp_bias) add("fc1.bias", f, 1, TpSplit::column, TensorPlace::layer, false, e);
        add("fc2.weight", h, f, TpSplit::row, TensorPlace::layer, true, e);
        if (m.mlp_bias) add("fc2.bias", h, 1, TpSplit::replicated, TensorPlace::layer, false, e);
    }
    // Head.
    add("final_norm.weight", h, 1, TpSplit::replicated, TensorPlace::final_norm);
    if (ln) add("final_norm.bias", h, 1, TpSplit::replicated, TensorPlace::final_norm);
    if (!m.tied_embeddings) add("lm_head.weight", m.vocab, h, TpSplit::vocab, TensorPlace::lm_head, true);
    return t;
}

ParamCounts count_params(const ModelConfig& m) { return count_params(m, param_tensors(m)); }

ParamCounts count_params(const ModelConfig& m, const std::vector<ParamTensor>& tensors) {
    // Checked: a config beyond the documented bounds throws naming the field instead
    // of wrapping into a negative count.
    const std::string_view layers_field = m.family == ModelFamily::gpt2 ? "n_layer" : "num_hidden_layers";
    ParamCounts c;
    for (const auto& p : tensors) {
        // Built only when a count overflows (this runs for every plan a search judges).
        const auto subject = [&p] {
            return std::string(p.name) + " (" + std::to_string(p.rows) + " x " + std::to_string(p.cols) + " x " +
                   std::to_string(p.copies) + ")";
        };
        const std::int64_t one = checked_mul(p.rows, p.cols, subject);
        const std::int64_t numel = checked_mul(one, p.copies, subject);
        switch (p.place) {
            case TensorPlace::embedding: c.embedding = checked_add(c.embedding, numel, subject); break;
            case TensorPlace::layer:
                c.per_layer = checked_add(c.per_layer, numel, subject);
                // MoE: a token passes through experts_per_token of the experts.
                c.per_layer_active = checked_add(
                    c.per_layer_active, p.copies > 1 ? checked_mul(one, m.experts_per_token, subject) : numel, subject);
                break;
            case TensorPlace::final_norm: c.final_norm = checked_add(c.final_norm, numel, subject); break;
            case TensorPlace::lm_head: c.lm_head = checked_add(c.lm_head, numel, subject); break;
        }
    }
    const std::int64_t outside_layers =
        checked_add(checked_add(c.embedding, c.final_norm, "parameters"), c.lm_head, "parameters");
    c.total = checked_add(outside_layers, checked_mul(m.layers, c.per_layer, layers_field), layers_field);
    c.active = checked_add(outside_layers, checked_mul(m.layers, c.per_layer_active, layers_field), layers_field);
    return c;
}

}  // namespace preflight
