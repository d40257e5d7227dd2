// A plan as a nanotron YAML config fragment. Keys as huggingface/nanotron defines them:
// src/nanotron/config/config.py (ModelArgs, TokensArgs, OptimizerArgs), parallelism_config.py
// (ParallelismArgs) and models_config.py (LlamaConfig, Qwen2Config); import_nanotron reads it back.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <sstream>

#include "emit_warn.hpp"
#include "preflight/planner/emit.hpp"
#include "preflight/planner/shown_value.hpp"

namespace preflight {

using emit_detail::warn;

namespace {

// x as a YAML number that loads back as the same float: the shortest round-trip digits, and a ".0"
// before an exponent that has no point (YAML 1.1's float, PyYAML's resolver, needs the point:
// "1e-06" would load as a string, "1.0e-06" loads as 1e-06).
std::string number(double x) {
    std::string s = emit_detail::exact_number(x);
    if (const auto e = s.find('e'); e != std::string::npos && s.find('.') == std::string::npos) s.insert(e, ".0");
    return s;
}

// `s` as a YAML string: plain where it is a letter then letters, digits, '_' and '-' (llama3,
// dynamic) and no word PyYAML resolves otherwise (yes, off, null), else double-quoted (JSON's
// escapes are YAML's), so no text can end the line, start a key or become another type.
std::string yaml_string(const std::string& s) {
    std::string lower;
    for (char c : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const bool word = lower == "yes" || lower == "no" || lower == "on" || lower == "off" || lower == "true" ||
                      lower == "false" || lower == "null" || lower == "y" || lower == "n";
    const bool plain = !s.empty() && !word && std::isalpha(static_cast<unsigned char>(s.front())) &&
                       std::all_of(s.begin(), s.end(), [](char c) {
                           return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
                       });
    return plain ? s : nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// model: dtype and model_config (a LlamaConfig, or a Qwen2Config with q/k/v biases).
void nanotron_model(std::ostringstream& o, const ModelConfig& m, const Plan& p, std::vector<std::string>* w) {
    if (m.family == ModelFamily::gpt2 || m.is_moe() || m.out_bias || m.mlp_bias)
        warn(w, "nanotron's Llama / Qwen2 models have no GPT-2 layout, output or MLP biases, or Mixtral experts: the "
                "model_config below is the closest Llama shape, not " + m.name);
    if (m.rope_fraction != 1.0)
        warn(w, "nanotron's RoPE rotates the whole head: " + m.name + "'s partial_rotary_factor is not carried");
    if (m.qk_norm)
        warn(w, "nanotron's Llama / Qwen2 models have no q/k norms: the model_config below trains " + m.name +
                    " without its q_norm and k_norm");
    if (m.head_dim * m.heads != m.hidden)
        warn(w, "nanotron derives the head size as hidden_size / num_attention_heads; " + m.name + "'s head_dim " +
                    std::to_string(m.head_dim) + " differs");
    const char* dtype = p.precision == Precision::fp32 ? "float32" : p.precision == Precision::fp16_mixed ? "float16" : "bfloat16";
    o << "model:\n";
    o << "  dtype: " << dtype << "\n";
    o << "  model_config:\n";
    // Context parallelism needs the ring attention of nanotron's Qwen2 model (models/qwen.py
    // llama3_ring_attention; its Llama has none): a Llama shape goes there without attention bias.
    const bool qwen2 = (m.qkv_bias && !m.out_bias) || p.cp > 1;
    if (qwen2)
        o << "    is_qwen2_config: true\n    attention_bias: " << (m.qkv_bias ? "true" : "false") << "\n";
    else
        o << "    is_llama_config: true\n";
    if (p.cp > 1) {
        // models_config.py Qwen2Config.__post_init__: the ring attention needs ring_attn_heads_k_stride.
        o << "    _attn_implementation: llama3_ring_attention\n    ring_attn_heads_k_stride: 1\n";
        if (!m.qkv_bias)
            warn(w, "context parallelism: nanotron's ring attention is in its Qwen2 model only, so this Llama "
                    "shape is emitted as a Qwen2 config without attention bias");
    }
    o << "    hidden_size: " << m.hidden << "\n";
    o << "    intermediate_size: " << m.ffn_hidden << "\n";
    o << "    num_attention_heads: " << m.heads << "\n";
    o << "    num_key_value_heads: " << m.kv_heads << "\n";
    o << "    num_hidden_layers: " << m.layers << "\n";
    o << "    vocab_size: " << m.vocab << "\n";
    o << "    max_position_embeddings: " << m.max_positions << "\n";
    o << "    tie_word_embeddings: " << (m.tied_embeddings ? "true" : "false") << "\n";
    o << "    hidden_act: silu\n";
    o << "    rope_theta: " << number(m.rope_theta) << "\n";
    o << "    rms_norm_eps: " << number(m.norm_eps) << "\n";  // LlamaConfig's default 1e-6 is not every model's
    if (m.rope_scaling.type.empty()) {
        o << "    rope_scaling: null\n";
    } else {
        warn(w, "rope_scaling: nanotron declares it but its models do not read it (src/nanotron/models): the "
                "positions run unscaled");
        o << "    rope_scaling:\n";
        o << "      rope_type: " << yaml_string(m.rope_scaling.type) << "\n";
        o << "      factor: " << number(m.rope_scaling.factor) << "\n";
        o << "      low_freq_factor: " << number(m.rope_scaling.low_freq_factor) << "\n";
        o << "      high_freq_factor: " << number(m.rope_scaling.high_freq_factor) << "\n";
        o << "      original_max_position_embeddings: " << m.rope_scaling.original_max_positions << "\n";
    }
}

// parallelism: (ParallelismArgs).
void nanotron_parallelism(std::ostringstream& o, const Plan& p, std::vector<std::string>* w) {
    o << "parallelism:\n";
    o << "  dp: " << p.dp << "\n";
    o << "  tp: " << p.tp << "\n";
    o << "  pp: " << p.pp << "\n";
    // afab = all forward, all backward (GPipe's memory); nanotron has no interleaved engine.
    o << "  pp_engine: " << (p.pp_schedule == PpSchedule::gpipe ? "afab" : "1f1b") << "\n";
    if (p.pp_schedule == PpSchedule::interleaved)
        warn(w, "nanotron has no interleaved pipeline schedule: 1f1b emitted (more bubble, fewer chunks in flight)");
    // REDUCE_SCATTER = sequence parallelism (TensorParallelLinearMode).
    o << "  tp_mode: " << (p.sp ? "REDUCE_SCATTER" : "ALL_REDUCE") << "\n";
    o << "  tp_linear_async_communication: " << (p.sp ? "true" : "false") << "\n";
    o << "  recompute_layer: " << (p.recompute == Recompute::none ? "false" : "true") << "\n";
    if (p.recompute == Recompute::selective)
        warn(w, "nanotron checkpoints whole layers only (recompute_layer): full recompute emitted for selective "
                "(less memory, slower than planned)");
    if (p.cp > 1) o << "  context_parallel_size: " << p.cp << "\n";
    if (p.ep > 1) {
        o << "  expert_parallel_size: " << p.ep << "\n";
        warn(w, "expert_parallel_size applies to nanotron's MoE layers (Qwen2 moe_config) only");
    }
}

// optimizer: zero_stage, accumulate_grad_in_fp32, optimizer_factory (OptimizerArgs).
void nanotron_optimizer(std::ostringstream& o, const Plan& p, std::vector<std::string>* w) {
    o << "optimizer:\n";
    o << "  zero_stage: " << (p.zero >= 1 ? 1 : 0) << "\n";
    if (p.zero >= 2)
        warn(w, "ZeRO-" + std::to_string(int{p.zero}) + ": nanotron's ZeroDistributedOptimizer shards optimizer "
                "states only; zero_stage 1 emitted (more memory than planned)");
    // FP32GradientAccumulator: fp32 master weights and an fp32 gradient buffer; without it the
    // optimizer steps the bf16 parameters (pure bf16).
    const bool fp32_grads = p.precision != Precision::bf16 && p.precision != Precision::fp32 &&
                            p.precision != Precision::fp16_mixed;
    o << "  accumulate_grad_in_fp32: " << (fp32_grads ? "true" : "false") << "\n";
    switch (p.precision) {
        case Precision::bf16_mixed:
            warn(w, "nanotron keeps fp32 master weights only with accumulate_grad_in_fp32, which adds an fp32 "
                    "gradient buffer: bf16-mixed-fp32-grads emitted (more memory than planned)");
            break;
        case Precision::fp8_mixed:
            warn(w, "nanotron has no fp8 training recipe: bf16 with fp32 gradient accumulation emitted");
            break;
        case Precision::fp16_mixed:
            warn(w, "nanotron's float16 has no loss scaling or fp32 master copy: pure fp16 emitted");
            break;
        default: break;
    }
    o << "  optimizer_factory:\n";
    o << "    name: " << (p.optimizer == Optimizer::sgd ? "sgd" : "adamW") << "\n";
}

}  // namespace

std::string nanotron_yaml(const ModelConfig& m, const Plan& p, std::vector<std::string>* w) {
    std::ostringstream o;
    o << "# nanotron config fragment from preflight plan: " << one_line(m.name) << " on " << p.gpus() << " GPUs, "
      << p.global_batch_tokens() << " tokens per step\n";
    emit_detail::warn_sliding_window(m, p, w, "nanotron");
    emit_detail::warn_model_parts(m, w, "nanotron");
    nanotron_model(o, m, p, w);
    nanotron_parallelism(o, p, w);
    o << "tokens:\n";
    o << "  sequence_length: " << p.seq << "\n";
    o << "  micro_batch_size: " << p.mbs << "\n";
    o << "  batch_accumulation_per_replica: " << p.grad_acc << "\n";
    nanotron_optimizer(o, p, w);
    if (p.offload != Offload::none) warn(w, "nanotron has no CPU offload: optimizer states stay on the GPU");
    if (p.finetune != Finetune::full) warn(w, "nanotron has no LoRA/QLoRA: use Hugging Face PEFT (--emit peft)");
    if (p.attention == AttentionKind::eager) warn(w, "nanotron's Llama uses flash attention; eager is not a switch");
    if (p.dropout > 0) warn(w, "nanotron's Llama has no dropout");
    return o.str();
}

}  // namespace preflight
