// `preflight validate --check DIR`: recompute every recorded run's prediction with
// today's planner and compare it with what was measured.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "preflight/planner/model.hpp"
#include "preflight/validation/matrix.hpp"
#include "preflight/validation/stats.hpp"

namespace preflight::validation {

// One compared quantity of one run.
struct Comparison {
    std::string quantity;  // peak_bytes, overhead_bytes, step_time_s, mfu
    double measured = 0;
    double predicted = 0;
    double relative_error = 0;  // (measured - predicted) / predicted (signed)
    std::optional<Tolerance> tolerance;  // none: reported, not judged
    bool within = true;
};

// Per-category memory at the peak (own-runtime reports carry a measured breakdown).
struct CategoryComparison {
    std::string category;
    std::int64_t measured_bytes = 0;
    std::int64_t predicted_bytes = 0;
};

struct RunCheck {
    std::string id;            // report file stem
    std::filesystem::path path;
    std::string source;        // preflight-runtime | pytorch
    std::string mode;          // device | dry-run
    std::string status;        // ok | allocation-failed | error | crashed
    std::string model;
    std::string gpu;
    nlohmann::json plan;
    std::vector<Comparison> comparisons;
    std::vector<CategoryComparison> categories;
    bool out_of_tolerance = false;
    bool not_compared = false;  // crashed, failed or nothing measured: the check fails on it
    std::string note;          // why a run was not compared, or what failed
    std::string tolerances_from;  // --tolerances, the matrix.json read, or the defaults
    const Comparison* find(const std::string& quantity) const;
};

struct SourceSummary {
    int runs = 0;              // reports of this source
    int compared = 0;          // status ok and compared
    int dry_runs = 0;          // of `compared`, walked without a device
    int failed = 0;            // allocation-failed, error or crashed
    int out_of_tolerance = 0;
    int not_compared = 0;      // runs that could not be compared (fail the check)
    int judged_out_of_memory = 0;  // allocation-failed runs judged against the predicted peak
    ErrorStats peak, step_time, mfu, overhead;
    std::map<std::string, ErrorStats> categories;  // per-category |relative error| (own runtime)
};

// A gate.json in a folder under the checked one: the peak error of the device runs of one source
// under that folder, judged as a set (check_gates.cpp). Keys: "source" (default
// preflight-runtime), "peak_abs_error_p50_max", "peak_abs_error_p95_max" (fractions, finite and
// >= 0), "compared_runs_min" (default 1: a gate over fewer runs fails, so none passes on
// nothing), "about" (text). Any other key is bad input naming the file and the key.
struct FolderGate {
    std::filesystem::path file;
    std::string source = "preflight-runtime";
    std::optional<double> peak_p50_max, peak_p95_max;
    int compared_runs_min = 1;
    int compared = 0;          // device runs of the source under the folder with a peak comparison
    ErrorStats peak;           // their |relative error| of the peak (the driver's figure on a GPU)
    std::vector<std::string> failures;
    bool passed() const { return failures.empty(); }
};

struct CheckResult {
    std::filesystem::path dir;
    std::vector<RunCheck> runs;
    std::map<std::string, SourceSummary> sources;
    SourceSummary all;
    std::vector<FolderGate> gates;  // every gate.json under dir
    // Every run compared and within tolerance, and every folder gate met; a run that could not
    // be compared fails, and so does a check that compared nothing.
    bool compared_any() const { return all.compared + all.judged_out_of_memory > 0; }
    bool gates_passed() const {
        for (const FolderGate& g : gates)
            if (!g.passed()) return false;
        return true;
    }
    bool passed() const { return all.out_of_tolerance == 0 && all.not_compared == 0 && compared_any() && gates_passed(); }
};

// Reads the gate.json files under result.dir and judges each on the runs under its folder.
// Throws InputError naming the file and field for a malformed gate.
void judge_folder_gates(CheckResult& result);

struct CheckOptions {
    std::filesystem::path data_dir;                 // model and GPU catalog
    std::optional<SourceTolerances> tolerances;     // overrides every matrix.json found
    std::optional<std::string> gpu;                 // predict on this GPU spec instead of the report's
};

// The runtime ran its own flash attention kernel, not cuDNN's (a run report's
// measured.attention_backend "kernel"; null in dry runs): its step time is predicted with the
// attention on the FP32 units (ThroughputOptions::attention_on_fp32_units).
bool ran_own_attention_kernel(const nlohmann::json& measured);
// Whether a runtime report's buffers came from the cudaMallocAsync pool (measured.allocator
// "pool", or no "allocator" at all: every run recorded before the planned arena), not the arena.
bool ran_pool_allocator(const nlohmann::json& measured);
// Whether a PyTorch report's model ran under torch.compile (measured.compiled true): its step time is
// predicted with ThroughputOptions::model_compiled, the fused passes, not Hugging Face's eager kernels.
bool ran_compiled(const nlohmann::json& measured);
// Whether a runtime report's driver peak leaves out the CUDA context (measured.driver.baseline_source
// "cudaMemGetInfo-after-context": no NVML baseline): such a peak is not compared with the prediction.
bool driver_peak_without_context(const nlohmann::json& measured);

// The model a report names (model.name) from the catalog: a refusal names that key, not --model.
ModelConfig load_recorded_model(const std::string& name, const std::filesystem::path& data_dir);

// True for a JSON document that is a run report (`preflight run` or train.py).
bool is_run_report(const nlohmann::json& j);

// Reads every run report under `dir` (recursively, sorted by path). Tolerances come
// from options.tolerances, else the nearest matrix.json in the report's folder or
// above it (up to `dir`), else default_tolerances(). Throws InputError for a missing
// folder, an unreadable JSON file or a folder without reports.
CheckResult check_directory(const std::filesystem::path& dir, const CheckOptions& options);

// Compares one report (already parsed) with today's prediction.
RunCheck check_report(const nlohmann::json& report, const std::string& id, const Tolerances& tolerances,
                      const CheckOptions& options);

// Fills sources/all from runs.
void summarize(CheckResult& result);

// The summary object printed by --format json.
nlohmann::json summary_to_json(const CheckResult& result);
std::string summary_table(const CheckResult& result);
std::string markdown_report(const CheckResult& result, const std::string& plot_file);

}  // namespace preflight::validation
