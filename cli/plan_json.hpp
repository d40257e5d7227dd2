// The plan command's JSON pieces: a plan's predicted step time and its breakdown, the learning-rate advice.
#pragma once

#include <nlohmann/json.hpp>

#include "preflight/planner/lr_advice.hpp"
#include "preflight/planner/throughput.hpp"

namespace preflight::cli {

// A candidate's "throughput" object (docs/interface.md, `plan`): step time, tokens/s, MFU/HFU,
// FLOPs, the step-time breakdown, and the offload and cp/ep figures where the plan has them.
nlohmann::json throughput_json(const Throughput& t);

// The "lr_advice" object (docs/interface.md, `plan --base-lr`): the two scaling rules, the warm-up
// and the caveats.
nlohmann::json lr_json(const LrAdvice& a);

}  // namespace preflight::cli
