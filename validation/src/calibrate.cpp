#include "preflight/validation/calibrate.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include "preflight/planner/catalog.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/limits.hpp"
#include "preflight/planner/memory.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/report.hpp"
#include "preflight/planner/throughput.hpp"
#include "preflight/validation/check.hpp"
#include "preflight/validation/nelder_mead.hpp"
#include "preflight/validation/spec_bounds.hpp"
#include "preflight/validation/stats.hpp"
#include "calibrate_gemm.hpp"

namespace preflight::validation {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// FNV-1a, 64-bit (Fowler, Noll, Vo): a stable hash of the run id, so the split does not
// move when runs are added or reordered.
std::uint64_t fnv1a(const std::string& s) {
    std::uint64_t h = 14695981039346656037ull;
    for (unsigned char c : s) {
        h ^= c;
        h *= 1099511628211ull;
    }
    return h;
}

}  // namespace

bool is_held_out(const std::string& id) { return fnv1a(id) % 4 == 0; }

void split_runs(const std::vector<CalibrationRun>& runs, std::vector<CalibrationRun>& train,
                std::vector<CalibrationRun>& held_out) {
    train.clear();
    held_out.clear();
    std::vector<CalibrationRun> sorted = runs;
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
    for (const auto& r : sorted) (is_held_out(r.id) ? held_out : train).push_back(r);
    if (sorted.size() >= 2 && held_out.empty()) {
        held_out.push_back(train.back());
        train.pop_back();
    } else if (sorted.size() >= 2 && train.empty()) {
        train.push_back(held_out.back());
        held_out.pop_back();
    }
}

namespace {

// What load_calibration_runs gathers over a folder's files.
struct CalibrationScan {
    std::string gpu_name, source;
    fs::path data_dir;
    std::optional<GpuSpec> gpu;             // loaded once, for the first runtime report
    std::map<std::string, int> other_gpus;  // device runs of this source on other GPUs, by GPU
};

// The calibration run a report file holds, if it is a single-GPU device run of the source on the GPU.
std::optional<CalibrationRun> calibration_run(const json& j, const fs::path& f, CalibrationScan& scan) {
    if (!is_run_report(j) || j.value("mode", "") != "device" || j.value("status", "ok") != "ok") return std::nullopt;
    const std::string src = j.contains("source") ? j.at("source").get<std::string>() : std::string(kSourceRuntime);
    if (src != scan.source) return std::nullopt;
    // Runs with collectives (data-parallel ranks, emulated or over NCCL) are the held-out
    // check of what single-GPU runs fitted: never fitted on.
    if (j.contains("parallel") && j.at("parallel").is_object() && j.at("parallel").value("backend", "none") != "none")
        return std::nullopt;
    if (j.at("gpu").at("name").get<std::string>() != scan.gpu_name) {
        ++scan.other_gpus[j.at("gpu").at("name").get<std::string>()];
        return std::nullopt;
    }
    const json& m = j.at("measured");
    if (!m.contains("step_time_s") || !m.at("step_time_s").is_number() || m.at("step_time_s").get<double>() <= 0)
        return std::nullopt;
    CalibrationRun r;
    r.id = f.stem().string();
    r.model = load_recorded_model(j.at("model").at("name").get<std::string>(), scan.data_dir);
    r.plan = resolve_defaults(plan_from_json(j.at("plan")), r.model);
    r.step_time_s = m.at("step_time_s").get<double>();
    r.own_attention_kernel = ran_own_attention_kernel(m);
    r.runtime_kernels = src == kSourceRuntime;
    r.pytorch = src == kSourcePytorch;
    r.compiled = ran_compiled(m);
    r.pool_allocator = r.runtime_kernels && ran_pool_allocator(m);
    r.tracked_peak_bytes = measured_bytes(m, "tracked_peak_bytes");
    r.overhead_bytes = measured_bytes(m, "overhead_bytes");
    r.device_used_peak_bytes = measured_bytes(m, "device_used_peak_bytes");
    r.gemms = gemm_samples(m);
    CheckOptions co;
    co.data_dir = scan.data_dir;
    const RunCheck rc = check_report(j, r.id, {}, co);
    if (const Comparison* tk = rc.find("tracked_peak_bytes"))
        r.predicted_tracked_peak_bytes = static_cast<std::int64_t>(tk->predicted);
    else if (const Comparison* pk = rc.find("peak_bytes"))
        r.predicted_tracked_peak_bytes = static_cast<std::int64_t>(pk->predicted);
    if (src == kSourceRuntime) {
        // One layer's activations with nothing recomputed: what full recompute re-materialises.
        Plan none = r.plan;
        none.recompute = Recompute::none;
        MemoryOptions mo;
        mo.profile = runtime_profile();
        if (!scan.gpu) scan.gpu = load_gpu(scan.gpu_name, scan.data_dir);
        r.full_layer_activation_bytes = evaluate_memory(r.model, *scan.gpu, none, mo).activations_per_layer_bytes;
    }
    return r;
}

}  // namespace

