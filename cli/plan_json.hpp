// The plan command's JSON pieces: a plan's predicted step time and its breakdown.
#pragma once

#include <nlohmann/json.hpp>

#include "preflight/planner/throughput.hpp"

namespace preflight::cli {

// A candidate's "throughput" object (docs/interface.md, `plan`): step time, tokens/s, MFU/HFU,
// FLOPs, the step-time breakdown, and the offload and cp/ep figures where the plan has them.
nlohmann::json throughput_json(const Throughput& t);

}  // namespace preflight::cli
