// The plan flags shared by `memory`, `plan` and `run` (interface.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "preflight/planner/plan.hpp"

namespace preflight::cli {

// Raw flag values; a flag left unset stays nullopt so `plan` can tell pinned
// values from defaults.
struct PlanFlags {
    std::string model = "llama-3-8b";
    std::string gpu = "h100-sxm-80gb";
    std::optional<std::int64_t> seq, mbs, grad_acc, dp, tp, pp;
    bool sp = false;
    std::optional<int> zero;
    std::optional<std::string> recompute, precision, optimizer, attention;
    std::optional<double> dropout;
    std::optional<std::int64_t> overhead_bytes;
    std::string data_dir;
    std::string format = "table";

    // Plan with defaults for every unset flag (interface.md defaults).
    Plan to_plan() const;
};

// Accepts counts written as integers or in scientific notation ("15e12", "4.194304e6")
// and rewrites them as plain integers; rejects fractions and non-positive values.
CLI::Validator count_in_any_notation();
// The same, also refusing values above `bound`, named `bound_name` in the message.
CLI::Validator count_at_most(std::int64_t bound, const std::string& bound_name);

// Registers --model, --gpu, the plan flags, --overhead-bytes, --data-dir, --format.
void add_plan_flags(CLI::App& app, PlanFlags& f);

}  // namespace preflight::cli
