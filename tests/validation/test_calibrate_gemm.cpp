// The step model's GEMM curve against GEMMs timed one by one (`preflight run --op-times`):
// one product's time by hand, the two constants recovered from shapes generated with known ones,
// and the op times read from run reports (a malformed entry names its key).
#include <cmath>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <gtest/gtest.h>

#include "catalog_fixture.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/report.hpp"
#include "preflight/planner/throughput.hpp"
#include "preflight/validation/calibrate.hpp"
#include "preflight/validation/matrix.hpp"

using namespace preflight;
using namespace preflight::validation;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

TEST(GemmCurve, OneProductByHand) {
    GpuSpec g = test::catalog_gpu("h100-sxm-80gb");
    g.efficiency.gemm_max_fraction_of_peak = 0.8;
    g.efficiency.gemm_half_efficiency_dim = 400;
    // 2 x 4096^3 FLOPs at 0.8 x 4096 / 4496 of the 989.4 TFLOP/s bf16 peak: 190.60 us; its bytes,
    // 3 x 4096^2 x 2 B at 3.35 TB/s, take 30 us, so the FLOPs set it.
    EXPECT_NEAR(gemm_time_s(g, Precision::bf16_mixed, 4096, 4096, 4096), 1.905962e-4, 1e-9);
    EXPECT_NEAR(gemm_time_s(g, Precision::bf16_mixed, 4096, 4096, 4096, 3), 3 * 1.905962e-4, 3e-9);
}

// Runs of two families whose GEMMs took exactly what the curve with `max_fraction`, `half_dim`
// predicts, over shapes whose smallest side runs from 64 to 8192.
std::vector<CalibrationRun> timed_runs(double max_fraction, double half_dim) {
    GpuSpec truth = test::catalog_gpu("h100-sxm-80gb");
    truth.efficiency.gemm_max_fraction_of_peak = max_fraction;
    truth.efficiency.gemm_half_efficiency_dim = half_dim;
    std::vector<CalibrationRun> runs;
    const ModelConfig families[] = {test::gpt_model(768, 2, 12, 50304, 1024), test::llama_model(2048, 2, 32, 8, 8192, 128256, 8192)};
    int i = 0;
    for (const ModelConfig& m : families) {
        CalibrationRun r;
        r.id = "run" + std::to_string(i++);
        r.model = m;
        r.plan.precision = Precision::bf16_mixed;
        r.step_time_s = 1;
        for (double d : {64.0, 256.0, 1024.0, 4096.0, 8192.0}) {
            const double m_rows = 8192 + 1024 * i, n_cols = 3 * d;
            r.gemms.push_back({false, m_rows, n_cols, d, 1, 4, 4 * gemm_time_s(truth, Precision::bf16_mixed, m_rows, n_cols, d)});
        }
        runs.push_back(r);
    }
    return runs;
}

TEST(GemmCurve, FitRecoversTheConstantsTheShapesWereTimedWith) {
    const GpuSpec start = test::catalog_gpu("h100-sxm-80gb");
    const std::vector<GemmCurveFit> fits = fit_gemm_curves(timed_runs(0.62, 850), start);
    ASSERT_EQ(fits.size(), 1u);  // 16-bit only: no fp32 run
    const GemmCurveFit& f = fits[0];
    EXPECT_EQ(f.kernels, "16-bit");
    EXPECT_EQ(f.runs, 2);
    EXPECT_EQ(f.shapes, 10);
    EXPECT_DOUBLE_EQ(f.max_fraction_before, start.efficiency.gemm_max_fraction_of_peak);
    EXPECT_NEAR(f.max_fraction_after, 0.62, 1e-3);
    EXPECT_NEAR(f.half_dim_after, 850, 1.0);
    EXPECT_GT(f.before.p50, 0.01);
    EXPECT_LT(f.after.p95, 1e-3);
    EXPECT_EQ(f.by_family.n, 10);  // each family's five shapes by a fit on the other's five
    EXPECT_LT(f.by_family.p95, 1e-3);
}

