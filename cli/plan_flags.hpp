// The plan flags shared by `memory`, `plan` and `run` (docs/interface.md).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "preflight/planner/memory.hpp"
#include "preflight/planner/plan.hpp"
#include "preflight/planner/plan_schema.hpp"
#include "preflight/planner/search.hpp"

namespace preflight::cli {

// Raw flag values. The plan flags are one slot per field of the plan field table
// (plan_schema.hpp), in its order; a flag left unset stays empty so `plan` can tell
// pinned values from defaults.
struct PlanFlags {
    struct Slot {
        std::optional<std::int64_t> integer;
        std::optional<double> real;
        bool toggle = false;
        std::optional<std::string> name;
        bool given() const { return integer || real || toggle || name; }
    };
    std::string model = "llama-3-8b";
    std::string gpu = "h100-sxm-80gb";
    std::vector<Slot> slots = std::vector<Slot>(plan_fields().size());  // CLI11 binds to these: never resized
    std::optional<std::int64_t> overhead_bytes;
    std::string data_dir;
    std::string format = "table";
    std::string framework = "megatron";  // --framework (memory, plan)
    std::string host_pace = "expected";  // --host-pace (memory, plan)
    bool compiled_loss = false;            // --compiled-loss (memory, plan)
    bool tp_comm_overlap = false;          // a --from Megatron script's --tp-comm-overlap
    // --from: a model shape the config spells out (Megatron's arguments, nanotron's model_config)
    // as a Hugging Face config.json, used instead of --model; named after the config file.
    std::optional<nlohmann::json> model_config;
    std::string model_config_name;
    // --from a config whose framework sizes the context from the sequence (torchtitan): the
    // catalog model's max_position_embeddings is raised to --seq instead of refusing it.
    bool context_follows_seq = false;
    // --from a ds_config: its bucket settings replace the deepspeed profile's defaults
    // (FrameworkProfile::deepspeed_zero; framework_profile applies them).
    std::optional<DeepSpeedZeroSettings> deepspeed_zero;

    // Plan with defaults for every unset flag (docs/interface.md defaults).
    Plan to_plan() const;
    // Pins the search to every given plan flag (unset axes stay searched).
    void pin(PlanPins& pins) const;
    // Whether the flag of the field with this JSON key was given.
    bool given(std::string_view key) const;
};

// The model a plan document records so that `--plan` loads the same one: the --model as given
// (a file's display name may be a catalog name's: a 16-layer llama-3-8b.json), unless a --from
// config spelt the shape out (then its name, which `--plan` cannot load: `memory --from` judges it).
inline std::string plan_file_model(const PlanFlags& f) { return f.model_config ? std::string() : f.model; }

// The model the flags name: --model, or the shape a --from config spelled out.
ModelConfig load_plan_model(const PlanFlags& flags, const std::filesystem::path& data_dir);

// Accepts counts written as integers, in scientific notation ("15e12", "4.194304e6") or with an
// SI (k/K M G B T: powers of 10) or IEC (Ki Mi Gi Ti: powers of 2) suffix ("15T", "1.5M", "4Mi"),
// and rewrites them as plain integers; rejects fractions and non-positive values. Suffixes are read
// only where a count is of tokens, bytes or plans (Suffix::read): for a sequence length "8K" is
// 8,192 to some and 8,000 to others, so plan fields refuse it and say why.
enum class Suffix { refused, read };
CLI::Validator count_in_any_notation(Suffix suffix = Suffix::refused);
// The same, also refusing values above `bound`, named `bound_name` in the message.
CLI::Validator count_at_most(std::int64_t bound, const std::string& bound_name, Suffix suffix = Suffix::refused,
                              const std::string& why = "");
// A whole number in decimal, exactly, rewritten in plain decimal (use with ->transform): CLI11
// alone reads '010' as octal 8 and '0x10' as 16, and clamps values past 2^63 - 1.
CLI::Validator exact_integer();
// A byte count from 0 to `bound` (limits.hpp `bound_name`), written as count_in_any_notation(Suffix::read) reads it.
CLI::Validator byte_count_or_zero(std::int64_t bound, const std::string& bound_name);
// A finite decimal number, read exactly: 'nan', 'inf' and '1e400' are refused quoting what was typed.
CLI::Validator finite_real();

// Registers --model, --gpu, a flag per plan field (plan_schema.hpp), --overhead-bytes, --data-dir.
// `searched`: plan's help (the layout, batch shape and recipe flags are searched when not given).
void add_plan_flags(CLI::App& app, PlanFlags& f, bool searched = false);
// plan --emit: --format json or --top-k beside it change nothing it prints (InputError naming the flag).
void check_emit_flags(const CLI::App& sub, const std::string& emit, const std::string& format);
// Extra lines of a plan or memory report for the extensions in use (nothing for a
// pre-training plan): adapters and frozen base, host memory and PCIe traffic, pipeline
// schedule, context/expert parallelism.
// `profile`: the one the plan was judged under (context parallelism's buffers are its own).
void print_extension_lines(std::ostream& os, const ModelConfig& model, const GpuSpec& gpu, const Plan& plan,
                           const MemoryReport& memory, const Throughput& throughput, const FrameworkProfile& profile);
void print_extension_memory_lines(std::ostream& os, const ModelConfig& model, const Plan& plan,
                                  const MemoryReport& memory, const FrameworkProfile& profile);

// Registers --framework, --host-pace and --compiled-loss (memory, plan): the framework profile the
// memory model follows, whether its loop waits for the GPU every micro-batch, whether its loss is
// compiled.
void add_framework_flag(CLI::App& app, PlanFlags& f);
// The profile --framework names (InputError naming the flag when unknown).
FrameworkProfile framework_profile(const PlanFlags& f);
// The pace --host-pace names (InputError naming the flag when unknown).
std::optional<HostPace> host_pace(const PlanFlags& f);  // nullopt: expected (expected_host_pace)

}  // namespace preflight::cli
