// `preflight run --op-times` on the device: every op of the extra step is timed once, the GEMMs
// it notes add up to the step's linear FLOPs worked out by hand, the fused GeLU epilogues are
// labelled where they run, and the extra step stays out of the measured figures. Label: gpu.
#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "catalog_fixture.hpp"
#include "gpu_util.hpp"
#include "preflight/runtime/program.hpp"

namespace preflight::runtime {
namespace {

TEST(GpuOpTimes, EveryOpTimedOnceAndTheGemmFlopsAreTheLinearsOfTheStep) {
    PF_REQUIRE_GPU();
    // GPT shape: h 128, 2 layers, ffn 4h = 512, vocab 512 (tied head), seq 128, mbs 2: T = 256 tokens.
    const ModelConfig gpt = preflight::test::gpt_model(128, 2, 4, 512, 256);
    Plan p;
    p.seq = 128;
    p.mbs = 2;
    p.precision = Precision::bf16_mixed;
    p.recompute = Recompute::none;
    p.attention = AttentionKind::flash;
    RunOptions o;
    o.steps = 2;
    o.warmup = 1;
    o.op_times = true;
    const RunReport r = run_on_device(gpt, preflight::test::catalog_gpu("h100-sxm-80gb"), p, o);
    ASSERT_EQ(r.status, "ok") << (r.failure ? r.failure->message : "");
    ASSERT_TRUE(r.measured.op_times.has_value());
    const OpTimes& t = *r.measured.op_times;
    EXPECT_EQ(t.ops, build_program(gpt, p).step_ops_run());  // the repeated block once a run
    std::int64_t counted = 0;
    double flops = 0;
    std::set<std::string> labels;
    for (const OpLabelTime& l : t.by_label) {
        counted += l.count;
        flops += l.gemm_flops;
        labels.insert(l.label);
        EXPECT_GE(l.time_s, 0) << l.label;
    }
    EXPECT_EQ(counted, t.ops);
    // Forward, data and weight gradient of every linear: 6 T (L (3h^2 + h^2 + 2 x 4h^2) + V h)
    // = 6 x 256 x (2 x 12 x 128^2 + 512 x 128) = 704,643,072; the attention is cuDNN's or ours, no GEMM call.
    EXPECT_DOUBLE_EQ(flops, 704643072.0);
    // bf16 GeLU: fc1's GEMM runs at the activation op with the GeLU as its epilogue, and the
    // GeLU's gradient in fc2's data-gradient GEMM.
    EXPECT_TRUE(labels.count("linear_fwd+gelu")) << "fused fc1 not labelled";
    EXPECT_TRUE(labels.count("linear_fwd:deferred"));
    EXPECT_TRUE(labels.count("linear_bwd_data+dgelu"));
    EXPECT_TRUE(labels.count("gelu_bwd:fused"));
    // GPT biases: each weight gradient with a bias also runs the bias's column sum (no GEMM).
    EXPECT_TRUE(labels.count("linear_bwd_weight+bias_grad"));
    EXPECT_TRUE(labels.count("linear_bwd_weight"));  // the tied LM head has no bias
    for (const GemmShapeTime& g : t.gemms) EXPECT_DOUBLE_EQ(g.flops, gemm_flops(g.shape) * static_cast<double>(g.count));
    EXPECT_GT(t.total_s, 0);
    // The timed step is not a measured step.
    EXPECT_EQ(r.measured.step_times_s.size(), 2u);
    EXPECT_EQ(r.measured.losses.size(), 3u);
}

}  // namespace
}  // namespace preflight::runtime
