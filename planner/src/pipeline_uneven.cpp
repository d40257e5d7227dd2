// Megatron-LM's uneven pipeline split, --decoder-first-pipeline-num-layers and
// --decoder-last-pipeline-num-layers (the plan's pp_first_stage_layers / pp_last_stage_layers).
// Read at Megatron-LM d98e8a6 (August 2026):
//  - transformer_block.py get_num_layers_to_build: the first (last) stage builds the given count;
//    the layers left after both are split evenly over the stages left (an assert that they divide);
//    transformer_layer.py get_transformer_layer_offset numbers the layers in stage order, so a stage's
//    layers follow the earlier stages' counts (pipeline_stage_chunks sums pipeline_stage_layers);
//  - TransformerConfig.__post_init__ ("Uneven PP") refuses a count <= 0, middle layers without
//    middle stages or middle stages without layers ("Mismatch"), and middle layers that the middle
//    stages do not divide; it refuses the split beside --account-for-embedding/loss-in-pipeline-split
//    and --pipeline-model-parallel-layout;
//  - validate_args skips its "pp divides the layers" assert when either flag is given, and refuses
//    them with --num-layers-per-virtual-pipeline-stage; with --num-virtual-stages-per-pipeline-rank v
//    (the interleaved schedule) TransformerConfig wants the first, the last and each middle stage's
//    layers divisible by v, each stage's chunk holding its layers / v (pipeline_schedule.cpp).
#include <string>

#include "preflight/planner/error.hpp"
#include "preflight/planner/extensions.hpp"
#include "preflight/planner/memory.hpp"
#include "preflight/planner/plan.hpp"

