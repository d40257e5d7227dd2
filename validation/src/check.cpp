#include "preflight/validation/check.hpp"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <fstream>

#include "preflight/planner/catalog.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/search.hpp"
#include "preflight/planner/report.hpp"
#include "preflight/planner/throughput.hpp"
#include "preflight/runtime/runtime.hpp"
#include "preflight/validation/spec_bounds.hpp"
#include "preflight/validation/stats.hpp"

namespace preflight::validation {

using nlohmann::json;
namespace fs = std::filesystem;

const Comparison* RunCheck::find(const std::string& quantity) const {
    for (const auto& c : comparisons)
        if (c.quantity == quantity) return &c;
    return nullptr;
}

ModelConfig load_recorded_model(const std::string& name, const fs::path& data_dir) {
    try {
        return load_model(name, data_dir);
    } catch (const InputError& e) {
        throw InputError("model.name", e.detail());
    }
}

bool is_run_report(const json& j) {
    const auto command = j.is_object() ? j.find("command") : j.end();
    // Its required keys are checked apart (check_run_report_fields): a run report without
    // "measured" is refused naming the key, never skipped as another kind of document.
    return command != j.end() && command->is_string() && command->get<std::string>() == "run";
}

namespace {

std::optional<double> number(const json& j, const char* key) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number()) return std::nullopt;
    return it->get<double>();
}

std::string source_of(const json& r) {
    if (r.contains("source") && r.at("source").is_string()) return r.at("source").get<std::string>();
    if (r.contains("predicted") && r.at("predicted").is_object() && r.at("predicted").contains("profile") &&
        r.at("predicted").at("profile").is_string())
        return r.at("predicted").at("profile").get<std::string>();
    return kSourceRuntime;
}

// Today's prediction for a report: the planner under the source's profile.
struct Prediction {
    MemoryReport memory;
    std::int64_t tracked_peak_bytes = 0;  // peak minus the modelled overhead
    // What the device must hold: the peak, or where the profile judges the fit on the caching
    // allocator's pool (FrameworkProfile::verdict_on_reserved), that pool + the memory outside it.
    std::int64_t device_peak_bytes = 0;
    std::optional<double> step_time_s, mfu;
    std::optional<double> emulated_step_time_s;  // runtime: the rank's own stage alone (Predicted::emulated_step_time_s)
    double model_flops_per_step = 0;
    std::optional<double> peak_flops_per_s;
};

// How a report's run went beyond its plan, where the prediction depends on it.
struct RunTraits {
    // The runtime ran its own flash attention kernel, not cuDNN's (the report's
    // measured.attention_backend "kernel": cuDNN missing, refused, or --no-cudnn).
    bool own_attention_kernel = false;
    bool pool_allocator = false;  // its buffers came from the cudaMallocAsync pool (ran_pool_allocator)
    bool compiled = false;  // PyTorch ran the model under torch.compile (ran_compiled)
    std::int64_t rank = 0;  // the runtime report's rank (parallel.rank), whose pipeline stage is predicted
};

Prediction predict(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan, const std::string& source,
                   const RunTraits& run) {
    Prediction p;
    if (source == kSourceRuntime) {
        // The runtime's own prediction function, so --check and `preflight run` agree.
        runtime::RunOptions o;
        o.timeline = false;
        o.cudnn_attention = !run.own_attention_kernel;
        o.allocator = run.pool_allocator ? "pool" : "arena";
        o.rank = run.rank;
        const runtime::Predicted r = runtime::predict(model, gpu, plan, o);
        p.memory = r.memory;
        p.tracked_peak_bytes = r.tracked_peak_bytes;
        p.device_peak_bytes = r.memory.peak_bytes;
        p.step_time_s = r.step_time_s;
        p.emulated_step_time_s = r.emulated_step_time_s;
        p.mfu = r.mfu;
        p.model_flops_per_step = r.model_flops_per_step;
    } else {
        const auto profile = profile_by_name(source);
        if (!profile) throw InputError("source", "no planner profile named '" + source + "'");
        MemoryOptions mo;
        mo.profile = *profile;
        p.memory = evaluate_memory(model, gpu, plan, mo);
        p.tracked_peak_bytes = p.memory.peak_bytes - p.memory.at_peak.overhead;
        p.device_peak_bytes = judged_bytes(p.memory, *profile);
        p.model_flops_per_step = step_flops(model, resolve_defaults(plan, model)).model_flops_per_step;
        try {
            // The framework's own step-time settings (its attention kernels, ...).
            ThroughputOptions base;
            base.model_compiled = run.compiled;
            const Throughput t = estimate_throughput(model, gpu, plan, throughput_options_for(*profile, model, plan, base));
            p.step_time_s = t.step_time_s;
            p.mfu = t.mfu;
        } catch (const InputError&) {
        }
    }
    p.peak_flops_per_s = compute_peak_flops_per_s(gpu, resolve_defaults(plan, model).precision);
    return p;
}

