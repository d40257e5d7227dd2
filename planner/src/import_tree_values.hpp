// What the torchtitan (TOML) and nanotron (YAML) importers share: finding a value in a
// ConfigTree by its path, the spot (file, key as the format writes it, line) every message
// names, typed and range-checked reads, and recording a plan field with its domain checked.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "preflight/planner/config_import.hpp"

namespace preflight::tree_values {

using Path = std::vector<std::string>;

// "a.b.c" -> {"a", "b", "c"}; "" -> {} (the top level).
Path split_dotted(std::string_view dotted);
// The JSON pointer of a path ("/training/seq_len"; "~" and "/" escaped as RFC 6901 says).
std::string pointer_of(const Path& path);
// The value at `path` under `root` (nullptr when a step is missing or not an object).
const nlohmann::json* find_value(const nlohmann::json& root, const Path& path);
// Where the value at `path` was written, named `key` in messages.
ConfigSpot spot_of(const ConfigTree& tree, const Path& path, std::string key);

// Typed reads; each throws InputError(spot.text(), ...) for another type or a value outside
// [min, max]. A float or a boolean is never taken for an integer.
std::int64_t read_integer(const nlohmann::json& v, const ConfigSpot& spot, std::int64_t min, std::int64_t max);
bool read_bool(const nlohmann::json& v, const ConfigSpot& spot);
std::string read_string(const nlohmann::json& v, const ConfigSpot& spot);
double read_number(const nlohmann::json& v, const ConfigSpot& spot);

// The bounds of a plan field's integers: its flag bounds from plan_schema (seq <= kMaxSeq, ...),
// [1, kMaxGpus] for the degrees the schema leaves to validate_plan (cp, ep, vpp).
struct Bounds {
    std::int64_t min = 1, max = 1;
};
Bounds field_bounds(std::string_view key);
// The integer at `v` within field `key`'s bounds.
std::int64_t read_field_integer(const nlohmann::json& v, const ConfigSpot& spot, std::string_view key);

// Records plan field `key` = `value` from `spot`, replacing an earlier value of the key (each
// field at most once); InputError(spot.text(), ...) when the value is outside the field's domain.
void set_imported(ImportedConfig& out, std::string_view key, FieldValue value, const ConfigSpot& spot);

// a * b * ..., InputError(spot.text(), ...) when the product passes kMaxGpus (each factor >= 1).
std::int64_t gpu_product(const std::vector<std::int64_t>& factors, const ConfigSpot& spot, std::string_view what);

}  // namespace preflight::tree_values
