// One function per `preflight` subcommand. Each returns the process exit code
// (interface.md: 0 ok, 1 does not fit / out of tolerance, 2 bad input, 3 no GPU).
#pragma once

#include <filesystem>
#include <string>

#include "plan_flags.hpp"

namespace preflight::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitDoesNotFit = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitNoDevice = 3;

std::filesystem::path data_dir_of(const std::string& flag_value);

int run_memory(const PlanFlags& flags, bool show_timeline);
int run_models(const std::string& data_dir, const std::string& format);
int run_gpus(const std::string& data_dir, const std::string& format);

}  // namespace preflight::cli
