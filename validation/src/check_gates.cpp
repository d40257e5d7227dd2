// Folder gates of `validate --check` (check.hpp FolderGate): a gate.json judges the peak error of
// a set of recorded runs as a set (P50, P95, and how many runs it rests on), where the per-run
// tolerances of matrix.json judge each run alone.
#include <algorithm>
#include <cmath>

#include "preflight/planner/error.hpp"
#include "preflight/planner/user_file.hpp"
#include "preflight/validation/check.hpp"
#include "preflight/planner/shown_value.hpp"

namespace preflight::validation {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

double fraction_field(const json& j, const std::string& key, const std::string& subject) {
    const json& v = j.at(key);
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
        throw InputError(subject + ": " + key, "must be a finite fraction >= 0 (0.01 is 1 %), got " + shown_json(v));
    return v.get<double>();
}

FolderGate gate_from_json(const json& j, const fs::path& file) {
    const std::string subject = file.string();
    if (!j.is_object()) throw InputError(subject, "a gate must be a JSON object");
    FolderGate g;
    g.file = file;
    for (const auto& [key, value] : j.items()) {
        if (key == "about") {
            if (!value.is_string()) throw InputError(subject + ": about", "must be a string");
        } else if (key == "source") {
            // A source no report carries would gate on nothing: refused, not a failed gate.
            if (!value.is_string() || (value.get<std::string>() != kSourceRuntime && value.get<std::string>() != kSourcePytorch))
                throw InputError(subject + ": source", "must be a source name (preflight-runtime, pytorch), got " + shown_json(value));
            g.source = value.get<std::string>();
        } else if (key == "peak_abs_error_p50_max") {
            g.peak_p50_max = fraction_field(j, key, subject);
        } else if (key == "peak_abs_error_p95_max") {
            g.peak_p95_max = fraction_field(j, key, subject);
        } else if (key == "compared_runs_min") {
            if (!value.is_number_integer() || value.get<std::int64_t>() < 1 || value.get<std::int64_t>() > 1'000'000)
                throw InputError(subject + ": compared_runs_min", "must be a whole number in [1, 1000000], got " + shown_json(value));
            g.compared_runs_min = static_cast<int>(value.get<std::int64_t>());
        } else {
            throw InputError(subject + ": " + key,
                             "unknown key (about, source, peak_abs_error_p50_max, peak_abs_error_p95_max, "
                             "compared_runs_min)");
        }
    }
    if (!g.peak_p50_max && !g.peak_p95_max)
        throw InputError(subject, "a gate needs peak_abs_error_p50_max or peak_abs_error_p95_max");
    return g;
}

// Whether `path` lies under `folder` (both as found by the directory walk).
bool under(const fs::path& path, const fs::path& folder) {
    const fs::path rel = path.lexically_relative(folder);
    return !rel.empty() && *rel.begin() != "..";
}

void judge(FolderGate& g, const std::vector<RunCheck>& runs) {
    std::vector<double> errors;
    const fs::path folder = g.file.parent_path();
    for (const RunCheck& r : runs) {
        if (r.source != g.source || r.mode != "device" || !under(r.path, folder)) continue;
        if (const Comparison* c = r.find("peak_bytes")) errors.push_back(std::fabs(c->relative_error));
    }
    g.compared = static_cast<int>(errors.size());
    g.peak = error_stats(errors);
    if (g.compared < g.compared_runs_min)
        g.failures.push_back(std::to_string(g.compared) + " device runs compared, fewer than compared_runs_min " +
                             std::to_string(g.compared_runs_min));
    if (g.compared == 0) return;
    if (g.peak_p50_max && g.peak.p50 > *g.peak_p50_max)
        g.failures.push_back("peak error P50 " + exceeds_text(g.peak.p50, *g.peak_p50_max));
    if (g.peak_p95_max && g.peak.p95 > *g.peak_p95_max)
        g.failures.push_back("peak error P95 " + exceeds_text(g.peak.p95, *g.peak_p95_max));
}

}  // namespace

void judge_folder_gates(CheckResult& result) {
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(result.dir))
        if (e.is_regular_file() && e.path().filename() == "gate.json") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    result.gates.clear();
    for (const fs::path& f : files) {
        FolderGate g = interpret_user_json(f.string(), [&] { return gate_from_json(read_json_file(f, "--check"), f); });
        judge(g, result.runs);
        result.gates.push_back(std::move(g));
    }
}

}  // namespace preflight::validation
