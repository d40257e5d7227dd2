// DeepSpeed ds_config JSON -> plan values. Key names and defaults: deepspeed/runtime/config.py
// (DeepSpeedConfig), deepspeed/runtime/constants.py, deepspeed/runtime/zero/config.py
// (DeepSpeedZeroConfig), deepspeed/runtime/zero/offload_config.py and docs/_pages/config-json.md.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>
#include <set>

#include "import_flag_values.hpp"
#include "preflight/planner/config_import.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/limits.hpp"

namespace preflight {

namespace {

using nlohmann::json;
using namespace import_values;

// The tree and the result, with spots for keys given as dotted paths ("zero_optimization.stage").
struct Reader {
    const ConfigTree& tree;
    ImportedConfig& out;

    // "a.b" -> "/a/b", each name escaped as a JSON pointer token ('~' -> "~0", '/' -> "~1").
    static std::string pointer(const std::string& dotted) {
        std::string p;
        std::size_t start = 0;
        for (std::size_t dot; (dot = dotted.find('.', start)) != std::string::npos; start = dot + 1) {
            p += '/';
            p += json_pointer_token(std::string_view(dotted).substr(start, dot - start));
        }
        p += '/';
        p += json_pointer_token(std::string_view(dotted).substr(start));
        return p;
    }
    ConfigSpot spot(const std::string& dotted) const {
        return {tree.file, dotted, tree.line_of(pointer(dotted))};
    }
    // The value at `dotted` (nullptr when absent or null).
    const json* at(const std::string& dotted) const {
        const json::json_pointer p(pointer(dotted));
        if (!tree.root.contains(p)) return nullptr;
        const json& v = tree.root.at(p);
        return v.is_null() ? nullptr : &v;
    }
    // HF Trainer's integration writes "auto" for values it fills in (transformers/integrations/deepspeed.py).
    bool is_auto(const std::string& dotted) {
        const json* v = at(dotted);
        if (!v || !v->is_string() || v->get<std::string>() != "auto") return false;
        out.ignored.push_back(dotted + ": auto (filled by the Trainer)");
        return true;
    }
    // The blocks DeepSpeed reads as objects: another type is an error, not a silent default.
    void require_objects() {
        for (const char* key : {"zero_optimization", "zero_optimization.offload_optimizer", "zero_optimization.offload_param",
                                "bf16", "bfloat16", "fp16", "amp", "data_types", "activation_checkpointing",
                                "tensor_parallel", "pipeline", "optimizer"})
            if (const json* v = at(key); v && !v->is_object())
                throw InputError(spot(key).text(), "must be an object ({ ... }), got " + import_values::shown(*v));
    }
    void warn(const std::string& dotted, const std::string& message) {
        out.warnings.push_back(spot(dotted).text() + ": " + message);
    }
};

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// tensor_parallel.autotp_size (deepspeed/runtime/tensor_parallel/config.py) and pipeline.stages
// (config.py get_pipeline_config; "auto" by default): the degrees the batch rule divides by.
std::pair<std::int64_t, std::int64_t> import_degrees(Reader& r) {
    std::int64_t tp = 1, pp = 1;
    if (r.at("tensor_parallel.autotp_size") && !r.is_auto("tensor_parallel.autotp_size"))
        tp = set_integer_json(r.out, "tp", *r.at("tensor_parallel.autotp_size"), r.spot("tensor_parallel.autotp_size"));
    if (r.at("pipeline.stages") && !r.is_auto("pipeline.stages"))
        pp = set_integer_json(r.out, "pp", *r.at("pipeline.stages"), r.spot("pipeline.stages"));
    return {tp, pp};
}

// The data-parallel size --gpus implies: gpus / (tp pp) (DeepSpeed's world_size is the dp size).
std::optional<std::int64_t> dp_from_gpus(const ImportContext& ctx, std::int64_t tp, std::int64_t pp,
                                         const ImportedConfig& out) {
    if (!ctx.gpus) return std::nullopt;
    const ConfigSpot gpus{out.file, "--gpus " + std::to_string(*ctx.gpus), 0};
    return exact_quotient(*ctx.gpus, tp * pp, gpus,
                          "the GPU count is not a multiple of tensor_parallel.autotp_size x pipeline.stages = " +
                              std::to_string(tp * pp));
}

struct Batch {
    std::optional<std::int64_t> train, micro, acc;  // train_batch_size, micro batch per GPU, accumulation
};

Batch read_batch(Reader& r) {
    Batch b;
    const auto read = [&](const char* key, std::string_view field, std::optional<std::int64_t>& into) {
        if (!r.at(key) || r.is_auto(key)) return;
        const Bounds bounds = field.empty() ? Bounds{1, limits::kMaxGlobalBatchTokens, "limits::kMaxGlobalBatchTokens"}
                                            : field_bounds(field);
        into = integer_json(*r.at(key), r.spot(key), bounds.min, bounds.max, bounds.what);
    };
    read("train_batch_size", "", b.train);  // sequences: bounded like the global batch in tokens
    read("train_micro_batch_size_per_gpu", "mbs", b.micro);
    read("gradient_accumulation_steps", "grad_acc", b.acc);
    return b;
}

// train_batch_size = micro batch x accumulation x dp: any two of the three give the third
// (config.py DeepSpeedConfig._set_batch_related_parameters, with dp from --gpus when needed).
void import_batch(Reader& r, const ImportContext& ctx, std::int64_t tp, std::int64_t pp) {
    Batch b = read_batch(r);
    const std::optional<std::int64_t> dp_gpus = dp_from_gpus(ctx, tp, pp, r.out);
    const ConfigSpot train = r.spot("train_batch_size");
    std::optional<std::int64_t> dp;
    if (b.train && b.micro && b.acc) {
        dp = exact_quotient(*b.train, *b.micro * *b.acc, train,
                            std::to_string(*b.train) + " is not a multiple of train_micro_batch_size_per_gpu x "
                                                       "gradient_accumulation_steps = " + std::to_string(*b.micro * *b.acc));
        if (dp_gpus && *dp != *dp_gpus)
            throw InputError(train.text(), std::to_string(*b.train) + " sequences = " + std::to_string(*b.micro) + " x " +
                                               std::to_string(*b.acc) + " x data-parallel " + std::to_string(*dp) +
                                               ", but --gpus " + std::to_string(*ctx.gpus) + " gives data-parallel " +
                                               std::to_string(*dp_gpus));
    } else if (dp_gpus) {
        dp = dp_gpus;
        const std::string per = " with data-parallel " + std::to_string(*dp) + " (--gpus " + std::to_string(*ctx.gpus) + ")";
        if (b.train && b.micro)
            b.acc = exact_quotient(*b.train, *b.micro * *dp, train, std::to_string(*b.train) + " is not a multiple of "
                                   "train_micro_batch_size_per_gpu " + std::to_string(*b.micro) + per);
        else if (b.train)
            b.micro = exact_quotient(*b.train, b.acc.value_or(1) * *dp, train, std::to_string(*b.train) +
                                     " is not a multiple of gradient_accumulation_steps " +
                                     std::to_string(b.acc.value_or(1)) + per);
        if (b.micro && !b.acc) b.acc = 1;  // config.py: only the micro batch given -> no accumulation
    } else if (b.micro && !b.train && !b.acc) {
        b.acc = 1;
    }
    // A global batch that cannot be divided without the data-parallel degree is the batch `plan`
    // searches for; the layout it implies is unknown, which is said rather than left unsaid.
    if (b.train && !dp)
        r.out.warnings.push_back(train.text() + " " + std::to_string(*b.train) +
                                 ": not divided into micro batch x accumulation x data-parallel without --gpus; "
                                 "`plan` searches for this global batch, a fixed layout takes its flags' defaults");
    // A ds_config holds no world size (DeepSpeed takes it from the launcher): without a global
    // batch to divide or --gpus, the data-parallel degree is the flags' (dp 1 unless --dp).
    if (!b.train && !dp && !ctx.dp_given)
        r.out.warnings.push_back(r.out.file + ": the data-parallel degree is the launcher's world size, which a "
                                              "ds_config does not hold: dp 1 unless --gpus N or --dp D is given "
                                              "(ZeRO shards over dp)");
    if (b.micro) set_field(r.out, "mbs", *b.micro, r.spot("train_micro_batch_size_per_gpu"));
    if (b.acc) set_field(r.out, "grad_acc", *b.acc, r.spot("gradient_accumulation_steps"));
    if (dp) {
        set_integer_json(r.out, "dp", *dp, b.train ? train : ConfigSpot{r.out.file, "--gpus", 0});
        r.out.gpus = *dp * tp * pp;
    }
    if (b.train) r.out.global_batch_sequences = *b.train;
    else if (b.micro && b.acc && dp) r.out.global_batch_sequences = *b.micro * *b.acc * *dp;
}

// bf16.bf16_master_weights_and_grads: ZeRO's master partition and gradients in bf16, the
// optimizer states too with bf16_optimizer_states (runtime/config.py; docs/_pages/config-json.md),
// which is the pure-bf16 recipe. Without bf16 states the fp32 moments must live on the host
// (ZeRO-Offload): planned as pure bf16, said.
bool bf16_master(Reader& r, const std::string& block) {
    const std::string master = block + ".bf16_master_weights_and_grads", states = block + ".bf16_optimizer_states";
    const auto flag = [&](const std::string& key) { return r.at(key) && boolean_json(*r.at(key), r.spot(key)); };
    if (!flag(master)) {
        if (flag(states)) throw InputError(r.spot(states).text(), "needs bf16_master_weights_and_grads (DeepSpeed asserts it)");
        return false;
    }
    if (!flag(states))
        r.warn(master, "bf16 master weights with fp32 optimizer states (kept on the host by ZeRO-Offload) are not "
                       "modelled: planned as pure bf16, whose moments are bf16");
    return true;
}

// data_types.grad_accum_dtype by DeepSpeed's DtypeEnum names (runtime/config.py: fp32 is also
// "float32", "float", "torch.float32"; bf16 and fp16 as theirs): true for fp32, false for a 16-bit
// one or none; another name is refused, as DeepSpeed's DtypeEnum lookup refuses it.
bool accumulates_in_fp32(Reader& r) {
    const json* acc = r.at("data_types.grad_accum_dtype");
    if (!acc || r.is_auto("data_types.grad_accum_dtype")) return false;
    const ConfigSpot spot = r.spot("data_types.grad_accum_dtype");
    const std::string name = string_json(*acc, spot);
    for (const char* fp32 : {"fp32", "float32", "float", "torch.float32"})
        if (name == fp32) return true;
    for (const char* half : {"bf16", "bfloat16", "torch.bfloat16", "fp16", "float16", "half", "torch.float16"})
        if (name == half) return false;
    throw InputError(spot.text(), "'" + name + "' is not a DeepSpeed dtype (fp32, float32, float, torch.float32; "
                                  "bf16, bfloat16; fp16, float16, half)");
}

// bf16 / fp16 blocks (config.py get_bfloat16_enabled, get_fp16_enabled; "bfloat16" is bf16's old
// name) and data_types.grad_accum_dtype (config.py get_data_types_params).
void import_precision(Reader& r) {
    const auto enabled = [&](const std::string& block) -> std::optional<bool> {
        const std::string key = block + ".enabled";
        if (!r.at(key)) return false;
        if (r.is_auto(key)) return std::nullopt;
        return boolean_json(*r.at(key), r.spot(key));
    };
    const std::string bf16_block = r.at("bf16") || !r.at("bfloat16") ? "bf16" : "bfloat16";
    const std::optional<bool> bf16 = enabled(bf16_block), fp16 = enabled("fp16");
    if (!bf16 || !fp16) return;  // the Trainer decides
    if (*bf16 && *fp16)
        throw InputError(r.spot("fp16.enabled").text(), "bf16 and fp16 are both enabled; DeepSpeed takes one of them");
    if (r.at("amp.enabled") && r.at("amp.enabled")->is_boolean() && r.at("amp.enabled")->get<bool>())
        r.warn("amp.enabled", "NVIDIA Apex AMP is not modelled; the plan's precision follows bf16/fp16");
    std::string precision = "fp32", key = bf16_block + ".enabled";
    if (*fp16) {
        precision = "fp16-mixed";
        key = "fp16.enabled";
    } else if (*bf16 && bf16_master(r, bf16_block)) {
        precision = "bf16";
        key = bf16_block + ".bf16_master_weights_and_grads";
    } else if (*bf16) {
        precision = "bf16-mixed";
        if (accumulates_in_fp32(r)) {
            precision = "bf16-mixed-fp32-grads";
            key = "data_types.grad_accum_dtype";
        }
    }
    ConfigSpot spot = r.spot(key);
    if (precision == "fp32" && spot.line == 0) spot.key = "bf16.enabled / fp16.enabled (absent: DeepSpeed trains in fp32)";
    set_field(r.out, "precision", precision, spot);
}

// activation_checkpointing (deepspeed/runtime/activation_checkpointing/config.py) and the
// pipeline engine's activation_checkpoint_interval (config.py get_pipeline_config).
void import_checkpointing(Reader& r) {
    const bool block = r.tree.root.contains("activation_checkpointing");
    const json* interval = r.at("pipeline.activation_checkpoint_interval");
    const bool pipe = interval && integer_json(*interval, r.spot("pipeline.activation_checkpoint_interval"), 0,
                                               limits::kMaxLayers, "limits::kMaxLayers") > 0;
    if (!block && !pipe) return;
    const std::string key = block ? "activation_checkpointing" : "pipeline.activation_checkpoint_interval";
    set_field(r.out, "recompute", std::string("full"), r.spot(key));
    if (block)
        r.warn(key, "DeepSpeed's block only configures deepspeed.checkpointing; the model must call it for each "
                    "layer (HF: model.gradient_checkpointing_enable()): planned as full recompute");
    if (r.at("activation_checkpointing.cpu_checkpointing") &&
        r.at("activation_checkpointing.cpu_checkpointing")->is_boolean() &&
        r.at("activation_checkpointing.cpu_checkpointing")->get<bool>())
        r.warn("activation_checkpointing.cpu_checkpointing", "checkpoints kept in host memory are not modelled");
}

// optimizer.type (config.py get_optimizer_name; DeepSpeed compares the name in lower case,
// deepspeed/runtime/engine.py _configure_basic_optimizer).
void import_optimizer(Reader& r) {
    const json* type = r.at("optimizer.type");
    // The deepspeed profile counts DeepSpeed's FusedAdam (emit_deepspeed.cpp deepspeed_optimizer):
    // under ZeRO, torch's AdamW (the script's, or optimizer.params.torch_adam) steps with an fp32
    // temporary (without ZeRO, FP16_UnfusedOptimizer's step takes what FP16_Optimizer's does).
    const json* torch_adam = r.at("optimizer.params.torch_adam");
    const json* stage = r.at("zero_optimization.stage");
    const bool zero = stage && stage->is_number_integer() && stage->get<std::int64_t>() > 0;
    const json* offload = r.at("zero_optimization.offload_optimizer.device");  // DeepSpeedCPUAdam steps on the host
    const bool host_step = offload && offload->is_string() && lower(offload->get<std::string>()) != "none";
    if (zero && !host_step && (!type || (torch_adam && torch_adam->is_boolean() && torch_adam->get<bool>())))
        r.warn(type ? "optimizer.params.torch_adam" : "optimizer",
               std::string(type ? "torch.optim.AdamW" : "absent: the training script's optimizer") +
                   " is counted as DeepSpeed's FusedAdam; torch.optim.AdamW's foreach step holds 4 B more per "
                   "element it updates");
    if (!type) return;
    const std::string name = lower(string_json(*type, r.spot("optimizer.type")));
    static const std::set<std::string> adam{"adam", "adamw", "fusedadam", "cpuadam", "deepspeedcpuadam"};
    static const std::set<std::string> two_moments{"lamb", "onebitadam", "zerooneadam", "onebitlamb", "fusedlamb"};
    static const std::set<std::string> one_state{"sgd", "lion", "adagrad", "muon"};
    if (adam.count(name) || two_moments.count(name)) {
        set_field(r.out, "optimizer", std::string("adamw"), r.spot("optimizer.type"));
        if (two_moments.count(name))
            r.warn("optimizer.type", type->get<std::string>() + " keeps two moments like AdamW: planned as adamw");
    } else if (one_state.count(name)) {
        set_field(r.out, "optimizer", std::string("sgd"), r.spot("optimizer.type"));
        if (name != "sgd")
            r.warn("optimizer.type", type->get<std::string>() + " keeps one state per weight: planned as sgd");
        // zero/utils.py ZERO_SUPPORTED_OPTIMIZERS lacks torch.optim.SGD; engine.py
        // _do_optimizer_sanity_check asserts under ZeRO unless zero_allow_untested_optimizer is true.
        // torch.optim.SGD's momentum defaults to 0, which keeps no buffer; the plan's SGD keeps one.
        const json* momentum = r.at("optimizer.params.momentum");
        if (name == "sgd" && !(momentum && momentum->is_number() && momentum->get<double>() != 0.0))
            r.warn("optimizer.params.momentum", "torch.optim.SGD at momentum 0 (its default) keeps no momentum "
                                                "buffer; planned with one, 4 B per parameter more than the job holds");
        const json* allow = r.at("zero_allow_untested_optimizer");
        if (name == "sgd" && zero && !(allow && allow->is_boolean() && allow->get<bool>()))
            r.warn("optimizer.type", "DeepSpeed refuses torch.optim.SGD under ZeRO (not among its tested optimizers) "
                                     "unless \"zero_allow_untested_optimizer\": true; planned as if it were set");
    } else {
        r.warn("optimizer.type", "optimizer '" + type->get<std::string>() + "' is not modelled (adamw or sgd)");
    }
}


// One offload block's device (zero/offload_config.py OffloadDeviceEnum: none, cpu, nvme), or
// the deprecated booleans zero_optimization.cpu_offload / cpu_offload_param (zero/config.py).
std::optional<std::string> offload_device(Reader& r, const std::string& block, const char* legacy) {
    const std::string key = "zero_optimization." + block + ".device";
    if (r.at(key) && !r.is_auto(key)) {
        const std::string d = lower(string_json(*r.at(key), r.spot(key)));
        if (d == "none") return std::nullopt;
        if (d != "cpu" && d != "nvme")
            throw InputError(r.spot(key).text(), "must be none, cpu or nvme, got '" + d + "'");
        if (d == "nvme")
            r.warn(key, "NVMe offload is not modelled: planned as cpu offload (the same GPU memory; the host "
                        "memory and the NVMe traffic differ)");
        return d;
    }
    const std::string old = std::string("zero_optimization.") + legacy;
    if (r.at(old) && boolean_json(*r.at(old), r.spot(old))) return std::string("cpu");
    return std::nullopt;
}

// offload_optimizer -> --offload optimizer; offload_param (ZeRO-3 only) -> --offload params.
void import_offload(Reader& r, std::int64_t stage) {
    const auto opt = offload_device(r, "offload_optimizer", "cpu_offload");
    auto param = offload_device(r, "offload_param", "cpu_offload_param");
    const std::string param_key = r.at("zero_optimization.offload_param.device") ? "zero_optimization.offload_param.device"
                                                                                 : "zero_optimization.cpu_offload_param";
    const std::string opt_key = r.at("zero_optimization.offload_optimizer.device")
                                    ? "zero_optimization.offload_optimizer.device"
                                    : "zero_optimization.cpu_offload";
    if (param && stage >= 0 && stage != 3) {
        r.warn(param_key, "parameter offload applies under ZeRO stage 3 only (zero/config.py): ignored");
        param.reset();
    }
    if (!opt && !param) return;
    if (stage == 0) {
        r.warn(opt ? opt_key : param_key, "DeepSpeed offloads under ZeRO stages 1-3 only: ignored at stage 0");
        return;
    }
    if (param && !opt)
        r.warn(param_key, "parameter offload without offload_optimizer: planned with the optimizer offloaded too");
    set_field(r.out, "offload", std::string(param ? "params" : "optimizer"), r.spot(param ? param_key : opt_key));
    const json* ratio = r.at("zero_optimization.offload_optimizer.ratio");
    if (ratio && ratio->is_number() && ratio->get<double>() < 1.0)
        r.warn("zero_optimization.offload_optimizer.ratio", "partial optimizer offload is not modelled: planned as "
                                                            "the whole optimizer offloaded");
}

// zero_optimization keys that change GPU memory the plan does not model (zero/config.py).
const std::set<std::string>& zero_memory_keys() {
    static const std::set<std::string> keys{
        "allgather_bucket_size", "stage3_max_reuse_distance", "max_reuse_distance",
        "stage3_param_persistence_threshold", "param_persistence_threshold", "stage3_model_persistence_threshold",
        "model_persistence_threshold", "zero_hpz_partition_size", "zero_quantized_weights",
        "zero_quantized_nontrainable_weights", "zero_quantized_gradients", "mics_shard_size",
        "mics_hierarchical_params_gather", "zenflow"};
    return keys;
}

// zero_optimization keys import_zero3_settings reads (and their aliases).
const std::set<std::string>& zero3_read_keys() {
    static const std::set<std::string> keys{"sub_group_size", "stage3_max_live_parameters", "max_live_parameters",
                                            "stage3_prefetch_bucket_size", "prefetch_bucket_size"};
    return keys;
}

// zero_optimization keys known and left out on purpose: communication schedule, checkpointing, checks.
const std::set<std::string>& zero_ignored_keys() {
    static const std::set<std::string> keys{
        "contiguous_gradients", "reduce_scatter", "allgather_partitions",
        "use_multi_rank_bucket_allreduce", "load_from_fp32_weights", "elastic_checkpoint", "ignore_unused_parameters",
        "legacy_stage1", "round_robin_gradients", "stage3_gather_16bit_weights_on_model_save",
        "gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save", "memory_efficient_linear",
        "pipeline_loading_checkpoint", "override_module_apply", "log_trace_cache_warnings", "enable_sanity_checks",
        "stage3_module_granularity_threshold", "stage3_use_all_reduce_for_fetch_params", "stage3_allgather_sequential",
        "leaf_module", "zeropp_loco_param", "save_muon_momentum_buffer_in_memory", "cpu_offload_use_pin_memory"};
    return keys;
}

// reduce_bucket_size and the ZeRO-3 counts: a whole count of elements (zero/config.py: pp_int,
// ge=0), which JSON often writes as a float ("5e8"); bounded so that no byte count built on it can wrap.
std::int64_t bucket_elements(const json& v, const ConfigSpot& spot) {
    constexpr double kMaxBucketElements = 1099511627776.0;  // 2^40
    const double d = v.is_number() ? v.get<double>() : -1;
    // A whole number within the bound is exactly representable as a double (2^40 < 2^53).
    if (v.is_number_unsigned() ? v.get<std::uint64_t>() > (std::uint64_t{1} << 40)
                               : !(d >= 0 && d <= kMaxBucketElements) || d != static_cast<double>(static_cast<std::int64_t>(d)))
        throw InputError(spot.text(), "must be a whole number of elements from 0 to 2^40 (1,099,511,627,776), got " +
                                          import_values::shown(v));
    return v.is_number_integer() ? v.get<std::int64_t>() : static_cast<std::int64_t>(d);
}

// ZeRO-3's sub_group_size, stage3_max_live_parameters and stage3_prefetch_bucket_size (zero/config.py
// DeepSpeedZeroConfig, each also under its alias without "stage3_"): the optimizer step's sub-group
// and the prefetcher's live window (memory_deepspeed.cpp add_zero3_terms). "auto" keeps the default
// (the Trainer fills only the prefetch size, 0.9 hidden^2, which leaves the prefetcher on).
void import_zero3_settings(Reader& r, DeepSpeedZeroSettings& z, std::int64_t stage) {
    // The key given (the first of its names that is present), or "" when neither is.
    const auto given = [&](std::initializer_list<const char*> names) {
        for (const char* name : names)
            if (r.at(std::string("zero_optimization.") + name)) return std::string("zero_optimization.") + name;
        return std::string();
    };
    const auto read = [&](const std::string& dotted, std::int64_t& into) {
        if (!dotted.empty() && !r.is_auto(dotted)) into = bucket_elements(*r.at(dotted), r.spot(dotted));
    };
    read(given({"sub_group_size"}), z.sub_group_elements);
    const std::string live = given({"stage3_max_live_parameters", "max_live_parameters"});
    const std::string prefetch = given({"stage3_prefetch_bucket_size", "prefetch_bucket_size"});
    read(live, z.max_live_elements);
    read(prefetch, z.prefetch_elements);
    // partitioned_param_coordinator.py fetch_sub_module prefetches only with both above 0 (said at
    // ZeRO-3, or a stage the Trainer fills).
    if ((z.max_live_elements == 0 || z.prefetch_elements == 0) && (stage == 3 || stage < 0))
        r.warn(z.prefetch_elements == 0 ? prefetch : live,
               "0 turns ZeRO-3's prefetcher off: planned with the current and the next layer gathered (the "
               "parameters stage3_max_reuse_distance keeps are not modelled)");
}

// The settings that size DeepSpeed's gradient buckets (DeepSpeedZeroSettings, the deepspeed
// profile's terms): reduce_bucket_size ("auto": the Hugging Face Trainer's hidden_size x
// hidden_size) and overlap_comm (absent: zero/config.py's default for the plan's stage).
void import_bucket_settings(Reader& r, std::int64_t stage) {
    DeepSpeedZeroSettings z;
    z.overlap_comm = std::nullopt;  // DeepSpeed's default for whatever stage the plan runs
    if (const json* v = r.at("zero_optimization.overlap_comm"))
        z.overlap_comm = import_values::boolean_json(*v, r.spot("zero_optimization.overlap_comm"));
    const std::string bucket = "zero_optimization.reduce_bucket_size";
    if (r.at(bucket) && r.at(bucket)->is_string() && r.at(bucket)->get<std::string>() == "auto")
        z.reduce_bucket_hidden_squared = true;
    else if (const json* v = r.at(bucket))
        z.reduce_bucket_elements = bucket_elements(*v, r.spot(bucket));
    import_zero3_settings(r, z, stage);
    r.out.deepspeed_zero = z;
    const json* contiguous = r.at("zero_optimization.contiguous_gradients");
    if (contiguous && *contiguous == false && stage >= 1)
        r.warn("zero_optimization.contiguous_gradients", "false: planned with contiguous gradients (the default); without "
                                                         "them per-parameter gradients replace the reduce buckets and "
                                                         "the partition buffer, which is not modelled");
}

// zero_optimization.stage (zero/config.py ZeroStageEnum, default 0) and the rest of the block.
void import_zero(Reader& r) {
    const json* z = r.at("zero_optimization");
    std::int64_t stage = 0;  // -1: "auto", left to the Trainer
    if (r.is_auto("zero_optimization.stage"))
        stage = -1;
    else if (r.at("zero_optimization.stage"))
        stage = set_integer_json(r.out, "zero", *r.at("zero_optimization.stage"), r.spot("zero_optimization.stage"));
    else
        set_field(r.out, "zero", std::int64_t{0}, {r.out.file, "zero_optimization.stage (absent: 0)", 0});
    import_offload(r, stage);
    import_bucket_settings(r, stage);
    if (!z) return;
    for (const auto& [key, value] : z->items()) {
        const std::string dotted = "zero_optimization." + key;
        if (key == "stage" || key == "offload_optimizer" || key == "offload_param" || key == "cpu_offload" ||
            key == "cpu_offload_param" || key == "reduce_bucket_size" || key == "overlap_comm" ||
            zero3_read_keys().count(key) || zero_ignored_keys().count(key))
            continue;
        if (value.is_string() && value.get<std::string>() == "auto")
            r.out.ignored.push_back(dotted + ": auto (filled by the Trainer)");
        else if (zero_memory_keys().count(key))
            r.warn(dotted, import_values::shown(value) + ": the GPU memory this setting holds (communication buckets, live or "
                                          "persistent parameters, quantized copies) is not modelled");
        else
            r.warn(dotted, "unknown zero_optimization key, not modelled");
    }
}

// Top-level keys left out on purpose (no effect on memory or on the step the plan models) and
// keys that change memory or speed in ways the plan does not model (constants.py, config.py).
void classify_keys(Reader& r) {
    static const std::set<std::string> handled{
        "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "zero_optimization",
        "bf16", "bfloat16", "fp16", "data_types", "activation_checkpointing", "tensor_parallel", "pipeline",
        "optimizer", "amp"};
    static const std::set<std::string> ignored{
        "scheduler", "gradient_clipping", "steps_per_print", "wall_clock_breakdown", "tensorboard", "wandb",
        "csv_monitor", "comet", "flops_profiler", "prescale_gradients", "gradient_predivide_factor", "dump_state",
        "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "memory_breakdown", "sparse_gradients",
        "dataloader_drop_last", "checkpoint", "aio", "autotuning", "timers", "monitor_config", "nebula", "eigenvalue",
        "load_universal_checkpoint", "use_node_local_storage", "seed", "gradient_accumulation_dtype", "logging"};
    static const std::map<std::string, std::string> warned{
        {"elasticity", "elastic batch sizes are not modelled"},
        {"compression_training", "compression (quantization, pruning) is not modelled"},
        {"sparse_attention", "sparse attention is not modelled (dense attention planned)"},
        {"progressive_layer_drop", "progressive layer dropping is not modelled"},
        {"curriculum_learning", "curriculum sequence lengths are not modelled"},
        {"data_efficiency", "curriculum data sampling is not modelled"},
        {"hybrid_engine", "the RLHF hybrid engine is not modelled"},
        {"torch_autocast", "torch.autocast precision is not modelled: the plan follows bf16/fp16"},
        {"compile", "torch.compile is not modelled"},
        {"communication_data_type", "the gradient communication dtype is not modelled"},
        {"seq_parallel_communication_data_type", "the sequence-parallel communication dtype is not modelled"}};
    for (const auto& [key, value] : r.tree.root.items()) {
        if (handled.count(key)) continue;
        if (ignored.count(key))
            r.out.ignored.push_back(key);
        else if (const auto w = warned.find(key); w != warned.end())
            r.warn(key, w->second);
        else
            r.warn(key, "unknown DeepSpeed key, not modelled");
    }
}

}  // namespace

ImportedConfig import_deepspeed(const ConfigTree& tree, const ImportContext& context) {
    ImportedConfig out;
    out.format = ConfigFormat::deepspeed;
    out.file = tree.file;
    out.framework = "deepspeed";  // the model comes from --model: a ds_config names none
    Reader r{tree, out};
    r.require_objects();
    const auto [tp, pp] = import_degrees(r);
    import_batch(r, context, tp, pp);
    import_zero(r);
    import_precision(r);
    import_checkpointing(r);
    import_optimizer(r);
    classify_keys(r);
    // File order: the fields sorted by the line they came from (defaults, line 0, last).
    std::stable_sort(out.fields.begin(), out.fields.end(), [](const ImportedField& a, const ImportedField& b) {
        return (a.from.line == 0 ? INT32_MAX : a.from.line) < (b.from.line == 0 ? INT32_MAX : b.from.line);
    });
    return out;
}

}  // namespace preflight