void compare(RunCheck& rc, const std::string& quantity, double measured, double predicted, const Tolerances& tol) {
    Comparison c;
    c.quantity = quantity;
    c.measured = measured;
    c.predicted = predicted;
    c.relative_error = predicted != 0 ? (measured - predicted) / std::abs(predicted) : 0.0;
    if (auto it = tol.find(quantity); it != tol.end()) {
        c.tolerance = it->second;
        c.within = it->second.within(measured, predicted);
    }
    if (!c.within) rc.out_of_tolerance = true;
    rc.comparisons.push_back(c);
}

// An out-of-memory run is a miss only when the planner says the plan fits with the headroom
// `preflight plan` keeps (SearchRequest::headroom, 5 %): a plan predicted inside that band is
// one the planner never recommends.
void judge_out_of_memory(RunCheck& rc, const json& r, const GpuSpec& gpu, double predicted) {
    const double capacity = r.contains("device") && r.at("device").is_object() ? r.at("device").value("memory_bytes", 0.0)
                                                                               : static_cast<double>(gpu.memory_bytes);
    const double limit = capacity > 0 ? capacity : static_cast<double>(gpu.memory_bytes);
    const double headroom = SearchRequest{}.headroom;
    if (predicted <= (1.0 - headroom) * limit) {
        rc.out_of_tolerance = true;
        rc.note = "ran out of memory, but the planner predicts it fits";
    } else if (predicted <= limit) {
        char b[160];
        std::snprintf(b, sizeof b, "ran out of memory; predicted at %.1f %% of the device, inside the %.0f %% headroom "
                      "`preflight plan` keeps free", 100.0 * predicted / limit, 100.0 * headroom);
        rc.note = b;
    } else {
        rc.note = "ran out of memory, as predicted";
    }
}

}  // namespace

namespace {

// A runtime report of one rank run alone (parallel.backend "emulated"), and the world-size-1
// NCCL memory a run measured (an emulated rank's, or an NCCL run's of one rank).
struct EmulatedRank {
    bool emulated = false;
    std::int64_t rank = 0, world_size = 1, nccl_world1_bytes = 0;
};
EmulatedRank emulated_rank(const json& r) {
    EmulatedRank e;
    const auto p = r.find("parallel");
    if (p == r.end() || !p->is_object()) return e;
    const auto n = p->find("nccl_world1_bytes");
    if (n != p->end() && n->is_number_integer()) e.nccl_world1_bytes = n->get<std::int64_t>();
    if (p->value("backend", "") != "emulated") return e;
    e.emulated = true;
    e.rank = p->value("rank", std::int64_t{0});
    e.world_size = p->value("world_size", std::int64_t{1});
    return e;
}

}  // namespace

bool ran_own_attention_kernel(const json& measured) {
    const auto backend = measured.find("attention_backend");
    return backend != measured.end() && backend->is_string() && backend->get<std::string>() == "kernel";
}

bool driver_peak_without_context(const json& measured) {
    // Without NVML the runtime's baseline is the memory used after its CUDA context
    // (executor.cpp create_context), so its driver peak leaves the context out.
    const auto d = measured.find("driver");
    if (d == measured.end() || !d->is_object()) return false;
    const auto source = d->find("baseline_source");  // null in a dry run
    return source != d->end() && source->is_string() && source->get<std::string>() == "cudaMemGetInfo-after-context";
}

