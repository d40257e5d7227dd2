#include "preflight/validation/spec_bounds.hpp"

#include <cmath>

#include <nlohmann/json.hpp>

#include "preflight/planner/error.hpp"
#include "preflight/planner/gpu.hpp"
#include "preflight/planner/limits.hpp"
#include "preflight/planner/shown_value.hpp"

namespace preflight::validation {

using nlohmann::json;

namespace {
// A measured step outside [1 us, 1e7 s = 116 days] is no step time (one kernel launch takes a few
// microseconds): a corrupt report, which would drive the step-time fit to nonsense.
constexpr double kMinStepSeconds = 1e-6;
constexpr double kMaxStepSeconds = 1e7;
}  // namespace

void check_fitted_spec(const json& spec, const std::string& subject) {
    if (!spec.is_object()) throw InputError(subject, "the fitted GPU spec is not a JSON object; not written");
    for (const FittedBound& b : kFittedBounds) {
        const std::string key = b.key;
        const std::string name = key.substr(key.find('.') + 1);
        if (!spec.contains("efficiency") || !spec.at("efficiency").is_object() ||
            !spec.at("efficiency").contains(name))
            continue;
        const json& v = spec.at("efficiency").at(name);
        const double x = v.is_number() ? v.get<double>() : NAN;
        if (!(std::isfinite(x) && x >= b.lo && x <= b.hi))
            throw InputError(subject, "fitted " + key + " = " + shown_json(v) + " is outside its bound [" +
                                          json(b.lo).dump() + ", " + json(b.hi).dump() + "] (" + b.why +
                                          "); not written: the runs do not constrain it");
    }
    if (spec.contains("overhead_bytes")) {
        const json& v = spec.at("overhead_bytes");
        const double memory = spec.contains("memory_bytes") && spec.at("memory_bytes").is_number()
                                  ? spec.at("memory_bytes").get<double>()
                                  : 0.0;
        if (!v.is_number_integer() || v.get<double>() < 0 || (memory > 0 && v.get<double>() > memory))
            throw InputError(subject, "fitted overhead_bytes = " + shown_json(v) + " is outside its bound [0, memory_bytes = " +
                                          json(memory).dump() + "]; not written");
    }
    try {
        (void)gpu_from_json(spec, "fitted spec");
    } catch (const InputError& e) {
        throw InputError(subject, std::string("the fitted spec would not load (") + e.what() + "); not written");
    }
}

namespace {

void expect(const json& j, const char* key, bool (json::*is)() const noexcept, const char* type, const std::string& file,
            const std::string& prefix = "") {
    if (!j.is_object() || !j.contains(key) || j.at(key).is_null()) return;
    if (!(j.at(key).*is)()) throw InputError(file, prefix + key + " must be " + type + ", got " + shown_json(j.at(key)));
}

// `key`, when present, is one of `allowed` (null is not: the readers take the key's absence
// as its default, never a null).
void expect_one_of(const json& r, const char* key, std::initializer_list<const char*> allowed, const std::string& file) {
    if (!r.contains(key)) return;
    const json& v = r.at(key);
    std::string names;
    for (const char* a : allowed) {
        if (v.is_string() && v.get<std::string>() == a) return;
        names += (names.empty() ? "" : ", ") + std::string(a);
    }
    throw InputError(file, std::string(key) + " must be one of " + names + ", got " + shown_json(v));
}

// `key` is an object holding a string "name" (model, gpu): every reader predicts from them.
void expect_named(const json& r, const char* key, const std::string& file) {
    const auto it = r.find(key);
    if (it == r.end() || !it->is_object())
        throw InputError(file, std::string(key) + " must be an object {\"name\": ...}, got " +
                                   (it == r.end() ? "nothing" : shown_json(*it)));
    if (!it->contains("name") || !it->at("name").is_string())
        throw InputError(file, std::string(key) + ".name must be a string, got " +
                                   (it->contains("name") ? shown_json(it->at("name")) : "nothing"));
}

// What a run measured, as the checks and the calibration read it: byte figures are whole numbers
// in [0, kMaxBytes] (2^64 - 1 would wrap to -1), the step time a finite number of seconds in
// [kMinStepSeconds, kMaxStepSeconds]; absent or null is "not measured".
void check_measured(const json& m, const std::string& file) {
    for (const char* k : {"tracked_peak_bytes", "overhead_bytes", "device_used_peak_bytes"}) {
        try {
            (void)measured_bytes(m, k);
        } catch (const InputError& e) {
            throw InputError(file, e.subject() + " " + e.detail());
        }
    }
    const auto t = m.find("step_time_s");
    if (t != m.end() && !t->is_null() &&
        !(t->is_number() && t->get<double>() >= kMinStepSeconds && t->get<double>() <= kMaxStepSeconds))
        throw InputError(file, "measured.step_time_s must be a number of seconds in [1e-6, 1e7], got " + shown_json(*t));
}

}  // namespace

std::optional<std::int64_t> measured_bytes(const json& m, const char* key) {
    const auto it = m.find(key);
    if (it == m.end() || it->is_null()) return std::nullopt;
    if (it->is_number_unsigned() && it->get<std::uint64_t>() <= static_cast<std::uint64_t>(limits::kMaxBytes))
        return static_cast<std::int64_t>(it->get<std::uint64_t>());
    if (it->is_number_integer() && !it->is_number_unsigned() && it->get<std::int64_t>() >= 0 &&
        it->get<std::int64_t>() <= limits::kMaxBytes)
        return it->get<std::int64_t>();
    // A whole number written with an exponent (1e+18) is still a whole number of bytes.
    if (it->is_number_float()) {
        const double v = it->get<double>();
        if (std::isfinite(v) && v >= 0 && v <= static_cast<double>(limits::kMaxBytes) && std::floor(v) == v)
            return static_cast<std::int64_t>(v);
    }
    throw InputError(std::string("measured.") + key,
                     "must be a whole number of bytes in [0, 2^60] (kMaxBytes), got " + shown_json(*it));
}

void check_run_report_fields(const json& r, const std::string& file) {
    if (!r.is_object()) throw InputError(file, "a run report must be a JSON object");
    for (const char* key : {"command", "source"})
        if (r.contains(key) && !r.at(key).is_string())
            throw InputError(file, std::string(key) + " must be a string, got " + shown_json(r.at(key)));
    // Without them a report would be read as an ok device run (or skipped) without a word.
    for (const char* key : {"mode", "status"})
        if (!r.contains(key)) throw InputError(file, std::string(key) + " is missing: every run report records it");
    expect_one_of(r, "mode", {"device", "dry-run"}, file);
    expect_one_of(r, "status", {"ok", "allocation-failed", "error", "crashed"}, file);
    expect(r, "message", &json::is_string, "a string", file);
    expect_named(r, "model", file);
    expect_named(r, "gpu", file);
    for (const char* key : {"plan", "measured"})
        if (!r.contains(key) || !r.at(key).is_object())
            throw InputError(file, std::string(key) + " must be an object, got " + (r.contains(key) ? shown_json(r.at(key)) : "nothing"));
    expect(r, "device", &json::is_object, "an object", file);
    expect(r, "plan", &json::is_object, "an object", file);
    expect(r, "measured", &json::is_object, "an object", file);
    expect(r, "predicted", &json::is_object, "an object", file);
    expect(r, "failure", &json::is_object, "an object", file);
    expect(r, "parallel", &json::is_object, "an object", file);
    if (r.contains("model")) expect(r.at("model"), "name", &json::is_string, "a string", file, "model.");
    if (r.contains("gpu")) expect(r.at("gpu"), "name", &json::is_string, "a string", file, "gpu.");
    if (r.contains("device")) expect(r.at("device"), "memory_bytes", &json::is_number, "a number", file, "device.");
    if (r.contains("failure")) expect(r.at("failure"), "message", &json::is_string, "a string", file, "failure.");
    if (r.contains("predicted")) expect(r.at("predicted"), "profile", &json::is_string, "a string", file, "predicted.");
    if (r.contains("parallel")) {
        expect(r.at("parallel"), "backend", &json::is_string, "a string", file, "parallel.");
        for (const char* k : {"rank", "world_size", "nccl_world1_bytes"})
            expect(r.at("parallel"), k, &json::is_number_integer, "an integer", file, "parallel.");
    }
    check_measured(r.at("measured"), file);
}

}  // namespace preflight::validation
