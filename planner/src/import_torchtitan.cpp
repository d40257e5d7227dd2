// torchtitan job-config TOML -> plan values. The keys are torchtitan's JobConfig dataclasses
// (torchtitan/config/job_config.py; torchtitan/config_manager.py before mid-2025) as of the last
// TOML release (pytorch/torchtitan 238fa99, 2026-02, before the Python config registry), with
// the older names still found in configs: [training] batch_size and compile, [float8], and the
// degrees before the [parallelism] table (785c34c, 2025-03-18): in [training] and [experimental].
// A comment on each mapping names the dataclass field that defines the key.
#include <algorithm>
#include <cctype>
#include <utility>
#include <vector>

#include "import_flag_values.hpp"
#include "import_tree_values.hpp"
#include "torchtitan_models.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/frameworks.hpp"
#include "preflight/planner/limits.hpp"

namespace preflight {

namespace {

using nlohmann::json;
namespace tv = tree_values;

std::string label(std::string_view section, std::string_view key) {
    std::string s = "[";  // appended piecewise: GCC 12 warns (-Wrestrict) on "[" + string
    s += section;
    s += "] ";
    s += key;
    return s;
}

// Where torchtitan's config_manager.py kept a [parallelism] key before that table existed
// (785c34c, 2025-03-18): the data-parallel and tensor degrees and the FSDP reshard in
// [training], the pipeline and context degrees and the schedule in [experimental]; "" for the rest.
std::string_view legacy_section(std::string_view key) {
    for (std::string_view k : {"data_parallel_replicate_degree", "data_parallel_shard_degree", "tensor_parallel_degree",
                               "fsdp_reshard_after_forward"})
        if (key == k) return "training";
    for (std::string_view k : {"pipeline_parallel_degree", "pipeline_parallel_schedule", "context_parallel_degree"})
        if (key == k) return "experimental";
    return "";
}

// The parsed TOML with the spot of each [section] key.
struct Toml {
    const ConfigTree& tree;

    static tv::Path path_in(std::string_view section, std::string_view key) {
        tv::Path p = tv::split_dotted(section);
        p.emplace_back(key);
        return p;
    }
    // The section a key is read from: a [parallelism] key the file writes only where torchtitan
    // kept it before that table is read there (its line and label name where it is written).
    std::string_view section_of(std::string_view section, std::string_view key) const {
        const std::string_view old = section == "parallelism" ? legacy_section(key) : "";
        if (old.empty() || tv::find_value(tree.root, path_in(section, key))) return section;
        return tv::find_value(tree.root, path_in(old, key)) ? old : section;
    }
    tv::Path path(std::string_view section, std::string_view key) const { return path_in(section_of(section, key), key); }
    const json* find(std::string_view section, std::string_view key) const {
        return tv::find_value(tree.root, path(section, key));
    }
    ConfigSpot spot(std::string_view section, std::string_view key) const {
        return tv::spot_of(tree, path(section, key), label(section_of(section, key), key));
    }
    std::optional<std::string> text(std::string_view section, std::string_view key) const {
        const json* v = find(section, key);
        if (v == nullptr) return std::nullopt;
        return tv::read_string(*v, spot(section, key));
    }
    std::optional<bool> flag(std::string_view section, std::string_view key) const {
        const json* v = find(section, key);
        if (v == nullptr) return std::nullopt;
        return tv::read_bool(*v, spot(section, key));
    }
    std::int64_t integer(std::string_view section, std::string_view key, std::int64_t fallback, std::int64_t min,
                         std::int64_t max) const {
        const json* v = find(section, key);
        return v == nullptr ? fallback : tv::read_integer(*v, spot(section, key), min, max);
    }
};

bool same_name(std::string_view a, std::string_view b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
        return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
    });
}

// ---- Which keys are read, which are ignored on purpose --------------------------------------

using tv::SectionRule;
using tv::listed;

