#include "run_ranks.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <vector>

#include "commands.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/runtime/program.hpp"

namespace preflight::cli {

RankChoice choose_ranks(const RankFlags& f, const std::optional<runtime::Rendezvous>& env, const Plan& plan,
                        bool dry_run) {
    const std::int64_t world = plan.gpus();
    const std::string n = std::to_string(world);
    const std::string shape = runtime::rank_grid_text(plan);
    // A process torchrun, srun or --nproc-per-node started, for a plan with collectives (a world of
    // one included: NCCL over one rank).
    const bool launched = env && (env->world_size > 1 || world > 1 || plan.zero != zero_none);
    if (f.nproc_per_node != 0) {
        if (dry_run)
            throw InputError("--nproc-per-node", "starts one process per GPU; a dry run walks one rank: give --emulate-rank R");
        if (f.emulate_rank) throw InputError("--nproc-per-node", "cannot be combined with --emulate-rank (one rank alone)");
        if (env)
            throw InputError("--nproc-per-node", "this process is already rank " + std::to_string(env->rank) + " of a job " +
                                                     env->source + " launched; launch with one or the other");
        if (f.nproc_per_node != world)
            throw InputError("--nproc-per-node", std::to_string(f.nproc_per_node) + " processes for a plan of " + n +
                                                     " ranks (" + shape + "): one process per rank on this node (on "
                                                     "several nodes, launch with torchrun or srun)");
        return {RankMode::launcher, 0, std::nullopt};
    }
    // A dry run inside a launch, with no --emulate-rank, walks this process's rank: each rank its own.
    if (launched && (!dry_run || !f.emulate_rank)) {
        const std::string var = env->source == "slurm" ? "SLURM_NTASKS" : "WORLD_SIZE";
        if (f.emulate_rank)
            throw InputError("--emulate-rank", "runs one rank alone; this process is rank " + std::to_string(env->rank) +
                                                   " of a " + env->source + " launch (" + var + "=" +
                                                   std::to_string(env->world_size) + ")");
        if (env->world_size != world)
            throw InputError("--dp", "the plan has " + n + " ranks (" + shape + ") but the launch has " +
                                         std::to_string(env->world_size) + " processes (" + var + ")");
        if (dry_run) return {RankMode::alone, env->rank, std::nullopt, true};
        return {RankMode::nccl_rank, env->rank, env, true};
    }
    if (!dry_run && world > 1 && !f.emulate_rank)
        throw InputError("--emulate-rank", "this plan has " + n + " ranks (" + shape + "): measure one of them on this GPU "
                                           "with --emulate-rank R (0.." + std::to_string(world - 1) +
                                           "), start them all with --nproc-per-node " + n +
                                           ", or launch with torchrun / srun");
    return {RankMode::alone, f.emulate_rank.value_or(0), std::nullopt};
}

std::string rank_report_path(const std::string& path, int rank) {
    const std::size_t slash = path.find_last_of('/');
    const std::size_t dot = path.find_last_of('.');
    const std::string tag = ".rank" + std::to_string(rank);
    if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return path + tag;
    return path.substr(0, dot) + tag + path.substr(dot);
}

namespace {

// This process's arguments (Linux /proc/self/cmdline), without --nproc-per-node and its value.
std::vector<std::string> own_arguments() {
    std::ifstream in("/proc/self/cmdline", std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string all = ss.str();
    std::vector<std::string> args;
    for (std::size_t i = 0; i < all.size();) {
        const std::size_t end = all.find('\0', i);
        args.push_back(all.substr(i, end - i));
        i = end == std::string::npos ? all.size() : end + 1;
    }
    std::vector<std::string> out;
    for (std::size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--nproc-per-node") {
            ++i;
            continue;
        }
        if (args[i].rfind("--nproc-per-node=", 0) == 0) continue;
        out.push_back(args[i]);
    }
    return out;
}

int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int port = 29500;
    socklen_t n = sizeof a;
    if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) ::close(fd);
    return port;
}

int exit_code_of(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return kExitInternal;  // killed by a signal
}

}  // namespace

int launch_local_ranks(int n) {
    const std::vector<std::string> args = own_arguments();
    if (args.empty()) throw std::runtime_error("--nproc-per-node: cannot read this process's arguments");
    const std::string port = std::to_string(free_port());
    std::map<pid_t, int> children;  // pid -> rank
    for (int r = 0; r < n; ++r) {
        const pid_t pid = ::fork();
        if (pid < 0) throw std::runtime_error("--nproc-per-node: fork failed");
        if (pid == 0) {
            ::setenv("RANK", std::to_string(r).c_str(), 1);
            ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
            ::setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
            ::setenv("MASTER_ADDR", "127.0.0.1", 1);
            ::setenv("MASTER_PORT", port.c_str(), 1);
            std::vector<char*> argv;
            for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
            argv.push_back(nullptr);
            ::execv("/proc/self/exe", argv.data());
            std::cerr << "preflight run: rank " << r << ": cannot start: " << std::strerror(errno) << "\n";
            ::_exit(kExitInternal);
        }
        children[pid] = r;
    }
    std::cerr << "preflight run: started " << n << " ranks (MASTER_PORT " << port << ")\n";
    int worst = 0;
    bool stopping = false;  // the ranks still running were told to stop: their exit is not a failure of their own
    while (!children.empty()) {
        int status = 0;
        const pid_t pid = ::waitpid(-1, &status, 0);
        if (pid < 0) break;
        const auto it = children.find(pid);
        if (it == children.end()) continue;
        const int code = exit_code_of(status);
        std::cerr << "preflight run: rank " << it->second << (stopping ? " stopped, " : " ") << "exited with " << code << "\n";
        children.erase(it);
        if (stopping) continue;
        worst = std::max(worst, code);
        if (code != 0) {  // the others would wait for it in their collectives
            stopping = true;
            for (const auto& [p, r] : children) ::kill(p, SIGTERM);
        }
    }
    return worst;
}

}  // namespace preflight::cli
