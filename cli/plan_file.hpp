// --plan FILE on `run` and `memory`: a plan document (plan_document.hpp) read from a file or, as
// `-`, from standard input (`preflight plan --emit preflight | preflight run --plan -`).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "preflight/planner/error.hpp"
#include "preflight/planner/model.hpp"
#include "preflight/planner/plan.hpp"

namespace preflight::cli {

// Registers --plan on `sub`, bound to `file`; it excludes --from (two sources of one plan).
void add_plan_file_option(CLI::App& sub, std::string& file);

// The file's plan over `flags_plan`, with every plan flag given on `sub` overriding the file's
// value (as beside --from). `model_name` / `gpu_name` become the names the file records unless
// --model / --gpu were given; given and different, the file and the flags disagree (InputError).
// Errors in the file name "--plan FILE" and the key.
// `model_config` receives the file's "model_config" (a --from config's model shape) where the file's
// model is used.
Plan plan_from_file(const std::string& file, const CLI::App& sub, const Plan& flags_plan, std::string& model_name,
                    std::string& gpu_name, std::string* framework = nullptr,
                    std::optional<nlohmann::json>* model_config = nullptr);

// The model a --plan file names: its "model_config" where it carries one (built under `name`),
// else the catalog entry or config file `name` names.
ModelConfig plan_file_model_config(const std::string& name, const std::optional<nlohmann::json>& config,
                                   const std::filesystem::path& data_dir);

// A refusal of a plan value, model or GPU that the --plan file set (its flag not given): named
// with the file and the key; any other error unchanged (also when `file` is empty).
InputError blame_plan_file(const std::string& file, const CLI::App& sub, const InputError& e);

}  // namespace preflight::cli
