#include "preflight/planner/model.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "preflight/planner/checked.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/limits.hpp"
#include "preflight/planner/shown_value.hpp"

namespace preflight {

using nlohmann::json;

std::string_view to_string(ModelFamily f) {
    switch (f) {
        case ModelFamily::gpt2: return "gpt2";
        case ModelFamily::llama: return "llama";
        case ModelFamily::mistral: return "mistral";
        case ModelFamily::qwen2: return "qwen2";
        case ModelFamily::mixtral: return "mixtral";
        case ModelFamily::qwen3: return "qwen3";
        case ModelFamily::qwen3_moe: return "qwen3_moe";
        case ModelFamily::phi3: return "phi3";
        case ModelFamily::gemma3_text: return "gemma3_text";
        case ModelFamily::gpt_oss: return "gpt_oss";
        case ModelFamily::olmo2: return "olmo2";
        case ModelFamily::olmo3: return "olmo3";
        case ModelFamily::olmoe: return "olmoe";
    }
    return "?";
}

std::string_view experts_key(ModelFamily f) {
    return f == ModelFamily::qwen3_moe || f == ModelFamily::olmoe ? "num_experts" : "num_local_experts";
}

namespace {

// Families whose layers interleave windowed and full attention (Gemma 3, gpt-oss, OLMo 3): layers of
// the two kinds are planned at their mean, and transformers 5's rope_parameters may be keyed by layer type.
bool interleaves_windows(ModelFamily f) {
    return f == ModelFamily::gemma3_text || f == ModelFamily::gpt_oss || f == ModelFamily::olmo3;
}

// Reads an integer field of at least `least` (1: positive, 0: or zero); `required` false returns
// `fallback` when the key is absent or null.
std::int64_t int_at_least(const json& cfg, const char* key, std::int64_t least, bool required, std::int64_t fallback) {
    auto it = cfg.find(key);
    if (it == cfg.end() || it->is_null()) {
        if (required) throw InputError(key, "missing from config.json");
        return fallback;
    }
    if (!it->is_number_integer()) throw InputError(key, "must be an integer, got " + shown_json(*it));
    if (it->is_number_unsigned() && it->get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
        throw InputError(key, shown_json(*it) + " is beyond the 64-bit integer range");
    const auto v = it->get<std::int64_t>();
    if (v < least) throw InputError(key, std::string(least > 0 ? "must be positive" : "must be 0 or more") + ", got " +
                                             std::to_string(v));
    return v;
}

std::int64_t positive_int(const json& cfg, const char* key, bool required, std::int64_t fallback = 0) {
    return int_at_least(cfg, key, 1, required, fallback);
}

// A string key, or `fallback` when absent or null.
std::string text(const json& cfg, const char* key, const char* fallback) {
    auto it = cfg.find(key);
    if (it == cfg.end() || it->is_null()) return fallback;
    if (!it->is_string()) throw InputError(key, "must be a string, got " + shown_json(*it));
    return it->get<std::string>();
}

bool boolean(const json& cfg, const char* key, bool fallback) {
    auto it = cfg.find(key);
    if (it == cfg.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) throw InputError(key, "must be true or false, got " + shown_json(*it));
    return it->get<bool>();
}

// The norms' epsilon (`key`: rms_norm_eps or layer_norm_epsilon), or `fallback` (the config class's
// default) when absent or null: a number above 0 and below 1.
double norm_epsilon(const json& cfg, const char* key, double fallback) {
    auto it = cfg.find(key);
    if (it == cfg.end() || it->is_null()) return fallback;
    if (!it->is_number() || !(it->get<double>() > 0 && it->get<double>() < 1))
        throw InputError(key, "must be a number above 0 and below 1, got " + shown_json(*it));
    return it->get<double>();
}

// The config classes' rms_norm_eps defaults (transformers LlamaConfig ... GptOssConfig, read at 008e574).
double default_rms_norm_eps(ModelFamily f) {
    switch (f) {
        case ModelFamily::phi3:
        case ModelFamily::mixtral:
        case ModelFamily::olmo2:
        case ModelFamily::olmo3:
        case ModelFamily::olmoe:
        case ModelFamily::gpt_oss: return 1e-5;
        default: return 1e-6;  // llama, mistral, qwen2, qwen3, qwen3_moe, gemma3_text
    }
}

constexpr const char* kFamilies =
    "gpt2, llama, mistral, qwen2, qwen3, phi3, gemma3_text, olmo2, olmo3, mixtral, qwen3_moe, olmoe, gpt_oss";

ModelFamily family_of(const json& cfg) {
    auto it = cfg.find("model_type");
    if (it == cfg.end() || !it->is_string())
        throw InputError("model_type", std::string("missing from config.json (supported: ") + kFamilies + ")");
    const auto t = it->get<std::string>();
    if (t == "gpt2") return ModelFamily::gpt2;
    if (t == "llama") return ModelFamily::llama;
    if (t == "mistral") return ModelFamily::mistral;
    if (t == "qwen2") return ModelFamily::qwen2;
    if (t == "mixtral") return ModelFamily::mixtral;
    if (t == "qwen3") return ModelFamily::qwen3;
    if (t == "qwen3_moe") return ModelFamily::qwen3_moe;
    if (t == "phi3") return ModelFamily::phi3;
    if (t == "gemma3_text") return ModelFamily::gemma3_text;
    if (t == "gpt_oss") return ModelFamily::gpt_oss;
    if (t == "olmo2") return ModelFamily::olmo2;
    if (t == "olmo3") return ModelFamily::olmo3;
    if (t == "olmoe") return ModelFamily::olmoe;
    if (t == "gemma3")  // Gemma3ForConditionalGeneration: text_config beside a SigLIP vision tower
        throw InputError("model_type", "'gemma3' is Gemma 3's multimodal model, whose vision tower and projector are "
                                       "not modelled: give its text_config, saved as a config.json of its own "
                                       "(model_type gemma3_text), to plan the language model alone");
    throw InputError("model_type", "unsupported model family " + shown_json(*it) + " (supported: " + kFamilies + ")");
}

}  // namespace

void validate_model(const ModelConfig& m) {
    const std::pair<const char*, std::int64_t> dims[] = {
        {"hidden_size", m.hidden},        {"num_hidden_layers", m.layers},
        {"num_attention_heads", m.heads}, {"num_key_value_heads", m.kv_heads},
        {"head_dim", m.head_dim},         {"intermediate_size", m.ffn_hidden},
        {"vocab_size", m.vocab},          {"max_position_embeddings", m.max_positions},
    };
    for (const auto& [key, v] : dims)
        if (v <= 0) throw InputError(key, "must be positive, got " + std::to_string(v));
    if (m.heads % m.kv_heads != 0)
        throw InputError("num_key_value_heads", std::to_string(m.kv_heads) + " does not divide num_attention_heads " +
                                                    std::to_string(m.heads));
    const std::string key(experts_key(m.family));
    if (m.experts < 1) throw InputError(key, "must be positive");
    if (m.experts_per_token < 1 || m.experts_per_token > m.experts)
        throw InputError("num_experts_per_tok", "must be between 1 and " + key + " (" +
                                                    std::to_string(m.experts) + ")");
    if (m.qk_norm_whole && !m.qk_norm) throw InputError("q_norm", "a whole-projection q/k norm needs qk_norm");
    limits::check_model(m);
}

namespace {

// GPT-2 shape and layout from its config.json keys.
void read_gpt2(const json& cfg, ModelConfig& m) {
    // GPT-2 (Radford et al. 2019; HF GPT2Config): LayerNorm with bias, learned
    // positions, GeLU MLP of n_inner (default 4h), biases everywhere, tied head.
    m.hidden = positive_int(cfg, "n_embd", true);
    m.layers = positive_int(cfg, "n_layer", true);
    m.heads = positive_int(cfg, "n_head", true);
    m.kv_heads = m.heads;
    if (m.hidden % m.heads != 0)
        throw InputError("n_head", std::to_string(m.heads) + " does not divide n_embd " + std::to_string(m.hidden));
    m.head_dim = m.hidden / m.heads;
    m.ffn_hidden = positive_int(cfg, "n_inner", false, checked_mul(4, m.hidden, "n_embd"));
    m.vocab = positive_int(cfg, "vocab_size", true);
    m.max_positions = positive_int(cfg, "n_positions", true);
    m.tied_embeddings = boolean(cfg, "tie_word_embeddings", true);
    m.norm = NormKind::layernorm;
    m.norm_eps = norm_epsilon(cfg, "layer_norm_epsilon", 1e-5);  // GPT2Config's default
    m.mlp = MlpKind::gelu;
    m.activation = text(cfg, "activation_function", "");  // GPT2Config's default: gelu_new
    m.position = PositionKind::learned;
    m.qkv_bias = m.out_bias = m.mlp_bias = true;
    m.fused_qkv = true;  // GPT2Attention's c_attn (MPT's Wqkv)
}

// The largest RoPE base read: 1e12, as the Megatron importer bounds --rotary-base (the catalog's
// largest is 1e6), so every emitter writes it as the whole number or decimal it is.
constexpr double kMaxRopeTheta = 1e12;

// original_max_position_embeddings (of rope_scaling or rope_parameters, `prefix`): a whole number
// of positions (1024, or 1024.0) up to limits::kMaxPositions, never a fraction cut or a 1e300 cast
// past the int64 range.
std::int64_t original_positions(const json& scaling, const std::string& prefix) {
    const auto f = scaling.find("original_max_position_embeddings");
    if (f == scaling.end()) return 8192;
    const std::string key = prefix + "original_max_position_embeddings";
    const double v = f->is_number() ? f->get<double>() : 0;
    if (!f->is_number() || !(v >= 1 && v <= static_cast<double>(limits::kMaxPositions)) || std::floor(v) != v)
        throw InputError(key, "must be a whole number of positions from 1 to " + std::to_string(limits::kMaxPositions) +
                                  " (limits::kMaxPositions), got " + shown_json(*f));
    return f->is_number_integer() ? f->get<std::int64_t>() : static_cast<std::int64_t>(v);
}

// The RoPE settings of a config.json come in two forms: transformers < 5 write rope_theta,
// rope_scaling and partial_rotary_factor at the top level; transformers 5 write them into one
// rope_parameters object, whose rope_type is "default" when RoPE runs unscaled (modeling_rope_utils.py
// RopeParameters). A config may carry both: a value given in both must agree, one given in either
// is read (a reader of the top level alone plans a transformers-5 config at the default base 10,000).
struct RopeSource {
    const json* obj;
    std::string prefix;  // "" (top level), "rope_scaling." or "rope_parameters."
};

// rope_type (Transformers >= 4.43) or its older name type; `fallback` when neither.
std::string rope_type_of(const RopeSource& src, const char* fallback) {
    for (const char* key : {"rope_type", "type"}) {
        const auto it = src.obj->find(key);
        if (it == src.obj->end() || it->is_null()) continue;
        if (!it->is_string()) throw InputError(src.prefix + key, "must be a string, got " + shown_json(*it));
        require_printable_name(it->get<std::string>(), src.prefix + key, "the RoPE scaling type");
        return it->get<std::string>();
    }
    return fallback;
}

// rope_parameters, or the one entry of a per-layer-type rope_parameters (Gemma 3's and gpt-oss's: the
// full_attention entry, the global RoPE; the windowed layers' base changes no byte or FLOP); nullopt
// when absent.
std::optional<RopeSource> rope_parameters(const json& cfg, bool interleaved) {
    const auto it = cfg.find("rope_parameters");
    if (it == cfg.end() || it->is_null()) return std::nullopt;
    if (!it->is_object()) throw InputError("rope_parameters", "must be an object or null, got " + shown_json(*it));
    std::string kinds;
    for (const auto& [kind, value] : it->items())
        if (value.is_object()) kinds += (kinds.empty() ? "" : ", ") + kind;
    if (kinds.empty()) return RopeSource{&*it, "rope_parameters."};
    if (const auto full = it->find("full_attention"); interleaved && full != it->end() && full->is_object())
        return RopeSource{&*full, "rope_parameters.full_attention."};
    // Hybrid attention keys it by layer type (full_attention, sliding_attention, ...).
    if (it->size() != 1)
        throw InputError("rope_parameters", "RoPE parameters per layer type (" + one_line(kinds) +
                                                ") are not modelled: every layer is planned alike");
    require_printable_name(it->begin().key(), "rope_parameters", "the layer type");
    return RopeSource{&it->begin().value(), "rope_parameters." + it->begin().key() + "."};
}

// A number in (lo, hi] under `key` in any of the sources, checked to agree where several give it.
std::optional<double> rope_number(const std::vector<RopeSource>& sources, const char* key, double lo, double hi,
                                  const char* range) {
    std::optional<double> v;
    std::string first;
    for (const RopeSource& src : sources) {
        const auto it = src.obj->find(key);
        if (it == src.obj->end() || it->is_null()) continue;
        const std::string name = src.prefix + key;
        if (!it->is_number() || !(it->get<double>() > lo && it->get<double>() <= hi))
            throw InputError(name, std::string("must be a number ") + range + ", got " + shown_json(*it));
        if (v && *v != it->get<double>())
            throw InputError(name, shown_json(*it) + " differs from " + first + " " + shown_json(json(*v)) +
                                       ": which one the model trains with is unclear");
        v = it->get<double>();
        first = name;
    }
    return v;
}

// The scaling's factors (HF transformers, modeling_rope_utils.py; Llama 3's in
// _compute_llama3_parameters).
// LongRoPE's per-frequency divisors under `key`: one positive number per rotary frequency, half the
// rotated share of a head (HF: dim = int(head_dim * partial_rotary_factor), dim / 2 factors).
std::vector<double> longrope_factors(const RopeSource& src, const char* key, const ModelConfig& m) {
    const std::string name = src.prefix + key;
    const auto f = src.obj->find(key);
    if (f == src.obj->end() || f->is_null()) throw InputError(name, "missing (longrope needs short_factor and long_factor)");
    const std::int64_t rotated = m.rope_dims();
    if (!f->is_array() || static_cast<std::int64_t>(f->size()) != rotated / 2)
        throw InputError(name, "must be a list of " + std::to_string(rotated / 2) +
                                   " numbers (one per rotary frequency: head_dim x partial_rotary_factor / 2), got " +
                                   shown_json(*f));
    std::vector<double> out;
    for (const json& v : *f) {
        if (!v.is_number() || !(v.get<double>() > 0 && v.get<double>() < 1e12))
            throw InputError(name, "must hold numbers above 0, got " + shown_json(v));
        out.push_back(v.get<double>());
    }
    return out;
}

void read_rope_scaling(const RopeSource& src, const std::string& type, const json& cfg, ModelConfig& m) {
    m.rope_scaling.type = type;
    auto num = [&](const char* key, double fallback) {
        const auto f = src.obj->find(key);
        if (f == src.obj->end()) return fallback;
        if (!f->is_number() || f->get<double>() <= 0)
            throw InputError(src.prefix + key, "must be a positive number, got " + shown_json(*f));
        return f->get<double>();
    };
    m.rope_scaling.factor = num("factor", 0);
    m.rope_scaling.low_freq_factor = num("low_freq_factor", 1);
    m.rope_scaling.high_freq_factor = num("high_freq_factor", 4);
    m.rope_scaling.original_max_positions = original_positions(*src.obj, src.prefix);
    if (type == "yarn") {  // _compute_yarn_parameters: its defaults, the context from the config when not given
        RopeScaling& y = m.rope_scaling;
        if (!src.obj->contains("original_max_position_embeddings")) y.original_max_positions = m.max_positions;
        y.beta_fast = num("beta_fast", 32), y.beta_slow = num("beta_slow", 1);
        y.attention_factor = num("attention_factor", 0);
        for (auto [key, field] : {std::pair{"mscale", &y.mscale}, std::pair{"mscale_all_dim", &y.mscale_all_dim}}) {
            const auto f = src.obj->find(key);  // 0 as absent: HF takes the pair only when both are non-zero
            if (f == src.obj->end() || f->is_null()) continue;
            if (!f->is_number() || !(f->get<double>() >= 0 && f->get<double>() <= 1e6))
                throw InputError(src.prefix + key, "must be a number from 0 to 1e6, got " + shown_json(*f));
            *field = f->get<double>();
        }
        if (const auto t = src.obj->find("truncate"); t != src.obj->end() && !t->is_null()) {
            if (!t->is_boolean()) throw InputError(src.prefix + "truncate", "must be true or false, got " + shown_json(*t));
            y.truncate = t->get<bool>();
        }
    }
    if (type == "longrope") {  // _compute_longrope_parameters; Phi3Config keeps the pretrained context at the top level
        RopeScaling& r = m.rope_scaling;
        r.short_factor = longrope_factors(src, "short_factor", m);
        r.long_factor = longrope_factors(src, "long_factor", m);
        r.attention_factor = num("attention_factor", 0);
        if (!src.obj->contains("original_max_position_embeddings"))
            r.original_max_positions = cfg.contains("original_max_position_embeddings")
                                           ? original_positions(cfg, "")
                                           : m.max_positions;
    }
    if (m.rope_scaling.type == "llama3" && m.rope_scaling.high_freq_factor <= m.rope_scaling.low_freq_factor)
        throw InputError(src.prefix + "high_freq_factor", "must exceed low_freq_factor");
}

// RoPE base, scaling and rotated share of each head (rope_theta, rope_scaling,
// partial_rotary_factor, or rope_parameters) of a Llama-family config.
void read_rope(const json& cfg, ModelConfig& m) {
    std::vector<RopeSource> sources{{&cfg, ""}};
    const std::optional<RopeSource> params =
        rope_parameters(cfg, interleaves_windows(m.family));
    if (params) sources.push_back(*params);
    if (const auto theta = rope_number(sources, "rope_theta", 1.0, kMaxRopeTheta, "above 1 and at most 1e12"))
        m.rope_theta = *theta;
    if (const auto share = rope_number(sources, "partial_rotary_factor", 0.0, 1.0, "above 0 and at most 1"))
        m.rope_fraction = *share;
    const std::string param_type = params ? rope_type_of(*params, "default") : "default";
    const auto legacy = cfg.find("rope_scaling");
    if (legacy != cfg.end() && !legacy->is_null()) {
        if (!legacy->is_object()) throw InputError("rope_scaling", "must be an object or null, got " + shown_json(*legacy));
        const RopeSource src{&*legacy, "rope_scaling."};
        const std::string type = rope_type_of(src, "unknown");
        if (param_type != "default" && param_type != type)
            throw InputError(params->prefix + "rope_type", "'" + param_type + "' differs from rope_scaling's '" + type +
                                                               "': which one the model trains with is unclear");
        read_rope_scaling(src, type, cfg, m);
    } else if (param_type != "default") {
        read_rope_scaling(*params, param_type, cfg, m);
    }
}

// A mixture of experts' count (experts_key: MixtralConfig's and GptOssConfig's num_local_experts,
// Qwen3MoeConfig's and OlmoeConfig's num_experts), its top k, and whether the gate weights are
// renormalised over the chosen experts: always for Mixtral and gpt-oss, whose routers take a softmax
// over the k chosen logits; norm_topk_prob for Qwen3-MoE and OLMoE, false by their classes' default.
void read_experts(const json& cfg, ModelConfig& m) {
    const std::string key(experts_key(m.family));
    m.experts = positive_int(cfg, key.c_str(), true);
    m.experts_per_token = positive_int(cfg, "num_experts_per_tok", true);
    if (key == "num_experts") m.moe_renormalize = boolean(cfg, "norm_topk_prob", false);
}

// Qwen3-MoE's experts (HF Qwen3MoeConfig, Qwen3MoeDecoderLayer): num_experts SwiGLU experts of
// moe_intermediate_size, num_experts_per_tok routed per token, no shared expert. A layer takes the
// experts unless it is in mlp_only_layers or (index + 1) is no multiple of decoder_sparse_step; the
// planner's layers are all alike, so a config mixing dense and sparse layers is refused.
void read_qwen3_moe(const json& cfg, ModelConfig& m) {
    m.ffn_hidden = positive_int(cfg, "moe_intermediate_size", true);
    const std::int64_t step = positive_int(cfg, "decoder_sparse_step", false, 1);
    if (step != 1)
        throw InputError("decoder_sparse_step", std::to_string(step) + " makes only every " + std::to_string(step) +
                                                    "th layer a mixture of experts: layers of two kinds are not "
                                                    "modelled (every layer is planned alike); 1 is supported");
    if (const auto it = cfg.find("mlp_only_layers"); it != cfg.end() && !it->is_null()) {
        if (!it->is_array()) throw InputError("mlp_only_layers", "must be a list of layer indices, got " + shown_json(*it));
        if (!it->empty())
            throw InputError("mlp_only_layers", "dense MLP layers among the experts' layers are not modelled (every "
                                                "layer is planned alike); only an empty list is supported");
    }
}

// The period N when exactly the layers whose (index + 1) is a multiple of N attend to the whole
// sequence (Megatron-LM's is_layer_window_attention with an integer window_attn_skip_freq); 0 when
// no layer does or no period fits the list.
std::int64_t full_layer_period(const std::vector<bool>& full) {
    const auto first = std::find(full.begin(), full.end(), true);
    if (first == full.end()) return 0;
    const auto n = static_cast<std::int64_t>(first - full.begin()) + 1;
    for (std::size_t i = 0; i < full.size(); ++i)
        if (full[i] != is_full_attention_layer(n, static_cast<std::int64_t>(i) + 1)) return 0;
    return n;
}

// Sliding-window attention as transformers build it: Mistral, Mixtral and Phi-3 attend through
// sliding_window whenever it is set (Phi3Model: create_sliding_window_causal_mask); Qwen2 and Qwen3
// only with use_sliding_window, and then on the layers from max_window_layers on (Qwen2Config:
// "sliding_attention" if i >= max_window_layers, default 28); Gemma 3 on every layer but one in
// sliding_window_pattern (Gemma3TextConfig: sliding unless (i + 1) % pattern == 0, default 6, window
// 4096); gpt-oss on every second layer (GptOssConfig: sliding if (i + 1) % 2, window 128); a
// transformers-5 config may list layer_types itself. Llama has none. Layers of both kinds are planned
// at their mean attention for Gemma 3 and gpt-oss, whose kinds interleave; elsewhere (Qwen2's first
// layers full, the rest windowed) a pipeline stage could hold one kind only: refused.
void read_sliding_window(const json& cfg, ModelConfig& m) {
    const bool mistral =
        m.family == ModelFamily::mistral || m.family == ModelFamily::mixtral || m.family == ModelFamily::phi3;
    const bool qwen = m.family == ModelFamily::qwen2 || m.family == ModelFamily::qwen3 ||
                      m.family == ModelFamily::qwen3_moe;
    const bool gemma = m.family == ModelFamily::gemma3_text, gpt_oss = m.family == ModelFamily::gpt_oss;
    const bool olmo3 = m.family == ModelFamily::olmo3;
    const bool interleaved = interleaves_windows(m.family);
    if (!mistral && !qwen && !interleaved) return;
    // Defaults: Gemma3TextConfig's 4096, GptOssConfig's 128, Olmo3Config's 4096.
    const std::int64_t window = positive_int(cfg, "sliding_window", false, gpt_oss ? 128 : interleaved ? 4096 : 0);
    const bool on = window > 0 && (mistral || interleaved || boolean(cfg, "use_sliding_window", false));
    std::int64_t sliding = 0, period = 0;  // layers with the window; the full layers' period
    const char* key = "sliding_window";
    if (const auto it = cfg.find("layer_types"); it != cfg.end() && !it->is_null()) {
        if (!it->is_array() || std::any_of(it->begin(), it->end(), [](const json& t) { return !t.is_string(); }))
            throw InputError("layer_types", "must be a list of layer kinds, got " + shown_json(*it));
        if (static_cast<std::int64_t>(it->size()) != m.layers)
            throw InputError("layer_types", "lists " + std::to_string(it->size()) + " layers, num_hidden_layers " +
                                                std::to_string(m.layers));
        sliding = std::count(it->begin(), it->end(), json("sliding_attention"));
        if (sliding + std::count(it->begin(), it->end(), json("full_attention")) != static_cast<std::int64_t>(it->size()))
            throw InputError("layer_types", "only full_attention and sliding_attention layers are modelled");
        std::vector<bool> full;
        for (const json& t : *it) full.push_back(t == "full_attention");
        period = full_layer_period(full);
        key = "layer_types";
    } else if (on && interleaved) {  // Olmo3Config without layer_types: every fourth layer full
        period = gemma ? positive_int(cfg, "sliding_window_pattern", false, 6) : olmo3 ? 4 : 2;
        sliding = m.layers - m.layers / period;
    } else if (on) {
        sliding = qwen ? std::max<std::int64_t>(0, m.layers - int_at_least(cfg, "max_window_layers", 0, false, 28)) : m.layers;
        if (qwen) key = "max_window_layers";
    }
    if (sliding > 0 && window == 0) throw InputError("sliding_window", "missing beside sliding_attention layers");
    if (sliding != 0 && sliding != m.layers && !interleaved)
        throw InputError(key, std::to_string(sliding) + " of " + std::to_string(m.layers) +
                                  " layers attend through a sliding window and the others to the whole sequence: "
                                  "layers of two kinds are modelled for Gemma 3's, gpt-oss's and OLMo 3's interleaved "
                                  "patterns only (a pipeline stage here could hold one kind alone)");
    m.sliding_window = sliding > 0 ? window : 0;
    m.full_attention_layers = sliding > 0 ? m.layers - sliding : 0;
    m.full_attention_period = sliding > 0 && sliding < m.layers ? period : 0;
}

// Gemma 3's text model (transformers Gemma3TextConfig, Gemma3DecoderLayer): Llama's layer with
// per-head q/k norms, a norm on each sublayer's output (sandwich norms), a GeLU-gated MLP
// (hidden_activation, gelu_pytorch_tanh), head_dim 256 and a tied head by default. Logit
// soft-capping (Gemma 2's; null in Gemma 3's configs) is refused: its tanh over the logits and the
// eager attention it forces are not counted.
void read_gemma3_text(const json& cfg, ModelConfig& m) {
    for (const char* cap : {"final_logit_softcapping", "attn_logit_softcapping"})
        if (const auto it = cfg.find(cap); it != cfg.end() && !it->is_null())
            throw InputError(cap, "logit soft-capping is not modelled (a tanh pass over the logits or the attention "
                                  "scores, and the eager attention it forces); Gemma 3's configs leave it null");
    m.activation = text(cfg, "hidden_activation", "gelu_pytorch_tanh");
    m.qk_norm = m.post_norms = true;
}

// gpt-oss (transformers GptOssConfig, GptOssDecoderLayer): Llama's layer with biases on q, k, v and o
// (attention_bias, default true), a learned sink logit per head, and num_local_experts experts of
// intermediate_size routed top num_experts_per_tok by a router with a bias; each expert is one fused
// gate|up tensor and a down tensor, both with biases (GptOssExperts gate_up_proj, down_proj), gated by
// x * sigmoid(1.702 x) clamped at swiglu_limit times (up + 1). Every second layer attends through a
// 128-key window (read_sliding_window). The released checkpoints store the experts in MXFP4; training
// dequantizes them (transformers Mxfp4Config(dequantize=True)), so the plan's precision holds them.
void read_gpt_oss(const json& cfg, ModelConfig& m) {
    if (const auto other = cfg.find("experts_per_token");  // the original release's name, beside it
        other != cfg.end() && !other->is_null() && *other != json(m.experts_per_token))
        throw InputError("experts_per_token", shown_json(*other) + " differs from num_experts_per_tok " +
                                                  std::to_string(m.experts_per_token) +
                                                  ": which one the model routes with is unclear");
    m.qkv_bias = m.out_bias = boolean(cfg, "attention_bias", true);
    m.mlp_bias = m.router_bias = m.attention_sinks = m.fused_gate_up = true;
    m.activation = "quick_gelu";  // GptOssExperts: gate * sigmoid(alpha * gate), alpha 1.702 (Megatron's quick_gelu)
    const auto limit = cfg.find("swiglu_limit");
    m.glu_clamp = 7.0;  // GptOssConfig's default (the experts clamp at 7.0)
    if (limit != cfg.end() && !limit->is_null()) {
        if (!limit->is_number() || !(limit->get<double>() > 0 && limit->get<double>() <= 1e6))
            throw InputError("swiglu_limit", "must be a number above 0 and at most 1e6, got " + shown_json(*limit));
        m.glu_clamp = limit->get<double>();
    }
}

// OLMo 2 and OLMo 3 (transformers Olmo2DecoderLayer, Olmo3DecoderLayer; OLMo 2 Team 2024, "2 OLMo 2
// Furious", sec. 3.2): Llama's layer with the norms moved from the sublayer inputs to their outputs
// (post_attention_layernorm, post_feedforward_layernorm before each residual add, none on the input)
// and an RMSNorm over each token's whole q and k projections before the heads are split (Olmo2Attention
// q_norm of num_heads x head_dim, k_norm of num_key_value_heads x head_dim). OLMo 3 adds windowed
// layers, three in four (read_sliding_window), and applies its RoPE scaling to the full layers only
// (no byte or FLOP depends on that).
void read_olmo(ModelConfig& m) {
    m.pre_norms = false;
    m.post_norms = m.qk_norm = m.qk_norm_whole = true;
}

// OLMoE (transformers OlmoeConfig, OlmoeDecoderLayer; Muennighoff et al. 2024, "OLMoE", sec. 2): Llama's
// pre-norm layer with OLMo's q/k norms over the whole projections (OlmoeAttention q_norm of hidden_size,
// k_norm of num_key_value_heads x head_dim) and num_experts SwiGLU experts of intermediate_size,
// num_experts_per_tok routed by a router without a bias, no shared expert. clip_qkv (a clamp of q, k
// and v; null in the released configs) is refused: its saved masks and passes are not counted.
void read_olmoe(const json& cfg, ModelConfig& m) {
    if (const auto it = cfg.find("clip_qkv"); it != cfg.end() && !it->is_null())
        throw InputError("clip_qkv", "a clamp of q, k and v is not modelled (its saved masks and elementwise "
                                     "passes); OLMoE-1B-7B's configs leave it null");
    m.qk_norm = m.qk_norm_whole = true;
}

// Llama-family (llama, mistral, qwen2, qwen3, phi3, gemma3_text, olmo2, olmo3, mixtral, qwen3_moe, olmoe, gpt_oss) shape
// and layout from its config.json keys.
void read_llama_family(const json& cfg, ModelConfig& m) {
    // Llama family (Touvron et al. 2023; HF LlamaConfig): RMSNorm, RoPE, GQA, SwiGLU.
    m.hidden = positive_int(cfg, "hidden_size", true);
    m.layers = positive_int(cfg, "num_hidden_layers", true);
    m.heads = positive_int(cfg, "num_attention_heads", true);
    // Defaults of Gemma3TextConfig (4 kv heads of 256) and GptOssConfig (8 of 64), where no hidden / heads rule holds.
    const bool gemma = m.family == ModelFamily::gemma3_text, gpt_oss = m.family == ModelFamily::gpt_oss;
    m.kv_heads = positive_int(cfg, "num_key_value_heads", false, gemma ? 4 : gpt_oss ? 8 : m.heads);
    if (gemma || gpt_oss || (cfg.contains("head_dim") && !cfg["head_dim"].is_null())) {
        m.head_dim = positive_int(cfg, "head_dim", false, gemma ? 256 : 64);
    } else {
        if (m.hidden % m.heads != 0)
            throw InputError("num_attention_heads", std::to_string(m.heads) + " does not divide hidden_size " +
                                                        std::to_string(m.hidden));
        m.head_dim = m.hidden / m.heads;
    }
    m.ffn_hidden = positive_int(cfg, "intermediate_size", true);
    m.vocab = positive_int(cfg, "vocab_size", true);
    m.max_positions = positive_int(cfg, "max_position_embeddings", true);
    m.tied_embeddings = boolean(cfg, "tie_word_embeddings", gemma);
    m.norm = NormKind::rmsnorm;
    m.norm_eps = norm_epsilon(cfg, "rms_norm_eps", default_rms_norm_eps(m.family));
    m.mlp = MlpKind::swiglu;
    m.activation = text(cfg, "hidden_act", "");  // LlamaConfig's default: silu
    m.position = PositionKind::rope;
    // Qwen2 puts biases on q/k/v only (HF Qwen2Attention); Llama's attention_bias
    // switches on biases for q/k/v/o; mlp_bias on the MLP projections.
    m.qkv_bias = m.family == ModelFamily::qwen2 || boolean(cfg, "attention_bias", false);
    m.out_bias = m.family != ModelFamily::qwen2 && boolean(cfg, "attention_bias", false);  // gpt-oss: read_gpt_oss
    m.mlp_bias = boolean(cfg, "mlp_bias", false);
    read_rope(cfg, m);
    // Qwen3 (HF Qwen3Attention, Qwen3MoeAttention): RMSNorm of head_dim on each head's q and k.
    m.qk_norm = m.family == ModelFamily::qwen3 || m.family == ModelFamily::qwen3_moe;
    if (m.family == ModelFamily::phi3) {
        // Phi-3 (HF Phi3Attention qkv_proj, Phi3MLP gate_up_proj): Llama's layer with q|k|v and
        // gate|up each one linear, none with a bias (Phi3Config has no bias switch to read).
        m.fused_qkv = m.fused_gate_up = true;
        m.qkv_bias = m.out_bias = m.mlp_bias = false;
    }
    if (m.family == ModelFamily::mixtral || gpt_oss || m.family == ModelFamily::qwen3_moe ||
        m.family == ModelFamily::olmoe)
        read_experts(cfg, m);
    if (m.family == ModelFamily::qwen3_moe) read_qwen3_moe(cfg, m);
    if (gemma) read_gemma3_text(cfg, m);
    if (gpt_oss) read_gpt_oss(cfg, m);
    if (m.family == ModelFamily::olmo2 || m.family == ModelFamily::olmo3) read_olmo(m);
    if (m.family == ModelFamily::olmoe) read_olmoe(cfg, m);
    read_sliding_window(cfg, m);
}

}  // namespace

ModelConfig model_from_hf_config(const json& cfg, const std::string& name) {
    if (!cfg.is_object()) throw InputError(name, "config.json must hold a JSON object");
    require_printable_name(name, "name", "the model's name (its file's name)");
    ModelConfig m;
    m.name = name;
    m.family = family_of(cfg);
    if (const auto it = cfg.find("architectures"); it != cfg.end() && !it->is_null()) {
        if (!it->is_array() || (!it->empty() && !it->front().is_string()))
            throw InputError("architectures", "must be a list of model class names");
        if (!it->empty()) m.architecture = it->front().get<std::string>();
    }

    if (m.family == ModelFamily::gpt2)
        read_gpt2(cfg, m);
    else
        read_llama_family(cfg, m);
    if (m.kv_heads > 0 && m.heads % m.kv_heads != 0)
        throw InputError("num_key_value_heads", std::to_string(m.kv_heads) + " does not divide num_attention_heads " +
                                                    std::to_string(m.heads));
    validate_model(m);
    return m;
}

}  // namespace preflight
