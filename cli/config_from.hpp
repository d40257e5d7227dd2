// --from FILE on memory, plan and run: a torchtitan, Megatron-LM, DeepSpeed or nanotron config
// read into the plan flags (docs/interface.md "Starting from a framework config").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "plan_flags.hpp"
#include "preflight/planner/error.hpp"

namespace preflight::cli {

struct FromFlags {
    std::string file;    // --from
    std::string format;  // --from-format ("" = detect from the text)
    bool verbose = false;
    std::optional<std::int64_t> gpus;  // --gpus on memory and run (plan has its own)
    std::vector<std::string> args;     // --from-arg, in order: a Megatron-LM script's $1, $2 ...
};

// Whether `flag` was given on `sub`'s command line (false for a flag `sub` does not have).
bool given_on(const CLI::App& sub, const std::string& flag);

// A plan's source (a --from config, a --plan file) beside a layout flag (--tp, --pp, --cp) given
// without --dp: the source's GPUs are divided anew, so the job does not silently grow.
// layout_flag_without_dp is that flag ("" when none). divide_anew gives the dp that spreads
// `world` GPUs over p's tp x pp x cp and, with `sequences` (the source's global batch), the
// accumulation that keeps it at p's mbs; either not dividing is InputError naming `flag`. It says
// what it derived on `log` ("# --from: --dp 4 --grad-acc 122 (the config's 32 GPUs and its global
// batch divided anew for --tp)"); `source` says whose GPUs ("the config's", "--plan F's").
std::string layout_flag_without_dp(const CLI::App& sub);
struct DividedAnew {
    std::int64_t dp = 1;
    std::optional<std::int64_t> grad_acc;  // with `sequences` only
};
DividedAnew divide_anew(const Plan& p, std::int64_t world, std::optional<std::int64_t> sequences, const std::string& flag,
                        const std::string& source, const std::string& log_label, std::ostream& log);

// Registers --from, --from-format and --verbose; with `gpus_flag` also --gpus (memory, run).
void add_from_flags(CLI::App& app, FromFlags& from, bool gpus_flag);

// What the config set beyond the plan fields, for a command to use where its own flag was not given.
struct FromApplied {
    bool read = false;                    // --from was given
    std::optional<std::int64_t> gpus;     // the world size the config implies (or dp * tp * pp * cp)
    std::optional<std::int64_t> global_batch_sequences;  // the global batch the config names
    // false: a Megatron-LM script's --no-overlap-p2p-communication (--tp-comm-overlap lands in
    // PlanFlags::tp_comm_overlap)
    bool overlap_p2p_comm = true;
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
