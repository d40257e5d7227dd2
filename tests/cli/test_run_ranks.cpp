// Which ranks `preflight run` runs (run_ranks.hpp), as a function of the flags, the launcher's
// variables and the plan; the report file of each rank.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "preflight/planner/error.hpp"
#include "run_cli.hpp"
#include "run_ranks.hpp"

namespace preflight::cli {
namespace {

Plan dp(std::int64_t n, int zero = 1) {
    Plan p;
    p.dp = n;
    p.zero = static_cast<ZeroStage>(zero);
    return p;
}

TEST(RunRanks, ChoosesTheRankFromTheFlagsAndTheLaunch) {
    EXPECT_EQ(choose_ranks({}, std::nullopt, dp(1, 0), false).mode, RankMode::alone);
    EXPECT_EQ(choose_ranks({}, std::nullopt, dp(1, 3), false).rank, 0);  // one rank with ZeRO: rank 0
    const RankChoice e = choose_ranks({5, 0}, std::nullopt, dp(8), false);
    EXPECT_EQ(e.mode, RankMode::alone);
    EXPECT_EQ(e.rank, 5);
    EXPECT_EQ(choose_ranks({}, std::nullopt, dp(8), true).rank, 0);  // a dry run walks rank 0
    EXPECT_EQ(choose_ranks({std::nullopt, 8}, std::nullopt, dp(8), false).mode, RankMode::launcher);
    runtime::Rendezvous job;
    job.rank = 6;
    job.world_size = 8;
    job.local_rank = 6;
    job.source = "torchrun";
    runtime::Rendezvous alone_job;  // --nproc-per-node 1: NCCL over one rank for a ZeRO plan
    alone_job.source = "torchrun";
    EXPECT_EQ(choose_ranks({}, alone_job, dp(1, 1), false).mode, RankMode::nccl_rank);
    EXPECT_EQ(choose_ranks({}, alone_job, dp(1, 0), false).mode, RankMode::alone);  // nothing to communicate
    const RankChoice n = choose_ranks({}, job, dp(8), false);
    EXPECT_EQ(n.mode, RankMode::nccl_rank);
    EXPECT_EQ(n.rank, 6);
    EXPECT_EQ(n.launch->local_rank, 6);
    // A dry run inside the launch walks this process's rank (was rank 0 for every process), alone;
    // --emulate-rank still chooses another.
    const RankChoice d = choose_ranks({}, job, dp(8), true);
    EXPECT_EQ(d.mode, RankMode::alone);
    EXPECT_EQ(d.rank, 6);
    EXPECT_TRUE(d.in_launch);  // its own report file (.rank6) and, not being rank 0, no output
    EXPECT_EQ(choose_ranks({2, 0}, job, dp(8), true).rank, 2);
}

TEST(RunRanks, RefusesWhatCannotRunNamingTheFlag) {
    runtime::Rendezvous job;
    job.world_size = 4;
    job.source = "slurm";
    auto refused = [](auto call, const std::string& flag) {
        try {
            call();
            ADD_FAILURE() << "accepted; expected " << flag;
        } catch (const InputError& e) {
            EXPECT_EQ(e.subject(), flag);
        }
    };
    refused([] { choose_ranks({}, std::nullopt, dp(8), false); }, "--emulate-rank");
    refused([&] { choose_ranks({}, job, dp(8), false); }, "--dp");
    refused([&] { choose_ranks({}, job, dp(8), true); }, "--dp");  // a dry run walks the launch's rank
    refused([&] { choose_ranks({1, 0}, job, dp(4), false); }, "--emulate-rank");
    refused([] { choose_ranks({std::nullopt, 4}, std::nullopt, dp(8), false); }, "--nproc-per-node");
    refused([] { choose_ranks({std::nullopt, 8}, std::nullopt, dp(8), true); }, "--nproc-per-node");
}

TEST(RunRanks, EachRankWritesItsOwnReport) {
    EXPECT_EQ(rank_report_path("run.json", 3), "run.rank3.json");
    EXPECT_EQ(rank_report_path("out/run", 0), "out/run.rank0");
    EXPECT_EQ(rank_report_path("out.d/run", 12), "out.d/run.rank12");
}

// A dry run reports the collectives a device run of the rank issues (was 0 for every plan).
// GPT-2 with its vocabulary padded to 50,304 rows: 124,439,808 + 47 x 768 = 124,475,904
// parameters. ZeRO-0 all-reduces the bf16 gradients once: 2 B each, 248,951,808 B. ZeRO-1 also
// all-gathers the updated bf16 weights: twice that.
TEST(RunRanks, ADryRunCountsTheCollectivesADeviceRunIssues) {
    const auto bytes = [](int zero) {
        const auto r = test::run_preflight("run --dry-run --model gpt2 --dp 2 --zero " + std::to_string(zero) +
                                           " --emulate-rank 0 --format json");
        EXPECT_EQ(r.exit_code, 0) << r.err;
        const auto p = nlohmann::json::parse(r.out).at("parallel");
        EXPECT_GT(p.at("collectives_per_step").get<int>(), 0);
        EXPECT_TRUE(p.at("collective_bytes_per_step").is_number_integer());
        return p.at("collective_bytes_per_step").get<std::int64_t>();
    };
    EXPECT_EQ(bytes(0), 248'951'808);
    EXPECT_EQ(bytes(1), 2 * 248'951'808);
}

// A dry run in each process of a launch: rank 1 of 2 writes run.rank1.json and prints nothing
// (rank 0 speaks for the job); run.json itself is not written.
TEST(RunRanks, ADryRunInALaunchWritesItsRanksReportQuietly) {
    const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("preflight-ranks-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string report = (dir / "run.json").string();
    const auto r = test::run_preflight("run --model gpt2 --seq 128 --dp 2 --dry-run --report " + report,
                                       "RANK=1 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_TRUE(std::filesystem::exists(dir / "run.rank1.json"));
    EXPECT_FALSE(std::filesystem::exists(dir / "run.json"));
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace preflight::cli
