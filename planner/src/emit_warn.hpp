// Internal to the emitters (emit.cpp, emit_deepspeed.cpp, emit_nanotron.cpp, emit_peft.cpp): what a
// framework's form cannot express is said as a warning line, collected when the caller asks for them.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "preflight/planner/model.hpp"
#include "preflight/planner/plan.hpp"

namespace preflight::emit_detail {

// Sequences per optimizer step: micro batch x accumulation x data-parallel size.
inline std::int64_t global_sequences(const Plan& p) { return p.mbs * p.grad_acc * p.dp; }

// The shortest text that reads back as v ("32", "0.1", "7.123456789", "1e-06"): a model value
// written as a flag, never rounded to %g's six digits.
inline std::string exact_number(double v) {
    char buf[40];
    for (int digits = 15; digits <= 17; ++digits) {
        std::snprintf(buf, sizeof buf, "%.*g", digits, v);
        if (std::strtod(buf, nullptr) == v) break;
    }
    return buf;
}

inline void warn(std::vector<std::string>* w, std::string msg) {
    if (w) w->push_back(std::move(msg));
}

// A sliding window the framework's form does not carry, said where the sequence outruns it.
inline void warn_sliding_window(const ModelConfig& m, const Plan& p, std::vector<std::string>* w,
                                const std::string& framework) {
    if (m.sliding_window > 0 && p.seq > m.sliding_window)
        warn(w, m.name + " attends through a sliding window of " + std::to_string(m.sliding_window) +
                    " keys, which this " + framework + " config does not carry: at seq " + std::to_string(p.seq) +
                    " its attention would see the whole sequence (the plan counts the window)");
}

// Megatron-LM carries a window on every layer, or on all but every Nth (--window-size,
// --window-attn-skip-freq N): not a layer_types list that follows no period.
inline bool megatron_carries_window(const ModelConfig& m) {
    return m.sliding_window > 0 && (m.full_attention_layers == 0 || m.full_attention_period > 0);
}

// Layer parts the framework's Llama-shaped model does not carry, said so: Gemma 3's and OLMo's norms on
// the sublayer outputs, OLMo's q/k norms over the whole projections, a gated MLP whose gate is not silu
// (Gemma's gelu_pytorch_tanh), and gpt-oss's attention sinks and clamped gate (`gpt_oss_parts`: the form
// carries those two, as Megatron-LM does).
inline void warn_model_parts(const ModelConfig& m, std::vector<std::string>* w, const std::string& framework,
                             bool gpt_oss_parts = false) {
    if (m.post_norms && m.pre_norms)
        warn(w, m.name + "'s norms on the attention and MLP outputs (post_attention_layernorm, "
                         "post_feedforward_layernorm) are not carried by this " + framework +
                    " config: it would train the layer without them (the plan counts them)");
    if (!m.pre_norms)
        warn(w, m.name + "'s layer normalizes the attention and MLP outputs (post_attention_layernorm, "
                         "post_feedforward_layernorm) in place of their inputs, which this " + framework +
                    " config does not carry: it would train a pre-norm layer (as many norm weights; the plan "
                    "counts " + m.name + "'s)");
    if (m.qk_norm_whole)
        warn(w, m.name + "'s q/k norms span each token's whole q and k projections (" + std::to_string(m.q_width()) +
                    " and " + std::to_string(m.kv_width()) + " weights), which this " + framework +
                    " config does not carry (Megatron-LM's --qk-layernorm normalizes each head alone, " +
                    std::to_string(m.head_dim) + " weights each; the plan counts " + m.name + "'s)");
    if (m.attention_sinks && !gpt_oss_parts)
        warn(w, m.name + "'s attention sinks (a learned logit per head in every softmax) are not carried by this " +
                    framework + " config: it would train plain softmax attention (same plan)");
    const std::string& a = m.activation;
    if (m.glu_clamp > 0 && gpt_oss_parts) return;
    if (m.mlp == MlpKind::swiglu && !a.empty() && a != "silu" && a != "swish")
        warn(w, m.name + "'s gated MLP applies " + a + " to its gate" +
                    (m.glu_clamp > 0 ? " (clamped, times up + 1)" : "") + ", which this " + framework +
                    " config does not carry: it would train a SwiGLU (same shapes, same plan)");
}

}  // namespace preflight::emit_detail
