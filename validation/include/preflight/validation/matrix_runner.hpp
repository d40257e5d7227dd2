// Running a validation matrix: one child process per run (`preflight run` on the device,
// or the PyTorch reference script), each report written under the output folder, a crash
// recorded as a stub report, already recorded runs skipped (resume), and the device and
// every command line kept as evidence. The caller checks that a device exists first.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "preflight/validation/matrix.hpp"

namespace preflight::validation {

struct MatrixRunnerOptions {
    std::filesystem::path data_dir;  // model catalog (PyTorch runs get the catalog's config.json)
    std::filesystem::path out;       // reports under out/<framework>/, logs under out/logs/<framework>/
    std::string gpu;                 // GPU spec the runs and the predictions use
    std::string framework = kSourceRuntime;  // kSourceRuntime or kSourcePytorch
    std::string preflight_exe;       // the `preflight` executable (runtime runs)
    std::string python = "python3";  // PyTorch runs
    std::string script;              // PyTorch script (validation/pytorch/train.py)
};

// Runs every run of the matrix not yet recorded; progress and a summary on stderr.
void run_matrix(const Matrix& matrix, const MatrixRunnerOptions& options);

// Output of a shell command (stdout and stderr), or nullopt when it cannot run / fails.
std::optional<std::string> capture_command(const std::string& command);

}  // namespace preflight::validation
