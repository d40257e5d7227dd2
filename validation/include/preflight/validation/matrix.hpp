// Validation matrices (validation/matrices/*.json): named sets of single-GPU plans
// to run and compare with the planner, with per-quantity tolerances per source.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "preflight/planner/plan.hpp"

namespace preflight::validation {

// Sources a report can come from (the framework that ran the plan) and the planner
// profile each one is predicted with.
inline constexpr const char* kSourceRuntime = "preflight-runtime";
inline constexpr const char* kSourcePytorch = "pytorch";

// A measurement agrees with its prediction when |measured - predicted| <= abs + rel * |predicted|.
struct Tolerance {
    double abs = 0;
    double rel = 0;
    bool within(double measured, double predicted) const;
};

// quantity ("peak_bytes", "overhead_bytes", "step_time_s", "mfu") -> tolerance.
using Tolerances = std::map<std::string, Tolerance>;
// source ("preflight-runtime", "pytorch") -> its tolerances.
using SourceTolerances = std::map<std::string, Tolerances>;

// Used when neither the report's folder nor the command names a matrix.
SourceTolerances default_tolerances();

struct MatrixRun {
    std::string id;     // unique within the matrix; the report's file stem
    std::string model;  // catalog name or config.json path
    Plan plan;          // single-GPU plan (dp = tp = pp = 1)
    int steps = 10;     // measured steps
    int warmup = 2;
};

struct Matrix {
    std::string name;
    std::string description;
    std::string gpu = "h100-sxm-80gb";  // spec the predictions use unless overridden
    std::vector<MatrixRun> runs;
    SourceTolerances tolerances;
    nlohmann::json raw;  // the file as read (copied next to the reports)
};

// Parses a matrix object; throws InputError naming the field (runs[3].plan.seq, ...).
Matrix matrix_from_json(const nlohmann::json& j, const std::string& subject);
// `spec` is a matrix name under `matrices_dir` (smoke, full) or a path to a JSON file; errors
// name `flag` (--matrix, --tolerances), the file and the field.
Matrix load_matrix(const std::string& spec, const std::filesystem::path& matrices_dir,
                   const std::string& flag = "--matrix");
// A `--tolerances` file (`spec` as for load_matrix): a JSON object whose "tolerances" block is
// read over the defaults; its other keys (a whole matrix's "name", "runs", ...) are optional and
// not read. Errors have the subject "FLAG FILE" and name the key ("FLAG FILE: tolerances.mfu.x: ...").
SourceTolerances load_tolerances(const std::string& spec, const std::filesystem::path& matrices_dir,
                                 const std::string& flag = "--tolerances");
// validation/matrices of the source tree (compiled in), or $PREFLIGHT_MATRICES_DIR.
std::filesystem::path default_matrices_dir();

// `preflight run` arguments for one run (after the program name and "run").
std::vector<std::string> run_arguments(const MatrixRun& run, const std::string& gpu);

}  // namespace preflight::validation
