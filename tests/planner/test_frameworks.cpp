// Framework profiles and the caching-allocator model. Expected numbers are derived by hand
// from the frameworks' code (file and function named at each assertion), not read back.
#include <gtest/gtest.h>

#include <algorithm>

#include "catalog_fixture.hpp"
#include "preflight/planner/allocator_model.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/frameworks.hpp"
#include "preflight/planner/memory.hpp"
#include "preflight/planner/pipeline_split.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/report.hpp"
#include "preflight/planner/search.hpp"
#include "preflight/planner/throughput.hpp"

using namespace preflight;

namespace {

// The sweep's "1B": Llama shape 16 x 2048, 32 heads (MHA), ffn 8192, vocab 131072, tied.
ModelConfig nanotron_1b() {
    ModelConfig m = test::llama_model(2048, 16, 32, 32, 8192, 131072, 4096);
    m.tied_embeddings = true;
    return m;
}

Plan nanotron_plan(std::int64_t dp, std::int64_t tp, std::int64_t pp, int zero) {
    Plan p;
    p.seq = 4096;
    p.mbs = 1;
    p.grad_acc = 8;
    p.dp = dp;
    p.tp = tp;
    p.pp = pp;
    p.sp = tp > 1;
    p.zero = ZeroStage{zero};
    p.precision = Precision::bf16_mixed_fp32_grads;
    return p;
}

AllocatorConstants none() { return {}; }

}  // namespace

// nanotron models/base.py build_model with LlamaForTraining.get_block_compute_costs:
// layer cost C = 4*32*64*2048 + 3*8192*2048 = 67,108,864; LM head 131072*2048 = 4C; total 20C.
// A stage closes when its cumulative cost reaches the threshold (the sweep's measured split;
// the code's `>` would close one layer later on these ties).
TEST(PipelineSplit, NanotronBalancesComputeCountingTheLmHead) {
    const ModelConfig m = nanotron_1b();
    // pp 2: threshold 10C; layer 10 reaches exactly 10C and closes stage 0 -> 10 + 6 layers,
    // the head on stage 1.
    auto s2 = pipeline_stages(m, 2, PipelineSplit::nanotron_compute_cost);
    ASSERT_EQ(s2.size(), 2u);
    EXPECT_EQ(s2[0].layers, 10);
    EXPECT_EQ(s2[1].layers, 6);
    EXPECT_TRUE(s2[0].embedding);
    EXPECT_TRUE(s2[1].head);
    EXPECT_TRUE(s2[1].loss);
    EXPECT_EQ(s2[1].first_layer, 10);
    // pp 4: thresholds 5C, 10C, 15C -> 5, 5, 5 layers, the last stage 1 layer and the head (4C).
    auto s4 = pipeline_stages(m, 4, PipelineSplit::nanotron_compute_cost);
    EXPECT_EQ(s4[0].layers, 5);
    EXPECT_EQ(s4[1].layers, 5);
    EXPECT_EQ(s4[2].layers, 5);
    EXPECT_EQ(s4[3].layers, 1);
    EXPECT_TRUE(s4[3].head);
    // pp 8: thresholds 2.5C, 5C, ...: no tie at 2.5C, so stage 0 takes 3 layers (3C > 2.5C).
    EXPECT_EQ(pipeline_stages(m, 8, PipelineSplit::nanotron_compute_cost)[0].layers, 3);
    // Megatron: 16 / 4 layers each.
    for (const auto& st : pipeline_stages(m, 4, PipelineSplit::even_layers)) EXPECT_EQ(st.layers, 4);
}

// FP32GradientAccumulator (optim/gradient_accumulator.py): N = 131072*2048 (tied embedding)
// + 16 * (4*2048^2 + 3*2048*8192 + 2*2048) + 2048 (final norm) = 1,342,244,864 parameters.
TEST(NanotronProfile, ModelStatesOfThe1bModel) {
    const ModelConfig m = nanotron_1b();
    const std::int64_t n = 1'342'244'864;
    {
        const auto st = nanotron_stage_memory(m, nanotron_plan(1, 1, 1, 0), none(), 0);
        ASSERT_EQ(st.size(), 1u);
        EXPECT_EQ(st[0].params_local, n);
        EXPECT_EQ(st[0].bf16_weights, 2 * n);
        EXPECT_EQ(st[0].fp32_grad_buffer, 4 * n);  // build_grad_buffers: fp32, every parameter
        EXPECT_EQ(st[0].fp32_master, 4 * n);       // big_flat_buffer of fp32 weights
        EXPECT_EQ(st[0].adam_moments, 8 * n);      // exp_avg + exp_avg_sq of the fp32 master
        EXPECT_EQ(st[0].ddp_buckets, 0);           // no DistributedDataParallel at dp 1
        EXPECT_EQ(st[0].zero1_gather, 0);
    }
    {
        // ZeRO-1 over dp 4: the optimizer's master + moments shard (ceil(N/4) = 335,561,216), the
        // fp32 gradient buffer stays whole ("independently of ZeRO sharding").
        const auto st = nanotron_stage_memory(m, nanotron_plan(4, 1, 1, 1), none(), 0);
        EXPECT_EQ(st[0].fp32_grad_buffer, 4 * n);
        EXPECT_EQ(st[0].fp32_master, 4 * 335'561'216LL);
        EXPECT_EQ(st[0].adam_moments, 8 * 335'561'216LL);
        EXPECT_EQ(st[0].ddp_buckets, 2 * n);   // DDP reducer buckets, bf16
        // all_gather_coalesced (distributed.py): flat bf16 outputs for every parameter plus a
        // flat copy of this rank's input shard.
        EXPECT_EQ(st[0].zero1_gather, 2 * n + 2 * 335'561'216LL);
        // During the optimizer step: bf16 weights 2n + fp32 grad buffer 4n + DDP buckets 2n +
        // gather 2n, master 4 + moments 8 + input copy 2 B over the shard, fp32 RoPE cos/sin
        // 2 x 4096 x 64 x 4 B.
        EXPECT_EQ(st[0].optimizer_step_allocated, 10 * n + 14 * 335'561'216LL + 2 * 4096 * 64 * 4);
    }
    {
        // pp 2 with a tied embedding: stage 0 = embedding + 10 layers, stage 1 = 6 layers, final
        // norm and its own copy of the tied LM head.
        const std::int64_t layer = 4 * 2048LL * 2048 + 3 * 2048LL * 8192 + 2 * 2048;
        const auto st = nanotron_stage_memory(m, nanotron_plan(1, 1, 2, 0), none(), 0);
        EXPECT_EQ(st[0].params_local, 131072LL * 2048 + 10 * layer);
        EXPECT_EQ(st[1].params_local, 6 * layer + 2048 + 131072LL * 2048);
    }
}

// Per-layer activations read from LlamaDecoderLayer, CausalSelfAttention._forward_training,
// MLP/GLUActivation and the column/row linears (tp_recompute_allgather), tp 1, mbs 1, seq 4096:
// norm inputs 2*(4096*2048*2) + rstd 2*(4096*4) + linear inputs 2*(4096*2048*2)
// + q|k|v 4096*6144*2 + k|v copy 4096*4096*2 + attention output 4096*2048*2 + lse 4096*32*4
// + gate_up, silu, product 4096*4*8192*2 = 436,764,672 bytes.
TEST(NanotronProfile, LayerActivationsAndLogits) {
    const ModelConfig m = nanotron_1b();
    const auto st = nanotron_stage_memory(m, nanotron_plan(1, 1, 1, 0), none(), 0);
    EXPECT_EQ(st[0].activations_per_layer, 436'764'672);
    // _ShardedCrossEntropy: the fp32 logits and their max-shifted fp32 copy, 8 B per logit.
    EXPECT_EQ(st[0].logits_working_set, 4096LL * 131072 * 8);
    // tp 2 with sequence parallelism: 131072 / 2 vocabulary rows per rank.
    const auto st2 = nanotron_stage_memory(m, nanotron_plan(1, 2, 1, 0), none(), 0);
    EXPECT_EQ(st2[0].logits_working_set, 4096LL * 65536 * 8);
    // parallel/utils.py MemoryBuffer: "allgather" (column linears' gathered input,
    // _ColumnLinearAsyncCommunication) and "allgather2" (the row linears' gathered output
    // gradient, _RowLinearAsyncCommunication.backward), each s*b*h bf16 = 4096*2048*2 bytes.
    EXPECT_EQ(st2[0].tp_gather_buffer, 2 * 4096LL * 2048 * 2);
    EXPECT_EQ(st2[0].tp_gather_buffer, 33'554'432);
    // tp 1: no sequence parallelism, no gather buffers.
    EXPECT_EQ(st[0].tp_gather_buffer, 0);
    // 1F1B (engine.py): stage 0 of pp 4 holds 4 micro-batches, the last stage 1.
    const auto st4 = nanotron_stage_memory(m, nanotron_plan(1, 1, 4, 0), none(), 0);
    EXPECT_EQ(st4[0].in_flight, 4);
    EXPECT_EQ(st4[3].in_flight, 1);
}

