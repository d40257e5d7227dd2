// Whole-step memory: the timeline, its peak, logits, buffers, first step vs steady state.
#include <gtest/gtest.h>

#include <algorithm>

#include "catalog_fixture.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/memory.hpp"
#include "preflight/planner/profiles.hpp"

namespace preflight {
namespace {

const GpuSpec& h100() {
    static const GpuSpec g = test::catalog_gpu("h100-sxm-80gb");
    return g;
}

std::int64_t max_total(const std::vector<TimelineEntry>& t) {
    std::int64_t m = 0;
    for (const auto& e : t) m = std::max(m, e.bytes.total());
    return m;
}

TEST(Memory, PeakIsTheMaximumOfTheFullTimeline) {
    // The peak search visits only candidate phases; the full timeline must agree, for
    // every recompute mode, attention kind, ZeRO stage and a pipeline.
    const ModelConfig m = test::catalog_model("llama-3.2-1b");
    for (auto rc : all_recomputes())
        for (auto att : {AttentionKind::flash, AttentionKind::eager})
            for (int zero : {0, 2, 3})
                for (std::int64_t pp : {1, 4}) {
                    Plan p;
                    p.seq = 2048;
                    p.mbs = 2;
                    p.recompute = rc;
                    p.attention = att;
                    p.zero = ZeroStage{zero};
                    p.dp = 4;
                    p.pp = pp;
                    p.grad_acc = 8;
                    MemoryOptions o;
                    o.timeline = true;
                    const MemoryReport r = evaluate_memory(m, h100(), p, o);
                    EXPECT_EQ(max_total(r.timeline_steady), r.peak_bytes);
                    EXPECT_EQ(max_total(r.timeline_first), r.first_step_peak_bytes);
                }
}

// A profile's pool slack under full recompute is non-tensor memory: the overhead grows by the
// fraction times one layer's full activations (gpt2, b 4, s 1024, bf16-mixed: the layer's
// kept tensors with nothing recomputed), the tensors do not move, and other modes get none.
TEST(Memory, FullRecomputePoolSlackIsOverhead) {
    const ModelConfig m = test::catalog_model("gpt2");
    Plan p;
    p.seq = 1024;
    p.mbs = 4;
    MemoryOptions o;
    o.profile = runtime_profile();
    o.overhead_bytes = 0;
    const std::int64_t layer_full = evaluate_memory(m, h100(), p, o).activations_per_layer_bytes;
    p.recompute = Recompute::full;
    const MemoryReport before = evaluate_memory(m, h100(), p, o);
    o.profile.full_recompute_pool_slack_fraction = 0.5;
    const MemoryReport after = evaluate_memory(m, h100(), p, o);
    EXPECT_EQ(before.at_peak.overhead, 0);
    EXPECT_EQ(after.at_peak.overhead, layer_full / 2);
    EXPECT_EQ(after.peak_bytes - before.peak_bytes, layer_full / 2);
    p.recompute = Recompute::selective;
    EXPECT_EQ(evaluate_memory(m, h100(), p, o).at_peak.overhead, 0);
}

TEST(Memory, LogitsAtBf16PlusFp32CrossEntropyCopy) {
    // llama-3-8b, s = 4096: logits 4096 x 128256 in bf16 (2 B) and the fp32 copy the
    // cross-entropy works in (4 B) = 6 * 4096 * 128256 bytes, at the output phase.
    const ModelConfig m = test::catalog_model("llama-3-8b");
    Plan p;
    p.seq = 4096;
    const MemoryReport r = evaluate_memory(m, h100(), p);
    EXPECT_EQ(r.peak_phase.kind, PhaseKind::output_loss);
    EXPECT_EQ(r.at_peak.logits_and_loss, 6LL * 4096 * 128256);
}

TEST(Memory, OutputPhasePeakSumsEveryTermByHand) {
    // gpt2, seq 1024, mbs 4, bf16-mixed AdamW, flash, no dropout, one GPU. At output+loss:
    // 16 B/param of model states + 12 layers of saved tensors + int64 token ids and labels
    // + final-norm input/output + logits (2 + 4 B over the 50257 vocabulary) + 1 GiB overhead.
    const ModelConfig m = test::catalog_model("gpt2");
    Plan p;
    p.seq = 1024;
    p.mbs = 4;
    const MemoryReport r = evaluate_memory(m, h100(), p);
    const std::int64_t sb = 4096, hh = 768, f = 3072, heads = 12;
    const std::int64_t layer = sb * (2 * 2 * hh + 2 * hh + 2 * hh + 2 * hh + 2 * f + 3 * 2 * hh + 2 * f + 4 * heads);
    const std::int64_t expected = 16 * 124'439'808LL + 12 * layer + sb * 8 + sb * 8 + sb * (2 * hh + 2 * hh) +
                                  sb * 50257 * 6 + h100().overhead_bytes;
    EXPECT_EQ(r.activations_per_layer_bytes, layer);
    EXPECT_EQ(r.peak_phase.kind, PhaseKind::output_loss);
    EXPECT_EQ(r.peak_bytes, expected);
}

TEST(Memory, FirstStepRunsWithoutOptimizerMoments) {
    // Playbook: the first step can fit and a later one OOM, once the optimizer states exist.
    // Activation-heavy plan: the first step peaks at the same phase, minus the moments.
    const ModelConfig m = test::catalog_model("llama-3.2-1b");
    Plan p;
    p.seq = 2048;
    p.mbs = 8;
    const MemoryReport r = evaluate_memory(m, h100(), p);
    EXPECT_EQ(r.first_step_peak_phase.kind, r.peak_phase.kind);
    EXPECT_EQ(r.first_step_peak_bytes, r.peak_bytes - r.at_peak.optimizer_states);
}

TEST(Memory, SmallBatchFirstStepPeaksWhenMomentsAreCreated) {
    // Short sequence, one sequence: the first step's largest moment is its optimizer step,
    // when the AdamW moments (8 B/param) appear beside weights, master and grads (8 B/param).
    const ModelConfig m = test::catalog_model("llama-3.2-1b");
    Plan p;
    p.seq = 256;
    const MemoryReport r = evaluate_memory(m, h100(), p);
    EXPECT_EQ(r.first_step_peak_phase.kind, PhaseKind::optimizer_step);
    EXPECT_EQ(r.first_step_peak_bytes, 16 * 1'235'814'400LL + 2 * 256 * 64 * 4 + h100().overhead_bytes);
}

TEST(Memory, ActivationsGrowLinearlyWithMicroBatch) {
    const ModelConfig m = test::catalog_model("llama-3.2-1b");
    Plan p;
    p.seq = 2048;
    const std::int64_t one = layer_activation_bytes(m, p);
    p.mbs = 4;
    EXPECT_EQ(layer_activation_bytes(m, p), 4 * one);
}

TEST(Memory, RecomputeOrdersMemory) {
    const ModelConfig m = test::catalog_model("llama-3-8b");
    Plan p;
    p.seq = 4096;
    p.attention = AttentionKind::eager;
    std::int64_t prev = INT64_MAX;
    for (auto rc : all_recomputes()) {
        p.recompute = rc;
        const std::int64_t peak = evaluate_memory(m, h100(), p).peak_bytes;
        EXPECT_LT(peak, prev) << to_string(rc);
        prev = peak;
    }
}

TEST(Memory, ZeroThreeBuffersHoldGatheredLayers) {
    // ZeRO-3: during forward the current and the prefetched layer's 16-bit weights are gathered.
    const ModelConfig m = test::catalog_model("llama-3-8b");
    Plan p;
    p.seq = 4096;
    p.dp = 8;
    p.zero = ZeroStage{3};
    MemoryOptions o;
    o.timeline = true;
    const MemoryReport r = evaluate_memory(m, h100(), p, o);
    const auto fwd = std::find_if(r.timeline_steady.begin(), r.timeline_steady.end(),
                                  [](const TimelineEntry& e) { return e.phase.kind == PhaseKind::forward; });
    ASSERT_NE(fwd, r.timeline_steady.end());
    const std::int64_t rope_tables = 2 * 4096 * 128 * 4;
    EXPECT_EQ(fwd->bytes.buffers, 2 * 2 * 218'112'000LL + rope_tables);
}

TEST(Memory, FitsComparesPeakWithCapacity) {
    Plan p;
    p.seq = 4096;
    EXPECT_FALSE(evaluate_memory(test::catalog_model("llama-3-70b"), h100(), p).fits);
    EXPECT_TRUE(evaluate_memory(test::catalog_model("gpt2"), h100(), Plan{}).fits);
}

TEST(Memory, OverheadOverride) {
    MemoryOptions o;
    o.overhead_bytes = 3 * kGiB;
    const MemoryReport r = evaluate_memory(test::catalog_model("gpt2"), h100(), Plan{}, o);
    EXPECT_EQ(r.at_peak.overhead, 3 * kGiB);
}

TEST(Memory, DefaultSequenceIsContextCappedAt4096) {
    EXPECT_EQ(resolve_defaults(Plan{}, test::catalog_model("gpt2")).seq, 1024);
    EXPECT_EQ(resolve_defaults(Plan{}, test::catalog_model("llama-3-8b")).seq, 4096);
}

// One stage of a pipeline (MemoryOptions::pipeline_stage, a rank's own prediction): the stages'
// peaks, the worst of which is the plan's. Llama-3-8B at pp 4 with 1F1B and 8 micro-batches:
// stage i holds min(4 - i, 8) micro-batches in flight, so stage 0 peaks highest; the
// last holds one (and the LM head).
TEST(Memory, OneStageOfAPipeline) {
    const ModelConfig m = test::catalog_model("llama-3-8b");
    Plan p;
    p.seq = 4096;
    p.mbs = 1;
    p.pp = 4;
    p.grad_acc = 8;
    p.recompute = Recompute::selective;
    MemoryOptions o;
    const MemoryReport all = evaluate_memory(m, h100(), p, o);
    std::int64_t worst = 0;
    for (std::int64_t s = 0; s < 4; ++s) {
        o.pipeline_stage = s;
        const MemoryReport r = evaluate_memory(m, h100(), p, o);
        EXPECT_EQ(r.pipeline_stage, s);
        EXPECT_EQ(r.micro_batches_in_flight, 4 - s);
        worst = std::max(worst, r.peak_bytes);
    }
    EXPECT_EQ(worst, all.peak_bytes);
    EXPECT_EQ(all.pipeline_stage, 0);
    o.pipeline_stage = 4;
    EXPECT_THROW(evaluate_memory(m, h100(), p, o), InputError);
}

}  // namespace
}  // namespace preflight