bool ran_pool_allocator(const json& measured) {
    const auto a = measured.find("allocator");
    return a == measured.end() || a->is_null() || (a->is_string() && a->get<std::string>() == "pool");
}

bool ran_compiled(const json& measured) {
    const auto c = measured.find("compiled");
    return c != measured.end() && c->is_boolean() && c->get<bool>();
}

namespace {

// GPU runs gate on the driver's figure: device used over the memory in use before the run's
// context (CUDA context, library workspaces and the allocator's reserve included) against the
// whole predicted peak; the tensor peak is then reported beside it. An emulated rank's figure,
// or an NCCL run's of one rank, holds a world-size-1 NCCL communicator's own memory, measured and
// reported beside it: set apart here, as the plan's NCCL buffers are not modelled.
void compare_memory(RunCheck& rc, const json& m, const Prediction& p, const EmulatedRank& em, const Tolerances& tol) {
    auto driver_peak = rc.mode == "device" && !driver_peak_without_context(m) ? number(m, "device_used_peak_bytes")
                                                                              : std::nullopt;
    if (driver_peak) *driver_peak -= static_cast<double>(em.nccl_world1_bytes);
    if (driver_peak) {
        compare(rc, "peak_bytes", *driver_peak, static_cast<double>(p.device_peak_bytes), tol);
        if (auto v = number(m, "tracked_peak_bytes"))
            compare(rc, "tracked_peak_bytes", *v, static_cast<double>(p.tracked_peak_bytes), tol);
    } else if (auto v = number(m, "tracked_peak_bytes")) {
        // Tensor memory the framework allocated (tracking allocator; torch.cuda.max_memory_allocated).
        compare(rc, "peak_bytes", *v, static_cast<double>(p.tracked_peak_bytes), tol);
    }
    // Non-tensor device memory (CUDA context, library workspaces), when measured. For the
    // runtime with the driver's figures: everything the driver saw beyond the tensor peak,
    // the pool's slack included (the planner counts that slack as overhead).
    const auto tracked = number(m, "tracked_peak_bytes");
    if (driver_peak && tracked && rc.source == kSourceRuntime)
        compare(rc, "overhead_bytes", *driver_peak - *tracked, static_cast<double>(p.memory.at_peak.overhead), tol);
    else if (auto v = number(m, "overhead_bytes"))
        compare(rc, "overhead_bytes", *v, static_cast<double>(p.memory.at_peak.overhead), tol);
}

// A report the check cannot pass on: nothing to compare, or an ok device run without the step
// time it measured (its step time and MFU would drop out and it would pass on memory alone).
void mark_incomplete(RunCheck& rc, const json& measured) {
    if (rc.comparisons.empty() && rc.categories.empty()) {
        rc.not_compared = true;
        rc.note = "nothing to compare: \"measured\" holds no peak, overhead, step time or category";
    } else if (rc.mode == "device" && rc.status == "ok" && !number(measured, "step_time_s")) {
        rc.not_compared = true;
        rc.note = "no measured step time in an ok device run: its step time and MFU cannot be compared";
    }
}

}  // namespace

