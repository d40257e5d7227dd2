// One function per `preflight` subcommand. Each returns the process exit code
// (docs/interface.md: 0 ok, 1 does not fit / check failed, 2 bad input, 3 no GPU, 4 internal error).
#pragma once

#include <filesystem>
#include <functional>
#include <string>

#include "plan_flags.hpp"

namespace preflight::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitDoesNotFit = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitNoDevice = 3;
// A bug in Preflight itself (an exception that is not bad input): not the user's fault.
inline constexpr int kExitInternal = 4;

std::filesystem::path data_dir_of(const std::string& flag_value);

// A registered subcommand: `run` is called when `sub` was parsed.
struct Command {
    CLI::App* sub = nullptr;
    std::function<int()> run;
};

// Each add_*_command registers its subcommand, flags and help on `app`; state
// the flags bind to lives in the returned closure.
Command add_memory_command(CLI::App& app);
Command add_models_command(CLI::App& app);
Command add_gpus_command(CLI::App& app);
// `preflight run` (cmd_run.cpp): execute a plan on the GPU, or walk it with --dry-run.
Command add_run_command(CLI::App& app);
Command add_plan_command(CLI::App& app);
// `preflight validate` (cmd_validate.cpp): run a validation matrix, or --check recorded runs.
Command add_validate_command(CLI::App& app);
// `preflight calibrate` (cmd_calibrate.cpp): fit a GPU spec's efficiency constants to recorded runs.
Command add_calibrate_command(CLI::App& app);

// `plan_file`: --plan (empty: none), read with `sub`'s given flags overriding its values.
int run_memory(const PlanFlags& flags, bool show_timeline, const std::string& plan_file, const CLI::App& sub);
int run_models(const std::string& data_dir, const std::string& format);
int run_gpus(const std::string& data_dir, const std::string& format);

}  // namespace preflight::cli
