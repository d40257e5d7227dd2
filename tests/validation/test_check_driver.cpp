// `validate --check` on GPU runs gates "peak_bytes" on the driver's figure (device used over
// the pre-context baseline) against the whole predicted peak, and reports the tracked tensor
// peak beside it as "tracked_peak_bytes".
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "catalog_fixture.hpp"
#include "preflight/runtime/runtime.hpp"
#include "preflight/validation/check.hpp"
#include "preflight/validation/matrix.hpp"
#include "preflight/validation/spec_bounds.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/throughput.hpp"

using namespace preflight;
using namespace preflight::validation;
using nlohmann::json;

namespace {

struct Device {
    json report;
    std::int64_t predicted_peak = 0, predicted_tracked = 0;
};

// A dry-run report of gpt2 (seq 512, mbs 2) made into a device run whose driver figure is
// off the whole predicted peak by `driver_error` and whose tracked peak is exact.
Device device_run(double driver_error) {
    const ModelConfig m = test::catalog_model("gpt2");
    const GpuSpec g = test::catalog_gpu("h100-sxm-80gb");
    Plan p;
    p.seq = 512;
    p.mbs = 2;
    runtime::RunOptions o;
    o.timeline = false;
    const runtime::RunReport r = runtime::dry_run_report(m, g, p, o);
    Device d;
    d.report = runtime::run_report_to_json(r);
    d.report["mode"] = "device";
    d.predicted_peak = r.predicted.memory.peak_bytes;
    d.predicted_tracked = r.predicted.tracked_peak_bytes;
    d.report["measured"]["device_used_peak_bytes"] =
        static_cast<std::int64_t>(std::llround(static_cast<double>(d.predicted_peak) * (1 + driver_error)));
    d.report["measured"]["tracked_peak_bytes"] = d.predicted_tracked;
    d.report["measured"]["step_time_s"] = *r.predicted.step_time_s;  // an ok device run measures its step
    return d;
}

CheckOptions options() {
    CheckOptions o;
    o.data_dir = test::data_dir();
    return o;
}

TEST(CheckDriver, GpuRunsGateOnTheDriversFigure) {
    const Device d = device_run(0.03);
    const RunCheck rc =
        check_report(d.report, "r", default_tolerances().at(kSourceRuntime), options());
    const Comparison* pk = rc.find("peak_bytes");
    ASSERT_NE(pk, nullptr);
    EXPECT_DOUBLE_EQ(pk->predicted, static_cast<double>(d.predicted_peak));  // incl. the modelled overhead
    EXPECT_NEAR(pk->relative_error, 0.03, 1e-9);
    EXPECT_FALSE(pk->within);  // runtime tolerance: 1 % + 1 MiB
    EXPECT_TRUE(rc.out_of_tolerance);
    const Comparison* tr = rc.find("tracked_peak_bytes");
    ASSERT_NE(tr, nullptr);
    EXPECT_DOUBLE_EQ(tr->measured, static_cast<double>(d.predicted_tracked));
}

TEST(CheckDriver, WithinToleranceWhenTheDriverAgrees) {
    const Device d = device_run(0.004);
    const RunCheck rc = check_report(d.report, "r", default_tolerances().at(kSourceRuntime), options());
    ASSERT_NE(rc.find("peak_bytes"), nullptr);
    EXPECT_TRUE(rc.find("peak_bytes")->within);
}

// Without NVML the runtime's baseline is taken after its CUDA context, so its driver peak leaves
// the context out (548,995,072 B on the H200): such a peak is not compared, the tracked one is,
// and the note says why.
TEST(CheckDriver, ADriverPeakWithoutTheContextIsNotCompared) {
    Device d = device_run(-0.02);
    d.report["measured"]["driver"]["baseline_source"] = "cudaMemGetInfo-after-context";
    const RunCheck rc = check_report(d.report, "r", default_tolerances().at(kSourceRuntime), options());
    const Comparison* pk = rc.find("peak_bytes");
    ASSERT_NE(pk, nullptr);
    EXPECT_DOUBLE_EQ(pk->measured, static_cast<double>(d.predicted_tracked));  // the tracked peak instead
    EXPECT_EQ(rc.find("tracked_peak_bytes"), nullptr);
    EXPECT_NE(rc.note.find("without the CUDA context"), std::string::npos) << rc.note;
}

// A folder's gate.json judges its device runs as a set: three runs 0.2 %, 0.4 % and 3 % off give
// P50 0.4 % and P95 2.74 % (linear between the two largest: 0.4 + 0.9 x 2.6). A gate of P50 <= 1 %
// and P95 <= 3 % over at least 3 runs passes; one of P95 <= 2 % fails, and so does one asking for
// 4 runs; a malformed gate is bad input naming the file and the key.
TEST(CheckDriver, AFolderGateJudgesItsRunsAsASet) {
    namespace fs = std::filesystem;
    const fs::path d = fs::temp_directory_path() / ("preflight-gate-" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d / "dp");
    int k = 0;
    for (double e : {0.002, 0.004, 0.03})
        std::ofstream(d / "dp" / ("r" + std::to_string(k++) + ".json")) << device_run(e).report.dump();
    CheckOptions o = options();
    SourceTolerances tol = default_tolerances();
    tol[kSourceRuntime]["peak_bytes"] = Tolerance{0, 0.05};  // every run within its own tolerance
    o.tolerances = tol;
    const auto with_gate = [&](const json& g) {
        std::ofstream(d / "dp" / "gate.json") << g.dump();
        return check_directory(d, o);
    };
    CheckResult r = with_gate({{"about", "test"}, {"peak_abs_error_p50_max", 0.01}, {"peak_abs_error_p95_max", 0.03},
                               {"compared_runs_min", 3}});
    ASSERT_EQ(r.gates.size(), 1u);
    EXPECT_EQ(r.gates[0].compared, 3);
    EXPECT_NEAR(r.gates[0].peak.p50, 0.004, 1e-9);
    EXPECT_NEAR(r.gates[0].peak.p95, 0.0274, 1e-9);
    EXPECT_TRUE(r.passed());
    EXPECT_NE(summary_table(r).find("GATE PASS"), std::string::npos);
    r = with_gate({{"peak_abs_error_p95_max", 0.02}});
    EXPECT_FALSE(r.passed());
    EXPECT_NE(summary_table(r).find("GATE FAIL"), std::string::npos) << summary_table(r);
    EXPECT_FALSE(summary_to_json(r).at("gates")[0].at("passed").get<bool>());
    r = with_gate({{"peak_abs_error_p50_max", 0.01}, {"compared_runs_min", 4}});
    ASSERT_EQ(r.gates[0].failures.size(), 1u);
    EXPECT_NE(r.gates[0].failures[0].find("fewer than compared_runs_min 4"), std::string::npos);
    EXPECT_FALSE(r.passed());
    for (const json& bad : {json{{"peak_abs_error_p50_max", 0.01}, {"peak_p50", 1}}, json{{"peak_abs_error_p50_max", -1}},
                            json{{"compared_runs_min", 3}}}) {
        try {
            with_gate(bad);
            ADD_FAILURE() << "accepted " << bad.dump();
        } catch (const InputError& e) {
            EXPECT_NE(std::string(e.what()).find("gate.json"), std::string::npos) << e.what();
        }
    }
    fs::remove_all(d);
}

TEST(CheckDriver, DryRunsKeepTheTrackedPeak) {
    Device d = device_run(0.5);
    d.report["mode"] = "dry-run";
    const RunCheck rc = check_report(d.report, "r", default_tolerances().at(kSourceRuntime), options());
    ASSERT_NE(rc.find("peak_bytes"), nullptr);
    EXPECT_DOUBLE_EQ(rc.find("peak_bytes")->predicted, static_cast<double>(d.predicted_tracked));
    EXPECT_EQ(rc.find("tracked_peak_bytes"), nullptr);
}

// A full-recompute run's prediction adds the pool's fitted slack (about one layer's activations)
// only when the report says its buffers came from the cudaMallocAsync pool: "allocator": "pool",
// or no allocator at all (every run recorded before the arena). An arena run keeps no slack.
TEST(CheckDriver, OnlyAPoolRunIsPredictedWithThePoolsSlack) {
    const ModelConfig m = test::catalog_model("llama-3.2-1b");
    const GpuSpec g = test::catalog_gpu("h100-sxm-80gb");
    ASSERT_TRUE(g.runtime.has_value());
    Plan p;
    p.seq = 1024;
    p.mbs = 2;
    p.recompute = Recompute::full;
    runtime::RunOptions o;
    o.timeline = false;
    json report = runtime::run_report_to_json(runtime::dry_run_report(m, g, p, o));
    report["mode"] = "device";
    report["measured"]["device_used_peak_bytes"] = report["predicted"]["peak_bytes"];
    Plan none = p;
    none.recompute = Recompute::none;
    const std::int64_t layer = runtime::predict(m, g, none, o).memory.activations_per_layer_bytes;
    const auto predicted_peak = [&](const json& r) {
        const RunCheck rc = check_report(r, "r", default_tolerances().at(kSourceRuntime), options());
        return rc.find("peak_bytes") ? rc.find("peak_bytes")->predicted : -1.0;
    };
    ASSERT_EQ(report["measured"]["allocator"], "arena");
    const double arena = predicted_peak(report);
    EXPECT_DOUBLE_EQ(arena, report["predicted"]["peak_bytes"].get<double>());
    report["measured"]["allocator"] = "pool";
    const double pool = predicted_peak(report);
    EXPECT_DOUBLE_EQ(pool - arena, std::round(g.runtime->full_recompute_pool_slack_fraction * static_cast<double>(layer)));
    report["measured"].erase("allocator");
    EXPECT_DOUBLE_EQ(predicted_peak(report), pool);
    EXPECT_TRUE(ran_pool_allocator(json::object()));
    EXPECT_FALSE(ran_pool_allocator(json{{"allocator", "arena"}}));
}

}  // namespace

