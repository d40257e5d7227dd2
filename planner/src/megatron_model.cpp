// The model shape in Megatron-LM's arguments -> a Hugging Face config.json object the planner
// reads (model_from_hf_config), and the Megatron flags the import leaves out on purpose.
// Flag names and defaults: megatron/training/arguments.py (_add_network_size_args,
// validate_args), TransformerConfig (megatron/core/transformer/transformer_config.py), the
// vocabulary padding of megatron/core/tokenizers/utils/build_tokenizer.py vocab_size_with_padding.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "import_flag_values.hpp"
#include "megatron_defaults.hpp"
#include "megatron_flags.hpp"
#include "preflight/planner/config_import.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/limits.hpp"
#include "preflight/planner/model.hpp"
#include "preflight/planner/shown_value.hpp"

namespace preflight {

namespace {

using megatron_script::Flag;
using megatron_script::Flags;
using nlohmann::json;

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// The value of a flag when the script defines it (a tokenizer path may be an undefined variable
// without harm when --vocab-size is given); nullopt otherwise.
std::optional<std::string> resolved(Flags& f, std::string_view name) {
    const Flag* x = f.get(name);
    if (!x || x->values.empty() || !x->values[0].unresolved.empty()) return std::nullopt;
    return x->values[0].text;
}

// The vocabulary before padding (megatron/core/tokenizers/utils/build_tokenizer.py: a named
// tokenizer's own size, NullTokenizer's --vocab-size): a tokenizer whose size is known by name (GPT2BPETokenizer:
// GPT-2's 50257; a --tokenizer-model naming Llama 3: 128256, Llama 2: 32000), else --vocab-size
// (NullTokenizer and the others). nullopt when neither is given.
std::optional<std::pair<std::int64_t, ConfigSpot>> raw_vocab(Flags& f) {
    if (const auto model = resolved(f, "--tokenizer-model")) {
        const std::string m = lower(*model);
        const ConfigSpot at = f.spot(*f.get("--tokenizer-model"));
        if (m.find("llama-3") != std::string::npos || m.find("llama3") != std::string::npos) return std::make_pair(128256, at);
        if (m.find("llama-2") != std::string::npos || m.find("llama2") != std::string::npos) return std::make_pair(32000, at);
    }
    if (resolved(f, "--tokenizer-type") == std::optional<std::string>("GPT2BPETokenizer"))
        return std::make_pair(50257, f.spot(*f.get("--tokenizer-type")));
    if (const Flag* v = f.get("--vocab-size"))
        return std::make_pair(import_values::integer_text(f.text(*v), f.spot(*v), 1, limits::kMaxVocab, "limits::kMaxVocab"),
                              f.spot(*v));
    // pretrain_gpt.py's args_defaults: tokenizer_type GPT2BPETokenizer when none is named.
    if (!f.get("--tokenizer-type") && !f.get("--tokenizer-model"))
        return std::make_pair(50257, f.default_spot("--tokenizer-type (absent: pretrain_gpt.py's GPT2BPETokenizer)"));
    return std::nullopt;
}

// Megatron pads the vocabulary to a multiple of --make-vocab-size-divisible-by (128) x tp.
std::int64_t vocab_multiple(Flags& f, std::int64_t tp) {
    return f.integer("--make-vocab-size-divisible-by", 1, limits::kMaxVocab, "limits::kMaxVocab").value_or(128) * tp;
}

std::int64_t pad_vocab(Flags& f, std::int64_t raw, const ConfigSpot& at, std::int64_t tp) {
    const std::int64_t multiple = vocab_multiple(f, tp);
    const std::int64_t padded = (raw + multiple - 1) / multiple * multiple;
    import_values::integer_text(std::to_string(padded), at, 1, limits::kMaxVocab, "limits::kMaxVocab (padded)");
    return padded;
}

std::optional<std::int64_t> padded_vocab(Flags& f, std::int64_t tp) {
    const auto raw = raw_vocab(f);
    if (!raw) return std::nullopt;
    return pad_vocab(f, raw->first, raw->second, tp);
}

struct Shape {
    std::int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, positions = 0;
    std::int64_t experts = 1, topk = 1, vocab = 0;
    bool swiglu = false, rmsnorm = false, rope = false, tied = true, bias = true, qkv_bias = false;
    bool qk_norm = false;  // --qk-layernorm
    bool pre_softmax = false;  // --moe-router-pre-softmax: gate weights not renormalised over the top k
    bool quick_geglu = false, sinks = false;  // --quick-geglu; --softmax-type learnable
    double glu_clamp = 0;                     // --activation-func-clamp-value (with --glu-linear-offset 1)
    std::int64_t window = 0, full_every = 0;  // keys a query sees (--window-size L,0: L + 1); --window-attn-skip-freq
    double rotary_share = 1.0;  // --rotary-percent (a fraction, default 1.0)
    double rope_theta = 10000;
    double norm_eps = megatron_defaults::kNormEpsilon;  // --norm-epsilon (Megatron-DeepSpeed: --layernorm-epsilon)
    std::optional<double> rope_scaling;  // --use-rope-scaling: Llama 3.1's, this factor
    json yarn;                           // --position-embedding-type yarn: transformers' rope_scaling of it
};

// Megatron-DeepSpeed's --num-key-value-heads: grouped-query attention whenever it differs from
// the heads, no --group-query-attention needed (Megatron-DeepSpeed@4efb479 megatron/arguments.py:443-449
// defaults it to the heads; megatron/model/transformer.py:526 use_gqa = heads != kv heads).
// Beside Megatron-LM's --num-query-groups (with --group-query-attention), that one stands.
void read_kv_heads(Flags& f, Shape& s, ImportedConfig& out, bool groups_given) {
    const Flag* x = f.get("--num-key-value-heads");
    if (!x) return;
    const std::int64_t kv = import_values::integer_text(f.text(*x), f.spot(*x), 1, limits::kMaxHeads, "limits::kMaxHeads");
    if (s.heads % kv != 0)
        throw InputError(f.spot(*x).text(), std::to_string(kv) + " does not divide --num-attention-heads " + std::to_string(s.heads));
    if (groups_given && kv != s.kv_heads)
        out.warnings.push_back(f.spot(*x).text() + ": differs from --num-query-groups " + std::to_string(s.kv_heads) +
                               ": planned with --num-query-groups");
    if (!groups_given) s.kv_heads = kv;
}

// The attention and MLP widths: --kv-channels (default hidden / heads), --group-query-attention
// with --num-query-groups, --ffn-hidden-size (default 4h; 8h/3 rounded down to 64 with --swiglu)
// (megatron/training/arguments.py validate_args; TransformerConfig kv_channels, num_query_groups).
void read_widths(Flags& f, Shape& s, ImportedConfig& out) {
    const Flag* heads = f.get("--num-attention-heads");
    const auto kv = f.integer("--kv-channels", 1, limits::kMaxWidth, "limits::kMaxWidth");
    if (!kv && s.hidden % s.heads != 0)
        throw InputError(f.spot(*heads).text(), std::to_string(s.heads) + " does not divide --hidden-size " + std::to_string(s.hidden));
    s.head_dim = kv.value_or(s.hidden / s.heads);
    const bool gqa = f.has("--group-query-attention");
    const auto groups = f.integer("--num-query-groups", 1, limits::kMaxHeads, "limits::kMaxHeads");
    s.kv_heads = gqa ? groups.value_or(s.heads) : s.heads;
    if (groups && !gqa)  // TransformerConfig.num_query_groups takes effect with --group-query-attention only
        out.warnings.push_back(f.spot(*f.get("--num-query-groups")).text() + ": without --group-query-attention "
                                                                            "Megatron uses multi-head attention: ignored");
    read_kv_heads(f, s, out, gqa && groups);
    s.swiglu = f.has("--swiglu");
    const auto ffn_default = s.swiglu ? s.hidden * 8 / 192 * 64 : s.hidden * 4;
    s.ffn = f.integer("--ffn-hidden-size", 1, limits::kMaxWidth, "limits::kMaxWidth").value_or(ffn_default);
    if (s.ffn <= 0) throw InputError(f.spot(*f.get("--hidden-size")).text(), "gives no MLP width; give --ffn-hidden-size");
}

// The sliding window (--window-size "left,right", -1 unbounded; --window-attn-skip-freq N: every Nth
// layer, 1-based, attends to the whole sequence; megatron/core/transformer/utils.py
// is_layer_window_attention), the gated quick_gelu (--quick-geglu, with --glu-linear-offset and
// --activation-func-clamp-value) and learned attention sinks (--softmax-type learnable): gpt-oss's
// layer. What the planner cannot read is said and planned without.
void read_gpt_oss_parts(Flags& f, Shape& s, ImportedConfig& out) {
    if (const Flag* x = f.get("--window-size")) {
        const std::string v = f.text(*x);
        const auto comma = v.find(',');
        const std::string where = f.spot(*x).text();
        if (comma == std::string::npos) throw InputError(where, "must be two numbers \"left,right\", got '" + one_line(v) + "'");
        const std::int64_t left = import_values::integer_text(v.substr(0, comma), f.spot(*x), -1, limits::kMaxSeq, "limits::kMaxSeq");
        const std::int64_t right = import_values::integer_text(v.substr(comma + 1), f.spot(*x), -1, limits::kMaxSeq, "limits::kMaxSeq");
        if (right != 0) out.warnings.push_back(where + ": keys after the query are not modelled (planned causal)");
        s.window = left >= 0 ? left + 1 : 0;
    }
    if (const Flag* x = f.get("--window-attn-skip-freq")) {
        const std::string v = f.text(*x);
        if (!v.empty() && std::all_of(v.begin(), v.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
            s.full_every = import_values::integer_text(v, f.spot(*x), 1, limits::kMaxLayers, "limits::kMaxLayers");
        else
            out.warnings.push_back(f.spot(*x).text() + ": a per-layer pattern is not modelled (planned with the "
                                                       "window on every layer)");
    }
    s.quick_geglu = f.has("--quick-geglu");
    const auto offset = f.real("--glu-linear-offset", -1e6, 1e6);
    const auto clamp = f.real("--activation-func-clamp-value", 1e-9, 1e6);
    if (s.quick_geglu && offset == 1.0 && clamp) s.glu_clamp = *clamp;
    else if (s.quick_geglu || offset || clamp)
        out.warnings.push_back(f.spot(*f.get(s.quick_geglu ? "--quick-geglu" : offset ? "--glu-linear-offset"
                                                                                     : "--activation-func-clamp-value"))
                                   .text() +
                               ": modelled as gpt-oss's gated MLP only with --quick-geglu, --glu-linear-offset 1 and "
                               "--activation-func-clamp-value together; the MLP is planned as SwiGLU (same shapes)");
    if (const auto type = f.text("--softmax-type"); type && *type != "vanilla") {
        s.sinks = *type == "learnable";
        if (!s.sinks)
            out.warnings.push_back(f.spot(*f.get("--softmax-type")).text() + ": " + one_line(*type) +
                                   " has no parameters: planned as plain softmax");
    }
}

// YaRN (--position-embedding-type yarn) as Megatron-LM's GPT model takes it
// (training/argument_utils.py _apply_yarn_config_from_args, defaults of YarnRotaryEmbedding): as
// transformers' rope_scaling, the mscale pair's attention factor included. A factor of 1 scales nothing.
void read_yarn(Flags& f, Shape& s) {
    const double factor = f.real("--rotary-scaling-factor", 1e-6, 1e6).value_or(1.0);
    const auto original = f.integer("--yarn-original-max-position-embeddings", 1, limits::kMaxPositions,
                                    "limits::kMaxPositions");
    const double fast = f.real("--yarn-beta-fast", 1e-6, 1e6).value_or(32.0);
    const double slow = f.real("--yarn-beta-slow", 1e-6, 1e6).value_or(1.0);
    const double mscale = f.real("--mscale", 0.0, 1e6).value_or(1.0);
    const double all_dim = f.real("--mscale-all-dim", 0.0, 1e6).value_or(0.0);
    const bool round = !f.has("--no-yarn-correction-range-round-to-int");
    f.has("--yarn-correction-range-round-to-int");  // the default, read
    if (factor == 1.0) return;
    s.yarn = {{"rope_type", "yarn"}, {"factor", factor}, {"original_max_position_embeddings", original.value_or(4096)},
              {"beta_fast", fast}, {"beta_slow", slow}, {"truncate", round}};
    // The attention factor get(mscale) / get(mscale_all_dim), get(m) = 0.1 m ln(factor) + 1 above a factor
    // of 1 (YarnRotaryEmbedding, _yarn_get_mscale): transformers takes the pair when both are non-zero,
    // and 1 with 0 is its default; any other pair is its factor.
    const auto get = [&](double m) { return factor > 1 ? 0.1 * m * std::log(factor) + 1.0 : 1.0; };
    if (mscale > 0 && all_dim > 0) s.yarn["mscale"] = mscale, s.yarn["mscale_all_dim"] = all_dim;
    else if (mscale != 1.0 || all_dim != 0.0) s.yarn["attention_factor"] = get(mscale) / get(all_dim);
}

// Norm, positions, embeddings, biases, RoPE base and scaling, experts (arguments.py
// _add_network_size_args; TransformerConfig normalization, add_bias_linear, add_qkv_bias,
// num_moe_experts / --num-experts, moe_router_topk, moe_ffn_hidden_size).
void read_layout(Flags& f, Shape& s, ImportedConfig& out) {
    // Megatron-LM's choices are LayerNorm | RMSNorm, Megatron-DeepSpeed's layernorm | rmsnorm
    // (Megatron-DeepSpeed@4efb479 megatron/arguments.py:647-648).
    const std::string norm = lower(f.text("--normalization").value_or("LayerNorm"));
    s.rmsnorm = norm == "rmsnorm";
    if (norm != "rmsnorm" && norm != "layernorm")
        out.warnings.push_back(f.spot(*f.get("--normalization")).text() + ": " + *f.text("--normalization") +
                               " is modelled as LayerNorm");
    const std::string pos = f.has("--use-rotary-position-embeddings") ? "rope"
                                                                      : f.text("--position-embedding-type").value_or("learned_absolute");
    s.rope = pos == "rope" || pos == "yarn" || pos == "mrope";
    if (pos == "yarn") read_yarn(f, s);
    if (pos != "rope" && pos != "learned_absolute" && pos != "yarn")
        out.warnings.push_back(f.spot(*f.get("--position-embedding-type")).text() + ": " + pos +
                               " positions are modelled as " + (s.rope ? "rope" : "learned_absolute"));
    s.tied = !f.has("--untie-embeddings-and-output-weights");
    s.bias = !f.has("--disable-bias-linear");
    s.qkv_bias = f.has("--add-qkv-bias");
    if (const auto base = f.real("--rotary-base", 1.0 + 1e-9, 1e12)) s.rope_theta = *base;
    if (const auto share = f.real("--rotary-percent", 1e-6, 1.0)) s.rotary_share = *share;
    for (const char* flag : {"--layernorm-epsilon", "--norm-epsilon"})  // Megatron-LM's name wins
        if (const auto eps = f.real(flag, 1e-30, 0.5)) s.norm_eps = *eps;
    if (f.has("--use-rope-scaling")) s.rope_scaling = f.real("--rope-scaling-factor", 1e-6, 1e6).value_or(8.0);
    s.experts = f.integer("--num-experts", 1, limits::kMaxExperts, "limits::kMaxExperts").value_or(1);
    if (s.experts > 1) s.topk = f.integer("--moe-router-topk", 1, s.experts, "--num-experts").value_or(2);
    if (s.experts > 1)
        s.ffn = f.integer("--moe-ffn-hidden-size", 1, limits::kMaxWidth, "limits::kMaxWidth").value_or(s.ffn);
    s.qk_norm = f.has("--qk-layernorm");
    s.pre_softmax = s.experts > 1 && f.has("--moe-router-pre-softmax");
    read_gpt_oss_parts(f, s, out);
    for (const char* flag : {"--squared-relu", "--openai-gelu", "--moe-shared-expert-intermediate-size",
                             "--moe-layer-freq", "--multi-latent-attention"})
        if (const Flag* x = f.get(flag))
            out.warnings.push_back(f.spot(*x).text() + ": not modelled (the layer is planned without it)");
}

// The Hugging Face config.json of the shape: a Llama-family one (llama; qwen2 when only q/k/v
// carry biases; mixtral with experts) for SwiGLU / RMSNorm / RoPE models, GPT-2's otherwise.
json hf_config(const Shape& s, const ConfigSpot& at, ImportedConfig& out) {
    const bool gated = s.swiglu || s.quick_geglu;
    const bool llama = gated || s.rmsnorm || s.rope;
    const auto differs = [&](bool bad, const std::string& what, const char* family) {
        if (bad) out.warnings.push_back(at.text() + ": " + what + ": modelled as " + family + " (the count may differ)");
    };
    if (!llama) {
        differs(s.kv_heads != s.heads, "grouped-query attention", "GPT-2 (multi-head)");
        differs(s.head_dim * s.heads != s.hidden, "--kv-channels x heads != hidden", "GPT-2 (hidden / heads per head)");
        differs(!s.bias, "--disable-bias-linear", "GPT-2 (with biases)");
        differs(s.experts > 1, "--num-experts", "GPT-2 (dense)");
        differs(s.qk_norm, "--qk-layernorm", "GPT-2 (no q/k norms)");
        return {{"model_type", "gpt2"}, {"n_embd", s.hidden}, {"n_layer", s.layers}, {"n_head", s.heads},
                {"n_inner", s.ffn}, {"vocab_size", s.vocab}, {"n_positions", s.positions}, {"tie_word_embeddings", s.tied},
                {"layer_norm_epsilon", s.norm_eps}};
    }
    differs(!gated, "a GeLU MLP (no --swiglu)", "Llama (SwiGLU)");
    differs(!s.rmsnorm, "LayerNorm", "Llama (RMSNorm)");
    differs(!s.rope, "learned positions", "Llama (RoPE)");
    const bool qkv_only = !s.bias && s.qkv_bias && s.experts == 1;
    // --qk-layernorm: Qwen3's per-head q/k norms (qwen3, qwen3_moe with experts); Qwen2's q/k/v-only
    // biases have no family with them.
    differs(s.qk_norm && qkv_only, "--qk-layernorm beside --add-qkv-bias", "Qwen2 (no q/k norms)");
    const bool qwen3 = s.qk_norm && !qkv_only;
    // gpt-oss: experts with biases, learned sinks and the clamped quick_gelu gate, all three.
    const bool gpt_oss = s.experts > 1 && s.bias && s.sinks && s.glu_clamp > 0 && !s.qk_norm;
    differs(s.sinks && !gpt_oss, "--softmax-type learnable without gpt-oss's experts and gate", "plain softmax");
    // A window on every layer is Mistral's (Mixtral's with experts); layers of two kinds, gpt-oss's.
    const bool windowed = s.window > 0 && s.full_every == 0 && !gpt_oss && !qwen3 && !qkv_only;
    differs(s.window > 0 && !gpt_oss && (s.full_every > 0 || qwen3 || qkv_only),
            s.full_every > 0 ? "--window-attn-skip-freq" : "--window-size beside Qwen's layout", "full attention on every layer");
    const char* type = gpt_oss          ? "gpt_oss"
                       : s.experts > 1  ? (qwen3 ? "qwen3_moe" : "mixtral")
                       : qkv_only       ? "qwen2"
                       : qwen3          ? "qwen3"
                       : windowed       ? "mistral"
                                        : "llama";
    json c{{"model_type", type},
           {"hidden_size", s.hidden}, {"num_hidden_layers", s.layers}, {"num_attention_heads", s.heads},
           {"num_key_value_heads", s.kv_heads}, {"head_dim", s.head_dim}, {"intermediate_size", s.ffn},
           {"vocab_size", s.vocab}, {"max_position_embeddings", s.positions}, {"tie_word_embeddings", s.tied},
           {"rope_theta", s.rope_theta}, {"attention_bias", s.bias}, {"mlp_bias", s.bias},
           {"rms_norm_eps", s.norm_eps}};  // Megatron-LM's 1e-5 unless given: not the config classes' defaults
    differs(!s.bias && s.qkv_bias && s.experts > 1, "--add-qkv-bias", qwen3 ? "Qwen3-MoE (no biases)" : "Mixtral (no biases)");
    if (gpt_oss) {  // GptOssConfig's names; the window on the layers the skip frequency leaves
        c["num_local_experts"] = s.experts, c["num_experts_per_tok"] = s.topk, c["swiglu_limit"] = s.glu_clamp;
        json kinds = json::array();
        for (std::int64_t i = 0; i < s.layers; ++i)
            kinds.push_back(s.window > 0 && (s.full_every == 0 || (i + 1) % s.full_every != 0) ? "sliding_attention"
                                                                                              : "full_attention");
        c["layer_types"] = kinds;
        c["sliding_window"] = s.window > 0 ? s.window : 128;
    } else if (s.experts > 1 && qwen3) {  // Qwen3MoeConfig's names; every layer a mixture of experts
        c["num_experts"] = s.experts, c["num_experts_per_tok"] = s.topk, c["moe_intermediate_size"] = s.ffn;
        c["norm_topk_prob"] = !s.pre_softmax;  // Megatron-LM renormalises unless --moe-router-pre-softmax
    } else if (s.experts > 1) {
        c["num_local_experts"] = s.experts, c["num_experts_per_tok"] = s.topk;
    }
    if (s.pre_softmax && !qwen3)  // MixtralConfig and GptOssConfig have no norm_topk_prob
        out.warnings.push_back(at.text() + ": --moe-router-pre-softmax: the gate weights are not renormalised over the "
                               "top k; modelled as " + std::string(type) + "'s router, which renormalises (memory and "
                               "step time do not depend on it; `preflight run` would train the renormalised router)");
    if (windowed) c["sliding_window"] = s.window;
    if (s.rotary_share != 1.0) c["partial_rotary_factor"] = s.rotary_share;
    if (!s.yarn.is_null()) c["rope_scaling"] = s.yarn;
    if (s.rope_scaling)  // megatron/core/models/common/embeddings/rope_utils.py: Llama 3.1's constants
        c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", *s.rope_scaling}, {"low_freq_factor", 1.0},
                             {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
    return c;
}

// A vocabulary that stands in while the shape is read and matched (any positive size).
constexpr std::int64_t kPlaceholderVocab = 128;

// The layer stack the parameter, FLOP and activation counts read: every width, count and switch
// but the vocabulary, the context and the RoPE base (model.hpp ModelConfig).
bool same_layers(const ModelConfig& a, const ModelConfig& b) {
    return a.hidden == b.hidden && a.layers == b.layers && a.heads == b.heads && a.kv_heads == b.kv_heads &&
           a.head_dim == b.head_dim && a.ffn_hidden == b.ffn_hidden && a.tied_embeddings == b.tied_embeddings &&
           a.norm == b.norm && a.mlp == b.mlp && a.position == b.position && a.qkv_bias == b.qkv_bias &&
           a.out_bias == b.out_bias && a.mlp_bias == b.mlp_bias && a.experts == b.experts &&
           a.experts_per_token == b.experts_per_token && a.qk_norm == b.qk_norm &&
           a.attention_sinks == b.attention_sinks && a.router_bias == b.router_bias;
}

std::string names_with_vocab(const std::vector<const ModelConfig*>& models) {
    std::string s;
    for (const ModelConfig* m : models)
        s += (s.empty() ? "" : ", ") + m->name + " (vocabulary " + std::to_string(m->vocab) + ")";
    return s;
}

// A shape whose vocabulary the script leaves open (a --tokenizer-model it does not define, a
// tokenizer sized by its file): the vocabulary of the catalog models with its layers
// (same_layers), narrowed to those with its RoPE base when they differ in vocabulary (Llama 3 70B
// and Llama 2 70B share their layers), padded (pad_vocab). nullopt, said in a warning, when none
// or several remain.
std::optional<std::int64_t> catalog_vocab(Flags& f, const ModelConfig& shape, std::span<const ModelConfig> catalog,
                                          const ConfigSpot& at, std::int64_t tp, ImportedConfig& out) {
    const std::string unknown = at.text() + ": neither --vocab-size nor a tokenizer of known size";
    std::vector<const ModelConfig*> same;
    for (const ModelConfig& m : catalog)
        if (same_layers(shape, m)) same.push_back(&m);
    const auto one_vocab = [](const std::vector<const ModelConfig*>& v) {
        return !v.empty() && std::all_of(v.begin(), v.end(), [&](const ModelConfig* m) { return m->vocab == v[0]->vocab; });
    };
    if (!one_vocab(same)) {
        std::vector<const ModelConfig*> base;
        for (const ModelConfig* m : same)
            if (m->rope_theta == shape.rope_theta) base.push_back(m);
        if (one_vocab(base)) same = base;
    }
    if (same.empty()) {
        out.warnings.push_back(unknown + ", and no catalog model has these layers: the model comes from --model");
        return std::nullopt;
    }
    if (!one_vocab(same)) {
        out.warnings.push_back(unknown + ": the layers are those of catalog models " + names_with_vocab(same) +
                               ", which differ in vocabulary: give --vocab-size, or --model");
        return std::nullopt;
    }
    const std::int64_t raw = same.front()->vocab;
    const std::int64_t padded = pad_vocab(f, raw, at, tp);
    const std::string multiple = "a multiple of --make-vocab-size-divisible-by x tp = " + std::to_string(vocab_multiple(f, tp));
    out.warnings.push_back(unknown + ": the layers are those of catalog " + (same.size() > 1 ? "models " : "model ") +
                           names_with_vocab(same) + ": planned with that vocabulary" +
                           (padded == raw ? " (" + multiple + ", as Megatron pads it)"
                                          : ", padded to " + std::to_string(padded) + " (" + multiple + ", as Megatron pads it)") +
                           "; give --vocab-size if the tokenizer differs");
    return padded;
}

}  // namespace

void import_megatron_model(Flags& f, ImportedConfig& out, std::int64_t tp,
                           const std::function<std::vector<ModelConfig>()>& load_catalog) {
    Shape s;
    const auto layers = f.integer("--num-layers", 1, limits::kMaxLayers, "limits::kMaxLayers");
    const auto hidden = f.integer("--hidden-size", 1, limits::kMaxWidth, "limits::kMaxWidth");
    const auto heads = f.integer("--num-attention-heads", 1, limits::kMaxHeads, "limits::kMaxHeads");
    if (!layers && !hidden && !heads) return;  // no shape here: --model supplies the model
    if (!layers || !hidden || !heads)
        throw InputError(f.file(), std::string("the model shape needs ") + (!layers ? "--num-layers" : !hidden ? "--hidden-size"
                                                                                                             : "--num-attention-heads"));
    s.layers = *layers, s.hidden = *hidden, s.heads = *heads;
    const ConfigSpot at = f.spot(*f.get("--num-layers"));
    read_widths(f, s, out);
    read_layout(f, s, out);
    const auto positions = f.integer("--max-position-embeddings", 1, limits::kMaxPositions, "limits::kMaxPositions");
    const auto vocab = padded_vocab(f, tp);
    if (!positions && !f.get("--seq-length"))
        throw InputError(f.file(), "the model shape needs --max-position-embeddings (or --seq-length)");
    s.positions = positions.value_or(f.integer("--seq-length", 1, limits::kMaxSeq, "limits::kMaxSeq").value_or(1));
    // The catalog is read only where the vocabulary is open (ImportContext::catalog).
    const std::vector<ModelConfig> catalog = vocab || !load_catalog ? std::vector<ModelConfig>{} : load_catalog();
    if (!vocab && catalog.empty()) {
        out.warnings.push_back(at.text() + ": neither --vocab-size nor a tokenizer of known size: the model comes from --model");
        return;
    }
    s.vocab = vocab.value_or(kPlaceholderVocab);
    json cfg = hf_config(s, at, out);
    ModelConfig read;
    try {
        read = model_from_hf_config(cfg, f.file());
    } catch (const InputError& e) {
        throw InputError(at.text(), std::string("the model shape is not one the planner reads: ") + e.what());
    }
    if (!vocab) {
        const auto padded = catalog_vocab(f, read, catalog, at, tp, out);
        if (!padded) return;
        cfg["vocab_size"] = *padded;
    }
    out.model_config = std::move(cfg);
    out.model_from = at;
}

// Flags known and left out on purpose: data and tokenizer paths, logging, checkpointing, the
// learning-rate schedule, evaluation, initialization, seeds, the distributed backend, kernel
// fusions and overlaps the step time does not distinguish (arguments.py _add_*_args).
bool megatron_flag_ignored(std::string_view name) {
    static const char* const prefixes[] = {
        "--data-", "--train-", "--valid-", "--test-", "--eval-", "--log-", "--tensorboard-", "--wandb-", "--save",
        "--load", "--ckpt-", "--no-save-", "--no-load-", "--lr", "--min-lr", "--decoupled-", "--weight-decay",
        "--start-weight-decay", "--end-weight-decay", "--adam-", "--sgd-", "--clip-grad", "--loss-scale",
        "--initial-loss-scale", "--min-loss-scale", "--hysteresis", "--init-method", "--seed", "--distributed-",
        "--local-rank", "--profile", "--tokenizer-", "--vocab-file", "--merge-file", "--split", "--mock-data",
        "--num-workers", "--exit-", "--timing-log", "--fp8-amax-", "--fp8-margin", "--fp8-interval", "--manual-gc",
        "--tiktoken-", "--no-create-attention-mask", "--create-attention-mask", "--no-mmap", "--use-mcore-models",
        "--use-legacy-models", "--transformer-impl", "--ft-", "--one-logger", "--straggler", "--rerun-", "--check-",
        "--no-check-", "--calculate-per-token-loss", "--cross-entropy-", "--no-bias-", "--no-masked-softmax-fusion",
        "--no-rope-fusion", "--apply-rope-fusion", "--bias-", "--masked-softmax-fusion", "--no-gradient-accumulation-fusion",
        "--overlap-grad-reduce", "--overlap-param-gather", "--align-", "--ddp-", "--async-save",
        "--use-dist-ckpt", "--dist-ckpt-", "--use-checkpoint-", "--finetune", "--pretrained-checkpoint",
        "--auto-detect-ckpt-format", "--no-initialization", "--use-cpu-initialization",
        "--apply-layernorm-1p", "--attention-softmax-in-fp32",
        "--apply-query-key-layer-scaling", "--account-for-embedding-in-pipeline-split",
        "--account-for-loss-in-pipeline-split", "--dataloader-type",
        "--reset-position-ids", "--reset-attention-mask", "--eod-mask-loss", "--object-storage-cache-path",
        "--per-split-data-args-path", "--full-validation", "--skip-train", "--tp-comm-overlap-cfg",
        "--tp-comm-bootstrap-backend", "--nccl-", "--deterministic-mode",
        "--moe-router-load-balancing-type", "--moe-aux-loss-coeff", "--moe-z-loss-coeff", "--moe-router-",
        "--moe-grouped-gemm", "--moe-token-dispatcher-type", "--moe-permute-fusion", "--use-flash-attn",
        "--no-persist-layer-norm", "--swiglu-", "--use-ring-exchange-p2p",
        "--use-rotary-position-embeddings", "--log", "--timing", "--wandb", "--tensorboard", "--record-memory-history",
        "--memory-snapshot-path", "--no-async-tensor-model-parallel-allreduce", "--defer-embedding-wgrad-compute",
        "--use-tp-pp-dp-mapping", "--enable-ft-package"};
    for (const char* p : prefixes)
        if (name.rfind(p, 0) == 0) return true;
    return false;
}

}  // namespace preflight
