// Model description (read from a Hugging Face config.json) and exact parameter counts.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace preflight {

enum class ModelFamily { gpt2, llama, mistral, qwen2, mixtral, qwen3, qwen3_moe, phi3, gemma3_text, gpt_oss, olmo2, olmo3, olmoe };
enum class NormKind { layernorm, rmsnorm };
enum class MlpKind { gelu, swiglu };
enum class PositionKind { learned, rope };

std::string_view to_string(ModelFamily f);
// The config.json key that counts a family's experts: num_experts (Qwen3-MoE, OLMoE) or
// num_local_experts (Mixtral, gpt-oss, and the name errors give for the others).
std::string_view experts_key(ModelFamily f);

// Llama-3 RoPE frequency scaling (HF transformers, modeling_rope_utils.py,
// _compute_llama3_parameters): rope_type "llama3". factor 0 = no scaling.
struct RopeScaling {
    std::string type;  // "" (none) | "llama3" | another HF rope_type (the runtime refuses it)
    double factor = 0, low_freq_factor = 1, high_freq_factor = 4;
    std::int64_t original_max_positions = 8192;
    // YaRN (Peng et al. 2023; _compute_yarn_parameters): the ramp's bounds in rotations, whether its
    // correction range is rounded to whole dimensions (truncate), and the attention factor's mscale
    // pair (0 when not given: the factor is then 0.1 ln(factor) + 1) or the factor itself (0: derived).
    double beta_fast = 32, beta_slow = 1;
    bool truncate = true;
    double mscale = 0, mscale_all_dim = 0, attention_factor = 0;
    // LongRoPE (Phi-3's 128k and Phi-3.5's: _compute_longrope_parameters): one divisor per rotary
    // frequency, short_factor while a sequence stays within original_max_positions (the config's
    // original_max_position_embeddings), long_factor beyond it; attention_factor as above.
    std::vector<double> short_factor, long_factor;
};

// Layers of two kinds (Gemma 3, gpt-oss, OLMo 3): model layer `layer` (1-based) attends to the whole
// sequence when it is a multiple of `period` (ModelConfig::full_attention_period; 0: no full layers
// among windowed ones). The one rule for the planner's config, the runtime's Dims::window_of and the
// whole-model reference.
inline bool is_full_attention_layer(std::int64_t period, std::int64_t layer) {
    return period > 0 && layer % period == 0;
}