TEST(NanotronProfile, RefusesWhatNanotronCannotBuildNamingTheFlag) {
    const ModelConfig m = nanotron_1b();
    Plan p = nanotron_plan(1, 1, 1, 2);
    try {
        nanotron_stage_memory(m, p, none(), 0);
        FAIL() << "ZeRO-2 accepted";
    } catch (const InputError& e) {
        EXPECT_EQ(e.subject(), "--zero");
    }
    // More stages than layers, even than nanotron's L + 5 = 21 pipeline blocks, is a layout
    // build_model accepts: the trailing ranks hold no block.
    const auto st = nanotron_stage_memory(m, nanotron_plan(1, 1, 32, 0), none(), 0);
    ASSERT_EQ(st.size(), 32u);
    EXPECT_EQ(st.back().params_local, 0);
    EXPECT_EQ(st.back().blocks.layers, 0);
}

TEST(NanotronProfile, VerdictUsesReservedPlusOutsidePytorch) {
    const ModelConfig m = nanotron_1b();
    const GpuSpec gpu = test::catalog_gpu("h100-sxm-80gb");
    MemoryOptions o;
    o.profile = *profile_by_name("nanotron");
    o.host_pace = HostPace::waits_each_micro_batch;
    const MemoryReport r = evaluate_memory(m, gpu, nanotron_plan(1, 1, 2, 0), o);
    EXPECT_EQ(r.stage_reserved_bytes.size(), 2u);
    EXPECT_GE(r.peak_reserved_bytes, r.peak_allocated_bytes);
    EXPECT_EQ(r.non_pytorch_bytes, gpu.overhead_bytes);  // the spec's documented CUDA context + NCCL figure
    EXPECT_EQ(r.device_peak_bytes, r.peak_reserved_bytes + r.non_pytorch_bytes + r.verdict_margin_bytes);
    EXPECT_FALSE(r.need_at_range_top);
    EXPECT_EQ(r.fits, r.device_peak_bytes <= gpu.memory_bytes);
    // A host that runs ahead is judged at the top of its range too (allocator_model.hpp
    // range_top_need_bytes): the most loaded stage's pool there + the memory outside PyTorch.
    o.host_pace = HostPace::runs_ahead;
    const MemoryReport ahead = evaluate_memory(m, gpu, nanotron_plan(1, 1, 2, 0), o);
    MemoryOptions top = o;
    top.profile.allocator = range_high_constants(o.profile.allocator);
    const MemoryReport high = evaluate_memory(m, gpu, nanotron_plan(1, 1, 2, 0), top);
    const std::int64_t point = ahead.peak_reserved_bytes + ahead.non_pytorch_bytes + ahead.verdict_margin_bytes;
    const std::int64_t at_top = high.peak_reserved_bytes + gpu.overhead_bytes;
    EXPECT_EQ(ahead.device_peak_bytes, std::max(point, at_top));
    EXPECT_EQ(ahead.need_at_range_top, at_top > point);
    EXPECT_EQ(memory_to_json(ahead).at("device_peak_source"), at_top > point ? "range-top" : "point");
}

// peak_bytes is the most tensors held at once (+ overhead), whichever phase holds them; the
// reserved pool the verdict judges may peak at another. Audit of 2026-11-30: Qwen2.5-7B, dp 8,
// grad-acc 4, full recompute, pure bf16: mbs 4 reported 75.36 GB at the loss (its largest pool)
// under mbs 2's 77.60 GB at the end of the backward, which mbs 4 holds more of.
TEST(NanotronProfile, PeakIsTheLargestAllocationOverTheStagesPhases) {
    const ModelConfig m = test::catalog_model("qwen2.5-7b");
    const GpuSpec gpu = test::catalog_gpu("h100-sxm-80gb");
    MemoryOptions o;
    o.profile = *profile_by_name("nanotron");
    o.timeline = true;
    Plan p;
    p.seq = 2048, p.dp = 8, p.grad_acc = 4, p.recompute = Recompute::full, p.precision = Precision::bf16;
    std::int64_t previous = 0;
    for (const std::int64_t mbs : {1, 2, 4}) {
        p.mbs = mbs;
        const MemoryReport r = evaluate_memory(m, gpu, p, o);
        ASSERT_EQ(r.timeline_steady.size(), 4u);
        EXPECT_EQ(r.timeline_steady[0].phase.kind, PhaseKind::output_loss);
        EXPECT_EQ(r.timeline_steady[1].phase.layer, 28);  // backward from the last layer ...
        EXPECT_EQ(r.timeline_steady[2].phase.layer, 1);   // ... to the first
        EXPECT_EQ(r.timeline_steady[3].phase.kind, PhaseKind::optimizer_step);
        std::int64_t most = 0;
        for (const TimelineEntry& e : r.timeline_steady) most = std::max(most, e.bytes.total());
        EXPECT_EQ(r.peak_bytes, most) << "mbs " << mbs;
        EXPECT_EQ(r.peak_allocated_bytes, r.peak_bytes - r.at_peak.overhead);
        EXPECT_GE(r.peak_reserved_bytes, r.peak_allocated_bytes);
        EXPECT_GE(r.peak_bytes, previous) << "mbs " << mbs;
        previous = r.peak_bytes;
        // The pool's own phase, where it is another, is named with its tensors.
        if (mbs == 4) EXPECT_TRUE(r.reserved_peak_phase.has_value());
        if (!r.reserved_peak_phase) continue;
        EXPECT_EQ(r.reserved_peak_phase->kind, PhaseKind::output_loss);
        EXPECT_EQ(r.reserved_peak_tensor_bytes, r.timeline_steady[0].bytes.total() - r.timeline_steady[0].bytes.overhead);
    }
    // Over the stages too: with a pipeline the pool's stage (the loss's, the last) need not hold the
    // most tensors (audit of 2026-11-30: pp 4 reported stage 3's 36.86 GB beside stage 0's 39.98 GB).
    Plan q;
    q.seq = 4096, q.pp = 4, q.mbs = 4, q.tp = 2, q.dp = 2, q.precision = Precision::bf16_mixed_fp32_grads;
    o.timeline = false;
    const MemoryReport r = evaluate_memory(m, gpu, q, o);
    const auto most = std::max_element(r.stage_allocated_bytes.begin(), r.stage_allocated_bytes.end());
    EXPECT_EQ(r.peak_allocated_bytes, *most);
    EXPECT_EQ(r.pipeline_stage, most - r.stage_allocated_bytes.begin());
    EXPECT_EQ(r.peak_reserved_bytes, *std::max_element(r.stage_reserved_bytes.begin(), r.stage_reserved_bytes.end()));
    if (r.reserved_peak_phase)
        EXPECT_EQ(r.stage_reserved_bytes[static_cast<std::size_t>(r.reserved_peak_stage)], r.peak_reserved_bytes);
}

// The loss-stage term: extra reserved bytes per byte of the micro-batch's hidden state
// (4096 tokens x 2048 x 2 B = 16 MiB for the 1B at mbs 1), charged on the stage that runs the
// loss while its tensors are live, and nowhere else.
TEST(NanotronProfile, LossStageTermFollowsTheHiddenStateOnTheLossStageOnly) {
    const ModelConfig m = nanotron_1b();
    AllocatorConstants c;
    c.loss_stage_fragmentation = 100;  // 100 x 16 MiB = 1600 MiB: the loss phases become the peak
    const auto plain = nanotron_stage_memory(m, nanotron_plan(1, 1, 2, 0), none(), 0);
    const auto with = nanotron_stage_memory(m, nanotron_plan(1, 1, 2, 0), c, 0);
    ASSERT_EQ(with.size(), 2u);
    ASSERT_FALSE(with[0].blocks.loss);
    ASSERT_TRUE(with[1].blocks.loss);
    EXPECT_EQ(with[0].reserved_peak, plain[0].reserved_peak);  // stage 0: no loss, no term
    const MemoryBreakdown& b = with[1].at_peak;
    EXPECT_GT(b.logits_and_loss, 0);  // the peak is a phase with the loss live
    const std::int64_t allocated = b.total() - b.overhead;
    const std::int64_t expected = (allocated + 1600LL * kMiB + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB);
    EXPECT_EQ(with[1].reserved_peak, expected);
    // Twice the micro-batch, twice the hidden state: mbs 2 adds 3200 MiB on the same phase.
    Plan p2 = nanotron_plan(1, 1, 2, 0);
    p2.mbs = 2;
    const auto with2 = nanotron_stage_memory(m, p2, c, 0);
    const MemoryBreakdown& b2 = with2[1].at_peak;
    const std::int64_t expected2 = (b2.total() - b2.overhead + 3200LL * kMiB + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB);
    EXPECT_EQ(with2[1].reserved_peak, expected2);
    // A loop that waits for the GPU every micro-batch is not charged the term at all.
    const auto waits = nanotron_stage_memory(m, nanotron_plan(1, 1, 2, 0), c, 0, HostPace::waits_each_micro_batch);
    EXPECT_EQ(waits[1].reserved_peak, plain[1].reserved_peak);
    EXPECT_EQ(waits[1].loss_hidden_at_peak, 0);
}

