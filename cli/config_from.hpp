// --from FILE on memory, plan and run: a torchtitan, Megatron-LM, DeepSpeed or nanotron config
// read into the plan flags (docs/interface.md "Starting from a framework config").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>

#include <CLI/CLI.hpp>

#include "plan_flags.hpp"
#include "preflight/planner/error.hpp"

namespace preflight::cli {

struct FromFlags {
    std::string file;    // --from
    std::string format;  // --from-format ("" = detect from the text)
    bool verbose = false;
    std::optional<std::int64_t> gpus;  // --gpus on memory and run (plan has its own)
};

// Whether `flag` was given on `sub`'s command line (false for a flag `sub` does not have).
bool given_on(const CLI::App& sub, const std::string& flag);

// Registers --from, --from-format and --verbose; with `gpus_flag` also --gpus (memory, run).
void add_from_flags(CLI::App& app, FromFlags& from, bool gpus_flag);

// What the config set beyond the plan fields, for a command to use where its own flag was not given.
struct FromApplied {
    bool read = false;                    // --from was given
    std::optional<std::int64_t> gpus;     // the world size the config implies (or dp * tp * pp * cp)
    std::optional<std::int64_t> global_batch_sequences;  // the global batch the config names
    bool tp_comm_overlap = false;
    bool overlap_p2p_comm = false;
    // Where each flag the config set was read ("--seq" -> "train.toml:12: [training] seq_len").
    std::map<std::string, std::string> origins;
};

// Reads the --from file (nothing when not given) and writes each value it sets into `flags`
// unless the user gave that flag on `sub`'s command line (flags override the file). The model,
// framework and --compiled-loss likewise. `gpus` is the GPU count given on the command line.
// Warnings go to `log` always; what was read and ignored on purpose only under --verbose.
FromApplied apply_from(const FromFlags& from, const CLI::App& sub, PlanFlags& flags,
                       std::optional<std::int64_t> gpus, std::ostream& log);

// A refusal of a value the --from config set (its flag not given) names the config's file, line
// and key, as docs/interface.md promises for --from; any other error is returned unchanged.
InputError blame_from_file(const FromApplied& applied, const InputError& e);

// Runs a command's work, its refusals of the config's values blamed on the config.
template <class Work>
auto blaming_from_file(const FromApplied& applied, Work&& work) -> decltype(work()) {
    try {
        return work();
    } catch (const InputError& e) {
        throw blame_from_file(applied, e);
    }
}

}  // namespace preflight::cli
