#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <string_view>

#include "commands.hpp"
#include "config_from.hpp"
#include "format.hpp"
#include "plan_file.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/catalog.hpp"
#include "preflight/planner/memory_categories.hpp"
#include "preflight/planner/plan_schema.hpp"
#include "preflight/planner/search.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/report.hpp"
#include "preflight/planner/throughput.hpp"

namespace preflight::cli {

std::filesystem::path data_dir_of(const std::string& flag_value) {
    const std::filesystem::path dir = flag_value.empty() ? default_data_dir() : std::filesystem::path(flag_value);
    std::error_code ec;
    if (!flag_value.empty() && !std::filesystem::is_directory(dir, ec))
        throw InputError("--data-dir", "'" + dir.string() + "' is not a folder (it should hold models/ and gpus/)");
    return dir;
}

namespace {

std::string percent(double f) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%.1f %%", 100.0 * f);
    return buf;
}

// ", a wait 41 % likely": the host-pace model's probability, where the pace was expected from it.
std::string wait_odds(const MemoryReport& r) {
    return r.host_wait_probability ? ", " + format_wait_odds(*r.host_wait_probability) : std::string();
}

// Profiles with a caching-allocator model: the pool, what lies outside it, the range the pool can
// take where the model has one (allocator_model.hpp range_low_constants / range_high_constants),
// and the verdict by it.
void print_reserved(const MemoryReport& r, const FrameworkProfile& profile) {
    std::cout << "allocated peak:        " << format_bytes(r.peak_allocated_bytes) << " (tensors)\n"
              << "reserved peak:         " << format_bytes(r.peak_reserved_bytes)
              << " (PyTorch caching-allocator pool, stage "
              << (r.reserved_peak_phase ? r.reserved_peak_stage : r.pipeline_stage)
              << (r.reserved_peak_phase ? ", at " + describe(*r.reserved_peak_phase) + " over its " +
                                              format_bytes(r.reserved_peak_tensor_bytes) + " of tensors"
                                        : std::string())
              << ")\n";
    const ReservedExtra& x = r.reserved_extra;
    if (x.total() > 0 && x.total() == x.gradient_fragmentation_bytes)  // the pytorch profile's one term
        std::cout << "  beyond the tensors:  " << format_bytes(x.gradient_fragmentation_bytes)
                  << " for the gradients the loop frees every step (fitted on our PyTorch runs), rounded up to 2 MiB "
                     "segments\n";
    else if (x.total() > 0)
        std::cout << "  beyond the tensors:  " << format_bytes(r.reserved_extra.activation_fragmentation_bytes)
                  << " activation fragmentation + " << format_bytes(r.reserved_extra.loss_stage_bytes)
                  << " around the loss + " << format_bytes(r.reserved_extra.pipeline_runahead_bytes)
                  << " pipeline run-ahead + "
                  << (x.gradient_fragmentation_bytes > 0 ? format_bytes(x.gradient_fragmentation_bytes) + " freed gradients + "
                                                         : std::string())
                  << format_bytes(r.reserved_extra.constant_bytes)
                  << " constant (fitted; host pace " << to_string(r.host_pace)
                  << (r.allocator_flush      ? ", the allocator's flush"
                      : r.host_pace_expected ? ", expected from the layout"
                                             : ", --host-pace")
                  << wait_odds(r)
                  << (r.unsure_pace_mix ? "; unsure, so both paces' pools weighted by those odds" : "")
                  << "), rounded up to 2 MiB segments\n";
    if (r.allocator_flush && r.reserved_running_ahead_bytes)
        std::cout << "  allocator flush:     running ahead, the pool would reach "
                  << format_bytes(*r.reserved_running_ahead_bytes)
                  << " and outgrow the device; PyTorch's allocator then frees its cache and the host waits,\n"
                  << "                       so the reserved peak is the waiting pace's; the device need below stays the "
                     "running-ahead one (a step that lives on the flush is not called a fit)\n";
    std::cout << "outside PyTorch:       " << format_bytes(r.non_pytorch_bytes) << " (CUDA context + NCCL)\n";
    if (r.verdict_margin_bytes > 0)
        std::cout << "verdict margin:        " << format_bytes(r.verdict_margin_bytes)
                  << " (fitted on measured fit/OOM outcomes)\n";
    std::cout << "device need:           " << format_bytes(r.device_peak_bytes);
    if (r.need_at_range_top)
        std::cout << " (host running ahead, judged at the top of its range: that pool + outside PyTorch)\n";
    else
        std::cout << (r.allocator_flush ? " (running-ahead pool + outside PyTorch" : " (reserved + outside PyTorch")
                  << (r.verdict_margin_bytes > 0 ? " + margin)\n" : ")\n");
    const std::string_view verdict = memory_verdict(r);
    if (r.device_peak_low_bytes && r.device_peak_high_bytes && *r.device_peak_low_bytes != *r.device_peak_high_bytes)
        std::cout << "device need range:     " << format_bytes(*r.device_peak_low_bytes) << " (host waits, every freed block reused) to "
                  << format_bytes(*r.device_peak_high_bytes) << " (host runs ahead, fragmentation at its 95th percentile)\n";
    if (verdict == "fits")
        std::cout << "verdict:               FITS, "
                  << format_bytes(free_bytes(r, profile))
                  << " free of " << format_bytes(r.capacity_bytes)
                  << (r.device_peak_high_bytes ? " (device need, top of the range)\n" : " (device need)\n");
    else if (verdict == "may-not-fit")
        std::cout << "verdict:               MAY NOT FIT: " << format_bytes(r.capacity_bytes)
                  << " lies inside the range; it fits only if the host waits for the GPU or the pool fragments less\n";
    else
        std::cout << "verdict:               DOES NOT FIT, device need over by "
                  << format_bytes(r.device_peak_bytes - r.capacity_bytes) << " ("
                  << format_bytes(r.device_peak_bytes) << " > " << format_bytes(r.capacity_bytes) << ")\n";
}

void print_table(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan, const MemoryReport& r,
                 bool show_timeline, const FrameworkProfile& profile) {
    const bool reserved_verdict = profile.verdict_on_reserved;
    const double cap = static_cast<double>(r.capacity_bytes);
    std::cout << "# preflight memory: " << model.name << " on " << gpu.display_name << " ("
              << format_bytes(gpu.memory_bytes) << " per GPU)\n"
              << "# plan: " << to_flags(plan) << (r.compiled_loss ? " --compiled-loss" : "")
              << (profile.name != "megatron" ? " --framework " + profile.name : "") << "\n"
              << "# model: " << format_count(r.params.total) << " parameters (" << group_digits(r.params.total)
              << ")";
    if (r.params.active != r.params.total) std::cout << ", " << format_count(r.params.active) << " active per token";
    std::cout << "; this GPU owns " << group_digits(r.params_on_gpu) << " before ZeRO sharding\n";
    if (plan.pp > 1)
        std::cout << "# most loaded pipeline stage: " << r.pipeline_stage << " ("
                  << count_of(r.layers_on_stage, "layer", "layers") << ", " << count_of(r.micro_batches_in_flight, "micro-batch", "micro-batches") << " in flight)\n";
    std::cout << "# per GPU, steady state, at the peak phase\n\n";

    Table t;
    t.header = {"category", "bytes", "size", "of capacity", ""};
    t.units = {"", "[B]", "[binary]", "[%]", ""};
    for (const auto& c : memory_categories()) {
        const std::int64_t bytes = r.at_peak.*c.member;
        t.rows.push_back({std::string(c.key), group_digits(bytes), format_bytes(bytes),
                          percent(static_cast<double>(bytes) / cap), bar(static_cast<double>(bytes) / cap, 30)});
    }
    t.rows.push_back({"peak", group_digits(r.peak_bytes), format_bytes(r.peak_bytes),
                      percent(static_cast<double>(r.peak_bytes) / cap), bar(static_cast<double>(r.peak_bytes) / cap, 30)});
    std::cout << t.render() << "\n";

    std::cout << "peak phase:            " << describe(r.peak_phase) << "\n";
    std::cout << "first step peak:       " << format_bytes(r.first_step_peak_bytes) << " at "
              << describe(r.first_step_peak_phase)
              << (r.first_step_peak_phase.kind == PhaseKind::optimizer_step
                      ? " (the optimizer moments allocated in it)\n"
                      : " (optimizer moments not yet allocated)\n");
    std::cout << "activations per layer: " << format_bytes(r.activations_per_layer_bytes) << " ("
              << group_digits(r.activations_per_layer_bytes) << " B, one micro-batch, recompute "
              << to_string(plan.recompute) << ")\n";
    print_extension_memory_lines(std::cout, model, plan, r, profile);  // fine-tuning, offload, schedules, cp, ep
    if (reserved_verdict) {
        print_reserved(r, profile);
    } else if (r.fits)
        std::cout << "verdict:               FITS, " << format_bytes(free_bytes(r, profile))
                  << " free of " << format_bytes(r.capacity_bytes) << "\n";
    else
        std::cout << "verdict:               DOES NOT FIT, over by " << format_bytes(r.peak_bytes - r.capacity_bytes)
                  << " (" << format_bytes(r.peak_bytes) << " > " << format_bytes(r.capacity_bytes) << ")\n";

    if (show_timeline) {
        std::cout << "\n# timeline of one steady-state step (the micro-batch that reaches the peak)\n";
        Table tl;
        tl.header = {"phase", "total", "activations", "logits", "buffers", ""};
        tl.units = {"", "[binary]", "[binary]", "[binary]", "[binary]", ""};
        for (const auto& e : r.timeline_steady)
            tl.rows.push_back({describe(e.phase), format_bytes(e.bytes.total()), format_bytes(e.bytes.activations),
                               format_bytes(e.bytes.logits_and_loss), format_bytes(e.bytes.buffers),
                               bar(static_cast<double>(e.bytes.total()) / cap, 30)});
        std::cout << tl.render();
    }
}

void print_csv(const MemoryReport& r) {
    std::cout << "category,bytes,fraction_of_capacity\n";
    const double cap = static_cast<double>(r.capacity_bytes);
    for (const auto& c : memory_categories())
        std::cout << c.key << "," << r.at_peak.*c.member << "," << static_cast<double>(r.at_peak.*c.member) / cap << "\n";
    std::cout << "peak," << r.peak_bytes << "," << static_cast<double>(r.peak_bytes) / cap << "\n";
    std::cout << "capacity," << r.capacity_bytes << ",1\n";
    std::cout << "activations_per_layer," << r.activations_per_layer_bytes << ","
              << static_cast<double>(r.activations_per_layer_bytes) / cap << "\n";
    // The verdict's own figures, after the rows above (kept in their order): the device need, the
    // ends of its range (empty cells where the profile gives none) and the verdict, as in JSON.
    std::cout << "device_peak," << r.device_peak_bytes << "," << static_cast<double>(r.device_peak_bytes) / cap << "\n";
    const auto range_row = [&](const char* key, const std::optional<std::int64_t>& end) {
        std::cout << key << ",";
        if (end) std::cout << *end << "," << static_cast<double>(*end) / cap;
        else std::cout << ",";
        std::cout << "\n";
    };
    range_row("device_peak_range_low", r.device_peak_low_bytes);
    range_row("device_peak_range_high", r.device_peak_high_bytes);
    std::cout << "fits," << (r.fits ? 1 : 0) << ",\n";
    std::cout << "verdict," << memory_verdict(r) << ",\n";
}

// The memory figures hold whatever the GPU, but a recipe it publishes no peak for (fp8 on an
// A100: no FP8 tensor cores) is one `plan` does not search and `run` does not execute there.
void warn_unsearched_recipe(const GpuSpec& gpu, Precision precision) {
    if (!compute_peak_flops_per_s(gpu, precision))
        std::cerr << "preflight: warning: " << gpu.name << " publishes no dense " << to_string(precision)
                  << " peak (null in its spec: no such tensor-core mode, or no published figure), so `plan` does not "
                     "search this recipe on it; the memory figures are what the plan would hold on a GPU that runs it\n";
}

// The plan's settings that define the job rather than its layout, where not at their default
// (the optimizer, attention, dropout, fine-tuning and its adapters, offload, cp, ep, ...): `plan`
// keeps them as given, so it searches this job.
std::string job_flags(const Plan& p) {
    static const std::set<std::string_view> layout{"seq", "mbs", "grad_acc", "dp", "tp", "pp", "sp", "zero",
                                                   "recompute", "precision", "pp_schedule", "vpp",
                                                   "pp_first_stage_layers", "pp_last_stage_layers", "fp8_param_gather"};
    std::string s;
    for (const PlanField& f : plan_fields()) {
        if (layout.count(f.key) || !field_shown(f, Shown::non_default, p)) continue;
        (s += ' ') += f.flag;
        if (f.type != FieldType::toggle) (s += ' ') += field_text(f, p);
    }
    // plan takes --fp8-param-gather only with the distributed optimizer pinned (fp8_params.cpp).
    if (p.fp8_param_gather) s += " --zero 1 --fp8-param-gather";
    return s;
}

// The next step a user needs after "does not fit": the search over layouts for the same job,
// which also names the smallest change that would fit when none does. The recipe is kept
// unless the GPU publishes no peak for it (`plan` would refuse the pin).
void print_next_step(const std::string& model, const GpuSpec& gpu, const std::string& gpu_name, const Plan& p,
                     const MemoryOptions& opt) {
    SearchRequest same;
    same.memory = opt;  // --framework, --compiled-loss, --host-pace, --overhead-bytes (request_flags)
    std::cout << "# next: preflight plan --model " << shell_word(model) << " --gpu " << shell_word(gpu_name)
              << " --gpus " << p.gpus()
              << " --gbs-tokens " << p.global_batch_tokens() << " --seq " << p.seq
              << (compute_peak_flops_per_s(gpu, p.precision) ? " --precision " + std::string(to_string(p.precision)) : "")
              << job_flags(p) << request_flags(same)
              << "   # searches dp/tp/pp, ZeRO, recompute and micro-batch for this batch on these GPUs\n";
}

}  // namespace