const std::vector<SectionRule>& section_rules() {
    static const std::vector<SectionRule> rules = {
        // job_config.py: Job, Profiling, Metrics, LRScheduler, Checkpoint, Comm, MemoryEstimation,
        // FaultTolerance, Experimental, Validation, Debug: no memory or speed bearing.
        {"job", {}, {}, true}, {"profiling", {}, {}, true}, {"metrics", {}, {}, true},
        {"lr_scheduler", {}, {}, true}, {"checkpoint", {}, {}, true}, {"comm", {}, {}, true},
        {"memory_estimation", {}, {}, true}, {"fault_tolerance", {}, {}, true},
        // config_manager.py Experimental before 785c34c: the pipeline and context degrees (legacy_section).
        {"experimental", {"pipeline_parallel_degree", "pipeline_parallel_schedule", "pipeline_parallel_microbatches",
                          "context_parallel_degree"}, {}, true},
        {"validation", {}, {}, true}, {"debug", {}, {}, true},
        // job_config.py Model
        {"model", {"name", "flavor", "converters"}, {"hf_assets_path", "tokenizer_path", "print_after_conversion"}},
        // job_config.py Optimizer
        {"optimizer", {"name"}, {"lr", "eps", "weight_decay", "implementation", "beta1", "beta2"}},
        // job_config.py Training
        {"training",
         {"local_batch_size", "batch_size", "global_batch_size", "seq_len", "enable_cpu_offload",
          "mixed_precision_param", "mixed_precision_reduce", "dtype", "compile",
          // config_manager.py Training before 785c34c (legacy_section)
          "data_parallel_replicate_degree", "data_parallel_shard_degree", "tensor_parallel_degree",
          "fsdp_reshard_after_forward"},
         {"dataset", "dataset_path", "max_norm", "steps", "gc_freq", "gc_debug", "seed", "deterministic",
          "dataloader", "warmup_steps"}},
        // job_config.py Parallelism
        {"parallelism",
         {"data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
          "tensor_parallel_degree", "pipeline_parallel_degree", "pipeline_parallel_schedule",
          "pipeline_parallel_microbatch_size", "pipeline_parallel_layers_per_stage",
          "pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers",
          "context_parallel_degree", "expert_parallel_degree"},
         {"pipeline_parallel_split_points", "module_fqns_per_model_part", "pipeline_parallel_schedule_csv",
          "context_parallel_load_balancer", "context_parallel_rotate_method", "expert_parallel_comm_backend",
          "pipeline_parallel_expert_parallel_overlap"}},
        // job_config.py ActivationCheckpoint
        {"activation_checkpoint",
         {"mode", "selective_ac_option"},
         {"preserve_rng_state", "determinism_check", "debug", "visualize_memory_budget_pareto",
          "per_op_sac_force_recompute_mm_shapes_by_fqns", "early_stop"}},
        // job_config.py Compile
        {"compile", {"enable", "components"}, {"backend"}},
        // config_manager.py Float8 (before the [quantize] tables) and job_config.py Float8Linear
        {"float8",
         {"recipe_name", "enable_float8_linear"},
         {"enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp", "filter_fqns", "emulate",
          "force_recompute_fp8_weight_in_bwd", "moe_fqns_prototype"}},
        {"quantize.linear.float8",
         {"recipe_name"},
         {"enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp", "filter_fqns", "emulate"}},
        // job_config.py MXLinear, Float8GroupedMM, MXGroupedMM: their converters warn (read_precision).
        {"quantize.linear.mx", {}, {}, true}, {"quantize.grouped_mm.float8", {}, {}, true},
        {"quantize.grouped_mm.mx", {}, {}, true},
    };
    return rules;
}

const SectionRule* rule_of(std::string_view section) { return tv::find_rule(section_rules(), section); }

// Tables that only hold other tables (job_config.py Quantize, QuantizedLinear, QuantizedGroupedMM).
bool container(std::string_view section) {
    return section == "quantize" || section == "quantize.linear" || section == "quantize.grouped_mm";
}

std::string not_modelled(const Toml& t, std::string_view section, std::string_view key) {
    const int line = t.spot(section, key).line;
    std::string s = section.empty() ? std::string(key) : label(section, key);
    return s + ": not modelled" + (line > 0 ? " (line " + std::to_string(line) + ")" : "");
}

