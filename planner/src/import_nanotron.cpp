// nanotron YAML -> plan values (stub: filled by the nanotron importer).
#include "preflight/planner/config_import.hpp"
#include "preflight/planner/error.hpp"

namespace preflight {

ImportedConfig import_nanotron(const ConfigTree& tree, const ImportContext&) {
    throw InputError(tree.file, "the nanotron importer is not built yet");
}

}  // namespace preflight
