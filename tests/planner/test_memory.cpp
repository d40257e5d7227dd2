// Whole-step memory: the timeline, its peak, logits, buffers, first step vs steady state.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>

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
    // (fp32 main gradients: with 16-bit ones the optimizer step's fp32 copy of them peaks higher.)
    const ModelConfig m = test::catalog_model("llama-3-8b");
    Plan p;
    p.seq = 4096;
    p.precision = Precision::bf16_mixed_fp32_grads;
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
    // when the AdamW moments (8 B/param) appear beside weights, master and grads (8 B/param)
    // and Megatron-LM's fp32 copy of the bf16 main gradients (4 B/param).
    const ModelConfig m = test::catalog_model("llama-3.2-1b");
    Plan p;
    p.seq = 256;
    const MemoryReport r = evaluate_memory(m, h100(), p);
    EXPECT_EQ(r.first_step_peak_phase.kind, PhaseKind::optimizer_step);
    EXPECT_EQ(r.first_step_peak_bytes, 20 * 1'235'814'400LL + 2 * 256 * 64 * 4 + h100().overhead_bytes);
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
    // fp32 main gradients: no gradient copy at the optimizer step, so the peak is the activations'.
    const ModelConfig m = test::catalog_model("llama-3-8b");
    Plan p;
    p.seq = 4096;
    p.precision = Precision::bf16_mixed_fp32_grads;
    p.attention = AttentionKind::eager;
    std::int64_t prev = INT64_MAX;
    for (auto rc : all_recomputes()) {
        p.recompute = rc;
        const std::int64_t peak = evaluate_memory(m, h100(), p).peak_bytes;
        EXPECT_LT(peak, prev) << to_string(rc);
        prev = peak;
    }
}

// The timeline entry of one phase (layer 0 for the phases without one).
const TimelineEntry& entry(const MemoryReport& r, PhaseKind kind, std::int64_t layer) {
    const auto e = std::find_if(r.timeline_steady.begin(), r.timeline_steady.end(), [&](const TimelineEntry& t) {
        return t.phase.kind == kind && t.phase.layer == layer;
    });
    if (e == r.timeline_steady.end()) throw std::runtime_error("no such phase in the timeline");
    return *e;
}

// Llama-3-8B, one decoder layer: q and o 4096 x 4096 each, k and v 1024 x 4096 each, gate, up
// and down 4096 x 14336 each, two 4096 norms = 218,112,000 elements; seq 4096: RoPE's fp32
// cos/sin tables 2 x 4096 x 128 x 4 B.
constexpr std::int64_t kLlama3LayerElements = 218'112'000;
constexpr std::int64_t kRopeTables = 2 * 4096 * 128 * 4;

// seq 4096 over dp 8 at a ZeRO stage, and its timeline under the default (megatron) profile, or
// with Megatron-FSDP's terms off (a plain FSDP).
Plan dp8(int zero) {
    Plan p;
    p.seq = 4096;
    p.dp = 8;
    p.zero = ZeroStage{zero};
    return p;
}
MemoryReport timeline_of(const char* model, const Plan& p, bool megatron_fsdp = true) {
    MemoryOptions o;
    o.timeline = true;
    o.profile.megatron_fsdp = megatron_fsdp;
    return evaluate_memory(test::catalog_model(model), h100(), p, o);
}

TEST(Memory, ZeroThreeBuffersHoldGatheredLayers) {
    // ZeRO-3 as a plain FSDP: during forward the current and the prefetched layer's 16-bit
    // weights are gathered (a profile without Megatron-FSDP's prefetch budget).
    const MemoryReport r = timeline_of("llama-3-8b", dp8(3), false);
    EXPECT_EQ(entry(r, PhaseKind::forward, 1).bytes.buffers, 2 * 2 * kLlama3LayerElements + kRopeTables);
}