RunCheck check_report(const json& r, const std::string& id, const Tolerances& tol, const CheckOptions& options) {
    RunCheck rc;
    rc.id = id;
    rc.source = source_of(r);
    rc.mode = r.value("mode", "device");
    rc.status = r.value("status", "ok");
    rc.plan = r.value("plan", json::object());
    rc.model = r.contains("model") && r.at("model").is_object() ? r.at("model").value("name", "") : "";
    rc.gpu = r.contains("gpu") && r.at("gpu").is_object() ? r.at("gpu").value("name", "") : "";
    if (options.gpu) rc.gpu = *options.gpu;
    if (rc.status == "error" || rc.status == "crashed") {
        rc.note = rc.status == "crashed" ? "the run crashed: " + r.value("message", std::string("no report"))
                                         : "the run failed: " + (r.contains("failure") ? r.at("failure").value("message", "") : "");
        rc.not_compared = true;  // nothing to compare: the check cannot pass on it
        return rc;
    }
    const std::string subject = "report " + id;
    if (rc.model.empty()) throw InputError(subject, "has no model.name");
    if (rc.gpu.empty()) throw InputError(subject, "has no gpu.name");
    const ModelConfig model = load_recorded_model(rc.model, options.data_dir);
    GpuSpec gpu;
    try {
        gpu = load_gpu(rc.gpu, options.data_dir);
    } catch (const InputError& e) {
        if (options.gpu) throw;  // --gpu named it
        throw InputError("gpu.name", e.detail());
    }
    const Plan plan = resolve_defaults(plan_from_json(rc.plan), model);
    const json& m = r.at("measured");
    const std::int64_t rank = r.contains("parallel") && r.at("parallel").is_object()
                                  ? r.at("parallel").value("rank", std::int64_t{0})
                                  : 0;
    if (rank < 0 || rank >= plan.gpus())
        throw InputError(subject, "parallel.rank " + std::to_string(rank) + " is outside the plan's " +
                                      std::to_string(plan.gpus()) + " ranks");
    const Prediction p = predict(model, gpu, plan, rc.source,
                                 {ran_own_attention_kernel(m), ran_pool_allocator(m), ran_compiled(m), rank});

    if (rc.status == "allocation-failed") {
        judge_out_of_memory(rc, r, gpu, static_cast<double>(p.device_peak_bytes));
        return rc;
    }

    const EmulatedRank em = emulated_rank(r);
    compare_memory(rc, m, p, em, tol);
    if (auto t = number(m, "step_time_s"); t && *t > 0) {
        // An emulated rank's collectives are local and its receives wait for nobody: its step is
        // its own stage's work without the exposed communication and the pipeline bubble.
        const std::optional<double> step = em.emulated ? p.emulated_step_time_s : p.step_time_s;
        if (step) compare(rc, "step_time_s", *t, *step, tol);
        // Measured MFU with the planner's FLOP count (one definition for every source): the
        // job's FLOPs over every GPU's peak for the step (an emulated rank stands for each),
        // against the MFU of the step compared above (an emulated rank's, without its waits).
        if (p.mfu && p.peak_flops_per_s && step && *step > 0) {
            const auto mfu = [&](double step_s) {
                return flops_utilization(p.model_flops_per_step, step_s, plan.gpus(), *p.peak_flops_per_s);
            };
            compare(rc, "mfu", mfu(*t), em.emulated ? mfu(*step) : *p.mfu, tol);
        }
    }
    // Per-category memory at the peak, where the report breaks it down (overhead apart).
    if (m.contains("per_gpu_bytes") && m.at("per_gpu_bytes").is_object()) {
        const json pred = breakdown_to_json(p.memory.at_peak);
        for (const auto& [k, v] : m.at("per_gpu_bytes").items()) {
            if (k == "overhead" || !v.is_number_integer() || !pred.contains(k)) continue;
            rc.categories.push_back({k, v.get<std::int64_t>(), pred.at(k).get<std::int64_t>()});
        }
    }
    if (rc.mode == "dry-run") rc.note = "dry run: the tracking allocator's walk of the step, no device";
    if (em.emulated && rc.mode == "device")
        rc.note = "emulated rank " + std::to_string(em.rank) + " of " + std::to_string(em.world_size) +
                  ": NCCL's world-1 memory set apart from the peak, predicted communication from the step";
    if (rc.mode == "device" && driver_peak_without_context(m))
        rc.note += std::string(rc.note.empty() ? "" : "; ") +
                   "driver peak without the CUDA context (no NVML baseline): compared on the tracked peak";
    mark_incomplete(rc, m);
    return rc;
}