std::vector<CalibrationRun> load_calibration_runs(const fs::path& dir, const std::string& gpu_name,
                                                  const std::string& source, const fs::path& data_dir) {
    if (!fs::is_directory(dir)) throw InputError("DIR", dir.string() + " is not a folder");
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(dir))
        if (e.is_regular_file() && e.path().extension() == ".json") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    std::vector<CalibrationRun> runs;
    CalibrationScan scan{gpu_name, source, data_dir, std::nullopt, {}};
    for (const auto& f : files) {
        const json j = read_json_file(f, "DIR");
        if (is_run_report(j)) check_run_report_fields(j, f.string());  // errors name the file and field
        // Past the field checks every error still names the file (a plan field, a model name).
        auto run = interpret_user_json(f.string(), [&] { return calibration_run(j, f, scan); });
        if (run) runs.push_back(std::move(*run));
    }
    const auto& other_gpus = scan.other_gpus;
    if (runs.size() < 2 && !other_gpus.empty()) {
        std::string seen;
        for (const auto& [name, n] : other_gpus) seen += (seen.empty() ? "" : ", ") + std::to_string(n) + " of " + name;
        throw InputError("--gpu", "fewer than 2 " + source + " device runs of " + gpu_name + " in " + dir.string() +
                                      " (found " + std::to_string(runs.size()) + "; it holds " + seen +
                                      "): pass --gpu with the GPU they ran on");
    }
    return runs;
}

