#include <filesystem>
#include <fstream>

#include <stdlib.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "catalog_fixture.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/throughput.hpp"
#include "preflight/runtime/runtime.hpp"
#include "preflight/validation/check.hpp"
#include "preflight/validation/stats.hpp"
#include "run_cli.hpp"

using namespace preflight;
using namespace preflight::validation;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

Plan gpt2_plan(std::int64_t mbs) {
    Plan p;
    p.seq = 512;
    p.mbs = mbs;
    return p;
}

// A runtime report (as `preflight run` writes it) turned into a synthetic device run whose
// tracked peak and step time are off the prediction by the given relative errors.
json device_report(const Plan& plan, double peak_error, double step_error) {
    const ModelConfig m = test::catalog_model("gpt2");
    const GpuSpec g = test::catalog_gpu("h100-sxm-80gb");
    runtime::RunOptions o;
    o.timeline = false;
    const runtime::RunReport r = runtime::dry_run_report(m, g, plan, o);
    json j = runtime::run_report_to_json(r);
    j["mode"] = "device";
    const double pk = static_cast<double>(r.predicted.tracked_peak_bytes);
    j["measured"]["tracked_peak_bytes"] = static_cast<std::int64_t>(std::llround(pk * (1 + peak_error)));
    j["measured"]["step_time_s"] = *r.predicted.step_time_s * (1 + step_error);
    j["measured"].erase("per_gpu_bytes");
    return j;
}

