// GPU specs that take their fitted constants from another GPU ("calibration_from"): what is
// transferred, what stays the spec's own, and the bad inputs the loader refuses.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "catalog_fixture.hpp"
#include "preflight/planner/catalog.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/throughput.hpp"

using namespace preflight;
using nlohmann::json;

namespace {

json raw_spec(const std::string& name) {
    return read_json_file(test::data_dir() / "gpus" / (name + ".json"), "--gpu");
}

// A throw-away catalog folder holding `specs` (name -> JSON) under gpus/.
std::filesystem::path write_catalog(const std::string& tag, const std::map<std::string, json>& specs) {
    const auto dir = std::filesystem::temp_directory_path() / ("preflight_transfer_" + tag);
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir / "gpus");
    for (const auto& [name, j] : specs) std::ofstream(dir / "gpus" / (name + ".json")) << j.dump(2);
    return dir;
}

// The subject of the InputError loading `name` from `dir` throws ("" when none is thrown).
std::string load_error(const std::string& name, const std::filesystem::path& dir) {
    try {
        (void)load_gpu(name, dir);
    } catch (const InputError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(CalibrationTransfer, H200TakesTheH100SxmConstantsAndKeepsItsOwnMemory) {
    const GpuSpec h100 = test::catalog_gpu("h100-sxm-80gb");
    const GpuSpec h200 = test::catalog_gpu("h200-sxm-141gb");
    const json fitted = raw_spec("h100-sxm-80gb")["efficiency"];
    EXPECT_DOUBLE_EQ(h200.efficiency.gemm_max_fraction_of_peak, fitted["gemm_max_fraction_of_peak"].get<double>());
    EXPECT_DOUBLE_EQ(h200.efficiency.gemm_half_efficiency_dim, fitted["gemm_half_efficiency_dim"].get<double>());
    EXPECT_DOUBLE_EQ(h200.efficiency.layer_launch_overhead_s, fitted["layer_launch_overhead_s"].get<double>());
    EXPECT_DOUBLE_EQ(h200.efficiency.collective_bus_efficiency, fitted["collective_bus_efficiency"].get<double>());
    EXPECT_EQ(h200.efficiency.provenance.rfind("transferred from h100-sxm-80gb (same GH100 compute", 0), 0u);
    EXPECT_NE(h200.efficiency.provenance.find("; there: " + h100.efficiency.provenance), std::string::npos);
    // The runtime block comes along: overhead and pool slack measured on the H100 SXM.
    ASSERT_TRUE(h200.runtime.has_value());
    EXPECT_EQ(h200.runtime->overhead_bytes, raw_spec("h100-sxm-80gb")["runtime"]["overhead_bytes"].get<std::int64_t>());
    EXPECT_DOUBLE_EQ(h200.runtime->full_recompute_pool_slack_fraction, h100.runtime->full_recompute_pool_slack_fraction);
    // What differs stays the H200's own: what CUDA hands out (cudaMemGetInfo's total, measured
    // on an H200 on 2026-11-25) and the datasheet's 4.8 TB/s of HBM3e.
    EXPECT_EQ(h200.memory_bytes, 150'109'880'320);
    EXPECT_DOUBLE_EQ(h200.hbm_bandwidth_bytes_per_s, 4.8e12);
    EXPECT_FALSE(h200.calibration_from.has_value());  // applied by load_gpu
}

TEST(CalibrationTransfer, H100PcieScalesTheNamedFractionsOnly) {
    const GpuSpec sxm = test::catalog_gpu("h100-sxm-80gb");
    const GpuSpec pcie = test::catalog_gpu("h100-pcie-80gb");
    // The spec's factors: 0.65/0.70 (GEMM), 0.38/0.40 (attention, fused too), 0.75/0.80 (collectives).
    EXPECT_NEAR(pcie.efficiency.gemm_max_fraction_of_peak, sxm.efficiency.gemm_max_fraction_of_peak * 0.9286, 1e-12);
    EXPECT_NEAR(pcie.efficiency.attention_fraction_of_peak, sxm.efficiency.attention_fraction_of_peak * 0.95, 1e-12);
    EXPECT_NEAR(pcie.efficiency.fused_attention_fraction_of_peak,
                sxm.efficiency.fused_attention_fraction_of_peak * 0.95, 1e-12);
    EXPECT_NEAR(pcie.efficiency.collective_bus_efficiency, sxm.efficiency.collective_bus_efficiency * 0.9375, 1e-12);
    EXPECT_DOUBLE_EQ(pcie.efficiency.gemm_half_efficiency_dim, sxm.efficiency.gemm_half_efficiency_dim);
    EXPECT_DOUBLE_EQ(pcie.efficiency.memory_bound_fraction_of_hbm, sxm.efficiency.memory_bound_fraction_of_hbm);
    ASSERT_TRUE(pcie.runtime.has_value());
    EXPECT_NEAR(pcie.runtime->efficiency.gemm_max_fraction_of_peak,
                sxm.runtime->efficiency.gemm_max_fraction_of_peak * 0.9286, 1e-12);
    // fp32 fractions scale like the 16-bit ones where a block has them (both blocks' fp32 GEMM
    // figure, the SXM spec's 0.81 in each); 0 means "the 16-bit figure" and stays 0 (the generic
    // block's fp32 attention).
    EXPECT_NEAR(pcie.runtime->efficiency.fp32_gemm_max_fraction_of_peak,
                sxm.runtime->efficiency.fp32_gemm_max_fraction_of_peak * 0.9286, 1e-12);
    EXPECT_NEAR(pcie.efficiency.fp32_gemm_max_fraction_of_peak, 0.81 * 0.9286, 1e-12);
    EXPECT_DOUBLE_EQ(pcie.efficiency.fp32_attention_fraction_of_peak, 0.0);
}

TEST(CalibrationTransfer, A100_80GbIsTheA100_40GbFit) {
    const GpuSpec a40 = test::catalog_gpu("a100-sxm-40gb");
    const GpuSpec a80 = test::catalog_gpu("a100-sxm-80gb");
    EXPECT_DOUBLE_EQ(a80.efficiency.gemm_max_fraction_of_peak, a40.efficiency.gemm_max_fraction_of_peak);
    EXPECT_DOUBLE_EQ(a80.efficiency.attention_fraction_of_peak, a40.efficiency.attention_fraction_of_peak);
    EXPECT_DOUBLE_EQ(a80.efficiency.step_overhead_s, a40.efficiency.step_overhead_s);
    EXPECT_DOUBLE_EQ(a80.hbm_bandwidth_bytes_per_s, 2.039e12);  // its own
    EXPECT_FALSE(a80.runtime.has_value());                      // the 40 GB spec has none to give
}

// Same compute, same constants: the H200 is faster than the H100 SXM only where HBM bandwidth
// (4.8 vs 3.35 TB/s) counts, so a step takes between 3.35/4.8 = 0.698 of the time (all of it
// memory-bound) and the same time. The PCIe card's bf16 peak is 756.5/989.4 = 0.765 of the
// SXM's and none of its rates is higher, so a step dominated by GEMMs (llama-3-8b at 4,096
// tokens: about 12 ms of GEMMs a layer against the 4.6 ms host floor both share) takes at
// least 1/0.765 = 1.31x as long, less what the shared host time pulls toward 1: above 1.2x.
TEST(CalibrationTransfer, SameComputeGivesTheSameSpeedUpToBandwidth) {
    const ModelConfig m = test::catalog_model("llama-3-8b");
    const Plan p = test::llama3_8b_one_node_plan();
    const double sxm = estimate_throughput(m, test::catalog_gpu("h100-sxm-80gb"), p).step_time_s;
    const double h200 = estimate_throughput(m, test::catalog_gpu("h200-sxm-141gb"), p).step_time_s;
    const double pcie = estimate_throughput(m, test::catalog_gpu("h100-pcie-80gb"), p).step_time_s;
    EXPECT_LE(h200, sxm);
    EXPECT_GT(h200, sxm * 3.35 / 4.8);
    EXPECT_GT(pcie, 1.2 * sxm);
}

TEST(CalibrationTransfer, BadTransfersAreRefusedNamingTheKey) {
    json a = raw_spec("h200-sxm-141gb"), b = raw_spec("h200-sxm-141gb");
    a["calibration_from"]["gpu"] = "b";
    b["calibration_from"]["gpu"] = "a";
    const auto cycle = write_catalog("cycle", {{"a", a}, {"b", b}});
    EXPECT_NE(load_error("a", cycle).find("calibration_from.gpu: chain of transfers longer than 4"), std::string::npos);

    json bad_key = raw_spec("h100-pcie-80gb");
    bad_key["calibration_from"]["efficiency_scale"]["step_overhead_s"] = 2.0;
    json too_far = raw_spec("h100-pcie-80gb");
    too_far["calibration_from"]["efficiency_scale"]["gemm_max_fraction_of_peak"] = 3.0;  // 0.46 x 3 > 1
    json own = raw_spec("h100-pcie-80gb");
    own["efficiency"] = {{"gemm_max_fraction_of_peak", 0.5}};
    json no_why = raw_spec("h200-sxm-141gb");
    no_why["calibration_from"].erase("why");
    json path = raw_spec("h200-sxm-141gb");
    path["calibration_from"]["gpu"] = "../gpus/h100-sxm-80gb.json";
    const auto dir = write_catalog("bad", {{"h100-sxm-80gb", raw_spec("h100-sxm-80gb")},
                                           {"bad_key", bad_key},
                                           {"too_far", too_far},
                                           {"own", own},
                                           {"no_why", no_why},
                                           {"path", path}});
    EXPECT_NE(load_error("bad_key", dir).find("calibration_from.efficiency_scale.step_overhead_s: not a scalable"),
              std::string::npos);
    EXPECT_NE(load_error("too_far", dir).find("outside (0, 1]"), std::string::npos);
    EXPECT_NE(load_error("own", dir).find("this spec has its own"), std::string::npos);
    EXPECT_NE(load_error("no_why", dir).find("calibration_from.why"), std::string::npos);
    EXPECT_NE(load_error("path", dir).find("must be a catalog name"), std::string::npos);
    // A spec with its own "efficiency" and a plain transfer keeps its own block.
    json own_plain = raw_spec("h200-sxm-141gb");
    own_plain["efficiency"] = {{"gemm_max_fraction_of_peak", 0.5}};
    const auto dir2 = write_catalog("own_plain", {{"h100-sxm-80gb", raw_spec("h100-sxm-80gb")}, {"x", own_plain}});
    const GpuSpec x = load_gpu("x", dir2);
    EXPECT_DOUBLE_EQ(x.efficiency.gemm_max_fraction_of_peak, 0.5);
    EXPECT_TRUE(x.runtime.has_value());  // the block it lacks still comes from the H100 SXM
}

// `preflight calibrate --write-spec` on a transferred spec: the block it fits becomes the
// spec's own, and the transfer keeps only what still applies.
TEST(CalibrationTransfer, AFitSupersedesTheTransferBlockByBlock) {
    json pcie = raw_spec("h100-pcie-80gb");
    pcie["runtime"] = raw_spec("h100-sxm-80gb")["runtime"];  // a runtime fit of its own
    drop_superseded_transfer(pcie);
    ASSERT_TRUE(pcie.contains("calibration_from"));  // "efficiency" still comes from the SXM, scaled
    EXPECT_TRUE(pcie["calibration_from"].contains("efficiency_scale"));
    pcie["efficiency"] = {{"gemm_max_fraction_of_peak", 0.5}};  // and now a step-time fit
    drop_superseded_transfer(pcie);
    EXPECT_FALSE(pcie.contains("calibration_from"));
    EXPECT_DOUBLE_EQ(gpu_from_json(pcie, "pcie").efficiency.gemm_max_fraction_of_peak, 0.5);

    json h200 = raw_spec("h200-sxm-141gb");
    h200["efficiency"] = {{"gemm_max_fraction_of_peak", 0.6}};
    drop_superseded_transfer(h200);  // no scale to drop; the runtime block is still transferred
    ASSERT_TRUE(h200.contains("calibration_from"));
    EXPECT_EQ(h200["calibration_from"]["gpu"], "h100-sxm-80gb");
}

// efficiency_to_json is the loader's inverse: what calibrate writes loads back to the same
// constants, figures whose 0 means "the general one" are left out, and the loader names the
// accepted range of a value outside it.
TEST(GpuSpecEfficiency, WritesWhatTheLoaderReadsAndRefusesValuesOutOfRange) {
    const GpuSpec h100 = load_gpu("h100-sxm-80gb", test::data_dir());
    const json written = efficiency_to_json(h100.efficiency);
    EXPECT_DOUBLE_EQ(written.at("fused_attention_fraction_of_peak").get<double>(), 0.40);  // the spec's figure
    EXPECT_DOUBLE_EQ(written.at("fp32_gemm_max_fraction_of_peak").get<double>(), 0.81);  // from its runtime fit
    EXPECT_FALSE(written.contains("fp32_attention_fraction_of_peak"));                   // 0 = the 16-bit figure
    EXPECT_FALSE(written.contains("provenance"));
    json spec = raw_spec("h100-sxm-80gb");
    spec["efficiency"] = written;
    const GpuSpec reread = gpu_from_json(spec, "h100-sxm-80gb");
    EXPECT_EQ(efficiency_to_json(reread.efficiency), written);
    EXPECT_DOUBLE_EQ(reread.efficiency.microbatch_sync_s, h100.efficiency.microbatch_sync_s);

    auto error_for = [&](const char* key, double v) {
        json bad = raw_spec("h100-sxm-80gb");
        bad["efficiency"][key] = v;
        try {
            (void)gpu_from_json(bad, "h100-sxm-80gb");
        } catch (const InputError& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    EXPECT_NE(error_for("gemm_max_fraction_of_peak", 1.5).find("efficiency.gemm_max_fraction_of_peak"), std::string::npos);
    EXPECT_NE(error_for("gemm_max_fraction_of_peak", 1.5).find("in [0.01, 1]"), std::string::npos);
    EXPECT_NE(error_for("gemm_max_fraction_of_peak", 0).find("in [0.01, 1]"), std::string::npos);
    EXPECT_NE(error_for("gemm_max_fraction_of_peak", 0.009).find("in [0.01, 1]"), std::string::npos);
    EXPECT_EQ(error_for("gemm_max_fraction_of_peak", 0.01), "");
    EXPECT_NE(error_for("layer_launch_overhead_s", -0.001).find("[0, 1]"), std::string::npos);
    EXPECT_EQ(error_for("layer_launch_overhead_s", 0), "");  // zero allowed: no host floor
}
