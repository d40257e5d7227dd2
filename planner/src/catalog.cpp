#include "preflight/planner/catalog.hpp"

#include <algorithm>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "preflight/planner/error.hpp"
#include "preflight/planner/user_file.hpp"

#ifndef PREFLIGHT_DATA_DIR
#define PREFLIGHT_DATA_DIR "data"
#endif

namespace preflight {

namespace fs = std::filesystem;

fs::path default_data_dir() {
    if (const char* env = std::getenv("PREFLIGHT_DATA_DIR"); env && *env) return env;
    return PREFLIGHT_DATA_DIR;
}

namespace {

std::vector<std::string> stems(const fs::path& dir) {
    std::vector<std::string> v;
    std::error_code ec;
    // Regular files only: a folder named "d.json" is no catalog entry.
    for (const auto& e : fs::directory_iterator(dir, ec))
        if (e.path().extension() == ".json" && e.is_regular_file(ec)) v.push_back(e.path().stem().string());
    std::sort(v.begin(), v.end());
    return v;
}

// A name in the catalog folder, else a path; the error lists the catalog.
fs::path resolve(const std::string& spec, const fs::path& folder, const std::string& flag) {
    const fs::path in_catalog = folder / (spec + ".json");
    std::error_code ec;
    if (spec.find('/') == std::string::npos && fs::is_regular_file(in_catalog, ec)) return in_catalog;
    if (fs::exists(spec, ec)) return spec;
    std::string names;
    for (const auto& n : stems(folder)) names += (names.empty() ? "" : ", ") + n;
    throw InputError(flag, "'" + spec + "' is neither a catalog name nor a readable file" +
                               (names.empty() ? " (catalog folder " + folder.string() + " is empty or missing)"
                                              : " (catalog: " + names + ")"));
}

std::string display_stem(const fs::path& path) {
    return path.filename() == "config.json" ? path.parent_path().filename().string() : path.stem().string();
}

}  // namespace

ModelConfig load_model(const std::string& spec, const fs::path& data_dir) {
    const fs::path path = resolve(spec, data_dir / "models", "--model");
    const auto j = read_json_file(path, "--model");
    return interpret_user_json("--model " + path.string(), [&] { return model_from_hf_config(j, display_stem(path)); });
}

namespace {

// A calibration transfer names a catalog GPU that may itself be transferred (A100 80GB from
// A100 40GB); chains longer than this are refused, which also ends any cycle.
constexpr int kMaxTransferChain = 4;

GpuSpec load_gpu_chain(const std::string& spec, const fs::path& data_dir, int depth) {
    const fs::path path = resolve(spec, data_dir / "gpus", "--gpu");
    const auto j = read_json_file(path, "--gpu");
    return interpret_user_json("--gpu " + path.string(), [&] {
        GpuSpec g = gpu_from_json(j, display_stem(path));
        if (!g.calibration_from) return g;
        if (depth >= kMaxTransferChain)
            throw InputError("calibration_from.gpu", "chain of transfers longer than " +
                                                         std::to_string(kMaxTransferChain) + " (a cycle?)");
        const std::string source = g.calibration_from->gpu;
        if (source.find('/') != std::string::npos || source.find('\\') != std::string::npos || source.ends_with(".json"))
            throw InputError("calibration_from.gpu", "must be a catalog name, got '" + source + "'");
        return apply_calibration_transfer(std::move(g), load_gpu_chain(source, data_dir, depth + 1));
    });
}

}  // namespace

GpuSpec load_gpu(const std::string& spec, const fs::path& data_dir) { return load_gpu_chain(spec, data_dir, 0); }

std::vector<std::string> catalog_models(const fs::path& data_dir) { return stems(data_dir / "models"); }
std::vector<std::string> catalog_gpus(const fs::path& data_dir) { return stems(data_dir / "gpus"); }

}  // namespace preflight
