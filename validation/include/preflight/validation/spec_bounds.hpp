// Checks on what calibration reads and writes: run reports' field types (errors name the
// file and the field) and a fitted GPU spec's constants (each within a documented bound,
// and the spec must load back).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace preflight::validation {

// Documented bounds on every fitted constant of a GPU spec (calibrate --write-spec).
struct FittedBound {
    const char* key;  // "efficiency.<name>" or "overhead_bytes"
    double lo, hi;    // inclusive
    const char* why;
};
inline constexpr FittedBound kFittedBounds[] = {
    {"efficiency.gemm_max_fraction_of_peak", 0.01, 1.0, "a fraction of the dense peak"},
    {"efficiency.fp8_gemm_max_fraction_of_peak", 0.01, 1.0, "a fraction of the fp8 peak"},
    {"efficiency.gemm_half_efficiency_dim", 0.0, 65536.0, "a GEMM dimension"},
    {"efficiency.attention_fraction_of_peak", 0.01, 1.0, "a fraction of the dense peak"},
    {"efficiency.memory_bound_fraction_of_hbm", 0.01, 1.0, "a fraction of HBM bandwidth"},
    {"efficiency.collective_bus_efficiency", 0.01, 1.0, "a fraction of link bandwidth"},
    {"efficiency.step_overhead_s", 0.0, 10.0, "seconds per optimizer step"},
};

// Throws InputError("--write-spec", ...) naming the constant and its bound when a fitted
// value is outside it (overhead_bytes: 0 .. memory_bytes), or when the spec does not
// load with the planner's own loader. `subject` names the file to be written.
void check_fitted_spec(const nlohmann::json& spec, const std::string& subject);

// Throws InputError naming `file` and the field when a run report's fields that
// calibration and --check read have the wrong JSON type or an impossible value (a negative
// or fractional byte figure, a step time that is not a positive number of seconds); the
// plan's values are checked where it is read (plan_from_json).
void check_run_report_fields(const nlohmann::json& report, const std::string& file);

// A measured byte figure of a run report's "measured" object (the one reader of them): absent or
// null is unknown; anything but a whole number in [0, kMaxBytes] (2^64 - 1 would wrap to -1) is an
// InputError naming measured.<key>.
std::optional<std::int64_t> measured_bytes(const nlohmann::json& measured, const char* key);

}  // namespace preflight::validation
