// What the Megatron and DeepSpeed importers share: reading a number out of a config's text or
// JSON value with its bounds checked, and recording a plan field with where it came from.
// Every failure is an InputError whose subject is the value's ConfigSpot (file, key, line).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "preflight/planner/config_import.hpp"

namespace preflight::import_values {

// A value as messages show it: JSON text, invalid UTF-8 in a string (a YAML file may hold any
// bytes) replaced rather than thrown on (nlohmann's dump throws type_error.316).
std::string shown(const nlohmann::json& v);
// For a value read as text that reads as a number (a quoted one in any format, or in a nanotron
// YAML a form PyYAML keeps as text, such as 1e-4, 1.0e4 or 08): a note saying so, to append to a
// "must be a number" message; "" otherwise.
std::string numeric_text_note(const nlohmann::json& v);

// A whole number written in decimal ("8", "-1"; "8.0", "1e3", "x" and "" are refused) within
// [min, max]; `what` names the bound in messages ("limits::kMaxGpus").
std::int64_t integer_text(std::string_view text, const ConfigSpot& spot, std::int64_t min, std::int64_t max,
                          std::string_view what = {});
// A real number ("0.1", "1e-3") within [min, max].
double real_text(std::string_view text, const ConfigSpot& spot, double min, double max);

// A JSON integer within [min, max]: a float (8.0, 1e400 never reaches here), a string ("eight"),
// a boolean or an integer beyond int64 is refused.
std::int64_t integer_json(const nlohmann::json& v, const ConfigSpot& spot, std::int64_t min, std::int64_t max,
                          std::string_view what = {});
bool boolean_json(const nlohmann::json& v, const ConfigSpot& spot);
std::string string_json(const nlohmann::json& v, const ConfigSpot& spot);

// The bounds of an integer plan field (plan_schema.cpp): a count field's [1, limit]; zero's
// [0, 3]; vpp, cp and ep (checked by validate_plan, not the flag) [1, limits::kMaxGpus].
struct Bounds {
    std::int64_t min = 1, max = 1;
    std::string what;  // "limits::kMaxGpus"
};
Bounds field_bounds(std::string_view key);

// Sets plan field `key` (replacing an earlier value of it), after checking the value against the
// field's domain (field_bounds for an integer, its names) with an InputError naming `spot`. Shared
// by every importer (the TOML/YAML ones through import_tree_values.hpp).
void set_field(ImportedConfig& out, std::string_view key, const FieldValue& value, const ConfigSpot& spot);
// An integer field from text / JSON, checked against field_bounds(key).
std::int64_t set_integer_text(ImportedConfig& out, std::string_view key, std::string_view text, const ConfigSpot& spot);
std::int64_t set_integer_json(ImportedConfig& out, std::string_view key, const nlohmann::json& v,
                              const ConfigSpot& spot);

// a / b when b divides a exactly; else an InputError naming `spot` with `message`.
std::int64_t exact_quotient(std::int64_t a, std::int64_t b, const ConfigSpot& spot, const std::string& message);

}  // namespace preflight::import_values
