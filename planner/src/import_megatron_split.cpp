// Megatron-LM's --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers
// (_add_distributed_args; training/argument_utils.py hands them to TransformerConfig's
// num_layers_in_first/last_pipeline_stage): the plan's pp_first_stage_layers /
// pp_last_stage_layers, whose rule pipeline_uneven.cpp models (read at Megatron-LM d98e8a6).
#include <string>

#include "import_flag_values.hpp"
#include "megatron_flags.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/limits.hpp"

namespace preflight {

using megatron_script::Flag;
using megatron_script::Flags;

void import_megatron_pipeline_split(Flags& f, ImportedConfig& out) {
    const Flag* first = f.get("--decoder-first-pipeline-num-layers");
    const Flag* last = f.get("--decoder-last-pipeline-num-layers");
    if (!first && !last) return;
    const std::string at = f.spot(first ? *first : *last).text();
    // validate_args: with --num-layers-per-virtual-pipeline-stage, "please use
    // --num-virtual-stages-per-pipeline-rank to specify virtual pipeline parallel degree when enable
    // uneven pipeline parallelism".
    if (f.has("--num-layers-per-virtual-pipeline-stage"))
        throw InputError(at, "Megatron-LM refuses the uneven split with --num-layers-per-virtual-pipeline-stage "
                             "(validate_args: 'please use --num-virtual-stages-per-pipeline-rank ... when enable "
                             "uneven pipeline parallelism')");
    // TransformerConfig.__post_init__: neither beside the embedding / loss layer slots nor beside a layout.
    for (const char* other : {"--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
                              "--pipeline-model-parallel-layout"})
        if (f.has(other))
            throw InputError(at, std::string("Megatron-LM refuses the uneven split with ") + other +
                                     " (TransformerConfig.__post_init__: they cannot be set at the same time)");
    // TransformerConfig.__post_init__: "num_layers_in_first/last_pipeline_stage must be larger than 0".
    const std::pair<const Flag*, const char*> given[] = {{first, "pp_first_stage_layers"},
                                                         {last, "pp_last_stage_layers"}};
    for (const auto& [flag, key] : given) {
        if (!flag) continue;
        const ConfigSpot spot = f.spot(*flag);
        import_values::set_field(out, key, import_values::integer_text(f.text(*flag), spot, 1, limits::kMaxLayers,
                                                                          "limits::kMaxLayers"),
                                 spot);
    }
}

}  // namespace preflight
