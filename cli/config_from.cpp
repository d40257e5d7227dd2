#include "config_from.hpp"

#include <iostream>

#include "commands.hpp"
#include "format.hpp"
#include "preflight/config_readers/config_readers.hpp"
#include "preflight/planner/catalog.hpp"
#include "preflight/planner/checked.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/limits.hpp"
#include "preflight/planner/user_file.hpp"

namespace preflight::cli {

void add_from_flags(CLI::App& app, FromFlags& from, bool gpus_flag) {
    const std::string g = "Starting from a framework config";
    app.add_option("--from", from.file,
                   "Read the plan from a torchtitan job TOML, a Megatron-LM launch script or arguments file, a "
                   "DeepSpeed ds_config JSON (with --model) or a nanotron YAML ('-': standard input); flags given "
                   "beside it override the file's values. Unknown settings that change memory or speed are warned "
                   "about by name")
        ->group(g);
    app.add_option("--from-format", from.format, "Force the --from format: torchtitan | megatron | deepspeed | nanotron "
                                                 "(default: detected from the text)")
        ->check(CLI::IsMember({"torchtitan", "megatron", "deepspeed", "nanotron"}))
        ->group(g);
    app.add_option("--from-arg", from.args,
                   "With --from a Megatron-LM launch script: a word of its command line, in order ($1, then $2 ...; "
                   "give the flag once per word, a word that starts with - as --from-arg=WORD). Without it the "
                   "script's $1 ... are not known")
        ->expected(1)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
        ->allow_extra_args(false)
        ->group(g);
    app.add_flag("--verbose", from.verbose, "With --from: list every value read (file, line, key) and every key "
                                            "ignored on purpose (logging, checkpointing, data)")
        ->group(g);
    if (gpus_flag)
        app.add_option("--gpus", from.gpus, "With --from: the GPU count (torchtitan's -1 degrees; Megatron's dp = "
                                            "gpus / (tp * pp * cp)); at most 2^20")
            ->transform(count_at_most(limits::kMaxGpus, "kMaxGpus"))
            ->group(g);
}

bool given_on(const CLI::App& sub, const std::string& flag) {
    const CLI::Option* o = sub.get_option_no_throw(flag);
    return o != nullptr && o->count() > 0;
}

namespace {

// The slot of a plan field set from a config value. Its bounds and domain were checked when the
// importer recorded it (import_values::set_field, naming file, line and key).
void fill_slot(PlanFlags::Slot& slot, const ImportedField& value) {
    if (const auto* i = std::get_if<std::int64_t>(&value.value)) {
        slot.integer = *i;
    } else if (const auto* d = std::get_if<double>(&value.value)) {
        slot.real = *d;
    } else if (const auto* b = std::get_if<bool>(&value.value)) {
        slot.toggle = *b;
    } else {
        slot.name = std::get<std::string>(value.value);
    }
}

// The plan fields the config sets, except those given as flags; returns the flags text of what was
// taken, and records where each was read in `origins`.
std::string fill_fields(const ImportedConfig& c, PlanFlags& flags, std::ostream& log, bool verbose,
                        std::map<std::string, std::string>& origins) {
    const auto fields = plan_fields();
    std::string taken;
    for (const ImportedField& v : c.fields) {
        std::size_t i = 0;
        while (i < fields.size() && fields[i].key != v.key) ++i;
        if (i == fields.size()) throw InputError(v.from.text(), "internal: no plan field '" + v.key + "'");
        if (flags.slots[i].given()) {
            if (verbose) log << "#   " << v.from.text() << ": overridden by " << fields[i].flag << "\n";
            continue;
        }
        fill_slot(flags.slots[i], v);
        origins[std::string(fields[i].flag)] = v.from.text();
        Plan shown;  // the value as the command line writes it
        set_field(fields[i], shown, v.value, v.from.text());
        // A switch the file turns off is its default: no flag (the echo pastes as flags).
        const bool off = fields[i].type == FieldType::toggle && !std::get<bool>(v.value);
        const std::string text = std::string(fields[i].flag) +
                                 (fields[i].type == FieldType::toggle ? "" : " " + field_text(fields[i], shown));
        if (!off) taken += (taken.empty() ? "" : " ") + text;
        if (verbose) log << "#   " << v.from.text() << " -> " << (off ? "no " + text : text) << "\n";
    }
    return taken;
}

void take_model(const ImportedConfig& c, const CLI::App& sub, PlanFlags& flags, std::ostream& log,
                std::map<std::string, std::string>& origins) {
    if (given_on(sub, "--model")) return;
    const std::string where = c.model_from ? c.model_from->text() : c.file;
    origins["--model"] = where;
    if (c.model) {
        flags.model = *c.model;
        flags.context_follows_seq = c.context_follows_seq;
        log << "# --from: model " << *c.model << " (" << where << ")\n";
    } else if (c.model_config) {
        flags.model_config = *c.model_config;
        flags.model_config_name = c.file;
        log << "# --from: model shape from " << where << "\n";
    } else {
        throw InputError("--model", "the " + std::string(to_string(c.format)) + " config '" + c.file +
                                        "' names no model we know: give --model (a catalog name or a config.json)");
    }
}

void set_integer_field(PlanFlags& flags, std::string_view key, std::int64_t value) {
    PlanFlags::Slot& slot = flags.slots[static_cast<std::size_t>(plan_field(key) - plan_fields().data())];
    slot = PlanFlags::Slot{};
    slot.integer = value;
}

// A layout flag beside the config divides the config's GPUs anew (divide_anew): dp, and the
// accumulation the config's global batch then implies, are derived again as the framework derives
// them (the world size and the global batch stand), unless --dp / --grad-acc are given as well.
// Without this the config's dp would stay and the job would silently grow (tp 2 -> 4 on 16 GPUs:
// 32 GPUs planned).
void rederive_layout(const ImportedConfig& c, const CLI::App& sub, PlanFlags& flags,
                     std::optional<std::int64_t> world_given, std::map<std::string, std::string>& origins,
                     std::ostream& log) {
    const std::string flag = layout_flag_without_dp(sub);
    const std::optional<std::int64_t> world = c.gpus ? c.gpus : world_given;
    if (flag.empty() || !world) return;
    // The accumulation follows only where the config derives it from a global batch it names
    // (Megatron's --global-batch-size, torchtitan's global_batch_size, DeepSpeed's train_batch_size);
    // one the config sets itself (nanotron's batch_accumulation_per_replica) stands, as it would there.
    const ImportedField* acc = c.field("grad_acc");
    const bool acc_from_global =
        acc != nullptr && (acc->from.key.find("global_batch_size") != std::string::npos ||
                           acc->from.key.find("global-batch-size") != std::string::npos ||
                           acc->from.key.find("train_batch_size") != std::string::npos);
    const bool rederive_acc = acc_from_global && c.global_batch_sequences && !given_on(sub, "--grad-acc");
    const DividedAnew d = divide_anew(flags.to_plan(), *world, rederive_acc ? c.global_batch_sequences : std::nullopt,
                                      flag, "the config's", "--from", log);
    set_integer_field(flags, "dp", d.dp);
    origins.erase("--dp");
    if (d.grad_acc) {
        set_integer_field(flags, "grad_acc", *d.grad_acc);
        origins.erase("--grad-acc");
    }
}

// A ds_config's bucket settings, for the deepspeed profile (framework_profile applies them).
void take_deepspeed_buckets(const ImportedConfig& c, PlanFlags& flags, std::ostream& log) {
    if (!c.deepspeed_zero) return;
    flags.deepspeed_zero = c.deepspeed_zero;
    const DeepSpeedZeroSettings& z = *c.deepspeed_zero;
    log << "# --from: DeepSpeed buckets: reduce_bucket_size "
        << (z.reduce_bucket_hidden_squared ? std::string("auto (hidden_size^2, as the Trainer fills it)")
                                           : std::to_string(z.reduce_bucket_elements) + " elements")
        << ", overlap_comm "
        << (!z.overlap_comm ? "absent (DeepSpeed's default: on at ZeRO-3 only)" : *z.overlap_comm ? "on" : "off")
        << " (under --framework deepspeed)\n";
    const DeepSpeedZeroSettings defaults;
    if (z.sub_group_elements != defaults.sub_group_elements || z.max_live_elements != defaults.max_live_elements ||
        z.prefetch_elements != defaults.prefetch_elements)
        log << "# --from: DeepSpeed ZeRO-3: sub_group_size " << z.sub_group_elements << ", stage3_max_live_parameters "
            << z.max_live_elements << ", stage3_prefetch_bucket_size " << z.prefetch_elements
            << " elements (under --framework deepspeed --zero 3)\n";
}

// A --tp beside the config (without --sp) runs the config's sequence parallelism at the new
// degree, as the framework would: on at tp > 1 where the config asks for it, off at tp 1 (every
// one of them turns it off there: Megatron's validate_args, torchtitan's apply_tp, nanotron's
// modes need a tp group).
void reapply_sequence_parallelism(const ImportedConfig& c, const CLI::App& sub, PlanFlags& flags,
                                  std::map<std::string, std::string>& origins, std::ostream& log) {
    if (!c.sp_with_tp || !given_on(sub, "--tp") || given_on(sub, "--sp")) return;
    PlanFlags::Slot& slot = flags.slots[static_cast<std::size_t>(plan_field("sp") - plan_fields().data())];
    const std::int64_t tp = flags.to_plan().tp;
    const bool on = *c.sp_with_tp && tp > 1;
    if (slot.toggle == on) return;
    slot = PlanFlags::Slot{};
    slot.toggle = on;
    if (on) origins["--sp"] = c.file;
    else origins.erase("--sp");
    log << "# --from: " << (on ? "--sp" : "no --sp") << " (the config's sequence parallelism at --tp " << tp << ")\n";
}

}  // namespace

std::string layout_flag_without_dp(const CLI::App& sub) {
    if (given_on(sub, "--dp")) return "";
    for (const char* f : {"--tp", "--pp", "--cp"})
        if (given_on(sub, f)) return f;
    return "";
}

DividedAnew divide_anew(const Plan& p, std::int64_t world, std::optional<std::int64_t> sequences, const std::string& flag,
                        const std::string& source, const std::string& log_label, std::ostream& log) {
    const std::int64_t model = checked_mul(checked_mul(p.tp, p.pp, flag), p.cp, flag);
    const std::string gpus = source + " " + std::to_string(world) + " GPUs";
    if (world % model != 0)
        throw InputError(flag, gpus + " are not a multiple of tp x pp x cp = " + std::to_string(model) +
                                   ": give a layout that divides them, or --dp as well");
    DividedAnew d;
    d.dp = world / model;
    std::string said = "--dp " + std::to_string(d.dp);
    if (sequences) {
        const std::int64_t per_step = checked_mul(p.mbs, d.dp, flag);
        if (*sequences % per_step != 0)
            throw InputError(flag, source + " global batch of " + std::to_string(*sequences) +
                                       " sequences is not a multiple of mbs x dp = " + std::to_string(per_step) +
                                       " with this layout: give --grad-acc as well");
        d.grad_acc = *sequences / per_step;
        said += " --grad-acc " + std::to_string(*d.grad_acc);
    }
    log << "# " << log_label << ": " << said << " (" << gpus << (sequences ? " and its global batch" : "")
        << " divided anew for " << flag << ")\n";
    return d;
}

namespace {

// The flags that go with --from, given without it, or --from-arg past its bound: exit 2 naming the flag.
void check_from_companions(const FromFlags& from) {
    if (from.args.size() > limits::kMaxScriptArgs)
        throw InputError("--from-arg", "given " + std::to_string(from.args.size()) + " times: at most " +
                                           std::to_string(limits::kMaxScriptArgs) + " words (limits::kMaxScriptArgs)");
    if (!from.file.empty()) return;
    if (!from.format.empty()) throw InputError("--from-format", "needs --from FILE");
    if (from.verbose) throw InputError("--verbose", "lists what --from read: give --from FILE");
    if (!from.args.empty()) throw InputError("--from-arg", "gives a Megatron-LM launch script's $1 ...: give --from FILE");
    if (from.gpus)
        throw InputError("--gpus", "is read with --from only here; without a config give the layout with --dp, --tp "
                                   "and --pp (dp x tp x pp GPUs)");
}

// What the flags beside --from tell the importer; the catalog's models only where --model does
// not name the model (a Megatron shape without its vocabulary is matched against them, read from
// the data folder only then).
ImportContext import_context(const FromFlags& from, const CLI::App& sub, const PlanFlags& flags,
                             std::optional<std::int64_t> gpus) {
    const bool model_given = given_on(sub, "--model");
    const auto dir = data_dir_of(flags.data_dir);
    ImportContext context{gpus ? gpus : from.gpus, given_on(sub, "--dp"),
                          given_on(sub, "--grad-acc") || given_on(sub, "--gbs-tokens"),
                          model_given ? std::optional<std::int64_t>(load_plan_model(flags, dir).layers) : std::nullopt,
                          model_given ? nullptr : std::function<std::vector<ModelConfig>()>([dir] {
                              return load_catalog_models(dir);
                          })};
    if (!from.args.empty()) context.script_args = from.args;
    return context;
}

}  // namespace

FromApplied apply_from(const FromFlags& from, const CLI::App& sub, PlanFlags& flags,
                       std::optional<std::int64_t> gpus, std::ostream& log) {
    FromApplied applied;
    check_from_companions(from);
    if (from.file.empty()) return applied;
    applied.read = true;
    const ImportContext context = import_context(from, sub, flags, gpus);
    const std::optional<ConfigFormat> forced =
        from.format.empty() ? std::nullopt : parse_config_format(from.format);
    ImportedConfig c;
    try {
        // `--from -`: the config on standard input (`plan --emit megatron | preflight memory --from -`).
        c = from.file == "-" ? import_config_text(read_user_text_stream(std::cin, "standard input", "-", limits::kMaxConfigFileBytes,
                                                                        "a training config", "limits::kMaxConfigFileBytes"),
                                                  "-", forced, context)
                             : import_config_file(from.file, forced, context);
    } catch (const InputError& e) {
        throw InputError("--from", e.what());  // the file, and the line and key where known, follow
    }
    if (!from.args.empty() && c.format != ConfigFormat::megatron)
        throw InputError("--from-arg", "gives a Megatron-LM launch script's $1 ...; " + c.file + " is a " +
                                           std::string(to_string(c.format)) + " config, which takes no arguments");
    for (const std::string& w : c.warnings)
        log << "preflight: warning: " << (w.rfind(c.file, 0) == 0 ? "" : c.file + ": ") << w << "\n";
    // A ds_config holds no sequence length (the script's data decides it): said unless --seq gives it.
    if (c.format == ConfigFormat::deepspeed && !given_on(sub, "--seq") && sub.get_option_no_throw("--seq"))
        log << "preflight: warning: " << c.file << ": a ds_config has no sequence length: planned at the model's "
               "default (its context, capped at 4096); give --seq\n";
    const std::string taken = fill_fields(c, flags, log, from.verbose, applied.origins);
    log << "# --from " << c.file << " (" << to_string(c.format) << "): " << (taken.empty() ? "no plan values" : taken)
        << "\n";
    take_model(c, sub, flags, log, applied.origins);
    rederive_layout(c, sub, flags, context.gpus, applied.origins, log);
    reapply_sequence_parallelism(c, sub, flags, applied.origins, log);
    if (c.framework && !given_on(sub, "--framework") && sub.get_option_no_throw("--framework")) {
        flags.framework = *c.framework;
        log << "# --from: --framework " << *c.framework << " (the config's; give --framework to model another)\n";
    }
    take_deepspeed_buckets(c, flags, log);
    if (c.compiled_loss && !given_on(sub, "--compiled-loss") && sub.get_option_no_throw("--compiled-loss")) {
        flags.compiled_loss = true;
        log << "# --from: --compiled-loss (the config compiles the model)\n";
    }
    flags.tp_comm_overlap = c.tp_comm_overlap;  // plan's step time and, both commands, TE's userbuffers
    // Off only where a Megatron-LM script turns it off; other configs leave Megatron's default on.
    applied.overlap_p2p_comm = c.format != ConfigFormat::megatron || c.overlap_p2p_comm;
    applied.gpus = c.gpus;
    if (context.gpus && c.gpus && *context.gpus != *c.gpus) {
        // Megatron's dp comes from --gpus where given (N / (tp x pp x cp)); other configs' degrees stand.
        const Plan p = flags.to_plan();
        log << "preflight: warning: --gpus " << *context.gpus << " differs from the " << *c.gpus << " GPUs the config "
            << c.file << " lays out; "
            << (p.gpus() == *context.gpus ? "planned on --gpus (dp " + std::to_string(p.dp) + ")"
                                          : "its degrees stand (" + std::to_string(p.gpus()) + " GPUs) unless flags override them")
            << "\n";
    }
    if (!applied.gpus) {  // the layout's world size, dp x tp x pp x cp (each at most kMaxGpus: checked)
        const Plan p = flags.to_plan();
        const std::int64_t world =
            checked_mul(checked_mul(checked_mul(p.dp, p.tp, "--gpus"), p.pp, "--gpus"), p.cp, "--gpus");
        if (world > limits::kMaxGpus)
            throw InputError("--gpus", "the layout dp x tp x pp x cp = " + std::to_string(world) +
                                           " GPUs exceeds kMaxGpus = " + std::to_string(limits::kMaxGpus));
        applied.gpus = world;
    }
    applied.global_batch_sequences = c.global_batch_sequences;
    if (from.verbose)
        for (const std::string& k : c.ignored) log << "#   ignored on purpose: " << k << "\n";
    else if (!c.ignored.empty())
        log << "# --from: " << count_of(static_cast<std::int64_t>(c.ignored.size()), "key", "keys")
            << " ignored on purpose (logging, checkpointing, data; "
            << "--verbose lists them)\n";
    return applied;
}

InputError blame_from_file(const FromApplied& applied, const InputError& e) {
    const auto it = applied.origins.find(e.subject());
    if (it == applied.origins.end()) return e;
    return InputError(it->second, e.detail() + " (read as " + e.subject() + ")");
}

}  // namespace preflight::cli
