#include "run_report.hpp"

#include <cmath>

#include "preflight/planner/catalog.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/limits.hpp"
#include "units.hpp"

namespace preflight::gui {

using nlohmann::json;

namespace {

// A byte count as the CLI's `validate --check` reads one: a whole number in [0, kMaxBytes = 2^60]
// (1e+18 written as a float too); anything else is no figure. Was: any double cast to int64
// (undefined past its range) and negatives kept, so an overlay read "-8192.0 PiB".
std::optional<std::int64_t> as_bytes(const json& v) {
    if (v.is_number_unsigned()) {
        const auto u = v.get<std::uint64_t>();
        if (u > static_cast<std::uint64_t>(limits::kMaxBytes)) return std::nullopt;
        return static_cast<std::int64_t>(u);
    }
    if (v.is_number_integer()) {
        const auto i = v.get<std::int64_t>();
        if (i < 0 || i > limits::kMaxBytes) return std::nullopt;
        return i;
    }
    if (v.is_number_float()) {
        const double d = v.get<double>();
        if (!(d >= 0.0 && d <= static_cast<double>(limits::kMaxBytes)) || d != std::floor(d)) return std::nullopt;
        return static_cast<std::int64_t>(d);
    }
    return std::nullopt;
}

QString name_of(const json& doc, const char* key) {
    if (!doc.contains(key)) return {};
    const json& v = doc.at(key);
    if (v.is_string()) return QString::fromStdString(v.get<std::string>());
    if (v.is_object() && v.contains("name") && v.at("name").is_string())
        return QString::fromStdString(v.at("name").get<std::string>());
    return {};
}

ReportSide read_side(const json& side_in, const char* side_name, QStringList& notes) {
    ReportSide out;
    const QString where = QString::fromLatin1(side_name);
    if (!side_in.is_object()) {
        notes << where + ": not an object, ignored";
        return out;
    }
    // Also accept the memory_document form: {"memory": {...}}.
    const json& side = side_in.contains("memory") && side_in.at("memory").is_object() ? side_in.at("memory") : side_in;

    if (side.contains("peak_bytes")) {
        out.peak_bytes = as_bytes(side.at("peak_bytes"));
        if (!out.peak_bytes) notes << where + ".peak_bytes: not a byte count from 0 to 2^60, ignored";
    } else {
        notes << where + ".peak_bytes: missing";
    }

    if (side.contains("per_gpu_bytes") && side.at("per_gpu_bytes").is_object()) {
        for (const auto& c : categories()) {
            const auto it = side.at("per_gpu_bytes").find(c.key);
            if (it == side.at("per_gpu_bytes").end() || it->is_null()) continue;  // null: unknown (a dry run's overhead)
            if (auto b = as_bytes(*it)) out.per_gpu_bytes[c.key] = *b;
            else notes << where + ".per_gpu_bytes." + c.key + ": not a byte count from 0 to 2^60, ignored";
        }
    } else {
        notes << where + ".per_gpu_bytes: missing";
    }

    if (side.contains("timeline")) {
        const json* t = &side.at("timeline");
        // memory_document form: {"steady_state": [...], "first_step": [...]}.
        if (t->is_object() && t->contains("steady_state")) t = &t->at("steady_state");
        if (t->is_array()) {
            int skipped = 0;
            for (const auto& e : *t) {
                if (!e.is_object() || !e.contains("total_bytes")) { ++skipped; continue; }
                auto b = as_bytes(e.at("total_bytes"));
                if (!b) { ++skipped; continue; }
                MeasuredPhase p;
                p.total_bytes = *b;
                if (e.contains("phase") && e.at("phase").is_string())
                    p.phase = QString::fromStdString(e.at("phase").get<std::string>());
                out.timeline.push_back(p);
            }
            if (skipped) notes << where + ".timeline: " + QString::number(skipped) + " entries without total_bytes skipped";
        } else {
            notes << where + ".timeline: not an array, ignored";
        }
    } else {
        notes << where + ".timeline: missing";
    }
    return out;
}

}  // namespace

RunReport parse_run_report(const json& doc, const QString& path) {
    if (!doc.is_object()) throw InputError(path.isEmpty() ? "run report" : path.toStdString(), "must be a JSON object");
    RunReport r;
    r.path = path;
    for (const char* key : {"measured", "predicted"}) {
        if (!doc.contains(key)) {
            r.notes << QString::fromLatin1(key) + ": missing";
            continue;
        }
        ReportSide side = read_side(doc.at(key), key, r.notes);
        if (side.empty()) continue;
        (std::string_view(key) == "measured" ? r.measured : r.predicted) = std::move(side);
    }
    if (!r.measured && !r.predicted)
        throw InputError(path.isEmpty() ? "run report" : path.toStdString(),
                         "has neither a usable \"measured\" nor \"predicted\" block");
    if (doc.contains("plan") && doc.at("plan").is_object()) r.plan = doc.at("plan");
    else r.notes << "plan: missing";
    r.model = name_of(doc, "model");
    r.gpu = name_of(doc, "gpu");
    return r;
}

RunReport load_run_report(const QString& path) {
    return parse_run_report(read_json_file(path.toStdString(), "run report"), path);
}

}  // namespace preflight::gui