namespace preflight {

namespace {

constexpr const char* kFirstFlag = "--pp-first-stage-layers";
constexpr const char* kLastFlag = "--pp-last-stage-layers";

std::string str(std::int64_t v) { return std::to_string(v); }

// The flag a refusal of the whole split names: the first stage's when given.
const char* split_flag(const Plan& p) { return p.pp_first_stage_layers > 0 ? kFirstFlag : kLastFlag; }

// What the split gives, e.g. "--pp-first-stage-layers 6 --pp-last-stage-layers 6".
std::string split_text(const Plan& p) {
    std::string s;
    if (p.pp_first_stage_layers > 0) s += std::string(kFirstFlag) + " " + str(p.pp_first_stage_layers);
    if (p.pp_last_stage_layers > 0)
        s += (s.empty() ? "" : " ") + std::string(kLastFlag) + " " + str(p.pp_last_stage_layers);
    return s;
}

// TransformerConfig.__post_init__ "Uneven PP": the layers and stages left between the given ones.
void check_middle_stages(const Plan& p, const ModelConfig& m) {
    const std::int64_t given = p.pp_first_stage_layers + p.pp_last_stage_layers;
    const std::int64_t layers = m.layers - given;
    const std::int64_t stages = p.pp - (p.pp_first_stage_layers > 0 ? 1 : 0) - (p.pp_last_stage_layers > 0 ? 1 : 0);
    const std::string what = split_text(p) + " at --pp " + str(p.pp);
    if (layers < 0)
        throw InputError(split_flag(p), what + " places " + str(given) + " layers; the model has " + str(m.layers));
    if (stages == 0 && layers != 0)
        throw InputError(split_flag(p), what + " leaves " + str(layers) + " of the model's " + str(m.layers) +
                                            " layers on no stage: with no stage between the first and the last, "
                                            "they hold every layer (Megatron-LM refuses it: 'Mismatch: " +
                                            str(layers) + " middle layers remaining but 0 middle PP stages')");
    if (stages > 0 && layers == 0)
        throw InputError(split_flag(p), what + " leaves no layer for the " + str(stages) +
                                            " stages between (Megatron-LM refuses it: 'Mismatch: 0 middle layers "
                                            "remaining but " + str(stages) + " middle PP stages')");
    if (stages > 0 && layers % stages != 0)
        throw InputError(split_flag(p), what + " leaves " + str(layers) + " layers for " + str(stages) +
                                            " middle stages, which Megatron-LM splits evenly: " + str(stages) +
                                            " does not divide " + str(layers) +
                                            " (TransformerConfig: 'number of layers at middle stage ... must be "
                                            "divisible by the middle pipeline model parallel size')");
}

// TransformerConfig.__post_init__ "Uneven PP" with virtual stages: the first, the last and each
// middle stage's layers split into v whole chunks.
void check_virtual_chunks(const Plan& p, const ModelConfig& m) {
    const std::int64_t v = p.vpp;
    if (v < 1) return;  // validate_plan_extensions refuses it (check_vpp_bounds)
    const std::pair<const char*, std::int64_t> given[] = {{"first", p.pp_first_stage_layers},
                                                          {"last", p.pp_last_stage_layers}};
    for (const auto& [which, layers] : given)
        if (layers > 0 && layers % v != 0)
            throw InputError(std::string("--pp-") + which + "-stage-layers",
                             str(layers) + " layers on the " + which + " stage do not split into --vpp " + str(v) +
                                 " model chunks (Megatron-LM: 'number of layers at " + which +
                                 " stage ... must be divisible by virtual pipeline parallel degree')");
    const std::int64_t middle = p.pp - (p.pp_first_stage_layers > 0 ? 1 : 0) - (p.pp_last_stage_layers > 0 ? 1 : 0);
    if (middle == 0) return;
    const std::int64_t per_stage = pipeline_stage_layers(p, m.layers, p.pp_first_stage_layers > 0 ? 1 : 0);
    if (per_stage % v != 0)
        throw InputError("--vpp", split_text(p) + " leaves " + str(per_stage) + " layers on each middle stage, " +
                                      "which do not split into " + str(v) + " model chunks (Megatron-LM: 'number of "
                                      "layers on each middle pipeline rank ... must be divisible by virtual pipeline "
                                      "parallel degree')");
}

}  // namespace

bool has_uneven_pipeline_split(const Plan& p) { return p.pp_first_stage_layers != 0 || p.pp_last_stage_layers != 0; }

std::vector<std::int64_t> uneven_pipeline_stage_layers(const Plan& p, std::int64_t model_layers) {
    std::vector<std::int64_t> layers;
    if (!has_uneven_pipeline_split(p)) return layers;
    for (std::int64_t s = 0; s < p.pp; ++s) layers.push_back(pipeline_stage_layers(p, model_layers, s));
    return layers;
}

void validate_uneven_pipeline_split(const Plan& p, const ModelConfig& m) {
    if (!has_uneven_pipeline_split(p)) return;
    // TransformerConfig.__post_init__: "num_layers_in_first/last_pipeline_stage must be larger than 0".
    for (const auto& [flag, v] : {std::pair{kFirstFlag, p.pp_first_stage_layers}, std::pair{kLastFlag, p.pp_last_stage_layers}}) {
        if (v < 0) throw InputError(flag, "must be a positive number of decoder layers (0: not given), got " + str(v));
        if (v > m.layers) throw InputError(flag, str(v) + " layers exceed the model's " + str(m.layers));
    }
    if (p.pp < 2)
        throw InputError(split_flag(p), "places layers on the first or last of several pipeline stages: at --pp " +
                                            str(p.pp) + " one stage holds every layer, so it is not modelled there "
                                            "(leave it out)");
    check_middle_stages(p, m);
    if (p.pp_schedule == PpSchedule::interleaved) check_virtual_chunks(p, m);
}

void check_uneven_pipeline_split_profile(const Plan& plan, const FrameworkProfile& profile) {
    if (!has_uneven_pipeline_split(plan) || profile.uneven_pipeline_split) return;
    // `preflight run` executes Preflight's own runtime (profile preflight-runtime), whatever --framework says.
    const std::string remedy = profile.name == "preflight-runtime"
                                   ? "Preflight's runtime splits the layers evenly: drop it from run (memory and "
                                     "plan model it under --framework megatron)"
                                   : "use --framework megatron";
    throw InputError(split_flag(plan), "is Megatron-LM's uneven pipeline split (--decoder-first/last-pipeline-"
                                       "num-layers): the " + profile.name + " profile does not run it; " + remedy);
}

}  // namespace preflight
