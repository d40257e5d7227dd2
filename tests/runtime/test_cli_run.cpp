// `preflight run` through the executable: --dry-run JSON, exit codes, the report file.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "run_cli.hpp"

namespace {
// Runs the CLI with CUDA devices hidden, so "no GPU" is deterministic.
preflight::test::CliResult run(const std::string& args) {
    return preflight::test::run_preflight(args, "CUDA_VISIBLE_DEVICES=");
}

TEST(CliRun, DryRunPrintsMeasuredAndPredictedThatAgree) {
    const auto r = run("run --model llama-3.2-1b --seq 512 --mbs 2 --recompute selective --dry-run --format json");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["mode"], "dry-run");
    EXPECT_EQ(j["plan"]["recompute"], "selective");
    EXPECT_EQ(j["measured"]["tracked_peak_bytes"], j["predicted"]["tracked_peak_bytes"]);
    EXPECT_GT(j["timeline"]["samples"].size(), 100u);
}

TEST(CliRun, WithoutAGpuExitsThree) {
    EXPECT_EQ(run("run --model gpt2 --seq 128 --steps 1").exit_code, 3);
}

TEST(CliRun, UnsupportedPlanIsBadInput) {
    EXPECT_EQ(run("run --model gpt2 --seq 128 --tp 2 --dry-run").exit_code, 2);
    EXPECT_EQ(run("run --model gpt2 --seq 128 --precision fp8-mixed --dry-run").exit_code, 2);
    EXPECT_EQ(run("run --model gpt2 --seq 128 --steps 0 --dry-run").exit_code, 2);
}

TEST(CliRun, ReportFileAndPlanFile) {
    const auto dir = std::filesystem::temp_directory_path();
    const auto plan = dir / "preflight_run_plan.json";
    const auto report = dir / "preflight_run_report.json";
    std::ofstream(plan) << R"({"plan": {"seq": 256, "mbs": 2, "attention": "eager", "precision": "bf16"}})";
    const auto r = run("run --model gpt2 --plan " + plan.string() + " --dry-run --report " + report.string());
    ASSERT_EQ(r.exit_code, 0);
    std::ifstream in(report);
    const auto j = nlohmann::json::parse(in);
    EXPECT_EQ(j["plan"]["seq"], 256);
    EXPECT_EQ(j["plan"]["attention"], "eager");
    EXPECT_EQ(j["plan"]["precision"], "bf16");
    std::filesystem::remove(plan);
    std::filesystem::remove(report);
}

TEST(CliRun, DiagnosticFlagsAreAcceptedAndTheReportHasTheDriverSection) {
    const auto r = run("run --model gpt2 --seq 128 --debug-sync --no-cudnn --dry-run --format json");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    // A dry run has no driver figures: the section is there, every figure null (unknown, not 0).
    ASSERT_TRUE(j["measured"].contains("driver"));
    EXPECT_TRUE(j["measured"]["driver"]["used_peak_bytes"].is_null());
    EXPECT_TRUE(j["measured"]["device_used_peak_bytes"].is_null());
    const auto help = run("run --help");
    for (const char* flag : {"--debug-sync", "PREFLIGHT_DEBUG_SYNC", "--no-cudnn", "--save-init"})
        EXPECT_NE(help.out.find(flag), std::string::npos) << flag;
}

}  // namespace