// Architecture of a decoder-only transformer, in the planner's own terms.
struct ModelConfig {
    std::string name;
    ModelFamily family = ModelFamily::llama;
    std::int64_t hidden = 0;           // h
    std::int64_t layers = 0;           // L
    std::int64_t heads = 0;            // a (query heads)
    std::int64_t kv_heads = 0;         // GQA key/value heads (== heads for MHA)
    std::int64_t head_dim = 0;         // d; q width = heads*d, kv width = kv_heads*d
    std::int64_t ffn_hidden = 0;       // f (per expert for MoE)
    std::int64_t vocab = 0;            // V
    std::int64_t max_positions = 0;    // context length from the config
    bool tied_embeddings = false;
    NormKind norm = NormKind::rmsnorm;
    MlpKind mlp = MlpKind::swiglu;
    PositionKind position = PositionKind::rope;
    bool qkv_bias = false;             // bias on q/k/v projections (GPT-2, Qwen2)
    bool out_bias = false;             // bias on attention output projection (GPT-2)
    bool mlp_bias = false;             // biases on MLP projections (GPT-2)
    // An RMSNorm over each head's query and key before RoPE, one weight of head_dim each, shared
    // by the heads (Qwen3: transformers' Qwen3Attention q_norm / k_norm; Megatron's --qk-layernorm).
    bool qk_norm = false;
    // With qk_norm: the norm spans each token's whole q and k projections, one weight of q_width and
    // one of kv_width (OLMo 2 and 3, OLMoE: transformers' Olmo2Attention and OlmoeAttention q_norm /
    // k_norm, applied before the heads are split), not each head alone. Under tensor parallelism each rank holds its heads' slice
    // of both weights, and the statistics of a token sum over the ranks.
    bool qk_norm_whole = false;
    // Fused projections: q, k and v as one linear (GPT-2's c_attn, Phi-3's qkv_proj), gate and up as
    // one (Phi-3's gate_up_proj). Parameters and FLOPs are the same as apart; what differs is one
    // GEMM and one LoRA adapter for the fused module (PEFT adapts a module whole) and, under the
    // Hugging Face eager profile, the views of its output that autograd keeps.
    bool fused_qkv = false;
    bool fused_gate_up = false;
    // Pre-norms: an RMSNorm (or LayerNorm) on the input of the attention and of the MLP, one weight of
    // hidden_size each (every family but OLMo 2 and 3, whose layer normalizes the sublayer outputs only:
    // transformers' Olmo2DecoderLayer has no input_layernorm).
    bool pre_norms = true;
    // Post-norms: an RMSNorm on the attention output and on the MLP output before each residual add, one
    // weight of hidden_size each (transformers' post_attention_layernorm and post_feedforward_layernorm):
    // beside the pre-norms in Gemma 3 ("sandwich" norms, Gemma3DecoderLayer), in their place in OLMo 2.
    bool post_norms = false;
    // Attention sinks: one learned logit per query head that joins every query's softmax and takes
    // part of its weight without a value (gpt-oss: transformers' GptOssAttention.sinks; Megatron's
    // --softmax-type learnable): `heads` parameters a layer, split with the heads over TP.
    bool attention_sinks = false;
    // A bias on the MoE router's logits (gpt-oss: GptOssTopKRouter.bias, one per expert).
    bool router_bias = false;
    // MoE gate weights: the chosen experts' softmax probabilities renormalised to sum to 1, i.e. a
    // softmax over the k chosen logits (Mixtral, gpt-oss; Qwen3-MoE's and OLMoE's norm_topk_prob true;
    // Megatron-LM's default, softmax after top-k), or the probabilities of the softmax over all experts
    // as they are (norm_topk_prob false, those configs' default; Megatron-LM's --moe-router-pre-softmax).
    // Memory and FLOPs do not depend on it; `preflight run` renormalises.
    bool moe_renormalize = true;
    // The norms' epsilon under the square root (config rms_norm_eps, GPT-2's layer_norm_epsilon; each
    // config class's default when absent). Memory and FLOPs do not depend on it; `preflight run` uses it.
    double norm_eps = 1e-5;
    // A gated MLP whose gate is clamped to at most glu_clamp, its up input to [-glu_clamp, glu_clamp],
    // and whose product is act(gate) * (up + 1) (gpt-oss: GptOssExperts, swiglu_limit; Megatron's
    // --activation-func-clamp-value and --glu-linear-offset 1); 0 = an unclamped gated MLP.
    // Memory and FLOPs do not depend on it.
    double glu_clamp = 0;
    std::int64_t experts = 1;          // MoE experts per layer (1 = dense)
    std::int64_t experts_per_token = 1;  // top-k routing
    double rope_theta = 10000.0;       // RoPE base (config rope_theta; Su et al. 2021)
    RopeScaling rope_scaling;          // config rope_scaling (or rope_parameters, transformers 5)
    // partial_rotary_factor: the share of each head's dimensions RoPE rotates (1: all; Megatron's
    // --rotary-percent). Memory and FLOPs do not depend on it; `preflight run` rotates rope_dims().
    double rope_fraction = 1.0;
    // Sliding-window attention: each query attends to the last `sliding_window` keys (itself
    // included) on the windowed layers; 0 = full causal attention (Mistral, Mixtral, Phi-3:
    // sliding_window; Qwen2 and Qwen3: with use_sliding_window; Gemma 3: five layers in six).
    // Attention FLOPs and flash time count the window.
    std::int64_t sliding_window = 0;
    // Of the layers, those that attend to the whole sequence in spite of sliding_window (Gemma 3: one
    // in sliding_window_pattern); 0 = every layer attends through the window. The planner's layers are
    // alike: each takes the mean of the two kinds' attention (mean_causal_pairs).
    std::int64_t full_attention_layers = 0;
    // The full-attention layers' period when they recur regularly: every layer whose (index + 1) is a
    // multiple of it (Gemma 3's sliding_window_pattern, gpt-oss's 2; Megatron's --window-attn-skip-freq);
    // 0 when no layer is full or the layer_types list follows no such period.
    std::int64_t full_attention_period = 0;
    // The MLP's nonlinearity as the config names it (Llama family hidden_act, GPT-2
    // activation_function; empty: not named, the family's own, silu or gelu_new): memory and FLOPs
    // do not depend on it; `preflight run` computes only the ones its kernels implement
    // (runtime check_supported).
    std::string activation;
    // The config's model class ("architectures"[0], e.g. "MPTForCausalLM"; empty when not given):
    // only the names of its modules depend on it (PEFT target_modules), never memory or FLOPs.
    std::string architecture;

