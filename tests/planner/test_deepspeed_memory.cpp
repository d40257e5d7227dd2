// The deepspeed profile's ZeRO terms (planner/src/memory_deepspeed.cpp), worked by hand from
// DeepSpeed v0.19.6 (edaa722): runtime/zero/stage_1_and_2.py, stage3.py, fp16/fused_optimizer.py.
//
// Case: Llama-3-8B (data/models), dp 8, seq 4096, mbs 1, bf16-mixed. Hand figures:
//  - P = 8,030,261,248 parameters, untied: embedding and LM head 128,256 x 4,096 = 525,336,576
//    each, a layer 218,112,000 (q, o 4,096^2; k, v 1,024 x 4,096; gate, up, down 14,336 x 4,096;
//    two 4,096 norms), final norm 4,096.
//  - partition_size = P / 8 = 1,003,782,656 elements.
//  - grads_in_partition holds every tensor overlapping a rank's partition, whole. Walking the flat
//    buffer (embedding, 32 x [norm q k v o norm gate up down], norm, head), rank 5's partition
//    [5,018,913,280, 6,022,695,936) starts inside a layer's up projection and ends inside another's
//    down projection: 1,090,560,000 elements (the most of the 8 ranks), 2,181,120,000 B in bf16.
//  - The step's copies: flatten (2 B) + .to(fp32) (4 B) of the partition = 6 x 1,003,782,656 =
//    6,022,695,936 B; the overflow check before it: 11 B x the largest piece (the 525,336,576-element
//    embedding or head) = 5,778,702,336 B; the wider is the step's.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>

#include "catalog_fixture.hpp"
#include "preflight/planner/frameworks.hpp"
#include "preflight/planner/memory.hpp"
#include "preflight/planner/profiles.hpp"

using namespace preflight;

namespace {

constexpr std::int64_t kParams = 8'030'261'248;
constexpr std::int64_t kPartition = 1'003'782'656;
constexpr std::int64_t kBusiestPartitionGradBytes = 2'181'120'000;
constexpr std::int64_t kLayerGradBytes = 218'112'000LL * 2;
constexpr std::int64_t kTensorGradBytes = 14'336LL * 4'096 * 2;  // gate, up or down: a layer's largest
constexpr std::int64_t kHeadGradBytes = 525'336'576LL * 2;
constexpr std::int64_t kTwoBucketsBytes = 2 * 500'000'000LL * 2;  // overlap_comm: two 5e8-element bf16 buckets

MemoryReport deepspeed_report(int zero, std::int64_t grad_acc, Precision precision = Precision::bf16_mixed,
                              Recompute recompute = Recompute::none, std::int64_t dp = 8, std::int64_t pp = 1,
                              const DeepSpeedZeroSettings& buckets = {}) {
    Plan p;
    p.seq = 4096, p.mbs = 1, p.dp = dp, p.pp = pp, p.grad_acc = grad_acc, p.zero = ZeroStage{zero};
    p.precision = precision, p.recompute = recompute;
    MemoryOptions o;
    o.profile = deepspeed_profile();
    o.profile.deepspeed_zero = buckets;
    o.timeline = true;
    return evaluate_memory(test::catalog_model("llama-3-8b"), test::catalog_gpu("h100-sxm-80gb"), p, o);
}

const MemoryBreakdown& at(const MemoryReport& r, PhaseKind kind, std::int64_t layer = 0) {
    const auto e = std::find_if(r.timeline_steady.begin(), r.timeline_steady.end(), [&](const TimelineEntry& t) {
        return t.phase.kind == kind && t.phase.layer == layer;
    });
    if (e == r.timeline_steady.end()) throw std::runtime_error("no such phase in the timeline");
    return e->bytes;
}

}  // namespace

