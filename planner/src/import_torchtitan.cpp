// torchtitan job-config TOML -> plan values (stub: filled by the torchtitan importer).
#include "preflight/planner/config_import.hpp"
#include "preflight/planner/error.hpp"

namespace preflight {

ImportedConfig import_torchtitan(const ConfigTree& tree, const ImportContext&) {
    throw InputError(tree.file, "the torchtitan importer is not built yet");
}

}  // namespace preflight
