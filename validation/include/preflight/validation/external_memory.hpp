// Memory predictions for external measured runs (external_runs.hpp): the reserved peak of the
// measured rank and the fit/OOM verdict, the fit of the caching-allocator constants on a
// training subset, and k-fold cross-validation grouped by model/tp/pp family.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "preflight/planner/allocator_model.hpp"
#include "preflight/planner/gpu.hpp"
#include "preflight/validation/external_runs.hpp"
#include "preflight/validation/stats.hpp"

namespace preflight::validation {

struct MemoryPrediction {
    bool modelled = false;                  // false: the profile cannot build this plan (see why)
    std::string why;
    std::int64_t measured_rank_reserved_bytes = 0;   // pipeline stage 0 (global rank 0), reserved pool
    std::int64_t measured_rank_allocated_bytes = 0;
    // Stage 0's tensors during the optimizer step: what the sweep's peak_mem_alloc_gib measures
    // (max_memory_allocated after a reset that followed forward/backward). No fitted constant
    // enters it. Empty for the default profile.
    std::optional<std::int64_t> measured_rank_optimizer_allocated_bytes;
    std::int64_t reserved_peak_bytes = 0;   // the most loaded stage
    std::int64_t device_need_bytes = 0;     // reserved_peak_bytes + memory outside PyTorch (+ margin)
    std::int64_t point_need_bytes = 0;      // the same at the point, before any judgement at the range's top
    bool fits = false;
    // A host that runs ahead, as the planner judges it (predict_memory_at_expected_pace,
    // predict_memory_at_given_pace): its pool at the top of the range + the memory outside PyTorch
    // (allocator_model.hpp range_top_need_bytes), which device_need_bytes is at least. 0 otherwise.
    std::int64_t range_top_need_bytes = 0;
};

// The nanotron profile's prediction for a run with the given allocator constants.
MemoryPrediction predict_memory(const ExternalRun& run, const GpuSpec& gpu, const AllocatorConstants& constants);
// The same at a pace the planner expected (preflight memory without --host-pace), as
// pace_range.cpp gives it: a host that runs ahead is judged at the top of its range too
// (range_top_need_bytes), and a running-ahead pool whose top outgrows the device is given at the
// waiting pace (allocator_model.hpp pool_outgrows_device), with the running-ahead need and verdict.
MemoryPrediction predict_memory_at_expected_pace(const ExternalRun& run, const GpuSpec& gpu,
                                                 const AllocatorConstants& constants);
// The same at a pace the user states (--host-pace): judged at the top of the range when the host
// runs ahead, the pool kept at the stated pace.
MemoryPrediction predict_memory_at_given_pace(const ExternalRun& run, const GpuSpec& gpu,
                                              const AllocatorConstants& constants);

// The default (Megatron-like) profile's prediction, as `preflight memory` gives it today:
// peak_bytes (allocated + the GPU spec's overhead) for both the measured rank and the verdict.
MemoryPrediction predict_memory_default(const ExternalRun& run, const GpuSpec& gpu);

// Fits the allocator constants on runs[train_idx]:
//  - activation_fragmentation, loss_stage_fragmentation, reserved_constant_bytes by least
//    absolute relative error of the measured rank's reserved peak (jobs with outcome ok), each
//    job's peak phase re-chosen under the current constants until it settles; the same four at
//    kRangeUpperQuantile (pinball loss) as the upper envelope, the top of the range;
//  - the host-pace model (fit_host_pace_model), which gives each job the pace a user is told to expect;
//  - verdict_margin_bytes (what the measured jobs needed beyond the model) as the value
//    that gets the most fit/OOM verdicts right (outcome ok or oom) while keeping the share of
//    predicted-fit jobs that died OOM at or below max_fit_but_oom.
AllocatorConstants fit_memory_constants(const std::vector<ExternalRun>& runs, const std::vector<std::size_t>& train_idx,
                                        const GpuSpec& gpu, double max_fit_but_oom = 0.005);

// The host-pace model (allocator_model.hpp HostPaceModel) by maximum likelihood (logistic
// regression) on the runs[train_idx] that carry a pace read off their step time
// (annotate_host_pace: stall_per_micro_batch_s set); unfitted (all zero) when none does.
HostPaceModel fit_host_pace_model(const std::vector<ExternalRun>& runs, const std::vector<std::size_t>& train_idx,
                                  const GpuSpec& gpu);

// Sets every ok nanotron job's stall_per_micro_batch_s (measured step time minus the planner's
// nanotron step time without any stall, per micro-batch) and host_pace (waits when the stall is
// at least kHostWaitStallPerMicroBatchS). Jobs without a measured tokens/s, or whose plan the
// step-time model refuses, keep runs_ahead: the larger pool, the safe side for a verdict.
// The step time is a measurement independent of memory, so the label leaks no memory figure.
void annotate_host_pace(std::vector<ExternalRun>& runs, const GpuSpec& gpu);

// Figures over a set of predictions.
struct MemoryFigures {
    int modelled = 0, not_modelled = 0;
    int verdict_jobs = 0;          // ok or oom, modelled
    int verdict_right = 0;
    int predicted_fit = 0;         // of verdict_jobs
    int predicted_fit_but_oom = 0;
    double verdict_accuracy = 0;   // verdict_right / verdict_jobs
    double fit_but_oom_fraction = 0;  // predicted_fit_but_oom / predicted_fit
    ErrorStats reserved_ok;        // |relative error| of the measured rank's reserved peak, outcome ok
    // The same split by tensor-parallel reach: the tp group inside one node (tp <= the run's GPUs
    // per node) or across nodes. Runs without a known GPUs-per-node count are in neither.
    ErrorStats reserved_ok_tp_inside_node, reserved_ok_tp_across_nodes;
    double reserved_ok_median_signed = 0;  // (predicted - measured) / measured, median
    ErrorStats reserved_oom_in_log;  // same, outcome ok_metrics_but_oom_in_log (reported, not gated)
    // |relative error| of stage 0's allocated tensors during the optimizer step against the
    // measured allocated peak after the backward, every job that has one: the code-derived model
    // states and buffers, checked without any fitted term.
    ErrorStats optimizer_allocated;
};
MemoryFigures memory_figures(const std::vector<ExternalRun>& runs, const std::vector<MemoryPrediction>& predictions);

// Where the measured reserved peak lies against a predicted range [low, high] (the pool when the
// host waits for the GPU, and when it runs ahead), over the ok jobs modelled both ways.
struct RangeFigures {
    int jobs = 0;
    int inside = 0;           // low - 0.05 GiB <= measured <= high + 0.05 GiB (the sweep's 0.1 GiB resolution)
    int below = 0, above = 0;  // measured under the low end / over the high end
    double inside_fraction = 0;
    double median_width = 0;  // (high - low) / measured, median
    // The verdict by range, over the jobs with a memory verdict (ok or oom): fits (the high end
    // under the limit), may not fit (the limit inside the range), does not fit (the low end over it).
    int fits = 0, fits_but_oom = 0, may_not_fit = 0, may_not_fit_oom = 0, does_not_fit = 0, does_not_fit_ok = 0;
};
// One end of a predicted range (high: the top) that keeps the point prediction inside, figure by
// figure (the planner's set_pace_range does the same).
MemoryPrediction range_end(const MemoryPrediction& point, MemoryPrediction end, bool high);
RangeFigures range_figures(const std::vector<ExternalRun>& runs, const std::vector<MemoryPrediction>& low,
                           const std::vector<MemoryPrediction>& high);

struct MemoryCrossValidation {
    int folds = 0;
    std::vector<MemoryPrediction> before;     // default profile
    // Nanotron profile, constants fitted without the job's fold, the job predicted from user inputs
    // only: the expected host pace (expected_host_pace) here, the waiting and running-ahead paces in
    // held_out_low and held_out_high (the range). held_out_measured_pace is a diagnostic: the pace
    // read off the job's own step time.
    std::vector<MemoryPrediction> held_out, held_out_low, held_out_high, held_out_measured_pace;
    std::vector<MemoryPrediction> committed;  // nanotron profile with the committed constants (in-sample), expected pace
    MemoryFigures before_figures, held_out_figures, committed_figures;
    MemoryFigures held_out_measured_pace_figures;  // uses the measured step time: not a held-out figure
    RangeFigures held_out_range;
    bool step_constants_per_fold = false;  // expected paces from per-fold step-time constants
    AllocatorConstants fitted_on_all;         // the fit on every job (what the profile should commit)
    // Per run (annotate_host_pace): the host pace every prediction above used, and the stall it was read from.
    std::vector<HostPace> host_pace;
    std::vector<std::optional<double>> stall_per_micro_batch_s;
    std::vector<AllocatorConstants> fold_constants;
};

// Whether a fitted data set's memory is cross-validated: only nanotron's profile has a fitted
// allocator model (the other fitted data sets calibrate the step time only).
inline bool has_memory_model(const ExternalDataset& d) { return d.framework == "nanotron"; }

// k-fold cross-validation grouped by model/tp/pp family (fold_of); the training folds' jobs are
// annotated by annotate_host_pace (a copy: `runs` is not changed), the held-out jobs predicted
// from user inputs only. Throws InputError for k < 2.
// fold_step_constants (one Efficiency per fold, the tokens/s cross-validation's fold_fits over the
// same folds): fold k's expected paces and training labels use its constants instead of the GPU
// spec's, which were fitted on every job's tokens/s.
MemoryCrossValidation memory_cross_validation(const std::vector<ExternalRun>& runs, const GpuSpec& gpu, int folds,
                                              const std::vector<Efficiency>* fold_step_constants = nullptr);

nlohmann::json figures_to_json(const MemoryFigures& f);
nlohmann::json constants_to_json(const AllocatorConstants& c);
nlohmann::json memory_cv_to_json(const MemoryCrossValidation& cv);
// Markdown: before/after table, the fitted constants, the residual table by model and layout.
std::string memory_cv_markdown(const std::vector<ExternalRun>& runs, const MemoryCrossValidation& cv);
// SVG: held-out predicted vs measured reserved peak (ok jobs), via the validation plot writer.
std::string memory_cv_svg(const std::vector<ExternalRun>& runs, const MemoryCrossValidation& cv);

// The gate: every figure in `targets` (dataset.json) that the held-out figures exceed, as
// sentences; empty when all hold. Keys: memory_verdict_accuracy_min, fit_but_oom_fraction_max,
// reserved_peak_abs_error_p50_max, reserved_peak_abs_error_p95_max,
// optimizer_allocated_abs_error_p95_max; a gate whose figure rests on fewer than compared_rows_min
// jobs (default 1) fails instead.
std::vector<std::string> memory_gate_failures(const MemoryFigures& held_out, const nlohmann::json& targets);
// The range's gate: reserved_range_inside_fraction_min, reserved_range_median_width_max (over the
// ok jobs; fewer than compared_rows_min of them, default 1, fails).
std::vector<std::string> range_gate_failures(const RangeFigures& range, const nlohmann::json& targets);

}  // namespace preflight::validation