// The pipeline run-ahead term: per byte of s*b*h (16 MiB for the 1B at mbs 1) x the stage's
// layers x its in-flight micro-batches beyond two. 1F1B at pp 4, grad_acc 8 (engine.py): stage 0
// (5 layers, split above) holds 4 micro-batches -> 16 MiB x 5 x 2 = 160 MiB; stage 1 (5 layers,
// 3 in flight) -> 16 MiB x 5 x 1 = 80 MiB; stage 2 (2 in flight) and stage 3 (1 in flight) -> 0.
TEST(NanotronProfile, PipelineRunaheadTermFollowsLayersAndMicroBatchesBeyondTwo) {
    const ModelConfig m = nanotron_1b();
    AllocatorConstants c;
    c.pipeline_runahead_fragmentation = 1.0;
    const Plan p = nanotron_plan(1, 1, 4, 0);
    const auto plain = nanotron_stage_memory(m, p, none(), 0);
    const auto with = nanotron_stage_memory(m, p, c, 0);
    ASSERT_EQ(with.size(), 4u);
    const std::int64_t expected[] = {160 * kMiB, 80 * kMiB, 0, 0};
    for (std::size_t i = 0; i < 4; ++i) {
        SCOPED_TRACE(i);
        EXPECT_EQ(with[i].reserved_extra.pipeline_runahead_bytes, expected[i]);
        // The activation phases stay the peak (no optimizer-phase peak on stages 0-2).
        if (i < 3) {
            EXPECT_EQ(with[i].runahead_hidden_at_peak, expected[i]);
            EXPECT_EQ(with[i].reserved_peak,
                      (plain[i].allocated_peak + expected[i] + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB));
        }
    }
    // pp 2: at most two micro-batches in flight, nothing charged.
    const auto pp2 = nanotron_stage_memory(m, nanotron_plan(1, 1, 2, 0), c, 0);
    EXPECT_EQ(pp2[0].reserved_extra.pipeline_runahead_bytes, 0);
    // A loop that waits for the GPU every micro-batch: nothing charged either.
    const auto waits = nanotron_stage_memory(m, p, c, 0, HostPace::waits_each_micro_batch);
    EXPECT_EQ(waits[0].reserved_extra.pipeline_runahead_bytes, 0);
    EXPECT_EQ(waits[0].reserved_peak, plain[0].reserved_peak);
}

// c10/cuda/CUDACachingAllocator.cpp: round_size and get_allocation_size.
TEST(AllocatorModel, BlocksAndSegments) {
    EXPECT_EQ(torch_block_bytes(1), 512);
    EXPECT_EQ(torch_block_bytes(512), 512);
    EXPECT_EQ(torch_block_bytes(513), 1024);
    EXPECT_EQ(torch_segment_bytes(1 << 20), 2 << 20);           // small pool: 2 MiB segment
    EXPECT_EQ(torch_segment_bytes((1 << 20) + 1), 20 << 20);    // 1-10 MiB: 20 MiB segment
    EXPECT_EQ(torch_segment_bytes(10 << 20), 10 << 20);         // >= 10 MiB: rounded to 2 MiB
    EXPECT_EQ(torch_segment_bytes((10 << 20) + 1), 12 << 20);
    AllocatorConstants c;
    c.activation_fragmentation = 0.5;
    c.loss_stage_fragmentation = 3.0;
    c.reserved_constant_bytes = 2 << 20;
    // 100 MiB other + 1.5 * 40 MiB activations + 3 * 10 MiB of loss-stage hidden state (not
    // itself allocated) + 2 MiB = 192 MiB.
    EXPECT_EQ(reserved_pool_bytes(140 << 20, reserved_extra(40 << 20, 10 << 20, 0, c)), 192LL << 20);
    // Off the loss stage the same tensors reserve 162 MiB.
    EXPECT_EQ(reserved_pool_bytes(140 << 20, reserved_extra(40 << 20, 0, 0, c)), 162LL << 20);
    // Pipeline run-ahead 0.25 x 32 MiB = 8 MiB more: 170 MiB.
    c.pipeline_runahead_fragmentation = 0.25;
    const ReservedExtra x = reserved_extra(40 << 20, 0, 32 << 20, c);
    EXPECT_EQ(x.pipeline_runahead_bytes, 8 << 20);
    EXPECT_EQ(reserved_pool_bytes(140 << 20, x), 170LL << 20);
    // No constants: allocated rounded up to 2 MiB.
    EXPECT_EQ(reserved_pool_bytes((3 << 20) + 1, reserved_extra(0, 0, 0, AllocatorConstants{})), 4 << 20);
    // The flag's spellings.
    EXPECT_EQ(parse_host_pace("runs-ahead"), HostPace::runs_ahead);
    EXPECT_EQ(parse_host_pace("waits"), HostPace::waits_each_micro_batch);
    EXPECT_EQ(parse_host_pace("wait"), std::nullopt);
    EXPECT_EQ(to_string(HostPace::waits_each_micro_batch), "waits");
}

TEST(AllocatorModel, DefaultProfileKeepsItsVerdictAndReportsReserved) {
    const ModelConfig m = test::catalog_model("llama-3-8b");
    const GpuSpec gpu = test::catalog_gpu("h100-sxm-80gb");
    Plan p;
    p.seq = 4096;
    p.dp = 8;
    p.zero = ZeroStage{1};
    const MemoryReport r = evaluate_memory(m, gpu, p);
    EXPECT_EQ(r.peak_allocated_bytes, r.peak_bytes - r.at_peak.overhead);
    EXPECT_EQ(r.peak_reserved_bytes, (r.peak_allocated_bytes + (2 << 20) - 1) / (2 << 20) * (2 << 20));
    EXPECT_EQ(r.fits, r.peak_bytes <= gpu.memory_bytes);
}

