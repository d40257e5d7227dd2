// TOML text -> ConfigTree through toml++ (stub: filled by the torchtitan importer).
#include "preflight/config_readers/config_readers.hpp"
#include "preflight/planner/error.hpp"

namespace preflight {

ConfigTree toml_config_tree(std::string_view, const std::string& file) {
    throw InputError(file, "the TOML reader is not built yet");
}

}  // namespace preflight
