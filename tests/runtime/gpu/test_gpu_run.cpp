// Whole runs on the device: tracked allocations equal the dry run exactly, loss falls
// on the learnable synthetic task within 100 steps, an over-capacity plan fails
// cleanly with a report. Label: gpu. Skips without a device.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "catalog_fixture.hpp"
#include "gpu_util.hpp"
#include "preflight/runtime/walker.hpp"

namespace preflight::runtime {
namespace {

ModelConfig tiny_llama() {
    nlohmann::json cfg = {{"model_type", "llama"},         {"hidden_size", 128},       {"num_hidden_layers", 2},
                          {"num_attention_heads", 4},       {"num_key_value_heads", 2}, {"intermediate_size", 352},
                          {"vocab_size", 512},              {"max_position_embeddings", 512},
                          {"tie_word_embeddings", false}};
    return model_from_hf_config(cfg, "tiny-llama");
}

ModelConfig tiny_gpt() { return preflight::test::gpt_model(128, 2, 4, 500, 256); }

TEST(GpuRun, TrackedPeakEqualsTheDryRunForEveryPlanKind) {
    PF_REQUIRE_GPU();
    const GpuSpec gpu = preflight::test::catalog_gpu("h100-sxm-80gb");
    for (const ModelConfig& m : {tiny_llama(), tiny_gpt()})
        for (auto rc : all_recomputes())
            for (auto at : {AttentionKind::flash, AttentionKind::eager})
                for (auto pr : {Precision::fp32, Precision::bf16_mixed, Precision::bf16_mixed_fp32_grads, Precision::bf16}) {
                    Plan p;
                    p.seq = 128;
                    p.mbs = 2;
                    p.grad_acc = 2;
                    p.recompute = rc;
                    p.attention = at;
                    p.precision = pr;
                    RunOptions o;
                    o.steps = 2;
                    o.warmup = 1;
                    const RunReport r = run_on_device(m, gpu, p, o);
                    ASSERT_EQ(r.status, "ok") << (r.failure ? r.failure->message : "");
                    const DryRunResult d = dry_run(build_program(m, p));
                    EXPECT_EQ(r.measured.tracked_peak_bytes, d.peak_bytes);
                    for (double l : r.measured.losses) EXPECT_TRUE(std::isfinite(l));
                    ASSERT_TRUE(r.measured.step_time_s.has_value());
                    EXPECT_GT(*r.measured.step_time_s, 0);
                    // The default allocator is the planned arena: its live peak is the tracked
                    // peak, and the stream-ordered pool, unused, reports nothing (not 0).
                    ASSERT_EQ(r.measured.allocator, "arena");
                    ASSERT_TRUE(r.measured.arena_live_peak_bytes.has_value());
                    EXPECT_EQ(*r.measured.arena_live_peak_bytes, r.measured.tracked_peak_bytes);
                    EXPECT_FALSE(r.measured.pool_peak_bytes.has_value());
                }
}

// From 8 micro-batches without a pipeline the arena is planned on five of them and extended over
// the rest (arena.cpp, kShortenFrom): 12 micro-batches run in it as in the stream-ordered pool,
// loss for loss, and its live peak is the dry run's.
TEST(GpuRun, ALongAccumulationRunsInItsExtendedArenaAsInThePool) {
    PF_REQUIRE_GPU();
    const GpuSpec gpu = preflight::test::catalog_gpu("h100-sxm-80gb");
    for (auto zero : {zero_none, zero_weights}) {
        Plan p;
        p.seq = 128;
        p.mbs = 2;
        p.grad_acc = 12;
        p.zero = zero;
        p.precision = Precision::bf16_mixed;
        RunOptions o;
        o.steps = 3;
        o.warmup = 0;
        const RunReport arena = run_on_device(tiny_llama(), gpu, p, o);
        o.allocator = "pool";
        const RunReport pool = run_on_device(tiny_llama(), gpu, p, o);
        ASSERT_EQ(arena.status, "ok") << (arena.failure ? arena.failure->message : "");
        ASSERT_EQ(pool.status, "ok") << (pool.failure ? pool.failure->message : "");
        ASSERT_EQ(arena.measured.allocator, "arena");
        EXPECT_EQ(arena.measured.tracked_peak_bytes, dry_run(build_program(tiny_llama(), p)).peak_bytes);
        ASSERT_TRUE(arena.measured.arena_live_peak_bytes.has_value());
        EXPECT_EQ(*arena.measured.arena_live_peak_bytes, arena.measured.tracked_peak_bytes);
        ASSERT_EQ(arena.measured.losses.size(), pool.measured.losses.size());
        for (std::size_t i = 0; i < arena.measured.losses.size(); ++i) {
            EXPECT_TRUE(std::isfinite(arena.measured.losses[i]));
            EXPECT_NEAR(arena.measured.losses[i], pool.measured.losses[i], 1e-5 * std::abs(pool.measured.losses[i]))
                << "step " << i;
        }
    }
}

TEST(GpuRun, LossFallsOnTheSyntheticTaskWithin100Steps) {
    PF_REQUIRE_GPU();
    const GpuSpec gpu = preflight::test::catalog_gpu("h100-sxm-80gb");
    for (const ModelConfig& m : {tiny_llama(), tiny_gpt()}) {
        Plan p;
        p.seq = 128;
        p.mbs = 4;
        RunOptions o;
        o.steps = 100;
        o.warmup = 0;
        o.hyper.lr = 3e-3;
        const RunReport r = run_on_device(m, gpu, p, o);
        ASSERT_EQ(r.status, "ok") << (r.failure ? r.failure->message : "");
        ASSERT_EQ(r.measured.losses.size(), 100u);
        const double first = r.measured.losses.front(), last = r.measured.losses.back();
        EXPECT_NEAR(first, std::log(static_cast<double>(m.vocab)), 1.0) << m.name << ": initial loss ~ ln V";
        EXPECT_LT(last, 0.5 * first) << m.name << ": loss " << first << " -> " << last;
    }
}

TEST(GpuRun, OverCapacityPlanFailsWithPhaseRequestAndFreeMemory) {
    PF_REQUIRE_GPU();
    const ModelConfig m = preflight::test::catalog_model("llama-3-8b");
    const GpuSpec gpu = preflight::test::catalog_gpu("h100-sxm-80gb");
    Plan p;
    p.seq = 4096;
    p.mbs = 16;
    p.precision = Precision::fp32;
    p.attention = AttentionKind::eager;
    RunOptions o;
    o.steps = 1;
    o.warmup = 0;
    const RunReport r = run_on_device(m, gpu, p, o);
    EXPECT_EQ(r.status, "allocation-failed");
    ASSERT_TRUE(r.failure.has_value());
    EXPECT_GT(r.failure->requested_bytes, 0);
    EXPECT_GE(r.failure->free_bytes, 0);
    EXPECT_FALSE(r.failure->where.empty());
    const auto j = run_report_to_json(r);
    EXPECT_EQ(j["failure"]["buffer"], r.failure->buffer);
}

}  // namespace
}  // namespace preflight::runtime
