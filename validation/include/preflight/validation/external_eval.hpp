// Evaluation-only external data sets: every modelled row predicted with today's planner and
// the GPU specs' committed constants (nothing fitted on the data set), compared with what the
// source measured (tokens/s per GPU, peak reserved memory where stated), and gated on the
// data set's "targets".
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "preflight/validation/external_runs.hpp"
#include "preflight/validation/stats.hpp"

namespace preflight::validation {

struct EvaluatedRun {
    const ExternalRun* run = nullptr;
    std::string gpu;                     // the GPU spec used
    std::string skipped;                 // why the row is not compared (empty: compared)
    std::optional<double> measured_tokens_per_s_per_gpu, predicted_tokens_per_s_per_gpu;
    std::optional<double> measured_peak_bytes, predicted_peak_bytes;  // reserved pool
    // (predicted - measured) / measured.
    std::optional<double> tokens_error() const;
    std::optional<double> memory_error() const;
};

struct ExternalEvaluation {
    std::vector<EvaluatedRun> rows;
    ErrorStats tokens;               // |error| of tokens/s per GPU over compared rows
    ErrorStats memory;               // |error| of the reserved peak over rows that state it
    double tokens_median_signed = 0, memory_median_signed = 0;
    int skipped = 0;
    std::vector<std::string> failures;  // targets missed
    nlohmann::json summary;
    std::string markdown;
};

// Targets read from dataset.json (all optional): tokens_per_s_per_gpu_error_p50_max,
// tokens_per_s_per_gpu_error_p95_max, peak_memory_error_p50_max, peak_memory_error_p95_max,
// compared_rows_min. Each quantity a row measures (tokens/s per GPU, the reserved peak) or a
// target names fails when fewer than compared_rows_min rows (default 1) compared it, targets or
// none, and so does a set with no such quantity: a check that compared nothing never passes.
// Throws InputError for a target that is not a number.
ExternalEvaluation evaluate_external_dataset(const ExternalDataset& d, const std::filesystem::path& data_dir);

}  // namespace preflight::validation