TEST(GemmCurve, Fp8ProductsAndClassesWithFewerThanThreeShapesAreNotFitted) {
    std::vector<CalibrationRun> runs = timed_runs(0.62, 850);
    for (GemmSample& g : runs[0].gemms) g.fp8 = true;
    for (GemmSample& g : runs[1].gemms) g.fp8 = true;
    EXPECT_TRUE(fit_gemm_curves(runs, test::catalog_gpu("h100-sxm-80gb")).empty());
}

TEST(GemmCurve, OpTimesAreReadFromReportsAndAMalformedEntryNamesItsKey) {
    const fs::path d = fs::temp_directory_path() / ("preflight-gemm-curve-" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    Plan p;
    p.seq = 1024;
    p.mbs = 4;
    json gemms = json::array({{{"kind", "linear_fwd"}, {"m", 4096}, {"n", 2304}, {"k", 768}, {"batch", 1}, {"count", 12},
                               {"time_s", 1.2e-3}},
                              {{"kind", "fp8 linear_fwd"}, {"m", 4096}, {"n", 768}, {"k", 768}, {"batch", 1}, {"count", 12},
                               {"time_s", 0.4e-3}},
                              {{"kind", "linear_bwd_weight+bias_grad"}, {"m", 768}, {"n", 768}, {"k", 4096}, {"batch", 1},
                               {"count", 12}, {"time_s", 5e-3}}});
    auto report = [&](const json& g) {
        return json{{"schema_version", 1}, {"command", "run"}, {"mode", "device"}, {"status", "ok"},
                    {"model", {{"name", "gpt2"}}}, {"gpu", {{"name", "h100-sxm-80gb"}}}, {"plan", plan_to_json(p)},
                    {"measured", {{"step_time_s", 0.05}, {"tracked_peak_bytes", 1 << 30}, {"overhead_bytes", 1 << 29},
                                  {"op_times", {{"ops", 3}, {"total_s", 0.05}, {"by_kind", json::array()}, {"gemms", g}}}}}};
    };
    std::ofstream(d / "a.json") << report(gemms).dump();
    std::ofstream(d / "b.json") << report(json::array()).dump();
    const auto runs = load_calibration_runs(d, "h100-sxm-80gb", kSourceRuntime, test::data_dir());
    ASSERT_EQ(runs.size(), 2u);
    ASSERT_EQ(runs[0].gemms.size(), 3u);
    EXPECT_FALSE(runs[0].gemms[0].fp8);
    EXPECT_TRUE(runs[0].gemms[1].fp8);
    EXPECT_FALSE(runs[0].gemms[0].with_other_kernel);
    EXPECT_TRUE(runs[0].gemms[2].with_other_kernel);  // its op's time holds the bias's column sum too
    EXPECT_DOUBLE_EQ(runs[0].gemms[0].n, 2304);
    EXPECT_EQ(runs[0].gemms[0].count, 12);
    EXPECT_DOUBLE_EQ(runs[0].gemms[0].time_s, 1.2e-3);
    const CalibrationResult r = calibrate(runs, test::catalog_gpu("h100-sxm-80gb"), CalibrationTarget::runtime);
    EXPECT_EQ(r.runs_with_op_times, 1);
    EXPECT_TRUE(r.gemm_curves.empty());  // one 16-bit GEMM-only shape: too few to fit
    EXPECT_NE(calibration_table(r).find("fewer than 3 shapes"), std::string::npos) << calibration_table(r);
    // The same shape timed in more runs is still one point of the curve (was: one "shape" a run).
    for (const char* name : {"c.json", "e.json", "f.json"}) std::ofstream(d / name) << report(gemms).dump();
    const auto repeated = load_calibration_runs(d, "h100-sxm-80gb", kSourceRuntime, test::data_dir());
    EXPECT_TRUE(calibrate(repeated, test::catalog_gpu("h100-sxm-80gb"), CalibrationTarget::runtime).gemm_curves.empty());
    for (const char* name : {"c.json", "e.json", "f.json"}) fs::remove(d / name);

    gemms[0]["m"] = -3;
    std::ofstream(d / "a.json") << report(gemms).dump();
    try {
        (void)load_calibration_runs(d, "h100-sxm-80gb", kSourceRuntime, test::data_dir());
        ADD_FAILURE() << "expected InputError";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("measured.op_times.gemms[0].m"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("a.json"), std::string::npos) << e.what();
    }
    fs::remove_all(d);
}

}  // namespace
