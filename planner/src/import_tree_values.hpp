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

// The integer at `v` within field `key`'s bounds (import_values::field_bounds: its flag bounds from
// plan_schema, seq <= kMaxSeq, ...; [1, kMaxGpus] for cp, ep, vpp, which validate_plan checks).
std::int64_t read_field_integer(const nlohmann::json& v, const ConfigSpot& spot, std::string_view key);

// Records plan field `key` = `value` from `spot` (import_values::set_field).
void set_imported(ImportedConfig& out, std::string_view key, FieldValue value, const ConfigSpot& spot);

// Which keys of a config section the importer reads, which it ignores on purpose (no bearing on
// memory or step time), and whether the whole section is ignored (logging, checkpoints, ...).
struct SectionRule {
    std::string_view section;
    std::vector<std::string_view> read;
    std::vector<std::string_view> ignored;
    bool ignore_all = false;
};
// The rule of `section` among `rules` (nullptr when none).
const SectionRule* find_rule(const std::vector<SectionRule>& rules, std::string_view section);
// Whether `key` is one of `keys`.
bool listed(const std::vector<std::string_view>& keys, std::string_view key);

// a * b * ..., InputError(spot.text(), ...) when the product passes kMaxGpus (each factor >= 1).
std::int64_t gpu_product(const std::vector<std::int64_t>& factors, const ConfigSpot& spot, std::string_view what);

}  // namespace preflight::tree_values
