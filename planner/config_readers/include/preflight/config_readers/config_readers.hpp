// The TOML (toml++) and YAML (yaml-cpp) readers, and the one entry that turns a config file of
// any of the four formats into plan values. A target of its own (preflight::config_readers) so
// that the planner core keeps nlohmann/json as its only dependency; cli and gui link it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "preflight/planner/config_import.hpp"

namespace preflight {

// TOML / YAML text as a ConfigTree (InputError "file:line: ..." for a syntax error).
ConfigTree toml_config_tree(std::string_view text, const std::string& file);
ConfigTree yaml_config_tree(std::string_view text, const std::string& file);

// Reads `path` (a regular file of at most limits::kMaxUserFileBytes), detects its format unless
// `forced` names one, and imports it. InputError naming the file for an unreadable file or an
// undetectable format, naming file, key and line for a bad value.
ImportedConfig import_config_file(const std::string& path, std::optional<ConfigFormat> forced,
                                  const ImportContext& context);
// The same on text already read (the fuzz target, tests).
ImportedConfig import_config_text(std::string_view text, const std::string& file, std::optional<ConfigFormat> forced,
                                  const ImportContext& context);

}  // namespace preflight
