#include "preflight/validation/throughput_fit.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <cstdio>
#include <set>
#include <sstream>

#include "preflight/planner/error.hpp"
#include "preflight/planner/frameworks.hpp"
#include "preflight/planner/pipeline_split.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/validation/nelder_mead.hpp"

namespace preflight::validation {

using nlohmann::json;

std::vector<std::int64_t> nanotron_stage_layers(const ModelConfig& m, std::int64_t pp) {
    std::vector<std::int64_t> out;
    for (const StageBlocks& b : pipeline_stages(m, std::max<std::int64_t>(pp, 1), PipelineSplit::nanotron_compute_cost))
        out.push_back(b.layers);
    return out;
}

std::vector<ThroughputSample> throughput_samples(const std::vector<ExternalRun>& runs, const std::string& framework,
                                                std::vector<std::string>* refused) {
    std::vector<ThroughputSample> out;
    for (const ExternalRun& r : runs) {
        if (r.outcome != RunOutcome::ok || !r.tokens_per_s_per_gpu || *r.tokens_per_s_per_gpu <= 0) continue;
        if (!r.not_modelled.empty()) {  // published rows the planner cannot express
            if (refused) refused->push_back(r.id + ": " + r.not_modelled);
            continue;
        }
        ThroughputSample s;
        s.id = r.id;
        s.family = r.family_key();
        s.model = r.model;
        s.plan = r.plan;
        s.options.breakdown = false;
        if (const auto profile = profile_by_name(framework)) {
            try {  // the framework's own step-time settings (nanotron's stage split, its attention kernels)
                s.options = throughput_options_for(*profile, r.model, r.plan, s.options);
            } catch (const InputError& e) {
                if (refused) refused->push_back(r.id + ": " + e.what());
                continue;
            }
        }
        s.measured_tokens_per_s_per_gpu = *r.tokens_per_s_per_gpu;
        try {
            validate_plan(s.plan, s.model);
        } catch (const InputError& e) {
            if (refused) refused->push_back(r.id + ": " + e.what());
            continue;
        }
        out.push_back(std::move(s));
    }
    return out;
}

double predicted_tokens_per_s_per_gpu(const ThroughputSample& s, const GpuSpec& gpu) {
    return estimate_throughput(s.model, gpu, s.plan, s.options).tokens_per_s_per_gpu;
}

std::vector<double> tokens_errors(const std::vector<ThroughputSample>& samples, const std::vector<std::size_t>& idx,
                                  const GpuSpec& gpu) {
    std::vector<double> e;
    auto one = [&](const ThroughputSample& s) {
        const double p = predicted_tokens_per_s_per_gpu(s, gpu);
        e.push_back(std::abs(p - s.measured_tokens_per_s_per_gpu) / s.measured_tokens_per_s_per_gpu);
    };
    if (idx.empty())
        for (const auto& s : samples) one(s);
    else
        for (std::size_t i : idx) one(samples[i]);
    return e;
}

namespace {
// Bounds: physical ranges, wide enough not to decide the answer.
constexpr std::array<StepConstant, 14> kConstants{{
    // Stage 1: what one or two nodes show (GEMMs, attention, host dispatch, NVLink, per-step cost).
    {"gemm_max_fraction_of_peak", &Efficiency::gemm_max_fraction_of_peak, 0.3, 0.95, 1},
    {"gemm_half_efficiency_dim", &Efficiency::gemm_half_efficiency_dim, 4, 4096, 1},
    {"attention_fraction_of_peak", &Efficiency::attention_fraction_of_peak, 0.1, 0.9, 1, true},
    {"collective_bus_efficiency", &Efficiency::collective_bus_efficiency, 0.1, 1.0, 1},
    {"layer_launch_overhead_s", &Efficiency::layer_launch_overhead_s, 1e-6, 2e-2, 1},
    {"tp_layer_launch_overhead_s", &Efficiency::tp_layer_launch_overhead_s, 1e-6, 2e-2, 1},
    {"step_overhead_s", &Efficiency::step_overhead_s, 1e-3, 10.0, 1},
    // Stage 2: what only many nodes show (the network, the stall that grows with nodes).
    {"inter_node_bus_efficiency", &Efficiency::inter_node_bus_efficiency, 0.01, 1.0, 2},
    {"inter_node_latency_s", &Efficiency::inter_node_latency_s, 2e-6, 1e-4, 2},
    {"pipeline_span_layer_host_per_tp_s", &Efficiency::pipeline_span_layer_host_per_tp_s, 1e-6, 2e-2, 2},
    {"microbatch_sync_s", &Efficiency::microbatch_sync_s, 1e-4, 5.0, 2},
    {"microbatch_sync_half_nodes", &Efficiency::microbatch_sync_half_nodes, 1.0, 512.0, 2},
    {"microbatch_sync_node_exponent", &Efficiency::microbatch_sync_node_exponent, 0.5, 8.0, 2},
    {"microbatch_sync_no_pipeline_fraction", &Efficiency::microbatch_sync_no_pipeline_fraction, 1e-3, 1.0, 2},
}};
constexpr int kN = static_cast<int>(kConstants.size());
using Vec = std::array<double, kN>;

// Coordinates: u in R maps to exp(log lo + (log hi - log lo) * sigmoid(u)), so every
// value stays inside its bounds and the fit works on relative changes.
double to_u(double v, const StepConstant& c) {
    const double a = std::log(c.lo), b = std::log(c.hi);
    // Starts a little inside the bounds, where the sigmoid is not flat.
    const double t = std::clamp((std::log(std::clamp(v, c.lo, c.hi)) - a) / (b - a), 0.02, 0.98);
    return logit(t);
}
double from_u(double u, const StepConstant& c) {
    const double a = std::log(c.lo), b = std::log(c.hi);
    return std::exp(a + (b - a) / (1 + std::exp(-u)));
}
Vec to_vec(const Efficiency& e) {
    Vec v{};
    for (int i = 0; i < kN; ++i) v[i] = to_u(e.*(kConstants[i].field), kConstants[i]);
    return v;
}
Efficiency from_vec(const Vec& v, Efficiency e) {
    for (int i = 0; i < kN; ++i) e.*(kConstants[i].field) = from_u(v[i], kConstants[i]);
    return e;
}

// Weight of the prior that keeps each fitted constant near where the fit started (the
// built-in defaults), per squared unit of its bounded coordinate u. A constant the data
// barely moves the loss with (collective efficiency on runs without tensor parallelism,
// the stall terms on one node) then stays at its default instead of drifting to a bound;
// 1e-5 is the Huber loss of a 0.45 % log error on every job, far below what any
// identifiable constant buys (on the nanotron sweep the held-out P50 moves 30.8 -> 30.4 %).
constexpr double kPriorWeight = 1e-5;

// The fit works in log space, so a cost whose built-in default is zero (host dispatch, the
// micro-batch stall) cannot reach zero, only its lower bound. Ending within 25 % of that
// bound means the runs show no such cost: it is set back to zero rather than kept as a
// microsecond-sized artefact of the bound.
Efficiency zero_at_floor(Efficiency e) {
    const Efficiency defaults{};
    for (const StepConstant& c : kConstants)
        if (defaults.*(c.field) == 0.0 && e.*(c.field) <= 1.25 * c.lo) e.*(c.field) = 0.0;
    return e;
}

// Huber loss (Huber 1964) of the log ratio, delta 0.1: quadratic near the answer, linear
// for the jobs no smooth model explains, so they cannot drag every constant.
double huber(double x) {
    constexpr double d = 0.1;
    const double a = std::abs(x);
    return a <= d ? 0.5 * x * x : d * (a - 0.5 * d);
}

// Cyclic coordinate descent over the bounded coordinates: per constant, a coarse grid
// over its whole range then a golden-section refinement around the best grid point
// (Kiefer 1953). Robust to the flat regions a simplex stalls in.
Point coordinate_descent(const std::function<double(const Point&)>& f, Point x, int sweeps, int& evals) {
    constexpr double kSpan = 7.0;  // u in [-7, 7]: sigmoid covers 0.1 % .. 99.9 % of the log range
    constexpr int kGrid = 11;
    double fx = f(x);
    ++evals;
    for (int sweep = 0; sweep < sweeps; ++sweep) {
        const double before = fx;
        for (std::size_t i = 0; i < x.size(); ++i) {
            auto at = [&](double u) {
                Point y = x;
                y[i] = u;
                ++evals;
                return f(y);
            };
            double best_u = x[i], best_f = fx;
            const double step = 2.0 * kSpan / (kGrid - 1);
            for (int g = 0; g < kGrid; ++g) {
                const double u = -kSpan + step * g;
                const double v = at(u);
                if (v < best_f) best_f = v, best_u = u;
            }
            double a = best_u - step, b = best_u + step;
            const double r = (std::sqrt(5.0) - 1) / 2;
            double c = b - r * (b - a), d = a + r * (b - a);
            double fc = at(c), fd = at(d);
            for (int it = 0; it < 14; ++it) {
                if (fc < fd) b = d, d = c, fd = fc, c = b - r * (b - a), fc = at(c);
                else a = c, c = d, fc = fd, d = a + r * (b - a), fd = at(d);
            }
            if (fc < best_f) best_f = fc, best_u = c;
            if (fd < best_f) best_f = fd, best_u = d;
            x[i] = best_u;
            fx = best_f;
        }
        if (before - fx <= 1e-7 * (1 + std::abs(fx))) break;
    }
    return x;
}

}  // namespace

std::span<const StepConstant> fitted_step_constants() { return kConstants; }

Efficiency fit_step_constants(const std::vector<ThroughputSample>& samples, const std::vector<std::size_t>& train,
                              const GpuSpec& gpu, int* evaluations) {
    if (train.empty()) throw InputError("calibrate", "no measured runs to fit the step-time constants to");
    // Stage 1 fits what jobs of one or two nodes show on those jobs; stage 2 fits the
    // network and the stall on every training job with stage 1's constants held. Each
    // stage has few, physically separate constants, so the fit stays well conditioned.
    const std::int64_t per_node = std::max(1, gpu.gpus_per_node);
    std::vector<std::size_t> small;
    for (std::size_t i : train)
        if (samples[i].plan.gpus() <= 2 * per_node) small.push_back(i);
    if (small.size() < 8) small = train;
    std::set<std::int64_t> seqs;
    for (std::size_t i : train) seqs.insert(samples[i].plan.seq);
    const bool several_seq = seqs.size() > 1;
    int evals = 0;
    Vec full = to_vec(gpu.efficiency);
    const Vec start = full;
    for (int stage = 1; stage <= 2; ++stage) {
        const std::vector<std::size_t>& rows = stage == 1 ? small : train;
        std::vector<int> active;
        for (int i = 0; i < kN; ++i)
            if (kConstants[i].stage == stage && (several_seq || !kConstants[i].needs_several_seq)) active.push_back(i);
        GpuSpec g = gpu;
        auto expand = [&](const Point& x) {
            Vec v = full;
            for (std::size_t k = 0; k < active.size(); ++k) v[active[k]] = x[k];
            return v;
        };
        auto objective = [&](const Point& x) {
            g.efficiency = from_vec(expand(x), gpu.efficiency);
            double sum = 0;
            for (std::size_t i : rows) {
                const ThroughputSample& s = samples[i];
                sum += huber(std::log(predicted_tokens_per_s_per_gpu(s, g) / s.measured_tokens_per_s_per_gpu));
            }
            double prior = 0;  // Gaussian prior centred on the starting constants (a ridge, Hoerl & Kennard 1970)
            for (std::size_t k = 0; k < active.size(); ++k) prior += (x[k] - start[active[k]]) * (x[k] - start[active[k]]);
            return sum / static_cast<double>(rows.size()) + kPriorWeight * prior;
        };
        Point x;
        for (int i : active) x.push_back(full[i]);
        // Coordinate descent finds the basin; Nelder-Mead polishes the coupled directions.
        x = coordinate_descent(objective, x, 8, evals);
        x = nelder_mead(objective, x, 0.3, evals + 1500, evals);
        full = expand(x);
    }
    if (evaluations) *evaluations += evals;
    return zero_at_floor(from_vec(full, gpu.efficiency));
}

ThroughputCv cross_validate_throughput(const std::vector<ThroughputSample>& samples, const GpuSpec& gpu, int folds) {
    if (samples.size() < 2) throw InputError("calibrate", "cross-validation needs at least 2 measured runs");
    folds = std::max(2, folds);
    ThroughputCv cv;
    cv.folds = folds;
    cv.committed = error_stats(tokens_errors(samples, {}, gpu));
    GpuSpec defaults = gpu;
    defaults.efficiency = Efficiency{};
    // The fit starts each constant it fits from the built-in default (and holds it near there);
    // the constants these runs cannot show keep the spec's values (a sourced figure such as
    // the attention fraction on a sweep of one sequence length, the fp8 and memory-bound
    // fractions), so a refit never silently resets them.
    GpuSpec start = gpu;
    std::set<std::int64_t> seqs;
    for (const auto& s : samples) seqs.insert(s.plan.seq);
    for (const StepConstant& c : kConstants)
        if (seqs.size() > 1 || !c.needs_several_seq) start.efficiency.*(c.field) = defaults.efficiency.*(c.field);
    std::set<std::string> fams;
    for (const auto& s : samples) fams.insert(s.family);
    cv.families = static_cast<int>(fams.size());
    cv.before = error_stats(tokens_errors(samples, {}, defaults));
    std::vector<double> held;
    for (int k = 0; k < folds; ++k) {
        std::vector<std::size_t> train, test;
        for (std::size_t i = 0; i < samples.size(); ++i)
            (family_fold(samples[i].family, folds) == k ? test : train).push_back(i);
        if (train.empty() || test.empty()) {
            cv.fold_held_out.push_back({});
            cv.fold_fits.push_back(start.efficiency);
            continue;
        }
        GpuSpec fitted = gpu;
        fitted.efficiency = fit_step_constants(samples, train, start, &cv.evaluations);
        std::vector<double> e;
        for (std::size_t i : test) {
            const double measured = samples[i].measured_tokens_per_s_per_gpu;
            const double predicted = predicted_tokens_per_s_per_gpu(samples[i], fitted);
            cv.per_sample.push_back({samples[i].id, k, measured, predicted});
            e.push_back(std::abs(predicted - measured) / measured);
        }
        held.insert(held.end(), e.begin(), e.end());
        cv.fold_held_out.push_back(error_stats(e));
        cv.fold_fits.push_back(fitted.efficiency);
    }
    cv.held_out = error_stats(held);
    std::vector<std::size_t> all(samples.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    GpuSpec fitted = gpu;
    fitted.efficiency = fit_step_constants(samples, all, start, &cv.evaluations);
    cv.full_fit = fitted.efficiency;
    cv.full_fit_in_sample = error_stats(tokens_errors(samples, all, fitted));
    return cv;
}

json throughput_cv_to_json(const ThroughputCv& cv) {
    json folds = json::array();
    for (std::size_t k = 0; k < cv.fold_held_out.size(); ++k)
        folds.push_back({{"fold", k}, {"held_out", error_stats_json(cv.fold_held_out[k])},
                         {"constants", efficiency_to_json(cv.fold_fits[k])}});
    return {{"folds", cv.folds},
            {"families", cv.families},
            {"tokens_per_s_per_gpu_error_before", error_stats_json(cv.before)},
            {"tokens_per_s_per_gpu_error_committed_constants", error_stats_json(cv.committed)},
            {"tokens_per_s_per_gpu_error_held_out", error_stats_json(cv.held_out)},
            {"tokens_per_s_per_gpu_error_in_sample", error_stats_json(cv.full_fit_in_sample)},
            {"per_fold", folds},
            {"fitted", efficiency_to_json(cv.full_fit)},
            {"evaluations", cv.evaluations}};
}

std::string throughput_cv_markdown(const ThroughputCv& cv) {
    std::ostringstream o;
    char b[256];
    o << "| tokens/s per GPU: abs(predicted - measured) / measured | jobs | P50 | P95 | max |\n|---|---|---|---|---|\n";
    auto row = [&](const char* name, const ErrorStats& e) {
        std::snprintf(b, sizeof b, "| %s | %d | %.1f %% | %.1f %% | %.0f %% |\n", name, e.n, 100 * e.p50, 100 * e.p95,
                      100 * e.max);
        o << b;
    };
    row("uncalibrated defaults (before)", cv.before);
    char name[128];
    std::snprintf(name, sizeof name, "held out (%d-fold CV by model/tp/pp family, %d families)", cv.folds, cv.families);
    row(name, cv.held_out);
    row("the GPU spec's committed constants (in sample)", cv.committed);
    return o.str();
}

ThroughputGate throughput_gate(const ExternalDataset& d, const GpuSpec& gpu) {
    ThroughputGate g;
    int folds = 5;
    if (d.targets.contains("folds")) folds = d.targets.at("folds").get<int>();  // checked on load: [2, kMaxFolds]
    for (const ExternalRun& r : d.runs)
        if (!r.gpu.empty() && r.gpu != gpu.name)
            throw InputError(d.name + " dataset.json", "a fitted data set holds rows of one GPU (" + gpu.name + "); " +
                                                           r.id + " is on " + r.gpu + " (select rows with \"rows\")");
    const std::vector<ThroughputSample> samples = throughput_samples(d.runs, d.framework, &g.refused);
    g.cv = cross_validate_throughput(samples, gpu, folds);
    g.markdown = throughput_cv_markdown(g.cv);
    auto gate = [&](const char* key, double value) {
        if (!d.targets.contains(key)) return;
        const json& t = d.targets.at(key);
        if (!t.is_number()) throw InputError(d.name + " dataset.json", std::string("targets.") + key + " must be a number");
        if (value > t.get<double>()) {
            char b[256];
            std::snprintf(b, sizeof b, "held-out tokens/s per GPU error %s %.1f %% > target %.1f %%", key, 100 * value,
                          100 * t.get<double>());
            g.failures.emplace_back(b);
        }
    };
    const int min_jobs = d.targets.contains("compared_rows_min") ? d.targets.at("compared_rows_min").get<int>() : 1;
    if (g.cv.held_out.n == 0)
        g.failures.emplace_back("no job could be held out (every family fell in one fold): the tokens/s figures are unknown");
    else if (g.cv.held_out.n < min_jobs)
        g.failures.emplace_back("only " + std::to_string(g.cv.held_out.n) + " jobs held out on tokens/s, target " +
                                std::to_string(min_jobs) + " (compared_rows_min)");
    gate("tokens_per_s_per_gpu_error_p50_max", g.cv.held_out.p50);
    gate("tokens_per_s_per_gpu_error_p95_max", g.cv.held_out.p95);
    g.summary = throughput_cv_to_json(g.cv);
    g.summary["refused_runs"] = g.refused;
    g.summary["failures"] = g.failures;
    return g;
}

}  // namespace preflight::validation