TEST(Profiles, EveryFrameworkHasAProfile) {
    for (const char* name : {"megatron", "nanotron", "torchtitan", "deepspeed", "preflight-runtime", "pytorch"})
        EXPECT_TRUE(profile_by_name(name).has_value()) << name;
    // deepspeed/runtime/zero/config.py reduce_bucket_size 5e8 elements; stage_1_and_2.py's ipg
    // buffer holds them in the 16-bit parameter dtype.
    EXPECT_EQ(profile_by_name("deepspeed")->grad_bucket_bytes, 1'000'000'000);
    EXPECT_EQ(profile_by_name("torchtitan")->grad_bucket_bytes, 0);
}

namespace {
// A torchtitan layout: FSDP (ZeRO-3) over dp when dp > 1.
Plan torchtitan_plan(std::int64_t seq, std::int64_t mbs, std::int64_t grad_acc, std::int64_t dp, std::int64_t pp,
                     Recompute recompute) {
    Plan p;
    p.seq = seq;
    p.mbs = mbs;
    p.grad_acc = grad_acc;
    p.dp = dp;
    p.pp = pp;
    p.zero = ZeroStage{dp > 1 ? 3 : 0};
    p.recompute = recompute;
    return p;
}
// Its benchmark layout for Llama 3.1 8B: seq 8192, local batch 2, selective AC.
Plan torchtitan_8b_selective(std::int64_t dp) { return torchtitan_plan(8192, 2, 1, dp, 1, Recompute::selective); }
}  // namespace

// torchtitan's op-level selective recompute (parallelize_llama.py _apply_ac_to_transformer_block,
// selective_ac_option "op"): per token of llama-3-8b (h 4096, kv 1024, ffn 14336, 32 heads), bf16:
// layer input 8192 + wq output 8192 + wv output 2048 + SDPA output 8192 + log-sum-exp 32*4 = 128
// + w1 output 28672 + w2 output 8192 = 63,616 B; x 8192 x 2 tokens = 1,042,284,544 B per layer.
// tp 8 with SP: 1024 + 1024 + 256 + 1024 + 16 + 3584 + 8192 (w2's full-width partial sum) + 2 x 1024
// (the reduce-scatter outputs) = 17,168 B per token.
TEST(TorchtitanProfile, OpSelectiveRecomputeKeepsWhatItsPolicySaves) {
    const ModelConfig m = test::catalog_model("llama-3-8b");
    // Over FSDP (dp 8, ZeRO-3): bf16 compute. Without FSDP (dp 1) torchtitan runs autocast over
    // fp32 parameters, whose residual stream is fp32 (maybe_enable_amp).
    const Plan p = torchtitan_8b_selective(8);
    const FrameworkProfile tt = *profile_by_name("torchtitan");
    const auto kept = layer_activation_inventory(m, p, tt);
    std::int64_t total = 0;
    for (const auto& t : kept) total += t.bytes;
    EXPECT_EQ(total, 1'042'284'544);
    EXPECT_EQ(kept.size(), 7u);
    Plan p8 = p;
    p8.tp = 8;
    p8.sp = true;
    total = 0;
    for (const auto& t : layer_activation_inventory(m, p8, tt)) total += t.bytes;
    EXPECT_EQ(total, 17'168LL * 16384);
    // The report's per-layer figure is the same sum; Megatron's selective keeps far more.
    const GpuSpec gpu = test::catalog_gpu("h100-sxm-80gb");
    MemoryOptions o;
    o.profile = tt;
    EXPECT_EQ(evaluate_memory(m, gpu, p, o).activations_per_layer_bytes, 1'042'284'544);
    EXPECT_GT(evaluate_memory(m, gpu, p).activations_per_layer_bytes, 2 * 1'042'284'544LL);
}

// Its recompute re-runs the unsaved mm calls (wk, wo, w3), not the attention core: per token
// and layer 2*4096*1024 + 2*4096*4096 + 2*4096*14336 = 159,383,552 FLOPs instead of the core's
// 2 x 2*8192*4096 = 134,217,728 (full-attention convention): 25,165,824 more, x 32 layers x
// 131,072 tokens (seq 8192, mbs 2, dp 8) = 105,553,116,266,496 more hardware FLOPs per step.
TEST(TorchtitanProfile, OpSelectiveRecomputeReRunsTheUnsavedGemms) {
    const ModelConfig m = test::catalog_model("llama-3-8b");
    const GpuSpec gpu = test::catalog_gpu("h100-sxm-80gb");
    const Plan p = torchtitan_8b_selective(8);
    ThroughputOptions base;
    base.attention_flops = AttentionFlops::full;
    const ThroughputOptions tt = throughput_options_for(*profile_by_name("torchtitan"), m, p, base);
    EXPECT_TRUE(tt.selective_op_sac);
    const Throughput a = estimate_throughput(m, gpu, p, base), b = estimate_throughput(m, gpu, p, tt);
    EXPECT_DOUBLE_EQ(b.hardware_flops_per_step - a.hardware_flops_per_step, 105'553'116'266'496.0);
    EXPECT_DOUBLE_EQ(b.model_flops_per_step, a.model_flops_per_step);
    EXPECT_GT(b.step_time_s, a.step_time_s);  // three GEMMs re-run cost more than the attention core
}

// torchtitan with a pipeline (apply_fsdp: reshard_after_forward = False when pp is enabled;
// PyTorch's schedules turn FSDP's gradient sync off until the last micro-batch, which accumulates
// unsharded gradients in fp32). llama-3-8b at pp 2 (16 layers a stage): stage 0 holds the
// embedding 128256*4096 = 525,336,576 + 16 x 218,112,000 (4096*6144 + 4096^2 + 3*4096*14336 +
// 2*4096 per layer) = 4,015,128,576 parameters; stage 1 the 16 layers + final norm 4096 + output
// 525,336,576 = 4,015,132,672. Gathered in bf16: 2 B each; accumulated gradients: 4 B each.
// (Stage 0's count is the same but for the final norm; the test reads the last stage.)
TEST(TorchtitanProfile, PipelineKeepsTheStageGatheredAndAccumulatesUnshardedGradients) {
    const ModelConfig m = test::catalog_model("llama-3-8b");
    const GpuSpec gpu = test::catalog_gpu("h200-sxm-141gb");
    Plan p = torchtitan_plan(4096, 1, 4, 2, 2, Recompute::full);
    MemoryOptions with, without;
    with.profile = *profile_by_name("torchtitan");
    without.profile = with.profile;
    without.profile.fsdp_pp_keeps_params_gathered = false;
    without.profile.fsdp_pp_accumulates_unsharded_grads = false;
    const MemoryReport a = evaluate_memory(m, gpu, p, with), b = evaluate_memory(m, gpu, p, without);
    // Both peak on the last stage at its loss (the fp32 logits of 4096 x 128256), where the
    // resharding wrapper holds only the gathered output layer (525,336,576 x 2 B).
    ASSERT_EQ(a.pipeline_stage, 1);
    ASSERT_EQ(b.pipeline_stage, 1);
    ASSERT_EQ(a.peak_phase.kind, PhaseKind::output_loss);
    ASSERT_EQ(b.peak_phase.kind, PhaseKind::output_loss);
    EXPECT_EQ(a.params_on_gpu, 4'015'132'672);
    EXPECT_EQ(a.at_peak.gradients - b.at_peak.gradients, 4 * 4'015'132'672LL);
    EXPECT_EQ(a.at_peak.buffers - b.at_peak.buffers, 2 * 4'015'132'672LL - 2 * 525'336'576LL);
    // No pipeline: FSDP reshards after forward and syncs every backward, nothing changes.
    p.pp = 1;
    EXPECT_EQ(evaluate_memory(m, gpu, p, with).peak_bytes, evaluate_memory(m, gpu, p, without).peak_bytes);
}

namespace {
// The steady-state timeline entry at the loss (its output+loss phase).
MemoryBreakdown at_loss(const MemoryReport& r) { return test::timeline_at(r, PhaseKind::output_loss).bytes; }
// torchtitan's Table 4 layout for Llama 3.1 70B: FSDP 32 x TP 8 (sequence parallel), local batch 16,
// seq 8192, full AC: 131,072 tokens a rank, 128,256 / 8 = 16,032 vocabulary entries a TP shard.
Plan torchtitan_70b_2d() {
    Plan p = torchtitan_plan(8192, 16, 1, 32, 1, Recompute::full);
    p.tp = 8;
    p.sp = true;
    return p;
}
constexpr std::int64_t kLogits70b = 131'072LL * 16'032;  // 2,101,346,304 logits a rank
}  // namespace

// With TP, torchtitan's loss runs under DTensor's loss_parallel (torch/distributed/tensor/parallel/
// loss.py, _nll_loss_and_log_softmax_backward: the saved log-probabilities, zeros_like, exp's sum
// with it and the product, four fp32 buffers) beside the bf16 logits' segment: 2 + 4 x 4 = 18 B a
// logit, where the unparallel loss holds 2 + 3 x 4 = 14. The LM head (ColwiseParallel with
// input_layouts=Shard(1)) saves its all-gathered input: 131,072 x 8192 x 2 B, not an eighth of it,
// 1,879,048,192 B more.
TEST(TorchtitanProfile, TensorParallelLossHoldsFourFp32BuffersAndTheHeadTheGatheredInput) {
    const ModelConfig m = test::catalog_model("llama-3-70b");
    const GpuSpec gpu = test::catalog_gpu("h100-sxm-80gb");
    MemoryOptions tt, plain_loss, sharded_head;
    tt.profile = *profile_by_name("torchtitan");
    tt.timeline = true;
    plain_loss = tt;
    plain_loss.profile.loss_parallel_fp32_logit_buffers = 0;
    sharded_head = tt;
    sharded_head.profile.head_saves_gathered_input = false;
    const Plan p = torchtitan_70b_2d();
    const MemoryBreakdown a = at_loss(evaluate_memory(m, gpu, p, tt));
    EXPECT_EQ(a.logits_and_loss, 18 * kLogits70b);
    EXPECT_EQ(at_loss(evaluate_memory(m, gpu, p, plain_loss)).logits_and_loss, 14 * kLogits70b);
    EXPECT_EQ(a.activations - at_loss(evaluate_memory(m, gpu, p, sharded_head)).activations, 1'879'048'192);
    // Without TP there is no loss_parallel: 14 B a logit (llama-3-8b, seq 8192, local batch 2:
    // 16,384 x 128,256 = the same 2,101,346,304 logits).
    EXPECT_EQ(at_loss(evaluate_memory(test::catalog_model("llama-3-8b"), gpu, torchtitan_8b_selective(8), tt))
                  .logits_and_loss,
              14 * kLogits70b);
}

// A compiled loss (torchtitan components/loss.py build_cross_entropy_loss with training.compile,
// since April 2025): the fused cross-entropy saves only its input, and its backward writes the
// input gradient (bf16): 2 + 2 = 4 B a logit, 10 B less than eager on the 8B (21,013,463,040 B).
// Profiles whose loss is not PyTorch's eager cross-entropy refuse the option.
TEST(TorchtitanProfile, CompiledLossHoldsTheLogitsAndTheirGradientOnly) {
    const ModelConfig m = test::catalog_model("llama-3-8b");
    const GpuSpec gpu = test::catalog_gpu("h200-sxm-141gb");
    MemoryOptions eager, compiled;
    eager.profile = *profile_by_name("torchtitan");
    eager.timeline = true;
    compiled = eager;
    compiled.compiled_loss = true;
    const Plan p = torchtitan_8b_selective(32);
    const MemoryReport c = evaluate_memory(m, gpu, p, compiled);
    EXPECT_EQ(at_loss(c).logits_and_loss, 4 * kLogits70b);
    EXPECT_EQ(at_loss(evaluate_memory(m, gpu, p, eager)).logits_and_loss - at_loss(c).logits_and_loss,
              21'013'463'040);
    EXPECT_TRUE(c.compiled_loss);
    // Under TP too (inductor fuses the loss_parallel ops alike).
    EXPECT_EQ(at_loss(evaluate_memory(test::catalog_model("llama-3-70b"), gpu, torchtitan_70b_2d(), compiled))
                  .logits_and_loss,
              4 * kLogits70b);
    for (const char* other : {"megatron", "nanotron"}) {
        MemoryOptions o;
        o.profile = *profile_by_name(other);
        o.compiled_loss = true;
        EXPECT_THROW(evaluate_memory(m, gpu, p, o), InputError) << other;
    }
}

// torchtitan's reserved pool: PyTorch's caching allocator as fitted on the nanotron sweep (activation
// fragmentation and constant reserve only; no host run-ahead terms, no verdict margin), and the fit
// judged on reserved + the 1 GiB outside PyTorch. Table 1's 8B layout: the pool is the allocated peak
// + 0.07735 x its activations + 225,495,659 B, rounded up to 2 MiB segments.
TEST(TorchtitanProfile, ReservesWhatTheCachingAllocatorFragmentsAsFittedOnNanotron) {
    const ModelConfig m = test::catalog_model("llama-3-8b");
    const GpuSpec gpu = test::catalog_gpu("h100-sxm-80gb");
    MemoryOptions o;
    o.profile = *profile_by_name("torchtitan");
    const MemoryReport r = evaluate_memory(m, gpu, torchtitan_8b_selective(8), o);
    const AllocatorConstants n = nanotron_allocator_constants();
    ASSERT_DOUBLE_EQ(o.profile.allocator.activation_fragmentation, n.activation_fragmentation);
    EXPECT_EQ(o.profile.allocator.loss_stage_fragmentation, 0.0);
    EXPECT_EQ(o.profile.allocator.pipeline_runahead_fragmentation, 0.0);
    const std::int64_t extra = std::llround(n.activation_fragmentation * static_cast<double>(r.at_peak.activations)) +
                               n.reserved_constant_bytes;
    const std::int64_t segment = 2 * 1024 * 1024;
    EXPECT_EQ(r.peak_reserved_bytes, (r.peak_allocated_bytes + extra + segment - 1) / segment * segment);
    EXPECT_EQ(r.reserved_extra.loss_stage_bytes, 0);
    EXPECT_EQ(r.verdict_margin_bytes, 0);
    EXPECT_EQ(r.device_peak_bytes, r.peak_reserved_bytes + 1'073'741'824);  // the spec's overhead_bytes
    EXPECT_EQ(r.fits, r.device_peak_bytes <= r.capacity_bytes);
}

TEST(Search, PinnedTensorParallelismMaySpanNodes) {
    const ModelConfig m = test::llama_model(4096, 4, 32, 32, 14336, 32000, 4096);  // tp 16 divides 32 heads
    const GpuSpec gpu = test::catalog_gpu("h100-sxm-80gb");  // 8 GPUs per node
    SearchRequest req;
    req.gpus = 16;
    req.gbs_tokens = 16 * 4096;
    req.seq = 4096;
    req.pins.tp = 16;
    EXPECT_NO_THROW(validate_request(m, gpu, req));
}

// nanotron_throughput_options: models/base.py build_model's compute-cost split (layer cost C,
// LM head 4C, total 20C: stage 0 closes after 10 layers = 10C, as PipelineSplit asserts above),
// and async TP collectives only where there is a sequence-parallel TP group
// (scaling_benchmarks.py: tp_linear_async_communication with REDUCE_SCATTER).
TEST(NanotronProfile, ThroughputOptions) {
    const ModelConfig m = nanotron_1b();
    const ThroughputOptions o = nanotron_throughput_options(m, nanotron_plan(1, 2, 2, 0));
    EXPECT_EQ(o.stage_layers, (std::vector<std::int64_t>{10, 6}));
    EXPECT_TRUE(o.tp_async_overlap);
    EXPECT_EQ(o.grad_bucket_bytes, 25LL * 1024 * 1024);  // ddp_bucket_cap_mb 25
    const ThroughputOptions o1 = nanotron_throughput_options(m, nanotron_plan(8, 1, 1, 0));
    EXPECT_TRUE(o1.stage_layers.empty());
    EXPECT_FALSE(o1.tp_async_overlap);
}// `plan --framework nanotron` ranks with nanotron's step-time settings: the profile's
// adjust_throughput sets the same split, async TP and buckets as nanotron_throughput_options,
// keeping the caller's attention-FLOPs convention and breakdown; the default profile keeps
// the caller's options untouched.
TEST(NanotronProfile, SearchAndCliUseItsThroughputOptions) {
    const ModelConfig m = nanotron_1b();
    const Plan p = nanotron_plan(1, 2, 2, 0);
    ThroughputOptions base;
    base.attention_flops = AttentionFlops::causal;
    base.breakdown = true;
    const ThroughputOptions o = throughput_options_for(*profile_by_name("nanotron"), m, p, base);
    EXPECT_EQ(o.stage_layers, (std::vector<std::int64_t>{10, 6}));
    EXPECT_TRUE(o.tp_async_overlap);
    EXPECT_EQ(o.attention_flops, AttentionFlops::causal);
    EXPECT_TRUE(o.breakdown);
    const ThroughputOptions d = throughput_options_for(*profile_by_name("megatron"), m, p, base);
    EXPECT_TRUE(d.stage_layers.empty());
    EXPECT_FALSE(d.tp_async_overlap);

    // The search's top candidate under the nanotron profile carries the step time of those options.
    SearchRequest req;
    req.gpus = 16;
    req.gbs_tokens = 64 * 4096;
    req.seq = 4096;
    req.pins.pp = 2;
    req.memory.profile = *profile_by_name("nanotron");
    const GpuSpec gpu = test::catalog_gpu("h100-sxm-80gb");
    const SearchResult r = search_plans(m, gpu, req);
    ASSERT_FALSE(r.candidates.empty());
    const Candidate& c = r.candidates.front();
    ThroughputOptions expect = nanotron_throughput_options(m, c.plan);
    expect.breakdown = true;
    EXPECT_DOUBLE_EQ(c.throughput.step_time_s, estimate_throughput(m, gpu, c.plan, expect).step_time_s);
}

// DeepSpeed's pure bf16 (bf16_master_weights_and_grads + bf16_optimizer_states, docs/_pages/
// config-json.md): bf16 weights (2 B), a bf16 master partition (2 B) and two bf16 Adam moments
// (4 B) over the ZeRO-1 shard: 2 + 6 / 8 = 2.75 B per parameter at dp 8 (the gradients' lifetime:
// test_deepspeed_memory.cpp);
// DeepSpeed asserts a ZeRO stage for it; offloaded, the host keeps the bf16 master, moments and
// gradient partition, 2 + 4 + 2 = 8 B per parameter of the shard, beside stage_1_and_2.py's
// param_buffer_of_bit16_for_cpu_offload_groups (2 B x the shard) and temp_grad_buffer_for_cpu_offload
// (2 B x the largest parameter, 525,336,576): per node of 8 GPUs, 8 x (10 x 1,003,782,656 +
// 1,050,673,152) = 88,707,997,696 B.
TEST(Frameworks, DeepSpeedPureBf16KeepsABf16MasterPartition) {
    const ModelConfig m = test::catalog_model("llama-3-8b");
    const GpuSpec g = test::catalog_gpu("h200-sxm-141gb");
    Plan p;
    p.seq = 1024, p.dp = 8, p.zero = ZeroStage{1}, p.precision = Precision::bf16;
    MemoryOptions o;
    o.profile = deepspeed_profile();
    const MemoryBreakdown b = evaluate_memory(m, g, p, o).at_peak;
    const double params = 8'030'261'248.0;
    EXPECT_NEAR(static_cast<double>(b.weights + b.master_weights + b.optimizer_states) / params, 2.0 + 6.0 / 8, 1e-6);
    p.offload = Offload::optimizer;
    EXPECT_EQ(evaluate_memory(m, g, p, o).host_bytes_per_node, 88'707'997'696);
    p.offload = Offload::none;
    p.zero = ZeroStage{0};
    EXPECT_THROW((void)evaluate_memory(m, g, p, o), InputError);
}

// Megatron-LM docs/user-guide/features/dist_optimizer.md: bf16 parameters with fp32 (main)
// gradients take 18 B per parameter, 6 + 12/d with the distributed optimizer: 2 (bf16 weight) +
// 4 (fp32 main gradient) + 4 (fp32 master) + 8 (Adam moments). nanotron's accumulate_grad_in_fp32
// keeps its bf16 gradient beside the fp32 accumulator: 20 B.
TEST(Frameworks, MegatronKeepsOneFp32MainGradientPerParameter) {
    const ModelConfig m = test::catalog_model("llama-3-8b");
    const GpuSpec g = test::catalog_gpu("h200-sxm-141gb");
    Plan p;
    p.seq = 1024, p.dp = 8, p.precision = Precision::bf16_mixed_fp32_grads;
    auto states_per_param = [&](const FrameworkProfile& prof, int zero) {
        p.zero = ZeroStage{zero};
        MemoryOptions o;
        o.profile = prof;
        const MemoryBreakdown b = evaluate_memory(m, g, p, o).at_peak;
        const double params = 8'030'261'248.0;
        return static_cast<double>(b.weights + b.gradients + b.master_weights + b.optimizer_states) / params;
    };
    const FrameworkProfile megatron = *profile_by_name("megatron");
    EXPECT_NEAR(states_per_param(megatron, 0), 18.0, 1e-6);
    EXPECT_NEAR(states_per_param(megatron, 1), 6.0 + 12.0 / 8, 1e-6);
    EXPECT_NEAR(states_per_param(*profile_by_name("nanotron"), 0), 20.0, 1e-6);
    p.precision = Precision::bf16_mixed;  // --grad-reduce-in-bf16: bf16 main gradients
    EXPECT_NEAR(states_per_param(megatron, 0), 16.0, 1e-6);
    // torchtitan's training.dtype "bfloat16" keeps parameters, gradients and optimizer states in
    // bf16 (config/job_config.py): 2 + 2 + 2 x 2 = 8 B, fully sharded over dp 8 (ZeRO-3) = 1 B.
    p.precision = Precision::bf16;
    EXPECT_NEAR(states_per_param(*profile_by_name("torchtitan"), 3), 8.0 / 8, 1e-3);
    // fp32 moments elsewhere; Megatron-FSDP's ZeRO-3 also keeps the embedding, the LM head (2 x
    // 128,256 x 4,096) and the final norm (4,096) gathered, 2 B each: 2 x 1,050,677,248 B.
    EXPECT_NEAR(states_per_param(megatron, 3), (2.0 + 2 + 8) / 8 + 2.0 * 1'050'677'248 / 8'030'261'248, 1e-3);
    // ... and on the extended path too (expert parallelism, offload, LoRA: extended_stage_states).
    const ModelConfig mx = test::catalog_model("mixtral-8x7b");
    Plan e = p;
    e.zero = ZeroStage{3};
    MemoryOptions tt;
    tt.profile = *profile_by_name("torchtitan");
    const double ep1 = static_cast<double>(evaluate_memory(mx, g, e, tt).at_peak.optimizer_states);
    e.ep = 2;
    const double ep2 = static_cast<double>(evaluate_memory(mx, g, e, tt).at_peak.optimizer_states);
    EXPECT_LT(ep2, ep1 * 1.01) << "bf16 moments at ep 2 as at ep 1";
}

// --framework preflight-runtime sees the GPU with the runtime's own constants (the spec's
// "runtime" block: the non-tensor memory measured on an H100 in cudaMemGetInfo's book, its
// fitted efficiency), the same as `preflight run` predicts with; other profiles see the generic
// spec. The block's pool slack is not the profile's: the runtime's arena keeps none.
TEST(Frameworks, RuntimeProfileUsesTheSpecsRuntimeBlock) {
    const GpuSpec h100 = test::catalog_gpu("h100-sxm-80gb");
    ASSERT_TRUE(h100.runtime.has_value());
    FrameworkProfile runtime = runtime_profile();
    const GpuSpec seen = gpu_for_profile(h100, runtime);
    EXPECT_EQ(seen.overhead_bytes, h100.runtime->overhead_bytes);
    // The CUDA context alone measured 548,995,072 B (523.6 MiB) on the H100 and the H200, plus
    // 12 MiB of cuBLASLt and cuDNN (data/measurements/*/llama-3.2-1b_s2048_b4_none_bf16-mixed_flash.json,
    // measured.driver): between 512 MiB and the generic 1 GiB.
    EXPECT_GT(seen.overhead_bytes, 512 * kMiB);
    EXPECT_LT(seen.overhead_bytes, h100.overhead_bytes);
    EXPECT_EQ(seen.efficiency.gemm_max_fraction_of_peak, h100.runtime->efficiency.gemm_max_fraction_of_peak);
    EXPECT_GT(h100.runtime->full_recompute_pool_slack_fraction, 0.0);
    EXPECT_EQ(runtime.full_recompute_pool_slack_fraction, 0.0);
    FrameworkProfile torch = pytorch_profile();
    const GpuSpec generic = gpu_for_profile(h100, torch);
    EXPECT_EQ(generic.overhead_bytes, h100.overhead_bytes);
    EXPECT_EQ(generic.efficiency.gemm_max_fraction_of_peak, h100.efficiency.gemm_max_fraction_of_peak);
    EXPECT_EQ(torch.full_recompute_pool_slack_fraction, 0.0);
    // A spec without the block: unchanged.
    GpuSpec bare = h100;
    bare.runtime.reset();
    FrameworkProfile again = runtime_profile();
    EXPECT_EQ(gpu_for_profile(bare, again).overhead_bytes, h100.overhead_bytes);
}

// The runtime runs fp32, bf16-mixed, bf16-mixed-fp32-grads, bf16 and fp8-mixed (tensorwise): a
// search under its profile never proposes fp16-mixed, which the H100 spec publishes a peak for,
// nor an fp8 plan the runtime refuses.
TEST(Frameworks, RuntimeProfileSearchesOnlyThePrecisionsTheRuntimeRuns) {
    const ModelConfig m = test::catalog_model("llama-3.2-1b");
    SearchRequest r;
    r.gpus = 1;
    r.gbs_tokens = 8192;
    r.seq = 2048;
    r.top_k = 100;
    r.memory.profile = runtime_profile();
    const GpuSpec gpu = gpu_for_profile(test::catalog_gpu("h100-sxm-80gb"), r.memory.profile);
    const SearchResult res = search_plans(m, gpu, r);
    ASSERT_FALSE(res.candidates.empty());
    bool fp8 = false;
    for (const auto& c : res.candidates) {
        EXPECT_NE(c.plan.precision, Precision::fp16_mixed);
        if (c.plan.precision == Precision::fp8_mixed) {
            fp8 = true;
            EXPECT_EQ(c.plan.fp8_scaling, Fp8Scaling::tensorwise);
        }
    }
    EXPECT_TRUE(fp8);
    // The runtime's fp8 rule is the profile's: rowwise scaling is refused naming --fp8-scaling.
    Plan p;
    p.seq = 2048;
    p.precision = Precision::fp8_mixed;
    p.fp8_scaling = Fp8Scaling::rowwise;
    MemoryOptions mo;
    mo.profile = runtime_profile();
    try {
        evaluate_memory(m, gpu, p, mo);
        ADD_FAILURE() << "the runtime profile evaluated fp8-mixed with rowwise scaling";
    } catch (const InputError& e) {
        EXPECT_EQ(e.subject(), "--fp8-scaling");
    }
}

// host_wait_probability: the logistic function of the same logit, 1 / (1 + e^-logit); with the
// constants below, 0.5 at logit 0 and 1 / (1 + e^-1) = 0.7310586 at logit 1 (by hand). The
// committed nanotron model at 32 nodes with tp 8: -5.93860 + 1.11862 x 5 = -0.3455, so 0.41447.
TEST(AllocatorModel, HostWaitProbabilityIsTheModelsLogistic) {
    const ModelConfig m = test::catalog_model("llama-3-8b");
    GpuSpec gpu = test::catalog_gpu("h100-sxm-80gb");
    gpu.gpus_per_node = 8;
    FrameworkProfile nanotron = *profile_by_name("nanotron");
    Plan p;
    p.seq = 4096;
    p.tp = 8;
    p.sp = true;
    p.grad_acc = 4;
    p.dp = 32;  // 256 GPUs = 32 nodes
    p.precision = Precision::bf16_mixed_fp32_grads;
    ASSERT_TRUE(host_wait_probability(m, gpu, p, nanotron));
    EXPECT_NEAR(*host_wait_probability(m, gpu, p, nanotron), 0.41447, 1e-4);
    MemoryOptions o;
    o.profile = nanotron;
    const MemoryReport r = evaluate_memory(m, gpu, p, o);
    ASSERT_TRUE(r.host_wait_probability);
    EXPECT_NEAR(*r.host_wait_probability, 0.41447, 1e-4);
    EXPECT_NEAR(memory_to_json(r).at("host_wait_probability").get<double>(), 0.41447, 1e-4);
    o.host_pace = HostPace::runs_ahead;  // stated: no probability is reported
    EXPECT_TRUE(memory_to_json(evaluate_memory(m, gpu, p, o)).at("host_wait_probability").is_null());
    nanotron.allocator.pace = {-6.0, 1.0, 2.0, -1.0};
    p.pp = 2;  // 512 GPUs = 64 nodes: -6 + 6 = 0
    EXPECT_DOUBLE_EQ(*host_wait_probability(m, gpu, p, nanotron), 0.5);
    EXPECT_EQ(expected_host_pace(m, gpu, p, nanotron), HostPace::runs_ahead);  // a wait only above 0.5
    p.dp = 64;  // 128 nodes: -6 + 7 = 1
    EXPECT_NEAR(*host_wait_probability(m, gpu, p, nanotron), 0.7310586, 1e-7);
    EXPECT_FALSE(host_wait_probability(m, gpu, p, *profile_by_name("megatron")));  // no fitted model
}

// expected_host_pace: the profile's host-pace model, logit = a + b log2(nodes)
// + c log2(max(1, tp / GPUs per node)) [pp > 1], waits when the logit is positive. Constants
// chosen so the figures come by hand: a = -6, b = 1, c = 2, 8 GPUs per node.
TEST(AllocatorModel, ExpectedHostPaceFollowsTheLayoutModel) {
    const ModelConfig m = test::catalog_model("llama-3-8b");
    GpuSpec gpu = test::catalog_gpu("h100-sxm-80gb");
    gpu.gpus_per_node = 8;
    FrameworkProfile nanotron = *profile_by_name("nanotron");
    nanotron.allocator.pace = {-6.0, 1.0, 2.0, -1.0};
    Plan p;
    p.seq = 4096;
    p.tp = 8;
    p.sp = true;
    p.pp = 2;
    p.grad_acc = 4;
    p.dp = 32;  // 512 GPUs = 64 nodes: -6 + 6 + 2 log2(1) = 0, not above 0
    EXPECT_EQ(expected_host_pace(m, gpu, p, nanotron), HostPace::runs_ahead);
    p.dp = 64;  // 128 nodes: -6 + 7 = 1
    EXPECT_EQ(expected_host_pace(m, gpu, p, nanotron), HostPace::waits_each_micro_batch);
    p.tp = 32;
    p.dp = 1;  // 64 GPUs = 8 nodes, tp over 4 nodes in a pipeline: -6 + 3 + 2 x 2 = 1
    EXPECT_EQ(expected_host_pace(m, gpu, p, nanotron), HostPace::waits_each_micro_batch);
    p.pp = 1;
    p.dp = 2;  // 8 nodes, tp over 4 nodes without a pipeline: -6 + 3 - 1 x 2 = -5
    EXPECT_EQ(expected_host_pace(m, gpu, p, nanotron), HostPace::runs_ahead);
    p.dp = 32;  // 128 nodes: -6 + 7 - 2 = -1, where tp 8 would wait (-6 + 7 = 1, above)
    EXPECT_EQ(expected_host_pace(m, gpu, p, nanotron), HostPace::runs_ahead);
    p.dp = 64;  // 256 nodes: -6 + 8 - 2 = 0, not above 0
    EXPECT_EQ(expected_host_pace(m, gpu, p, nanotron), HostPace::runs_ahead);
    p.dp = 128;  // 512 nodes: -6 + 9 - 2 = 1
    EXPECT_EQ(expected_host_pace(m, gpu, p, nanotron), HostPace::waits_each_micro_batch);
    p.tp = 16;
    p.pp = 2;
    p.dp = 2;  // 64 GPUs = 8 nodes, tp over 2 nodes: -6 + 3 + 2 = -1
    EXPECT_EQ(expected_host_pace(m, gpu, p, nanotron), HostPace::runs_ahead);
    // A part-filled node counts as a node; tp 12 on 8-GPU nodes spans 1.5 of them.
    const auto x = host_pace_inputs(12, 12, 2, 8);
    EXPECT_DOUBLE_EQ(x[0], 1.0);
    EXPECT_DOUBLE_EQ(x[1], 1.0);  // 2 nodes
    EXPECT_NEAR(x[2], 0.5849625007211562, 1e-12);  // log2(1.5)
    EXPECT_DOUBLE_EQ(x[3], 0.0);                               // a pipeline: not the single-stage input
    EXPECT_DOUBLE_EQ(host_pace_inputs(12, 12, 1, 8)[2], 0.0);  // no pipeline
    EXPECT_NEAR(host_pace_inputs(12, 12, 1, 8)[3], 0.5849625007211562, 1e-12);
    // A profile without a fitted model expects PyTorch's default whatever the layout.
    p.dp = 64;
    EXPECT_EQ(expected_host_pace(m, gpu, p, FrameworkProfile{}), HostPace::runs_ahead);
}

// The nanotron profile's report gives the range the pool can take (allocator_model.hpp
// range_low_constants, range_high_constants): from the host waiting with every freed block reused
// (the tensors alone, in 2 MiB segments) to the host running ahead with the reserve terms at their
// upper envelope; the pace the point was made at and whether that was expected or given; and a
// verdict by the range.
TEST(AllocatorModel, NanotronReportsTheRangeBetweenThePaces) {
    const ModelConfig m = test::catalog_model("llama-3-8b");
    const GpuSpec gpu = test::catalog_gpu("h100-sxm-80gb");
    MemoryOptions o;
    o.profile = *profile_by_name("nanotron");
    Plan p;
    p.seq = 4096;
    p.tp = 2;
    p.sp = true;
    p.pp = 4;
    p.dp = 1;
    p.grad_acc = 16;
    p.mbs = 2;
    p.precision = Precision::bf16_mixed_fp32_grads;  // nanotron's accumulate_grad_in_fp32
    const MemoryReport r = evaluate_memory(m, gpu, p, o);
    ASSERT_TRUE(r.device_peak_low_bytes && r.device_peak_high_bytes);
    EXPECT_TRUE(r.host_pace_expected);
    EXPECT_EQ(r.host_pace, HostPace::runs_ahead);  // one node: the committed pace model expects no wait
    EXPECT_GT(*r.device_peak_high_bytes, r.device_peak_bytes);  // the upper envelope is above the median fit
    o.host_pace = HostPace::waits_each_micro_batch;
    const MemoryReport w = evaluate_memory(m, gpu, p, o);
    EXPECT_FALSE(w.host_pace_expected);
    EXPECT_LT(*r.device_peak_low_bytes, w.device_peak_bytes);  // no fragmentation below the waiting point
    // The range does not depend on the pace the point was made at.
    EXPECT_EQ(*w.device_peak_low_bytes, *r.device_peak_low_bytes);
    EXPECT_EQ(*w.device_peak_high_bytes, *r.device_peak_high_bytes);
    // Each end is its own evaluation: the low end holds the tensors alone, rounded to 2 MiB segments.
    MemoryOptions ends = o;
    ends.profile.allocator = range_low_constants(o.profile.allocator);
    const MemoryReport low = evaluate_memory(m, gpu, p, ends);
    EXPECT_EQ(low.device_peak_bytes, *r.device_peak_low_bytes);
    EXPECT_EQ(*r.reserved_low_bytes, (low.peak_allocated_bytes + kTorchRoundLargeBytes - 1) / kTorchRoundLargeBytes *
                                          kTorchRoundLargeBytes);
    ends.host_pace = HostPace::runs_ahead;
    ends.profile.allocator = range_high_constants(o.profile.allocator);
    EXPECT_EQ(evaluate_memory(m, gpu, p, ends).device_peak_bytes, *r.device_peak_high_bytes);
    // The verdict by range, with the capacity moved across it.
    MemoryReport v = r;
    v.capacity_bytes = *r.device_peak_high_bytes;
    EXPECT_EQ(memory_verdict(v), "fits");
    v.capacity_bytes = *r.device_peak_high_bytes - 1;
    EXPECT_EQ(memory_verdict(v), "may-not-fit");
    v.capacity_bytes = *r.device_peak_low_bytes - 1;
    EXPECT_EQ(memory_verdict(v), "does-not-fit");
    // Profiles without a pace-dependent allocator model have no range; their verdict is fits or not.
    const MemoryReport d = evaluate_memory(m, gpu, p);
    EXPECT_FALSE(d.device_peak_low_bytes);
    EXPECT_EQ(memory_verdict(d), d.fits ? "fits" : "does-not-fit");
}

// The figure a fit is judged on and the free memory `preflight memory` prints for a plan that
// fits (memory.hpp fit_bytes, free_bytes), on a report made by hand: 80 GiB of capacity, a peak
// of 20 GiB, a device need of 24 GiB inside the range 21 ... 31 GiB. A profile that judges the
// peak: 80 - 20 = 60 GiB free; one that judges the device need, from the top of the range:
// 80 - 31 = 49 GiB; the same without a range: 80 - 24 = 56 GiB. nanotron and torchtitan judge the
// device need, megatron the peak.
TEST(AllocatorModel, FreeMemoryIsCountedFromWhatTheVerdictWeighs) {
    constexpr std::int64_t GiB = std::int64_t{1} << 30;
    MemoryReport r;
    r.capacity_bytes = 80 * GiB, r.peak_bytes = 20 * GiB, r.device_peak_bytes = 24 * GiB;
    r.device_peak_low_bytes = 21 * GiB, r.device_peak_high_bytes = 31 * GiB;
    FrameworkProfile peak, need;
    need.verdict_on_reserved = true;
    EXPECT_EQ(fit_bytes(r, peak), 20 * GiB);
    EXPECT_EQ(free_bytes(r, peak), 60 * GiB);
    EXPECT_EQ(fit_bytes(r, need), 31 * GiB);
    EXPECT_EQ(free_bytes(r, need), 49 * GiB);
    r.device_peak_low_bytes.reset(), r.device_peak_high_bytes.reset();
    EXPECT_EQ(free_bytes(r, need), 56 * GiB);
    EXPECT_TRUE(profile_by_name("nanotron")->verdict_on_reserved);
    EXPECT_TRUE(profile_by_name("torchtitan")->verdict_on_reserved);
    EXPECT_FALSE(profile_by_name("megatron")->verdict_on_reserved);
}

// An unsure pace (allocator_model.hpp unsure_pace_band, 0.15 in the nanotron fit): the pools of
// the two paces weighted by the wait probability. By hand: 10 GiB running ahead, 6 GiB waiting, a
// wait 25 % likely: 0.75 x 10 + 0.25 x 6 = 9 GiB. Llama-3-8B at tp 8 on 32 nodes: the host-pace
// model's logit is -5.93860 + 1.11862 x log2(32) = -0.3455, a wait 1 / (1 + e^0.3455) = 41.4 %
// likely, inside [0.15, 0.85]: runs ahead, its point pool 0.586 x running ahead + 0.414 x waiting.
TEST(AllocatorModel, AnUnsurePaceMixesBothPacesPools) {
    constexpr std::int64_t GiB = std::int64_t{1} << 30;
    EXPECT_EQ(mix_unsure_pace(10 * GiB, 6 * GiB, 0.25), 9 * GiB);
    EXPECT_TRUE(unsure_pace(0.15, 0.15));
    EXPECT_TRUE(unsure_pace(0.85, 0.15));
    EXPECT_FALSE(unsure_pace(0.149, 0.15));
    EXPECT_FALSE(unsure_pace(0.5, 0.5));  // a band of 0.5: never
    const ModelConfig m = test::catalog_model("llama-3-8b");
    const GpuSpec gpu = test::catalog_gpu("h100-sxm-80gb");
    MemoryOptions o;
    o.profile = *profile_by_name("nanotron");
    ASSERT_DOUBLE_EQ(o.profile.allocator.unsure_pace_band, 0.15);
    Plan p;
    p.seq = 4096;
    p.tp = 8;
    p.sp = true;
    p.dp = 32;
    p.zero = zero_optimizer_states;
    p.precision = Precision::bf16_mixed_fp32_grads;
    const MemoryReport r = evaluate_memory(m, gpu, p, o);
    ASSERT_TRUE(r.host_wait_probability);
    const double wait = 1.0 / (1.0 + std::exp(5.93860 - 1.11862 * 5));
    EXPECT_NEAR(*r.host_wait_probability, wait, 1e-4);
    EXPECT_EQ(r.host_pace, HostPace::runs_ahead);
    EXPECT_TRUE(r.unsure_pace_mix);
    MemoryOptions stated = o;
    stated.host_pace = HostPace::runs_ahead;
    const MemoryReport ahead = evaluate_memory(m, gpu, p, stated);
    stated.host_pace = HostPace::waits_each_micro_batch;
    const MemoryReport waits = evaluate_memory(m, gpu, p, stated);
    EXPECT_FALSE(ahead.unsure_pace_mix);  // a stated pace is taken as stated
    EXPECT_GT(ahead.peak_reserved_bytes, waits.peak_reserved_bytes + 512 * (GiB >> 10));  // the loss-stage reserve
    const double p_wait = *r.host_wait_probability;
    EXPECT_EQ(r.peak_reserved_bytes, std::llround((1 - p_wait) * static_cast<double>(ahead.peak_reserved_bytes) +
                                                  p_wait * static_cast<double>(waits.peak_reserved_bytes)));
    EXPECT_GE(r.device_peak_bytes, r.peak_reserved_bytes + r.non_pytorch_bytes + r.verdict_margin_bytes);
    EXPECT_LE(*r.reserved_low_bytes, r.peak_reserved_bytes);  // the point stays inside the range
    EXPECT_GE(*r.reserved_high_bytes, r.peak_reserved_bytes);
    EXPECT_TRUE(memory_to_json(r).at("unsure_pace_mix").get<bool>());
    EXPECT_FALSE(memory_to_json(ahead).at("unsure_pace_mix").get<bool>());
}

// pool_outgrows_device: the top of the range plus the memory outside PyTorch over the capacity.
// A plan expected to run ahead whose pool would outgrow the device is given at the waiting pace
// (the allocator frees its cache and the host waits), its device need and verdict at the
// running-ahead pool; a pace the user states is taken as stated.
TEST(AllocatorModel, APoolThatOutgrowsTheDeviceIsGivenAtTheWaitingPace) {
    constexpr std::int64_t GiB = std::int64_t{1} << 30;
    EXPECT_FALSE(pool_outgrows_device(79 * GiB, GiB, 80 * GiB));  // exactly full still fits
    EXPECT_TRUE(pool_outgrows_device(79 * GiB + 1, GiB, 80 * GiB));
    const ModelConfig m = test::catalog_model("llama-3-8b");
    const GpuSpec gpu = test::catalog_gpu("h100-sxm-80gb");
    MemoryOptions o;
    o.profile = *profile_by_name("nanotron");
    Plan p;  // the sweep's 8B at tp 8 on 16 nodes, mbs 16: about 23 GiB of loss-stage reserve when running ahead
    p.seq = 4096;
    p.tp = 8;
    p.sp = true;
    p.dp = 16;
    p.mbs = 16;
    p.zero = zero_optimizer_states;
    p.precision = Precision::bf16_mixed_fp32_grads;
    ASSERT_EQ(expected_host_pace(m, gpu, p, o.profile), HostPace::runs_ahead);
    MemoryOptions top = o;
    top.host_pace = HostPace::runs_ahead;
    top.profile.allocator = range_high_constants(o.profile.allocator);
    const MemoryReport high = evaluate_memory(m, gpu, p, top);
    ASSERT_GT(high.peak_reserved_bytes + high.non_pytorch_bytes, gpu.memory_bytes);  // the premise
    const MemoryReport r = evaluate_memory(m, gpu, p, o);
    MemoryOptions stated = o;
    stated.host_pace = HostPace::runs_ahead;
    const MemoryReport ahead = evaluate_memory(m, gpu, p, stated);
    stated.host_pace = HostPace::waits_each_micro_batch;
    const MemoryReport waits = evaluate_memory(m, gpu, p, stated);
    EXPECT_TRUE(r.allocator_flush);
    EXPECT_TRUE(r.host_pace_expected);
    EXPECT_TRUE(r.host_wait_probability);  // still the expected pace's odds
    EXPECT_EQ(r.host_pace, HostPace::waits_each_micro_batch);
    EXPECT_EQ(r.peak_reserved_bytes, waits.peak_reserved_bytes);
    EXPECT_EQ(r.stage_reserved_bytes, waits.stage_reserved_bytes);
    ASSERT_TRUE(r.reserved_running_ahead_bytes);
    EXPECT_EQ(*r.reserved_running_ahead_bytes, ahead.peak_reserved_bytes);
    EXPECT_EQ(r.device_peak_bytes, ahead.device_peak_bytes);
    EXPECT_EQ(r.fits, ahead.fits);
    EXPECT_FALSE(r.fits);  // the running-ahead need is over the device
    EXPECT_EQ(*r.device_peak_high_bytes, high.device_peak_bytes);  // the range is the same
    EXPECT_LT(r.peak_reserved_bytes, *r.reserved_running_ahead_bytes - 20 * GiB);  // the loss-stage reserve is gone
    EXPECT_FALSE(ahead.allocator_flush);  // a stated pace stays as stated
    EXPECT_FALSE(waits.allocator_flush);
    const nlohmann::json j = memory_to_json(r);
    EXPECT_EQ(j.at("host_pace_source"), "allocator-flush");
    EXPECT_EQ(j.at("reserved_running_ahead_bytes").get<std::int64_t>(), ahead.peak_reserved_bytes);
    // One sequence per micro-batch: the running-ahead pool stays under the device, no flush.
    p.mbs = 1;
    p.grad_acc = 16;
    const MemoryReport small = evaluate_memory(m, gpu, p, o);
    EXPECT_FALSE(small.allocator_flush);
    EXPECT_EQ(small.host_pace, HostPace::runs_ahead);
    EXPECT_TRUE(memory_to_json(small).at("reserved_running_ahead_bytes").is_null());
}

TEST(AllocatorModel, PaceRulesAreTheTopTheFlushAndTheMix) {
    // The planner (pace_range.cpp) and the validation's nanotron path apply these rules; by hand,
    // with a 20 GiB pool at the top of the range, 1 GiB outside PyTorch and an unsure band of 0.15.
    constexpr std::int64_t GiB = std::int64_t{1} << 30;
    AllocatorConstants c;
    c.unsure_pace_band = 0.15;
    const auto ahead = HostPace::runs_ahead, waits = HostPace::waits_each_micro_batch;
    // Given (not expected), running ahead on an 80 GiB device: judged at 20 + 1 GiB, no flush, no mix.
    PaceRules r = pace_rules(ahead, false, 0.5, c, 20 * GiB, GiB, 80 * GiB);
    EXPECT_EQ(r.top_need_bytes, 21 * GiB);
    EXPECT_FALSE(r.flush);
    EXPECT_FALSE(r.mix);
    // Expected and unsure (p = 0.5 inside [0.15, 0.85]) on the same device: mixed.
    r = pace_rules(ahead, true, 0.5, c, 20 * GiB, GiB, 80 * GiB);
    EXPECT_EQ(r.top_need_bytes, 21 * GiB);
    EXPECT_FALSE(r.flush);
    EXPECT_TRUE(r.mix);
    // On a 16 GiB device the top (21 GiB) outgrows it: the flush, which the mix gives way to.
    r = pace_rules(ahead, true, 0.5, c, 20 * GiB, GiB, 16 * GiB);
    EXPECT_TRUE(r.flush);
    EXPECT_FALSE(r.mix);
    // A sure pace (p = 0.9, outside the band), or a band of 0.5 (no mix), or no probability: no mix.
    EXPECT_FALSE(pace_rules(ahead, true, 0.9, c, 20 * GiB, GiB, 80 * GiB).mix);
    EXPECT_FALSE(pace_rules(ahead, true, std::nullopt, c, 20 * GiB, GiB, 80 * GiB).mix);
    AllocatorConstants never = c;
    never.unsure_pace_band = 0.5;
    EXPECT_FALSE(pace_rules(ahead, true, 0.5, never, 20 * GiB, GiB, 80 * GiB).mix);
    // A waiting host has no top and no flush, whatever its pool at the top; unsure and expected, it mixes.
    r = pace_rules(waits, true, 0.3, c, 20 * GiB, GiB, 16 * GiB);
    EXPECT_EQ(r.top_need_bytes, 0);
    EXPECT_FALSE(r.flush);
    EXPECT_TRUE(r.mix);
    // No top evaluated: nothing to judge at it and no flush.
    r = pace_rules(ahead, true, 0.9, c, std::nullopt, GiB, 16 * GiB);
    EXPECT_EQ(r.top_need_bytes, 0);
    EXPECT_FALSE(r.flush);
}
