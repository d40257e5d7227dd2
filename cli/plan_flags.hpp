// The plan flags shared by `memory`, `plan` and `run` (docs/interface.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "preflight/planner/memory.hpp"
#include "preflight/planner/plan.hpp"
#include "preflight/planner/search.hpp"

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
    // Fine-tuning, offload, pipeline schedule, context / expert parallelism.
    std::optional<std::string> finetune, lora_targets, offload, pp_schedule;
    std::optional<std::int64_t> lora_rank, vpp, cp, ep;
    std::optional<double> lora_alpha, lora_dropout, moe_capacity_factor;
    std::optional<std::int64_t> overhead_bytes;
    std::string data_dir;
    std::string format = "table";
    std::string framework = "megatron";  // --framework (memory, plan)

    // Plan with defaults for every unset flag (docs/interface.md defaults).
    Plan to_plan() const;
};

// Accepts counts written as integers or in scientific notation ("15e12", "4.194304e6")
// and rewrites them as plain integers; rejects fractions and non-positive values.
CLI::Validator count_in_any_notation();
// The same, also refusing values above `bound`, named `bound_name` in the message.
CLI::Validator count_at_most(std::int64_t bound, const std::string& bound_name);

// Registers --model, --gpu, the plan flags, --overhead-bytes, --data-dir, --format.
void add_plan_flags(CLI::App& app, PlanFlags& f);
// Registers the fine-tuning, offload, schedule, cp and ep flags (add_plan_flags calls it).
void add_extension_flags(CLI::App& app, PlanFlags& f);
// Copies the extension flags into a plan (defaults for unset ones).
void apply_extension_flags(const PlanFlags& f, Plan& plan);
// Copies the extension flags into the search's pins (unset axes stay searched).
void pin_extension_flags(const PlanFlags& f, PlanPins& pins);
// Extra lines of a plan or memory report for the extensions in use (nothing for a
// pre-training plan): adapters and frozen base, host memory and PCIe traffic, pipeline
// schedule, context/expert parallelism.
void print_extension_lines(std::ostream& os, const ModelConfig& model, const GpuSpec& gpu, const Plan& plan,
                           const MemoryReport& memory, const Throughput& throughput);
void print_extension_memory_lines(std::ostream& os, const ModelConfig& model, const Plan& plan,
                                  const MemoryReport& memory);

// Registers --framework (memory, plan): the framework profile the memory model follows.
void add_framework_flag(CLI::App& app, PlanFlags& f);
// The profile --framework names (InputError naming the flag when unknown).
FrameworkProfile framework_profile(const PlanFlags& f);

}  // namespace preflight::cli
