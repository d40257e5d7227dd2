// DeepSpeed ds_config JSON -> plan values (stub: filled by the DeepSpeed importer).
#include "preflight/planner/config_import.hpp"
#include "preflight/planner/error.hpp"

namespace preflight {

ImportedConfig import_deepspeed(const ConfigTree& tree, const ImportContext&) {
    throw InputError(tree.file, "the DeepSpeed importer is not built yet");
}

}  // namespace preflight