namespace {

constexpr int kGenericParams = 5;
constexpr int kRuntimeParams = 9;  // + the fp32 recipe's GEMM and attention efficiencies, the column sums
// The latency-bound estimate of the runtime's column sums: one global-memory round trip per 8-row
// step of a block (a few hundred ns on current GPUs; 300 ns taken) / 8 rows. The fit starts there
// where the spec has no figure, and its prior (column_sum_prior) is centred there.
constexpr double kColumnSumRowStartS = 300e-9 / 8;
// Leave-one-out refits every run: bounded so a large folder stays quick.
constexpr std::size_t kMaxLeaveOneOutRuns = 64;


// Unconstrained coordinates: logits for fractions of peak (kept in (0, 1)), logs for the
// half-efficiency dimension, the per-step and per-layer overheads and the column-sum time per
// row (kept positive).
Point to_point(const Efficiency& e, int n) {
    Point v = {logit(std::clamp(e.gemm_max_fraction_of_peak, 1e-4, 1 - 1e-4)),
               std::log(std::max(e.gemm_half_efficiency_dim, 1e-3)),
               logit(std::clamp(e.attention_fraction_of_peak, 1e-4, 1 - 1e-4)),
               logit(std::clamp(e.memory_bound_fraction_of_hbm, 1e-4, 1 - 1e-4)),
               std::log(std::max(e.step_overhead_s, 1e-7))};
    if (n == kRuntimeParams) {
        // The fp32 figures start from the 16-bit ones where the spec has none (0).
        const KernelEfficiency k = kernel_efficiency(e, Precision::fp32);
        v.push_back(logit(std::clamp(k.gemm_max_fraction_of_peak, 1e-4, 1 - 1e-4)));
        v.push_back(std::log(std::max(k.gemm_half_efficiency_dim, 1e-3)));
        v.push_back(logit(std::clamp(k.attention_fraction_of_peak, 1e-4, 1 - 1e-4)));
        v.push_back(std::log(e.column_sum_row_s > 0 ? e.column_sum_row_s : kColumnSumRowStartS));
    }
    return v;
}
Efficiency from_point(const Point& v, Efficiency e) {
    e.gemm_max_fraction_of_peak = sigmoid(v[0]);
    e.gemm_half_efficiency_dim = std::exp(v[1]);
    e.attention_fraction_of_peak = sigmoid(v[2]);
    e.memory_bound_fraction_of_hbm = sigmoid(v[3]);
    e.step_overhead_s = std::exp(v[4]);
    if (v.size() > 5) {
        e.fp32_gemm_max_fraction_of_peak = sigmoid(v[5]);
        e.fp32_gemm_half_efficiency_dim = std::exp(v[6]);
        e.fp32_attention_fraction_of_peak = sigmoid(v[7]);
        e.column_sum_row_s = std::exp(v[8]);
    }
    return e;
}

double predicted_step(const CalibrationRun& r, const GpuSpec& gpu) {
    ThroughputOptions o;
    o.breakdown = false;
    // The fit is of attention_fraction_of_peak (the runtime's own kernels, PyTorch's SDPA):
    // the spec's fused-attention figure (Megatron's TransformerEngine) is neither used nor fitted.
    o.fused_attention = false;
    o.attention_on_fp32_units = r.own_attention_kernel;
    // A runtime run is predicted with the runtime profile's options, as `preflight run` predicts
    // it (runtime/src/session.cpp): its column sums, whatever else the profile sets.
    if (r.runtime_kernels) o = throughput_options_for(runtime_profile(), r.model, r.plan, o);
    o.model_compiled = r.compiled;  // a PyTorch run as `validate --check` predicts it, eager or compiled
    if (r.pytorch) o = throughput_options_for(pytorch_profile(), r.model, r.plan, o);
    return estimate_throughput(r.model, gpu, r.plan, o).step_time_s;
}

ErrorStats step_errors(const std::vector<CalibrationRun>& runs, const GpuSpec& gpu) {
    std::vector<double> e;
    for (const auto& r : runs) {
        const double predicted = predicted_step(r, gpu);
        e.push_back(std::abs(r.step_time_s - predicted) / predicted);
    }
    return error_stats(e);
}

// No kernel beats the best dense GEMM this GPU runs: 798 of 989 bf16 TFLOP/s for an
// 8192^3 product on an H100 here (.library/device/KINDS.md), about 0.81 of peak. The runtime
// fit, with few runs and several kernel families, otherwise parks a fraction at 1 to absorb
// what the model lacks; a steep penalty above the ceiling keeps the constants physical.
double runtime_ceiling_penalty(const Efficiency& e, bool runtime) {
    if (!runtime) return 0.0;
    constexpr double kCeiling = 0.81;
    double p = 0;
    for (double f : {e.gemm_max_fraction_of_peak, e.attention_fraction_of_peak, e.fp32_gemm_max_fraction_of_peak,
                     e.fp32_attention_fraction_of_peak})
        p += 100.0 * std::pow(std::max(0.0, f - kCeiling), 2);
    return p;
}

// A log-normal prior on the runtime's column-sum time per row (maximum a posteriori): centred on
// the latency-bound estimate kColumnSumRowStartS, a factor of 2 at one standard deviation, and
// weighed against a mean squared log error whose runs scatter by 0.1 each. Runs of a model
// without biases (Llama) barely see the column sums (2-8 % of their step), and a fit on them
// alone otherwise drives the figure to 0.
double column_sum_prior(const Efficiency& e, bool runtime, std::size_t runs) {
    if (!runtime || runs == 0) return 0.0;
    constexpr double kRunLogSd = 0.1, kPriorLogSd = 0.6931471805599453;  // ln 2
    const double z = std::log(e.column_sum_row_s / kColumnSumRowStartS) / kPriorLogSd;
    return kRunLogSd * kRunLogSd * z * z / static_cast<double>(runs);
}

// The pool's slack under full recompute, in bytes, for a slack fraction.
double pool_slack_bytes(const CalibrationRun& r, double fraction) {
    return r.pool_allocator && r.plan.recompute == Recompute::full
               ? fraction * static_cast<double>(r.full_layer_activation_bytes)
               : 0.0;
}

// Device peak: the driver's figure where the report has it, else tensors + measured overhead.
std::vector<double> device_peak_abs_errors(const std::vector<CalibrationRun>& runs, std::int64_t overhead,
                                           double slack_fraction) {
    std::vector<double> e;
    for (const auto& r : runs) {
        if (!r.tracked_peak_bytes || !r.overhead_bytes || !r.predicted_tracked_peak_bytes) continue;
        const double m = r.device_used_peak_bytes ? static_cast<double>(*r.device_used_peak_bytes)
                                                  : static_cast<double>(*r.tracked_peak_bytes + *r.overhead_bytes);
        const double p = static_cast<double>(*r.predicted_tracked_peak_bytes + overhead) + pool_slack_bytes(r, slack_fraction);
        e.push_back(std::abs(m - p) / p);
    }
    return e;
}
ErrorStats device_peak_errors(const std::vector<CalibrationRun>& runs, std::int64_t overhead, double slack_fraction) {
    return error_stats(device_peak_abs_errors(runs, overhead, slack_fraction));
}

// The fp32 recipe's three kernel constants (GEMM curve and attention) are fitted only on at least
// three runs that use them (the fp32 recipe, or the runtime's own FP32-unit attention kernel):
// fewer leave them undetermined, and a fit would park them anywhere. Otherwise they stay as given.
bool fits_fp32_kernels(const std::vector<CalibrationRun>& train) {
    const auto n = std::count_if(train.begin(), train.end(), [](const CalibrationRun& r) {
        return r.plan.precision == Precision::fp32 || r.own_attention_kernel;
    });
    return n >= 3;
}
void keep_fp32_kernels(Efficiency& e, const Efficiency& given) {
    e.fp32_gemm_max_fraction_of_peak = given.fp32_gemm_max_fraction_of_peak;
    e.fp32_gemm_half_efficiency_dim = given.fp32_gemm_half_efficiency_dim;
    e.fp32_attention_fraction_of_peak = given.fp32_attention_fraction_of_peak;
}

// Nelder-Mead (Nelder & Mead 1965) on the mean squared log ratio of predicted to measured
// step time over `train`, from `gpu`'s constants; `evals` counts model evaluations.
Efficiency fit_efficiency(const std::vector<CalibrationRun>& train, const GpuSpec& gpu, bool runtime, int& evals) {
    GpuSpec g = gpu;
    const bool fit_fp32 = fits_fp32_kernels(train);
    auto objective = [&](const Point& v) {
        g.efficiency = from_point(v, gpu.efficiency);
        if (!fit_fp32) keep_fp32_kernels(g.efficiency, gpu.efficiency);
        if (runtime) g.efficiency.layer_launch_overhead_s = 0;
        double sum = 0;
        for (const auto& t : train) {
            const double lr = std::log(predicted_step(t, g) / t.step_time_s);
            sum += lr * lr;
        }
        return sum / static_cast<double>(train.size()) + runtime_ceiling_penalty(g.efficiency, runtime) +
               column_sum_prior(g.efficiency, runtime, train.size());
    };
    Point x = to_point(gpu.efficiency, runtime ? kRuntimeParams : kGenericParams);
    // Two restarts from the best point so far: Nelder-Mead can stall on a flattened simplex.
    for (int round = 0; round < 3; ++round)
        x = nelder_mead(objective, x, round == 0 ? 0.5 : 0.1, 4000 * (round + 1), evals, 1e-14);
    Efficiency e = from_point(x, gpu.efficiency);
    if (runtime) e.layer_launch_overhead_s = 0;
    if (!fit_fp32) keep_fp32_kernels(e, gpu.efficiency);
    return e;
}

// The spec a held-out refit of `runs` starts from: the built-in defaults (what an empty
// "efficiency" block gives) for every constant a fit on all of `runs` determines, so a held-out
// figure rests on its training fold alone (the committed constants were fitted on every run, the
// held-out ones included). The rest stay the spec's: constants the fit never moves (collectives,
// fp8, latencies), and the fp32 kernels' where `runs` hold too few fp32 runs to fit them (then
// no fit on these runs chose them: the H200's come from the H100's runs).
GpuSpec held_out_start(const GpuSpec& gpu, bool runtime, const std::vector<CalibrationRun>& runs) {
    const Efficiency d{};
    GpuSpec g = gpu;
    Efficiency& e = g.efficiency;
    e.gemm_max_fraction_of_peak = d.gemm_max_fraction_of_peak;
    e.gemm_half_efficiency_dim = d.gemm_half_efficiency_dim;
    e.attention_fraction_of_peak = d.attention_fraction_of_peak;
    e.memory_bound_fraction_of_hbm = d.memory_bound_fraction_of_hbm;
    e.step_overhead_s = d.step_overhead_s;
    if (runtime) {
        if (fits_fp32_kernels(runs)) keep_fp32_kernels(e, d);  // 0: start from the 16-bit figures
        e.column_sum_row_s = d.column_sum_row_s;               // 0: start at kColumnSumRowStartS
    }
    return g;
}

// Leave-one-out: each run predicted by constants fitted on all the others (small run sets),
// each refit started from the built-in defaults (held_out_start).
ErrorStats leave_one_out_step_errors(const std::vector<CalibrationRun>& runs, const GpuSpec& spec, bool runtime) {
    const GpuSpec gpu = held_out_start(spec, runtime, runs);
    std::vector<double> e;
    for (std::size_t i = 0; i < runs.size(); ++i) {
        std::vector<CalibrationRun> train;
        for (std::size_t j = 0; j < runs.size(); ++j)
            if (j != i) train.push_back(runs[j]);
        int evals = 0;
        GpuSpec fitted = gpu;
        fitted.efficiency = fit_efficiency(train, gpu, runtime, evals);
        const double predicted = predicted_step(runs[i], fitted);
        e.push_back(std::abs(runs[i].step_time_s - predicted) / predicted);
    }
    return error_stats(e);
}

// One model family held out: its runs, and every other family's runs to fit on.
struct FamilySplit {
    std::string family;
    std::vector<CalibrationRun> held, train;
};

// The leave-one-model-family-out splits, by family name; none with fewer than two families.
std::vector<FamilySplit> family_splits(const std::vector<CalibrationRun>& runs) {
    std::map<std::string, FamilySplit> by_family;
    for (const CalibrationRun& r : runs) by_family[std::string(to_string(r.model.family))].held.push_back(r);
    std::vector<FamilySplit> out;
    if (by_family.size() < 2) return out;
    for (auto& [family, split] : by_family) {
        split.family = family;
        for (const CalibrationRun& r : runs)
            if (std::string(to_string(r.model.family)) != family) split.train.push_back(r);
        out.push_back(std::move(split));
    }
    return out;
}

// Leave-one-model-family-out: the runs of each family predicted by constants fitted on every other
// family's runs, so a figure says how the step model carries to a family it was never fitted on;
// each refit starts from the built-in defaults (held_out_start).
ErrorStats leave_one_family_out_step_errors(const std::vector<CalibrationRun>& runs, const GpuSpec& spec, bool runtime,
                                            std::vector<std::string>& families) {
    const GpuSpec gpu = held_out_start(spec, runtime, runs);
    std::vector<double> e;
    for (const FamilySplit& split : family_splits(runs)) {
        families.push_back(split.family);
        if (split.train.size() < 2) continue;
        int evals = 0;
        GpuSpec fitted = gpu;
        fitted.efficiency = fit_efficiency(split.train, gpu, runtime, evals);
        for (const CalibrationRun& r : split.held) {
            const double predicted = predicted_step(r, fitted);
            e.push_back(std::abs(r.step_time_s - predicted) / predicted);
        }
    }
    return error_stats(e);
}

// Pool slack under full recompute (runtime): what the driver saw beyond tensors and overhead,
// per byte of one layer's full activations, one figure per training run with the pool allocator
// that recompute.
std::vector<double> pool_slack_fractions(const std::vector<CalibrationRun>& train, std::int64_t overhead) {
    std::vector<double> fractions;
    for (const auto& t : train)
        if (t.pool_allocator && t.plan.recompute == Recompute::full && t.device_used_peak_bytes && t.tracked_peak_bytes &&
            t.full_layer_activation_bytes > 0)
            fractions.push_back(
                std::max(0.0, static_cast<double>(*t.device_used_peak_bytes - *t.tracked_peak_bytes - overhead)) /
                static_cast<double>(t.full_layer_activation_bytes));
    return fractions;
}

// The median of the fractions.
void fit_pool_slack(CalibrationResult& r, const std::vector<CalibrationRun>& train) {
    const std::vector<double> fractions = pool_slack_fractions(train, r.overhead_after);
    r.pool_slack_runs = static_cast<int>(fractions.size());
    if (!fractions.empty()) r.pool_slack_fraction_after = percentile(fractions, 0.5);
}

// The overhead fit: the median measured non-tensor memory of `train` (`fallback` when none).
std::int64_t fit_overhead(const std::vector<CalibrationRun>& train, std::int64_t fallback, int* runs = nullptr) {
    std::vector<double> overheads;
    for (const auto& t : train)
        if (t.overhead_bytes) overheads.push_back(static_cast<double>(*t.overhead_bytes));
    if (runs) *runs = static_cast<int>(overheads.size());
    return overheads.empty() ? fallback : static_cast<std::int64_t>(std::llround(percentile(overheads, 0.5)));
}

// Leave-one-model-family-out for the memory constants: each family's device peaks predicted with
// the overhead (and, for the runtime, pool slack) fitted on the other families' runs.
ErrorStats leave_one_family_out_device_errors(const std::vector<CalibrationRun>& runs, std::int64_t overhead_fallback,
                                              double slack_fallback, bool runtime) {
    std::vector<double> e;
    for (const FamilySplit& split : family_splits(runs)) {
        const std::int64_t overhead = fit_overhead(split.train, overhead_fallback);
        double slack = slack_fallback;
        if (runtime)
            if (const std::vector<double> f = pool_slack_fractions(split.train, overhead); !f.empty())
                slack = percentile(f, 0.5);
        const std::vector<double> held = device_peak_abs_errors(split.held, overhead, slack);
        e.insert(e.end(), held.begin(), held.end());
    }
    return error_stats(e);
}

}  // namespace

