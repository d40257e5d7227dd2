#include "preflight/planner/catalog.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <tuple>
#include <utility>
#include <vector>

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

// Lower case, without '-', '_', '.' and spaces: "Llama-3-8B", "llama3_8b" and "llama-3-8b" meet.
std::string folded(const std::string& s) {
    std::string out;
    for (char c : s)
        if (c != '-' && c != '_' && c != '.' && c != ' ') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

// Levenshtein distance (insertions, deletions, substitutions), one row at a time.
std::size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        std::size_t diagonal = row[0];
        row[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diagonal = up;
        }
    }
    return row[b.size()];
}

// Up to three catalog names close to what was typed, folded: those it begins (or is part of)
// first, shortest first ("h100": h100-sxm-80gb, h100-pcie-80gb), then those within a quarter of
// its length in edits (at least 2), nearest first. Names are short and the catalog small.
std::vector<std::string> near_names(const std::string& spec, const std::vector<std::string>& names) {
    std::string name = spec.size() > 256 ? spec.substr(0, 256) : spec;
    if (name.size() > 5 && name.ends_with(".json")) name.resize(name.size() - 5);  // "llama-3-8b.json"
    const std::string typed = folded(name);
    if (typed.size() < 3) return {};  // "a", "ll": part of too many names to point at one
    const std::size_t allowed = std::max<std::size_t>(2, typed.size() / 4);
    std::vector<std::tuple<int, std::size_t, std::string>> near;
    for (const auto& n : names) {
        const std::string f = folded(n);
        if (f == typed) return {n};  // the same name but for case and separators: that one alone
        if (f.find(typed) != std::string::npos) near.emplace_back(0, f.size(), n);
        else if (const std::size_t d = edit_distance(typed, f); d <= allowed) near.emplace_back(1, d, n);
    }
    std::sort(near.begin(), near.end());
    std::vector<std::string> out;
    for (std::size_t i = 0; i < near.size() && i < 3; ++i) out.push_back(std::get<2>(near[i]));
    return out;
}

// A name in the catalog folder, else a path; the error names the nearest catalog names and lists the catalog.
fs::path resolve(const std::string& spec, const fs::path& folder, const std::string& flag) {
    const fs::path in_catalog = folder / (spec + ".json");
    std::error_code ec;
    if (spec.find('/') == std::string::npos && fs::is_regular_file(in_catalog, ec)) return in_catalog;
    if (fs::exists(spec, ec)) return spec;
    const std::vector<std::string> all = stems(folder);
    std::string names, near;
    for (const auto& n : all) names += (names.empty() ? "" : ", ") + n;
    for (const auto& n : near_names(spec, all)) near += (near.empty() ? "" : " or ") + ("'" + n + "'");
    throw InputError(flag, "'" + spec + "' is neither a catalog name nor a readable file" +
                               (near.empty() ? "" : "; did you mean " + near + "?") +
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

std::vector<ModelConfig> load_catalog_models(const fs::path& data_dir) {
    std::vector<ModelConfig> out;
    for (const std::string& name : catalog_models(data_dir)) {
        try {
            out.push_back(load_model(name, data_dir));
        } catch (const InputError&) {
            // a file `preflight models` names as broken: nothing to match against here
        }
    }
    return out;
}

}  // namespace preflight