int run_memory(const PlanFlags& flags_in, bool show_timeline, const std::string& plan_file, const CLI::App& sub) {
    PlanFlags flags = flags_in;  // a --plan file may name the framework profile
    if (show_timeline && flags.format == "csv")
        throw InputError("--timeline", "has no CSV form: use --format table, or json (which always holds the timeline)");
    const auto dir = data_dir_of(flags.data_dir);
    std::string model_name = flags.model, gpu_name = flags.gpu;
    Plan requested = flags.to_plan();
    std::optional<nlohmann::json> file_model;  // a --from config's model shape the plan file carries
    if (!plan_file.empty())
        requested = plan_from_file(plan_file, sub, requested, model_name, gpu_name, &flags.framework, &file_model);
    MemoryOptions opt;
    opt.profile = framework_profile(flags);
    std::optional<ModelConfig> model_read;
    std::optional<ResolvedPlan> resolved;
    std::optional<GpuSpec> gpu_read;
    try {
        model_read = plan_file.empty() ? load_plan_model(flags, dir) : plan_file_model_config(model_name, file_model, dir);
        resolved.emplace(requested, *model_read);  // defaults filled and validated once
        gpu_read = gpu_for_profile(load_gpu(gpu_name, dir), opt.profile);
    } catch (const InputError& e) {
        throw blame_plan_file(plan_file, sub, e);
    }
    const ModelConfig& model = *model_read;
    const GpuSpec& gpu = *gpu_read;
    const ResolvedPlan& plan = *resolved;
    opt.overhead_bytes = flags.overhead_bytes;
    opt.host_pace = host_pace(flags);
    opt.compiled_loss = flags.compiled_loss;
    opt.tp_comm_overlap = flags.tp_comm_overlap && opt.profile.name == "megatron";  // TE's userbuffers
    opt.timeline = true;
    const MemoryReport r = evaluate_memory(model, gpu, plan, opt);
    warn_unsearched_recipe(gpu, plan.plan().precision);
    if (const std::string why = pipeline_split_problem(opt.profile, model, plan.plan()); !why.empty())
        std::cerr << "preflight: warning: " << why << "; planned with the remainder on the first stages\n";
    if (flags.format == "json")
        std::cout << memory_document(model, gpu, plan, r, opt.profile.name).dump(2) << "\n";
    else if (flags.format == "csv")
        print_csv(r);
    else
        print_table(model, gpu, plan, r, show_timeline, opt.profile);
    const bool fits = memory_verdict(r) == "fits";
    if (!fits && flags.format == "table" && !flags.model_config)
        print_next_step(model_name, gpu, gpu_name, plan, opt);
    return fits ? kExitOk : kExitDoesNotFit;
}

}  // namespace preflight::cli

