// The rendezvous of a multi-process run (rendezvous.hpp): the rank from torchrun's and Slurm's
// variables, bad values named, and the NCCL id handed from rank 0 to every rank over TCP and
// through a file, with ranks as threads of this test.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <thread>

#include "preflight/planner/error.hpp"
#include "preflight/runtime/rendezvous.hpp"

namespace preflight::runtime {
namespace {

auto env_of(std::map<std::string, std::string> vars) {
    return [vars = std::move(vars)](const char* name) -> const char* {
        auto it = vars.find(name);
        return it == vars.end() ? nullptr : it->second.c_str();
    };
}

TEST(Rendezvous, ReadsTorchrunThenSlurmVariables) {
    EXPECT_FALSE(rendezvous_from_env(env_of({})).has_value());
    const auto t = rendezvous_from_env(env_of({{"RANK", "5"}, {"WORLD_SIZE", "16"}, {"LOCAL_RANK", "5"},
                                               {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29501"}}));
    ASSERT_TRUE(t);
    EXPECT_EQ(t->rank, 5);
    EXPECT_EQ(t->world_size, 16);
    EXPECT_EQ(t->local_rank, 5);
    EXPECT_EQ(t->master_addr, "node0");
    EXPECT_EQ(t->master_port, 29501);
    EXPECT_EQ(t->source, "torchrun");
    EXPECT_EQ(t->method, "tcp");
    const auto s = rendezvous_from_env(env_of({{"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "64"}, {"SLURM_LOCALID", "1"},
                                               {"SLURM_LAUNCH_NODE_IPADDR", "10.0.0.7"}}));
    ASSERT_TRUE(s);
    EXPECT_EQ(s->rank, 9);
    EXPECT_EQ(s->world_size, 64);
    EXPECT_EQ(s->local_rank, 1);
    EXPECT_EQ(s->master_addr, "10.0.0.7");
    EXPECT_EQ(s->master_port, 29500);
    EXPECT_EQ(s->source, "slurm");
}

TEST(Rendezvous, NamesTheVariableOfABadValue) {
    auto refused = [](std::map<std::string, std::string> vars, const std::string& name) {
        try {
            rendezvous_from_env(env_of(std::move(vars)));
            ADD_FAILURE() << "accepted a bad " << name;
        } catch (const InputError& e) {
            EXPECT_EQ(e.subject(), name);
        }
    };
    refused({{"RANK", "x"}, {"WORLD_SIZE", "2"}}, "RANK");
    refused({{"RANK", "2"}, {"WORLD_SIZE", "2"}}, "RANK");
    refused({{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE");
    refused({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}, "MASTER_PORT");
    refused({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"PREFLIGHT_COMM_INIT", "mpi"}}, "PREFLIGHT_COMM_INIT");
    refused({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"PREFLIGHT_COMM_INIT", "fs"}}, "PREFLIGHT_NCCL_ID_FILE");
}

int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t n = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
    ::close(fd);
    return ntohs(a.sin_port);
}

// Every rank of `base` (ranks as threads) ends with rank 0's id.
void every_rank_gets_rank_0s_id(Rendezvous base) {
    const int world = base.world_size;
    std::vector<UniqueId> got(static_cast<std::size_t>(world));
    std::vector<std::string> errors(static_cast<std::size_t>(world));
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r)
        threads.emplace_back([&, r] {
            Rendezvous me = base;
            me.rank = r;
            try {
                got[static_cast<std::size_t>(r)] = exchange_unique_id(me, [] {
                    UniqueId id{};
                    for (std::size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>(i * 7 + 3);
                    return id;
                });
            } catch (const std::exception& e) {
                errors[static_cast<std::size_t>(r)] = e.what();
            }
        });
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r) {
        EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
        EXPECT_EQ(got[static_cast<std::size_t>(r)], got[0]) << "rank " << r;
    }
    EXPECT_EQ(got[0][1], 10);
}

TEST(Rendezvous, TcpHandsRankZerosIdToEveryRank) {
    Rendezvous r;
    r.world_size = 5;
    r.master_port = free_port();
    r.timeout_s = 20;
    every_rank_gets_rank_0s_id(r);
}

TEST(Rendezvous, FileHandsRankZerosIdToEveryRankAndRefusesAStaleFile) {
    const auto dir = std::filesystem::temp_directory_path() / ("preflight-rdv-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    Rendezvous r;
    r.world_size = 4;
    r.method = "fs";
    r.file = (dir / "nccl.id").string();
    r.timeout_s = 20;
    every_rank_gets_rank_0s_id(r);
    // The file is still there (rank 0 removes it once its communicator is up): a new run refuses it.
    try {
        exchange_unique_id(r, [] { return UniqueId{}; });
        ADD_FAILURE() << "rank 0 reused a stale id file";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("already exists"), std::string::npos) << e.what();
    }
    remove_unique_id_file(r);
    EXPECT_FALSE(std::filesystem::exists(r.file));
    std::filesystem::remove_all(dir);
}

TEST(Rendezvous, ARankWhoseRankZeroNeverComesTimesOutNamingTheAddress) {
    Rendezvous r;
    r.rank = 1;
    r.world_size = 2;
    r.master_port = free_port();
    r.timeout_s = 1;
    try {
        exchange_unique_id(r, [] { return UniqueId{}; });
        ADD_FAILURE() << "no timeout";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(r.master_port)), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace preflight::runtime