// Sorts every key of `table` (section `section`, "" at the top) into read / ignored / warned.
void classify(const Toml& t, const std::string& section, const json& table, ImportedConfig& out) {
    for (const auto& [key, value] : table.items()) {
        const std::string sub = section.empty() ? key : section + "." + key;
        if (value.is_object() && (rule_of(sub) != nullptr || container(sub))) {
            classify(t, sub, value, out);
            continue;
        }
        const SectionRule* r = rule_of(section);
        if (r == nullptr) {  // an unknown [section], or a stray key at the top or in a container
            out.warnings.push_back(value.is_object() ? "[" + sub + "]: not modelled (unknown section)"
                                                     : not_modelled(t, section, key));
        } else if (listed(r->read, key)) {
            // An older table's degree beside [parallelism]'s own: the newer one is read.
            if (legacy_section(key) == section && tv::find_value(t.tree.root, Toml::path_in("parallelism", key)))
                out.warnings.push_back(label(section, key) + ": superseded by [parallelism] " + key + ", which is read" +
                                       (t.spot(section, key).line > 0 ? " (line " + std::to_string(t.spot(section, key).line) + ")" : ""));
        } else if (r->ignore_all || listed(r->ignored, key)) {
            out.ignored.push_back(label(section, key));
        } else {
            // A switch left off changes nothing; anything else is a setting the planner lacks.
            if (value.is_boolean() && !value.get<bool>()) out.ignored.push_back(label(section, key));
            else out.warnings.push_back(not_modelled(t, section, key));
        }
    }
}

// ---- Model -------------------------------------------------------------------------------

// The model's layer count when the config names a catalog model (0 otherwise; `given`: --model's).
std::int64_t read_model(const Toml& t, ImportedConfig& out, bool given) {
    // job_config.py Model.name (default "llama3") and Model.flavor (default "debugmodel"): keys of
    // torchtitan's model registry (torchtitan_models.hpp: the entries that are catalog models).
    const std::string name = t.text("model", "name").value_or("llama3");
    const std::string flavor = t.text("model", "flavor").value_or("debugmodel");
    // 8B_flex and 8B_varlen (models/llama3/__init__.py, v0.2.x): the 8B shape with FlexAttention or
    // variable-length attention over a block-causal mask; neither keeps the scores, as flash does.
    std::string base = flavor;
    for (std::string_view suffix : {"_flex", "_varlen"})
        if (base.size() > suffix.size() && base.ends_with(suffix)) {
            base.resize(base.size() - suffix.size());
            out.warnings.push_back("[model] flavor \"" + flavor + "\": the " + base + " shape with " +
                                   std::string(suffix.substr(1)) + " attention over a block-causal mask, planned as "
                                   "flash attention over a causal one");
        }
    for (const torchtitan_models::Entry& e : torchtitan_models::kEntries)
        if (name == e.name && base == e.flavor) {
            out.model = std::string(e.catalog);
            out.model_from = t.spot("model", t.find("model", "flavor") ? "flavor" : "name");
            // ModelArgs.update_from_config (llama3, qwen3, gpt_oss): max_seq_len = the training seq_len.
            out.context_follows_seq = true;
            return e.layers;
        }
    if (!given)
        out.warnings.push_back("[model] name \"" + name + "\", flavor \"" + flavor +
                               "\": no catalog model matches this torchtitan model; give --model");
    return 0;
}

// ---- Parallel degrees, batch --------------------------------------------------------------

struct Degrees {
    std::int64_t replicate = 1, shard = 1, tp = 1, pp = 1, cp = 1, ep = 1;
    std::int64_t dp() const { return replicate * shard; }
};

Degrees read_degrees(const Toml& t, const ImportContext& context, ImportedConfig& out) {
    using limits::kMaxGpus;
    Degrees d;
    const auto degree = [&](std::string_view key) { return t.integer("parallelism", key, 1, 1, kMaxGpus); };
    d.replicate = degree("data_parallel_replicate_degree");  // job_config.py Parallelism.data_parallel_replicate_degree
    d.tp = degree("tensor_parallel_degree");                 // job_config.py Parallelism.tensor_parallel_degree
    d.pp = degree("pipeline_parallel_degree");               // job_config.py Parallelism.pipeline_parallel_degree
    d.cp = degree("context_parallel_degree");                // job_config.py Parallelism.context_parallel_degree
    d.ep = degree("expert_parallel_degree");                 // job_config.py Parallelism.expert_parallel_degree
    // job_config.py Parallelism.data_parallel_shard_degree: -1 (the default) = the GPUs left over.
    const ConfigSpot shard_spot = t.spot("parallelism", "data_parallel_shard_degree");
    d.shard = t.integer("parallelism", "data_parallel_shard_degree", -1, -1, kMaxGpus);
    if (d.shard == 0) throw InputError(shard_spot.text(), "must be a positive degree or -1 (the GPUs left over), got 0");
    const std::int64_t others = tv::gpu_product({d.replicate, d.tp, d.pp, d.cp}, shard_spot, "replicate x tp x pp x cp");
    if (d.shard == -1) {
        const std::string given = t.find("parallelism", "data_parallel_shard_degree") ? "" : " (torchtitan's default)";
        if (!context.gpus)
            throw InputError(shard_spot.text(), "is -1" + given + ", all GPUs left over: give --gpus");
        if (*context.gpus < others || *context.gpus % others != 0)
            throw InputError(shard_spot.text(), "is -1" + given + ", but --gpus " + std::to_string(*context.gpus) +
                                                    " is not a multiple of replicate x tp x pp x cp = " +
                                                    std::to_string(others));
        d.shard = *context.gpus / others;
    }
    out.gpus = tv::gpu_product({others, d.shard}, shard_spot, "the world size");
    tv::set_imported(out, "dp", d.dp(), shard_spot);
    tv::set_imported(out, "tp", d.tp, t.spot("parallelism", "tensor_parallel_degree"));
    tv::set_imported(out, "pp", d.pp, t.spot("parallelism", "pipeline_parallel_degree"));
    if (t.find("parallelism", "context_parallel_degree"))
        tv::set_imported(out, "cp", d.cp, t.spot("parallelism", "context_parallel_degree"));
    if (t.find("parallelism", "expert_parallel_degree"))
        tv::set_imported(out, "ep", d.ep, t.spot("parallelism", "expert_parallel_degree"));
    return d;
}

