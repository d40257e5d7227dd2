// `preflight calibrate DIR` when DIR holds external measured data sets (folders with a
// dataset.json): k-fold cross-validated step-time fit and the memory figures, one table.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace preflight::cli {

struct CalibrateExternalOptions {
    std::string gpu;         // empty: each data set's own GPU
    std::string write_spec;  // write the GPU spec with the fitted step-time constants here
    std::string format = "table";
    std::filesystem::path data_dir;
    bool memory = true;      // also print the memory cross-validation
};

// A held-out step-time error (P50, a fraction) above this after fitting draws a warning.
inline constexpr double kPoorFitP50 = 0.5;

// A fit that leaves the held-out P50 of `error_name` ("step-time error", "tokens/s-per-GPU error")
// above kPoorFitP50: with --write-spec an InputError (the spec is not written), else a
// `preflight: warning:` line on stderr.
void check_fit_quality(const std::string& what, const std::string& error_name, double held_out_before_p50,
                       double held_out_after_p50, const std::string& write_spec);

int run_calibrate_external(const std::vector<std::filesystem::path>& datasets, const CalibrateExternalOptions& o);

}  // namespace preflight::cli
