// A run report from `preflight run` / `preflight validate`, read leniently for the
// measured-vs-predicted overlay. Keys read are listed in gui/README.md; anything
// missing is noted and skipped, never fatal (except a file that is not JSON).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <QString>
#include <QStringList>
#include <nlohmann/json.hpp>

namespace preflight::gui {

struct MeasuredPhase {
    QString phase;            // e.g. "backward layer 32 (micro-batch 1)"
    std::int64_t total_bytes = 0;
};

// One side of a report ("measured" or "predicted").
struct ReportSide {
    std::optional<std::int64_t> peak_bytes;
    std::map<std::string, std::int64_t> per_gpu_bytes;  // contract category keys
    std::vector<MeasuredPhase> timeline;
    bool empty() const { return !peak_bytes && per_gpu_bytes.empty() && timeline.empty(); }
};

struct RunReport {
    QString path;
    std::optional<ReportSide> measured;
    std::optional<ReportSide> predicted;
    std::optional<nlohmann::json> plan;  // as written by plan_to_json
    QString model;                       // catalog name when the report names one
    QString gpu;
    QStringList notes;                   // what was missing or skipped
};

// Throws preflight::InputError when `doc` is not an object or has neither a
// usable "measured" nor "predicted" block.
RunReport parse_run_report(const nlohmann::json& doc, const QString& path = {});
// Reads and parses a file (InputError naming the file when unreadable/malformed).
RunReport load_run_report(const QString& path);

}  // namespace preflight::gui