// stage_1_and_2.py: gradients appear in backward (the engine's zero_grad set them to None after the
// last step); ZeRO-1 reduces only at the accumulation boundary, so with grad_acc 2 the second
// micro-batch's forward runs beside every 16-bit param.grad and the two buckets setup_buckets
// allocated at the first micro-batch's first gradient hook (released at the boundary's epilogue).
TEST(DeepSpeedMemory, Zero1GradientsAppearInBackwardAndWaitForTheBoundary) {
    const MemoryReport one = deepspeed_report(1, 1);
    EXPECT_EQ(at(one, PhaseKind::output_loss).gradients, 0);
    EXPECT_EQ(at(one, PhaseKind::forward, 32).gradients, 0);
    // Backward's first layer: the partition buffer, a tensor's new gradient before its hook moves
    // it into a bucket, and the LM head's, which is above a bucket and stays as param.grad to the
    // epilogue.
    EXPECT_EQ(at(one, PhaseKind::backward, 32).gradients,
              kBusiestPartitionGradBytes + kTensorGradBytes + kHeadGradBytes);
    EXPECT_EQ(at(one, PhaseKind::backward, 32).buffers - at(one, PhaseKind::output_loss).buffers, kTwoBucketsBytes);

    const MemoryReport two = deepspeed_report(1, 2);
    EXPECT_EQ(at(two, PhaseKind::output_loss).gradients, 2 * kParams);
    EXPECT_EQ(at(two, PhaseKind::output_loss).buffers - at(one, PhaseKind::output_loss).buffers, kTwoBucketsBytes);
}

// ZeRO-2 reduces in every backward; its epilogue releases the buckets and grads_in_partition but
// keeps the first micro-batch's partition as the accumulator (all_grad_tensors) beside the next.
TEST(DeepSpeedMemory, Zero2KeepsThePartitionAsTheAccumulator) {
    const MemoryReport one = deepspeed_report(2, 1);
    EXPECT_EQ(at(one, PhaseKind::output_loss).gradients, 0);
    EXPECT_EQ(at(one, PhaseKind::backward, 32).gradients, kBusiestPartitionGradBytes + kTensorGradBytes);
    const MemoryReport two = deepspeed_report(2, 2);
    EXPECT_EQ(at(two, PhaseKind::output_loss).gradients, kBusiestPartitionGradBytes);
    EXPECT_EQ(at(two, PhaseKind::backward, 32).gradients, 2 * kBusiestPartitionGradBytes + kTensorGradBytes);
}

// step(): the overflow check, then flatten + .to(fp32) of the partition's gradients while
// grads_in_partition still holds them. Under full recompute the step is the peak.
TEST(DeepSpeedMemory, Zero1And2StepCopiesTheGradientsToFp32) {
    for (int zero : {1, 2}) {
        const MemoryReport r = deepspeed_report(zero, 1, Precision::bf16_mixed, Recompute::full);
        const MemoryBreakdown& step = at(r, PhaseKind::optimizer_step);
        EXPECT_EQ(step.gradients, kBusiestPartitionGradBytes) << zero;
        EXPECT_EQ(step.buffers - at(r, PhaseKind::step_start).buffers, std::max<std::int64_t>(6 * kPartition, 11 * 525'336'576LL));
        EXPECT_EQ(r.peak_phase.kind, PhaseKind::optimizer_step) << zero;
    }
}