fs::path fresh_dir(const std::string& name) {
    const fs::path d = fs::temp_directory_path() / ("preflight-check-" + name + "-" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

void write(const fs::path& f, const json& j) { std::ofstream(f) << j.dump(1); }

CheckOptions options() {
    CheckOptions o;
    o.data_dir = test::data_dir();
    return o;
}

}  // namespace

TEST(Stats, PercentileInterpolatesLinearly) {
    // rank = q (n - 1): p50 of 5 values is the 3rd; p95 at rank 3.8 = 0.04 + 0.8 * (0.10 - 0.04).
    const std::vector<double> v = {0.10, 0.02, 0.04, 0.01, 0.03};
    EXPECT_DOUBLE_EQ(percentile(v, 0.5), 0.03);
    EXPECT_NEAR(percentile(v, 0.95), 0.088, 1e-15);
    EXPECT_DOUBLE_EQ(percentile(v, 1.0), 0.10);
    EXPECT_DOUBLE_EQ(percentile(v, 0.0), 0.01);
    EXPECT_DOUBLE_EQ(percentile({2.0, 4.0}, 0.5), 3.0);
    EXPECT_DOUBLE_EQ(percentile({}, 0.5), 0.0);
}

// A gate failure names both figures with the decimals that tell them apart (audit of 2026-11-30:
// a P50 gate of 1e-7 failed by a 0.01 % error read "0.0 % > 0.0 %").
TEST(Stats, ExceedsTextTellsTheTwoFiguresApart) {
    EXPECT_EQ(exceeds_text(0.012, 0.01), "1.2 % > 1.0 %");
    EXPECT_EQ(exceeds_text(0.0001, 1e-7), "0.01 % > 0.00 %");
    EXPECT_EQ(exceeds_text(0.95, 0.98, " < "), "95.0 % < 98.0 %");
    EXPECT_EQ(exceeds_text(0.010004, 0.01), "1.0004 % > 1.0000 %");
}

TEST(Check, SummaryPercentilesOfSyntheticRuns) {
    const fs::path d = fresh_dir("pct");
    const double errors[] = {0.01, -0.02, 0.03, 0.04, -0.10};
    for (int i = 0; i < 5; ++i) write(d / ("run" + std::to_string(i) + ".json"), device_report(gpt2_plan(i + 1), errors[i], errors[i] / 2));
    CheckOptions o = options();
    SourceTolerances loose;
    loose[kSourceRuntime] = {{"peak_bytes", {0, 1.0}}, {"step_time_s", {0, 1.0}}, {"mfu", {0, 1.0}}};
    o.tolerances = loose;
    const CheckResult r = check_directory(d, o);
    ASSERT_EQ(r.runs.size(), 5u);
    EXPECT_TRUE(r.passed());
    const SourceSummary& s = r.sources.at(kSourceRuntime);
    EXPECT_EQ(s.runs, 5);
    EXPECT_EQ(s.compared, 5);
    EXPECT_NEAR(s.peak.p50, 0.03, 1e-6);
    EXPECT_NEAR(s.peak.p95, 0.088, 1e-6);
    EXPECT_NEAR(s.peak.max, 0.10, 1e-6);
    EXPECT_NEAR(s.step_time.p50, 0.015, 1e-9);
    EXPECT_NEAR(s.step_time.p95, 0.044, 1e-9);
    // MFU error: measured MFU = predicted MFU / (1 + e), so |error| = |e| / (1 + e): p50 of
    // {0.005/1.005, 0.01/0.99, 0.015/1.015, 0.02/1.02, 0.05/0.95} is 0.015/1.015.
    EXPECT_NEAR(s.mfu.p50, 0.015 / 1.015, 1e-9);
    const json sj = summary_to_json(r);
    EXPECT_NEAR(sj.at("peak_error_p50").get<double>(), 0.03, 1e-6);
    EXPECT_NEAR(sj.at("peak_error_p95").get<double>(), 0.088, 1e-6);
    EXPECT_NEAR(sj.at("peak_error_max").get<double>(), 0.10, 1e-6);
    EXPECT_NEAR(sj.at("step_time_error_p50").get<double>(), 0.015, 1e-9);
    EXPECT_TRUE(sj.contains("step_time_error_p95"));
    EXPECT_TRUE(sj.contains("mfu_error_p50"));
    EXPECT_EQ(sj.at("runs").size(), 5u);
    fs::remove_all(d);
}

TEST(Check, ToleranceFromTheMatrixNextToTheReports) {
    const fs::path d = fresh_dir("tol");
    write(d / "inside.json", device_report(gpt2_plan(1), 0.005, 0.10));   // 0.5 % < 1 % + 1 MiB; 10 % < 25 %
    CheckResult r = check_directory(d, options());
    EXPECT_TRUE(r.passed());
    write(d / "outside.json", device_report(gpt2_plan(2), 0.05, 0.10));   // 5 % peak: out
    r = check_directory(d, options());
    EXPECT_FALSE(r.passed());
    EXPECT_EQ(r.all.out_of_tolerance, 1);
    // A matrix.json in the folder loosens the peak tolerance: back in.
    write(d / "matrix.json", {{"name", "loose"},
                              {"runs", {{{"id", "a"}, {"model", "gpt2"}, {"plan", {{"seq", 512}}}}}},
                              {"tolerances", {{kSourceRuntime, {{"peak_bytes", {{"abs", 0}, {"rel", 0.06}}}}}}}});
    r = check_directory(d, options());
    EXPECT_TRUE(r.passed());
    fs::remove_all(d);
}

TEST(Check, CliExitCodesAndJson) {
    const fs::path d = fresh_dir("cli");
    write(d / "inside.json", device_report(gpt2_plan(1), 0.002, 0.05));
    auto res = test::run_preflight("validate --check '" + d.string() + "' --no-report-files");
    EXPECT_EQ(res.exit_code, 0) << res.err;
    EXPECT_NE(res.out.find("PASS"), std::string::npos);
    write(d / "step.json", device_report(gpt2_plan(2), 0.0, 0.60));  // step time 60 % off: out
    const fs::path reports = fresh_dir("cli-reports");
    // Never inside the checked folder: refused before any work (exit 2, naming the flag).
    res = test::run_preflight("validate --check '" + d.string() + "' --report-dir '" + (d / "reports").string() + "'");
    EXPECT_EQ(res.exit_code, 2) << res.err;
    EXPECT_NE(res.err.find("--report-dir"), std::string::npos) << res.err;
    EXPECT_NE(res.err.find("inside the checked folder"), std::string::npos) << res.err;
    EXPECT_FALSE(fs::exists(d / "reports"));
    res = test::run_preflight("validate --check '" + d.string() + "' --format json --report-dir '" + reports.string() +
                              "' --gpu h100-sxm-80gb");
    EXPECT_EQ(res.exit_code, 1) << res.err;
    const json j = json::parse(res.out);
    for (const char* k : {"runs", "peak_error_p50", "peak_error_p95", "peak_error_max", "step_time_error_p50",
                          "step_time_error_p95", "mfu_error_p50", "category_errors", "sources"})
        EXPECT_TRUE(j.contains(k)) << k;
    EXPECT_FALSE(j.at("passed").get<bool>());
    EXPECT_EQ(j.at("out_of_tolerance").get<int>(), 1);
    // The summary records the call that made it: version, arguments as given, environment.
    const json& call = j.at("invocation");
    EXPECT_EQ(call.at("preflight_version").get<std::string>().empty(), false);
    EXPECT_EQ(call.at("arguments"), json({"validate", "--check", d.string(), "--gpu", "h100-sxm-80gb", "--report-dir",
                                          reports.string(), "--format", "json"}));
    EXPECT_TRUE(call.at("environment").contains("PREFLIGHT_DATA_DIR"));
    EXPECT_EQ(call.at("environment").at("date_utc").get<std::string>().size(), 20u);  // 2026-11-29T00:00:00Z
    // A switch is recorded by its name alone.
    const auto flagged = test::run_preflight("validate --check '" + d.string() + "' --format json --no-report-files");
    EXPECT_EQ(json::parse(flagged.out).at("invocation").at("arguments"),
              json({"validate", "--check", d.string(), "--no-report-files", "--format", "json"}));
    EXPECT_TRUE(fs::exists(reports / "validation-report.md"));
    EXPECT_TRUE(fs::exists(reports / "validation-plot.svg"));
    // By default the reports go to the build folder, never into the checked folder.
    EXPECT_EQ(test::run_preflight("validate --check '" + d.string() + "'").exit_code, 1);
    EXPECT_FALSE(fs::exists(d / "validation-report.md"));
    EXPECT_FALSE(fs::exists(d / "validation-plot.svg"));
    EXPECT_EQ(test::run_preflight("validate --check /nonexistent/folder").exit_code, 2);
    const fs::path empty = fresh_dir("empty");
    EXPECT_EQ(test::run_preflight("validate --check '" + empty.string() + "'").exit_code, 2);
    EXPECT_EQ(test::run_preflight("validate").exit_code, 2);
    fs::remove_all(d);
    fs::remove_all(empty);
}

TEST(Check, MatrixRunNeedsAGpuBuildAndSpawnsNothingWithout) {
    const fs::path d = fresh_dir("matrix");
    // Hide every GPU from a CUDA build too (the child inherits the environment).
    ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
    const auto res = test::run_preflight("validate --matrix smoke --out '" + (d / "out").string() + "'");
    ::unsetenv("CUDA_VISIBLE_DEVICES");
    EXPECT_EQ(res.exit_code, 3) << res.err;
    EXPECT_FALSE(fs::exists(d / "out"));  // nothing written or spawned before the GPU check
    EXPECT_EQ(test::run_preflight("validate --matrix no-such-matrix --out '" + d.string() + "'").exit_code, 2);
    fs::remove_all(d);
}

TEST(Check, PytorchReportsArePredictedWithThePytorchProfileAndSummarizedApart) {
    const fs::path d = fresh_dir("torch");
    write(d / "own.json", device_report(gpt2_plan(1), 0.0, 0.0));
    const ModelConfig m = test::catalog_model("gpt2");
    const GpuSpec g = test::catalog_gpu("h100-sxm-80gb");
    MemoryOptions mo;
    mo.profile = pytorch_profile();
    const MemoryReport pr = evaluate_memory(m, g, gpt2_plan(2), mo);
    const std::int64_t allocated = pr.peak_bytes - pr.at_peak.overhead;
    json t = {{"schema_version", 1},
              {"command", "run"},
              {"source", "pytorch"},
              {"mode", "device"},
              {"status", "ok"},
              {"model", {{"name", "gpt2"}}},
              {"gpu", {{"name", "h100-sxm-80gb"}}},
              {"plan", {{"seq", 512}, {"mbs", 2}, {"grad_acc", 1}, {"precision", "bf16-mixed"}}},
              {"measured", {{"tracked_peak_bytes", allocated + allocated / 50}, {"max_memory_reserved_bytes", allocated * 11 / 10}}},
              {"predicted", {{"profile", "pytorch"}}}};
    // An ok device run measures its step: here the pytorch profile's own prediction (within tolerance).
    const Plan resolved = resolve_defaults(gpt2_plan(2), m);
    t["measured"]["step_time_s"] =
        estimate_throughput(m, g, resolved, throughput_options_for(pytorch_profile(), m, resolved, {})).step_time_s;
    write(d / "torch.json", t);
    const CheckResult r = check_directory(d, options());
    ASSERT_EQ(r.sources.count("pytorch"), 1u);
    ASSERT_EQ(r.sources.count(kSourceRuntime), 1u);
    EXPECT_NEAR(r.sources.at("pytorch").peak.p50, 0.02, 1e-6);  // 2 % over, within the 10 % default
    EXPECT_NEAR(r.sources.at(kSourceRuntime).peak.max, 0.0, 1e-9);
    EXPECT_TRUE(r.passed());
    // The PyTorch prediction differs from the runtime profile's (autocast copies, fp32 loss buffers).
    const Comparison* c = nullptr;
    for (const auto& run : r.runs)
        if (run.source == "pytorch") c = run.find("peak_bytes");
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(static_cast<std::int64_t>(c->predicted), allocated);
    fs::remove_all(d);
}

TEST(Check, FailedRunsOomIsAMissOnlyWhenPredictedToFit) {
    const fs::path d = fresh_dir("oom");
    json fits = device_report(gpt2_plan(1), 0, 0);
    fits["status"] = "allocation-failed";
    write(d / "oom-but-fits.json", fits);
    json crashed = {{"schema_version", 1}, {"command", "run"}, {"mode", "device"}, {"status", "crashed"},
                    {"message", "killed by signal 9"}, {"model", {{"name", "gpt2"}}}, {"gpu", {{"name", "h100-sxm-80gb"}}},
                    {"plan", {{"seq", 512}}}, {"measured", json::object()}};
    write(d / "crashed.json", crashed);
    CheckResult r = check_directory(d, options());
    EXPECT_EQ(r.all.failed, 2);
    EXPECT_EQ(r.all.out_of_tolerance, 1);  // the OOM predicted to fit; the crash is listed, not judged
    fs::remove(d / "oom-but-fits.json");
    Plan huge;
    huge.seq = 1024;
    huge.mbs = 512;
    json big = device_report(huge, 0, 0);
    big["status"] = "allocation-failed";
    write(d / "oom-predicted.json", big);
    r = check_directory(d, options());
    // The crashed run could not be compared: the check fails on it (it used to pass).
    EXPECT_FALSE(r.passed());
    EXPECT_EQ(r.all.not_compared, 1);
    fs::remove(d / "crashed.json");
    r = check_directory(d, options());
    EXPECT_TRUE(r.passed());
    fs::remove_all(d);
}

TEST(Check, RecordedRunsInTheRepositoryPass) {
    const CheckResult r = check_directory(test::data_dir() / "measurements", options());
    EXPECT_GE(r.all.dry_runs, 3);
    EXPECT_GT(r.all.compared, r.all.dry_runs);  // device runs are recorded beside the dry runs
    EXPECT_TRUE(r.passed());
}

// The CI gate on the first GPU session (issue: the runtime proves the planner on a real GPU):
// the driver-measured peak (cudaMemGetInfo over the pre-context baseline) against today's
// prediction, P50 <= 2 % and P95 <= 5 % for the runtime's runs, P50 <= 5 % for PyTorch's.
TEST(Check, H100DeviceRunsMeetThePeakMemoryGates) {
    const fs::path dir = test::data_dir() / "measurements" / "h100-sxm-80gb";
    const CheckResult r = check_directory(dir, options());
    const SourceSummary& ours = r.sources.at(kSourceRuntime);
    const SourceSummary& torch = r.sources.at(kSourcePytorch);
    EXPECT_GE(ours.compared, 12);  // the issue's >= 12 configurations of the runtime
    EXPECT_GE(torch.compared, 6);  // and >= 6 PyTorch runs of the same plans
    EXPECT_EQ(ours.dry_runs, 0);
    EXPECT_LE(ours.peak.p50, 0.02);
    EXPECT_LE(ours.peak.p95, 0.05);
    EXPECT_LE(torch.peak.p50, 0.05);
    EXPECT_TRUE(r.passed());
}

// The recorded GPU runs keep their driver figures in one book, cudaMemGetInfo's: a runtime
// report's NVML peak (NVML used over NVML's pre-context figure) equals its cudaMemGetInfo peak
// (used over the baseline in cudaMemGetInfo's book), because both are taken at the same samples
// and NVML's extra, the driver's reserved memory, is in its baseline too. A report with the old
// mix (NVML baseline, cudaMemGetInfo samples) differs by that reserve (503,316,480 B on the
// H100). And the catalog's capacity for these GPUs is what CUDA handed out on them.
TEST(Check, RecordedGpuRunsKeepTheDriverFiguresInOneBookAndTheSpecsTheirCapacity) {
    int reports = 0;
    for (const char* gpu : {"h100-sxm-80gb", "h200-sxm-141gb"}) {
        const std::int64_t capacity = test::catalog_gpu(gpu).memory_bytes;
        for (const auto& e : fs::recursive_directory_iterator(test::data_dir() / "measurements" / gpu)) {
            if (!e.is_regular_file() || e.path().extension() != ".json") continue;
            std::ifstream in(e.path());
            const json r = json::parse(in);
            if (!r.contains("measured") || !r.contains("device") || !r.at("device").is_object()) continue;
            const json& d = r.at("measured").value("driver", json::object());
            ++reports;
            EXPECT_EQ(r.at("device").at("memory_bytes").get<std::int64_t>(), capacity) << e.path();
            if (d.contains("nvml_used_peak_bytes") && d.contains("used_peak_bytes"))
                EXPECT_EQ(d.at("nvml_used_peak_bytes").get<std::int64_t>(), d.at("used_peak_bytes").get<std::int64_t>())
                    << e.path();
        }
    }
    EXPECT_GE(reports, 50);
}

// The H200 takes the H100's fitted constants (its spec's calibration_from); its own runs, which
// no fit has seen, meet the same peak-memory gates. Both GPUs measured a 548,995,072 B context
// in cudaMemGetInfo's book (validation/gpu_session/rebase_driver_books.py explains the book).
TEST(Check, H200DeviceRunsMeetThePeakMemoryGatesWithTheH100Constants) {
    const fs::path dir = test::data_dir() / "measurements" / "h200-sxm-141gb";
    const CheckResult r = check_directory(dir, options());
    const SourceSummary& ours = r.sources.at(kSourceRuntime);
    const SourceSummary& torch = r.sources.at(kSourcePytorch);
    EXPECT_GE(ours.compared, 12);
    EXPECT_GE(torch.compared, 6);
    EXPECT_EQ(ours.dry_runs, 0);
    EXPECT_LE(ours.peak.p50, 0.02);
    EXPECT_LE(ours.peak.p95, 0.05);
    EXPECT_LE(torch.peak.p50, 0.05);
    EXPECT_TRUE(r.passed());
}
