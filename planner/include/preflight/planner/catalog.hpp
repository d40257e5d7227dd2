// The model and GPU catalog under data/: lookup by name or by file path.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "preflight/planner/gpu.hpp"
#include "preflight/planner/model.hpp"
#include "preflight/planner/user_file.hpp"  // read_json_file: every user JSON file is read there

namespace preflight {

// Where data/ lives: $PREFLIGHT_DATA_DIR if set, else the directory compiled in
// (the source tree's data/). Pass the result to the functions below.
std::filesystem::path default_data_dir();

// `spec` is a catalog name (file stem in data/models) or a path to a config.json.
ModelConfig load_model(const std::string& spec, const std::filesystem::path& data_dir);
// `spec` is a catalog name (file stem in data/gpus) or a path to a GPU spec JSON.
GpuSpec load_gpu(const std::string& spec, const std::filesystem::path& data_dir);

// Sorted catalog names.
std::vector<std::string> catalog_models(const std::filesystem::path& data_dir);
std::vector<std::string> catalog_gpus(const std::filesystem::path& data_dir);
// Every catalog model that reads (a broken file is left out: `preflight models` names it), in
// name order: what a config's model shape is matched against (ImportContext::catalog).
std::vector<ModelConfig> load_catalog_models(const std::filesystem::path& data_dir);

}  // namespace preflight
