// Megatron-LM arguments (a launch script or an arguments file) -> plan values. Flag names and
// defaults: megatron/training/arguments.py (the _add_*_args groups and validate_args) and the
// TransformerConfig fields it turns into flags (megatron/core/transformer/transformer_config.py,
// megatron/core/model_parallel_config.py); the shell is read by megatron_script.cpp, the model
// shape by megatron_model.cpp.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <span>

#include "import_flag_values.hpp"
#include "megatron_flags.hpp"
#include "preflight/planner/config_import.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/limits.hpp"

namespace preflight {

namespace megatron_script {

Flags::Flags(const std::vector<Word>& arguments, std::string file) : file_(std::move(file)) {
    for (const Word& w : arguments) {
        if (w.text.rfind("--", 0) == 0 && w.text.size() > 2) {
            const std::size_t eq = w.text.find('=');
            list_.push_back({w.text.substr(0, eq), w.line, {}, w.branch});
            if (eq != std::string::npos) list_.back().values.push_back({w.text.substr(eq + 1), w.line, w.unresolved, w.branch});
        } else if (list_.empty()) {
            stray_.push_back(w);
        } else {
            list_.back().values.push_back(w);
        }
    }
}

std::string reference(const Word& w) { return open_reference(w.unresolved); }

const Flag* Flags::get(std::string_view name) {
    read_.emplace(name);
    for (auto it = list_.rbegin(); it != list_.rend(); ++it)
        if (it->name == name) return &*it;
    return nullptr;
}

std::string Flags::text(const Flag& f) const {
    value_read_.insert(f.name);
    if (f.values.empty()) throw InputError(spot(f).text(), "needs a value");
    const Word& v = f.values.front();
    if (!v.unresolved.empty())
        throw InputError(spot(f).text(), "its value '" + v.text + "' (line " + std::to_string(v.line) + ") uses " +
                                             reference(v));
    return v.text;
}

std::optional<std::string> Flags::text(std::string_view name) {
    const Flag* f = get(name);
    return f ? std::optional<std::string>(text(*f)) : std::nullopt;
}

std::optional<std::int64_t> Flags::integer(std::string_view name, std::int64_t min, std::int64_t max,
                                           std::string_view what) {
    const Flag* f = get(name);
    if (!f) return std::nullopt;
    return import_values::integer_text(text(*f), spot(*f), min, max, what);
}

std::optional<double> Flags::real(std::string_view name, double min, double max) {
    const Flag* f = get(name);
    if (!f) return std::nullopt;
    return import_values::real_text(text(*f), spot(*f), min, max);
}

std::vector<const Flag*> Flags::last() const {
    std::vector<const Flag*> out;
    std::set<std::string_view> seen;
    for (auto it = list_.rbegin(); it != list_.rend(); ++it)
        if (seen.insert(it->name).second) out.push_back(&*it);
    std::reverse(out.begin(), out.end());
    return out;
}

std::vector<const Flag*> Flags::unread() const {
    std::vector<const Flag*> out;
    for (const Flag* f : last())
        if (!read_.count(f->name)) out.push_back(f);
    return out;
}

}  // namespace megatron_script

// catalog: gives the models a shape without a known vocabulary is matched against, called only for
// such a shape (unset with --model beside the script: that model is planned, no vocabulary needed).
void import_megatron_model(megatron_script::Flags& flags, ImportedConfig& out, std::int64_t tp,
                           const std::function<std::vector<ModelConfig>()>& catalog);
void import_megatron_pipeline_split(megatron_script::Flags& flags, ImportedConfig& out);  // import_megatron_split.cpp
bool megatron_flag_ignored(std::string_view name);

namespace {

using megatron_script::Flag;
using megatron_script::Flags;
using megatron_script::Script;
using megatron_script::Word;
using namespace import_values;

void warn(ImportedConfig& out, const ConfigSpot& at, const std::string& message) {
    out.warnings.push_back(at.text() + ": " + message);
}

// An integer plan field from a flag (bounds of the field), or its Megatron default when absent.
std::optional<std::int64_t> field_flag(Flags& f, ImportedConfig& out, std::string_view field, std::string_view flag,
                                       std::optional<std::int64_t> fallback = std::nullopt) {
    if (const Flag* x = f.get(flag)) return set_integer_text(out, field, f.text(*x), f.spot(*x));
    if (fallback) set_field(out, field, *fallback, f.default_spot(std::string(flag) + " (absent: " + std::to_string(*fallback) + ")"));
    return fallback;
}

struct Degrees {
    std::int64_t tp = 1, pp = 1, cp = 1;
};

// _add_distributed_args / ModelParallelConfig: tensor_model_parallel_size,
// pipeline_model_parallel_size, context_parallel_size, expert_model_parallel_size,
// sequence_parallel, the virtual pipeline (interleaved schedule) flags.
Degrees import_parallel(Flags& f, ImportedConfig& out) {
    Degrees d;
    d.tp = *field_flag(f, out, "tp", "--tensor-model-parallel-size", 1);
    d.pp = *field_flag(f, out, "pp", "--pipeline-model-parallel-size", 1);
    d.cp = field_flag(f, out, "cp", "--context-parallel-size").value_or(1);
    field_flag(f, out, "ep", "--expert-model-parallel-size");
    // validate_args turns sequence parallelism off when tensor parallelism is (tp 1).
    const Flag* sp = f.get("--sequence-parallel");
    set_field(out, "sp", sp != nullptr && d.tp > 1, sp ? f.spot(*sp) : f.default_spot("--sequence-parallel (absent: off)"));
    out.sp_with_tp = sp != nullptr;
    if (sp && d.tp == 1) out.ignored.push_back("--sequence-parallel (off at tensor parallel 1, as Megatron turns it off)");
    const Flag* per_stage = f.get("--num-layers-per-virtual-pipeline-stage");
    const Flag* stages = f.get("--num-virtual-stages-per-pipeline-rank");
    // validate_args: a virtual pipeline size of 1 is none (virtual_pipeline_model_parallel_size = None).
    if (stages && f.integer("--num-virtual-stages-per-pipeline-rank", 1, limits::kMaxLayers, "limits::kMaxLayers") == 1) {
        out.ignored.push_back("--num-virtual-stages-per-pipeline-rank 1 (no virtual pipeline, as validate_args reads it)");
        stages = nullptr;
    }
    if (stages) {
        set_integer_text(out, "vpp", f.text(*stages), f.spot(*stages));
    } else if (per_stage) {
        const ConfigSpot at = f.spot(*per_stage);
        const Bounds b = field_bounds("vpp");
        const std::int64_t n = integer_text(f.text(*per_stage), at, b.min, limits::kMaxLayers, "limits::kMaxLayers");
        const auto layers = f.integer("--num-layers", 1, limits::kMaxLayers, "limits::kMaxLayers");
        if (!layers) throw InputError(at.text(), "needs --num-layers to give the model chunks per stage");
        const std::int64_t vpp = exact_quotient(*layers, n * d.pp, at, "--num-layers " + std::to_string(*layers) +
                                 " is not a multiple of " + std::to_string(n) + " layers x pipeline size " + std::to_string(d.pp));
        if (vpp == 1) {  // one chunk a stage: validate_args makes it no virtual pipeline, as above
            out.ignored.push_back("--num-layers-per-virtual-pipeline-stage (one chunk a stage: no virtual pipeline)");
            per_stage = nullptr;
        } else {
            set_field(out, "vpp", vpp, at);
        }
    }
    if (stages || per_stage)
        set_field(out, "pp_schedule", std::string("interleaved"), f.spot(stages ? *stages : *per_stage));
    return d;
}

// The world size on the launch line: torchrun / python -m torch.distributed.run
// (--nproc_per_node or --nproc-per-node, --nnodes) or the deepspeed launcher (--num_gpus, --num_nodes).
std::optional<std::pair<std::int64_t, ConfigSpot>> launch_gpus(const Script& s, const std::string& file,
                                                               ImportedConfig& out, bool gpus_given) {
    std::optional<std::int64_t> per_node, nodes;
    ConfigSpot spot{file, "", s.launch_line};
    for (std::size_t i = 0; i < s.launcher.size(); ++i) {
        std::string name = s.launcher[i].text, value;
        Word w = s.launcher[i];
        const std::size_t eq = name.find('=');
        if (eq != std::string::npos) value = name.substr(eq + 1), name = name.substr(0, eq);
        else if (i + 1 < s.launcher.size()) w = s.launcher[i + 1], value = w.text;
        const bool count = name == "--nproc_per_node" || name == "--nproc-per-node" || name == "--num_gpus" || name == "--num-gpus";
        const bool node = name == "--nnodes" || name == "--num_nodes" || name == "--num-nodes";
        if (!count && !node) continue;
        const ConfigSpot at{file, s.launcher_name + " " + name, s.launcher[i].line};
        // A count the script leaves open ($SLURM_GPUS_ON_NODE) or that is not a number (gpu, auto):
        // --gpus gives it (docs/interface.md "--from"); without --gpus the plan would fall back to
        // the layout's own world size, silently, so it is refused.
        const std::string why = !w.unresolved.empty() ? "uses " + reference(w)
                                                      : "is not a fixed count";
        if (!w.unresolved.empty() || value.find_first_not_of("0123456789") != std::string::npos) {
            if (!gpus_given) throw InputError(at.text(), "'" + value + "' " + why + ": give the GPU count with --gpus");
            out.warnings.push_back(at.text() + ": '" + value + "' " + why + ": the GPU count comes from --gpus");
            return std::nullopt;
        }
        (count ? per_node : nodes) = integer_text(value, at, 1, limits::kMaxGpus, "limits::kMaxGpus");
        if (count) spot = at;
    }
    // torch.distributed.run: --nproc-per-node defaults to 1, so a torchrun line without it starts
    // one process per node.
    if (!per_node && s.launcher_name == "torchrun") {
        per_node = 1;
        spot.key = "torchrun --nproc-per-node (absent: 1)";
    }
    if (!per_node) return std::nullopt;
    const std::int64_t gpus = *per_node * nodes.value_or(1);
    spot.key += " " + std::to_string(*per_node);
    if (nodes) spot.key += " x " + std::to_string(*nodes) + " nodes";
    integer_text(std::to_string(gpus), spot, 1, limits::kMaxGpus, "limits::kMaxGpus");
    return std::make_pair(gpus, spot);
}

// --global-batch-size, or nullopt when absent or left open by the script (bs=$4) while the flags
// beside --from give the batch (ImportContext::batch_given: they override the file, docs/interface.md).
std::optional<std::int64_t> global_batch(Flags& f, ImportedConfig& out, const ImportContext& ctx, bool& dropped) {
    const Flag* g = f.get("--global-batch-size");
    dropped = false;
    if (g && !g->values.empty() && !g->values[0].unresolved.empty()) {
        const Word& v = g->values[0];
        const std::string open = "its value '" + v.text + "' (line " + std::to_string(v.line) + ") uses " + reference(v);
        if (!ctx.batch_given)
            throw InputError(f.spot(*g).text(), open + " (give --grad-acc, or --gbs-tokens on plan, to plan without it)");
        warn(out, f.spot(*g), open + ": not read, the batch comes from the flags beside --from");
        dropped = true;
        return std::nullopt;
    }
    return f.integer("--global-batch-size", 1, limits::kMaxGlobalBatchTokens, "limits::kMaxGlobalBatchTokens");
}

// _add_training_args: micro_batch_size, global_batch_size (default micro x dp: no accumulation);
// dp = world / (tp pp cp) and accumulation = global / (micro dp) (megatron/core/num_microbatches_calculator.py).
void import_batch(Flags& f, ImportedConfig& out, const Script& s, const ImportContext& ctx, const Degrees& d) {
    if (!field_flag(f, out, "seq", "--seq-length")) field_flag(f, out, "seq", "--encoder-seq-length");
    const auto mbs = field_flag(f, out, "mbs", "--micro-batch-size");
    const Flag* global_flag = f.get("--global-batch-size");
    bool dropped = false;
    const auto global = global_batch(f, out, ctx, dropped);
    if (global) out.global_batch_sequences = global;
    const auto launched = launch_gpus(s, f.file(), out, ctx.gpus.has_value());
    if (launched) out.gpus = launched->first;
    if (launched && ctx.gpus && *ctx.gpus != launched->first)
        out.warnings.push_back(launched->second.text() + ": the launch line starts " + std::to_string(launched->first) +
                               " processes; planned for --gpus " + std::to_string(*ctx.gpus));
    if (!ctx.gpus && !launched) {
        // Without the world size the global batch cannot be divided into dp x accumulation: said,
        // not dropped (a fixed layout would otherwise run as dp 1, grad_acc 1 without a word).
        if (global)
            out.warnings.push_back(f.spot(*global_flag).text() + " " + std::to_string(*global) +
                                   ": not divided into micro batch x accumulation x data-parallel without the world "
                                   "size (no torchrun/deepspeed launch line): give --gpus; `plan` searches for this "
                                   "global batch, a fixed layout takes its flags' defaults");
        return;
    }
    const std::int64_t gpus = ctx.gpus ? *ctx.gpus : launched->first;
    const ConfigSpot from = ctx.gpus ? f.default_spot("--gpus " + std::to_string(gpus)) : launched->second;
    const std::int64_t model = d.tp * d.pp * d.cp;
    const std::int64_t dp = exact_quotient(gpus, model, from, std::to_string(gpus) + " GPUs are not a multiple of "
                                           "tensor x pipeline x context parallel = " + std::to_string(model) +
                                           (ctx.gpus ? "" : " (give the real GPU count with --gpus)"));
    set_integer_text(out, "dp", std::to_string(dp), from);
    if (!mbs || dropped) return;
    if (!global) {
        set_field(out, "grad_acc", std::int64_t{1}, f.default_spot("--global-batch-size (absent: micro batch x dp)"));
        return;
    }
    const ConfigSpot at = f.spot(*global_flag);
    const std::int64_t acc = exact_quotient(*global, *mbs * dp, at, std::to_string(*global) + " is not a multiple of "
                             "--micro-batch-size " + std::to_string(*mbs) + " x data-parallel " + std::to_string(dp) +
                             " (" + std::to_string(gpus) + " GPUs / " + std::to_string(model) + ")");
    set_integer_text(out, "grad_acc", std::to_string(acc), at);
    if (f.has("--rampup-batch-size"))
        out.warnings.push_back(f.spot(*f.get("--rampup-batch-size")).text() + ": the batch-size ramp-up is not "
                                                                             "modelled: planned at the full global batch");
}

// _add_distributed_args: use_distributed_optimizer (ZeRO-1), use_torch_fsdp2 (ZeRO-3), and
// Megatron-FSDP's data_parallel_sharding_strategy (no_shard, optim, optim_grads, optim_grads_params).
void import_zero(Flags& f, ImportedConfig& out) {
    const Flag* fsdp2 = f.get("--use-torch-fsdp2");
    const Flag* mfsdp = f.get("--use-megatron-fsdp");
    const Flag* strategy = f.get("--data-parallel-sharding-strategy");
    const Flag* dist = f.get("--use-distributed-optimizer");
    if (mfsdp) {
        const std::string s = strategy ? f.text(*strategy) : "optim_grads_params";
        const ConfigSpot at = f.spot(strategy ? *strategy : *mfsdp);
        const std::int64_t stage = s == "no_shard" ? 0 : s == "optim" ? 1 : s == "optim_grads" ? 2 : s == "optim_grads_params" ? 3 : -1;
        if (stage < 0) throw InputError(at.text(), "must be no_shard, optim, optim_grads or optim_grads_params, got '" + s + "'");
        set_field(out, "zero", stage, at);
    } else if (fsdp2) {
        set_field(out, "zero", std::int64_t{3}, f.spot(*fsdp2));
    } else if (dist) {
        set_field(out, "zero", std::int64_t{1}, f.spot(*dist));
    } else {
        set_field(out, "zero", std::int64_t{0}, f.default_spot("--use-distributed-optimizer (absent: 0)"));
    }
}

// Megatron-FSDP's dtypes (mcore_fsdp_adapter.py MixedPrecisionPolicy, param_and_grad_buffer.py):
// main gradients in --megatron-fsdp-main-grads-dtype (auto, the default: the parameters' bf16),
// whatever --grad-reduce-in-bf16 or --accumulate-allreduce-grads-in-fp32 say; main weights in
// --megatron-fsdp-main-params-dtype (fp32 by default; auto: none, the bf16 parameters are
// optimized themselves, which is pure bf16).
void import_megatron_fsdp_precision(Flags& f, ImportedConfig& out) {
    const auto dtype = [&](const char* flag, const char* absent) -> std::pair<std::string, ConfigSpot> {
        const Flag* x = f.get(flag);
        const std::string d = x ? f.text(*x) : absent;
        if (d != "fp32" && d != "bf16" && d != "auto")
            throw InputError(f.spot(*x).text(), "must be fp32, bf16 or auto with --bf16 (fp16 is not modelled), got '" + d + "'");
        return {d, x ? f.spot(*x) : f.default_spot(std::string(flag) + " (absent: " + absent + ")")};
    };
    const auto [grads, grads_at] = dtype("--megatron-fsdp-main-grads-dtype", "auto");
    const auto [params, params_at] = dtype("--megatron-fsdp-main-params-dtype", "fp32");
    const Flag* bf16_grads = f.get("--grad-reduce-in-bf16");
    const Flag* fp32_grads = f.get("--accumulate-allreduce-grads-in-fp32");
    if (params != "fp32") {
        set_field(out, "precision", std::string("bf16"), params_at);
        if (params == "bf16")
            warn(out, params_at, "a bf16 main-weight copy beside the bf16 parameters (2 B per parameter over dp) is "
                                 "not modelled: planned as pure bf16");
        if (grads == "fp32") warn(out, grads_at, "fp32 main gradients under pure bf16 are not modelled: planned as bf16");
        return;
    }
    set_field(out, "precision", std::string(grads == "fp32" ? "bf16-mixed-fp32-grads" : "bf16-mixed"), grads_at);
    if (const Flag* contrary = grads == "fp32" ? bf16_grads : fp32_grads)
        warn(out, f.spot(*contrary), "Megatron-FSDP keeps its main gradients in --megatron-fsdp-main-grads-dtype (" + grads +
                                         (grads == "auto" ? ": bf16" : "") + "), not as this flag says");
}

// --fp8-param-gather (_add_transformer_engine_args): Transformer Engine fp8 parameters, planned
// under fp8 with the distributed optimizer (fp8_params.cpp). Megatron-LM refuses it without fp8
// (TransformerConfig: "fp8_param must be used together with fp8 mode") and without a sharded
// optimizer (validate_args); under FSDP its fp8 parameters are not modelled.
void import_fp8_param_gather(Flags& f, ImportedConfig& out) {
    const Flag* x = f.get("--fp8-param-gather");
    if (!x) return;
    const bool fp8 = f.has("--fp8-format");
    const bool fsdp = f.has("--use-megatron-fsdp") || f.has("--use-torch-fsdp2");
    if (fp8 && !fsdp && f.has("--use-distributed-optimizer")) return set_field(out, "fp8_param_gather", true, f.spot(*x));
    warn(out, f.spot(*x), !fp8   ? "Megatron-LM refuses it without --fp8-format (fp8_param must be used together with fp8 "
                                   "mode): planned without it"
                          : fsdp ? "fp8 parameters under FSDP are not modelled: planned with bf16 parameters"
                                 : "Megatron-LM refuses it without --use-distributed-optimizer (validate_args): planned "
                                   "without it");
}

// _add_mixed_precision_args: --bf16, --fp16, --accumulate-allreduce-grads-in-fp32; the
// Transformer Engine fp8 flags (TransformerConfig.fp8: --fp8-format e4m3|hybrid, --fp8-recipe).
void import_precision(Flags& f, ImportedConfig& out) {
    const Flag* bf16 = f.get("--bf16");
    const Flag* fp16 = f.get("--fp16");
    const Flag* fp8 = f.get("--fp8-format");
    const Flag* fp32_grads = f.get("--accumulate-allreduce-grads-in-fp32");
    if (bf16 && fp16) throw InputError(f.spot(*fp16).text(), "--bf16 and --fp16 are both given (Megatron takes one)");
    if (fp8) {
        const std::string format = f.text(*fp8);
        if (format != "e4m3" && format != "hybrid")
            throw InputError(f.spot(*fp8).text(), "must be e4m3 or hybrid, got '" + format + "'");
        set_field(out, "precision", std::string("fp8-mixed"), f.spot(*fp8));
        if (bf16 && !f.has("--grad-reduce-in-bf16") && !f.has("--use-megatron-fsdp"))
            warn(out, f.spot(*fp8), "Megatron-LM keeps fp32 main gradients unless --grad-reduce-in-bf16: 2 B per "
                                    "parameter above fp8-mixed's bf16 gradients, not planned");
        if (const auto recipe = f.text("--fp8-recipe"); recipe && *recipe != "delayed" && *recipe != "tensorwise")
            warn(out, f.spot(*f.get("--fp8-recipe")), "the " + *recipe + " fp8 recipe is not modelled: planned as tensorwise");
    } else if (bf16 && f.has("--use-megatron-fsdp")) {
        import_megatron_fsdp_precision(f, out);
    } else if (bf16) {
        // validate_args: with --bf16 the gradients are accumulated and all-reduced in fp32 (one
        // fp32 main gradient, 4 B per parameter) unless --grad-reduce-in-bf16.
        const Flag* bf16_grads = f.get("--grad-reduce-in-bf16");
        const bool wide = bf16_grads == nullptr;
        set_field(out, "precision", std::string(wide ? "bf16-mixed-fp32-grads" : "bf16-mixed"),
                  f.spot(bf16_grads ? *bf16_grads : fp32_grads ? *fp32_grads : *bf16));
        if (wide && !fp32_grads)
            warn(out, f.spot(*bf16), "Megatron-LM accumulates and all-reduces bf16 gradients in fp32 unless "
                                     "--grad-reduce-in-bf16: planned as bf16-mixed-fp32-grads (one fp32 main "
                                     "gradient, 4 B per parameter, under --framework megatron)");
    } else if (fp16) {
        set_field(out, "precision", std::string("fp16-mixed"), f.spot(*fp16));
    } else {
        set_field(out, "precision", std::string("fp32"), f.default_spot("--bf16 / --fp16 (absent: fp32)"));
        if (f.has("--use-megatron-fsdp") && f.text("--megatron-fsdp-main-params-dtype").value_or("fp32") != "auto")
            warn(out, f.spot(*f.get("--use-megatron-fsdp")),
                 "Megatron-FSDP keeps an fp32 main-weight copy beside fp32 parameters unless "
                 "--megatron-fsdp-main-params-dtype auto: 4 B per parameter over dp, not planned");
    }
}

// TransformerConfig.recompute_granularity (full | selective), recompute_method (uniform | block),
// recompute_num_layers; the older --recompute-activations (= selective). Megatron-DeepSpeed's
// --checkpoint-activations recomputes every transformer layer, whatever the granularity says
// (Megatron-DeepSpeed@4efb479 megatron/arguments.py:864, megatron/model/transformer.py:2082-2089
// _checkpointed_forward), in chunks of --checkpoint-num-layers (default 1) under DeepSpeed's checkpointing.
void import_recompute(Flags& f, ImportedConfig& out) {
    const Flag* whole = f.get("--checkpoint-activations");
    const Flag* granularity = f.get("--recompute-granularity");
    const Flag* activations = f.get("--recompute-activations");
    const std::string g = whole ? "full" : granularity ? f.text(*granularity) : activations ? "selective" : "none";
    if (g != "none" && g != "full" && g != "selective")
        throw InputError(f.spot(*granularity).text(), "must be full or selective, got '" + g + "'");
    const ConfigSpot at = whole ? f.spot(*whole) : granularity ? f.spot(*granularity) : activations ? f.spot(*activations)
                                                 : f.default_spot("--recompute-granularity (absent: none)");
    if (const auto chunk = f.integer("--checkpoint-num-layers", 1, limits::kMaxLayers, "limits::kMaxLayers");
        whole && chunk.value_or(1) != 1)
        warn(out, at, "--checkpoint-num-layers " + std::to_string(*chunk) + ": grouped recompute is not modelled: "
                      "planned as full recompute of every layer");
    set_field(out, "recompute", g, at);
    const auto method = f.text("--recompute-method");
    const auto layers = f.integer("--recompute-num-layers", 1, limits::kMaxLayers, "limits::kMaxLayers");
    if (g == "full" && (method.value_or("uniform") != "uniform" || layers.value_or(1) != 1))
        warn(out, at, "--recompute-method " + method.value_or("uniform") + " --recompute-num-layers " +
                          std::to_string(layers.value_or(1)) + ": partial or grouped recompute is not modelled: "
                          "planned as full recompute of every layer");
    if (const Flag* modules = f.get("--recompute-modules"))
        warn(out, f.spot(*modules), "recomputing chosen modules is not modelled: planned as " + g + " recompute");
}

// _add_regularization_args / TransformerConfig: attention_dropout and hidden_dropout (default
// 0.1 each); the plan has one dropout probability, the larger of the two.
void import_dropout(Flags& f, ImportedConfig& out) {
    const Flag* a = f.get("--attention-dropout");
    const Flag* h = f.get("--hidden-dropout");
    const double attention = f.real("--attention-dropout", 0.0, 1.0).value_or(0.1);
    const double hidden = f.real("--hidden-dropout", 0.0, 1.0).value_or(0.1);
    const ConfigSpot at = h && hidden >= attention ? f.spot(*h) : a ? f.spot(*a) : h ? f.spot(*h)
                                                  : f.default_spot("--hidden-dropout (absent: 0.1)");
    set_field(out, "dropout", std::max(attention, hidden), at);
    if (attention != hidden)
        warn(out, at, "attention and hidden dropout differ: planned with the larger, " + std::to_string(std::max(attention, hidden)));
}

// _add_training_args: --use-flash-attn, --attention-backend (flash | fused | unfused | local |
// auto, TransformerConfig.attention_backend), --optimizer (adam | sgd; Megatron's adam is AdamW).
void import_kernels(Flags& f, ImportedConfig& out) {
    if (const Flag* backend = f.get("--attention-backend")) {
        const std::string b = f.text(*backend);
        if (b != "flash" && b != "fused" && b != "auto" && b != "unfused" && b != "local")
            throw InputError(f.spot(*backend).text(), "must be flash, fused, unfused, local or auto, got '" + b + "'");
        set_field(out, "attention", std::string(b == "unfused" || b == "local" ? "eager" : "flash"), f.spot(*backend));
    } else if (const Flag* flash = f.get("--use-flash-attn")) {
        set_field(out, "attention", std::string("flash"), f.spot(*flash));
    }
    const Flag* opt = f.get("--optimizer");
    const std::string name = opt ? f.text(*opt) : "adam";
    const ConfigSpot at = opt ? f.spot(*opt) : f.default_spot("--optimizer (absent: adam)");
    if (name == "adam" || name == "sgd")
        set_field(out, "optimizer", std::string(name == "adam" ? "adamw" : "sgd"), at);
    else
        warn(out, at, "optimizer '" + name + "' is not modelled (adam or sgd)");
}

// Megatron-core's optimizer offload (_add_training_args: --optimizer-cpu-offload,
// --optimizer-offload-fraction), the communication overlaps the step time knows
// (--tp-comm-overlap, --overlap-p2p-communication) and MoE capacity (--moe-expert-capacity-factor).
void import_offload_and_overlap(Flags& f, ImportedConfig& out) {
    if (const Flag* off = f.get("--optimizer-cpu-offload")) {
        set_field(out, "offload", std::string("optimizer"), f.spot(*off));
        if (const auto fraction = f.real("--optimizer-offload-fraction", 0.0, 1.0); fraction && *fraction < 1.0)
            warn(out, f.spot(*f.get("--optimizer-offload-fraction")), "partial optimizer offload is not modelled: "
                                                                      "planned as the whole optimizer offloaded");
    }
    // The precision-aware optimizer steps on the 16-bit gradients themselves (distrib_optimizer.py
    // decoupled_grad): no fp32 copy at the step, which the plan charges (memory_fsdp.cpp).
    if (const Flag* aware = f.get("--use-precision-aware-optimizer"); aware && !f.has("--optimizer-cpu-offload"))
        warn(out, f.spot(*aware), "the optimizer step's fp32 copy of 16-bit main gradients, which this optimizer does "
                                  "not make, is planned: up to 4 B per parameter the rank steps more at that step");
    out.tp_comm_overlap = f.has("--tp-comm-overlap");
    // Megatron-core since 0.4 overlaps the interleaved schedule's sends by default and has only
    // --no-overlap-p2p-communication (the older --overlap-p2p-communication asked for it).
    (void)f.has("--overlap-p2p-communication");
    out.overlap_p2p_comm = !f.has("--no-overlap-p2p-communication");
    if (const Flag* cap = f.get("--moe-expert-capacity-factor"))
        set_field(out, "moe_capacity_factor", *f.real("--moe-expert-capacity-factor", 1e-6, 1e6), f.spot(*cap));
}

// What is left: flags left out on purpose go to `ignored`, the rest are warnings naming them.
void classify_rest(Flags& f, ImportedConfig& out) {
    for (const Word& w : f.stray())
        out.warnings.push_back(f.file() + ":" + std::to_string(w.line) + ": '" + w.text + "' is not a --flag: skipped");
    // An array the script never defines may have held arguments, and so may a variable standing
    // alone where no flag's value goes (after a flag's first value, after a toggle, or before any
    // flag; unquoted, bash splits it into words): say that they were not read.
    const auto undefined_array = [&](const Word& w, bool value_slot) {
        const bool array =
            w.text.rfind("${", 0) == 0 && (w.text.find("[@]") != std::string::npos || w.text.find("[*]") != std::string::npos);
        const std::string ref = w.unresolved.substr(0, w.unresolved.find(megatron_script::kOpenWhy));
        const bool alone = !value_slot && !ref.empty() && (w.text == "$" + ref || w.text == "${" + ref + "}" || w.text == ref);
        if (array || alone)
            out.warnings.push_back(f.file() + ":" + std::to_string(w.line) + ": " + w.text +
                                   (megatron_script::positional_reference(ref) ? std::string(", ") + megatron_script::kWordsNotGiven
                                                                               : " is not defined in the script") +
                                   ": the arguments it holds are not read");
    };
    for (const Flag& x : f.all())
        for (std::size_t i = 0; i < x.values.size(); ++i)
            undefined_array(x.values[i], i == 0 && (!f.was_read(x.name) || f.value_was_read(x.name)));
    for (const Word& w : f.stray()) undefined_array(w, false);
    // Known flags that change memory or speed in ways the plan does not model.
    static const std::map<std::string, std::string, std::less<>> known{
        {"--deepspeed", "Megatron-DeepSpeed: ZeRO, precision and offload live in its ds_config; import that file "
                        "(--from ds_config.json) for them"},
        {"--deepspeed_config", "Megatron-DeepSpeed's ds_config is not read from here; import it with --from"},
        {"--deepspeed-config", "Megatron-DeepSpeed's ds_config is not read from here; import it with --from"},
        {"--zero-stage", "Megatron-DeepSpeed's ZeRO stage is set in its ds_config; import that file with --from"},
        {"--empty-unused-memory-level", "emptying the CUDA cache between steps is not modelled"},
        {"--distribute-saved-activations", "recompute inputs split over tensor parallel ranks are not modelled"},
        {"--cpu-offloading", "activation and weight offload to the host is not modelled"},
        {"--num-distributed-optimizer-instances", "the optimizer states sharded over dp / N ranks (N instances; "
                                                  "parallel_state.py) are not modelled: planned over dp, less memory "
                                                  "than it holds"},
        {"--step-batch-size-schedule", "the batch-size schedule is not modelled: planned at the full global batch"}};
    // --no-position-embedding drops learned positions; under RoPE it changes nothing (arguments.py).
    const bool rope = f.has("--use-rotary-position-embeddings") || f.text("--position-embedding-type") == "rope";
    for (const Flag* x : f.unread()) {
        if (x->name == "--no-position-embedding" && rope)
            out.ignored.push_back(x->name);
        else if (const auto k = known.find(x->name); k != known.end())
            warn(out, f.spot(*x), k->second);
        else if (megatron_flag_ignored(x->name))
            out.ignored.push_back(x->name);
        else
            warn(out, f.spot(*x), "not modelled by preflight (planned without it)");
    }
}

// Values read through a conditional the script reader could not decide (megatron_script.hpp:
// every branch read): one warning per conditional, naming its line and the flags it reached,
// except flags left out on purpose (paths, logging).
void warn_undecided(const Script& s, Flags& f, ImportedConfig& out) {
    std::map<int, std::vector<std::string>> reached;
    const auto add = [&](int line, const std::string& what) {
        if (line != 0) reached[line].push_back(what);
    };
    for (const Word& w : s.launcher)
        if (w.branch != 0) {
            add(w.branch, "the " + s.launcher_name + " launch line");
            break;
        }
    for (const Flag* x : f.last()) {
        if (!f.was_read(x->name) && megatron_flag_ignored(x->name)) continue;
        int line = x->branch;
        for (const Word& w : x->values) line = line != 0 ? line : w.branch;
        add(line, x->name);
    }
    std::map<int, std::string> why;
    for (const megatron_script::Undecided& u : s.undecided) why[u.line] = u.what;
    for (const auto& [line, names] : reached) {
        std::string list;
        for (std::size_t i = 0; i < names.size() && i < 6; ++i) list += (i ? ", " : "") + names[i];
        if (names.size() > 6) list += " and " + std::to_string(names.size() - 6) + " more";
        const auto w = why.find(line);
        out.warnings.push_back(f.file() + ":" + std::to_string(line) + ": " +
                               (w != why.end() ? w->second : "not evaluated: every branch is read") + " (" + list + ")");
    }
}

}  // namespace

ImportedConfig import_megatron(std::string_view text, const std::string& file, const ImportContext& context) {
    Script script;
    try {
        const std::string name = std::filesystem::path(file).filename().string();
        script = megatron_script::read_script(text, context.read_sourced, {context.script_folder, name, context.script_args});
    } catch (const InputError& e) {  // the reader names the line: FILE:LINE
        throw InputError(file + ":" + e.subject(), e.detail());
    }
    std::string cut;  // what the reader left unread (Script::not_read): said always
    for (const megatron_script::Undecided& u : script.not_read) cut += "; " + file + ":" + std::to_string(u.line) + ": " + u.what;
    if (script.arguments.empty())
        throw InputError(file, "no Megatron arguments found (neither a pretrain_*.py launch line nor --flag lines)" + cut);
    Flags flags(script.arguments, file);
    ImportedConfig out;
    out.format = ConfigFormat::megatron;
    out.file = file;
    out.framework = "megatron";
    try {
        import_megatron_pipeline_split(flags, out);  // first: validate_args refuses it beside the vpp flag
        const Degrees d = import_parallel(flags, out);
        import_batch(flags, out, script, context, d);
        import_zero(flags, out);
        import_precision(flags, out);
        import_fp8_param_gather(flags, out);
        import_recompute(flags, out);
        import_dropout(flags, out);
        import_kernels(flags, out);
        import_offload_and_overlap(flags, out);
        import_megatron_model(flags, out, d.tp, context.model_layers ? nullptr : context.catalog);
        classify_rest(flags, out);
    } catch (const InputError& e) {  // what the reader left unread may be why (a sourced file's variables)
        if (cut.empty()) throw;
        throw InputError(e.subject(), e.detail() + cut);
    }
    warn_undecided(script, flags, out);
    for (const megatron_script::Undecided& u : script.not_read)
        out.warnings.push_back(file + ":" + std::to_string(u.line) + ": " + u.what);
    if (script.launches > 1)
        out.warnings.push_back(file + ":" + std::to_string(script.launch_line) + ": the script runs " +
                               std::to_string(script.launches) + " launch lines: the first is read");
    std::stable_sort(out.fields.begin(), out.fields.end(), [](const ImportedField& a, const ImportedField& b) {
        return (a.from.line == 0 ? INT32_MAX : a.from.line) < (b.from.line == 0 ? INT32_MAX : b.from.line);
    });
    return out;
}

}  // namespace preflight