// Megatron-FSDP (optim_grads_params, megatron_fsdp.py at Megatron-LM d98e8a6): its communication
// unit is max(1e9, 2 x 218,112,000) = 1e9 elements and it prefetches buckets until they pass half
// of it, ceil(5e8 / 218,112,000) = 3 layers ahead, so 4 layers (2 B each) are gathered until the
// last layers leave fewer ahead; the embedding and the LM head (2 x 128,256 x 4,096) and the final
// norm (4,096), outside the FSDP units, stay gathered beside the 2 B / 8 shards of all
// 8,030,261,248 parameters.
TEST(Memory, MegatronFsdpZeroThreePrefetchesToItsBudgetAndKeepsNonUnitModulesGathered) {
    const MemoryReport r = timeline_of("llama-3-8b", dp8(3));
    EXPECT_EQ(entry(r, PhaseKind::forward, 1).bytes.buffers, 4 * 2 * kLlama3LayerElements + kRopeTables);
    EXPECT_EQ(entry(r, PhaseKind::forward, 31).bytes.buffers, 2 * 2 * kLlama3LayerElements + kRopeTables);
    EXPECT_EQ(entry(r, PhaseKind::forward, 32).bytes.buffers, 1 * 2 * kLlama3LayerElements + kRopeTables);
    const std::int64_t non_unit = 2 * 128'256LL * 4'096 + 4'096;
    EXPECT_EQ(r.at_peak.weights, 2 * (8'030'261'248LL / 8) + 2 * non_unit);
}

// Megatron-FSDP's reduce-scatter queue (param_and_grad_buffer.py reduce_gradients,
// wait_for_previous_grad_reduce): a ready bucket joins once the queue holds at most 1e9 elements.
// The LM head's bucket (128,256 x 4,096 = 525,336,576 elements) joins first, at the head's
// backward, and stays while head + (n - 1) layers <= 1e9, n = 0 .. 3 layer buckets behind it
// (474,663,424 / 218,112,000 = 2.2); layer buckets: floor(1e9 / 218,112,000) = 4 kept, so up to 5
// queued and the one being filled: in backward layer l, 1 + min(5, 32 - l) full-size bf16
// (bf16-mixed) or fp32 buckets. When backward ends the embedding's bucket joins 4 queued layers.
// ZeRO-2 has no gathers and no DDP buckets beside them. The optimizer step copies the bf16
// gradient shard (8,030,261,248 / 8 elements) to fp32 (update_main_grads); fp32 main gradients
// need no copy.
TEST(Memory, MegatronFsdpQueuesFullLayerGradientsThroughBackward) {
    Plan p = dp8(2);
    p.precision = Precision::bf16_mixed;
    const MemoryReport r = timeline_of("llama-3-8b", p);
    const std::int64_t head = 128'256LL * 4'096;
    EXPECT_EQ(entry(r, PhaseKind::backward, 32).bytes.buffers, 1 * 2 * kLlama3LayerElements + 2 * head + kRopeTables);
    EXPECT_EQ(entry(r, PhaseKind::backward, 29).bytes.buffers, 4 * 2 * kLlama3LayerElements + 2 * head + kRopeTables);
    EXPECT_EQ(entry(r, PhaseKind::backward, 28).bytes.buffers, 5 * 2 * kLlama3LayerElements + kRopeTables);
    EXPECT_EQ(entry(r, PhaseKind::backward, 27).bytes.buffers, 6 * 2 * kLlama3LayerElements + kRopeTables);
    EXPECT_EQ(entry(r, PhaseKind::backward, 1).bytes.buffers, 6 * 2 * kLlama3LayerElements + kRopeTables);
    EXPECT_EQ(entry(r, PhaseKind::grad_reduce, 0).bytes.buffers, 2 * (4 * kLlama3LayerElements + head) + kRopeTables);
    EXPECT_EQ(entry(r, PhaseKind::optimizer_step, 0).bytes.buffers, 4 * (8'030'261'248LL / 8) + kRopeTables);
    p.precision = Precision::bf16_mixed_fp32_grads;
    const MemoryReport wide = timeline_of("llama-3-8b", p);
    EXPECT_EQ(entry(wide, PhaseKind::backward, 1).bytes.buffers, 6 * 4 * kLlama3LayerElements + kRopeTables);
    EXPECT_EQ(entry(wide, PhaseKind::optimizer_step, 0).bytes.buffers, kRopeTables);
}

// With expert parallelism an FSDP unit holds this rank's experts only. Mixtral-8x7B at ep 8, one
// of its 8 experts per rank: attention 2 x 4,096^2 + 2 x 1,024 x 4,096 = 41,943,040, the router
// 8 x 4,096, one expert's gate, up and down 3 x 4,096 x 14,336 = 176,160,768, two norms 8,192:
// 218,144,768 elements; ceil(5e8 / 218,144,768) = 3 layers prefetched, so 4 gathered in forward
// layer 1 (at ep 1 the 1,451,270,144-element unit passes the budget alone: 2 gathered).
TEST(Memory, MegatronFsdpUnitsHoldThisRanksExperts) {
    Plan p = dp8(3);
    p.ep = 8;
    EXPECT_EQ(entry(timeline_of("mixtral-8x7b", p), PhaseKind::forward, 1).bytes.buffers, 4 * 2 * 218'144'768LL + kRopeTables);
    p.ep = 1;
    EXPECT_EQ(entry(timeline_of("mixtral-8x7b", p), PhaseKind::forward, 1).bytes.buffers, 2 * 2 * 1'451'270'144LL + kRopeTables);
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
