// The driver's view of a device run (baseline-subtracted device-used peak, the samples at
// the predicted peak op and after the first step, the arena or the pool's high-water marks, NVML), the
// debug-sync mode on a good run, and cuDNN attention against the runtime's kernel over a
// few steps. Label: gpu. Skips without a device.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "catalog_fixture.hpp"
#include "gpu_util.hpp"
#include "preflight/runtime/walker.hpp"

namespace preflight::runtime {
namespace {

ModelConfig small_llama() {
    nlohmann::json cfg = {{"model_type", "llama"},   {"hidden_size", 256},       {"num_hidden_layers", 2},
                          {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"intermediate_size", 704},
                          {"vocab_size", 1024},       {"max_position_embeddings", 1024},
                          {"tie_word_embeddings", false}, {"rope_theta", 500000.0}};
    return model_from_hf_config(cfg, "small-llama");
}

Plan plan(Precision pr) {
    Plan p;
    p.seq = 256;
    p.mbs = 2;
    p.precision = pr;
    p.attention = AttentionKind::flash;
    return p;
}

TEST(GpuDriverMemory, DeviceUsedPeakCoversTheTrackedPeakAndIsSampledAtThePeakOp) {
    PF_REQUIRE_GPU();
    const GpuSpec gpu = preflight::test::catalog_gpu("h100-sxm-80gb");
    RunOptions o;
    o.steps = 2;
    o.warmup = 1;
    const RunReport r = run_on_device(small_llama(), gpu, plan(Precision::bf16_mixed), o);
    ASSERT_EQ(r.status, "ok") << (r.failure ? r.failure->message : "");
    const DriverMemory& d = r.measured.driver;
    ASSERT_TRUE(d.used_peak_bytes && d.at_peak_op_bytes && d.after_warmup_bytes && d.after_setup_bytes);
    std::printf("driver: baseline %s %lld B, context %lld B, libraries %lld B, after set-up %lld B, at peak op %lld B "
                "(%s), after step 1 %lld B, peak %lld B, pool reserved %lld B, NVML %s %lld B; tracked peak %lld B; "
                "attention %s\n",
                d.baseline_source.c_str(), static_cast<long long>(d.baseline_bytes.value_or(-1)),
                static_cast<long long>(d.context_bytes.value_or(-1)), static_cast<long long>(d.libraries_bytes.value_or(-1)),
                static_cast<long long>(*d.after_setup_bytes), static_cast<long long>(*d.at_peak_op_bytes), d.peak_op.c_str(),
                static_cast<long long>(*d.after_warmup_bytes), static_cast<long long>(*d.used_peak_bytes),
                static_cast<long long>(d.pool_reserved_peak_bytes.value_or(-1)), d.nvml.c_str(),
                static_cast<long long>(d.nvml_used_peak_bytes.value_or(-1)),
                static_cast<long long>(r.measured.tracked_peak_bytes), r.measured.attention_backend.c_str());
    // Everything the run allocated is device memory the driver sees.
    EXPECT_GE(*d.used_peak_bytes, r.measured.tracked_peak_bytes);
    EXPECT_GE(*d.at_peak_op_bytes, r.measured.tracked_peak_bytes);
    // The default arena: one cudaMalloc of the planned size holds every buffer, so the driver's
    // peak is the non-tensor memory measured before it plus the arena, up to the driver's
    // 2 MiB pages and any library workspace taken later.
    ASSERT_EQ(r.measured.allocator, "arena");
    ASSERT_TRUE(r.measured.arena_bytes && r.measured.overhead_bytes);
    EXPECT_GE(*r.measured.arena_bytes, r.measured.tracked_peak_bytes);
    const std::int64_t beyond = *d.used_peak_bytes - *r.measured.overhead_bytes - *r.measured.arena_bytes;
    std::printf("arena %lld B (live peak %lld B); driver peak - overhead - arena = %lld B\n",
                static_cast<long long>(*r.measured.arena_bytes),
                static_cast<long long>(r.measured.arena_live_peak_bytes.value_or(-1)), static_cast<long long>(beyond));
    EXPECT_GE(beyond, 0);
    EXPECT_LT(beyond, std::int64_t{16} << 20);
    ASSERT_TRUE(r.measured.device_used_peak_bytes.has_value());
    EXPECT_EQ(*r.measured.device_used_peak_bytes, *d.used_peak_bytes);
    if (d.baseline_source == "nvml-before-context") {
        ASSERT_TRUE(d.context_bytes.has_value());
        EXPECT_GT(*d.context_bytes, 0);  // a CUDA context costs device memory
    }
    EXPECT_EQ(describe(build_program(small_llama(), plan(Precision::bf16_mixed)),
                       build_program(small_llama(), plan(Precision::bf16_mixed))
                           .step[static_cast<std::size_t>(peak_step_op(build_program(small_llama(), plan(Precision::bf16_mixed))))]),
              d.peak_op);
}

// `--allocator pool`: the buffers come from the cudaMallocAsync pool (its high-water marks are
// set), and the run computes what the arena run computes: only the addresses differ.
TEST(GpuDriverMemory, ThePoolAllocatorTrainsLikeTheArena) {
    PF_REQUIRE_GPU();
    const GpuSpec gpu = preflight::test::catalog_gpu("h100-sxm-80gb");
    RunOptions o;
    o.steps = 3;
    o.warmup = 0;
    const RunReport arena = run_on_device(small_llama(), gpu, plan(Precision::bf16_mixed), o);
    o.allocator = "pool";
    const RunReport pool = run_on_device(small_llama(), gpu, plan(Precision::bf16_mixed), o);
    ASSERT_EQ(arena.status, "ok") << (arena.failure ? arena.failure->message : "");
    ASSERT_EQ(pool.status, "ok") << (pool.failure ? pool.failure->message : "");
    EXPECT_EQ(pool.measured.allocator, "pool");
    EXPECT_FALSE(pool.measured.arena_bytes.has_value());
    ASSERT_TRUE(pool.measured.driver.pool_reserved_peak_bytes.has_value());
    EXPECT_GT(*pool.measured.driver.pool_reserved_peak_bytes, 0);  // the step's transient buffers came from the pool
    EXPECT_EQ(arena.measured.tracked_peak_bytes, pool.measured.tracked_peak_bytes);
    ASSERT_EQ(arena.measured.losses.size(), pool.measured.losses.size());
    for (std::size_t i = 0; i < pool.measured.losses.size(); ++i)
        EXPECT_NEAR(arena.measured.losses[i], pool.measured.losses[i], 1e-3 * pool.measured.losses[i]) << i;
}

TEST(GpuDriverMemory, DebugSyncRunIsCleanAndSaysSo) {
    PF_REQUIRE_GPU();
    const GpuSpec gpu = preflight::test::catalog_gpu("h100-sxm-80gb");
    RunOptions o;
    o.steps = 1;
    o.warmup = 1;
    o.debug_sync = true;
    const RunReport r = run_on_device(small_llama(), gpu, plan(Precision::fp32), o);
    ASSERT_EQ(r.status, "ok") << (r.failure ? r.failure->message : "");
    EXPECT_TRUE(r.measured.debug_sync);
}

TEST(GpuDriverMemory, CudnnAttentionTrainsLikeTheKernel) {
    PF_REQUIRE_GPU();
    const GpuSpec gpu = preflight::test::catalog_gpu("h100-sxm-80gb");
    RunOptions o;
    o.steps = 4;
    o.warmup = 0;
    const RunReport with = run_on_device(small_llama(), gpu, plan(Precision::bf16_mixed), o);
    ASSERT_EQ(with.status, "ok") << (with.failure ? with.failure->message : "");
    if (with.measured.attention_backend != "cudnn")
        GTEST_SKIP() << "cuDNN attention not in use here (backend " << with.measured.attention_backend << ")";
    o.cudnn_attention = false;
    const RunReport without = run_on_device(small_llama(), gpu, plan(Precision::bf16_mixed), o);
    ASSERT_EQ(without.status, "ok");
    EXPECT_EQ(without.measured.attention_backend, "kernel");
    // The same memory either way (the workspace is planned for cuDNN).
    EXPECT_EQ(with.measured.tracked_peak_bytes, without.measured.tracked_peak_bytes);
    ASSERT_EQ(with.measured.losses.size(), without.measured.losses.size());
    for (std::size_t i = 0; i < with.measured.losses.size(); ++i)  // bf16 tolerance over 4 steps
        EXPECT_NEAR(with.measured.losses[i], without.measured.losses[i], 0.02 * without.measured.losses[i]) << i;
}

TEST(GpuDriverMemory, GeluEpilogueFusionTrainsLikeTheKernels) {
    PF_REQUIRE_GPU();
    const GpuSpec gpu = preflight::test::catalog_gpu("h100-sxm-80gb");
    const ModelConfig gpt = preflight::test::gpt_model(256, 2, 4, 1000, 512);
    for (auto rc : {Recompute::none, Recompute::full}) {
        Plan p;
        p.seq = 256;
        p.mbs = 2;
        p.recompute = rc;
        p.precision = Precision::bf16_mixed;
        RunOptions o;
        o.steps = 4;
        o.warmup = 0;
        const RunReport fused = run_on_device(gpt, gpu, p, o);
        ASSERT_EQ(fused.status, "ok") << (fused.failure ? fused.failure->message : "");
        o.fuse_epilogues = false;
        const RunReport plain = run_on_device(gpt, gpu, p, o);
        ASSERT_EQ(plain.status, "ok");
        EXPECT_EQ(fused.measured.tracked_peak_bytes, plain.measured.tracked_peak_bytes);
        ASSERT_EQ(fused.measured.losses.size(), plain.measured.losses.size());
        for (std::size_t i = 0; i < plain.measured.losses.size(); ++i)  // bf16 tolerance over 4 steps
            EXPECT_NEAR(fused.measured.losses[i], plain.measured.losses[i], 0.02 * plain.measured.losses[i]) << i;
    }
}

}  // namespace
}  // namespace preflight::runtime
