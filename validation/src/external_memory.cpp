#include "preflight/validation/external_memory.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>

#include "preflight/planner/error.hpp"
#include "preflight/planner/frameworks.hpp"
#include "preflight/planner/memory.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/throughput.hpp"
#include "preflight/validation/check.hpp"
#include "preflight/validation/plot.hpp"
#include "linear_solve.hpp"

namespace preflight::validation {

namespace {

// The memory outside PyTorch's pool: the fitted figure, or the GPU spec's overhead when unfitted.
std::int64_t non_pytorch_bytes(const AllocatorConstants& c, const GpuSpec& gpu) {
    return c.non_pytorch_bytes >= 0 ? c.non_pytorch_bytes : gpu.overhead_bytes;
}

// The reserved-peak unknowns: activation fragmentation, loss-stage and pipeline run-ahead
// fragmentation, the constant.
constexpr int kUnknowns = 4;

// Stage 0's breakdown at its reserved peak under `c`, split as the allocator model sees it:
// the tensors besides activations, the activations, and what each fitted term multiplies.
struct Parts {
    double other = 0;
    double columns[kUnknowns] = {};  // activations, loss s*b*h*2, run-ahead s*b*h*2, 1
};

Parts stage0_parts(const ExternalRun& run, const AllocatorConstants& c) {
    const auto stages = nanotron_stage_memory(run.model, run.plan, c, 0, run.host_pace);
    const NanotronStageMemory& s = stages.front();
    const MemoryBreakdown& b = s.at_peak;
    Parts p;
    p.columns[0] = static_cast<double>(b.activations);
    p.columns[1] = static_cast<double>(s.loss_hidden_at_peak);
    p.columns[2] = static_cast<double>(s.runahead_hidden_at_peak);
    p.columns[3] = 1.0;
    p.other = static_cast<double>(b.total() - b.overhead) - p.columns[0];
    return p;
}

}  // namespace

MemoryPrediction predict_memory(const ExternalRun& run, const GpuSpec& gpu, const AllocatorConstants& c) {
    MemoryPrediction p;
    try {
        const std::int64_t npb = non_pytorch_bytes(c, gpu);
        const auto stages = nanotron_stage_memory(run.model, run.plan, c, npb, run.host_pace);
        p.measured_rank_reserved_bytes = stages.front().reserved_peak;
        p.measured_rank_allocated_bytes = stages.front().allocated_peak;
        p.measured_rank_optimizer_allocated_bytes = stages.front().optimizer_step_allocated;
        for (const auto& s : stages) p.reserved_peak_bytes = std::max(p.reserved_peak_bytes, s.reserved_peak);
        p.device_need_bytes = p.reserved_peak_bytes + npb + std::max<std::int64_t>(0, c.verdict_margin_bytes);
        p.point_need_bytes = p.device_need_bytes;
        p.fits = p.device_need_bytes <= gpu.memory_bytes;
        p.modelled = true;
    } catch (const InputError& e) {
        p.why = e.what();
    }
    return p;
}

namespace {

// The host-pace model's probability of a wait for this job's layout (nullopt if it cannot say).
std::optional<double> wait_probability(const ExternalRun& run, const GpuSpec& gpu, const AllocatorConstants& c) {
    if (c.unsure_pace_band >= 0.5) return std::nullopt;  // no mix under these constants: not needed
    FrameworkProfile nanotron = *profile_by_name("nanotron");
    nanotron.allocator = c;
    try {
        return host_wait_probability(run.model, gpu, run.plan, nanotron);
    } catch (const InputError&) {
        return std::nullopt;
    }
}

// An expected pace the host-pace model is unsure of (allocator_model.hpp pace_rules), as
// pace_range.cpp mixes it: both paces' pools weighted by the wait probability `wait`, the point
// need from them, a running-ahead need at the top of the range kept where it is higher.
void mix_unsure_pace_point(MemoryPrediction& p, const ExternalRun& run, const GpuSpec& gpu, const AllocatorConstants& c,
                           double wait) {
    ExternalRun other = run;
    const bool ahead = run.host_pace == HostPace::runs_ahead;
    other.host_pace = ahead ? HostPace::waits_each_micro_batch : HostPace::runs_ahead;
    const MemoryPrediction o = predict_memory(other, gpu, c);
    if (!o.modelled) return;
    const auto mix = [&](std::int64_t mine, std::int64_t theirs) {
        return ahead ? mix_unsure_pace(mine, theirs, wait) : mix_unsure_pace(theirs, mine, wait);
    };
    p.measured_rank_reserved_bytes = mix(p.measured_rank_reserved_bytes, o.measured_rank_reserved_bytes);
    p.reserved_peak_bytes = mix(p.reserved_peak_bytes, o.reserved_peak_bytes);
    p.point_need_bytes = p.reserved_peak_bytes + non_pytorch_bytes(c, gpu) + std::max<std::int64_t>(0, c.verdict_margin_bytes);
    p.device_need_bytes = std::max(p.point_need_bytes, p.range_top_need_bytes);
    p.fits = p.device_need_bytes <= gpu.memory_bytes;
}

// predict_memory as the planner reports it (pace_range.cpp set_pace_range), by the same rules
// (allocator_model.hpp pace_rules): a host that runs ahead is judged at the top of its range too;
// at an expected pace, a pool whose top outgrows the device is given at the waiting pace, and an
// unsure pace's pool is the two paces' mixed.
MemoryPrediction predict_memory_as_planner(const ExternalRun& run, const GpuSpec& gpu, const AllocatorConstants& c,
                                           bool pace_expected) {
    MemoryPrediction p = predict_memory(run, gpu, c);
    if (!p.modelled) return p;
    std::optional<std::int64_t> high_reserved;
    if (run.host_pace == HostPace::runs_ahead) {
        AllocatorConstants top = range_high_constants(c);
        top.verdict_margin_bytes = 0;
        if (const MemoryPrediction high = predict_memory(run, gpu, top); high.modelled)
            high_reserved = high.reserved_peak_bytes;
    }
    const std::optional<double> wait = pace_expected ? wait_probability(run, gpu, c) : std::nullopt;
    const PaceRules rules =
        pace_rules(run.host_pace, pace_expected, wait, c, high_reserved, non_pytorch_bytes(c, gpu), gpu.memory_bytes);
    if (high_reserved) {
        p.range_top_need_bytes = rules.top_need_bytes;
        p.device_need_bytes = std::max(p.device_need_bytes, p.range_top_need_bytes);
        p.fits = p.device_need_bytes <= gpu.memory_bytes;
    }
    if (rules.flush) {
        ExternalRun waiting = run;
        waiting.host_pace = HostPace::waits_each_micro_batch;
        const MemoryPrediction w = predict_memory(waiting, gpu, c);
        p.measured_rank_reserved_bytes = w.measured_rank_reserved_bytes;
        p.reserved_peak_bytes = w.reserved_peak_bytes;
    } else if (rules.mix) {
        mix_unsure_pace_point(p, run, gpu, c, *wait);
    }
    return p;  // after the flush, device_need_bytes and fits: the running-ahead need
}

}  // namespace

MemoryPrediction predict_memory_at_expected_pace(const ExternalRun& run, const GpuSpec& gpu, const AllocatorConstants& c) {
    return predict_memory_as_planner(run, gpu, c, true);
}

MemoryPrediction predict_memory_at_given_pace(const ExternalRun& run, const GpuSpec& gpu, const AllocatorConstants& c) {
    return predict_memory_as_planner(run, gpu, c, false);
}

void annotate_host_pace(std::vector<ExternalRun>& runs, const GpuSpec& gpu) {
    for (ExternalRun& r : runs) {
        r.host_pace = HostPace::runs_ahead;
        r.stall_per_micro_batch_s.reset();
        if (r.outcome != RunOutcome::ok || !r.tokens_per_s_per_gpu || *r.tokens_per_s_per_gpu <= 0) continue;
        try {
            ThroughputOptions o = nanotron_throughput_options(r.model, r.plan);
            o.cluster_stall = false;
            const double predicted_s = estimate_throughput(r.model, gpu, r.plan, o).step_time_s;
            // The step's tokens, shared by its dp*tp*pp GPUs.
            const double measured_s = static_cast<double>(r.plan.global_batch_tokens()) /
                                      (*r.tokens_per_s_per_gpu * static_cast<double>(r.plan.gpus()));
            const double stall = (measured_s - predicted_s) / static_cast<double>(r.plan.grad_acc);
            r.stall_per_micro_batch_s = stall;
            if (stall >= kHostWaitStallPerMicroBatchS) r.host_pace = HostPace::waits_each_micro_batch;
        } catch (const InputError&) {
        }
    }
}

MemoryPrediction predict_memory_default(const ExternalRun& run, const GpuSpec& gpu) {
    MemoryPrediction p;
    try {
        const MemoryReport r = evaluate_memory(run.model, gpu, run.plan);
        p.measured_rank_reserved_bytes = r.peak_bytes;
        p.measured_rank_allocated_bytes = r.peak_bytes - r.at_peak.overhead;
        p.reserved_peak_bytes = r.peak_bytes;
        p.device_need_bytes = r.peak_bytes;
        p.point_need_bytes = r.peak_bytes;
        p.fits = r.fits;
        p.modelled = true;
    } catch (const InputError& e) {
        p.why = e.what();
    }
    return p;
}

namespace {

// y = other + (1 + fa) act + fl * loss_hidden + fr * runahead_hidden + c0 for the jobs' current
// parts, by least absolute relative error (tau = 0.5), or at the tau-quantile of the relative
// residuals (the pinball loss, Koenker & Bassett 1978: slope tau above the fit, 1 - tau below):
// iteratively reweighted least squares (Schlossmacher 1973) started from least squares, weights
// slope/|e| with |e| floored at 0.5 %. Writes {fa, fl, fr, c0}; false if the system is singular.
bool fit_reserved_l1(const std::vector<Parts>& parts, const std::vector<double>& measured, double tau, double x[kUnknowns]) {
    bool solved = false;
    for (int round = 0; round < 40; ++round) {
        double ata[kUnknowns][kUnknowns] = {}, aty[kUnknowns] = {};
        for (std::size_t j = 0; j < parts.size(); ++j) {
            const Parts& p = parts[j];
            const double y = measured[j];
            const double target = y - p.other - p.columns[0];
            double fitted = 0;
            for (int a = 0; a < kUnknowns; ++a) fitted += p.columns[a] * x[a];
            const double residual = std::fabs(fitted - target) / y;
            const double side = target > fitted ? tau : 1.0 - tau;  // the pinball loss's two slopes
            const double w = (round == 0 ? 1.0 : side / std::max(residual, 0.005)) / (y * y);
            for (int a = 0; a < kUnknowns; ++a) {
                for (int b = 0; b < kUnknowns; ++b) ata[a][b] += w * p.columns[a] * p.columns[b];
                aty[a] += w * p.columns[a] * target;
            }
        }
        double next[kUnknowns];
        if (!solve_linear<kUnknowns>(ata, aty, next)) return solved;
        std::copy(next, next + kUnknowns, x);
        solved = true;
    }
    return solved;
}

// Step 1 of fit_memory_constants: the reserved-peak constants on the ok jobs in `ok`. The peak
// phase depends on the constants, so it is re-chosen and the constants re-fitted until they settle.
AllocatorConstants fit_reserved_constants(const std::vector<ExternalRun>& runs, const std::vector<std::size_t>& ok,
                                          double tau) {
    AllocatorConstants c;
    std::vector<double> measured;
    for (std::size_t i : ok) measured.push_back(static_cast<double>(*runs[i].peak_reserved_bytes));
    for (int iter = 0; iter < 12 && ok.size() >= 3; ++iter) {
        std::vector<Parts> parts;
        for (std::size_t i : ok) parts.push_back(stage0_parts(runs[i], c));
        double x[kUnknowns] = {};
        if (!fit_reserved_l1(parts, measured, tau, x)) break;
        AllocatorConstants next = c;
        next.activation_fragmentation = std::max(0.0, x[0]);
        next.loss_stage_fragmentation = std::max(0.0, x[1]);
        next.pipeline_runahead_fragmentation = std::max(0.0, x[2]);
        next.reserved_constant_bytes = std::max<std::int64_t>(0, static_cast<std::int64_t>(std::llround(x[3])));
        const bool settled =
            std::fabs(next.activation_fragmentation - c.activation_fragmentation) < 1e-4 &&
            std::fabs(next.loss_stage_fragmentation - c.loss_stage_fragmentation) < 1e-3 &&
            std::fabs(next.pipeline_runahead_fragmentation - c.pipeline_runahead_fragmentation) < 1e-3 &&
            std::llabs(next.reserved_constant_bytes - c.reserved_constant_bytes) < kMiB;
        c = next;
        if (settled) break;
    }
    return c;
}

// The pace a user is told to expect for each run (throughput.hpp expected_host_pace: the host-pace
// model in `c`, from the layout); a plan the model refuses keeps the default.
std::vector<HostPace> expected_paces(const std::vector<ExternalRun>& runs, const GpuSpec& gpu,
                                     const AllocatorConstants& c) {
    FrameworkProfile nanotron = *profile_by_name("nanotron");
    nanotron.allocator = c;
    std::vector<HostPace> out(runs.size(), HostPace::runs_ahead);
    for (std::size_t i = 0; i < runs.size(); ++i) {
        try {
            out[i] = expected_host_pace(runs[i].model, gpu, runs[i].plan, nanotron);
        } catch (const InputError&) {
        }
    }
    return out;
}

// Step 3 of fit_memory_constants: the unsure band (allocator_model.hpp unsure_pace_band), in 0.05
// steps from 0.5 (no mix) down to 0, whose mixed point pools at the expected pace give the training
// ok jobs the least 95th-percentile absolute relative error: the tail that the median fit of the
// reserve terms leaves (a narrower band only when it is strictly better). The mix trades some of
// the median for it (data set README, "An unsure pace"). `expected`: every run's expected pace
// under c's host-pace model (expected_paces).
double fit_unsure_pace_band(const std::vector<ExternalRun>& runs, const std::vector<std::size_t>& ok,
                            const GpuSpec& gpu, AllocatorConstants c, const std::vector<HostPace>& expected) {
    double best_band = 0.5, best_p95 = 1e300;
    for (int step = 10; step >= 0; --step) {
        c.unsure_pace_band = 0.05 * step;
        std::vector<double> errors;
        for (std::size_t i : ok) {
            ExternalRun as_given = runs[i];
            as_given.host_pace = expected[i];
            const MemoryPrediction p = predict_memory_at_expected_pace(as_given, gpu, c);
            if (!p.modelled) continue;
            const double m = static_cast<double>(*runs[i].peak_reserved_bytes);
            errors.push_back(std::fabs(static_cast<double>(p.measured_rank_reserved_bytes) - m) / m);
        }
        const double p95 = errors.empty() ? 1e300 : percentile(errors, 0.95);
        if (p95 < best_p95 - 1e-12) {
            best_p95 = p95;
            best_band = c.unsure_pace_band;
        }
    }
    return best_band;
}

// Step 4 of fit_memory_constants: the margin (64 MiB steps, 0..24 GiB) on top of the most loaded
// stage's reserved peak + the memory outside PyTorch that gets the most fit/OOM verdicts right with
// at most max_fit_but_oom of the predicted-fit jobs dying OOM; a job expected to run ahead fits only
// if it also fits at the top of its range, as the planner judges it (range_top_need_bytes). The
// verdict is given at the pace a user is told to expect (`expected`, as for the unsure band), so the
// margin is fitted on the same predictions, not on the pace read off the job's step.
std::int64_t fit_verdict_margin(const std::vector<ExternalRun>& runs, const std::vector<std::size_t>& train,
                                const GpuSpec& gpu, AllocatorConstants c, const std::vector<HostPace>& expected,
                                double max_fit_but_oom) {
    struct Job {
        std::int64_t point;  // reserved + outside PyTorch, no margin
        std::int64_t top;    // the top of the range + outside PyTorch for a host that runs ahead, else 0
        bool oom;
    };
    std::vector<Job> jobs;
    c.verdict_margin_bytes = 0;
    for (std::size_t i : train) {
        if (!runs[i].has_memory_verdict()) continue;
        ExternalRun as_given = runs[i];
        as_given.host_pace = expected[i];
        const MemoryPrediction judged = predict_memory_at_expected_pace(as_given, gpu, c);
        if (judged.modelled)
            jobs.push_back({judged.point_need_bytes, judged.range_top_need_bytes, runs[i].outcome == RunOutcome::oom});
    }
    std::int64_t best_margin = 0;
    double best_score = -1e300;
    for (std::int64_t margin = 0; margin <= 24 * kGiB; margin += 64 * kMiB) {
        int right = 0, fit = 0, fit_oom = 0;
        for (const Job& j : jobs) {
            const bool fits = j.point + margin <= gpu.memory_bytes && j.top <= gpu.memory_bytes;
            right += fits != j.oom;
            fit += fits;
            fit_oom += fits && j.oom;
        }
        const double fbo = fit > 0 ? static_cast<double>(fit_oom) / fit : 0.0;
        const double acc = jobs.empty() ? 0.0 : static_cast<double>(right) / static_cast<double>(jobs.size());
        // Feasible values first (fit-but-OOM within bound), then accuracy; ties: the smaller value.
        const double score = (fbo <= max_fit_but_oom ? 10.0 : -fbo) + acc;
        if (score > best_score + 1e-12) {
            best_score = score;
            best_margin = margin;
        }
    }
    return best_margin;
}

}  // namespace

AllocatorConstants fit_memory_constants(const std::vector<ExternalRun>& runs, const std::vector<std::size_t>& train,
                                        const GpuSpec& gpu, double max_fit_but_oom) {
    // 1. Reserved peak of the measured rank, by least absolute relative error: the median error
    //    is what the gate reports, and an L1 fit is not pulled between the two modes that some
    //    layouts of the sweep show (data set README).
    std::vector<std::size_t> ok;
    for (std::size_t i : train)
        if (runs[i].outcome == RunOutcome::ok && runs[i].peak_reserved_bytes) {
            try {
                (void)nanotron_stage_memory(runs[i].model, runs[i].plan, AllocatorConstants{}, 0);
                ok.push_back(i);
            } catch (const InputError&) {
            }
        }
    AllocatorConstants c = fit_reserved_constants(runs, ok, 0.5);
    // The same terms at the top of the range (allocator_model.hpp kRangeUpperQuantile).
    const AllocatorConstants upper = fit_reserved_constants(runs, ok, kRangeUpperQuantile);
    c.upper_activation_fragmentation = upper.activation_fragmentation;
    c.upper_loss_stage_fragmentation = upper.loss_stage_fragmentation;
    c.upper_pipeline_runahead_fragmentation = upper.pipeline_runahead_fragmentation;
    c.upper_reserved_constant_bytes = upper.reserved_constant_bytes;
    // 2. The pace a user is told to expect, from the layout, on the paces the training jobs' step
    //    times show.
    c.pace = fit_host_pace_model(runs, train, gpu);
    // 3. Where that model is unsure, the point pool mixes both paces' (unsure_pace_band).
    const std::vector<HostPace> expected = expected_paces(runs, gpu, c);  // steps 3 and 4 judge at it
    c.unsure_pace_band = fit_unsure_pace_band(runs, ok, gpu, c, expected);
    // 4. The verdict margin beyond the modelled reserved peak and the memory outside the pool,
    //    judged at that expected pace.
    c.verdict_margin_bytes = fit_verdict_margin(runs, train, gpu, c, expected, max_fit_but_oom);
    char buf[256];
    std::snprintf(buf, sizeof buf, "fitted on %zu jobs (%zu with a measured reserved peak, outcome ok)", train.size(),
                  ok.size());
    c.provenance = buf;
    return c;
}

MemoryFigures memory_figures(const std::vector<ExternalRun>& runs, const std::vector<MemoryPrediction>& preds) {
    MemoryFigures f;
    std::vector<double> ok_err, ok_signed, log_err, opt_err, inside_node, across_nodes;
    for (std::size_t i = 0; i < runs.size(); ++i) {
        const ExternalRun& r = runs[i];
        const MemoryPrediction& p = preds[i];
        if (!p.modelled) {
            ++f.not_modelled;
            continue;
        }
        ++f.modelled;
        if (r.has_memory_verdict()) {
            ++f.verdict_jobs;
            const bool oom = r.outcome == RunOutcome::oom;
            f.verdict_right += p.fits != oom;
            f.predicted_fit += p.fits;
            f.predicted_fit_but_oom += p.fits && oom;
        }
        if (r.peak_allocated_after_backward_bytes && *r.peak_allocated_after_backward_bytes > 0 &&
            p.measured_rank_optimizer_allocated_bytes)
            opt_err.push_back(std::fabs(relative_error(static_cast<double>(*p.measured_rank_optimizer_allocated_bytes),
                                             static_cast<double>(*r.peak_allocated_after_backward_bytes))));
        if (r.peak_reserved_bytes && *r.peak_reserved_bytes > 0) {
            const double e = relative_error(static_cast<double>(p.measured_rank_reserved_bytes),
                                 static_cast<double>(*r.peak_reserved_bytes));
            if (r.outcome == RunOutcome::ok) {
                ok_err.push_back(std::fabs(e));
                ok_signed.push_back(e);
                if (r.gpus_per_node > 0)
                    (r.plan.tp <= r.gpus_per_node ? inside_node : across_nodes).push_back(std::fabs(e));
            } else if (r.outcome == RunOutcome::ok_metrics_but_oom_in_log) {
                log_err.push_back(std::fabs(e));
            }
        }
    }
    f.verdict_accuracy = f.verdict_jobs ? static_cast<double>(f.verdict_right) / f.verdict_jobs : 0;
    f.fit_but_oom_fraction = f.predicted_fit ? static_cast<double>(f.predicted_fit_but_oom) / f.predicted_fit : 0;
    f.reserved_ok = error_stats(ok_err);
    f.reserved_ok_tp_inside_node = error_stats(inside_node);
    f.reserved_ok_tp_across_nodes = error_stats(across_nodes);
    f.reserved_ok_median_signed = percentile(ok_signed, 0.5);
    f.reserved_oom_in_log = error_stats(log_err);
    f.optimizer_allocated = error_stats(opt_err);
    return f;
}


MemoryCrossValidation memory_cross_validation(const std::vector<ExternalRun>& measured_runs, const GpuSpec& gpu,
                                              int folds, const std::vector<Efficiency>* fold_step_constants) {
    if (folds < 2) throw InputError("folds", "cross-validation needs at least 2 folds, got " + std::to_string(folds));
    // The training folds' jobs carry the pace read off their own step time (annotate_host_pace):
    // a fit may use what its training jobs measured. A held-out job is predicted from what a user
    // knows before it runs: the expected pace for the point and the verdict, the waiting and the
    // running-ahead pace for the two ends of its range.
    std::vector<ExternalRun> runs = measured_runs;
    annotate_host_pace(runs, gpu);
    auto with_pace = [](ExternalRun r, HostPace p) {
        r.host_pace = p;
        return r;
    };
    MemoryCrossValidation cv;
    for (const ExternalRun& r : runs) {
        cv.host_pace.push_back(r.host_pace);
        cv.stall_per_micro_batch_s.push_back(r.stall_per_micro_batch_s);
    }
    const std::size_t n = runs.size();
    cv.folds = folds;
    cv.step_constants_per_fold = fold_step_constants && fold_step_constants->size() == static_cast<std::size_t>(folds);
    cv.before.resize(n);
    cv.held_out.resize(n);
    cv.held_out_low.resize(n);
    cv.held_out_high.resize(n);
    cv.held_out_measured_pace.resize(n);
    cv.committed.resize(n);
    const AllocatorConstants committed = nanotron_allocator_constants();
    const std::vector<HostPace> expected = expected_paces(runs, gpu, committed);  // in-sample rows
    for (std::size_t i = 0; i < n; ++i) {
        cv.before[i] = predict_memory_default(runs[i], gpu);
        cv.committed[i] = predict_memory_at_expected_pace(with_pace(runs[i], expected[i]), gpu, committed);
    }
    for (int k = 0; k < folds; ++k) {
        // With the tokens/s folds' step-time constants (the same family folds), fold k's training
        // labels rest on constants that never saw fold k; its held-out jobs' expected pace comes
        // from the host-pace model fitted on those labels.
        GpuSpec gk = gpu;
        std::vector<ExternalRun> labelled;
        if (cv.step_constants_per_fold) {
            gk.efficiency = (*fold_step_constants)[static_cast<std::size_t>(k)];
            labelled = measured_runs;
            annotate_host_pace(labelled, gk);
        }
        const std::vector<ExternalRun>& train_runs = cv.step_constants_per_fold ? labelled : runs;
        std::vector<std::size_t> train;
        for (std::size_t i = 0; i < n; ++i)
            if (fold_of(runs[i], folds) != k) train.push_back(i);
        const AllocatorConstants c = fit_memory_constants(train_runs, train, gk);
        cv.fold_constants.push_back(c);
        const std::vector<HostPace> fold_expected = expected_paces(runs, gpu, c);
        for (std::size_t i = 0; i < n; ++i) {
            if (fold_of(runs[i], folds) != k) continue;
            cv.held_out[i] = predict_memory_at_expected_pace(with_pace(runs[i], fold_expected[i]), gpu, c);
            // The range's ends as the planner gives them (pace_range.cpp set_pace_range), the point inside.
            cv.held_out_high[i] = range_end(cv.held_out[i], predict_memory(with_pace(runs[i], HostPace::runs_ahead), gpu,
                                                                          range_high_constants(c)), true);
            cv.held_out_low[i] = range_end(cv.held_out[i], predict_memory(with_pace(runs[i], HostPace::waits_each_micro_batch),
                                                                         gpu, range_low_constants(c)), false);
            cv.held_out_measured_pace[i] = predict_memory_at_given_pace(runs[i], gpu, c);
        }
    }
    std::vector<std::size_t> all(n);
    for (std::size_t i = 0; i < n; ++i) all[i] = i;
    cv.fitted_on_all = fit_memory_constants(runs, all, gpu);
    cv.before_figures = memory_figures(runs, cv.before);
    cv.held_out_figures = memory_figures(runs, cv.held_out);
    cv.held_out_measured_pace_figures = memory_figures(runs, cv.held_out_measured_pace);
    cv.committed_figures = memory_figures(runs, cv.committed);
    cv.held_out_range = range_figures(runs, cv.held_out_low, cv.held_out_high);
    return cv;
}

nlohmann::json figures_to_json(const MemoryFigures& f) {
    const auto stats = error_stats_json;
    return {{"modelled", f.modelled},
            {"not_modelled", f.not_modelled},
            {"verdict_jobs", f.verdict_jobs},
            {"verdict_accuracy", f.verdict_accuracy},
            {"predicted_fit", f.predicted_fit},
            {"predicted_fit_but_oom", f.predicted_fit_but_oom},
            {"fit_but_oom_fraction", f.fit_but_oom_fraction},
            {"reserved_peak_abs_error_ok", stats(f.reserved_ok)},
            {"reserved_peak_abs_error_ok_tp_inside_node", stats(f.reserved_ok_tp_inside_node)},
            {"reserved_peak_abs_error_ok_tp_across_nodes", stats(f.reserved_ok_tp_across_nodes)},
            {"reserved_peak_median_signed_error_ok", f.reserved_ok_median_signed},
            {"reserved_peak_abs_error_ok_metrics_but_oom_in_log", stats(f.reserved_oom_in_log)},
            {"optimizer_allocated_abs_error", stats(f.optimizer_allocated)}};
}

nlohmann::json constants_to_json(const AllocatorConstants& c) {
    return {{"activation_fragmentation", c.activation_fragmentation},
            {"loss_stage_fragmentation", c.loss_stage_fragmentation},
            {"pipeline_runahead_fragmentation", c.pipeline_runahead_fragmentation},
            {"reserved_constant_bytes", c.reserved_constant_bytes},
            // Negative means "not fitted: the GPU spec's overhead_bytes" (allocator_model.hpp), a
            // placeholder, not a byte count: null in JSON.
            {"non_pytorch_bytes", c.non_pytorch_bytes >= 0 ? nlohmann::json(c.non_pytorch_bytes) : nlohmann::json(nullptr)},
            {"verdict_margin_bytes", c.verdict_margin_bytes},
            {"unsure_pace_band", c.unsure_pace_band},
            {"upper_envelope",
             {{"quantile", kRangeUpperQuantile},
              {"activation_fragmentation", c.upper_activation_fragmentation},
              {"loss_stage_fragmentation", c.upper_loss_stage_fragmentation},
              {"pipeline_runahead_fragmentation", c.upper_pipeline_runahead_fragmentation},
              {"reserved_constant_bytes", c.upper_reserved_constant_bytes}}},
            {"host_pace_model",
             {{"intercept", c.pace.intercept},
              {"per_log2_nodes", c.pace.per_log2_nodes},
              {"per_log2_tp_nodes_in_pipeline", c.pace.per_log2_tp_nodes_in_pipeline},
              {"per_log2_tp_nodes_single_stage", c.pace.per_log2_tp_nodes_single_stage}}},
            {"provenance", c.provenance}};
}

nlohmann::json memory_cv_to_json(const MemoryCrossValidation& cv) {
    nlohmann::json folds = nlohmann::json::array();
    for (const auto& c : cv.fold_constants) folds.push_back(constants_to_json(c));
    const RangeFigures& r = cv.held_out_range;
    const nlohmann::json range = {{"ok_jobs", r.jobs},
                                  {"inside", r.inside},
                                  {"below", r.below},
                                  {"above", r.above},
                                  {"inside_fraction", r.inside_fraction},
                                  {"median_width_fraction_of_peak", r.median_width},
                                  {"verdict_fits", r.fits},
                                  {"verdict_fits_but_oom", r.fits_but_oom},
                                  {"verdict_may_not_fit", r.may_not_fit},
                                  {"verdict_may_not_fit_oom", r.may_not_fit_oom},
                                  {"verdict_does_not_fit", r.does_not_fit},
                                  {"verdict_does_not_fit_ok", r.does_not_fit_ok}};
    return {{"folds", cv.folds},
            {"fold_grouping", "model/tp/pp family"},
            {"expected_pace_step_constants", cv.step_constants_per_fold ? "per fold" : "the GPU spec's committed"},
            {"before_default_profile", figures_to_json(cv.before_figures)},
            {"held_out_nanotron_profile", figures_to_json(cv.held_out_figures)},
            {"held_out_range", range},
            {"diagnostic_uses_measured_step_time", figures_to_json(cv.held_out_measured_pace_figures)},
            {"committed_constants_in_sample", figures_to_json(cv.committed_figures)},
            {"fitted_on_all", constants_to_json(cv.fitted_on_all)},
            {"fold_constants", folds}};
}

}  // namespace preflight::validation
