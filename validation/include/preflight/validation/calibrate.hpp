// `preflight calibrate DIR`: fit the step-time model's efficiency constants and the
// per-GPU memory overhead to recorded device runs, on a training split only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "preflight/planner/gpu.hpp"
#include "preflight/planner/model.hpp"
#include "preflight/planner/plan.hpp"
#include "preflight/validation/stats.hpp"

namespace preflight::validation {

// One GEMM shape a run timed with `preflight run --op-times` (measured.op_times.gemms): `count`
// products of M x N x K (`batch` each) that took `time_s` in all.
struct GemmSample {
    bool fp8 = false;  // an fp8 product (its kind starts "fp8 ")
    double m = 0, n = 0, k = 0, batch = 1;
    std::int64_t count = 0;
    double time_s = 0;
    bool with_other_kernel = false;  // its op also ran another kernel (kind "...+bias_grad"): not fitted
};

struct CalibrationRun {
    std::string id;
    ModelConfig model;
    Plan plan;
    double step_time_s = 0;                     // measured
    std::optional<std::int64_t> tracked_peak_bytes;   // measured tensor peak
    std::optional<std::int64_t> overhead_bytes;       // measured non-tensor device memory
    std::optional<std::int64_t> predicted_tracked_peak_bytes;  // planner, report's profile
    std::optional<std::int64_t> device_used_peak_bytes;  // driver: device used over the pre-context baseline
    std::int64_t full_layer_activation_bytes = 0;        // planner: one layer's activations, nothing recomputed
    bool own_attention_kernel = false;                   // the runtime's own flash kernel ran (ran_own_attention_kernel)
    bool runtime_kernels = false;  // a run of the Preflight runtime: predicted with the runtime profile's options
    bool pytorch = false;          // a train.py run: predicted with the pytorch profile's options
    bool compiled = false;         // under torch.compile (ran_compiled): ThroughputOptions::model_compiled
    bool pool_allocator = false;   // a runtime run with its pool allocator (ran_pool_allocator): the pool's slack applies
    std::vector<GemmSample> gemms;                       // measured.op_times.gemms, when the run has them
};

// The step model's GEMM curve (gemm_max * d / (d + half_dim) of the peak, d = min(M, N, K);
// planner gemm_time_s) against GEMMs timed one by one, for one class of kernels: the 16-bit
// recipes' ("16-bit") or the fp32 recipe's ("fp32"). Errors are per shape, |measured - predicted| /
// predicted of one product's time.
struct GemmCurveFit {
    std::string kernels;              // "16-bit" | "fp32"
    int runs = 0, shapes = 0;         // runs with op times of this class, GEMM shapes over them
    double max_fraction_before = 0, half_dim_before = 0;  // the spec's
    double max_fraction_after = 0, half_dim_after = 0;    // fitted on every shape
    ErrorStats before, after;         // in sample
    ErrorStats by_family;             // each model family's shapes by a fit on the other families' shapes
};

// Fits, for each class with at least 3 shapes, the two GEMM constants to the shapes of every run
// in `runs` (weighted by their measured time: the GEMMs a step spends its time in count most),
// by Nelder-Mead on the squared log ratio of predicted to measured time.
std::vector<GemmCurveFit> fit_gemm_curves(const std::vector<CalibrationRun>& runs, const GpuSpec& gpu);

// What a fit is for: the GPU's generic constants ("efficiency", "overhead_bytes"), or the
// Preflight runtime's own (the spec's "runtime" block, GpuSpec::runtime), which also fits
// the fp32 recipe's kernel efficiencies and the pool's slack under full recompute.
enum class CalibrationTarget { generic, runtime };

// Deterministic split: a run is held out when FNV-1a(id) mod 4 == 0 (about a quarter);
// when that leaves one side empty, the last run by id moves across.
bool is_held_out(const std::string& id);
void split_runs(const std::vector<CalibrationRun>& runs, std::vector<CalibrationRun>& train,
                std::vector<CalibrationRun>& held_out);

// Device runs of `source` on GPU `gpu_name` with a measured step time, from every
// report under `dir`. Throws InputError when the folder is missing.
std::vector<CalibrationRun> load_calibration_runs(const std::filesystem::path& dir, const std::string& gpu_name,
                                                  const std::string& source, const std::filesystem::path& data_dir);

struct CalibrationResult {
    Efficiency before, after;
    std::int64_t overhead_before = 0, overhead_after = 0;
    double pool_slack_fraction_before = 0, pool_slack_fraction_after = 0;  // runtime target
    int pool_slack_runs = 0;
    CalibrationTarget target = CalibrationTarget::generic;
    int train_runs = 0, held_out_runs = 0, overhead_runs = 0;
    ErrorStats step_train_before, step_train_after, step_held_before, step_held_after;
    ErrorStats device_peak_held_before, device_peak_held_after;
    ErrorStats step_loo_after;  // leave-one-out over every run (folders of at most 64 runs)
    // Leave-one-model-family-out: each family's runs (gpt2, llama, ...) predicted by a fit on the
    // other families' runs only; empty with a single family.
    ErrorStats step_lofo_after;
    // The device peak of each family's runs with the overhead and pool slack fitted on the other
    // families' runs (leave-one-model-family-out); empty with a single family.
    ErrorStats device_peak_lofo_after;
    std::vector<std::string> families;
    int iterations = 0;
    // GEMMs timed one by one (runs recorded with --op-times); empty when none has them.
    std::vector<GemmCurveFit> gemm_curves;
    int runs_with_op_times = 0;
};

// The constants fitted: gemm_max_fraction_of_peak, gemm_half_efficiency_dim,
// attention_fraction_of_peak, memory_bound_fraction_of_hbm, step_overhead_s.
// Minimises the mean squared log ratio of predicted to measured step time over the
// training runs with Nelder-Mead (Nelder & Mead 1965) from the spec's values; the
// overhead is the median of the training runs' measured overheads.
// The runtime target starts from the spec's "runtime" block (else its generic constants),
// fits the fp32 recipe's kernel efficiencies too (no per-layer host floor: 0), and the pool slack fraction as the median over the
// training runs with full recompute of (device used peak - tracked peak - overhead) / one
// layer's full activations.
CalibrationResult calibrate(const std::vector<CalibrationRun>& runs, const GpuSpec& gpu,
                            CalibrationTarget target = CalibrationTarget::generic);

// The GPU spec JSON `spec` with "efficiency" and "overhead_bytes" replaced by the
// fitted values and their provenance (sources.overhead_bytes, efficiency.provenance); for
// the runtime target, its "runtime" block instead (everything else kept).
nlohmann::json calibrated_spec(const nlohmann::json& spec, const CalibrationResult& r, const std::string& provenance);

nlohmann::json calibration_to_json(const CalibrationResult& r);
std::string calibration_table(const CalibrationResult& r);

}  // namespace preflight::validation