// A [training] key torchtitan defaults when absent: its value, and a warning saying so.
std::int64_t training_count(const Toml& t, std::string_view key, std::string_view field, std::int64_t fallback,
                            ImportedConfig& out) {
    if (const json* v = t.find("training", key)) return tv::read_field_integer(*v, t.spot("training", key), field);
    out.warnings.push_back(label("training", key) + " not given: torchtitan's default " + std::to_string(fallback));
    return fallback;
}

void read_batch(const Toml& t, const Degrees& d, ImportedConfig& out) {
    // job_config.py Training.seq_len (default 2048).
    const std::int64_t seq = training_count(t, "seq_len", "seq", 2048, out);
    tv::set_imported(out, "seq", seq, t.spot("training", "seq_len"));
    // job_config.py Training.local_batch_size (default 8; config_manager.py Training.batch_size before 2025-05).
    const std::string_view local_key = t.find("training", "batch_size") && !t.find("training", "local_batch_size")
                                           ? "batch_size" : "local_batch_size";
    const std::int64_t local = training_count(t, local_key, "mbs", 8, out);
    std::int64_t micro = local, chunks = 1;
    ConfigSpot micro_spot = t.spot("training", local_key);
    if (d.pp > 1 && t.find("experimental", "pipeline_parallel_degree")) {
        // config_manager.py Experimental.pipeline_parallel_microbatches before 785c34c (default:
        // the pp degree, distributed/pipeline.py): the local batch split into that many.
        micro_spot = t.spot("experimental", "pipeline_parallel_microbatches");
        chunks = t.integer("experimental", "pipeline_parallel_microbatches", d.pp, 1, limits::kMaxMbs);
        if (local % chunks != 0)
            throw InputError(micro_spot.text(), std::to_string(chunks) + " micro-batches do not divide [training] " +
                                                    std::string(local_key) + " " + std::to_string(local));
        micro = local / chunks;
    } else if (d.pp > 1) {
        // job_config.py Parallelism.pipeline_parallel_microbatch_size (default 1): the pipeline's
        // micro-batch; the local batch runs as local / microbatch of them.
        micro_spot = t.spot("parallelism", "pipeline_parallel_microbatch_size");
        micro = t.integer("parallelism", "pipeline_parallel_microbatch_size", 1, 1, limits::kMaxMbs);
        if (local % micro != 0)
            throw InputError(micro_spot.text(), std::to_string(micro) + " does not divide [training] " +
                                                    std::string(local_key) + " " + std::to_string(local));
        chunks = local / micro;
    }
    // job_config.py Training.global_batch_size (default -1 = local x dp: no accumulation);
    // gradient accumulation steps = global / (local x dp), which must divide exactly.
    const ConfigSpot global_spot = t.spot("training", "global_batch_size");
    const std::int64_t global = t.integer("training", "global_batch_size", -1, -1, limits::kMaxGlobalBatchTokens);
    const std::int64_t per_step = local * d.dp();  // <= 2^20 * 2^20: no overflow
    std::int64_t accumulation = 1;
    if (global == 0) throw InputError(global_spot.text(), "must be positive or -1 (local batch x dp), got 0");
    if (global > 0) {
        if (global % per_step != 0)
            throw InputError(global_spot.text(), std::to_string(global) + " is not a multiple of local batch " +
                                                     std::to_string(local) + " x data-parallel degree " +
                                                     std::to_string(d.dp()) + " (replicate x shard)");
        accumulation = global / per_step;
    }
    out.global_batch_sequences = global > 0 ? global : per_step;
    // train.py: each accumulation step is its own pipeline schedule (its own fill and drain).
    if (d.pp > 1 && accumulation > 1)
        out.warnings.push_back(global_spot.key + ": " + std::to_string(accumulation) + " accumulation steps of " +
                               std::to_string(chunks) + " pipeline micro-batches each: torchtitan runs every step as "
                               "its own schedule with its own bubble; the plan runs the " +
                               std::to_string(accumulation * chunks) + " micro-batches as one schedule (a smaller "
                               "bubble than the job's; local_batch_size = micro-batch x " +
                               std::to_string(accumulation * chunks) + " runs as planned)");
    tv::set_imported(out, "mbs", micro, micro_spot);
    tv::set_imported(out, "grad_acc", chunks * accumulation, global > 0 ? global_spot : micro_spot);
}

