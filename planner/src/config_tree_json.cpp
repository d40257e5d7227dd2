// A JSON config (DeepSpeed) as a ConfigTree with the line of every key (stub).
#include "preflight/planner/config_import.hpp"
#include "preflight/planner/error.hpp"

namespace preflight {

ConfigTree json_config_tree(std::string_view, const std::string& file) {
    throw InputError(file, "JSON config trees are not built yet");
}

}  // namespace preflight
