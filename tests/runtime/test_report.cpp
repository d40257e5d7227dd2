// The run report: contract keys, categories mapped to docs/interface.md, atomic write.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <thread>

#include <sys/stat.h>
#include <unistd.h>

#include "catalog_fixture.hpp"
#include "preflight/runtime/runtime.hpp"

namespace preflight::runtime {
namespace {

TEST(RunReport, DryRunJsonHasMeasuredAndPredictedSideBySide) {
    const ModelConfig m = test::catalog_model("gpt2");
    const GpuSpec g = test::catalog_gpu("h100-sxm-80gb");
    Plan p;
    p.seq = 512;
    p.mbs = 2;
    const auto j = run_report_to_json(dry_run_report(m, g, p, RunOptions{}));
    EXPECT_EQ(j["schema_version"], 1);
    EXPECT_EQ(j["mode"], "dry-run");
    EXPECT_EQ(j["plan"]["seq"], 512);
    EXPECT_TRUE(j["device"].is_null());
    for (const char* section : {"measured", "predicted"}) {
        const auto& s = j[section];
        for (const char* k : {"peak_bytes", "tracked_peak_bytes", "per_gpu_bytes", "step_time_s", "tokens_per_s", "mfu", "hfu"})
            EXPECT_TRUE(s.contains(k)) << section << "." << k;
        for (const char* k : {"weights", "master_weights", "gradients", "optimizer_states", "activations",
                              "logits_and_loss", "buffers", "overhead"})
            EXPECT_TRUE(s["per_gpu_bytes"].contains(k)) << section << ".per_gpu_bytes." << k;
    }
    EXPECT_EQ(j["measured"]["tracked_peak_bytes"], j["predicted"]["tracked_peak_bytes"]);
    EXPECT_TRUE(j["measured"]["step_time_s"].is_null());
    // Categories: the contract view sums the runtime's nine categories.
    std::int64_t cats = 0, contract = 0;
    for (auto& [k, v] : j["measured"]["bytes_by_category"].items()) cats += v.get<std::int64_t>();
    for (auto& [k, v] : j["measured"]["per_gpu_bytes"].items())
        if (k != "overhead") contract += v.get<std::int64_t>();
    EXPECT_EQ(cats, j["measured"]["tracked_peak_bytes"].get<std::int64_t>());
    EXPECT_EQ(contract, cats);
    EXPECT_TRUE(j["measured"]["per_gpu_bytes"]["overhead"].is_null());  // a dry run measures none: unknown
    const auto& tl = j["timeline"];
    EXPECT_EQ(tl["categories"].size(), 9u);
    ASSERT_FALSE(tl["samples"].empty());
    EXPECT_EQ(tl["samples"][0]["bytes"].size(), 9u);
    EXPECT_DOUBLE_EQ(j["agreement"]["tracked_peak_relative_error"].get<double>(), 0.0);
}

// A 2 s step of seq 1024 x mbs 4 per rank on H100s (989.4 dense bf16 TFLOP/s), the planner's
// FLOPs 1e15 model / 1.25e15 hardware per step.
RunReport measured_two_second_step(std::int64_t dp) {
    RunReport r;
    r.gpu = test::catalog_gpu("h100-sxm-80gb");
    r.plan.seq = 1024;
    r.plan.mbs = 4;
    r.plan.dp = dp;
    r.predicted.model_flops_per_step = 1e15;
    r.predicted.hardware_flops_per_step = 1.25e15;
    r.measured.step_time_s = 2.0;
    fill_measured_throughput(r);
    return r;
}

TEST(RunReport, MeasuredThroughputUsesThePlannersFlops) {
    const RunReport r = measured_two_second_step(1);
    EXPECT_DOUBLE_EQ(*r.measured.tokens_per_s, 4096 / 2.0);
    EXPECT_DOUBLE_EQ(*r.measured.mfu, 1e15 / (2.0 * 989.4e12));
    EXPECT_DOUBLE_EQ(*r.measured.hfu, 1.25e15 / (2.0 * 989.4e12));
}

// One rank of dp 8 measured alone: the job's FLOPs are spread over 8 GPUs, so at the same step
// time the MFU is an eighth of one GPU doing it all: 1e15 / (2 s * 8 * 989.4e12) = 6.32 %.
TEST(RunReport, AnEmulatedRanksMfuSharesTheJobsFlopsOverItsGpus) {
    const RunReport r = measured_two_second_step(8);
    EXPECT_DOUBLE_EQ(*r.measured.tokens_per_s, 8 * 4096 / 2.0);
    EXPECT_NEAR(*r.measured.mfu, 0.0632, 1e-4);
    EXPECT_DOUBLE_EQ(*r.measured.hfu, 1.25e15 / (2.0 * 8 * 989.4e12));
}

// An emulated rank waits for no peer: its measured step lacks the exposed data-, tensor- and
// pipeline-parallel communication and the 1F1B bubble, all four (0.1 + 0.02 + 0.003 + 0.4 s).
TEST(RunReport, AnEmulatedRanksStepLacksTheCommunicationAndTheBubble) {
    Predicted p;
    EXPECT_EQ(p.emulated_communication_s(), 0.0);
    p.dp_communication_s = 0.1;
    p.tp_communication_s = 0.02;
    p.pp_communication_s = 0.003;
    p.pipeline_bubble_s = 0.4;
    EXPECT_DOUBLE_EQ(p.emulated_communication_s(), 0.523);
    const auto j = run_report_to_json([&] {
        RunReport r;
        r.predicted = p;
        return r;
    }());
    EXPECT_DOUBLE_EQ(j["predicted"]["pipeline_bubble_s"].get<double>(), 0.4);
    EXPECT_DOUBLE_EQ(j["predicted"]["pp_communication_s"].get<double>(), 0.003);
}

// An fp8-mixed step is measured against the H100's dense fp8 peak, 1,978.9 TFLOP/s, as its
// predicted MFU is (throughput.hpp compute_peak_flops_per_s), not the bf16 one: 1e15 / (2 s *
// 1978.9e12) = 25.3 %. (Until 2026-11-28 the runtime's own rule took bf16's, 50.5 %, beside an
// fp8-based prediction.)
TEST(RunReport, AnFp8StepsMfuUsesTheFp8Peak) {
    RunReport r;
    r.gpu = test::catalog_gpu("h100-sxm-80gb");
    r.plan.seq = 1024;
    r.plan.mbs = 4;
    r.plan.precision = Precision::fp8_mixed;
    r.predicted.model_flops_per_step = 1e15;
    r.measured.step_time_s = 2.0;
    fill_measured_throughput(r);
    EXPECT_NEAR(*r.measured.mfu, 1e15 / (2.0 * 1978.9e12), 1e-12);
}

TEST(RunReport, FailureSectionIsWritten) {
    RunReport r;
    r.status = "allocation-failed";
    r.failure = FailureInfo{"backward layer 3 (micro-batch 1): L3 dP", "L3 dP", "temporary", 1 << 30, 1 << 20, 5, "x"};
    const auto j = run_report_to_json(r);
    EXPECT_EQ(j["status"], "allocation-failed");
    EXPECT_EQ(j["failure"]["requested_bytes"], 1 << 30);
    EXPECT_EQ(j["failure"]["free_bytes"], 1 << 20);
}

TEST(RunReport, AtomicWriteReplacesTheFileAndLeavesNoTemporary) {
    const auto dir = std::filesystem::temp_directory_path() / ("preflight_rt_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
    std::filesystem::create_directories(dir);
    const auto path = dir / "report.json";
    write_file_atomic(path, "first");
    write_file_atomic(path, "{\"second\": true}");
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_EQ(ss.str(), "{\"second\": true}");
    int files = 0;
    for (auto& e : std::filesystem::directory_iterator(dir)) files += e.is_regular_file() ? 1 : 0;
    EXPECT_EQ(files, 1);
    EXPECT_THROW(write_file_atomic(dir / "missing" / "r.json", "x"), std::runtime_error);
    std::filesystem::remove_all(dir);
}

// `--report /dev/null`, `/dev/stdout` or a FIFO is written into, as a shell redirection writes,
// and a link is written through: rename() over any of them would replace it with a plain file
// (as root, /dev/null itself).
TEST(RunReport, AtomicWriteWritesIntoAFifoAndThroughALink) {
    namespace fs = std::filesystem;
    const auto dir = fs::temp_directory_path() / ("preflight_rt_fifo_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const auto fifo = dir / "pipe.json";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    std::string got;
    std::thread reader([&] {
        std::ifstream in(fifo);
        std::stringstream ss;
        ss << in.rdbuf();
        got = ss.str();
    });
    write_file_atomic(fifo, "{\"through\": \"fifo\"}");
    reader.join();
    EXPECT_EQ(got, "{\"through\": \"fifo\"}");
    EXPECT_TRUE(fs::is_fifo(fs::symlink_status(fifo)));

    const auto target = dir / "target.json";
    const auto link = dir / "link.json";
    fs::create_symlink("target.json", link);  // relative, and dangling until written
    write_file_atomic(link, "one");
    write_file_atomic(link, "two");
    EXPECT_TRUE(fs::is_symlink(fs::symlink_status(link)));
    std::ifstream in(target);
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_EQ(ss.str(), "two");

    write_file_atomic("/dev/null", "discarded");
    EXPECT_TRUE(fs::is_character_file(fs::status("/dev/null")));
    fs::remove_all(dir);
}

}  // namespace
}  // namespace preflight::runtime