// ---- Sharding, schedule, recompute, precision ---------------------------------------------

void read_sharding(const Toml& t, const Degrees& d, ImportedConfig& out) {
    // job_config.py Parallelism.fsdp_reshard_after_forward: "default" reshards after forward
    // unless pipelining (torchtitan/models/llama3/infra/parallelize.py apply_fsdp).
    const ConfigSpot reshard_spot = t.spot("parallelism", "fsdp_reshard_after_forward");
    const std::string reshard = t.text("parallelism", "fsdp_reshard_after_forward").value_or("default");
    if (reshard != "default" && reshard != "always" && reshard != "never")
        throw InputError(reshard_spot.text(), "unknown policy '" + reshard + "' (default, always, never)");
    const ConfigSpot shard_spot = t.spot("parallelism", "data_parallel_shard_degree");
    std::int64_t zero = 0;  // replicate only (DDP), or a single data-parallel rank
    // parallel_dims.py fsdp_enabled: dp_shard or cp above 1. FSDP2 shards over the shard x cp ranks,
    // as the plan's ZeRO shards over dp x cp (context_parallel_rank_plan).
    if (d.shard > 1 || d.cp > 1) {
        // FSDP2: ZeRO-3, or ZeRO-2-like when parameters stay gathered.
        zero = reshard == "never" || (reshard == "default" && d.pp > 1) ? 2 : 3;
        if (d.replicate > 1)
            out.warnings.push_back("[parallelism] data_parallel_replicate_degree " + std::to_string(d.replicate) +
                                   " with data_parallel_shard_degree " + std::to_string(d.shard) +
                                   " is HSDP: torchtitan shards over the " + std::to_string(d.shard) +
                                   " shard ranks only; the plan shards ZeRO-" + std::to_string(zero) + " over all dp " +
                                   std::to_string(d.dp()) + " (less memory than the job holds)");
    }
    tv::set_imported(out, "zero", zero, t.find("parallelism", "fsdp_reshard_after_forward") ? reshard_spot : shard_spot);
    // torchtitan's tensor parallelism shards the norms by sequence (parallelize.py apply_tp:
    // SequenceParallel on attention_norm / ffn_norm): sequence parallelism whenever tp > 1.
    out.sp_with_tp = true;
    if (d.tp > 1) tv::set_imported(out, "sp", true, t.spot("parallelism", "tensor_parallel_degree"));
}

