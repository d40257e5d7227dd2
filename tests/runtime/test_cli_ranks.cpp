// `preflight run` with data-parallel plans, through the executable: which rank runs (one alone,
// a launched NCCL rank, or the local ranks --nproc-per-node starts), the report's parallel
// section, and every refused combination named by its flag or variable. GPUs hidden.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "run_cli.hpp"

namespace {

using preflight::test::run_preflight;
// Devices hidden and no launcher variables from the test's own environment.
const std::string kClean = "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u SLURM_PROCID -u SLURM_NTASKS CUDA_VISIBLE_DEVICES=";

preflight::test::CliResult run(const std::string& args, const std::string& env = "") {
    return run_preflight(args, kClean + " " + env);
}

TEST(CliRanks, DryRunOfAnyRankEqualsItsPredictionAndSaysWhichRank) {
    for (int zero : {0, 1, 2, 3}) {
        const auto r = run("run --model llama-3.2-1b --seq 512 --dp 8 --zero " + std::to_string(zero) +
                           " --emulate-rank 7 --dry-run --format json");
        ASSERT_EQ(r.exit_code, 0) << r.err;
        const auto j = nlohmann::json::parse(r.out);
        EXPECT_EQ(j["parallel"]["world_size"], 8);
        EXPECT_EQ(j["parallel"]["rank"], 7);
        EXPECT_EQ(j["parallel"]["backend"], "dry-run");
        EXPECT_EQ(j["measured"]["tracked_peak_bytes"], j["predicted"]["tracked_peak_bytes"]) << "zero " << zero;
    }
    // One GPU without ZeRO has no collectives.
    const auto one = nlohmann::json::parse(run("run --model gpt2 --seq 128 --dry-run --format json").out);
    EXPECT_EQ(one["parallel"]["backend"], "none");
}

// Context parallelism: rank R = tp_rank + tp x (cp_rank + cp x dp_rank); rank 5 of dp 2 x tp 2 x cp 2
// is tensor-parallel rank 1, context-parallel rank 0, data-parallel rank 1.
TEST(CliRanks, ACpRankSaysWhereItSitsAndWalksWhatThePlannerPredicts) {
    const auto r = run("run --model llama-3.2-1b --seq 8192 --dp 2 --tp 2 --sp --cp 2 --zero 1 --emulate-rank 5 --dry-run "
                       "--format json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["parallel"]["world_size"], 8);
    EXPECT_EQ(j["parallel"]["tp_rank"], 1);
    EXPECT_EQ(j["parallel"]["cp_rank"], 0);
    EXPECT_EQ(j["parallel"]["dp_rank"], 1);
    EXPECT_EQ(j["measured"]["tracked_peak_bytes"], j["predicted"]["tracked_peak_bytes"]);
    const auto table = run("run --model llama-3.2-1b --seq 8192 --cp 2 --emulate-rank 1 --dry-run");
    ASSERT_EQ(table.exit_code, 0) << table.err;
    EXPECT_NE(table.out.find("context-parallel rank 1"), std::string::npos) << table.out;
    // Qwen2.5-7B at 32k, cp 4, tp 2: a rank's K|V chunk is 8,192 tokens x 4 KV heads x 128 / 2 x 2 B =
    // 4 MiB; ring attention keeps 8 of them (32 MiB), the runtime the whole sequence's K|V twice (64 MiB).
    const std::string qwen = "memory --model qwen2.5-7b --seq 32768 --cp 4 --tp 2 --sp --dp 2 --zero 1";
    const auto ring = run(qwen), gathered = run(qwen + " --framework preflight-runtime");
    EXPECT_NE(ring.out.find("ring K/V buffers 32.00 MiB"), std::string::npos) << ring.out;
    EXPECT_NE(gathered.out.find("gathered K/V buffers 64.00 MiB"), std::string::npos) << gathered.out;
    const auto gpt = run("run --model gpt2 --seq 1024 --cp 2 --dry-run");
    EXPECT_EQ(gpt.exit_code, 2);
    EXPECT_NE(gpt.err.find("--cp"), std::string::npos) << gpt.err;
}

TEST(CliRanks, ARunOfManyRanksMustSayWhichToRun) {
    const auto r = run("run --model gpt2 --seq 128 --dp 8 --zero 1");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("--emulate-rank"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--nproc-per-node 8"), std::string::npos) << r.err;
    for (const char* rank : {"8", "-1"}) {
        const auto bad = run(std::string("run --model gpt2 --seq 128 --dp 8 --zero 1 --dry-run --emulate-rank ") + rank);
        EXPECT_EQ(bad.exit_code, 2) << rank;
        EXPECT_NE(bad.err.find("--emulate-rank"), std::string::npos) << bad.err;
    }
    // Chosen, it needs the GPU this machine lacks.
    EXPECT_EQ(run("run --model gpt2 --seq 128 --dp 8 --zero 1 --emulate-rank 3 --steps 1").exit_code, 3);
}

TEST(CliRanks, NprocPerNodeIsCheckedBeforeAnyProcessStarts) {
    auto refused = [](const std::string& args, const std::string& env, const std::string& named) {
        const auto r = run(args, env);
        EXPECT_EQ(r.exit_code, 2) << args;
        EXPECT_NE(r.err.find(named), std::string::npos) << r.err;
    };
    refused("run --model gpt2 --seq 128 --dp 8 --zero 1 --nproc-per-node 8 --dry-run", "", "--nproc-per-node");
    refused("run --model gpt2 --seq 128 --dp 8 --zero 1 --nproc-per-node 4", "", "--nproc-per-node");
    refused("run --model gpt2 --seq 128 --dp 8 --zero 1 --nproc-per-node 8 --emulate-rank 0", "", "--nproc-per-node");
    refused("run --model gpt2 --seq 128 --dp 8 --zero 1 --nproc-per-node 8", "RANK=0 WORLD_SIZE=8", "--nproc-per-node");
    // Valid, but eight ranks need eight GPUs: none start (a build without the CUDA runtime says
    // that first, with the same exit code).
    const auto r = run("run --model gpt2 --seq 128 --dp 8 --zero 1 --nproc-per-node 8");
    EXPECT_EQ(r.exit_code, 3);
    EXPECT_TRUE(r.err.find("needs 8 GPUs") != std::string::npos || r.err.find("no CUDA runtime") != std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("started"), std::string::npos) << r.err;
}

TEST(CliRanks, ALaunchedRankReadsTorchrunAndSlurmVariables) {
    const std::string plan = "run --model gpt2 --seq 128 --dp 8 --zero 1 --steps 1";
    EXPECT_EQ(run(plan, "RANK=3 WORLD_SIZE=8 LOCAL_RANK=3").exit_code, 3);  // a rank of the job: no GPU here
    EXPECT_EQ(run(plan, "SLURM_PROCID=3 SLURM_NTASKS=8").exit_code, 3);
    auto refused = [&](const std::string& args, const std::string& env, const std::string& named) {
        const auto r = run(args, env);
        EXPECT_EQ(r.exit_code, 2) << env;
        EXPECT_NE(r.err.find(named), std::string::npos) << r.err;
    };
    refused(plan, "RANK=3 WORLD_SIZE=4", "--dp");
    refused(plan, "SLURM_PROCID=3 SLURM_NTASKS=4", "SLURM_NTASKS");
    refused(plan, "RANK=x WORLD_SIZE=8", "RANK");
    refused(plan, "RANK=0 WORLD_SIZE=8 MASTER_PORT=0", "MASTER_PORT");
    refused(plan + " --emulate-rank 1", "RANK=3 WORLD_SIZE=8", "--emulate-rank");
    // A dry run walks one rank whatever launched it.
    EXPECT_EQ(run("run --model gpt2 --seq 128 --dp 8 --zero 1 --dry-run --emulate-rank 2", "RANK=3 WORLD_SIZE=8").exit_code, 0);
}

TEST(CliRanks, ThePlanSearchsRecommendationRunsFromStandardInput) {
    const std::string exe = PREFLIGHT_EXE, data = PREFLIGHT_TEST_DATA_DIR;
    const std::string cmd = kClean + " PREFLIGHT_DATA_DIR='" + data + "' '" + exe +
                            "' plan --model llama-3-8b --gpu h100-sxm-80gb --gpus 8 --gbs-tokens 4194304 --seq 4096 "
                            "--precision bf16-mixed --emit preflight 2>/dev/null | " + kClean + " PREFLIGHT_DATA_DIR='" +
                            data + "' '" + exe + "' run --plan - --dry-run --emulate-rank 0 --format json";
    const auto r = preflight::test::run_shell(cmd);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["model"]["name"], "llama-3-8b");
    EXPECT_EQ(j["plan"]["dp"], 8);
    EXPECT_EQ(j["parallel"]["world_size"], 8);
    EXPECT_EQ(j["measured"]["tracked_peak_bytes"], j["predicted"]["tracked_peak_bytes"]);
    const auto bad = preflight::test::run_shell("echo '{not json' | " + kClean + " PREFLIGHT_DATA_DIR='" + data + "' '" +
                                                exe + "' run --plan - --dry-run 2>&1");
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_NE(bad.out.find("--plan -"), std::string::npos) << bad.out;
}

}  // namespace