CalibrationResult calibrate(const std::vector<CalibrationRun>& runs, const GpuSpec& gpu_in, CalibrationTarget target) {
    // The runtime target fits the spec's "runtime" block: start from it where there is one.
    // The runtime is a C++ program whose host runs ahead of the GPU: no per-layer host floor
    // (fitting one made every leave-one-out figure worse on the H100 runs: P50 14.4 % vs 13.7 %,
    // P95 45.5 % vs 39.2 %).
    const bool runtime = target == CalibrationTarget::runtime;
    FrameworkProfile profile = runtime ? runtime_profile() : FrameworkProfile{};
    const GpuSpec gpu = gpu_for_profile(gpu_in, profile);  // the runtime's own block, where the spec has one
    if (runs.size() < 2) throw InputError("DIR", "calibration needs at least 2 device runs with a measured step time (found " +
                                                     std::to_string(runs.size()) + ")");
    std::vector<CalibrationRun> train, held;
    split_runs(runs, train, held);
    CalibrationResult r;
    r.target = target;
    r.before = gpu.efficiency;
    r.overhead_before = gpu.overhead_bytes;
    r.pool_slack_fraction_before = runtime && gpu_in.runtime ? gpu_in.runtime->full_recompute_pool_slack_fraction : 0.0;
    r.train_runs = static_cast<int>(train.size());
    r.held_out_runs = static_cast<int>(held.size());
    r.after = fit_efficiency(train, gpu, runtime, r.iterations);
    if (runs.size() <= kMaxLeaveOneOutRuns) {
        r.step_loo_after = leave_one_out_step_errors(runs, gpu, runtime);
        r.step_lofo_after = leave_one_family_out_step_errors(runs, gpu, runtime, r.families);
    }

    // Overhead: the median measured non-tensor memory of the training runs.
    r.overhead_after = fit_overhead(train, gpu.overhead_bytes, &r.overhead_runs);
    r.pool_slack_fraction_after = r.pool_slack_fraction_before;
    if (runtime) fit_pool_slack(r, train);
    r.device_peak_lofo_after =
        leave_one_family_out_device_errors(runs, gpu.overhead_bytes, r.pool_slack_fraction_before, runtime);

    GpuSpec fitted = gpu;
    fitted.efficiency = r.after;
    r.step_train_before = step_errors(train, gpu);
    r.step_train_after = step_errors(train, fitted);
    r.step_held_before = step_errors(held, gpu);
    r.step_held_after = step_errors(held, fitted);
    r.device_peak_held_before = device_peak_errors(held, r.overhead_before, r.pool_slack_fraction_before);
    r.device_peak_held_after = device_peak_errors(held, r.overhead_after, r.pool_slack_fraction_after);
    for (const CalibrationRun& run : runs) r.runs_with_op_times += !run.gemms.empty();
    r.gemm_curves = fit_gemm_curves(runs, gpu);
    return r;
}