// Virtual stages per rank of an interleaved schedule (torchtitan/distributed/pipeline_parallel.py
// pipeline_llm: ceil((layers + first_less + last_less) / layers_per_stage) stages over pp ranks).
void read_virtual_stages(const Toml& t, const Degrees& d, std::int64_t model_layers, ImportedConfig& out) {
    const json* per_stage = t.find("parallelism", "pipeline_parallel_layers_per_stage");
    const ConfigSpot spot = t.spot("parallelism", "pipeline_parallel_layers_per_stage");
    if (per_stage == nullptr) {  // torchtitan's default: 2 stages per rank for a multi-stage schedule
        tv::set_imported(out, "vpp", std::int64_t{2}, t.spot("parallelism", "pipeline_parallel_schedule"));
        return;
    }
    // job_config.py Parallelism.pipeline_parallel_layers_per_stage / _first_stage_less_layers / _last_stage_less_layers
    const std::int64_t layers = tv::read_integer(*per_stage, spot, 1, limits::kMaxLayers);
    const std::int64_t first = t.integer("parallelism", "pipeline_parallel_first_stage_less_layers", 1, 0, limits::kMaxLayers);
    const std::int64_t last = t.integer("parallelism", "pipeline_parallel_last_stage_less_layers", 1, 0, limits::kMaxLayers);
    if (model_layers == 0) {
        out.warnings.push_back(spot.key + ": the stages per rank need the model's layer count; give --vpp");
        return;
    }
    const std::int64_t stages = (model_layers + first + last + layers - 1) / layers;
    if (stages % d.pp != 0 || stages / d.pp < 2)
        throw InputError(spot.text(), std::to_string(layers) + " layers per stage make " + std::to_string(stages) +
                                          " stages, not a multiple (>= 2x) of pipeline_parallel_degree " +
                                          std::to_string(d.pp) + " (torchtitan refuses it)");
    tv::set_imported(out, "vpp", stages / d.pp, spot);
}

void read_schedule(const Toml& t, const Degrees& d, std::int64_t model_layers, ImportedConfig& out) {
    if (d.pp == 1) return;
    // job_config.py Parallelism.pipeline_parallel_schedule (default "1F1B"): a class name of
    // torch.distributed.pipelining.schedules (get_schedule_class matches it without case).
    const ConfigSpot spot = t.spot("parallelism", "pipeline_parallel_schedule");
    const std::string schedule = t.text("parallelism", "pipeline_parallel_schedule").value_or("1F1B");
    if (same_name(schedule, "1F1B")) {
        tv::set_imported(out, "pp_schedule", std::string("1f1b"), spot);
    } else if (same_name(schedule, "GPipe")) {
        tv::set_imported(out, "pp_schedule", std::string("gpipe"), spot);
    } else if (same_name(schedule, "Interleaved1F1B")) {
        tv::set_imported(out, "pp_schedule", std::string("interleaved"), spot);
        read_virtual_stages(t, d, model_layers, out);
    } else {
        out.warnings.push_back(spot.key + " \"" + schedule +
                               "\": not modelled (the planner has 1F1B, GPipe and Interleaved1F1B); 1f1b planned");
    }
}

// job_config.py ActivationCheckpoint.selective_ac_option: "op" (per-op policy) or an integer N
// (every N-th layer checkpointed in full, the others keep everything).
std::string selective_option(const Toml& t, ImportedConfig& out, bool given_mode) {
    const json* v = t.find("activation_checkpoint", "selective_ac_option");
    const ConfigSpot spot = t.spot("activation_checkpoint", "selective_ac_option");
    std::int64_t every = 2;  // the default "2"
    if (v != nullptr && v->is_string() && v->get<std::string>() == "op") return "selective";
    if (v != nullptr && v->is_string()) {
        const std::string s = v->get<std::string>();
        const bool number = !s.empty() && s.size() <= 6 && std::all_of(s.begin(), s.end(), [](char c) {
            return c >= '0' && c <= '9';
        });
        if (!number) throw InputError(spot.text(), "must be \"op\" or a positive integer, got \"" + s + "\"");
        every = std::stoll(s);
        if (every < 1) throw InputError(spot.text(), "must be \"op\" or a positive integer, got \"" + s + "\"");
    } else if (v != nullptr) {
        every = tv::read_integer(*v, spot, 1, limits::kMaxLayers);
    }
    if (every == 1) return "full";  // every layer checkpointed in full
    out.warnings.push_back((v ? spot.key : std::string("[activation_checkpoint] selective_ac_option")) + " " +
                           std::to_string(every) + (v || given_mode ? "" : " (torchtitan's default)") +
                           ": one layer in " + std::to_string(every) +
                           " checkpointed in full is not modelled; selective (attention core) planned as the "
                           "closest");
    return "selective";
}

void read_recompute(const Toml& t, ImportedConfig& out) {
    // job_config.py ActivationCheckpoint.mode: none | selective | full | memory_budget (default selective).
    const ConfigSpot spot = t.spot("activation_checkpoint", "mode");
    const std::optional<std::string> given = t.text("activation_checkpoint", "mode");
    const std::string mode = given.value_or("selective");
    std::string recompute;
    if (mode == "none" || mode == "full") {
        recompute = mode;
    } else if (mode == "selective") {
        recompute = selective_option(t, out, given.has_value());
    } else if (mode == "memory_budget") {
        out.warnings.push_back(spot.key + " memory_budget: the compiler's memory-budget recompute is not modelled; "
                                          "selective planned as the closest");
        recompute = "selective";
    } else {
        throw InputError(spot.text(), "unknown mode '" + mode + "' (none, selective, full, memory_budget)");
    }
    tv::set_imported(out, "recompute", recompute, spot);
}