namespace {

// Rank `rank` of a GPT-2 plan on an H100, walked by the dry run.
runtime::RunReport gpt2_rank_dry_run(const Plan& p, std::int64_t rank) {
    runtime::RunOptions o;
    o.timeline = false;
    o.rank = rank;
    return runtime::dry_run_report(test::catalog_model("gpt2"), test::catalog_gpu("h100-sxm-80gb"), p, o);
}

// The report as an emulated rank's device run whose driver saw the predicted peak plus NCCL's
// world-size-1 memory (`nccl_bytes`, recorded when > 0).
json as_emulated_device_run(const runtime::RunReport& r, std::int64_t nccl_bytes) {
    json j = runtime::run_report_to_json(r);
    j["mode"] = "device";
    j["parallel"]["backend"] = "emulated";
    if (nccl_bytes > 0) j["parallel"]["nccl_world1_bytes"] = nccl_bytes;
    j["measured"]["device_used_peak_bytes"] = r.predicted.memory.peak_bytes + nccl_bytes;
    return j;
}

// An emulated rank (rank 5 of 8, ZeRO-1): its driver figure holds a world-size-1 NCCL
// communicator's memory, set apart before the comparison, and its step (local collectives) is
// compared with the prediction less the predicted exposed communication.
TEST(CheckDriver, AnEmulatedRankSetsNcclAndCommunicationApart) {
    Plan p;
    p.seq = 512;
    p.mbs = 2;
    p.dp = 8;
    p.zero = zero_optimizer_states;
    const runtime::RunReport r = gpt2_rank_dry_run(p, 5);
    ASSERT_TRUE(r.predicted.step_time_s && r.predicted.dp_communication_s);
    ASSERT_GT(*r.predicted.dp_communication_s, 0);
    json j = as_emulated_device_run(r, std::int64_t{96} << 20);
    const double compute = *r.predicted.step_time_s - *r.predicted.dp_communication_s;
    j["measured"]["step_time_s"] = compute;
    const RunCheck rc = check_report(j, "rank5", default_tolerances().at(kSourceRuntime), options());
    ASSERT_NE(rc.find("peak_bytes"), nullptr);
    EXPECT_DOUBLE_EQ(rc.find("peak_bytes")->measured, static_cast<double>(r.predicted.memory.peak_bytes));
    EXPECT_TRUE(rc.find("peak_bytes")->within);
    ASSERT_NE(rc.find("step_time_s"), nullptr);
    EXPECT_NEAR(rc.find("step_time_s")->relative_error, 0.0, 1e-12);
    // Its MFU is the job's FLOPs over 8 GPUs for that step, against the same for the predicted one.
    ASSERT_NE(rc.find("mfu"), nullptr);
    EXPECT_NEAR(rc.find("mfu")->relative_error, 0.0, 1e-12);
    EXPECT_NEAR(rc.find("mfu")->measured, r.predicted.model_flops_per_step / (compute * 8 * 989.4e12), 1e-12);
    EXPECT_NE(rc.note.find("emulated rank 5 of 8"), std::string::npos) << rc.note;
    // A report whose parallel section is malformed is bad input naming the field.
    j["parallel"]["rank"] = "five";
    EXPECT_THROW(check_run_report_fields(j, "rank5.json"), InputError);
}

// An emulated pipeline stage runs alone and paces itself: a middle stage of GPT-2 at pp 4 (3 of
// its 12 layers, neither the embedding nor the output layer) is judged by its own work less its
// communication and bubble, not by the slowest stage's step, which holds the LM head's GEMMs.
TEST(CheckDriver, AnEmulatedPipelineStageIsJudgedByItsOwnWork) {
    const ModelConfig m = test::catalog_model("gpt2");
    const GpuSpec g = test::catalog_gpu("h100-sxm-80gb");
    Plan p;
    p.seq = 1024;
    p.mbs = 8;
    p.pp = 4;
    p.grad_acc = 8;
    const runtime::RunReport r = gpt2_rank_dry_run(p, 1);
    ASSERT_TRUE(r.predicted.step_time_s && r.predicted.emulated_step_time_s);
    const double slowest_alone = *r.predicted.step_time_s - r.predicted.emulated_communication_s();
    EXPECT_LT(*r.predicted.emulated_step_time_s, 0.9 * slowest_alone);
    ThroughputOptions own;
    own.own_stage = 1;
    const Plan resolved = resolve_defaults(p, m);
    const Throughput t = estimate_throughput(m, gpu_for_profile(g, runtime_profile()), resolved,
                                             throughput_options_for(runtime_profile(), m, resolved, own));
    EXPECT_NEAR(*r.predicted.emulated_step_time_s,
                t.step_time_s - t.dp_communication_s - t.tp_communication_s - t.pp_communication_s - t.pipeline_bubble_s,
                1e-12);
    json j = as_emulated_device_run(r, 0);
    EXPECT_DOUBLE_EQ(j.at("predicted").at("emulated_step_time_s").get<double>(), *r.predicted.emulated_step_time_s);
    j["measured"]["step_time_s"] = *r.predicted.emulated_step_time_s;
    const RunCheck rc = check_report(j, "stage1", default_tolerances().at(kSourceRuntime), options());
    ASSERT_NE(rc.find("step_time_s"), nullptr);
    EXPECT_NEAR(rc.find("step_time_s")->relative_error, 0.0, 1e-12);
}

// An NCCL run of one rank (`run --nproc-per-node 1`, a ZeRO plan) measures its communicators'
// memory the same way: 578 MiB on an H200 with NCCL 2.28.9, set apart from its driver peak. Its
// collectives ran, so its step is compared whole.
TEST(CheckDriver, AnNcclRunOfOneRankSetsItsNcclMemoryApart) {
    const ModelConfig m = test::catalog_model("gpt2");
    const GpuSpec g = test::catalog_gpu("h100-sxm-80gb");
    Plan p;
    p.seq = 1024;
    p.mbs = 4;
    p.zero = zero_optimizer_states;
    runtime::RunOptions o;
    o.timeline = false;
    const runtime::RunReport r = runtime::dry_run_report(m, g, p, o);
    ASSERT_TRUE(r.predicted.step_time_s);
    json j = runtime::run_report_to_json(r);
    j["mode"] = "device";
    j["parallel"]["backend"] = "nccl";
    const std::int64_t nccl = std::int64_t{578} << 20;
    j["parallel"]["nccl_world1_bytes"] = nccl;
    j["measured"]["device_used_peak_bytes"] = r.predicted.memory.peak_bytes + nccl;
    j["measured"]["step_time_s"] = *r.predicted.step_time_s;
    const RunCheck rc = check_report(j, "nccl-ws1", default_tolerances().at(kSourceRuntime), options());
    ASSERT_NE(rc.find("peak_bytes"), nullptr);
    EXPECT_DOUBLE_EQ(rc.find("peak_bytes")->measured, static_cast<double>(r.predicted.memory.peak_bytes));
    ASSERT_NE(rc.find("step_time_s"), nullptr);
    EXPECT_NEAR(rc.find("step_time_s")->relative_error, 0.0, 1e-12);
}

}  // namespace
