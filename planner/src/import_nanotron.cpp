// nanotron YAML config -> plan values. The keys are nanotron's config dataclasses as of
// huggingface/nanotron 2411b02 (2026-04): src/nanotron/config/config.py (Config, ModelArgs,
// TokensArgs, OptimizerArgs), parallelism_config.py (ParallelismArgs) and models_config.py
// (LlamaConfig, Qwen2Config); examples/config_tiny_llama.yaml shows the shape. A comment on each
// mapping names the dataclass field that defines the key.
#include <algorithm>
#include <cctype>
#include <string>
#include <utility>

#include "import_flag_values.hpp"
#include "import_tree_values.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/limits.hpp"
#include "preflight/planner/model.hpp"

namespace preflight {

namespace {

using nlohmann::json;
namespace tv = tree_values;

// The parsed YAML with the spot of each dotted key ("parallelism.tp").
struct Yaml {
    const ConfigTree& tree;

    const json* find(std::string_view key) const { return tv::find_value(tree.root, tv::split_dotted(key)); }
    ConfigSpot spot(std::string_view key) const { return tv::spot_of(tree, tv::split_dotted(key), std::string(key)); }
    // A value nanotron requires or defaults; null stands for the default as in nanotron's Optional fields.
    const json* given(std::string_view key) const {
        const json* v = find(key);
        return v == nullptr || v->is_null() ? nullptr : v;
    }
    std::optional<std::int64_t> integer(std::string_view key, std::int64_t min, std::int64_t max) const {
        const json* v = given(key);
        if (v == nullptr) return std::nullopt;
        return tv::read_integer(*v, spot(key), min, max);
    }
    std::optional<bool> flag(std::string_view key) const {
        const json* v = given(key);
        if (v == nullptr) return std::nullopt;
        return tv::read_bool(*v, spot(key));
    }
    std::optional<std::string> text(std::string_view key) const {
        const json* v = given(key);
        if (v == nullptr) return std::nullopt;
        return tv::read_string(*v, spot(key));
    }
};

// ---- Which keys are read, which are ignored on purpose --------------------------------------

using tv::SectionRule;
using tv::listed;

const std::vector<SectionRule>& section_rules() {
    static const std::vector<SectionRule> rules = {
        // config.py Config: general, checkpoints, logging, metrics_logging, tokenizer, data_stages,
        // profiler, lighteval, s3_upload have no memory or speed bearing.
        {"general", {}, {}, true}, {"checkpoints", {}, {}, true}, {"logging", {}, {}, true},
        {"metrics_logging", {}, {}, true}, {"tokenizer", {}, {}, true}, {"data_stages", {}, {}, true},
        {"profiler", {}, {}, true}, {"lighteval", {}, {}, true}, {"s3_upload", {}, {}, true},
        // config.py ModelArgs
        {"model", {"model_config", "dtype"}, {"init_method", "make_vocab_size_divisible_by", "ddp_bucket_cap_mb"}},
        // models_config.py LlamaConfig / Qwen2Config
        {"model.model_config",
         {"hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers",
          "vocab_size", "max_position_embeddings", "tie_word_embeddings", "rms_norm_eps", "hidden_act", "rope_theta",
          "rope_scaling", "attention_bias", "is_llama_config", "is_qwen2_config", "moe_config"},
         {"bos_token_id", "eos_token_id", "pad_token_id", "initializer_range", "pretraining_tp", "use_cache",
          "rope_interleaved", "_attn_implementation", "_fused_rotary_emb", "_fused_rms_norm", "_use_qkv_packed",
          "_use_doc_masking", "z_loss_enabled", "z_loss_coefficient", "log_attn_probs", "flex_attention_mask",
          "ring_attn_heads_k_stride", "rope_seq_len_interpolation_factor"}},
        // parallelism_config.py ParallelismArgs
        {"parallelism",
         {"dp", "tp", "pp", "pp_engine", "tp_mode", "recompute_layer", "context_parallel_size", "expert_parallel_size",
          "tp_recompute_allgather"},
         {"tp_linear_async_communication"}},
        // config.py TokensArgs
        {"tokens",
         {"sequence_length", "micro_batch_size", "batch_accumulation_per_replica"},
         {"train_steps", "val_check_interval", "limit_val_batches", "limit_test_batches"}},
        // config.py OptimizerArgs (and the optimizer keys it held before optimizer_factory)
        {"optimizer",
         {"zero_stage", "accumulate_grad_in_fp32", "optimizer_factory"},
         {"clip_grad", "weight_decay", "learning_rate_scheduler", "weight_decay_exclude_named_params", "adam_eps",
          "adam_beta1", "adam_beta2", "torch_adam_is_fused", "learning_rate"}},
        // config.py AdamWOptimizerArgs / SGDOptimizerArgs
        {"optimizer.optimizer_factory", {"name"}, {"adam_eps", "adam_beta1", "adam_beta2", "torch_adam_is_fused"}},
    };
    return rules;
}

const SectionRule* rule_of(std::string_view section) { return tv::find_rule(section_rules(), section); }

std::string not_modelled(const Yaml& y, const std::string& key) {
    const int line = y.spot(key).line;
    return key + ": not modelled" + (line > 0 ? " (line " + std::to_string(line) + ")" : "");
}

// Sorts every key of `table` (at `section`, "" at the top) into read / ignored / warned.
void classify(const Yaml& y, const std::string& section, const json& table, ImportedConfig& out) {
    for (const auto& [key, value] : table.items()) {
        const std::string dotted = section.empty() ? key : section + "." + key;
        const SectionRule* sub = rule_of(dotted);
        if (sub != nullptr && value.is_object()) {
            classify(y, dotted, value, out);
            continue;
        }
        if (section.empty()) {  // a read section that is not a mapping is refused by its reader
            if (sub == nullptr) out.warnings.push_back(not_modelled(y, dotted) + " (unknown section)");
            else if (sub->ignore_all || value.is_null()) out.ignored.push_back(dotted);
            continue;
        }
        const SectionRule& r = *rule_of(section);
        if (r.ignore_all || listed(r.ignored, key)) out.ignored.push_back(dotted);
        else if (listed(r.read, key)) continue;
        // A switch left off or a null (nanotron's "not set") changes nothing.
        else if (value.is_null() || (value.is_boolean() && !value.get<bool>())) out.ignored.push_back(dotted);
        else out.warnings.push_back(not_modelled(y, dotted));
    }
}

// ---- Model: models_config.py LlamaConfig -> a Hugging Face config.json -----------------------

struct ModelCount {
    std::string_view key;
    std::int64_t fallback, max;  // LlamaConfig's default; the limits.hpp bound
};

json read_model_config(const Yaml& y, ImportedConfig& out) {
    const std::string base = "model.model_config.";
    json hf = json::object();
    // models_config.py LlamaConfig.hidden_size / intermediate_size / num_attention_heads /
    // num_hidden_layers / vocab_size / max_position_embeddings, with LlamaConfig's defaults.
    const ModelCount counts[] = {{"hidden_size", 4096, limits::kMaxWidth},
                                 {"intermediate_size", 11008, limits::kMaxWidth},
                                 {"num_attention_heads", 32, limits::kMaxHeads},
                                 {"num_hidden_layers", 32, limits::kMaxLayers},
                                 {"vocab_size", 32000, limits::kMaxVocab},
                                 {"max_position_embeddings", 2048, limits::kMaxPositions}};
    for (const ModelCount& c : counts)
        hf[std::string(c.key)] = y.integer(base + std::string(c.key), 1, c.max).value_or(c.fallback);
    // trainer.py only logs that max_position_embeddings is ignored when the training sequence is
    // longer (its rotary embedding takes the positions it is given): the context is the sequence's.
    const auto seq = y.integer("tokens.sequence_length", 1, limits::kMaxSeq);
    if (seq && *seq > hf["max_position_embeddings"].get<std::int64_t>()) {
        out.warnings.push_back(y.spot(base + "max_position_embeddings").text() + ": " +
                               std::to_string(hf["max_position_embeddings"].get<std::int64_t>()) +
                               " positions, below tokens.sequence_length " + std::to_string(*seq) +
                               ": nanotron ignores it and trains at the sequence length, and so does the plan");
        hf["max_position_embeddings"] = *seq;
    }
    const std::int64_t heads = hf["num_attention_heads"], hidden = hf["hidden_size"];
    // models_config.py LlamaConfig.num_key_value_heads (None = num_attention_heads).
    const std::int64_t kv = y.integer(base + "num_key_value_heads", 1, limits::kMaxHeads).value_or(heads);
    if (heads % kv != 0)
        throw InputError(y.spot(base + "num_key_value_heads").text(),
                         std::to_string(kv) + " does not divide num_attention_heads " + std::to_string(heads));
    if (hidden % heads != 0)  // nanotron's CausalSelfAttention: head size = hidden_size / heads
        throw InputError(y.spot(base + "num_attention_heads").text(),
                         std::to_string(heads) + " does not divide hidden_size " + std::to_string(hidden));
    hf["num_key_value_heads"] = kv;
    // LlamaConfig.tie_word_embeddings (default false), rms_norm_eps (1e-6), rope_theta (10000),
    // rope_scaling (None), hidden_act ("silu"); Qwen2Config.attention_bias (q/k/v biases, qwen.py).
    hf["tie_word_embeddings"] = y.flag(base + "tie_word_embeddings").value_or(false);
    if (const json* v = y.given(base + "rms_norm_eps")) {
        const double eps = tv::read_number(*v, y.spot(base + "rms_norm_eps"));
        if (!(eps > 0.0 && eps < 1.0))
            throw InputError(y.spot(base + "rms_norm_eps").text(),
                             "must be a number above 0 and below 1, got " + import_values::shown(*v));
        hf["rms_norm_eps"] = eps;
    }
    if (const json* v = y.given(base + "rope_theta")) {
        const double theta = tv::read_number(*v, y.spot(base + "rope_theta"));
        if (!(theta > 1.0 && theta < 1e300))
            throw InputError(y.spot(base + "rope_theta").text(), "must be a number above 1, got " + import_values::shown(*v));
        hf["rope_theta"] = theta;
    }
    if (const json* v = y.given(base + "rope_scaling")) {
        if (!v->is_object()) throw InputError(y.spot(base + "rope_scaling").text(), "must be a mapping or null");
        hf["rope_scaling"] = *v;
    }
    const std::string act = y.text(base + "hidden_act").value_or("silu");
    if (act != "silu") out.warnings.push_back(base + "hidden_act " + act + ": not modelled; SwiGLU (silu) planned");
    hf["hidden_act"] = act;
    const bool bias = y.flag(base + "attention_bias").value_or(false);
    const bool qwen2 = y.flag(base + "is_qwen2_config").value_or(false);
    if (bias && !qwen2) out.warnings.push_back(base + "attention_bias: Llama's q/k/v/o biases planned");
    // Qwen2's biases are on q/k/v only: the Hugging Face qwen2 type; without them it is Llama-shaped.
    hf["model_type"] = bias && qwen2 ? "qwen2" : "llama";
    hf["architectures"] = json::array({bias && qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"});
    hf["attention_bias"] = bias;
    return hf;
}

void read_model(const Yaml& y, ImportedConfig& out) {
    // config.py ModelArgs.model_config: a LlamaConfig / Qwen2Config mapping.
    const json* cfg = y.given("model.model_config");
    if (cfg == nullptr) {
        out.warnings.push_back("model.model_config not given: give --model");
        return;
    }
    if (!cfg->is_object()) throw InputError(y.spot("model.model_config").text(), "must be a mapping");
    for (const char* other : {"is_starcoder2_config", "is_mamba_config", "is_llamoe_config"})
        if (cfg->contains(other)) {
            out.warnings.push_back("model.model_config." + std::string(other) + ": not a Llama-shaped model; give --model");
            return;
        }
    if (const json* moe = y.given("model.model_config.moe_config"))
        if (!moe->is_null()) {
            out.warnings.push_back("model.model_config.moe_config: nanotron's MoE layers are not modelled; give --model");
            return;
        }
    json hf = read_model_config(y, out);
    // The planner's own reader: what it refuses (a rope_scaling's longrope factors, say) names this file.
    try {
        (void)model_from_hf_config(hf, "nanotron");
    } catch (const InputError& e) {
        throw InputError(y.spot("model.model_config").text(),
                         std::string("the model is not one the planner reads: ") + e.what());
    }
    out.model_config = std::move(hf);
    out.model_from = y.spot("model.model_config");
}

// ---- Parallelism, batch, optimizer ---------------------------------------------------------

struct Degrees {
    std::int64_t dp = 1, tp = 1, pp = 1, cp = 1;
};

Degrees read_parallelism(const Yaml& y, ImportedConfig& out) {
    using limits::kMaxGpus;
    Degrees d;
    // parallelism_config.py ParallelismArgs.dp / tp / pp: required (no default).
    const auto required = [&](const char* key) {
        const std::string dotted = std::string("parallelism.") + key;
        const auto v = y.integer(dotted, 1, kMaxGpus);
        if (!v) throw InputError(y.spot(dotted).text(), "missing (nanotron's ParallelismArgs requires it)");
        return *v;
    };
    d.dp = required("dp");
    d.tp = required("tp");
    d.pp = required("pp");
    tv::set_imported(out, "dp", d.dp, y.spot("parallelism.dp"));
    tv::set_imported(out, "tp", d.tp, y.spot("parallelism.tp"));
    tv::set_imported(out, "pp", d.pp, y.spot("parallelism.pp"));
    // ParallelismArgs.context_parallel_size / expert_parallel_size (default 1; world size =
    // dp x tp x pp x cp, parallel/context.py ParallelContext).
    if (const auto cp = y.integer("parallelism.context_parallel_size", 1, kMaxGpus)) {
        d.cp = *cp;
        tv::set_imported(out, "cp", d.cp, y.spot("parallelism.context_parallel_size"));
        // models/qwen.py: only the llama3 ring attention exchanges K/V over the cp group.
        if (d.cp > 1 && y.text("model.model_config._attn_implementation") != std::optional<std::string>("llama3_ring_attention"))
            out.warnings.push_back(y.spot("parallelism.context_parallel_size").text() + ": " + std::to_string(d.cp) +
                                   " without model_config._attn_implementation llama3_ring_attention (nanotron's Qwen2 "
                                   "model only): the attention sees only its own sequence chunk; planned as cp " +
                                   std::to_string(d.cp));
    }
    if (const auto ep = y.integer("parallelism.expert_parallel_size", 1, kMaxGpus))
        tv::set_imported(out, "ep", *ep, y.spot("parallelism.expert_parallel_size"));
    out.gpus = tv::gpu_product({d.dp, d.tp, d.pp, d.cp}, y.spot("parallelism.dp"), "dp x tp x pp x context_parallel_size");
    // ParallelismArgs.tp_mode (default ALL_REDUCE; REDUCE_SCATTER = sequence parallelism,
    // parallel/tensor_parallel/nn.py TensorParallelLinearMode; matched without case).
    std::string mode = y.text("parallelism.tp_mode").value_or("ALL_REDUCE");
    std::transform(mode.begin(), mode.end(), mode.begin(), [](unsigned char c) { return std::toupper(c); });
    if (mode != "ALL_REDUCE" && mode != "REDUCE_SCATTER")
        throw InputError(y.spot("parallelism.tp_mode").text(), "unknown mode '" + mode + "' (ALL_REDUCE, REDUCE_SCATTER)");
    out.sp_with_tp = mode == "REDUCE_SCATTER";
    if (d.tp > 1) tv::set_imported(out, "sp", mode == "REDUCE_SCATTER", y.spot("parallelism.tp_mode"));
    // ParallelismArgs.tp_recompute_allgather (default true): false makes a column-parallel linear
    // in REDUCE_SCATTER mode save its all-gathered input, not its shard
    // (parallel/tensor_parallel/functional.py, save_for_backward(gathered_tensor, ...)).
    if (d.tp > 1 && mode == "REDUCE_SCATTER" && !y.flag("parallelism.tp_recompute_allgather").value_or(true))
        out.warnings.push_back(y.spot("parallelism.tp_recompute_allgather").text() +
                               ": false keeps each column-parallel linear's all-gathered input (tp x its shard): "
                               "not modelled, the job holds more activation memory than planned");
    // ParallelismArgs.pp_engine (default afab = all forward, all backward: GPipe; utils_config.py
    // cast_str_to_pipeline_engine).
    const std::string engine = y.text("parallelism.pp_engine").value_or("afab");
    if (engine != "afab" && engine != "1f1b")
        throw InputError(y.spot("parallelism.pp_engine").text(), "unknown engine '" + engine + "' (1f1b, afab)");
    if (d.pp > 1)
        tv::set_imported(out, "pp_schedule", std::string(engine == "1f1b" ? "1f1b" : "gpipe"), y.spot("parallelism.pp_engine"));
    // ParallelismArgs.recompute_layer (default false): each decoder layer checkpointed in full.
    const bool recompute = y.flag("parallelism.recompute_layer").value_or(false);
    tv::set_imported(out, "recompute", std::string(recompute ? "full" : "none"), y.spot("parallelism.recompute_layer"));
    return d;
}

void read_tokens(const Yaml& y, const Degrees& d, ImportedConfig& out) {
    // config.py TokensArgs.sequence_length / micro_batch_size / batch_accumulation_per_replica.
    const std::pair<const char*, const char*> keys[] = {
        {"tokens.sequence_length", "seq"}, {"tokens.micro_batch_size", "mbs"}, {"tokens.batch_accumulation_per_replica", "grad_acc"}};
    bool all = true;
    for (const auto& [key, field] : keys) {
        const json* v = y.given(key);
        all = all && v != nullptr;
        if (v == nullptr) continue;
        const std::int64_t x = tv::read_field_integer(*v, y.spot(key), field);
        tv::set_imported(out, field, x, y.spot(key));
    }
    // config.py Config.global_batch_size = micro_batch_size x batch_accumulation_per_replica x dp.
    if (all) {
        const auto mbs = std::get<std::int64_t>(out.field("mbs")->value);
        const auto acc = std::get<std::int64_t>(out.field("grad_acc")->value);
        if (acc > limits::kMaxGlobalBatchTokens / mbs / d.dp)  // checked before multiplying: no overflow
            throw InputError(y.spot("tokens.batch_accumulation_per_replica").text(),
                             "micro_batch_size x batch_accumulation_per_replica x dp passes 2^40 sequences");
        out.global_batch_sequences = mbs * acc * d.dp;
    }
}

void read_optimizer(const Yaml& y, ImportedConfig& out) {
    // config.py OptimizerArgs.zero_stage: nanotron's ZeroDistributedOptimizer (optim/zero.py)
    // shards the optimizer states for any stage above 0: ZeRO-1.
    if (const auto zero = y.integer("optimizer.zero_stage", 0, 3)) {
        if (*zero > 1)
            out.warnings.push_back("optimizer.zero_stage " + std::to_string(*zero) +
                                   ": nanotron shards only the optimizer states (ZeroDistributedOptimizer); ZeRO-1 planned");
        tv::set_imported(out, "zero", std::min<std::int64_t>(*zero, 1), y.spot("optimizer.zero_stage"));
    }
    // config.py ModelArgs.dtype (default bfloat16) with OptimizerArgs.accumulate_grad_in_fp32
    // (optim/gradient_accumulator.py FP32GradientAccumulator: fp32 master weights and gradients).
    const std::string dtype = y.text("model.dtype").value_or("bfloat16");
    const bool fp32_grads = y.flag("optimizer.accumulate_grad_in_fp32").value_or(false);
    std::string precision;
    if (dtype == "bfloat16") precision = fp32_grads ? "bf16-mixed-fp32-grads" : "bf16";
    else if (dtype == "float32") precision = "fp32";
    else if (dtype == "float16") {
        precision = "fp16-mixed";
        out.warnings.push_back("model.dtype float16: read as fp16-mixed (nanotron trains fp16 without loss scaling), which "
                               "the nanotron profile does not model: add --framework megatron or deepspeed to plan it");
    } else {
        throw InputError(y.spot("model.dtype").text(), "unknown dtype '" + dtype + "' (bfloat16, float32, float16)");
    }
    const bool by_dtype = dtype != "bfloat16" || !y.given("optimizer.accumulate_grad_in_fp32");
    tv::set_imported(out, "precision", precision, y.spot(by_dtype ? "model.dtype" : "optimizer.accumulate_grad_in_fp32"));
    // config.py OptimizerArgs.optimizer_factory.name: adamW (AdamWOptimizerArgs) or sgd (SGDOptimizerArgs).
    const std::string name = y.text("optimizer.optimizer_factory.name").value_or("adamW");
    if (name == "adamW") tv::set_imported(out, "optimizer", std::string("adamw"), y.spot("optimizer.optimizer_factory.name"));
    else if (name == "sgd") tv::set_imported(out, "optimizer", std::string("sgd"), y.spot("optimizer.optimizer_factory.name"));
    else out.warnings.push_back("optimizer.optimizer_factory.name " + name + ": not modelled; adamw planned");
}

}  // namespace

ImportedConfig import_nanotron(const ConfigTree& tree, const ImportContext&) {
    ImportedConfig out;
    out.format = ConfigFormat::nanotron;
    out.file = tree.file;
    out.framework = "nanotron";
    if (!tree.root.is_object()) throw InputError(tree.file, "a nanotron config is a YAML mapping (model:, parallelism:, ...)");
    const Yaml y{tree};
    classify(y, "", tree.root, out);
    read_model(y, out);
    const Degrees d = read_parallelism(y, out);
    read_tokens(y, d, out);
    read_optimizer(y, out);
    return out;
}

}  // namespace preflight