json calibrated_spec(const json& spec, const CalibrationResult& r, const std::string& provenance) {
    json out = spec;
    if (r.target == CalibrationTarget::runtime) {
        out["runtime"] = {{"efficiency", efficiency_to_json(r.after)},
                          {"overhead_bytes", r.overhead_after},
                          {"full_recompute_pool_slack_fraction", r.pool_slack_fraction_after},
                          {"provenance", provenance}};
        drop_superseded_transfer(out);  // this fit replaces a transferred block
        return out;
    }
    json e = efficiency_to_json(r.after);
    e["provenance"] = provenance;
    out["efficiency"] = e;
    drop_superseded_transfer(out);
    if (r.overhead_runs > 0) {
        out["overhead_bytes"] = r.overhead_after;
        out["sources"]["overhead_bytes"] = "Fitted: median non-tensor device memory (cudaMemGetInfo used minus tracked "
                                           "allocations) of " + std::to_string(r.overhead_runs) +
                                           " training runs. " + provenance;
    }
    return out;
}

json calibration_to_json(const CalibrationResult& r) {
    return {{"before", efficiency_to_json(r.before)},
            {"after", efficiency_to_json(r.after)},
            {"overhead_bytes_before", r.overhead_before},
            {"overhead_bytes_after", r.overhead_after},
            {"full_recompute_pool_slack_fraction_before", r.pool_slack_fraction_before},
            {"full_recompute_pool_slack_fraction_after", r.pool_slack_fraction_after},
            {"pool_slack_runs", r.pool_slack_runs},
            {"train_runs", r.train_runs},
            {"held_out_runs", r.held_out_runs},
            {"overhead_runs", r.overhead_runs},
            {"evaluations", r.iterations},
            {"step_time_error_train_before", error_stats_json(r.step_train_before)},
            {"step_time_error_train_after", error_stats_json(r.step_train_after)},
            {"step_time_error_held_out_before", error_stats_json(r.step_held_before)},
            {"step_time_error_held_out_after", error_stats_json(r.step_held_after)},
            {"step_time_error_leave_one_out_after", error_stats_json(r.step_loo_after)},
            {"step_time_error_leave_one_family_out_after", error_stats_json(r.step_lofo_after)},
            {"model_families", r.families},
            {"device_peak_error_held_out_before", error_stats_json(r.device_peak_held_before)},
            {"device_peak_error_held_out_after", error_stats_json(r.device_peak_held_after)},
            {"device_peak_error_leave_one_family_out_after", error_stats_json(r.device_peak_lofo_after)},
            {"runs_with_op_times", r.runs_with_op_times},
            {"gemm_curves", gemm_curves_json(r.gemm_curves)}};
}

