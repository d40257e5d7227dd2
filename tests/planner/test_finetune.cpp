// LoRA / QLoRA, offload, pipeline schedules, context and expert parallelism against
// published or hand-derived numbers (derivations in the comments).
#include <gtest/gtest.h>

#include <algorithm>

#include "catalog_fixture.hpp"
#include "preflight/planner/emit.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/extensions.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/report.hpp"
#include "preflight/planner/search.hpp"

namespace preflight {
namespace {

using test::catalog_gpu;
using test::catalog_model;

LoraSettings lora(std::int64_t rank, unsigned targets) {
    LoraSettings l;
    l.rank = rank;
    l.targets = targets;
    return l;
}

// ---- LoRA adapter counts ------------------------------------------------------------------
// Llama-3-8B: h = 4096, 32 layers, GQA with 8 KV heads of 128 (k/v out = 1024), f = 14336.
// An adapter on W (out x in) has r * (in + out) parameters.
// Attention (q,k,v,o) per layer: q r(4096+4096) + k r(4096+1024) + v r(4096+1024) + o r(4096+4096)
//   = 26,624 r; x 32 layers = 851,968 r.
// All linear adds gate r(4096+14336) + up r(4096+14336) + down r(14336+4096) = 55,296 r,
//   so 81,920 r per layer, 2,621,440 r in all.
// (PEFT's print_trainable_parameters shows 13,631,488 for r=16 attention-only and 41,943,040
// for r=16 all-linear on Llama-3-8B.)
struct AdapterCase {
    std::int64_t rank;
    unsigned targets;
    std::int64_t params;
};
class LoraCounts : public ::testing::TestWithParam<AdapterCase> {};
TEST_P(LoraCounts, Llama3_8b) {
    const auto& c = GetParam();
    EXPECT_EQ(lora_params(catalog_model("llama-3-8b"), lora(c.rank, c.targets)), c.params);
}
INSTANTIATE_TEST_SUITE_P(AttentionAndAllLinear, LoraCounts,
                         ::testing::Values(AdapterCase{8, kLoraAttention, 851'968LL * 8},      // 6,815,744
                                           AdapterCase{16, kLoraAttention, 851'968LL * 16},    // 13,631,488
                                           AdapterCase{64, kLoraAttention, 851'968LL * 64},    // 54,525,952
                                           AdapterCase{8, kLoraAllLinear, 2'621'440LL * 8},    // 20,971,520
                                           AdapterCase{16, kLoraAllLinear, 2'621'440LL * 16},  // 41,943,040
                                           AdapterCase{64, kLoraAllLinear, 2'621'440LL * 64}   // 167,772,160
                                           ));

TEST(Lora, PublishedPeftCounts) {
    EXPECT_EQ(lora_params(catalog_model("llama-3-8b"), lora(16, kLoraAttention)), 13'631'488);
    EXPECT_EQ(lora_params(catalog_model("llama-3-8b"), lora(16, kLoraAllLinear)), 41'943'040);
    // PEFT's default q,v at r = 8: q 8*8192 + v 8*5120 = 106,496 per layer, x 32 = 3,407,872.
    EXPECT_EQ(lora_params(catalog_model("llama-3-8b"), LoraSettings{}), 3'407'872);
}

TEST(Lora, TargetListsParse) {
    EXPECT_EQ(parse_lora_targets("q,k,v,o"), kLoraAttention);
    EXPECT_EQ(parse_lora_targets("q_proj,v_proj"), kLoraPeftDefault);
    EXPECT_EQ(parse_lora_targets("all-linear"), kLoraAllLinear);
    EXPECT_FALSE(parse_lora_targets("q,x"));
    EXPECT_FALSE(parse_lora_targets(""));
    EXPECT_EQ(lora_targets_to_string(kLoraAllLinear), "q,k,v,o,gate,up,down");
}

// ---- QLoRA 4-bit base ---------------------------------------------------------------------
// Dettmers et al. 2023, sec. 3: NF4 is 4 bits per weight; block size 64 with fp32 absmax costs
// 32/64 = 0.5 bit per weight, double quantisation 8/64 + 32/(64*256) = 0.127 bit. Bytes of n
// quantised weights = n/2 + n/64 + 4 n/(64*256) when every tensor is a multiple of 64*256.
struct QloraCase {
    const char* model;
    std::int64_t quantized_params;
    std::int64_t quantized_bytes;
};
class QloraBase : public ::testing::TestWithParam<QloraCase> {};
TEST_P(QloraBase, Nf4WithDoubleQuantisedConstants) {
    Plan p;
    p.finetune = Finetune::qlora;
    const FrozenBase b = frozen_base(catalog_model(GetParam().model), p);
    EXPECT_EQ(b.quantized_params, GetParam().quantized_params);
    EXPECT_EQ(b.quantized_bytes, GetParam().quantized_bytes);
    const std::int64_t n = b.quantized_params;
    EXPECT_EQ(b.quantized_bytes, n / 2 + n / 64 + n / 16384 * 4);  // 4.127 bits per weight
}
INSTANTIATE_TEST_SUITE_P(
    Llama2, QloraBase,
    ::testing::Values(
        // 7B: per layer 4*4096^2 + 3*4096*11008 = 202,375,168; x 32 = 6,476,005,376 weights;
        // 3,238,002,688 + 101,187,584 + 1,581,056 = 3,340,771,328 B.
        QloraCase{"llama-2-7b", 6'476'005'376, 3'340'771'328},
        // 13B: 4*5120^2 + 3*5120*13824 = 317,194,240; x 40 = 12,687,769,600;
        // 6,343,884,800 + 198,246,400 + 3,097,600 = 6,545,228,800 B.
        QloraCase{"llama-2-13b", 12'687'769'600, 6'545'228'800},
        // 70B (GQA, 8 KV heads): 2*8192^2 + 2*1024*8192 + 3*8192*28672 = 855,638,016; x 80 =
        // 68,451,041,280; 34,225,520,640 + 1,069,547,520 + 16,711,680 = 35,311,779,840 B.
        QloraCase{"llama-2-70b", 68'451'041'280, 35'311'779'840}));

TEST(Qlora, SingleQuantisationCostsHalfABitPerWeight) {
    LoraSettings l;
    l.double_quant = false;
    const Nf4Bytes b = nf4_bytes(64 * 1024, l);
    EXPECT_EQ(b.weights, 32 * 1024);
    EXPECT_EQ(b.constants, 1024 * 4);  // one fp32 absmax per 64 weights
}

TEST(Qlora, DequantisedWorkingCopyIsTheLargestWeightInBf16) {
    Plan p;
    p.finetune = Finetune::qlora;
    // Llama-3-8B's MLP weights are 14336 x 4096; one bf16 copy = 117,440,512 B.
    EXPECT_EQ(qlora_dequant_bytes(catalog_model("llama-3-8b"), p), 14336LL * 4096 * 2);
}

TEST(Lora, ModelStatesFrozenBf16BaseAndFp32Adapters) {
    // Llama-3-8B has 8,030,261,248 parameters: frozen bf16 = 16,060,522,496 B. PEFT default
    // adapters (3,407,872) in fp32: weights 4 B, gradients 4 B, AdamW moments 8 B.
    const ModelConfig m = catalog_model("llama-3-8b");
    Plan p;
    p.seq = 2048;
    p.finetune = Finetune::lora;
    const MemoryReport r = evaluate_memory(m, catalog_gpu("h100-sxm-80gb"), p);
    EXPECT_EQ(r.at_peak.weights, 16'060'522'496 + 3'407'872LL * 4);
    EXPECT_EQ(r.at_peak.gradients, 3'407'872LL * 4);
    EXPECT_EQ(r.at_peak.master_weights, 0);
    EXPECT_EQ(r.at_peak.optimizer_states, 3'407'872LL * 8);
}

// The pytorch profile (torch.autocast over fp32 parameters, foreach AdamW) under LoRA on
// Llama-3-8B, PEFT's default adapters (q and v, rank 8: 3,407,872 parameters):
//  - the optimizer steps the adapters only: _foreach_sqrt's temporary is 3,407,872 x 4 B;
//  - autocast casts fp32 tensors only: LoRA's frozen base is bf16, so no weight is copied, in no
//    phase, with or without recompute;
//  - QLoRA's NF4 weights are dequantized per use by bitsandbytes, which saves the packed weight;
//    prepare_model_for_kbit_training leaves the LM head fp32, whose bf16 cast (128,256 x 4,096 x
//    2 B = 1,050,673,152 B) its GEMM saves for backward from the head's forward on.
TEST(Lora, PytorchProfileStepsAndSavesOnlyWhatItShould) {
    const ModelConfig m = catalog_model("llama-3-8b");
    MemoryOptions o;
    o.profile = pytorch_profile();
    o.timeline = true;
    auto at = [](const MemoryReport& r, PhaseKind kind, std::int64_t layer) {
        for (const TimelineEntry& e : r.timeline_steady)
            if (e.phase.kind == kind && e.phase.layer == layer) return e.bytes;
        ADD_FAILURE() << "no phase";
        return MemoryBreakdown{};
    };
    for (const Recompute rc : {Recompute::none, Recompute::full}) {
        Plan p;
        p.seq = 2048, p.recompute = rc, p.finetune = Finetune::lora;
        const MemoryReport lora_r = evaluate_memory(m, catalog_gpu("h100-sxm-80gb"), p, o);
        EXPECT_EQ(at(lora_r, PhaseKind::optimizer_step, 0).buffers - at(lora_r, PhaseKind::forward, 1).buffers,
                  3'407'872LL * 4);
        const std::int64_t base = at(lora_r, PhaseKind::forward, 1).weights;
        EXPECT_EQ(base, 16'060'522'496 + 3'407'872LL * 4);  // bf16 base + fp32 adapters, nothing else
        EXPECT_EQ(at(lora_r, PhaseKind::forward, 32).weights, base);
        EXPECT_EQ(at(lora_r, PhaseKind::output_loss, 0).weights, base);
        p.finetune = Finetune::qlora;
        const MemoryReport qlora_r = evaluate_memory(m, catalog_gpu("h100-sxm-80gb"), p, o);
        EXPECT_EQ(at(qlora_r, PhaseKind::forward, 32).weights, at(qlora_r, PhaseKind::forward, 1).weights);
        EXPECT_EQ(at(qlora_r, PhaseKind::output_loss, 0).weights - at(qlora_r, PhaseKind::forward, 32).weights,
                  1'050'673'152);
        EXPECT_EQ(at(qlora_r, PhaseKind::optimizer_step, 0).buffers - at(qlora_r, PhaseKind::forward, 1).buffers,
                  3'407'872LL * 4);
    }
}

TEST(Lora, FusedModulesTakeOneAdapter) {
    // PEFT adapts a module whole: Phi-3's qkv_proj (out q + 2 kv) and gate_up_proj (out 2f), GPT-2's
    // c_attn (out 3h), each one adapter of r (in + out). Phi-4 (h 5120, q 5120, kv 1280, f 17920, 40
    // layers): qkv r(5120 + 7680) = 12,800 r, o 10,240 r, gate_up r(5120 + 35840) = 40,960 r, down
    // r(17920 + 5120) = 23,040 r. PEFT's default q,v names qkv_proj: the whole 12,800 r.
    const ModelConfig phi4 = catalog_model("phi-4");
    EXPECT_EQ(lora_params(phi4, lora(8, lora_q | lora_v)), 40LL * 8 * 12'800);       // 4,096,000
    EXPECT_EQ(lora_params(phi4, lora(16, kLoraAllLinear)), 40LL * 16 * 87'040);     // 55,705,600
    // GPT-2 small (h 768, 12 layers): c_attn r(768 + 2304) = 3,072 r, whether q, q,v or q,k,v.
    for (unsigned t : {unsigned{lora_q}, unsigned{lora_q | lora_v}, unsigned{lora_q | lora_k | lora_v}})
        EXPECT_EQ(lora_params(catalog_model("gpt2"), lora(8, t)), 12LL * 8 * 3'072) << t;
    // One adapter, one rank-r intermediate saved (2 B): Phi-4 at s 2048 keeps 2048 x 8 x 2 for q,v.
    Plan p;
    p.seq = 2048;
    p.finetune = Finetune::lora;
    const std::int64_t qv = layer_activation_bytes(phi4, p);
    p.lora = lora(8, lora_q);
    EXPECT_EQ(layer_activation_bytes(phi4, p), qv);
    // PEFT's target_modules name the fused modules; a part of one is said to adapt it whole.
    p.lora = lora(8, lora_q | lora_up | lora_down);
    std::vector<std::string> warnings;
    EXPECT_EQ(peft_config(phi4, p, &warnings)["lora_config"]["target_modules"],
              nlohmann::json({"qkv_proj", "gate_up_proj", "down_proj"}));
    ASSERT_EQ(warnings.size(), 2u);
    EXPECT_NE(warnings[0].find("qkv_proj"), std::string::npos) << warnings[0];
    EXPECT_NE(warnings[1].find("gate_up_proj"), std::string::npos) << warnings[1];
}

TEST(Lora, ActivationsOfFrozenLayersAndAdapters) {
    // Llama-3-8B, s = 2048, b = 1, bf16, flash, no dropout; bytes per token of one layer:
    // pre-training: attention norm input 8192 + QKV input 8192 + Q 8192 + K 2048 + V 2048 +
    //   log-sum-exp 32*4 + attention output 8192 + MLP norm input 8192 + MLP input 8192 +
    //   gate, up, down input 3 * 28672 = 139,392.
    // LoRA on q,v: the frozen MLP keeps neither its input (8192) nor the down input (28672);
    //   q and v adapters keep their rank-8 intermediates (2 * 8 * 2 = 32): 102,560.
    const ModelConfig m = catalog_model("llama-3-8b");
    Plan p;
    p.seq = 2048;
    EXPECT_EQ(layer_activation_bytes(m, p), 2048LL * 139'392);
    p.finetune = Finetune::lora;
    EXPECT_EQ(layer_activation_bytes(m, p), 2048LL * 102'560);
    // With lora_dropout each adapter keeps its dropped-out input (2 B) and mask (1 B) of width 4096.
    p.lora.dropout = 0.05;
    EXPECT_EQ(layer_activation_bytes(m, p), 2048LL * (102'560 + 2 * 4096 * 3));
}

TEST(Lora, GradientCheckpointingKeepsLayerInputsAsHfDoes) {
    // HF gradient_checkpointing_enable(): each decoder layer keeps its input, s*b*h*2 B.
    const ModelConfig m = catalog_model("llama-3-8b");
    Plan p;
    p.seq = 2048;
    p.finetune = Finetune::qlora;
    p.recompute = Recompute::full;
    EXPECT_EQ(layer_activation_bytes(m, p), 2048LL * 4096 * 2);
}

// ---- Offload -------------------------------------------------------------------------------
TEST(Offload, ZeroOffloadPaperSplit) {
    // Ren et al. 2021, sec. 4.1: fp16 parameters and gradients on the GPU (2 + 2 = 4 B per
    // parameter); fp32 parameters, momentum and variance (12 B) plus the fp32 gradients (4 B)
    // on the CPU.
    const std::int64_t n = 1'000'000'000;
    const OffloadSplit s = offload_state_bytes(n, Precision::bf16_mixed, Optimizer::adamw, 2, 1, Offload::optimizer);
    EXPECT_EQ(s.gpu.weights + s.gpu.gradients, 4 * n);
    EXPECT_EQ(s.gpu.master_weights + s.gpu.optimizer_states, 0);
    EXPECT_EQ(s.host_bytes, 16 * n);
    // Over 4 data-parallel ranks (ZeRO-2): each GPU's host partition is a quarter, and its
    // gradient partition too.
    const OffloadSplit d = offload_state_bytes(n, Precision::bf16_mixed, Optimizer::adamw, 2, 4, Offload::optimizer);
    EXPECT_EQ(d.host_bytes, 4 * n);
    EXPECT_EQ(d.gpu.gradients, n / 2);
    // ZeRO-Infinity parameter offload (ZeRO-3): the 16-bit parameter partition moves too.
    const OffloadSplit z = offload_state_bytes(n, Precision::bf16_mixed, Optimizer::adamw, 3, 4,
                                               Offload::optimizer_and_params);
    EXPECT_EQ(z.gpu.weights, 0);
    EXPECT_EQ(z.host_bytes, 4 * n + n / 2);
}

// Ranks run stage-slowest (Megatron-LM's tp-cp-ep-dp-pp order): by hand, stages holding 10, 20,
// 30, 40 B a rank. 2 ranks a stage, nodes of 4: {10, 10, 20, 20} = 60 and {30, 30, 40, 40} =
// 140. 3 ranks a stage: {10, 10, 10, 20} = 50, {20, 20, 30, 30} = 100, {30, 40, 40, 40} = 150.
// A node larger than the job holds it all: 2 x (10 + 20 + 30 + 40) = 200.
TEST(Offload, HostBytesPerNodeSumsTheNodesOwnRanks) {
    const std::vector<std::int64_t> stages{10, 20, 30, 40};
    EXPECT_EQ(host_bytes_per_node(stages, 2, 4), 140);
    EXPECT_EQ(host_bytes_per_node(stages, 3, 4), 150);
    EXPECT_EQ(host_bytes_per_node(stages, 2, 16), 200);
    EXPECT_EQ(host_bytes_per_node(stages, 1, 1), 40);
    // 10, 40, 10 B a rank over 10 ranks a stage, nodes of 3: the nodes across the boundaries hold
    // {10, 40, 40} = 90 and {40, 40, 10} = 90, the two wholly inside the middle stage 3 x 40 = 120.
    EXPECT_EQ(host_bytes_per_node({10, 40, 10}, 10, 3), 120);
    // 2^20 GPUs in two stages of 5 and 7 B a rank, nodes of 8: 8 x 7 = 56.
    EXPECT_EQ(host_bytes_per_node({5, 7}, std::int64_t{1} << 19, 8), 56);
}

// One node of 8 at dp 1, ZeRO-0, offloading the optimizer: the node holds one copy of the fp32
// states whichever way the model is split, 8,030,261,248 x 16 B. Under pp 8 this was the busiest
// stage's 20.83 GiB times 8 (166.6 GiB, 39 % high); tp 8 holds the 65 norm vectors (4,096 each)
// on every rank, 7 x 65 x 4,096 x 16 B more.
TEST(Offload, HostBytesPerNodeOfAPipelineIsTheSumOverItsStages) {
    const ModelConfig m = catalog_model("llama-3-8b");
    const GpuSpec g = catalog_gpu("h100-sxm-80gb");
    Plan p;
    p.seq = 4096;
    p.grad_acc = 8;
    p.offload = Offload::optimizer;
    p.pp = 8;
    EXPECT_EQ(evaluate_memory(m, g, p).host_bytes_per_node, 8'030'261'248LL * 16);
    p.pp = 1;
    p.tp = 8;
    EXPECT_EQ(evaluate_memory(m, g, p).host_bytes_per_node, 8'030'261'248LL * 16 + 7LL * 65 * 4096 * 16);
}

TEST(Offload, MemoryReportHostBytesAndPcieTraffic) {
    const ModelConfig m = catalog_model("llama-3-8b");
    const GpuSpec g = catalog_gpu("h100-sxm-80gb");
    Plan p;
    p.seq = 2048;
    p.zero = ZeroStage{2};
    p.recompute = Recompute::full;
    p.offload = Offload::optimizer;
    const MemoryReport r = evaluate_memory(m, g, p);
    // 8,030,261,248 parameters x 16 B on the host; GPU: bf16 weights + bf16 gradients.
    EXPECT_EQ(r.host_bytes_per_gpu, 8'030'261'248LL * 16);
    EXPECT_EQ(r.host_bytes_per_node, r.host_bytes_per_gpu);  // one GPU in use
    EXPECT_EQ(r.at_peak.weights + r.at_peak.gradients, 8'030'261'248LL * 4);
    EXPECT_EQ(r.at_peak.optimizer_states + r.at_peak.master_weights, 0);
    // Per step: bf16 gradients down (2 B) and bf16 parameters up (2 B) per parameter.
    EXPECT_DOUBLE_EQ(offload_pcie_traffic(m, p).total(), 8'030'261'248.0 * 4);
    const Throughput t = estimate_throughput(m, g, p);
    EXPECT_GT(t.offload_s, 0.0);
    EXPECT_DOUBLE_EQ(t.pcie_bytes_per_step, 8'030'261'248.0 * 4);
    EXPECT_EQ(t.optimizer_s, 0.0);
}

TEST(Offload, CpuStepCoversThePipelineStageWithTheMostParameters) {
    // Llama-3-8B at pp 4: 8 decoder layers of 218,112,000 parameters a stage; the last stage
    // adds the final norm (4,096) and the output layer (128,256 x 4,096 = 525,336,576):
    // 2,270,236,672, against 8,030,261,248 / 4 = 2,007,565,312 for an even share. The CPU
    // step reads and writes 30 B per parameter at the assumed host bandwidth, so its change
    // between two bandwidths isolates the parameter count.
    const ModelConfig m = catalog_model("llama-3-8b");
    const GpuSpec g = catalog_gpu("h100-sxm-80gb");
    Plan p;
    p.seq = 2048;
    p.pp = 4;
    p.grad_acc = 8;
    p.zero = ZeroStage{1};
    p.offload = Offload::optimizer;
    OffloadAssumptions fast, slow;
    fast.host_bandwidth_bytes_per_s_per_gpu = 60e9;
    slow.host_bandwidth_bytes_per_s_per_gpu = 30e9;
    const double cpu_step_delta_s = estimate_extended_throughput(m, g, p, {}, slow).offload_s -
                                    estimate_extended_throughput(m, g, p, {}, fast).offload_s;
    EXPECT_NEAR(cpu_step_delta_s, 2'270'236'672.0 * 30.0 * (1.0 / 30e9 - 1.0 / 60e9), 1e-9);
}

TEST(Offload, NeedsPcieBandwidthInTheSpec) {
    GpuSpec g = catalog_gpu("h100-sxm-80gb");
    ASSERT_TRUE(g.pcie_bandwidth_bytes_per_s.has_value());
    EXPECT_DOUBLE_EQ(*g.pcie_bandwidth_bytes_per_s, 63.0e9);  // PCIe Gen5 x16 per direction
    g.pcie_bandwidth_bytes_per_s.reset();
    Plan p;
    p.offload = Offload::optimizer;
    p.zero = ZeroStage{1};
    EXPECT_THROW(estimate_throughput(catalog_model("llama-3-8b"), g, p), InputError);
}

// ---- Pipeline schedules ----------------------------------------------------------------------
TEST(PipelineSchedule, InFlightMicroBatches) {
    // p = 4 stages, m = 8 micro-batches. GPipe (Huang et al. 2019) holds all 8 on every stage;
    // 1F1B (Narayanan et al. 2021, sec. 2.2.1) holds p - i on stage i: 4, 3, 2, 1.
    Plan p;
    p.pp = 4;
    p.grad_acc = 8;
    p.pp_schedule = PpSchedule::gpipe;
    for (std::int64_t s = 0; s < 4; ++s) EXPECT_EQ(pipeline_in_flight(p, s), 8);
    p.pp_schedule = PpSchedule::one_f_one_b;
    EXPECT_EQ(pipeline_in_flight(p, 0), 4);
    EXPECT_EQ(pipeline_in_flight(p, 3), 1);
    p.grad_acc = 2;  // fewer micro-batches than stages: only m in flight
    EXPECT_EQ(pipeline_in_flight(p, 0), 2);
}

TEST(PipelineSchedule, BubbleFractions) {
    // Narayanan et al. 2021, sec. 2.2: (p - 1) / m for GPipe and 1F1B, (p - 1) / (v m) interleaved.
    Plan p;
    p.pp = 8;
    p.grad_acc = 32;
    EXPECT_DOUBLE_EQ(pipeline_bubble_fraction(p), 7.0 / 32.0);
    p.pp_schedule = PpSchedule::gpipe;
    EXPECT_DOUBLE_EQ(pipeline_bubble_fraction(p), 7.0 / 32.0);
    p.pp_schedule = PpSchedule::interleaved;
    p.vpp = 2;
    EXPECT_DOUBLE_EQ(pipeline_bubble_fraction(p), 7.0 / 64.0);
    p.vpp = 4;
    EXPECT_DOUBLE_EQ(pipeline_bubble_fraction(p), 7.0 / 128.0);
}

TEST(PipelineSchedule, InterleavedHoldsOnePlusPMinusOneOverPvMore) {
    // Stage 0 of interleaved 1F1B with p = 8, v = 2 runs (p-1)*2 + (v-1)*p + 1 = 23 chunk
    // forwards before its first backward; a chunk is 32 / 16 = 2 layers of Llama-3-8B: 46
    // layer activations, against 8 micro-batches x 4 layers = 32 under 1F1B. Ratio
    // 46 / 32 = 1 + (p-1)/(p v) (Korthikanti et al. 2022, sec. 4.2.3).
    Plan p;
    p.pp = 8;
    p.grad_acc = 32;
    EXPECT_EQ(pipeline_held_layer_units(p, 32, 0), 32);
    p.pp_schedule = PpSchedule::interleaved;
    p.vpp = 2;
    EXPECT_EQ(pipeline_in_flight(p, 0), 23);
    EXPECT_EQ(pipeline_held_layer_units(p, 32, 0), 46);
    // In the memory model: the most loaded stage's activations grow by that ratio.
    const ModelConfig m = catalog_model("llama-3-8b");
    const GpuSpec g = catalog_gpu("h100-sxm-80gb");
    Plan a;
    a.seq = 4096;
    a.pp = 8;
    a.grad_acc = 32;
    a.recompute = Recompute::full;
    // fp32 main gradients: no fp32 copy at the optimizer step, whose peak would otherwise hide the
    // activations' (Megatron-LM's main_grad.float() under 16-bit main gradients).
    a.precision = Precision::bf16_mixed_fp32_grads;
    Plan b = a;
    b.pp_schedule = PpSchedule::interleaved;
    b.vpp = 2;
    const MemoryReport ra = evaluate_memory(m, g, a), rb = evaluate_memory(m, g, b);
    EXPECT_GT(rb.peak_bytes, ra.peak_bytes);
    Plan c = a;
    c.pp_schedule = PpSchedule::gpipe;
    EXPECT_GT(evaluate_memory(m, g, c).peak_bytes, ra.peak_bytes);
    // The bubble shrinks in the step time.
    EXPECT_LT(estimate_throughput(m, g, b).pipeline_bubble_s, estimate_throughput(m, g, a).pipeline_bubble_s);
}

TEST(PipelineSchedule, InterleavedNeedsWholeChunks) {
    const ModelConfig m = catalog_model("llama-3-8b");
    Plan p;
    p.pp = 8;
    p.grad_acc = 8;
    p.pp_schedule = PpSchedule::interleaved;
    p.vpp = 3;  // 8 * 3 does not divide 32 layers
    EXPECT_THROW(validate_plan(p, m), InputError);
    p.vpp = 1;
    p.pp_schedule = PpSchedule::one_f_one_b;
    p.vpp = 2;  // vpp without interleaving
    EXPECT_THROW(validate_plan(p, m), InputError);
}

// One stage has no pipeline to schedule (Megatron-LM's forward_backward_no_pipelining runs each
// micro-batch's forward and backward back to back): GPipe and interleaved need pp > 1, and the
// search refuses such a pin before it searches.
TEST(PipelineSchedule, SchedulesOtherThan1F1BNeedTwoStages) {
    const ModelConfig m = catalog_model("llama-3-8b");
    Plan p;
    p.seq = 4096;
    p.grad_acc = 8;
    p.pp_schedule = PpSchedule::gpipe;
    try {
        validate_plan(p, m);
        ADD_FAILURE() << "GPipe over one stage was accepted";
    } catch (const InputError& e) {
        EXPECT_STREQ(e.what(), "--pp-schedule: gpipe needs --pp > 1");
    }
    p.pp = 2;
    EXPECT_NO_THROW(validate_plan(p, m));
    SearchRequest r;
    r.gpus = 8;
    r.gbs_tokens = 64 * 4096;
    r.seq = 4096;
    r.pins.pp_schedule = PpSchedule::gpipe;
    r.pins.pp = 1;
    EXPECT_THROW(search_plans(m, catalog_gpu("h100-sxm-80gb"), r), InputError);
    r.pins.pp.reset();  // unpinned: only pipelines of two stages or more are ranked
    const SearchResult out = search_plans(m, catalog_gpu("h100-sxm-80gb"), r);
    ASSERT_FALSE(out.candidates.empty());
    for (const Candidate& c : out.candidates) EXPECT_GE(c.plan.pp, 2);
}

// Llama 3.1 405B (126 layers) as Megatron-Bridge runs it: pp 8 x vpp 8 = 64 chunks divide
// 126 + 2 = 128 with the embedding and the loss taking a layer slot each
// (--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split): 2 layers
// per chunk, 16 per stage, 15 on the first (embedding slot) and the last (loss slot).
TEST(PipelineSchedule, InterleavedCountsEmbeddingAndLossLikeMegatron) {
    const ModelConfig m = catalog_model("llama-3.1-405b");
    ASSERT_EQ(m.layers, 126);
    Plan p;
    p.seq = 8192;
    p.pp = 8;
    p.tp = 8;
    p.grad_acc = 64;
    p.pp_schedule = PpSchedule::interleaved;
    p.vpp = 8;
    EXPECT_NO_THROW(validate_plan(p, m));
    EXPECT_TRUE(interleaved_counts_embedding_and_loss(p, m.layers));
    EXPECT_EQ(interleaved_chunk_layers(p, m.layers), 2);
    std::int64_t total = 0;
    for (std::int64_t stage = 0; stage < p.pp; ++stage) {
        const std::int64_t expected = stage == 0 || stage == 7 ? 15 : 16;
        EXPECT_EQ(pipeline_stage_layers(p, m.layers, stage), expected) << stage;
        total += pipeline_stage_layers(p, m.layers, stage);
    }
    EXPECT_EQ(total, 126);
    const auto args = emit_plan(EmitFormat::megatron, m, catalog_gpu("h100-sxm-80gb"), p).text;
    EXPECT_NE(args.find("--num-virtual-stages-per-pipeline-rank 8"), std::string::npos) << args;
    EXPECT_NE(args.find("--account-for-embedding-in-pipeline-split"), std::string::npos);
    EXPECT_NE(args.find("--account-for-loss-in-pipeline-split"), std::string::npos);
    // 8 x 3 = 24 chunks divide neither 126 nor 128: refused.
    p.vpp = 3;
    EXPECT_THROW(validate_plan(p, m), InputError);
    // An even split is unchanged: 32 layers, pp 4 x vpp 2 = 8 chunks of 4.
    const ModelConfig small = catalog_model("llama-3-8b");
    p.vpp = 2;
    p.pp = 4;
    EXPECT_FALSE(interleaved_counts_embedding_and_loss(p, small.layers));
    EXPECT_EQ(pipeline_stage_layers(p, small.layers, 0), 8);
}

// ---- Context and expert parallelism ------------------------------------------------------------
TEST(ContextParallel, ActivationsDivideByCpPlusRingBuffers) {
    const ModelConfig m = catalog_model("llama-3-8b");
    const GpuSpec g = catalog_gpu("h100-sxm-80gb");
    Plan whole;
    whole.seq = 8192;
    whole.dp = 2;
    Plan cp = whole;
    cp.dp = 1;
    cp.cp = 2;
    Plan half = whole;
    half.seq = 4096;
    // A cp = 2 rank keeps what a 4096-token sequence keeps.
    EXPECT_EQ(evaluate_memory(m, g, cp).activations_per_layer_bytes,
              evaluate_memory(m, g, half).activations_per_layer_bytes);
    // Ring K/V buffers: K and V chunks, double-buffered, forward and backward (dK, dV):
    // 8 * 4096 tokens * 1024 * 2 B = 67,108,864 B.
    EXPECT_EQ(cp_ring_buffer_bytes(m, context_parallel_rank_plan(cp)), 8LL * 4096 * 1024 * 2);
    EXPECT_EQ(cp.gpus(), 2);
    EXPECT_EQ(cp.global_batch_tokens(), 8192);
    cp.seq = 8190;  // not divisible by 2 * cp
    EXPECT_THROW(validate_plan(cp, m), InputError);
}

TEST(ExpertParallel, ExpertsShardedOverEp) {
    // Mixtral-8x7B: 46,702,792,704 parameters, of which experts 8 * 3 * 4096 * 14336 * 32 =
    // 45,097,156,608; the rest (attention, norms, routers, embeddings) 1,605,636,096.
    // ep = 8: one expert per GPU: 1,605,636,096 + 45,097,156,608 / 8 = 7,242,780,672 bf16 weights.
    const ModelConfig m = catalog_model("mixtral-8x7b");
    ASSERT_EQ(count_params(m).total, 46'702'792'704);
    Plan p;
    p.seq = 4096;
    p.dp = 8;
    p.ep = 8;
    const MemoryReport r = evaluate_memory(m, catalog_gpu("h100-sxm-80gb"), p);
    EXPECT_EQ(r.at_peak.weights, 7'242'780'672LL * 2);
    // All-to-all buffers: send + receive of 4096 tokens x top-2 x 4096 x 2 B.
    EXPECT_EQ(ep_all_to_all_buffer_bytes(m, p), 2LL * 4096 * 2 * 4096 * 2);
    p.ep = 3;
    EXPECT_THROW(validate_plan(p, m), InputError);  // 3 does not divide 8 experts
    p.ep = 2;
    EXPECT_THROW(validate_plan(p, catalog_model("llama-3-8b")), InputError);  // dense model
}

// ---- Defaults, JSON, emit ------------------------------------------------------------------------
TEST(Extensions, DefaultsChangeNothing) {
    Plan p;
    EXPECT_FALSE(uses_extended_states(p));
    EXPECT_FALSE(uses_extended_throughput(p));
    EXPECT_EQ(extension_flags(p), "");
    // Every plan flag's key is written, at its default too (audit 62 item 8: scripts read them);
    // the adapters' settings of a plan without adapters are null, not applicable.
    const auto j = plan_to_json(p);
    EXPECT_EQ(j.at("finetune"), "full");
    EXPECT_EQ(j.at("offload"), "none");
    EXPECT_EQ(j.at("pp_schedule"), "1f1b");
    EXPECT_EQ(j.at("vpp"), 1);
    EXPECT_EQ(j.at("cp"), 1);
    EXPECT_EQ(j.at("ep"), 1);
    EXPECT_EQ(j.at("moe_capacity_factor"), 1.0);
    for (const char* k : {"lora_rank", "lora_alpha", "lora_targets", "lora_dropout"}) EXPECT_TRUE(j.at(k).is_null()) << k;
    EXPECT_FALSE(j.contains("fp8_scaling"));  // documented: only when rowwise
    EXPECT_EQ(plan_to_json(plan_from_json(j)), j);
}

TEST(Extensions, JsonRoundTrip) {
    Plan p;
    p.finetune = Finetune::qlora;
    p.lora = lora(64, kLoraAllLinear);
    p.offload = Offload::optimizer;
    p.cp = 2;
    const Plan q = plan_from_json(plan_to_json(p));
    EXPECT_EQ(q.finetune, Finetune::qlora);
    EXPECT_EQ(q.lora.rank, 64);
    EXPECT_EQ(q.lora.targets, kLoraAllLinear);
    EXPECT_EQ(q.offload, Offload::optimizer);
    EXPECT_EQ(q.cp, 2);
    EXPECT_THROW(plan_from_json(nlohmann::json{{"finetune", "half"}}), InputError);
}

TEST(Extensions, EmitMatchingFrameworkSettings) {
    const ModelConfig m = catalog_model("mixtral-8x7b");
    Plan p;
    p.seq = 8192;
    p.dp = 4;
    p.pp = 4;
    p.cp = 2;
    p.ep = 4;
    p.grad_acc = 8;
    p.pp_schedule = PpSchedule::interleaved;
    p.vpp = 2;
    const std::string meg = megatron_arguments(m, p);
    EXPECT_NE(meg.find("--context-parallel-size 2"), std::string::npos);
    EXPECT_NE(meg.find("--expert-model-parallel-size 4"), std::string::npos);
    EXPECT_NE(meg.find("--num-layers-per-virtual-pipeline-stage 4"), std::string::npos);  // 32 / (4 * 2)
    const std::string titan = torchtitan_toml(m, p);
    EXPECT_NE(titan.find("context_parallel_degree = 2"), std::string::npos);
    EXPECT_NE(titan.find("expert_parallel_degree = 4"), std::string::npos);
    EXPECT_NE(titan.find("Interleaved1F1B"), std::string::npos);

    Plan o;
    o.zero = ZeroStage{3};
    o.offload = Offload::optimizer_and_params;
    const auto ds = deepspeed_config(o);
    EXPECT_EQ(ds["zero_optimization"]["offload_optimizer"]["device"], "cpu");
    EXPECT_EQ(ds["zero_optimization"]["offload_param"]["device"], "cpu");

    Plan f;
    f.finetune = Finetune::qlora;
    f.lora = lora(16, kLoraAllLinear);
    f.lora.alpha = 32;
    f.recompute = Recompute::full;
    const auto peft = peft_config(catalog_model("llama-3-8b"), f);
    EXPECT_EQ(peft["lora_config"]["r"], 16);
    EXPECT_EQ(peft["lora_config"]["lora_alpha"], 32.0);
    EXPECT_EQ(peft["lora_config"]["target_modules"],
              nlohmann::json({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}));
    EXPECT_EQ(peft["bnb_config"]["bnb_4bit_quant_type"], "nf4");
    EXPECT_EQ(peft["training_arguments"]["gradient_checkpointing"], true);
}

// Issue 37, item 8: an fp8-mixed recommendation emitted for the Trainer is bf16 autocast (the
// Trainer has no fp8 switch), said on stderr, never an fp32 Trainer ("bf16": false, "fp16": false)
// without a word; pure bf16 becomes bf16-mixed, said too.
TEST(Extensions, PeftExportSaysWhatItChangesInTheRecipe) {
    Plan p;
    p.finetune = Finetune::lora;
    p.lora = lora(8, lora_q | lora_v);
    p.precision = Precision::fp8_mixed;
    std::vector<std::string> warnings;
    auto j = peft_config(catalog_model("llama-3-8b"), p, &warnings);
    EXPECT_EQ(j["training_arguments"]["bf16"], true);
    EXPECT_EQ(j["training_arguments"]["fp16"], false);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("no fp8 switch"), std::string::npos) << warnings[0];
    warnings.clear();
    p.precision = Precision::bf16;
    j = peft_config(catalog_model("llama-3-8b"), p, &warnings);
    EXPECT_EQ(j["training_arguments"]["bf16"], true);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("pure-bf16"), std::string::npos) << warnings[0];
    warnings.clear();
    p.precision = Precision::fp32;  // what the Trainer does with neither switch: no warning
    j = peft_config(catalog_model("llama-3-8b"), p, &warnings);
    EXPECT_EQ(j["training_arguments"]["bf16"], false);
    EXPECT_TRUE(warnings.empty());
}

// Helper audit of the emitted configs: PEFT matches target_modules against the model class's own
// module names. transformers MptAttention fuses q|k|v in Wqkv (then out_proj) and MptMLP has
// up_proj / down_proj; MixtralBlockSparseTop2MLP names the experts' gate, down and up w1, w2, w3.
// The Trainer's "sgd" has no momentum buffer, which the plan holds: said.
TEST(Extensions, PeftTargetsUseTheModelClassesModuleNames) {
    Plan p;
    p.finetune = Finetune::lora;
    p.lora = lora(8, kLoraAllLinear);
    EXPECT_EQ(peft_config(catalog_model("mpt-7b"), p)["lora_config"]["target_modules"],
              nlohmann::json({"Wqkv", "out_proj", "up_proj", "down_proj"}));
    EXPECT_EQ(peft_config(catalog_model("gpt2"), p)["lora_config"]["target_modules"],
              nlohmann::json({"c_attn", "attn.c_proj", "c_fc", "mlp.c_proj"}));
    std::vector<std::string> warnings;
    EXPECT_EQ(peft_config(catalog_model("mixtral-8x7b"), p, &warnings)["lora_config"]["target_modules"],
              nlohmann::json({"q_proj", "k_proj", "v_proj", "o_proj", "w1", "w2", "w3"}));
    EXPECT_TRUE(std::any_of(warnings.begin(), warnings.end(),
                            [](const std::string& w) { return w.find("target_parameters") != std::string::npos; }));
    p.lora = lora(8, lora_q | lora_v);
    warnings.clear();
    EXPECT_EQ(peft_config(catalog_model("mixtral-8x7b"), p, &warnings)["lora_config"]["target_modules"],
              nlohmann::json({"q_proj", "v_proj"}));
    EXPECT_TRUE(warnings.empty());
    p.optimizer = Optimizer::sgd;
    const auto sgd = peft_config(catalog_model("llama-3-8b"), p, &warnings);
    EXPECT_EQ(sgd["training_arguments"]["optim"], "sgd");
    EXPECT_EQ(sgd["max_length"], p.seq);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("momentum"), std::string::npos) << warnings[0];
}

// gpt-oss's experts are parameter tensors of GptOssExperts, not nn.Linear modules: PEFT adapts them
// through target_parameters (one rank-r pair per expert, PEFT's ParamWrapper) and bitsandbytes leaves
// them in 16 bits under QLoRA, quantising q, k, v and o alone.
TEST(Extensions, GptOssExpertsArePeftTargetParameters) {
    const ModelConfig m = catalog_model("gpt-oss-20b");
    Plan p;
    p.finetune = Finetune::lora;
    p.lora = lora(8, kLoraAllLinear);
    const auto j = peft_config(m, p)["lora_config"];
    EXPECT_EQ(j["target_modules"], nlohmann::json({"q_proj", "k_proj", "v_proj", "o_proj"}));
    EXPECT_EQ(j["target_parameters"], nlohmann::json({"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}));
    // Per layer, r 8: q and o 8 x (2880 + 4096), k and v 8 x (2880 + 512), 32 experts' gate|up
    // 8 x (2880 + 5760) and down 8 x (2880 + 2880): 3,852,288; 24 layers.
    EXPECT_EQ(lora_params(m, p.lora), 24 * (2 * 8 * 6976 + 2 * 8 * 3392 + 32 * 8 * 8640 + 32 * 8 * 5760));
    p.lora = lora(8, lora_q | lora_v);
    EXPECT_FALSE(peft_config(m, p)["lora_config"].contains("target_parameters"));
    // QLoRA: 24 x (2 x 2880 x 4096 + 2 x 2880 x 512) = 637,009,920 weights in NF4; the experts,
    // router, norms, sinks and biases in bf16 beside the embedding and head.
    p.finetune = Finetune::qlora;
    const FrozenBase b = frozen_base(m, p);
    EXPECT_EQ(b.quantized_params, 637'009'920);
    EXPECT_EQ(b.quantized_params + b.other_params, count_params(m).total);
    // The plan's weights are that frozen base (the others in fp32 after prepare_model_for_kbit_training:
    // 20,277,747,264 x 4 B) beside the q, v adapters' fp32 weights.
    p.lora = lora(8, lora_q | lora_v);
    p.seq = 2048;
    EXPECT_EQ(frozen_base(m, p).other_bytes, 20'277'747'264LL * 4);
    EXPECT_EQ(evaluate_memory(m, catalog_gpu("h100-sxm-80gb"), p).at_peak.weights,
              frozen_base(m, p).total_bytes() + lora_params(m, p.lora) * 4);
}

TEST(Extensions, LoraStepIsCheaperThanFullFineTune) {
    // No weight-gradient GEMMs for frozen weights: the LoRA step must be faster than the full
    // fine-tune's at the same shape, and QLoRA pays for dequantisation on top of LoRA.
    const ModelConfig m = catalog_model("llama-3-8b");
    const GpuSpec g = catalog_gpu("h100-sxm-80gb");
    Plan p;
    p.seq = 2048;
    p.grad_acc = 4;
    const double full = estimate_throughput(m, g, p).step_time_s;
    p.finetune = Finetune::lora;
    const double lora_s = estimate_throughput(m, g, p).step_time_s;
    p.finetune = Finetune::qlora;
    const double qlora_s = estimate_throughput(m, g, p).step_time_s;
    EXPECT_LT(lora_s, full);
    EXPECT_GT(qlora_s, lora_s);
    // Model FLOPs: forward + input gradient = 4 N per token instead of 6 N (plus attention).
    p.finetune = Finetune::lora;
    const Throughput t = estimate_throughput(m, g, p);
    p.finetune = Finetune::full;
    EXPECT_LT(t.model_flops_per_step, estimate_throughput(m, g, p).model_flops_per_step * 0.75);
}

TEST(ContextParallel, StepTimeKeepsTheWholeSequencesFlops) {
    // cp splits each sequence, not the batch: the step's model FLOPs (MFU numerator, full
    // sequence length) equal those of the same global batch without cp; the ring's attention
    // work per rank is (s/cp) x s, so the step is not cp times cheaper in attention.
    // A long-context variant of the config: --seq may not exceed max_position_embeddings.
    ModelConfig m = catalog_model("llama-3-8b");
    m.max_positions = 32768;
    const GpuSpec g = catalog_gpu("h100-sxm-80gb");
    Plan a;
    a.seq = 32768;
    a.recompute = Recompute::full;
    Plan b = a;
    b.cp = 2;
    const Throughput ta = estimate_throughput(m, g, a), tb = estimate_throughput(m, g, b);
    EXPECT_DOUBLE_EQ(tb.model_flops_per_step, ta.model_flops_per_step);
    EXPECT_EQ(tb.gpus, 2);
    EXPECT_EQ(tb.tokens_per_step, 32768);
    // Two GPUs on one sequence: faster than one, slower than twice as fast (K/V ring, same work).
    EXPECT_LT(tb.step_time_s, ta.step_time_s);
    EXPECT_GT(tb.step_time_s, 0.5 * ta.step_time_s - 1e-9);
}

TEST(ExpertParallel, AllToAllInTheStepTime) {
    const ModelConfig m = catalog_model("mixtral-8x7b");
    const GpuSpec g = catalog_gpu("h100-sxm-80gb");
    Plan p;
    p.seq = 4096;
    p.dp = 8;
    p.zero = ZeroStage{1};
    p.recompute = Recompute::full;
    const double plain = estimate_throughput(m, g, p).step_time_s;
    p.ep = 8;
    const Throughput t = estimate_throughput(m, g, p);
    EXPECT_GT(t.cp_ep_communication_s, 0.0);
    EXPECT_GT(t.step_time_s, plain);
}

// NCCL's all-to-all sends to every peer at once: to the rank's node over NVLink, beyond it over its
// NIC. Qwen3-30B-A3B at ep 16 over two H100 nodes: each rank routes 4,096 tokens x 8 experts x 2,048 x
// 2 B = 134,217,728 B per all-to-all, 7/16 of it to its node's peers (450 GB/s), 8/16 over its NIC
// (50 GB/s), whose share sets the time (until 2026-12-02: 15/16 at the NIC's bandwidth). Dispatch and
// combine, forward and backward, in 48 layers and 64 micro-batches.
TEST(ExpertParallel, AllToAllSplitsNvlinkAndNetworkPeers) {
    const ModelConfig m = catalog_model("qwen3-30b-a3b");
    const GpuSpec g = catalog_gpu("h100-sxm-80gb");
    Plan p;
    p.seq = 4096, p.mbs = 1, p.grad_acc = 64, p.dp = 16, p.ep = 16, p.zero = ZeroStage{1};
    p.precision = Precision::fp8_mixed;
    const double eff = g.efficiency.collective_bus_efficiency, routed = 4096.0 * 8 * 2048 * 2;
    const double nic_s = routed * 8 / 16 / (50e9 * eff);
    EXPECT_NEAR(estimate_throughput(m, g, p).cp_ep_communication_s, 64 * 48 * 2 * 2 * nic_s, 1e-9);
    // Inside one node (ep 8 of dp 8): 7/8 of the bytes over NVLink, as before.
    p.dp = 8, p.ep = 8, p.grad_acc = 128;
    const double nvlink_s = routed * 7 / 8 / (450e9 * eff);
    EXPECT_NEAR(estimate_throughput(m, g, p).cp_ep_communication_s, 128 * 48 * 2 * 2 * nvlink_s, 1e-9);
}

TEST(Search, FineTuningSearchesPeftRecipeAndOffloadNeedsHostMemory) {
    const ModelConfig m = catalog_model("llama-3-8b");
    const GpuSpec g = catalog_gpu("rtx-4090");
    SearchRequest r;
    r.gpus = 1;
    r.gbs_tokens = 65536;
    r.seq = 2048;
    r.pins.finetune = Finetune::qlora;
    const SearchResult q = search_plans(m, g, r);
    ASSERT_FALSE(q.candidates.empty());
    for (const Candidate& c : q.candidates) {
        EXPECT_EQ(c.plan.finetune, Finetune::qlora);
        EXPECT_EQ(c.plan.precision, Precision::bf16_mixed);
        EXPECT_NE(c.plan.recompute, Recompute::selective);
        EXPECT_LE(c.memory.peak_bytes, q.limit_bytes);
    }
    // A full fine-tune does not fit on one 24 GB card without offload ...
    r.pins.finetune = Finetune::full;
    EXPECT_TRUE(search_plans(m, g, r).candidates.empty());
    // ... and with 256 GB of host memory ZeRO-Infinity parameter offload does.
    r.host_memory_bytes = 256'000'000'000;
    const SearchResult o = search_plans(m, g, r);
    ASSERT_FALSE(o.candidates.empty());
    EXPECT_EQ(o.candidates.front().plan.offload, Offload::optimizer_and_params);
    EXPECT_LE(o.candidates.front().memory.host_bytes_per_node, 256'000'000'000);
    // Not enough host memory: rejected.
    r.host_memory_bytes = 64'000'000'000;
    EXPECT_TRUE(search_plans(m, g, r).candidates.empty());
}

// Regression: with --offload pinned, the plain search ran without the variant merge that applied
// --host-memory, and recommended Llama-3-8B with its optimizer offloaded on one node of 8 H100s
// under a 64 GiB host limit. Offloaded: the fp32 master, both AdamW moments and the fp32
// gradients, 16 B per parameter, 8.03e9 x 16 B = 119.7 GiB, all in the one node whatever the
// sharding: over 64 GiB, under 128 GiB.
TEST(Search, PinnedOffloadStillHonoursHostMemory) {
    const ModelConfig m = catalog_model("llama-3-8b");
    const GpuSpec g = catalog_gpu("h100-sxm-80gb");
    SearchRequest r;
    r.gpus = 8;
    r.gbs_tokens = 4'194'304;
    r.seq = 4096;
    r.pins.offload = Offload::optimizer;
    r.host_memory_bytes = 64 * kGiB;
    const SearchResult tight = search_plans(m, g, r);
    EXPECT_TRUE(tight.candidates.empty());
    ASSERT_FALSE(tight.rejected.empty());
    const bool named = std::any_of(tight.rejected.begin(), tight.rejected.end(), [](const Rejection& j) {
        return j.reason.find("of host memory per node > --host-memory 64.00 GiB") != std::string::npos;
    });
    EXPECT_TRUE(named);
    r.host_memory_bytes = 128 * kGiB;
    const SearchResult roomy = search_plans(m, g, r);
    ASSERT_FALSE(roomy.candidates.empty());
    for (const Candidate& c : roomy.candidates) {
        EXPECT_EQ(c.plan.offload, Offload::optimizer);
        EXPECT_GT(c.memory.host_bytes_per_node, 119 * kGiB);
        EXPECT_LE(c.memory.host_bytes_per_node, 128 * kGiB);
    }
}

}  // namespace
TEST(ExtensionBounds, HugeDegreesAreRefusedNamingTheFlagAndLimit) {
    // Regression: --cp 2^62 once printed "2 * cp = -9223372036854775808" (signed overflow).
    const ModelConfig m = catalog_model("llama-3-8b");
    auto error_of = [&](auto edit) {
        Plan p;
        p.seq = 4096;
        edit(p);
        try {
            validate_plan(p, m);
        } catch (const InputError& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    const std::string cp = error_of([](Plan& p) { p.cp = std::int64_t{1} << 62; });
    EXPECT_NE(cp.find("--cp"), std::string::npos) << cp;
    EXPECT_NE(cp.find("kMaxGpus"), std::string::npos) << cp;
    EXPECT_EQ(cp.find('-', cp.find("--cp") + 2), std::string::npos) << "no negative figure: " << cp;
    const std::string total = error_of([](Plan& p) { p.dp = 1024; p.cp = 2048; });  // 2^21 GPUs > 2^20
    EXPECT_NE(total.find("2097152"), std::string::npos) << total;
    const std::string vpp = error_of([](Plan& p) {
        p.pp = 2;
        p.pp_schedule = PpSchedule::interleaved;
        p.vpp = std::int64_t{1} << 62;
    });
    EXPECT_NE(vpp.find("exceed the model's 32 layers"), std::string::npos) << vpp;
    const std::string ep = error_of([](Plan& p) { p.ep = std::int64_t{1} << 40; });
    EXPECT_NE(ep.find("kMaxGpus"), std::string::npos) << ep;
}

}  // namespace preflight

