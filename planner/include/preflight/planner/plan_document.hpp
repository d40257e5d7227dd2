// A plan document: what `preflight plan --emit preflight` writes (the plan fields, gpus,
// global_batch_tokens, and at the top model, gpu and schema_version), or a memory or run report
// holding one under "plan". Read strictly: a key it does not hold is a typo that would leave a
// field at its default without a word, and totals that disagree with the fields are refused.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "preflight/planner/plan.hpp"

namespace preflight {

struct PlanDocument {
    Plan plan;
    std::string model;  // the model name it records ("model": "name" or {"name": ...}); empty: none
    std::string gpu;    // likewise the GPU
    // The framework profile it was ranked or judged under ("framework": name at the top of a plan
    // file or memory report; a run report's predicted.profile); empty: none recorded.
    std::string framework;
    // "model_config" at the top of a plan file: the model in Hugging Face config.json form, which
    // `plan --from CONFIG --emit preflight` writes for a model shape the config spells out (it has no
    // file or catalog entry of its own to name); absent otherwise.
    std::optional<nlohmann::json> model_config;
};

// The plan fields over `defaults`. Throws InputError whose subject is the key at fault (the caller
// names the file): an unknown key, a null or malformed model/gpu, a bad value, a schema version
// this build does not read, gpus or global_batch_tokens that are not the fields' dp x tp x pp or
// seq x mbs x grad_acc x dp, a framework that is not a profile's name.
PlanDocument read_plan_document(const nlohmann::json& doc, const Plan& defaults = {});

}  // namespace preflight
