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

int run_calibrate_external(const std::vector<std::filesystem::path>& datasets, const CalibrateExternalOptions& o);

}  // namespace preflight::cli
