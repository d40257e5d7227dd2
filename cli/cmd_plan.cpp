// `preflight plan`: search the plans for N GPUs and a global batch, rank them by
// predicted tokens/s, explain the rejected families, export the recommendation.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "config_from.hpp"
#include "emit_note.hpp"
#include "format.hpp"
#include "plan_json.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/catalog.hpp"
#include "preflight/planner/checked.hpp"
#include "preflight/planner/emit.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/extensions.hpp"
#include "preflight/planner/limits.hpp"
#include "preflight/planner/lr_advice.hpp"
#include "preflight/planner/report.hpp"
#include "preflight/planner/search.hpp"

namespace preflight::cli {

namespace {

struct PlanCommandState {
    PlanFlags flags;
    std::int64_t gpus = 0;
    std::int64_t gbs_tokens = 0;
    double headroom = 0.05;
    double batch_tolerance = 0.05;
    int top_k = 10;
    std::int64_t max_plans = limits::kDefaultSearchPlans;
    std::string emit;
    std::optional<std::int64_t> train_tokens;
    std::optional<double> base_lr;
    std::optional<double> base_batch;
    std::string attention_flops = "full";
    std::optional<std::int64_t> host_memory;
    bool tp_comm_overlap = false;   // --tp-comm-overlap
    bool overlap_p2p_comm = false, no_overlap_p2p_comm = false;  // the flags, or the profile's default (take_from)
    FromFlags from;                 // --from, --from-format, --verbose
    std::optional<std::int64_t> from_global_sequences;  // the global batch a --from config names
};

std::string pct(double f, int digits = 1) { return fixed(100.0 * f, digits) + " %"; }

SearchRequest make_request(const PlanCommandState& st, const ModelConfig& model) {
    const PlanFlags& f = st.flags;
    SearchRequest r;
    r.gpus = st.gpus;
    r.gbs_tokens = st.gbs_tokens;
    r.seq = f.to_plan().seq;  // 0: the model's default
    r.headroom = st.headroom;
    r.batch_tolerance = st.batch_tolerance;
    r.top_k = st.top_k;
    r.max_plans = st.max_plans;
    f.pin(r.pins);
    r.host_memory_bytes = st.host_memory;
    r.memory.overhead_bytes = f.overhead_bytes;
    r.memory.profile = framework_profile(f);
    r.memory.host_pace = host_pace(f);
    r.memory.compiled_loss = r.throughput.compiled_loss = f.compiled_loss;
    r.throughput.attention_flops = *parse_attention_flops(st.attention_flops);
    // take_from sets overlap_p2p_comm where the profile overlaps by default: no request then.
    const bool p2p_flag = st.no_overlap_p2p_comm || (st.overlap_p2p_comm && !r.memory.profile.p2p_overlap_by_default);
    if ((st.tp_comm_overlap || p2p_flag) && f.framework != "megatron")
        throw InputError(st.tp_comm_overlap ? "--tp-comm-overlap" : st.no_overlap_p2p_comm ? "--no-overlap-p2p-comm" : "--overlap-p2p-comm",
                         "Megatron-Core's communication overlap: --framework megatron only, got '" + f.framework + "'");
    r.throughput.tp_comm_overlap = r.memory.tp_comm_overlap = st.tp_comm_overlap;
    r.throughput.p2p_overlap = st.overlap_p2p_comm;
    // DeepSpeed's PipelineEngine asserts ZeRO stage < 2 (deepspeed/runtime/pipe/engine.py):
    // a recommendation emitted for it must not combine pp > 1 with ZeRO-2/3.
    if (st.emit == "deepspeed") r.max_zero_with_pp = 1;
    (void)model;
    return r;
}

// The header lines: model, GPUs, target batch, memory limit, search size, constants' source.
void print_header(const PlanCommandState& st, const ModelConfig& model, const GpuSpec& gpu, const SearchRequest& req,
                  const SearchResult& res, double search_s) {
    const ParamCounts pc = count_params(model);
    const std::int64_t node = gpu.gpus_per_node;
    std::cout << "# preflight plan: " << model.name << " (" << format_count(pc.total) << " parameters";
    if (pc.active != pc.total) std::cout << ", " << format_count(pc.active) << " active";
    std::cout << ") on " << req.gpus << " x " << gpu.display_name << " ("
              << (req.gpus + node - 1) / node << " node" << ((req.gpus + node - 1) / node == 1 ? "" : "s") << " of "
              << node << ")\n";
    // Sequences in the target: a whole number where seq divides it, else to one decimal.
    const std::string sequences = req.gbs_tokens % res.seq == 0
                                      ? group_digits(req.gbs_tokens / res.seq)
                                      : fixed(static_cast<double>(req.gbs_tokens) / static_cast<double>(res.seq), 1);
    std::cout << "# target: " << group_digits(req.gbs_tokens) << " tokens per step at seq " << res.seq << " ("
              << sequences << (sequences == "1" ? " sequence" : " sequences") << "); memory limit " << format_bytes(res.limit_bytes) << " = " << pct(1 - req.headroom, 0)
              << " of " << format_bytes(gpu.memory_bytes) << " (--headroom " << req.headroom << ")"
              << (req.host_memory_bytes ? "; host memory " + format_bytes(*req.host_memory_bytes) + " per node" : "") << "\n";
    std::cout << "# searched " << count_of(res.plans_evaluated, "plan", "plans") << " (" << group_digits(res.plans_fitting)
              << " fit" << (res.plans_ruled_out > 0 ? ", " + group_digits(res.plans_ruled_out) + " larger ones not judged" : "")
              << ") in " << format_seconds(search_s)
              << "; ranked by predicted tokens/s less up to 1 % for memory (near-ties go to more headroom)"
              << "\n# MFU/HFU against the dense peak of each plan's compute precision; attention FLOPs counted "
              << st.attention_flops << "\n";
    // The provenance's first clause ("fitted by ... from data set X", "uncalibrated defaults").
    const std::string& prov = gpu.efficiency.provenance;
    const bool own = req.memory.profile.name == "preflight-runtime" && gpu.runtime;
    std::cout << "# step-time constants: " << prov.substr(0, std::min(prov.find(':'), prov.find(" (")))
              << (own ? " (see the GPU spec's \"runtime\")\n" : " (see the GPU spec's \"efficiency\")\n");
    // --framework pytorch: Hugging Face's eager kernels counted one by one, their launches at a fitted host time.
    if (!res.candidates.empty() && res.candidates.front().throughput.host_dispatch)
        std::cout << "# host time per kernel: "
                  << fixed(res.candidates.front().throughput.host_dispatch->per_kernel_s * 1e6, 1) << " us"
                  << ", fitted on our PyTorch eager runs (validation/pytorch/fit_host.py): a layer waits for its "
                     "kernels' launches where they outlast its GPU work\n";
    if (res.mbs_capped)
        std::cout << "# micro-batches above " << limits::kMaxSearchMbs
                  << " sequences were not searched (limit kMaxSearchMbs); pin --mbs to evaluate one\n";
    std::cout << "\n";
}

// The ranked candidates, one row each; the last column is the memory the profile judges the fit
// on (judged_bytes: the device need under nanotron and torchtitan, else the peak).
void print_candidates(const SearchResult& res, const FrameworkProfile& profile) {
    const bool device_need = profile.verdict_on_reserved;
    Table t;
    t.header = {"rank", "dp", "tp", "pp", "sp", "zero", "recompute", "precision", "mbs", "grad_acc",
                "tokens/step", "batch", "step", "tokens/s", "tokens/s/GPU", "MFU", "HFU",
                device_need ? "device need" : "peak"};
    t.units = {"", "", "", "", "", "", "", "", "[seq]", "", "[tokens]", "[vs target]", "[s]", "[tokens/s]",
               "[tokens/s]", "[%]", "[%]", "[binary]"};
    int rank = 1;
    for (const Candidate& c : res.candidates) {
        const Plan& p = c.plan;
        t.rows.push_back({std::to_string(rank++), std::to_string(p.dp), std::to_string(p.tp), std::to_string(p.pp),
                          p.sp ? "on" : "off", std::to_string(p.zero), std::string(to_string(p.recompute)),
                          std::string(to_string(p.precision)), std::to_string(p.mbs), std::to_string(p.grad_acc),
                          group_digits(p.global_batch_tokens()),
                          c.batch_error == 0 ? "exact" : signed_batch_error(c.batch_error),
                          fixed(c.throughput.step_time_s, 3), group_digits(std::llround(c.throughput.tokens_per_s)),
                          group_digits(std::llround(c.throughput.tokens_per_s_per_gpu)),
                          fixed(100 * c.throughput.mfu, 1), fixed(100 * c.throughput.hfu, 1),
                          format_bytes(judged_bytes(c.memory, profile))});
    }
    // Plans that differ only in an extension (offload, ep, cp, a schedule) would look like
    // duplicate rows, and rows that share a layout one (all interleaved) like plain 1F1B ones: they
    // get a column where the flags differ or one of the shared ones is no fine-tuning flag (those,
    // pinned, are in the recommendation's plan line).
    const std::string first = res.candidates.empty() ? std::string() : extension_flags(res.candidates.front().plan);
    bool extensions_shown = false;
    for (const char* layout_flag : {"--offload", "--pp-schedule", "--cp", "--ep", "--pp-first", "--pp-last"})
        extensions_shown = extensions_shown || first.find(layout_flag) != std::string::npos;
    for (const Candidate& c : res.candidates) extensions_shown = extensions_shown || extension_flags(c.plan) != first;
    if (extensions_shown) {
        t.header.push_back("also");
        t.units.push_back("[flags]");
        for (std::size_t i = 0; i < res.candidates.size(); ++i) {
            const std::string ext = extension_flags(res.candidates[i].plan);
            t.rows[i].push_back(ext.empty() ? "-" : ext.substr(1));  // extension_flags starts with a space
        }
    }
    std::cout << t.render() << "\n";
}

// The recommendation (rank 1) with its step-time breakdown.
void print_recommendation(const PlanCommandState& st, const ModelConfig& model, const GpuSpec& gpu,
                          const SearchRequest& req, const SearchResult& res) {
    const Candidate& best = res.candidates.front();
    const Throughput& th = best.throughput;
    std::cout << "# recommendation (rank 1)\n";
    // With the request's framework and memory settings (request_flags): pastes into memory and run.
    std::cout << "plan:        " << to_flags(best.plan) << request_flags(req) << "\n";
    std::cout << "batch:       " << group_digits(best.plan.global_batch_tokens()) << " tokens per step = seq "
              << best.plan.seq << " x mbs " << best.plan.mbs << " x grad_acc " << best.plan.grad_acc << " x dp "
              << best.plan.dp;
    if (best.batch_error == 0)
        std::cout << " (exactly the target)\n";
    else
        std::cout << " (target " << group_digits(req.gbs_tokens) << ", rounded by " << signed_batch_error(best.batch_error)
                  << ")\n";
    // Only a pinned --mbs/--grad-acc lets a plan outside the tolerance through (docs/interface.md).
    if (std::abs(best.batch_error) > req.batch_tolerance)
        std::cout << "# warning: no plan within --batch-tolerance " << pct(req.batch_tolerance, 2)
                  << " of the target exists with the pinned micro-batch settings on " << count_of(req.gpus, "GPU", "GPUs")
                  << ": this batch is " << pct(std::abs(best.batch_error), 2) << (best.batch_error > 0 ? " over" : " under")
                  << " it; unpin --mbs/--grad-acc or change --gpus\n";
    std::cout << "step time:   " << format_seconds(th.step_time_s) << "; " << format_figure(th.tokens_per_s)
              << " tokens/s total, " << format_figure(th.tokens_per_s_per_gpu) << " per GPU\n";
    std::cout << "MFU / HFU:   " << pct(th.mfu) << " / " << pct(th.hfu) << " of "
              << format_rate(th.peak_flops_per_s / 1e12, "TFLOP/s") << " dense " << to_string(best.plan.precision)
              << " peak per GPU (model " << format_flops(th.model_flops_per_step) << ", hardware "
              << format_flops(th.hardware_flops_per_step) << " per step)\n";
    // With a pipeline, the stage that peaks (`preflight run --emulate-rank` walks its ranks).
    const std::string where = describe(best.memory.peak_phase) +
                              (best.plan.pp > 1 ? " of pipeline stage " + std::to_string(best.memory.pipeline_stage) : "");
    if (req.memory.profile.verdict_on_reserved)  // judged on the device need, as `memory` judges it
        std::cout << "memory:      device need " << format_bytes(best.memory.device_peak_bytes)
                  << " per GPU (reserved pool + outside PyTorch"
                  << (best.memory.verdict_margin_bytes > 0 ? " + margin" : "") << "; tensors peak at "
                  << format_bytes(best.memory.peak_bytes) << " at " << where << ") (limit "
                  << format_bytes(res.limit_bytes) << ")\n";
    else
        std::cout << "memory:      peak " << format_bytes(best.memory.peak_bytes) << " per GPU at " << where
                  << " (limit " << format_bytes(res.limit_bytes) << ")\n";
    // Plans that surely fit rank first: when the best may not, none surely does (as `memory` says).
    if (memory_verdict(best.memory) == "may-not-fit")
        std::cout << "# warning: MAY NOT FIT: the device need's range, " << format_bytes(*best.memory.device_peak_low_bytes)
                  << " to " << format_bytes(*best.memory.device_peak_high_bytes) << ", crosses the GPU's "
                  << format_bytes(best.memory.capacity_bytes) << "; no plan searched surely fits\n";
    print_extension_lines(std::cout, model, gpu, best.plan, best.memory, th, req.memory.profile);
    if (st.train_tokens) {
        const TrainingTime tt = training_time(th, *st.train_tokens);
        std::cout << "training:    " << group_digits(*st.train_tokens) << " tokens = " << group_digits(tt.steps)
                  << " steps, " << format_duration(tt.wall_s) << " wall, " << format_figure(tt.gpu_hours)
                  << " GPU-hours\n";
    }
    std::cout << "\n# step time of the recommendation\n";
    Table b;
    b.header = {"component", "time", "share", ""};
    b.units = {"", "[s]", "[%]", ""};
    for (const auto& s : th.breakdown)
        b.rows.push_back({s.name, fixed(s.seconds, 4), pct(s.seconds / th.step_time_s), bar(s.seconds / th.step_time_s, 30)});
    b.rows.push_back({"step", fixed(th.step_time_s, 4), "100.0 %", ""});
    std::cout << b.render();
}

// The rejected families and why; the smallest changes that would fit.
void print_rejections(const SearchResult& res) {
    if (!res.rejected.empty()) {
        std::cout << "\n# rejected families and why\n";
        Table r{{"family", "plans", "reason"}, {"", "[count]", ""}, {}, /*text_last=*/true};
        std::int64_t partial = 0, partial_plans = 0;
        for (const Rejection& j : res.rejected) {
            if (j.others_fit) {  // only its larger micro-batches are over the limit
                ++partial;
                partial_plans += j.plans;
                continue;
            }
            r.rows.push_back({j.family, j.plans ? group_digits(j.plans) : "-", j.reason});
        }
        if (!r.rows.empty()) std::cout << r.render();
        if (partial > 0)
            std::cout << "# and " << count_of(partial, "family", "families") << " whose smaller micro-batches fit ("
                      << count_of(partial_plans, "larger plan", "larger plans") << " over the limit; listed under --format json)\n";
    }
    if (!res.suggestions.empty()) {
        std::cout << "\n# the smallest change that would fit (first is smallest)\n";
        for (const auto& s : res.suggestions) std::cout << "  " << s << "\n";
    }
}

void print_lr_advice(const SearchRequest& req, const std::optional<LrAdvice>& lr) {
    if (!lr) return;
    std::cout << "\n# learning rate for " << group_digits(static_cast<std::int64_t>(lr->batch_tokens))
              << " tokens per step from " << lr->base_lr << " at " << group_digits(static_cast<std::int64_t>(lr->base_batch_tokens))
              << " tokens per step (rules of thumb, not guarantees)\n";
    std::cout << "linear rule:       " << lr->linear.lr << "   [" << lr->linear.source << "]\n";
    std::cout << "square-root rule:  " << lr->square_root.lr << "   [" << lr->square_root.source << "]\n";
    std::cout << "suggested rule:    " << lr->preferred << " (for " << to_string(req.pins.optimizer.value_or(Optimizer::adamw))
              << ")\n";
    std::cout << "warm-up:           " << group_digits(lr->warmup_steps) << " steps   [" << lr->warmup_source << "]\n";
    std::cout << "# " << lr->caveat << "\n";
    for (const std::string& w : lr->warnings) std::cout << "# warning: " << w << "\n";
}

void print_table(const PlanCommandState& st, const ModelConfig& model, const GpuSpec& gpu, const SearchRequest& req,
                 const SearchResult& res, double search_s, const std::optional<LrAdvice>& lr) {
    print_header(st, model, gpu, req, res, search_s);
    if (res.candidates.empty() && res.plans_evaluated == 0 && !res.rejected.empty()) {
        std::cout << "NO PLAN RUNS: the search refused every plan of " << count_of(req.gpus, "GPU", "GPUs")
                  << " before judging its memory (the reasons are under the rejected families).\n";
    } else if (res.candidates.empty()) {
        std::cout << "NOTHING FITS: no plan of " << count_of(req.gpus, "GPU", "GPUs") << " reaches the batch under "
                  << format_bytes(res.limit_bytes) << " per GPU"
                  << (req.host_memory_bytes ? " and " + format_bytes(*req.host_memory_bytes) + " of host memory per node" : "") << ".\n";
    } else {
        print_candidates(res, req.memory.profile);
        double max_mfu = 0;
        for (const Candidate& c : res.candidates) max_mfu = std::max({max_mfu, c.throughput.mfu, c.throughput.hfu});
        std::cout << mfu_above_peak_note(max_mfu, st.attention_flops == "full");
        print_recommendation(st, model, gpu, req, res);
    }
    print_rejections(res);
    print_lr_advice(req, lr);
}

// Progress on stderr once a search has run for more than a second, then every second.
std::function<void(std::int64_t, std::int64_t, std::int64_t)> search_progress(std::int64_t max_plans) {
    const auto started = std::chrono::steady_clock::now();
    auto last = started;
    return [started, last, max_plans](std::int64_t done, std::int64_t total, std::int64_t plans) mutable {
        const auto now = std::chrono::steady_clock::now();
        if (now - started < std::chrono::seconds(1) || now - last < std::chrono::seconds(1)) return;
        last = now;
        std::cerr << "preflight plan: " << group_digits(plans) << " plans judged of at most " << group_digits(max_plans)
                  << " (--max-plans); this search (variant): " << done << " of " << total << " parallel layouts; "
                  << std::chrono::duration_cast<std::chrono::seconds>(now - started).count() << " s\n";
    };
}

// --emit: the recommendation in a framework's form (exit 1 when nothing fits).
int emit_recommendation(const PlanCommandState& st, const ModelConfig& model, const GpuSpec& gpu,
                        const SearchResult& res) {
    if (res.candidates.empty() && res.plans_evaluated == 0 && !res.rejected.empty()) {
        std::cerr << "preflight: no plan runs under --framework " << st.flags.framework << ", nothing to emit: "
                  << res.rejected.front().reason << " (`plan` without --emit lists every refused family)\n";
        for (const auto& s : res.suggestions) std::cerr << "# " << s << "\n";
        return kExitDoesNotFit;
    }
    if (res.candidates.empty()) {
        std::cerr << "preflight: nothing fits, nothing to emit\n";
        for (const auto& s : res.suggestions) std::cerr << "# " << s << "\n";
        return kExitDoesNotFit;
    }
    const Candidate& best = res.candidates.front();
    EmitOptions options;
    options.compiled_loss = st.flags.compiled_loss;
    options.tp_comm_overlap = st.tp_comm_overlap;
    // Ranked under a framework without the overlap, the launch keeps Megatron-LM's default overlap.
    options.overlap_p2p_comm = st.overlap_p2p_comm || !framework_profile(st.flags).p2p_overlap_by_default;
    options.framework = st.flags.framework;
    options.deepspeed_zero = framework_profile(st.flags).deepspeed_zero;
    options.model_reference = plan_file_model(st.flags);  // what --plan loads back (plan_flags.hpp), or the
    options.model_config = st.flags.model_config;         // shape a --from config spelt out, carried whole
    options.gpu_reference = st.flags.gpu;
    const Emitted e = emit_plan(*parse_emit_format(st.emit), model, gpu, best.plan, options);
    std::cout << e.text;
    std::cerr << "# preflight plan: emitted the recommendation (" << to_flags(best.plan) << ")\n";
    for (const auto& w : e.warnings) std::cerr << "# warning: " << w << "\n";
    // Another framework's ranking may pick what this one holds otherwise or refuses (the runtime,
    // whose plan JSON `preflight run` reads: rowwise fp8 scaling, a GPipe schedule).
    std::cerr << emit_framework_note(model, gpu, best.plan, st.flags.framework,
                                     st.emit == "preflight" ? "preflight-runtime" : st.emit);
    return kExitOk;
}

// The JSON document of `plan --format json` (docs/interface.md).
nlohmann::json plan_document(const PlanCommandState& st, const ModelConfig& model, const GpuSpec& gpu,
                             const SearchRequest& req, const SearchResult& res, double search_s,
                             const std::optional<LrAdvice>& lr) {
    const ParamCounts pc = count_params(model);
    nlohmann::json cands = nlohmann::json::array();
    int rank = 1;
    for (const Candidate& c : res.candidates) {
        nlohmann::json j{{"rank", rank++},
                         {"plan", plan_to_json(c.plan)},
                         {"memory", memory_to_json(c.memory)},
                         {"throughput", throughput_json(c.throughput)},
                         {"batch",
                          {{"target_tokens", req.gbs_tokens},
                           {"tokens", c.plan.global_batch_tokens()},
                           {"rounding", c.batch_error}}}};
        if (st.train_tokens) {
            const TrainingTime tt = training_time(c.throughput, *st.train_tokens);
            j["training"] = {
                {"train_tokens", *st.train_tokens}, {"steps", tt.steps}, {"wall_s", tt.wall_s}, {"gpu_hours", tt.gpu_hours}};
        }
        cands.push_back(std::move(j));
    }
    nlohmann::json rej = nlohmann::json::array();
    for (const Rejection& r : res.rejected)
        rej.push_back({{"plan", plan_to_json(r.plan)},
                       {"family", r.family},
                       {"reason", r.reason},
                       {"plans", r.plans},
                       // N/A unless the family was rejected for memory (its representative's peak).
                       {"peak_bytes", r.peak_bytes > 0 ? nlohmann::json(r.peak_bytes) : nlohmann::json(nullptr)},
                       {"others_fit", r.others_fit}});
    nlohmann::json suggested = nlohmann::json::array();
    for (const SuggestedPlan& s : res.suggested)
        suggested.push_back({{"change", s.change}, {"plan", plan_to_json(s.plan)}, {"judged_bytes", s.judged_bytes},
                             {"flags", s.flags}});
    nlohmann::json doc{
        {"schema_version", kSchemaVersion},
        {"model", {{"name", model.name}, {"params", pc.total}, {"params_active", pc.active}}},
        {"gpu", {{"name", gpu.name}, {"memory_bytes", gpu.memory_bytes}}},
        {"request",
         {{"gpus", req.gpus},
          {"framework", req.memory.profile.name},
          {"gbs_tokens", req.gbs_tokens},
          {"seq", res.seq},
          {"headroom", req.headroom},
          {"limit_bytes", res.limit_bytes},
          {"batch_tolerance", req.batch_tolerance},
          {"max_plans", req.max_plans},
          {"attention_flops", st.attention_flops},
          {"tp_comm_overlap", st.tp_comm_overlap},
          {"overlap_p2p_comm", st.overlap_p2p_comm},
          {"host_memory_bytes", st.host_memory ? nlohmann::json(*st.host_memory) : nlohmann::json(nullptr)}}},
        {"search",
         {{"plans_evaluated", res.plans_evaluated},
          {"plans_fitting", res.plans_fitting},
          {"plans_ruled_out", res.plans_ruled_out},
          {"mbs_capped", res.mbs_capped},
          {"seconds", search_s}}},
        {"candidates", cands},
        {"rejected", rej},
        {"suggestions", res.suggestions},
        {"suggested", suggested}};
    if (lr) doc["lr_advice"] = lr_json(*lr);
    return doc;
}

}  // namespace

namespace {

// --from without --gbs-tokens: the config's global batch (or mbs * grad_acc * dp) at its sequence length.
std::int64_t from_batch_tokens(const PlanCommandState& st, const ModelConfig& model) {
    const Plan p = resolve_defaults(st.flags.to_plan(), model);
    const std::int64_t sequences = st.from_global_sequences.value_or(
        checked_mul(checked_mul(p.mbs, p.grad_acc, "--gbs-tokens"), p.dp, "--gbs-tokens"));
    if (sequences > limits::kMaxGlobalBatchTokens / p.seq)
        throw InputError("--gbs-tokens", "the config's global batch (" + std::to_string(sequences) + " sequences of " +
                                             std::to_string(p.seq) + " tokens) exceeds kMaxGlobalBatchTokens");
    return sequences * p.seq;
}

}  // namespace

int run_plan(PlanCommandState& st) {
    const auto dir = data_dir_of(st.flags.data_dir);
    const ModelConfig model = load_plan_model(st.flags, dir);
    if (st.gbs_tokens == 0) st.gbs_tokens = from_batch_tokens(st, model);
    SearchRequest req = make_request(st, model);
    const GpuSpec gpu = gpu_for_profile(load_gpu(st.flags.gpu, dir), req.memory.profile);
    req.progress = search_progress(req.max_plans);
    std::optional<LrAdvice> lr;
    if (st.base_lr || st.base_batch) {
        if (!st.base_lr) throw InputError("--base-lr", "needed with --base-batch");
        if (!st.base_batch) throw InputError("--base-batch", "needed with --base-lr");
        lr = lr_advice(*st.base_lr, *st.base_batch, static_cast<double>(st.gbs_tokens),
                       req.pins.optimizer.value_or(Optimizer::adamw));
    }
    if (st.train_tokens && *st.train_tokens <= 0) throw InputError("--train-tokens", "must be a positive integer");

    const auto t0 = std::chrono::steady_clock::now();
    const SearchResult res = search_plans(model, gpu, req);
    const double search_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const bool found = !res.candidates.empty();

    if (!st.emit.empty()) return emit_recommendation(st, model, gpu, res);
    if (st.flags.format == "json")
        std::cout << plan_document(st, model, gpu, req, res, search_s, lr).dump(2) << "\n";
    else
        print_table(st, model, gpu, req, res, search_s, lr);
    return found ? kExitOk : kExitDoesNotFit;
}

namespace {

// --from: the GPU count, the global batch and the overlaps a config implies, where the flags give none;
// returns what the config set (its origins blame its refused values on it).
FromApplied take_from(PlanCommandState& st, const CLI::App& sub) {
    check_emit_flags(sub, st.emit, st.flags.format);
    const bool gpus_given = sub.count("--gpus") > 0;
    const FromApplied a =
        apply_from(st.from, sub, st.flags, gpus_given ? std::optional<std::int64_t>(st.gpus) : std::nullopt, std::cerr);
    if (!gpus_given) {
        if (!a.read || !a.gpus) throw InputError("--gpus", "is required (or --from a config that implies the GPU count)");
        st.gpus = *a.gpus;
    }
    st.from_global_sequences = a.global_batch_sequences;
    if (!a.read && sub.count("--gbs-tokens") == 0) throw InputError("--gbs-tokens", "is required");
    // --emit megatron|deepspeed|torchtitan|nanotron ranks by that framework's profile unless one is named.
    if (!a.read && !given_on(sub, "--framework") && profile_by_name(st.emit)) st.flags.framework = st.emit;
    st.tp_comm_overlap = st.tp_comm_overlap || (st.flags.tp_comm_overlap && sub.count("--tp-comm-overlap") == 0);
    // The profile's default overlap of the interleaved sends (Megatron-core's) unless turned off here or in --from.
    const bool by_default = framework_profile(st.flags).p2p_overlap_by_default;
    if (st.no_overlap_p2p_comm)
        st.overlap_p2p_comm = false;
    else if (!st.overlap_p2p_comm)
        st.overlap_p2p_comm = by_default && (!a.read || a.overlap_p2p_comm);
    return a;
}

// What bounds the search's output and work: --top-k, --max-plans.
void add_search_bounds(CLI::App& sub, PlanCommandState& st, const char* group) {
    sub.add_option("--top-k", st.top_k, "Number of ranked plans to print (1 to 100, kMaxTopK; default 10)")
        ->transform(count_at_most(limits::kMaxTopK, "kMaxTopK"))
        ->group(group);
    sub.add_option("--max-plans", st.max_plans,
                   "Most plans the request may judge on memory, over the search and its \"nothing fits\" "
                   "suggestions (default 500,000 or 500K: 2 s or less; at most 10,000,000, kMaxSearchPlans). A request "
                   "that needs more is refused (exit 2) naming the pins that narrow it")
        ->transform(count_at_most(limits::kMaxSearchPlans, "kMaxSearchPlans", Suffix::read))
        ->group(group);
}

// What the plan adds beside the search: training time, learning-rate advice, host memory for offload.
void add_advice_options(CLI::App& sub, PlanCommandState& st, const char* g) {
    sub.add_option("--train-tokens", st.train_tokens, "Also estimate wall time and GPU-hours to train this many tokens (15T, 1.5e13)")
        ->transform(count_in_any_notation(Suffix::read))
        ->group(g);
    sub.add_option("--base-lr", st.base_lr, "Learning rate known to work at --base-batch (prints LR scaling advice)")
        ->check(finite_real())
        ->group(g);
    sub.add_option("--base-batch", st.base_batch,
                   "Global batch in tokens that --base-lr was tuned for (a whole number, 1 to 2^40; 1e6, 1M, 4Mi allowed)")
        ->type_name("TOKENS")
        ->transform(count_at_most(limits::kMaxGlobalBatchTokens, "kMaxGlobalBatchTokens", Suffix::read))
        ->group(g);
    sub.add_option("--host-memory", st.host_memory,
                   "Host (CPU) memory per node available for offloaded states, in bytes (2Ti, 1.5T, 2.2e12); with it "
                   "the search also weighs --offload optimizer/params and rejects plans needing more")
        ->transform(count_in_any_notation(Suffix::read))
        ->group(g);
}

}  // namespace

Command add_plan_command(CLI::App& app) {
    auto st = std::make_shared<PlanCommandState>();
    auto* sub = app.add_subcommand(
        "plan", "Search plans for N GPUs and a global batch: ranked by predicted tokens/s, with MFU/HFU, step time, "
                "rejected families, exports");
    add_plan_flags(*sub, st->flags, true);
    add_framework_flag(*sub, st->flags);
    auto* g = "Search";
    sub->add_option("--gpus", st->gpus, "Number of GPUs (dp * tp * pp * cp = N; searched tp stays inside a node, a pinned --tp may span nodes; at most 2^20)")
        ->transform(count_at_most(limits::kMaxGpus, "kMaxGpus"))
        ->group(g);
    sub->add_option("--gbs-tokens", st->gbs_tokens,
                    "Target global batch in tokens (seq * mbs * grad_acc * dp): 4194304, 4.194304e6 or 4Mi (Ki Mi Gi Ti: "
                    "powers of 2; k/K M G/B T: of 10); at most 2^40")
        ->transform(count_at_most(limits::kMaxGlobalBatchTokens, "kMaxGlobalBatchTokens", Suffix::read))
        ->group(g);
    add_from_flags(*sub, st->from, false);
    sub->add_option("--headroom", st->headroom,
                    "Keep plans whose judged memory (the peak; under nanotron and torchtitan the device need) <= (1 - headroom) * "
                    "GPU memory (a fraction in [0, 1), default 0.05)")
        ->check(finite_real())->group(g);
    sub->add_option("--batch-tolerance", st->batch_tolerance,
                    "Largest relative batch rounding a dp degree may need (fraction, default 0.05). With --mbs or "
                    "--grad-acc pinned, a dp that cannot come within it is still searched, its plans ranked after "
                    "those within it")
        ->check(finite_real())
        ->group(g);
    add_search_bounds(*sub, *st, g);
    sub->add_option("--format", st->flags.format, "table (default) | json")
        ->check(CLI::IsMember({"table", "json"}))
        ->group(g);
    sub->add_option("--emit", st->emit,
                    "Print only the recommendation as deepspeed (ds_config JSON) | megatron (arguments) | "
                    "torchtitan (TOML) | nanotron (YAML) | preflight (plan JSON for `preflight run`) | peft "
                    "(LoraConfig JSON + Trainer settings, with --finetune lora/qlora)")
        ->check(CLI::IsMember({"deepspeed", "megatron", "torchtitan", "nanotron", "preflight", "peft"}))
        ->group(g);
    add_advice_options(*sub, *st, g);
    sub->add_flag("--tp-comm-overlap", st->tp_comm_overlap,
                  "Megatron-Core with TransformerEngine userbuffers (Megatron's flag; on in Megatron-Bridge's Llama 70B/405B recipes): "
                  "with --sp each TP all-gather and reduce-scatter runs pipelined with its GEMM, so only what the GEMM does not cover "
                  "costs time; its 12 buffers (seq x mbs / cp x hidden) are held in memory. --framework megatron only")
        ->group(g);
    CLI::Option* p2p = sub->add_flag("--overlap-p2p-comm", st->overlap_p2p_comm,
                                     "Megatron-core's p2p overlap, on by default under --framework megatron as in "
                                     "Megatron-LM (a --from script's --no-overlap-p2p-communication turns it off): with "
                                     "--pp-schedule interleaved a chunk's pipeline sends run beside the next chunk's "
                                     "compute. --framework megatron only");
    p2p->group(g);
    sub->add_flag("--no-overlap-p2p-comm", st->no_overlap_p2p_comm,
                  "Judge interleaved plans with each pipeline send exposed (Megatron-LM's "
                  "--no-overlap-p2p-communication, which --emit megatron then writes at pp > 2)")
        ->excludes(p2p)
        ->group(g);
    sub->add_option("--attention-flops", st->attention_flops,
                    "Attention FLOPs in MFU/HFU: full (default; PaLM/Megatron convention, 4*s*q_width per token per "
                    "layer forward) | causal (half: what a causal kernel executes)")
        ->check(CLI::IsMember({"full", "causal"}))
        ->group(g);
    sub->footer(
        "Searches dp*tp*pp = N (tp within a node unless pinned), micro-batch and accumulation closest to --gbs-tokens, ZeRO 0-3,\n"
        "recompute none/selective/full, sequence parallelism and the recipes with fp32 master weights (pure bf16 only when\n"
        "--precision pins it, fp16-mixed only on GPUs without bf16); any plan flag pins its value.\n"
        "Step time: per-op roofline with the GPU spec's \"efficiency\" constants, fitted on measured runs where its\n"
        "provenance says so and uncalibrated defaults otherwise: the header's 'step-time constants:' line says which.\n"
        "Example:\n  preflight plan --model llama-3-8b --gpu h100-sxm-80gb --gpus 8 --gbs-tokens 4194304 --seq 4096\n"
        "Exits 1 when no plan fits (and prints the smallest change that would), 2 on bad input.");
    return {sub, [st, sub] {
                const FromApplied applied = take_from(*st, *sub);
                return blaming_from_file(applied, [&] { return run_plan(*st); });
            }};
}

}  // namespace preflight::cli
