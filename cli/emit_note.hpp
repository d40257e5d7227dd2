// The note under `plan --emit F` when the plan was ranked by another framework's profile.
#pragma once

#include <string>

#include "preflight/planner/gpu.hpp"
#include "preflight/planner/model.hpp"
#include "preflight/planner/plan.hpp"

namespace preflight::cli {

// "" when `own` (the emitted form's framework) is no profile or ranked the plan; otherwise a
// "# note: ..." line: rank by `own`, or, where its profile refuses the plan, why it cannot run it.
std::string emit_framework_note(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan,
                                const std::string& ranked_by, const std::string& own);

}  // namespace preflight::cli