namespace {

SourceSummary summarize_runs(const std::vector<const RunCheck*>& runs) {
    SourceSummary s;
    std::vector<double> peak, step, mfu, overhead;
    std::map<std::string, std::vector<double>> cats;
    for (const RunCheck* r : runs) {
        ++s.runs;
        if (r->out_of_tolerance) ++s.out_of_tolerance;
        if (r->not_compared) ++s.not_compared;
        if (r->status == "allocation-failed" && !r->not_compared) ++s.judged_out_of_memory;
        if (r->status != "ok") {
            ++s.failed;
            continue;
        }
        ++s.compared;
        if (r->mode == "dry-run") ++s.dry_runs;
        for (const auto& c : r->comparisons) {
            const double e = std::abs(c.relative_error);
            if (c.quantity == "peak_bytes") peak.push_back(e);
            if (c.quantity == "step_time_s") step.push_back(e);
            if (c.quantity == "mfu") mfu.push_back(e);
            if (c.quantity == "overhead_bytes") overhead.push_back(e);
        }
        for (const auto& c : r->categories) {
            // Relative to the prediction; a category predicted empty counts its measured
            // bytes against the run's predicted peak instead.
            const double denom = c.predicted_bytes != 0 ? static_cast<double>(c.predicted_bytes) : 0.0;
            const double diff = static_cast<double>(c.measured_bytes - c.predicted_bytes);
            if (denom != 0) cats[c.category].push_back(std::abs(diff) / denom);
            else if (const Comparison* pk = r->find("peak_bytes"); pk && pk->predicted > 0)
                cats[c.category].push_back(std::abs(diff) / pk->predicted);
        }
    }
    s.peak = error_stats(peak);
    s.step_time = error_stats(step);
    s.mfu = error_stats(mfu);
    s.overhead = error_stats(overhead);
    for (const auto& [k, v] : cats) s.categories[k] = error_stats(v);
    return s;
}

}  // namespace

void summarize(CheckResult& result) {
    std::map<std::string, std::vector<const RunCheck*>> by_source;
    std::vector<const RunCheck*> all;
    for (const auto& r : result.runs) {
        by_source[r.source].push_back(&r);
        all.push_back(&r);
    }
    result.sources.clear();
    for (const auto& [k, v] : by_source) result.sources[k] = summarize_runs(v);
    result.all = summarize_runs(all);
}

namespace {

// The nearest matrix.json from the report's folder up to `root`, and its path.
std::optional<std::pair<SourceTolerances, fs::path>> matrix_tolerances_for(const fs::path& report, const fs::path& root) {
    fs::path dir = report.parent_path();
    const fs::path stop = fs::weakly_canonical(root);
    for (;;) {
        const fs::path candidate = dir / "matrix.json";
        if (fs::exists(candidate)) {
            const json j = read_json_file(candidate, "matrix.json");
            return std::pair{
                interpret_user_json(candidate.string(), [&] { return matrix_from_json(j, candidate.string()); }).tolerances,
                candidate};
        }
        if (fs::weakly_canonical(dir) == stop || !dir.has_parent_path() || dir.parent_path() == dir) break;
        dir = dir.parent_path();
    }
    return std::nullopt;
}

}  // namespace

CheckResult check_directory(const fs::path& dir, const CheckOptions& options) {
    if (!fs::is_directory(dir)) throw InputError("--check", dir.string() + " is not a folder");
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(dir))
        if (e.is_regular_file() && e.path().extension() == ".json" && e.path().filename() != "matrix.json")
            files.push_back(e.path());
    std::sort(files.begin(), files.end());
    CheckResult result;
    result.dir = dir;
    for (const auto& f : files) {
        const json j = read_json_file(f, "--check");
        if (!is_run_report(j)) continue;  // evidence, summaries, other documents
        check_run_report_fields(j, "--check " + f.string());  // errors name the file and field
        const auto matrix = options.tolerances ? std::nullopt : matrix_tolerances_for(f, dir);
        const SourceTolerances all =
            options.tolerances ? *options.tolerances : matrix ? matrix->first : default_tolerances();
        RunCheck rc = interpret_user_json("--check " + f.string(), [&] {
            const auto it = all.find(source_of(j));
            const Tolerances tol = it != all.end() ? it->second : default_tolerances()[kSourceRuntime];
            return check_report(j, f.stem().string(), tol, options);
        });
        rc.path = f;
        // Named in an out-of-tolerance line: a subfolder checked alone does not see the matrix.json above it.
        rc.tolerances_from = options.tolerances ? "--tolerances"
                             : matrix            ? matrix->second.string()
                                                 : "the defaults (no matrix.json between the report and " + dir.string() + ")";
        result.runs.push_back(std::move(rc));
    }
    if (result.runs.empty()) throw InputError("--check", dir.string() + " holds no run reports (*.json from `preflight run` or train.py)");
    summarize(result);
    judge_folder_gates(result);
    return result;
}

}  // namespace preflight::validation
