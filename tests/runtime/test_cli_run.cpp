// `preflight run` through the executable: --dry-run JSON, exit codes, the report file.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

struct Result {
    int code = -1;
    std::string out;
};

// Runs the CLI with CUDA devices hidden (so "no GPU" is deterministic), stdout captured.
Result run(const std::string& args) {
    const std::string cmd = std::string("CUDA_VISIBLE_DEVICES= ") + PREFLIGHT_EXE + " " + args +
                            " --data-dir " + PREFLIGHT_TEST_DATA_DIR + " 2>/dev/null";
    Result r;
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return r;
    std::array<char, 4096> buf{};
    std::size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
    const int status = pclose(p);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

TEST(CliRun, DryRunPrintsMeasuredAndPredictedThatAgree) {
    const Result r = run("run --model llama-3.2-1b --seq 512 --mbs 2 --recompute selective --dry-run --format json");
    ASSERT_EQ(r.code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["mode"], "dry-run");
    EXPECT_EQ(j["plan"]["recompute"], "selective");
    EXPECT_EQ(j["measured"]["tracked_peak_bytes"], j["predicted"]["tracked_peak_bytes"]);
    EXPECT_GT(j["timeline"]["samples"].size(), 100u);
}

TEST(CliRun, WithoutAGpuExitsThree) {
    EXPECT_EQ(run("run --model gpt2 --seq 128 --steps 1").code, 3);
}

TEST(CliRun, UnsupportedPlanIsBadInput) {
    EXPECT_EQ(run("run --model gpt2 --seq 128 --tp 2 --dry-run").code, 2);
    EXPECT_EQ(run("run --model gpt2 --seq 128 --precision fp8-mixed --dry-run").code, 2);
    EXPECT_EQ(run("run --model gpt2 --seq 128 --steps 0 --dry-run").code, 2);
}

TEST(CliRun, ReportFileAndPlanFile) {
    const auto dir = std::filesystem::temp_directory_path();
    const auto plan = dir / "preflight_run_plan.json";
    const auto report = dir / "preflight_run_report.json";
    std::ofstream(plan) << R"({"plan": {"seq": 256, "mbs": 2, "attention": "eager", "precision": "bf16"}})";
    const Result r = run("run --model gpt2 --plan " + plan.string() + " --dry-run --report " + report.string());
    ASSERT_EQ(r.code, 0);
    std::ifstream in(report);
    const auto j = nlohmann::json::parse(in);
    EXPECT_EQ(j["plan"]["seq"], 256);
    EXPECT_EQ(j["plan"]["attention"], "eager");
    EXPECT_EQ(j["plan"]["precision"], "bf16");
    std::filesystem::remove(plan);
    std::filesystem::remove(report);
}

}  // namespace