// stage3.py: one reduce_bucket_size bucket allocated at initialisation and kept (1e9 B in bf16);
// the step's flatten(...).to(fp32) of a sub-group. The rank's shards add up to 1,003,782,656
// elements and reach sub_group_size (1e9) only with the last (the head's 65,667,072), so the whole
// partition is one sub-group: 6 x 1,003,782,656 B. Pure bf16 keeps no master copy under ZeRO-3
// (the bf16 partition is its own master), where ZeRO-1/2 clone it.
TEST(DeepSpeedMemory, Zero3KeepsABucketAndCopiesASubGroupAtTheStep) {
    const MemoryReport r = deepspeed_report(3, 1, Precision::bf16_mixed, Recompute::full);
    EXPECT_EQ(at(r, PhaseKind::step_start).buffers, 1'000'000'000 + 4'194'304);  // + RoPE's fp32 cos/sin
    EXPECT_EQ(at(r, PhaseKind::optimizer_step).buffers - at(r, PhaseKind::step_start).buffers, 6 * kPartition);
    EXPECT_EQ(deepspeed_report(3, 1, Precision::bf16).at_peak.master_weights, 0);
    EXPECT_EQ(deepspeed_report(2, 1, Precision::bf16).at_peak.master_weights, 2 * kPartition);
}

// stage_1_and_2.py clones the fp32 partition even when the model is fp32 (4 B x partition), and
// its buckets hold the model dtype: 2 x 5e8 x 4 B.
TEST(DeepSpeedMemory, Fp32ZeroClonesTheMasterPartition) {
    const MemoryReport r = deepspeed_report(2, 1, Precision::fp32);
    EXPECT_EQ(at(r, PhaseKind::step_start).master_weights, 4 * kPartition);
    EXPECT_EQ(at(r, PhaseKind::backward, 32).buffers - at(r, PhaseKind::output_loss).buffers, 2 * 500'000'000LL * 4);
}

// Without ZeRO, FP16_Optimizer (bf16 and fp16): param.grad from backward to the step, where it
// builds fp32 copies of every gradient and then their flat concatenation (4 + 4 B per parameter)
// before the 16-bit gradients are dropped.
TEST(DeepSpeedMemory, Zero0StepBuildsTwoFp32GradientCopies) {
    const MemoryReport r = deepspeed_report(0, 1);
    EXPECT_EQ(at(r, PhaseKind::output_loss).gradients, 0);
    EXPECT_EQ(at(r, PhaseKind::backward, 32).gradients, kHeadGradBytes + kLayerGradBytes);
    const MemoryBreakdown& step = at(r, PhaseKind::optimizer_step);
    EXPECT_EQ(step.gradients, 2 * kParams);
    EXPECT_EQ(step.buffers - at(r, PhaseKind::step_start).buffers, 8 * kParams);
    // engine.py buffered_allreduce_fallback: one 5e8-element bf16 buffer at the reduction.
    EXPECT_EQ(at(r, PhaseKind::grad_reduce).buffers - at(r, PhaseKind::step_start).buffers, 1'000'000'000);
    // fused_optimizer.py initialize_optimizer_states steps once on zero gradients at construction:
    // the first step's forward already holds the fp32 moments (8 B per parameter).
    const auto first = std::find_if(r.timeline_first.begin(), r.timeline_first.end(),
                                    [](const TimelineEntry& t) { return t.phase.kind == PhaseKind::output_loss; });
    ASSERT_NE(first, r.timeline_first.end());
    EXPECT_EQ(first->bytes.optimizer_states, 8 * kParams);
}

// engine.py _do_optimizer_sanity_check picks BF16_Optimizer for bf16 beside a pipeline without ZeRO:
// it shards the fp32 master (and so the moments) over dp and keeps a flat bf16 gradient buffer of
// every parameter (grad_accum_dtype = the model's) beside param.grad, reduced in place. dp 2 x pp 4:
// stage 0 holds the embedding and 8 layers, 525,336,576 + 8 x 218,112,000 = 2,270,232,576
// parameters, 1,135,116,288 a dp rank's partition.
TEST(DeepSpeedMemory, PipelineWithoutZeroShardsTheMasterInBf16Optimizer) {
    const MemoryReport r = deepspeed_report(0, 8, Precision::bf16_mixed, Recompute::none, 2, 4);
    ASSERT_EQ(r.pipeline_stage, 0);
    EXPECT_EQ(r.at_peak.master_weights, 4 * 1'135'116'288LL);
    EXPECT_EQ(r.at_peak.optimizer_states, 8 * 1'135'116'288LL);
    // 8 micro-batches, 4 in flight on stage 0: the peak micro-batch runs beside the earlier ones'
    // param.grad (2 B) and the flat buffer (2 B), a tensor's new gradient being added in.
    EXPECT_EQ(r.at_peak.gradients, 4 * 2'270'232'576LL + kTensorGradBytes);
    EXPECT_EQ(at(r, PhaseKind::step_start).gradients, 2 * 2'270'232'576LL);  // the buffer alone
    // step: the partition of the bf16 buffer .to(fp32).
    EXPECT_EQ(at(r, PhaseKind::optimizer_step).buffers - at(r, PhaseKind::step_start).buffers, 4 * 1'135'116'288LL);
}

// data_types.grad_accum_dtype fp32: ZeRO-1 runs BF16_Optimizer with an fp32 buffer of every
// gradient (4 B x P, kept) and param.grad only from backward; ZeRO-2's gradients stay bf16
// (use_grad_accum_attribute is off where gradients are partitioned), so it is bf16-mixed's ZeRO-2;
// ZeRO-3 keeps its gradient partitions in fp32 (grad_partitions_flat_buffer) and flattens a
// sub-group of them, already fp32, at the step.
TEST(DeepSpeedMemory, Fp32AccumulationFollowsTheOptimizerDeepSpeedPicks) {
    const MemoryReport one = deepspeed_report(1, 1, Precision::bf16_mixed_fp32_grads);
    EXPECT_EQ(at(one, PhaseKind::output_loss).gradients, 4 * kParams);
    EXPECT_EQ(at(one, PhaseKind::backward, 32).gradients, 4 * kParams + kHeadGradBytes + kLayerGradBytes);
    EXPECT_EQ(at(one, PhaseKind::optimizer_step).buffers, at(one, PhaseKind::step_start).buffers);
    const MemoryReport two = deepspeed_report(2, 1, Precision::bf16_mixed_fp32_grads);
    EXPECT_EQ(at(two, PhaseKind::backward, 32).gradients, kBusiestPartitionGradBytes + kTensorGradBytes);
    const MemoryReport three = deepspeed_report(3, 1, Precision::bf16_mixed_fp32_grads);
    EXPECT_EQ(at(three, PhaseKind::step_start).gradients, 4 * kPartition);
    EXPECT_EQ(at(three, PhaseKind::optimizer_step).buffers - at(three, PhaseKind::step_start).buffers, 4 * kPartition);
}

// A ds_config's own buckets (FrameworkProfile::deepspeed_zero, from --from): the Hugging Face
// Trainer's "auto" reduce_bucket_size is hidden_size^2 = 16,777,216 elements, two bf16 buckets
// 67,108,864 B. With buckets that small, ZeRO-1 reduces every tensor above one from its own
// param.grad and keeps it to the epilogue: gate, up and down (58,720,256 elements each; q and o
// are exactly hidden^2, not above), the LM head and the embedding.
TEST(DeepSpeedMemory, BucketsFollowTheConfigsReduceBucketSize) {
    DeepSpeedZeroSettings hf;
    hf.reduce_bucket_hidden_squared = true;
    const MemoryReport two = deepspeed_report(2, 1, Precision::bf16_mixed, Recompute::none, 8, 1, hf);
    EXPECT_EQ(at(two, PhaseKind::backward, 32).buffers - at(two, PhaseKind::output_loss).buffers, 2 * 4096LL * 4096 * 2);
    const MemoryReport one = deepspeed_report(1, 1, Precision::bf16_mixed, Recompute::none, 8, 1, hf);
    const std::int64_t large_layer_bytes = 3 * kTensorGradBytes;
    // At backward layer 30, layers 32, 31 and 30 (the one running counted whole: an upper bound).
    EXPECT_EQ(at(one, PhaseKind::backward, 30).gradients,
              kBusiestPartitionGradBytes + kTensorGradBytes + kHeadGradBytes + 3 * large_layer_bytes);
    EXPECT_EQ(at(one, PhaseKind::grad_reduce).gradients,
              kBusiestPartitionGradBytes + 2 * kHeadGradBytes + 32 * large_layer_bytes);
}

// overlap_comm off (zero/config.py's default below stage 3): one bucket; ZeRO-1's hooks then only
// allocate it, and reduce_gradients moves the gradients after backward, so a one-micro-batch step
// holds its param.grad as they grow (head, then layer by layer) and all of them at the reduction.
TEST(DeepSpeedMemory, OverlapCommOffKeepsOneBucketAndZero1ReducesAfterBackward) {
    DeepSpeedZeroSettings off;
    off.overlap_comm = false;
    const MemoryReport one = deepspeed_report(1, 1, Precision::bf16_mixed, Recompute::none, 8, 1, off);
    EXPECT_EQ(at(one, PhaseKind::output_loss).gradients, 0);
    EXPECT_EQ(at(one, PhaseKind::backward, 31).gradients, kHeadGradBytes + 2 * kLayerGradBytes);
    EXPECT_EQ(at(one, PhaseKind::backward, 31).buffers - at(one, PhaseKind::output_loss).buffers, 1'000'000'000);
    EXPECT_EQ(at(one, PhaseKind::grad_reduce).gradients, 2 * kParams + kBusiestPartitionGradBytes);
    const MemoryReport two = deepspeed_report(2, 1, Precision::bf16_mixed, Recompute::none, 8, 1, off);
    EXPECT_EQ(at(two, PhaseKind::backward, 32).buffers - at(two, PhaseKind::output_loss).buffers, 1'000'000'000);
    // A ds_config without the key: zero/config.py's default, off below ZeRO-3.
    DeepSpeedZeroSettings absent;
    absent.overlap_comm = std::nullopt;
    EXPECT_EQ(deepspeed_report(1, 1, Precision::bf16_mixed, Recompute::none, 8, 1, absent).peak_bytes, one.peak_bytes);
}

// BF16_Optimizer with fp32 accumulation: engine.py buffered_allreduce_fallback hands allreduce_bucket
// the one flat fp32 buffer (a view, no flatten copy), which casts it whole to bf16
// (communication_data_type) for the all-reduce: 2 B per parameter at the reduction.
TEST(DeepSpeedMemory, Fp32AccumulationIsReducedThroughABf16CopyOfTheBuffer) {
    const MemoryReport r = deepspeed_report(1, 1, Precision::bf16_mixed_fp32_grads);
    EXPECT_EQ(at(r, PhaseKind::grad_reduce).buffers - at(r, PhaseKind::step_start).buffers, 2 * kParams);
    EXPECT_EQ(r.peak_phase.kind, PhaseKind::grad_reduce);
}

// A tied embedding (Llama-3.2-1B: 128,256 x 2,048 = 262,668,288 elements, also the LM head): its
// hook fires after the lookup's backward, so the head's 525,336,576 B are held through backward.
// ZeRO-2 at dp 8: P = 1,235,814,400, partition 154,476,800; walking embedding, 16 x [norm q k v o
// norm gate up down], norm, the busiest rank (1) overlaps the whole embedding and the first layers'
// tensors up to its end, 323,489,792 elements (646,979,584 B); a layer's largest tensor is
// 8,192 x 2,048 (33,554,432 B).
TEST(DeepSpeedMemory, TiedEmbeddingHoldsTheHeadsGradientThroughBackward) {
    Plan p;
    p.seq = 4096, p.mbs = 1, p.dp = 8, p.zero = ZeroStage{2};
    MemoryOptions o;
    o.profile = deepspeed_profile();
    o.timeline = true;
    const MemoryReport r = evaluate_memory(test::catalog_model("llama-3.2-1b"), test::catalog_gpu("h100-sxm-80gb"), p, o);
    EXPECT_EQ(at(r, PhaseKind::backward, 16).gradients, 646'979'584 + 33'554'432 + 525'336'576);
    EXPECT_EQ(at(r, PhaseKind::grad_reduce).gradients, 646'979'584);
}

// Expert parallelism splits DeepSpeed's expert parameter groups (not traced here): the generic
// terms stand, gradients charged at every phase.
TEST(DeepSpeedMemory, ExpertParallelismKeepsTheGenericTerms) {
    Plan p;
    p.seq = 4096, p.mbs = 1, p.dp = 64, p.ep = 8, p.zero = ZeroStage{1}, p.recompute = Recompute::full;
    MemoryOptions o;
    o.profile = deepspeed_profile();
    o.timeline = true;
    const MemoryReport r = evaluate_memory(test::catalog_model("mixtral-8x7b"), test::catalog_gpu("h100-sxm-80gb"), p, o);
    EXPECT_GT(at(r, PhaseKind::output_loss).gradients, 0);
    EXPECT_EQ(at(r, PhaseKind::output_loss).gradients, at(r, PhaseKind::optimizer_step).gradients);
}

// Optimizer offload: under ZeRO-1/2/3 DeepSpeed copies each reduced gradient of the rank's partition
// straight into its fp32 host partition (stage_1_and_2.py copy_grads_in_partition, cpu_offload;
// stage3.py's grad_partitions_flat_buffer on self.device, the CPU), so no gradient partition is held on
// the GPU; ZeRO-1 with overlap_comm off (its default) still holds every 16-bit gradient until
// reduce_gradients after backward (2 B x 8,030,261,248 at the reduction).
TEST(DeepSpeedMemory, OffloadedZeroKeepsNoGradientPartitionOnTheGpu) {
    Plan p;
    p.seq = 4096, p.mbs = 1, p.dp = 8, p.zero = ZeroStage{2}, p.offload = Offload::optimizer;
    MemoryOptions o;
    o.profile = deepspeed_profile();
    o.timeline = true;
    const ModelConfig m = test::catalog_model("llama-3-8b");
    const GpuSpec g = test::catalog_gpu("h100-sxm-80gb");
    EXPECT_EQ(at(evaluate_memory(m, g, p, o), PhaseKind::optimizer_step).gradients, 0);
    p.zero = ZeroStage{3};
    EXPECT_EQ(evaluate_memory(m, g, p, o).at_peak.gradients, 0);
    p.zero = ZeroStage{1};
    o.profile.deepspeed_zero.overlap_comm = false;
    EXPECT_EQ(at(evaluate_memory(m, g, p, o), PhaseKind::grad_reduce).gradients, 2 * kParams);
    o.profile = megatron_profile();  // Megatron-LM's offload keeps its gradient buffer on the GPU
    EXPECT_GT(evaluate_memory(m, g, p, o).at_peak.gradients, 0);
}

namespace {

MemoryReport offload_report(int zero, std::int64_t grad_acc = 1, const DeepSpeedZeroSettings& buckets = {}) {
    Plan p;
    p.seq = 4096, p.mbs = 1, p.dp = 8, p.grad_acc = grad_acc, p.zero = ZeroStage{zero}, p.offload = Offload::optimizer;
    MemoryOptions o;
    o.profile = deepspeed_profile();
    o.profile.deepspeed_zero = buckets;
    o.timeline = true;
    return evaluate_memory(test::catalog_model("llama-3-8b"), test::catalog_gpu("h100-sxm-80gb"), p, o);
}

constexpr std::int64_t kLargestTensor = 525'336'576;  // the embedding, and the LM head
constexpr std::int64_t kRopeBytes = 4'194'304;          // fp32 cos/sin tables, 2 x 4,096 x 128 x 4 B

}  // namespace

// ZeRO-1 + offload with overlap_comm on (process_gradients reduces in the hooks at the boundary):
// each gradient is copied into a bucket and param.grad repointed there (.data = the bucket's view),
// the rank's share goes to the host, so backward layer 32 holds a tensor's new gradient (gate, up
// or down: 117,440,512 B) and the LM head's, above a 5e8 bucket and kept as param.grad to the
// epilogue (1,050,673,152 B), not the 16 GB of whole gradients. Kept from __init__:
// temp_grad_buffer_for_gpu_offload, largest parameter x 2 B = 1,050,673,152 B (+ RoPE's tables at
// step start). In backward beside the two 5e8 x 2 B buckets: the overflow check of the largest
// parameter's gradient (update_offload_overflow_tracker_for_param_grad -> _has_inf_or_nan:
// 11 B x 525,336,576 = 5,778,702,336 B). No step copies: the optimizer steps on the host.
TEST(DeepSpeedMemory, OffloadedZero1WithOverlapCommHoldsOnlyBuckets) {
    const MemoryReport r = offload_report(1);
    EXPECT_EQ(at(r, PhaseKind::step_start).buffers, kRopeBytes + 2 * kLargestTensor);
    EXPECT_EQ(at(r, PhaseKind::backward, 32).gradients, kTensorGradBytes + kHeadGradBytes);
    EXPECT_EQ(at(r, PhaseKind::backward, 32).buffers - at(r, PhaseKind::output_loss).buffers,
              kTwoBucketsBytes + 11 * kLargestTensor);
    EXPECT_EQ(at(r, PhaseKind::optimizer_step).buffers, at(r, PhaseKind::step_start).buffers);
    EXPECT_EQ(at(r, PhaseKind::optimizer_step).gradients, 0);
    // Host, per GPU: the fp32 master, its fp32 .grad and both moments (16 B x the 1,003,782,656-element
    // partition), param_buffer_of_bit16_for_cpu_offload_groups (2 B x partition) and
    // temp_grad_buffer_for_cpu_offload (2 B x largest parameter):
    // 18 x 1,003,782,656 + 1,050,673,152 = 19,118,760,960 B.
    EXPECT_EQ(r.host_bytes_per_gpu, 19'118'760'960);
    // With accumulation, accumulated_grads_in_cpu: one bf16 buffer per parameter overlapping the
    // partition, whole (the busiest rank's 1,090,560,000 elements, 2,181,120,000 B).
    EXPECT_EQ(offload_report(1, 2).host_bytes_per_gpu, 19'118'760'960 + kBusiestPartitionGradBytes);
}

// ZeRO-2 + offload honours the config's buckets: overlap_comm off and reduce_bucket_size 5e7 keep
// one 5e7 x 2 B = 1e8 B bucket in backward (was one 5e8 bucket whatever the config said).
TEST(DeepSpeedMemory, OffloadedZero2FollowsTheConfigsBuckets) {
    DeepSpeedZeroSettings small;
    small.overlap_comm = false;
    small.reduce_bucket_elements = 50'000'000;
    const MemoryReport r = offload_report(2, 1, small);
    EXPECT_EQ(at(r, PhaseKind::backward, 32).gradients, kTensorGradBytes);
    EXPECT_EQ(at(r, PhaseKind::backward, 32).buffers - at(r, PhaseKind::output_loss).buffers,
              100'000'000 + 11 * kLargestTensor);
    EXPECT_EQ(at(r, PhaseKind::output_loss).buffers, kRopeBytes + 2 * kLargestTensor);
}

// ZeRO-3 + offload: the reduce bucket (5e8 x 2 B) is allocated at initialisation whatever the
// offload (stage3.py _setup_for_real_optimizer) and no step copies are made on the GPU
// (_prepare_sub_group skips _prepare_fp32_grad_for_sub_group when offloaded).
TEST(DeepSpeedMemory, OffloadedZero3KeepsItsBucket) {
    const MemoryReport r = offload_report(3);
    EXPECT_EQ(at(r, PhaseKind::step_start).buffers, 1'000'000'000 + kRopeBytes);
    EXPECT_EQ(at(r, PhaseKind::optimizer_step).buffers, 1'000'000'000 + kRopeBytes);
}

// sub_group_size 1e8 (stage3.py _create_fp16_sub_groups): the rank's shards, 1/8 of each tensor in
// order, close a sub-group once it reaches 1e8. The first: the embedding's 65,667,072, layer 1's
// 27,264,000 and layer 2's norm, q, k, v, o, norm and gate (512 + 2,097,152 + 524,288 + 524,288 +
// 2,097,152 + 512 + 7,340,032 = 12,583,936): 105,515,008 elements, the largest (the next ones
// close at 101,715,456 to 103,812,608, the last holds 80,347,648 with the head). Step copies:
// flatten (2 B) + .to(fp32) (4 B) = 6 x 105,515,008 = 633,090,048 B (6,022,695,936 at the default 1e9).
TEST(DeepSpeedMemory, Zero3StepCopiesFollowSubGroupSize) {
    DeepSpeedZeroSettings z;
    z.sub_group_elements = 100'000'000;
    const MemoryReport r = deepspeed_report(3, 1, Precision::bf16_mixed, Recompute::full, 8, 1, z);
    EXPECT_EQ(at(r, PhaseKind::optimizer_step).buffers - at(r, PhaseKind::step_start).buffers, 633'090'048);
}

// ZeRO-3's prefetcher (partitioned_param_coordinator.py fetch_sub_module) gathers ahead until
// stage3_max_live_parameters (1e9) are available, overshooting by at most one parameter (the
// largest, 525,336,576): (1e9 + 525,336,576) x 2 B = 3,050,673,152 B gathered from forward through
// backward. In backward, reduce_scatter_coalesced's torch.cat of a full bucket (5e8 x 2 B) beside
// the next tensor's gradient (gate, up or down: 117,440,512 B). At live 1e8: (1e8 + 525,336,576) x
// 2 = 1,250,673,152 B. With the prefetcher off (stage3_prefetch_bucket_size 0): the current and the
// next layer, 2 x 218,112,000 x 2 = 872,448,000 B.
TEST(DeepSpeedMemory, Zero3HoldsTheLiveParametersAndTheCoalescedCopy) {
    const std::int64_t fixed = 1'000'000'000 + kRopeBytes;  // the reduce bucket and RoPE's tables
    const MemoryReport r = deepspeed_report(3, 1);
    EXPECT_EQ(at(r, PhaseKind::forward, 16).buffers, fixed + 3'050'673'152);
    EXPECT_EQ(at(r, PhaseKind::output_loss).buffers, fixed + 3'050'673'152);
    EXPECT_EQ(at(r, PhaseKind::backward, 16).buffers, fixed + 3'050'673'152 + kTensorGradBytes + 1'000'000'000);
    DeepSpeedZeroSettings small;
    small.max_live_elements = 100'000'000;
    EXPECT_EQ(at(deepspeed_report(3, 1, Precision::bf16_mixed, Recompute::none, 8, 1, small), PhaseKind::forward, 16).buffers,
              fixed + 1'250'673'152);
    DeepSpeedZeroSettings off;
    off.prefetch_elements = 0;
    EXPECT_EQ(at(deepspeed_report(3, 1, Precision::bf16_mixed, Recompute::none, 8, 1, off), PhaseKind::forward, 16).buffers,
              fixed + 872'448'000);
}