namespace preflight::cli {

Command add_memory_command(CLI::App& app) {
    struct State {
        PlanFlags flags;
        FromFlags from;
        std::string plan_file;
        bool timeline = false;
    };
    auto state = std::make_shared<State>();
    auto* sub = app.add_subcommand(
        "memory", "Per-GPU memory of one training step for a plan: each category, the peak and its phase");
    add_plan_flags(*sub, state->flags);
    add_framework_flag(*sub, state->flags);
    add_from_flags(*sub, state->from, true);
    add_plan_file_option(*sub, state->plan_file);
    sub->add_option("--format", state->flags.format, "table (default) | json | csv")
        ->check(CLI::IsMember({"table", "json", "csv"}));
    sub->add_flag("--timeline", state->timeline, "Also print the phase-by-phase timeline of one step (table format)");
    sub->footer(
        "Example:\n  preflight memory --model llama-3-8b --gpu h100-sxm-80gb --zero 1 --dp 8 --seq 4096 "
        "--recompute selective\n"
        "  preflight memory --from train_configs/llama3_8b.toml --gpus 64   (a torchtitan job config)\n"
        "  preflight plan --model llama-3-8b --gpus 8 --gbs-tokens 4194304 --emit preflight > p.json\n"
        "  preflight memory --plan p.json --timeline   (the recommendation, phase by phase)\n"
        "Exits 0 when the verdict is FITS, 1 when it is not (the peak, or under nanotron and torchtitan the "
        "device need, over the GPU's memory, or may be: MAY NOT FIT), 2 on bad input (the message names the flag, "
        "file or key), 4 on an internal error.");
    return {sub, [state, sub] {
                const FromApplied applied = apply_from(state->from, *sub, state->flags, std::nullopt, std::cerr);
                return blaming_from_file(applied, [&] {
                    return run_memory(state->flags, state->timeline, state->plan_file, *sub);
                });
            }};
}

}  // namespace preflight::cli