// Whether the model converters swap the linears for torchao Float8Linear; warns about the other
// converters. job_config.py Model.converters ("float8" in configs, registered as
// "quantize.linear.float8" by torchtitan/components/quantization/float8.py).
bool float8_linears(const Toml& t, ImportedConfig& out) {
    const json* v = t.find("model", "converters");
    const ConfigSpot spot = t.spot("model", "converters");
    bool fp8 = false;
    if (v != nullptr) {
        // A comma-separated string before e0d2de6 (2025-04-18; config_manager.py string_list, whose
        // entries are stripped of surrounding spaces).
        std::vector<std::string> names;
        if (v->is_string()) {
            std::string part;
            for (char ch : v->get<std::string>() + ",")
                if (ch != ',') {
                    if (ch != ' ' || !part.empty()) part += ch;
                } else {
                    while (!part.empty() && part.back() == ' ') part.pop_back();
                    if (!part.empty()) names.push_back(std::exchange(part, {}));
                }
        } else if (v->is_array()) {
            for (const json& c : *v) names.push_back(tv::read_string(c, spot));
        } else {
            throw InputError(spot.text(), "must be a list of converter names, got " + import_values::shown(*v));
        }
        for (const std::string& name : names) {
            if (name == "float8" || name == "quantize.linear.float8") fp8 = true;
            else out.warnings.push_back(spot.key + " \"" + name + "\": not modelled (MX / grouped-GEMM quantisation)");
        }
    }
    // config_manager.py Float8.enable_float8_linear (torchtitan before model converters).
    return fp8 || t.flag("float8", "enable_float8_linear").value_or(false);
}

void read_fp8_recipe(const Toml& t, ImportedConfig& out) {
    // job_config.py Float8Linear.recipe_name (None = tensorwise); [float8] recipe_name before [quantize].
    const std::string_view section = t.find("quantize.linear.float8", "recipe_name") ? "quantize.linear.float8" : "float8";
    const ConfigSpot spot = t.spot(section, "recipe_name");
    const std::string recipe = t.text(section, "recipe_name").value_or("tensorwise");
    std::string scaling = recipe;
    if (recipe == "rowwise_with_gw_hp") {
        scaling = "rowwise";
        out.warnings.push_back(spot.key + " rowwise_with_gw_hp: its high-precision weight-gradient GEMM is not "
                                          "modelled; rowwise planned");
    } else if (recipe != "tensorwise" && recipe != "rowwise") {
        throw InputError(spot.text(), "unknown recipe '" + recipe + "' (tensorwise, rowwise, rowwise_with_gw_hp)");
    }
    tv::set_imported(out, "fp8_scaling", scaling, spot);
}

void read_precision(const Toml& t, const Degrees& d, ImportedConfig& out) {
    // job_config.py Training.mixed_precision_param (default bfloat16) and Training.dtype (default
    // float32; bfloat16 = everything in bf16, no fp32 copy).
    const ConfigSpot param_spot = t.spot("training", "mixed_precision_param");
    const std::string param = t.text("training", "mixed_precision_param").value_or("bfloat16");
    if (param != "bfloat16" && param != "float32")
        throw InputError(param_spot.text(), "unknown dtype '" + param + "' (bfloat16, float32)");
    const ConfigSpot dtype_spot = t.spot("training", "dtype");
    const std::string dtype = t.text("training", "dtype").value_or("float32");
    if (dtype != "bfloat16" && dtype != "float32")
        throw InputError(dtype_spot.text(), "unknown dtype '" + dtype + "' (bfloat16, float32)");
    // job_config.py Training.mixed_precision_reduce: float32 only.
    const std::string reduce = t.text("training", "mixed_precision_reduce").value_or("float32");
    if (reduce != "float32") out.warnings.push_back("[training] mixed_precision_reduce \"" + reduce + "\": not modelled");
    const bool no_amp = torchtitan_amp_off(d.shard, d.cp, d.tp, d.pp);  // no FSDP beside tp or pp
    const bool float8 = float8_linears(t, out);
    if (float8 && no_amp && dtype != "bfloat16")
        out.warnings.push_back("[model] converters: Float8 without FSDP beside tp or pp: the step is planned in fp32 "
                               "(maybe_enable_amp), its Float8 GEMMs not modelled");
    if (float8 && !no_amp) {
        tv::set_imported(out, "precision", std::string("fp8-mixed"), t.spot("model", "converters"));
        read_fp8_recipe(t, out);
    } else if (dtype == "bfloat16") {
        tv::set_imported(out, "precision", std::string("bf16"), dtype_spot);
    } else if (param == "bfloat16" && no_amp) {
        // distributed/utils.py maybe_enable_amp: without FSDP (shard or cp above 1), tp or pp turns
        // mixed precision off.
        tv::set_imported(out, "precision", std::string("fp32"), param_spot);
        out.warnings.push_back(param_spot.key + " \"bfloat16\": torchtitan applies it through FSDP only once tp or "
                               "pp is above 1, and this layout has no FSDP (shard degree 1, no cp): the step runs "
                               "in fp32 (maybe_enable_amp), planned as fp32");
    } else {
        tv::set_imported(out, "precision", std::string(param == "float32" ? "fp32" : "bf16-mixed"), param_spot);
    }
}

