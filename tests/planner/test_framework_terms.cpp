// Terms a framework's code keeps beyond the generic model, each worked by hand against the same
// profile with that term turned off:
//  - Megatron-LM's optimizer step copies 16-bit main gradients to fp32 (optimizer.py
//    _copy_model_grads_to_main_grads, distrib_optimizer.py copy_group_grads: main_grad.float());
//  - Megatron-LM's MoE layer keeps no expert outputs for the combine (experts.py weights them
//    inside the activation);
//  - Transformer Engine under fp8 keeps the attention's bf16 output beside the out-projection's
//    fp8 copy (backends.py saves out_f16);
//  - Megatron-LM's sequence-parallel LM head holds its all-gather buffer all run, and its DDP
//    reduces in place (no bucket copies);
//  - torchtitan without FSDP trains under torch.autocast over fp32 parameters, and its DDP keeps
//    a bucket copy of the gradients.
#include <gtest/gtest.h>

#include <algorithm>

#include "catalog_fixture.hpp"
#include "preflight/planner/frameworks.hpp"
#include "preflight/planner/memory.hpp"
#include "preflight/planner/profiles.hpp"

namespace preflight {
namespace {

MemoryReport evaluate(const std::string& model, const Plan& p, const FrameworkProfile& profile) {
    MemoryOptions o;
    o.profile = profile;
    o.timeline = true;
    return evaluate_memory(test::catalog_model(model), test::catalog_gpu("h100-sxm-80gb"), p, o);
}

std::int64_t phase_total(const MemoryReport& r, PhaseKind kind) {
    std::int64_t most = 0;
    for (const TimelineEntry& e : r.timeline_steady)
        if (e.phase.kind == kind) most = std::max(most, e.bytes.total());
    return most;
}

// Llama-3-8B at tp 2: 32 layers of 109,060,096 TP-local parameters (attention 41,943,040 / 2, MLP
// 176,160,768 / 2, the two norms 8,192 whole), the embedding and the head 128,256 / 2 x 4,096 =
// 262,668,288 each and the final norm 4,096: 4,015,263,744. ZeRO-1 over dp 2 steps 2,007,631,872,
// ZeRO-0 all of them; the copy is 4 B each, and none with fp32 main gradients.
TEST(FrameworkTerms, MegatronCopiesSixteenBitMainGradientsToFp32AtTheStep) {
    Plan p;
    p.seq = 4096, p.tp = 2, p.dp = 2, p.sp = true, p.recompute = Recompute::full;
    p.precision = Precision::bf16_mixed;
    FrameworkProfile without = megatron_profile();
    without.main_grad_fp32_copy_at_step = false;
    const auto copy = [&](const Plan& plan) {
        return phase_total(evaluate("llama-3-8b", plan, megatron_profile()), PhaseKind::optimizer_step) -
               phase_total(evaluate("llama-3-8b", plan, without), PhaseKind::optimizer_step);
    };
    p.zero = zero_optimizer_states;
    EXPECT_EQ(copy(p), 2'007'631'872LL * 4);
    p.zero = zero_none;
    EXPECT_EQ(copy(p), 4'015'263'744LL * 4);
    p.precision = Precision::bf16_mixed_fp32_grads;  // main_grad is fp32: .float() is itself
    EXPECT_EQ(copy(p), 0);
    // Under ZeRO-2/3 Megatron-FSDP makes its own copy (memory_fsdp.cpp): not a second one.
    p.precision = Precision::bf16_mixed;
    p.zero = zero_gradients;
    EXPECT_EQ(copy(p), 0);
}

// Mixtral-8x7B, seq 4096, tp 1: 4,096 tokens routed to 2 experts each, 8,192 rows of hidden 4,096
// at 2 B: 67,108,864 B a layer that Megatron-LM does not keep.
TEST(FrameworkTerms, MegatronKeepsNoExpertOutputsForTheCombine) {
    Plan p;
    p.seq = 4096;
    FrameworkProfile combine = megatron_profile();
    combine.moe_probs_in_activation = false;
    const ModelConfig m = test::catalog_model("mixtral-8x7b");
    EXPECT_EQ(layer_activation_bytes(m, p, combine) - layer_activation_bytes(m, p, megatron_profile()), 67'108'864);
}

// Llama-3-8B under fp8-mixed at tp 2: the attention output, 4,096 tokens x 4,096 / 2 columns at
// 2 B, 16,777,216 B a layer beside its fp8 copy.
TEST(FrameworkTerms, TransformerEngineKeepsTheBf16AttentionOutputUnderFp8) {
    Plan p;
    p.seq = 4096, p.tp = 2, p.sp = true, p.precision = Precision::fp8_mixed;
    FrameworkProfile without = megatron_profile();
    without.fp8_attention_output_16bit_kept = false;
    const ModelConfig m = test::catalog_model("llama-3-8b");
    EXPECT_EQ(layer_activation_bytes(m, p, megatron_profile()) - layer_activation_bytes(m, p, without), 16'777'216);
    p.precision = Precision::bf16_mixed;  // the output is the out-projection's own bf16 input then
    EXPECT_EQ(layer_activation_bytes(m, p, megatron_profile()), layer_activation_bytes(m, p, without));
}

// Megatron-LM's --tp-comm-overlap: Transformer Engine's 12 userbuffers of [seq x mbs / cp, hidden]
// (module/base.py initialize_ub). Llama-3-8B, seq 4096, tp 2 with --sp: 4,096 x 4,096 x 12 x 2 B =
// 402,653,184 B under bf16; under fp8 the 8 all-gather buffers are uint8: x (8 + 4 x 2) = 268,435,456
// B; at cp 2 half the rows; none without sequence parallelism (Megatron-LM requires it).
TEST(FrameworkTerms, TpCommOverlapHoldsTransformerEnginesUserbuffers) {
    Plan p;
    p.seq = 4096, p.tp = 2, p.sp = true, p.recompute = Recompute::full;
    p.precision = Precision::bf16_mixed_fp32_grads;
    const auto added = [](const Plan& plan) {
        MemoryOptions o;
        const ModelConfig m = test::catalog_model("llama-3-8b");
        const GpuSpec g = test::catalog_gpu("h100-sxm-80gb");
        const std::int64_t without = evaluate_memory(m, g, plan, o).peak_bytes;
        o.tp_comm_overlap = true;
        return evaluate_memory(m, g, plan, o).peak_bytes - without;
    };
    EXPECT_EQ(added(p), 402'653'184);
    Plan f8 = p;
    f8.precision = Precision::fp8_mixed;
    EXPECT_EQ(added(f8), 268'435'456);
    Plan cp = p;
    cp.cp = 2;
    EXPECT_EQ(added(cp), 402'653'184 / 2);
    Plan no_sp = p;
    no_sp.sp = false;
    EXPECT_EQ(added(no_sp), 0);
}

// Megatron-LM's LM head under sequence parallelism all-gathers its input into the global memory
// buffer, held all run: Llama-3-8B at seq 4096, micro-batch 2, tp 2: 4,096 x 2 x 4,096 x 2 B =
// 67,108,864 B on the last stage, none on the others, none without --sp; at cp 2 half the rows.
// Its gradients are reduced in place in the main-gradient buffer: dp 2 adds no bucket.
TEST(FrameworkTerms, MegatronHoldsTheSequenceParallelHeadGatherAndNoDdpBuckets) {
    Plan p;
    p.seq = 4096, p.mbs = 2, p.tp = 2, p.sp = true, p.recompute = Recompute::full;
    p.precision = Precision::bf16_mixed;
    FrameworkProfile without = megatron_profile();
    without.sp_head_gather_buffer = false;
    const auto peak = [](const Plan& plan, const FrameworkProfile& profile, std::int64_t stage) {
        MemoryOptions o;
        o.profile = profile;
        o.pipeline_stage = stage;
        return evaluate_memory(test::catalog_model("llama-3-8b"), test::catalog_gpu("h100-sxm-80gb"), plan, o)
            .peak_bytes;
    };
    const auto added = [&](const Plan& plan, std::int64_t stage) {
        return peak(plan, megatron_profile(), stage) - peak(plan, without, stage);
    };
    EXPECT_EQ(added(p, 0), 67'108'864);
    Plan cp = p;
    cp.cp = 2;
    EXPECT_EQ(added(cp, 0), 67'108'864 / 2);
    Plan no_sp = p;
    no_sp.sp = false;
    EXPECT_EQ(added(no_sp, 0), 0);
    Plan pp = p;
    pp.pp = 2, pp.grad_acc = 2;
    EXPECT_EQ(added(pp, 0), 0);
    EXPECT_EQ(added(pp, 1), 67'108'864);
    // dp 2 under ZeRO-0 adds no gradient bucket: the same peak as dp 1.
    Plan dp = p;
    dp.dp = 2;
    EXPECT_EQ(peak(dp, megatron_profile(), 0), peak(p, megatron_profile(), 0));
}

// Llama-3.2-1B (1,235,814,400 parameters, tied embedding) under torchtitan at ZeRO-0: fp32
// parameters under autocast, 4,943,257,600 B with no master copy (not 2 B + a 4 B master); over
// dp 8 DDP's buckets hold another fp32 copy of the gradients, 4,943,257,600 B.
TEST(FrameworkTerms, TorchtitanWithoutFsdpRunsAutocastOverFp32ParametersAndDdpBuckets) {
    Plan p;
    p.seq = 4096, p.precision = Precision::bf16_mixed;
    const FrameworkProfile tt = torchtitan_profile();
    const MemoryReport one = evaluate("llama-3.2-1b", p, tt);
    const TimelineEntry& start = one.timeline_steady.front();
    ASSERT_EQ(start.phase.kind, PhaseKind::step_start);
    EXPECT_EQ(start.bytes.weights, 4'943'257'600);
    EXPECT_EQ(start.bytes.master_weights, 0);
    p.dp = 8;
    const MemoryReport eight = evaluate("llama-3.2-1b", p, tt);
    EXPECT_EQ(eight.timeline_steady.front().bytes.buffers - start.bytes.buffers, 4'943'257'600);
    // Under FSDP (ZeRO-3) mixed precision is fully_shard's: bf16 parameters, fp32 sharded master.
    p.zero = zero_weights;
    EXPECT_GT(evaluate("llama-3.2-1b", p, tt).timeline_steady.front().bytes.master_weights, 0);
}

}  // namespace
}  // namespace preflight
