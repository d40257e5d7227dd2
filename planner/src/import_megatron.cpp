// Megatron-LM arguments -> plan values (stub: filled by the Megatron importer).
#include "preflight/planner/config_import.hpp"
#include "preflight/planner/error.hpp"

namespace preflight {

ImportedConfig import_megatron(std::string_view, const std::string& file, const ImportContext&) {
    throw InputError(file, "the Megatron importer is not built yet");
}

}  // namespace preflight