void read_offload_compile_optimizer(const Toml& t, ImportedConfig& out) {
    // job_config.py Training.enable_cpu_offload: FSDP2 CPUOffloadPolicy (parameters, gradients
    // and optimizer states on the host).
    if (t.flag("training", "enable_cpu_offload").value_or(false)) {
        const ImportedField* zero = out.field("zero");
        const bool zero3 = zero != nullptr && std::get<std::int64_t>(zero->value) == 3;
        const std::string offload = zero3 ? "params" : "optimizer";
        tv::set_imported(out, "offload", offload, t.spot("training", "enable_cpu_offload"));
        out.warnings.push_back("[training] enable_cpu_offload: torchtitan moves parameters, gradients and optimizer "
                               "states to the host; planned as --offload " + offload + ", the closest");
    }
    // job_config.py Compile.enable + Compile.components (default model and loss); before it,
    // config_manager.py Training.compile (model and loss). A compiled loss keeps less memory.
    const bool compile = t.flag("compile", "enable").value_or(false);
    bool loss = true;
    if (const json* c = t.find("compile", "components")) {
        const ConfigSpot spot = t.spot("compile", "components");
        if (!c->is_array()) throw InputError(spot.text(), "must be a list (model, loss), got " + import_values::shown(*c));
        loss = false;
        for (const json& x : *c) loss = loss || tv::read_string(x, spot) == "loss";
    }
    out.compiled_loss = (compile && loss) || t.flag("training", "compile").value_or(false);
    // job_config.py Optimizer.name (default AdamW; torchtitan/components/optimizer.py builds Adam or AdamW).
    const std::string name = t.text("optimizer", "name").value_or("AdamW");
    const ConfigSpot spot = t.spot("optimizer", "name");
    if (name == "AdamW" || name == "Adam") tv::set_imported(out, "optimizer", std::string("adamw"), spot);
    else if (name == "SGD") {
        tv::set_imported(out, "optimizer", std::string("sgd"), spot);
        out.warnings.push_back(spot.key + " \"SGD\": torchtitan's build_optimizers knows Adam and AdamW only (v0.2.2 "
                               "components/optimizer.py) and refuses it; planned as SGD as written");
    }
    else out.warnings.push_back(spot.key + " \"" + name + "\": not modelled; adamw planned");
}

}  // namespace

ImportedConfig import_torchtitan(const ConfigTree& tree, const ImportContext& context) {
    ImportedConfig out;
    out.format = ConfigFormat::torchtitan;
    out.file = tree.file;
    out.framework = "torchtitan";
    if (!tree.root.is_object()) throw InputError(tree.file, "a torchtitan config is a TOML document of [tables]");
    const Toml t{tree};
    classify(t, "", tree.root, out);
    const std::int64_t layers = context.model_layers.value_or(read_model(t, out, context.model_layers.has_value()));
    const Degrees d = read_degrees(t, context, out);
    read_batch(t, d, out);
    read_sharding(t, d, out);
    read_schedule(t, d, layers, out);
    read_recompute(t, out);
    read_precision(t, d, out);
    read_offload_compile_optimizer(t, out);
    return out;
}

}  // namespace preflight
