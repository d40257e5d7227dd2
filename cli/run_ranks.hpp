// How `preflight run` runs the ranks of a plan with collectives (dp > 1 or a ZeRO stage): one
// rank alone on this GPU (--emulate-rank, and every dry run), one NCCL rank of a job torchrun
// or Slurm launched (their variables in the environment), or the parent of the local ranks it
// starts itself (--nproc-per-node).
#pragma once

#include <optional>
#include <string>

#include "preflight/planner/plan.hpp"
#include "preflight/runtime/rendezvous.hpp"

namespace preflight::cli {

struct RankFlags {
    std::optional<std::int64_t> emulate_rank;  // --emulate-rank R
    int nproc_per_node = 0;                    // --nproc-per-node N (0: not given)
};

enum class RankMode { alone, nccl_rank, launcher };

struct RankChoice {
    RankMode mode = RankMode::alone;
    std::int64_t rank = 0;                      // alone: the rank walked or emulated
    std::optional<runtime::Rendezvous> launch;  // nccl_rank: this process's place in the job
    bool in_launch = false;  // one process of a launched job (an NCCL rank, or a dry run walking its rank)
};

// Decides from the flags, the environment's rendezvous and the plan; throws InputError naming
// the flag (or variable) for a combination that cannot run.
RankChoice choose_ranks(const RankFlags& flags, const std::optional<runtime::Rendezvous>& env, const Plan& plan,
                        bool dry_run);

// The report file of rank `rank` of a multi-process job: ".rank<R>" before the extension
// ("run.json" -> "run.rank3.json"), so that the ranks do not overwrite one another.
std::string rank_report_path(const std::string& path, int rank);

// --nproc-per-node: starts `n` copies of this command (this process's arguments without
// --nproc-per-node) with torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR
// 127.0.0.1, MASTER_PORT a free port), waits for them and stops the others when one fails.
// Returns the worst exit code (a rank killed by a signal counts as 4).
int launch_local_ranks(int n);

}  // namespace preflight::cli
