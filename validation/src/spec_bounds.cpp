#include "preflight/validation/spec_bounds.hpp"

#include <cmath>

#include <nlohmann/json.hpp>

#include "preflight/planner/error.hpp"
#include "preflight/planner/gpu.hpp"

namespace preflight::validation {

using nlohmann::json;

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
            throw InputError(subject, "fitted " + key + " = " + v.dump() + " is outside its bound [" +
                                          json(b.lo).dump() + ", " + json(b.hi).dump() + "] (" + b.why +
                                          "); not written: the runs do not constrain it");
    }
    if (spec.contains("overhead_bytes")) {
        const json& v = spec.at("overhead_bytes");
        const double memory = spec.contains("memory_bytes") && spec.at("memory_bytes").is_number()
                                  ? spec.at("memory_bytes").get<double>()
                                  : 0.0;
        if (!v.is_number_integer() || v.get<double>() < 0 || (memory > 0 && v.get<double>() > memory))
            throw InputError(subject, "fitted overhead_bytes = " + v.dump() + " is outside its bound [0, memory_bytes = " +
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
    if (!(j.at(key).*is)()) throw InputError(file, prefix + key + " must be " + type + ", got " + j.at(key).dump());
}

}  // namespace

void check_run_report_fields(const json& r, const std::string& file) {
    if (!r.is_object()) throw InputError(file, "a run report must be a JSON object");
    expect(r, "command", &json::is_string, "a string", file);
    expect(r, "mode", &json::is_string, "a string", file);
    expect(r, "status", &json::is_string, "a string", file);
    expect(r, "source", &json::is_string, "a string", file);
    expect(r, "message", &json::is_string, "a string", file);
    expect(r, "model", &json::is_object, "an object", file);
    expect(r, "gpu", &json::is_object, "an object", file);
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
    if (r.contains("measured"))
        for (const char* k : {"tracked_peak_bytes", "overhead_bytes", "step_time_s"})
            expect(r.at("measured"), k, &json::is_number, "a number", file, "measured.");
    if (r.contains("measured") && r.at("measured").is_object() && r.at("measured").contains("overhead_bytes") &&
        r.at("measured").at("overhead_bytes").is_number() && r.at("measured").at("overhead_bytes").get<double>() < 0)
        throw InputError(file, "measured.overhead_bytes must be >= 0, got " + r.at("measured").at("overhead_bytes").dump());
}

}  // namespace preflight::validation