    std::int64_t q_width() const { return heads * head_dim; }
    // The dimensions of a head RoPE rotates (transformers: int(head_dim * partial_rotary_factor)).
    std::int64_t rope_dims() const { return static_cast<std::int64_t>(static_cast<double>(head_dim) * rope_fraction); }
    std::int64_t kv_width() const { return kv_heads * head_dim; }
    // The keys a query sees on a windowed layer of a `seq`-token sequence when the window is narrower
    // than the sequence; 0 when the window masks nothing (none, or as wide as the sequence).
    std::int64_t attention_window(std::int64_t seq) const {
        return sliding_window > 0 && sliding_window < seq ? sliding_window : 0;
    }
    // Layers of two kinds: whether model layer `layer` (1-based) attends to the whole sequence
    // (is_full_attention_layer), and the keys it sees on a `seq`-token sequence (attention_window,
    // or 0 on a full layer).
    bool full_attention_layer(std::int64_t layer) const { return is_full_attention_layer(full_attention_period, layer); }
    std::int64_t layer_attention_window(std::int64_t layer, std::int64_t seq) const {
        return full_attention_layer(layer) ? 0 : attention_window(seq);
    }
    bool is_moe() const { return experts > 1; }
};

// How a parameter tensor is divided under Megatron-style tensor parallelism.
enum class TpSplit {
    replicated,  // norms, row-parallel biases, learned positions, MoE router
    column,      // q/k/v, fc1/gate/up weights and their biases: split on the output dim
    row,         // attention out and fc2/down weights: split on the input dim
    vocab,       // word embedding / LM head: split on the vocabulary dim (padded to a multiple of t)
};

// Where a tensor lives in the stack (for the pipeline split).
enum class TensorPlace { embedding, layer, final_norm, lm_head };

struct ParamTensor {
    std::string_view name;
    std::int64_t rows = 0;     // numel = rows * cols; rows is the split dim for column/vocab
    std::int64_t cols = 1;
    TpSplit split = TpSplit::replicated;
    TensorPlace place = TensorPlace::layer;
    bool gemm_weight = false;  // a matrix fed to a GEMM (gets an fp8 copy under fp8-mixed)
    std::int64_t copies = 1;   // identical tensors per layer (MoE experts)

    std::int64_t numel() const { return rows * cols * copies; }
};

// The model's parameter tensors: embedding-level tensors, one layer's tensors
// (every layer is identical), final norm and LM head (absent when tied).
std::vector<ParamTensor> param_tensors(const ModelConfig& m);

struct ParamCounts {
    std::int64_t total = 0;      // every learnable parameter once (tied embeddings once)
    std::int64_t active = 0;     // used per token (MoE: routed experts only)
    std::int64_t embedding = 0;  // word (+ learned position) embeddings
    std::int64_t per_layer = 0;  // one transformer layer
    std::int64_t per_layer_active = 0;
    std::int64_t final_norm = 0;
    std::int64_t lm_head = 0;    // 0 when tied to the embedding
};

ParamCounts count_params(const ModelConfig& m);
// The same over the model's param_tensors(m), when the caller already holds them.
ParamCounts count_params(const ModelConfig& m, const std::vector<ParamTensor>& tensors);

// Builds a ModelConfig from a Hugging Face config.json object (llama, mistral,
// qwen2, qwen3, phi3, gemma3_text, olmo2, olmo3, gpt2, mixtral, qwen3_moe, olmoe, gpt_oss families, chosen by "model_type"). Throws InputError
// naming the field for anything missing, negative or inconsistent.
ModelConfig model_from_hf_config(const nlohmann::json& config, const std::string& name);

// Checks the invariants model_from_hf_config enforces (for hand-built configs).
void validate_model(const ModelConfig& m);

}  // namespace preflight
