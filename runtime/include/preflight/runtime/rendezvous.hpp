// How the processes of a multi-GPU run find each other before NCCL can start: which rank this
// process is (from torchrun's or Slurm's environment, or the ranks `preflight run
// --nproc-per-node` starts itself), and the hand-over of NCCL's 128-byte unique id from rank 0
// to every other rank, over TCP or through a file on a shared file system (llm.c's `tcp` and
// `fs` init methods, llmc/zero.cuh). Host code only: no CUDA, no NCCL header.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace preflight::runtime {

struct Rendezvous {
    int rank = 0, world_size = 1, local_rank = 0;
    std::string method = "tcp";  // "tcp" | "fs"
    std::string master_addr = "127.0.0.1";
    int master_port = 29500;
    std::string file;            // fs: the id file on a file system every rank sees
    double timeout_s = 300;      // how long a rank waits for the others
    std::string source;          // "torchrun" | "slurm" | "preflight": where the ranks came from
};

// The rendezvous the environment describes: torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR
// and MASTER_PORT, else Slurm's SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID (with MASTER_ADDR /
// MASTER_PORT, or SLURM_LAUNCH_NODE_IPADDR and port 29500); PREFLIGHT_COMM_INIT=tcp|fs and
// PREFLIGHT_NCCL_ID_FILE choose the method and file. nullopt when neither launcher's variables
// are set. Throws InputError naming the variable for a value that is not a number in range.
std::optional<Rendezvous> rendezvous_from_env(const std::function<const char*(const char*)>& getenv);

using UniqueId = std::array<char, 128>;  // ncclUniqueId's size (NCCL_UNIQUE_ID_BYTES)

// Rank 0 makes the id with `make_id` and hands it to every other rank; the others receive it.
// tcp: rank 0 listens on master_port and sends the id to world_size - 1 connections; the others
// connect to master_addr:master_port, retrying until timeout_s. fs: rank 0 writes the id to
// `file` atomically (refusing a file that is already there: a stale one from a crashed run
// would hand the other ranks the wrong id); the others wait for it. Throws std::runtime_error
// naming the address or file on failure or timeout.
UniqueId exchange_unique_id(const Rendezvous& r, const std::function<UniqueId()>& make_id);

// fs: rank 0 removes the id file once its communicator is up (every rank has read the id then).
void remove_unique_id_file(const Rendezvous& r);

}  // namespace preflight::runtime
