// What a JSON result records about the call that made it (as nccl-tests' JSON does): the
// program's version, the arguments as parsed, and the environment that changes the answer.
#pragma once

#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace preflight::cli {

// {"preflight_version", "arguments": [subcommand, then each given option and its values],
//  "environment": {"PREFLIGHT_DATA_DIR": value | null, "data_dir": the catalog folder read,
//  "date_utc": ISO 8601}}
nlohmann::json invocation_json(const CLI::App& sub, const std::filesystem::path& data_dir);

// The time now in UTC, written by strftime's format ("%Y-%m-%d": 2026-11-29).
std::string utc_now(const char* strftime_format);

}  // namespace preflight::cli