std::string calibration_table(const CalibrationResult& r) {
    std::ostringstream o;
    char b[256];
    o << "# preflight calibrate: " << r.train_runs << " training runs, " << r.held_out_runs
      << " held out (FNV-1a(id) mod 4 == 0); " << r.iterations << " model evaluations\n";
    std::snprintf(b, sizeof b, "%-32s %14s %14s\n", "constant", "before", "after");
    o << b;
    auto row = [&](const char* n, double x, double y) {
        std::snprintf(b, sizeof b, "%-32s %14.6g %14.6g\n", n, x, y);
        o << b;
    };
    row("gemm_max_fraction_of_peak", r.before.gemm_max_fraction_of_peak, r.after.gemm_max_fraction_of_peak);
    row("gemm_half_efficiency_dim", r.before.gemm_half_efficiency_dim, r.after.gemm_half_efficiency_dim);
    row("attention_fraction_of_peak", r.before.attention_fraction_of_peak, r.after.attention_fraction_of_peak);
    row("memory_bound_fraction_of_hbm", r.before.memory_bound_fraction_of_hbm, r.after.memory_bound_fraction_of_hbm);
    row("step_overhead_s", r.before.step_overhead_s, r.after.step_overhead_s);
    if (r.target == CalibrationTarget::runtime) {
        row("layer_launch_overhead_s", r.before.layer_launch_overhead_s, r.after.layer_launch_overhead_s);
        row("fp32_gemm_max_fraction_of_peak", r.before.fp32_gemm_max_fraction_of_peak, r.after.fp32_gemm_max_fraction_of_peak);
        row("fp32_gemm_half_efficiency_dim", r.before.fp32_gemm_half_efficiency_dim, r.after.fp32_gemm_half_efficiency_dim);
        row("fp32_attention_fraction", r.before.fp32_attention_fraction_of_peak, r.after.fp32_attention_fraction_of_peak);
        row("column_sum_row_s", r.before.column_sum_row_s, r.after.column_sum_row_s);
    }
    std::snprintf(b, sizeof b, "%-32s %14lld %14lld\n", "overhead_bytes", static_cast<long long>(r.overhead_before),
                  static_cast<long long>(r.overhead_after));  // whole bytes, as everywhere
    o << b;
    if (r.target == CalibrationTarget::runtime)
        row("full_recompute_pool_slack", r.pool_slack_fraction_before, r.pool_slack_fraction_after);
    auto err = [&](const char* n, const ErrorStats& x, const ErrorStats& y) {
        std::snprintf(b, sizeof b, "%-32s %6.2f%%/%6.2f%% %6.2f%%/%6.2f%%  (p50/max, n=%d)\n", n, 100 * x.p50, 100 * x.max,
                      100 * y.p50, 100 * y.max, y.n);
        o << b;
    };
    err("step time error, training", r.step_train_before, r.step_train_after);
    err("step time error, held out", r.step_held_before, r.step_held_after);
    if (r.step_loo_after.n > 0) {
        std::snprintf(b, sizeof b, "%-32s %15s %6.2f%%/%6.2f%%  (p50/p95, max %.2f%%, n=%d: each run predicted by a fit on the others)\n",
                      "step time error, leave-one-out", "", 100 * r.step_loo_after.p50, 100 * r.step_loo_after.p95,
                      100 * r.step_loo_after.max, r.step_loo_after.n);
        o << b;
    }
    if (r.step_lofo_after.n > 0) {
        std::string fams;
        for (const auto& f : r.families) fams += (fams.empty() ? "" : ", ") + f;
        std::snprintf(b, sizeof b, "%-32s %15s %6.2f%%/%6.2f%%  (p50/p95, max %.2f%%, n=%d: each model family (%s) predicted "
                      "by a fit on the others)\n",
                      "step time error, by family", "", 100 * r.step_lofo_after.p50, 100 * r.step_lofo_after.p95,
                      100 * r.step_lofo_after.max, r.step_lofo_after.n, fams.c_str());
        o << b;
    }
    if (r.device_peak_held_after.n > 0) err("device peak error, held out", r.device_peak_held_before, r.device_peak_held_after);
    if (r.device_peak_lofo_after.n > 0) {
        std::snprintf(b, sizeof b, "%-32s %15s %6.2f%%/%6.2f%%  (p50/p95, max %.2f%%, n=%d: each model family's runs "
                      "predicted with the overhead and pool slack fitted on the others)\n",
                      "device peak error, by family", "", 100 * r.device_peak_lofo_after.p50,
                      100 * r.device_peak_lofo_after.p95, 100 * r.device_peak_lofo_after.max, r.device_peak_lofo_after.n);
        o << b;
    }
    if (r.target == CalibrationTarget::runtime) o << gemm_curves_text(r);
    return o.str();
}

}  // namespace preflight::validation
