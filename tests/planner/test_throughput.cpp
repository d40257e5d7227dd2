// Step-time model: identities and structural properties.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <nlohmann/json.hpp>

#include "catalog_fixture.hpp"
#include "preflight/planner/catalog.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/frameworks.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/throughput.hpp"

using namespace preflight;

namespace {
const std::filesystem::path kData = PREFLIGHT_TEST_DATA_DIR;

Plan plan_8b() { return test::llama3_8b_one_node_plan(); }

// The same 8 GPUs as dp 2 x pp 4, 12 micro-batches a step.
Plan pipeline_plan_8b() {
    Plan p = plan_8b();
    p.dp = 2;
    p.pp = 4;
    p.grad_acc = 12;
    return p;
}
}  // namespace

TEST(Throughput, MfuIsModelFlopsOverTimeGpusPeak) {
    const ModelConfig m = load_model("llama-3-8b", kData);
    const GpuSpec g = load_gpu("h100-sxm-80gb", kData);
    const Plan p = plan_8b();
    const Throughput t = estimate_throughput(m, g, p);
    // Model FLOPs by PaLM's formula for Llama-3-8B (h 4096, 32 layers, 32 heads of 128, 8 KV heads,
    // f 14336, V 128256): 6N + 12*L*H*Q*T per token, times the global batch.
    const double N = 32.0 * (4096.0 * (4096 + 2 * 1024) + 4096.0 * 4096 + 3 * 4096.0 * 14336) + 4096.0 * 128256;
    const double tokens = 4096.0 * 1 * 16 * 8;
    const double model_flops = (6 * N + 12 * 32.0 * 32 * 128 * 4096) * tokens;
    EXPECT_NEAR(t.model_flops_per_step / model_flops, 1.0, 1e-14);
    EXPECT_DOUBLE_EQ(t.peak_flops_per_s, 989.4e12);  // bf16 dense peak of the H100 SXM spec
    EXPECT_NEAR(t.mfu, model_flops / (t.step_time_s * 8 * 989.4e12), 1e-15);
    EXPECT_NEAR(t.hfu, t.hardware_flops_per_step / (t.step_time_s * 8 * 989.4e12), 1e-15);
    EXPECT_NEAR(t.tokens_per_s, tokens / t.step_time_s, 1e-9 * t.tokens_per_s);
    EXPECT_NEAR(t.tokens_per_s_per_gpu * 8, t.tokens_per_s, 1e-9 * t.tokens_per_s);
    EXPECT_GT(t.mfu, 0.05);
    EXPECT_LT(t.mfu, 1.0);
    // The components add up to the step time.
    double sum = 0;
    for (const auto& s : t.breakdown) sum += s.seconds;
    EXPECT_NEAR(sum, t.step_time_s, 1e-12 * t.step_time_s);
}

TEST(Throughput, HfuExceedsMfuUnderRecompute) {
    const ModelConfig m = load_model("llama-3-8b", kData);
    const GpuSpec g = load_gpu("h100-sxm-80gb", kData);
    Plan p = plan_8b();
    const Throughput none = estimate_throughput(m, g, p);
    p.recompute = Recompute::full;
    const Throughput full = estimate_throughput(m, g, p);
    EXPECT_GT(full.step_time_s, none.step_time_s);
    EXPECT_GT(full.hfu, full.mfu);
    EXPECT_DOUBLE_EQ(none.hfu, none.mfu);
}

TEST(Throughput, PipelineBubbleIsPMinusOneOverM) {
    // Narayanan et al. 2021, sec. 2.2.1: 1F1B idles (p-1)/m of the steady-state time.
    const ModelConfig m = load_model("llama-3-8b", kData);
    const GpuSpec g = load_gpu("h100-sxm-80gb", kData);
    const Plan p = pipeline_plan_8b();
    const Throughput t = estimate_throughput(m, g, p);
    EXPECT_NEAR(t.pipeline_bubble_s / (t.compute_s + t.tp_communication_s + t.pp_communication_s), 3.0 / 12.0, 1e-12);
    EXPECT_GT(t.pp_communication_s, 0);
}

// ThroughputOptions::own_stage: one stage's own work, as an emulated rank runs it alone. Llama-3-8B
// at pp 4 puts 8 of its 32 layers on each stage; the last also holds the final norm and the
// untied LM head, which make it the job's slowest stage.
TEST(Throughput, AnOwnStageIsThatStagesWorkAlone) {
    const ModelConfig m = load_model("llama-3-8b", kData);
    const GpuSpec g = load_gpu("h100-sxm-80gb", kData);
    Plan p = pipeline_plan_8b();
    const Throughput job = estimate_throughput(m, g, p);
    auto stage = [&](std::int64_t s) {
        ThroughputOptions o;
        o.own_stage = s;
        return estimate_throughput(m, g, p, o);
    };
    const Throughput first = stage(0), middle = stage(1), other_middle = stage(2), last = stage(3);
    EXPECT_DOUBLE_EQ(last.compute_s, job.compute_s);  // the slowest stage is the job's pace
    EXPECT_DOUBLE_EQ(last.step_time_s, job.step_time_s);
    EXPECT_DOUBLE_EQ(middle.compute_s, other_middle.compute_s);
    EXPECT_GT(first.compute_s, middle.compute_s);  // the embedding
    EXPECT_GT(last.compute_s, first.compute_s);    // the head's GEMMs outweigh the embedding lookup
    // The optimizer's memory traffic follows the stage's parameters. One layer: q, k, v, o
    // (4096 x (4096 + 2 x 1024) + 4096 x 4096), gate, up, down (3 x 4096 x 14336), 2 norms of 4096:
    // 218,112,000. Last stage: 8 layers + final norm (4096) + LM head (4096 x 128,256).
    const double layer = 4096.0 * 6144 + 4096.0 * 4096 + 3 * 4096.0 * 14336 + 2 * 4096.0;
    EXPECT_DOUBLE_EQ(layer, 218112000.0);
    EXPECT_NEAR(middle.optimizer_s / last.optimizer_s, 8 * layer / (8 * layer + 4096 + 4096.0 * 128256), 1e-12);
    EXPECT_NEAR(first.optimizer_s / last.optimizer_s, (8 * layer + 4096.0 * 128256) / (8 * layer + 4096 + 4096.0 * 128256),
                1e-12);
    // A stage that paces itself: its bubble is (p - 1) / m of its own slots.
    EXPECT_NEAR(middle.pipeline_bubble_s / (middle.compute_s + middle.tp_communication_s + middle.pp_communication_s),
                3.0 / 12.0, 1e-12);
    ThroughputOptions past;
    past.own_stage = 4;
    EXPECT_THROW(estimate_throughput(m, g, p, past), std::invalid_argument);
    p.pp = 1;  // one stage: own_stage 0 is the job
    ThroughputOptions zero;
    zero.own_stage = 0;
    EXPECT_DOUBLE_EQ(estimate_throughput(m, g, p, zero).step_time_s, estimate_throughput(m, g, p).step_time_s);
}

TEST(Throughput, TensorParallelismCostsCollectives) {
    const ModelConfig m = load_model("llama-3-8b", kData);
    const GpuSpec g = load_gpu("h100-sxm-80gb", kData);
    Plan p = plan_8b();
    EXPECT_EQ(estimate_throughput(m, g, p).tp_communication_s, 0);
    p.dp = 4;
    p.tp = 2;
    EXPECT_GT(estimate_throughput(m, g, p).tp_communication_s, 0);
}

TEST(Throughput, GradientAccumulationReducesOncePerStepForZero0) {
    const ModelConfig m = load_model("llama-3.2-1b", kData);
    const GpuSpec g = load_gpu("h100-sxm-80gb", kData);
    Plan p;
    p.seq = 2048;
    p.dp = 8;
    p.grad_acc = 1;
    const double one = estimate_throughput(m, g, p).dp_communication_s;
    p.grad_acc = 8;
    EXPECT_DOUBLE_EQ(estimate_throughput(m, g, p).dp_communication_s, one);  // not 8x
    p.zero = ZeroStage{2};  // a gradient shard only: reduce-scatter after every micro-batch
    EXPECT_GE(estimate_throughput(m, g, p).dp_communication_s, estimate_throughput(m, g, [&] {
                  Plan q = p;
                  q.grad_acc = 1;
                  return q;
              }()).dp_communication_s);
}

TEST(Throughput, MoreDataParallelGpusMoreTokensPerSecond) {
    const ModelConfig m = load_model("llama-3.2-1b", kData);
    const GpuSpec g = load_gpu("a100-sxm-80gb", kData);
    Plan p;
    p.seq = 2048;
    p.grad_acc = 8;
    p.dp = 1;
    const double t1 = estimate_throughput(m, g, p).tokens_per_s;
    p.dp = 8;
    const double t8 = estimate_throughput(m, g, p).tokens_per_s;
    EXPECT_GT(t8, 6 * t1);
    EXPECT_LE(t8, 8 * t1 * (1 + 1e-12));
}

TEST(Throughput, UnknownFp8PeakIsAnError) {
    const ModelConfig m = load_model("llama-3-8b", kData);
    const GpuSpec g = load_gpu("a100-sxm-80gb", kData);  // Ampere: no fp8
    Plan p = plan_8b();
    p.precision = Precision::fp8_mixed;
    try {
        estimate_throughput(m, g, p);
        FAIL() << "expected InputError";
    } catch (const InputError& e) {
        EXPECT_EQ(e.subject(), "--precision");
    }
    EXPECT_FALSE(compute_peak_flops_per_s(g, Precision::fp8_mixed));
}

TEST(Throughput, TrainingTime) {
    Throughput t;
    t.step_time_s = 2.0;
    t.tokens_per_step = 1000;
    t.gpus = 16;
    const TrainingTime tt = training_time(t, 10'500);  // 10.5 steps -> 11
    EXPECT_EQ(tt.steps, 11);
    EXPECT_DOUBLE_EQ(tt.wall_s, 22.0);
    EXPECT_DOUBLE_EQ(tt.gpu_hours, 22.0 * 16 / 3600);
}

TEST(GpuEfficiency, ParsedFromSpecWithDefaultsWhenAbsent) {
    // The H100 spec carries constants fitted on measured runs, with their provenance.
    const GpuSpec h100 = load_gpu("h100-sxm-80gb", kData);
    const nlohmann::json raw = read_json_file(kData / "gpus" / "h100-sxm-80gb.json", "--gpu");
    EXPECT_DOUBLE_EQ(h100.efficiency.gemm_max_fraction_of_peak, raw["efficiency"]["gemm_max_fraction_of_peak"].get<double>());
    EXPECT_DOUBLE_EQ(h100.efficiency.layer_launch_overhead_s, raw["efficiency"]["layer_launch_overhead_s"].get<double>());
    EXPECT_DOUBLE_EQ(h100.efficiency.pipeline_span_layer_host_per_tp_s,
                     raw["efficiency"]["pipeline_span_layer_host_per_tp_s"].get<double>());
    // FlashAttention-2 as the frameworks run it: the A100 fit's figure (llm-foundry's A100-40GB
    // rows) times FlashAttention-2's forward efficiency on H100 over A100, 35 % / 73 % (Shah et al.
    // 2024, FlashAttention-3, abstract; Dao 2023, FlashAttention-2): 0.3114 x 0.35 / 0.73 = 0.1493.
    const GpuSpec a100 = load_gpu("a100-sxm-40gb", kData);
    EXPECT_NEAR(h100.efficiency.attention_fraction_of_peak, a100.efficiency.attention_fraction_of_peak * 0.35 / 0.73,
                5e-5);
    EXPECT_DOUBLE_EQ(h100.efficiency.attention_fraction_of_peak, 0.1493);
    EXPECT_DOUBLE_EQ(h100.efficiency.fused_attention_fraction_of_peak,
                     raw["efficiency"]["fused_attention_fraction_of_peak"].get<double>());
    EXPECT_NE(h100.efficiency.provenance.find("fitted by `preflight calibrate`"), std::string::npos);
    EXPECT_NE(h100.efficiency.provenance.find("cross-validation"), std::string::npos);

    nlohmann::json spec = read_json_file(kData / "gpus" / "h100-sxm-80gb.json", "--gpu");
    spec.erase("efficiency");
    const GpuSpec bare = gpu_from_json(spec, "bare");
    const Efficiency defaults;
    EXPECT_DOUBLE_EQ(bare.efficiency.gemm_max_fraction_of_peak, defaults.gemm_max_fraction_of_peak);
    EXPECT_DOUBLE_EQ(bare.efficiency.step_overhead_s, defaults.step_overhead_s);

    spec["efficiency"] = {{"fused_attention_fraction_of_peak", -0.1}};
    try {
        gpu_from_json(spec, "bad");
        FAIL() << "expected InputError";
    } catch (const InputError& e) {
        EXPECT_EQ(e.subject(), "efficiency.fused_attention_fraction_of_peak");
    }
    spec["efficiency"] = {{"gemm_max_fraction_of_peak", 1.5}};
    try {
        gpu_from_json(spec, "bad");
        FAIL() << "expected InputError";
    } catch (const InputError& e) {
        EXPECT_EQ(e.subject(), "efficiency.gemm_max_fraction_of_peak");
    }
}

TEST(Throughput, FasterGemmsShortenTheStep) {
    const ModelConfig m = load_model("llama-3-8b", kData);
    GpuSpec g = load_gpu("h100-sxm-80gb", kData);
    const Plan p = plan_8b();
    const double base = estimate_throughput(m, g, p).compute_s;
    g.efficiency.gemm_max_fraction_of_peak = 0.9;
    EXPECT_LT(estimate_throughput(m, g, p).compute_s, base);
}

TEST(Throughput, MfuAtMostOneForExtremeInputs) {
    // Every efficiency at its maximum, a huge sequence (attention dominates, where the
    // `full` numerator counts twice the causal work the kernel executes), all conventions
    // and recompute modes: the counted FLOPs can never run faster than the dense peak.
    // A long-context variant of the config: --seq may not exceed max_position_embeddings.
    ModelConfig m = load_model("llama-3.2-1b", kData);
    m.max_positions = 1048576;
    GpuSpec g = load_gpu("h100-sxm-80gb", kData);
    g.efficiency.gemm_max_fraction_of_peak = 1.0;
    g.efficiency.gemm_half_efficiency_dim = 0.0;
    g.efficiency.attention_fraction_of_peak = 1.0;
    g.efficiency.memory_bound_fraction_of_hbm = 1.0;
    g.efficiency.collective_bus_efficiency = 1.0;
    g.efficiency.step_overhead_s = 0.0;
    g.efficiency.layer_launch_overhead_s = 0.0;
    g.efficiency.microbatch_sync_s = 0.0;
    for (std::int64_t seq : {128, 4096, 131072, 1048576}) {
        for (AttentionFlops conv : {AttentionFlops::full, AttentionFlops::causal}) {
            for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
                Plan p;
                p.seq = seq;
                p.recompute = rc;
                ThroughputOptions o;
                o.attention_flops = conv;
                const Throughput t = estimate_throughput(m, g, p, o);
                EXPECT_LE(t.mfu, 1.0 + 1e-12) << seq;
                EXPECT_LE(t.hfu, 1.0 + 1e-12) << seq;
                EXPECT_GT(t.mfu, 0.0);
            }
        }
    }
}

TEST(Throughput, TensorParallelismAcrossNodesIsModelledAndSlower) {
    // tp 16 spans two 8-GPU nodes: its collectives run over the network, not NVLink
    // (Llama-2-7B: 32 query and 32 key/value heads, divisible by 16).
    const ModelConfig m = load_model("llama-2-7b", kData);
    const GpuSpec g = load_gpu("h100-sxm-80gb", kData);
    Plan p = plan_8b();
    p.dp = 1;
    p.tp = 8;
    p.sp = true;
    p.mbs = 4;
    const Throughput in_node = estimate_throughput(m, g, p);
    p.tp = 16;
    const Throughput across = estimate_throughput(m, g, p);
    EXPECT_GT(across.tp_communication_s, in_node.tp_communication_s);
    EXPECT_GT(across.step_time_s, 0);
}

TEST(Throughput, HostDispatchFloorBindsOnlyWhenLayersAreShort) {
    // A layer costs at least the host's dispatch time: with a 50 ms floor per layer a tiny
    // micro-batch is host bound (16 layers * 50 ms per micro-batch), a 0 floor changes nothing.
    const ModelConfig m = load_model("llama-3.2-1b", kData);
    GpuSpec g = load_gpu("h100-sxm-80gb", kData);
    g.efficiency.layer_launch_overhead_s = 0.0;
    g.efficiency.microbatch_sync_s = 0.0;
    Plan p;
    p.seq = 128;
    p.grad_acc = 4;
    const Throughput free = estimate_throughput(m, g, p);
    EXPECT_DOUBLE_EQ(free.launch_overhead_s, 0.0);
    g.efficiency.layer_launch_overhead_s = 0.05;
    const Throughput bound = estimate_throughput(m, g, p);
    // Exposed host time + the GPU's layer work = 4 micro-batches * 16 layers * 50 ms = 3.2 s,
    // plus the embedding and output layer (part of the unbound compute).
    EXPECT_GT(bound.launch_overhead_s, 0.0);
    EXPECT_GE(bound.launch_overhead_s + bound.compute_s, 3.2 - 1e-9);
    EXPECT_LE(bound.launch_overhead_s + bound.compute_s, 3.2 + free.compute_s + 1e-9);
}

namespace {

// A spec whose only cost that matters is the TP link: 100 GB/s, no latency, no host or
// per-micro-batch overheads.
GpuSpec tp_link_only_gpu(double gemm_peak_flops_per_s, double hbm_bytes_per_s) {
    GpuSpec g = load_gpu("h100-sxm-80gb", kData);
    g.peak.bf16_flops_per_s = gemm_peak_flops_per_s, g.hbm_bandwidth_bytes_per_s = hbm_bytes_per_s;
    g.intra_node_bandwidth_bytes_per_s = 100e9, g.efficiency.collective_bus_efficiency = 1.0;
    Efficiency& e = g.efficiency;
    e.intra_node_latency_s = e.layer_launch_overhead_s = e.tp_layer_launch_overhead_s = e.microbatch_sync_s = 0.0;
    return g;
}

// seq 4096, mbs 1, one micro-batch, tp 2 with sequence parallelism.
Plan tp2_sp_plan() {
    Plan p = plan_8b();
    p.dp = 1, p.zero = zero_none, p.grad_acc = 1;
    p.tp = 2, p.sp = true;
    return p;
}

// Exposed TP time of llama-3.2-1b (16 layers, h 2048) under tp2_sp_plan: Megatron-style
// (every collective exposed) minus nanotron's async linears, or with `userbuffers` minus
// TransformerEngine's pipelined collectives (ThroughputOptions::tp_comm_overlap).
double sync_minus_async_tp_s(const GpuSpec& g, bool userbuffers = false) {
    const ModelConfig m = load_model("llama-3.2-1b", kData);
    EXPECT_EQ(m.layers, 16);
    EXPECT_EQ(m.hidden, 2048);
    ThroughputOptions sync, async;
    (userbuffers ? async.tp_comm_overlap : async.tp_async_overlap) = true;
    const Throughput a = estimate_throughput(m, g, tp2_sp_plan(), async);
    const Throughput s = estimate_throughput(m, g, tp2_sp_plan(), sync);
    EXPECT_DOUBLE_EQ(a.compute_s, s.compute_s);  // only the exposed communication moves
    return s.tp_communication_s - a.tp_communication_s;
}

}  // namespace

// One all-gather or reduce-scatter of the s*b*h bf16 activation over tp = 2 on a 100 GB/s ring:
// c = (2-1)/2 * 4096*2048*2 B / 1e11 B/s = 8.388608e-5 s. Per layer, Megatron-style exposed
// collectives cost 2c + 2c forward and the same backward: 8c.
// nanotron's async linears (parallel/tensor_parallel/functional.py) with GEMMs too short to
// hide anything: forward 2 all-gathers + 2 reduce-scatters (4c); backward each column linear
// re-gathers its input (tp_recompute_allgather) and reduce-scatters its input gradient, each
// row linear all-gathers its output gradient: 2*(c + c) + 2*c = 6c. 10c - 8c = 2c per layer,
// 16 layers, 1 micro-batch: 32c.
TEST(Throughput, AsyncTensorParallelWithoutComputeToHideBehind) {
    const double c = 0.5 * 4096.0 * 2048.0 * 2.0 / 100e9;
    EXPECT_NEAR(sync_minus_async_tp_s(tp_link_only_gpu(1e30, 1e30)), -32.0 * c, 1e-12);
}

// With GEMMs far slower than the link (a 1 TFLOP/s GPU: the smallest local-shard GEMM,
// o_proj's 1/2 of 2*4096*2048*1024 FLOPs, takes ~10 ms against c ~ 84 us) every async
// collective hides except the row linears' forward reduce-scatters: 2c per layer instead
// of 8c, so 16 layers save 16 * 6c.
TEST(Throughput, AsyncTensorParallelHidesBehindLongGemms) {
    const double c = 0.5 * 4096.0 * 2048.0 * 2.0 / 100e9;
    EXPECT_NEAR(sync_minus_async_tp_s(tp_link_only_gpu(1e12, 3.35e12)), 16.0 * 6.0 * c, 1e-12);
}

// TransformerEngine userbuffers (Megatron --tp-comm-overlap), c as above. With GEMMs too short
// to hide anything every collective is exposed: forward 2 all-gathers + 2 reduce-scatters (4c);
// backward, per linear pair, the input all-gather for wgrad, the input-gradient reduce-scatter and
// the output-gradient all-gather (6c): 10c a layer against the Megatron-style 8c, 16 layers 32c
// more. With GEMMs far slower than the link (1 TFLOP/s) each collective hides behind its GEMM
// (the smallest, o_proj's 2*4096*2048*1024 FLOPs, takes > 17 ms against c ~ 84 us): 8c x 16 less.
TEST(Throughput, UserbuffersHideEachTensorParallelCollectiveBehindItsGemm) {
    const double c = 0.5 * 4096.0 * 2048.0 * 2.0 / 100e9;
    EXPECT_NEAR(sync_minus_async_tp_s(tp_link_only_gpu(1e30, 1e30), true), -32.0 * c, 1e-12);
    EXPECT_NEAR(sync_minus_async_tp_s(tp_link_only_gpu(1e12, 3.35e12), true), 16.0 * 8.0 * c, 1e-12);
}

// Megatron's overlap_p2p_comm with the interleaved schedule (ThroughputOptions::p2p_overlap): a
// model chunk's hand-offs are exposed only beyond one chunk's compute. Llama-3-8B, tp 1, pp 2 x
// vpp 2, 8 micro-batches: on a 1 TFLOP/s GPU a chunk (8 layers, > 1 s) hides its sends entirely;
// with GEMMs, attention and memory all but free the sends stay exposed as without the overlap.
TEST(Throughput, OverlappedPipelineSendsHideBehindTheNextChunk) {
    const ModelConfig m = load_model("llama-3-8b", kData);
    Plan p = plan_8b();
    p.dp = 1, p.zero = zero_none, p.pp = 2, p.grad_acc = 8;
    p.pp_schedule = PpSchedule::interleaved, p.vpp = 2;
    ThroughputOptions plain, overlap;
    overlap.p2p_overlap = true;
    const GpuSpec slow = tp_link_only_gpu(1e12, 3.35e12);
    EXPECT_GT(estimate_throughput(m, slow, p, plain).pp_communication_s, 0.0);
    EXPECT_DOUBLE_EQ(estimate_throughput(m, slow, p, overlap).pp_communication_s, 0.0);
    const GpuSpec fast = tp_link_only_gpu(1e30, 1e30);
    const double exposed = estimate_throughput(m, fast, p, overlap).pp_communication_s;
    EXPECT_NEAR(exposed, estimate_throughput(m, fast, p, plain).pp_communication_s, 1e-9 * exposed);
    Plan one_f_one_b = p;  // the overlap applies to the interleaved schedule only
    one_f_one_b.pp_schedule = PpSchedule::one_f_one_b, one_f_one_b.vpp = 1;
    EXPECT_DOUBLE_EQ(estimate_throughput(m, slow, one_f_one_b, overlap).pp_communication_s,
                     estimate_throughput(m, slow, one_f_one_b, plain).pp_communication_s);
}

// The step is the sum of the rows the breakdown prints, for the base estimate and for every
// extension's (interleaved schedule, LoRA, offload, cp), with a host dispatch and a micro-batch
// synchronisation charged. Until 2026-11-29 the extensions' step left both out: an interleaved
// plan with a 1.57 s host dispatch was 43.50 s against its rows' 45.07 s, and outranked 1F1B.
TEST(Throughput, TheStepIsTheSumOfItsBreakdownWithEveryExtension) {
    const ModelConfig m = load_model("llama-3-8b", kData);
    GpuSpec g = load_gpu("h100-sxm-80gb", kData);
    g.efficiency.layer_launch_overhead_s = 1.0;  // far above a layer's GPU work: the gap shows
    g.efficiency.microbatch_sync_s = 0.5;
    g.efficiency.microbatch_sync_half_nodes = 1.0;
    g.efficiency.microbatch_sync_node_exponent = 1.0;
    Plan pipeline = plan_8b();
    pipeline.dp = 2, pipeline.tp = 2, pipeline.pp = 4, pipeline.sp = true, pipeline.zero = zero_none;
    pipeline.mbs = 1, pipeline.grad_acc = 16;  // 16 GPUs: 2 nodes, so the synchronisation is charged
    Plan interleaved = pipeline;
    interleaved.pp_schedule = PpSchedule::interleaved, interleaved.vpp = 2;
    Plan lora = pipeline;
    lora.finetune = Finetune::lora;
    Plan offload = plan_8b();
    offload.zero = zero_gradients, offload.offload = Offload::optimizer;
    Plan cp = pipeline;
    cp.cp = 2, cp.seq = 8192;
    for (const Plan& p : {pipeline, interleaved, lora, offload, cp}) {
        SCOPED_TRACE(to_flags(p));
        ThroughputOptions opt = nanotron_throughput_options(m, p);  // charges the synchronisation
        opt.breakdown = true;
        const Throughput t = estimate_throughput(m, g, p, opt);
        double rows = 0;
        for (const auto& s : t.breakdown) rows += s.seconds;
        EXPECT_GT(t.launch_overhead_s, 0.0);
        EXPECT_NEAR(t.step_time_s, rows, 1e-9 * t.step_time_s);
    }
}

TEST(Throughput, TheFittedClusterStallIsChargedOnlyUnderTheNanotronProfile) {
    // A spec whose stall constants give, at 32 nodes, x = (32 / 32)^2 = 1 and so half the full
    // stall: 2.0 s * 1 / (1 + 1) = 1.0 s per micro-batch with a pipeline. With 4 micro-batches
    // that is 4.0 s, charged when the options ask for the cluster stall (nanotron's profile),
    // and not otherwise.
    const ModelConfig m = load_model("llama-3-8b", kData);
    GpuSpec g = load_gpu("h100-sxm-80gb", kData);
    g.efficiency.microbatch_sync_s = 2.0;
    g.efficiency.microbatch_sync_half_nodes = 32.0;
    g.efficiency.microbatch_sync_node_exponent = 2.0;
    g.efficiency.microbatch_sync_no_pipeline_fraction = 0.25;
    Plan p = plan_8b();
    p.dp = 64;
    p.tp = 2;
    p.pp = 2;
    p.sp = true;
    p.mbs = 1;
    p.grad_acc = 4;  // 64 * 2 * 2 = 256 GPUs = 32 nodes of 8
    ThroughputOptions plain;
    plain.breakdown = false;
    EXPECT_EQ(estimate_throughput(m, g, p, plain).microbatch_sync_s, 0.0);
    const ThroughputOptions nanotron = nanotron_throughput_options(m, p);
    EXPECT_NEAR(estimate_throughput(m, g, p, nanotron).microbatch_sync_s, 4.0, 1e-9);
    p.pp = 1;  // 128 * 2 = 256 GPUs; without a pipeline a quarter of it: 4 * 1.0 * 0.25 = 1.0 s
    p.dp = 128;
    EXPECT_NEAR(estimate_throughput(m, g, p, nanotron_throughput_options(m, p)).microbatch_sync_s, 1.0, 1e-9);
}

// Efficiency::pipeline_span_layer_host_per_tp_s, hand-derived. Llama-3-8B (32 layers, h 4096,
// ffn 14336, vocab 128256) split by nanotron's compute costs (models/llama.py
// get_block_compute_costs, models/base.py build_model): a layer costs 4h^2 + 3*ffn*h =
// 243,269,632, the output layer V*h = 525,336,576; half the total (32 layers + head) is
// 4,154,982,400, which layer 18 passes (17 layers: 4,135,583,744), so stage 0 holds 18
// layers and is the busiest. With a 50 ms host floor per layer and 0.1 s more per TP rank,
// tp 4 adds 0.4 s to every layer's host time, far above its GPU work: over 4 micro-batches
// 4 * 18 * 0.4 = 28.8 s more exposed host time, when the pipeline spans two nodes under the
// nanotron profile, and nothing inside one node, without a pipeline, or under other profiles.
TEST(Throughput, HostTimePerLayerGrowsWithTpWhenThePipelineSpansNodes) {
    const ModelConfig m = load_model("llama-3-8b", kData);
    GpuSpec g = load_gpu("h100-sxm-80gb", kData);
    g.efficiency.microbatch_sync_s = 0.0;
    g.efficiency.layer_launch_overhead_s = 0.05;
    g.efficiency.tp_layer_launch_overhead_s = 0.0;
    Plan p = plan_8b();
    p.tp = 4, p.sp = true, p.pp = 2, p.dp = 2, p.zero = zero_none, p.grad_acc = 4;  // 16 GPUs, 2 nodes
    EXPECT_EQ(nanotron_throughput_options(m, p).stage_layers, (std::vector<std::int64_t>{18, 14}));
    auto exposed_host_s = [&](const Plan& plan, double per_tp_s, bool nanotron) {
        GpuSpec spec = g;
        spec.efficiency.pipeline_span_layer_host_per_tp_s = per_tp_s;
        ThroughputOptions o = nanotron ? nanotron_throughput_options(m, plan) : ThroughputOptions{};
        return estimate_throughput(m, spec, plan, o).launch_overhead_s;
    };
    EXPECT_NEAR(exposed_host_s(p, 0.1, true) - exposed_host_s(p, 0.0, true), 4 * 18 * 0.4, 1e-9);
    EXPECT_DOUBLE_EQ(exposed_host_s(p, 0.1, false), exposed_host_s(p, 0.0, false));  // Megatron-like
    Plan one_node = p;
    one_node.dp = 1;  // 8 GPUs
    EXPECT_DOUBLE_EQ(exposed_host_s(one_node, 0.1, true), exposed_host_s(one_node, 0.0, true));
    Plan no_pipeline = p;
    no_pipeline.pp = 1, no_pipeline.dp = 4;  // 16 GPUs, 2 nodes, one stage
    EXPECT_DOUBLE_EQ(exposed_host_s(no_pipeline, 0.1, true), exposed_host_s(no_pipeline, 0.0, true));
}

// The fp32 recipe's kernel efficiencies (Efficiency::fp32_*) replace the 16-bit ones for fp32
// plans only, and 0 means "the same": a 16-bit plan never sees them.
TEST(Throughput, Fp32KernelEfficienciesApplyToTheFp32RecipeOnly) {
    Efficiency e;
    e.gemm_max_fraction_of_peak = 0.7;
    e.gemm_half_efficiency_dim = 200;
    e.attention_fraction_of_peak = 0.4;
    KernelEfficiency k = kernel_efficiency(e, Precision::fp32);
    EXPECT_EQ(k.gemm_max_fraction_of_peak, 0.7);
    EXPECT_EQ(k.gemm_half_efficiency_dim, 200);
    EXPECT_EQ(k.attention_fraction_of_peak, 0.4);
    e.fp32_gemm_max_fraction_of_peak = 0.8;
    e.fp32_gemm_half_efficiency_dim = 50;
    e.fp32_attention_fraction_of_peak = 0.05;
    k = kernel_efficiency(e, Precision::fp32);
    EXPECT_EQ(k.gemm_max_fraction_of_peak, 0.8);
    EXPECT_EQ(k.gemm_half_efficiency_dim, 50);
    EXPECT_EQ(k.attention_fraction_of_peak, 0.05);
    k = kernel_efficiency(e, Precision::bf16_mixed);
    EXPECT_EQ(k.gemm_max_fraction_of_peak, 0.7);
    EXPECT_EQ(k.attention_fraction_of_peak, 0.4);
    // A slower fp32 attention kernel slows an fp32 flash plan and leaves a bf16 one alone.
    const ModelConfig m = load_model("gpt2", kData);
    GpuSpec g = load_gpu("h100-sxm-80gb", kData);
    g.efficiency = Efficiency{};
    Plan p;
    p.seq = 1024;
    p.mbs = 4;
    for (Precision pr : {Precision::fp32, Precision::bf16_mixed}) {
        p.precision = pr;
        const double before = estimate_throughput(m, g, p).step_time_s;
        GpuSpec slow = g;
        slow.efficiency.fp32_attention_fraction_of_peak = 0.01;
        const double after = estimate_throughput(m, slow, p).step_time_s;
        if (pr == Precision::fp32)
            EXPECT_GT(after, before);
        else
            EXPECT_EQ(after, before);
    }
}

// Llama-3-8B, seq 4096, one micro-batch on one GPU: a causal flash forward runs
// 0.5 * 4 * s^2 * q_width = 0.5 * 4 * 4096^2 * 4096 = 1.374e11 FLOPs a layer, backward 2.5x that,
// 32 layers: 1.539e13 attention FLOPs a step. On an H100 SXM whose step-time constants are the
// defaults, the 16-bit flash attention at 0.30 of the peak.
namespace {
constexpr double kLlama8bSeq4096AttentionFlops = 32 * 3.5 * 0.5 * 4.0 * 4096.0 * 4096.0 * 4096.0;
struct AttentionCase {
    ModelConfig m = load_model("llama-3-8b", kData);
    GpuSpec g = load_gpu("h100-sxm-80gb", kData);
    Plan p;
    AttentionCase() {
        g.efficiency = Efficiency{};
        g.efficiency.attention_fraction_of_peak = 0.30;
        p.seq = 4096;
    }
};
}  // namespace

// Megatron-Core's TransformerEngine attention (fused kernels on Hopper) against the
// FlashAttention-2 kernels of the PyTorch frameworks: the step differs by the attention time
// alone, at 0.30 and 0.60 of 989.4 TFLOP/s: 51.85 ms against 25.93 ms.
TEST(Throughput, FusedAttentionRunsAtTheSpecsFusedFigure) {
    AttentionCase c;
    const ModelConfig& m = c.m;
    GpuSpec& g = c.g;
    Plan& p = c.p;
    g.efficiency.fused_attention_fraction_of_peak = 0.60;
    ThroughputOptions fa2, fused;
    fa2.fused_attention = false;
    fused.fused_attention = true;
    const double flops = kLlama8bSeq4096AttentionFlops;
    const double expected_s = flops / 989.4e12 * (1 / 0.30 - 1 / 0.60);
    EXPECT_NEAR(estimate_throughput(m, g, p, fa2).step_time_s - estimate_throughput(m, g, p, fused).step_time_s,
                expected_s, 1e-9);
    // No fused figure in the spec (0): both run at attention_fraction_of_peak.
    g.efficiency.fused_attention_fraction_of_peak = 0;
    EXPECT_DOUBLE_EQ(estimate_throughput(m, g, p, fa2).step_time_s, estimate_throughput(m, g, p, fused).step_time_s);
    // Which profiles run which kernels (FrameworkProfile::fused_attention).
    for (const char* name : {"megatron", "nanotron", "torchtitan", "pytorch", "deepspeed", "preflight-runtime"})
        EXPECT_EQ(throughput_options_for(*profile_by_name(name), m, p, {}).fused_attention, std::string(name) == "megatron")
            << name;
    EXPECT_FALSE(nanotron_throughput_options(m, p).fused_attention);
}

// A 16-bit flash plan on the Preflight runtime's own attention kernel (no cuDNN) runs its
// attention on the FP32 units at the fp32 kernel's figure: the same attention FLOPs as above,
// now at 66.9 TFLOP/s (the H100 SXM's dense fp32 peak) x 0.05 instead of 989.4 TFLOP/s x 0.30.
// Eager attention is not that kernel, and the fp32 recipe already runs it.
TEST(Throughput, OwnAttentionKernelRunsOnTheFp32Units) {
    AttentionCase c;
    c.g.efficiency.fp32_attention_fraction_of_peak = 0.05;
    const ModelConfig& m = c.m;
    const GpuSpec& g = c.g;
    Plan& p = c.p;
    ThroughputOptions cudnn, own;
    cudnn.fused_attention = own.fused_attention = false;
    own.attention_on_fp32_units = true;
    const double expected_s = kLlama8bSeq4096AttentionFlops * (1 / (66.9e12 * 0.05) - 1 / (989.4e12 * 0.30));
    EXPECT_NEAR(estimate_throughput(m, g, p, own).step_time_s - estimate_throughput(m, g, p, cudnn).step_time_s,
                expected_s, 1e-6 * expected_s);
    p.attention = AttentionKind::eager;
    EXPECT_DOUBLE_EQ(estimate_throughput(m, g, p, own).step_time_s, estimate_throughput(m, g, p, cudnn).step_time_s);
    p.attention = AttentionKind::flash;
    p.precision = Precision::fp32;
    EXPECT_DOUBLE_EQ(estimate_throughput(m, g, p, own).step_time_s, estimate_throughput(m, g, p, cudnn).step_time_s);
}

// The runtime's column-sum kernels (bias and norm weight gradients) walk s*b rows each, s*b/tp for
// the norms under sequence parallelism. GPT-2 (biases on q/k/v, the attention output and both MLP
// linears) at seq 1024, mbs 8: 8,192 rows; per layer 2 norms + 4 biases = 6 x 8,192 = 49,152 rows,
// the final norm 8,192; 12 layers and 2 micro-batches at 1e-7 s a row add
// 2 x (12 x 49,152 + 8,192) x 1e-7 = 0.1196032 s. Llama-3.2-1B (no biases, 16 layers): 2 norms a
// layer, 2 x (16 x 16,384 + 8,192) x 1e-7 = 0.0540672 s. GPT-2 with tp 4 and sp: norms over 2,048
// rows, 2 x 2,048 + 4 x 8,192 = 36,864 a layer, 2 x (12 x 36,864 + 2,048) x 1e-7 = 0.0888832 s.
// Audit finding (2026-11-29): the compute-time floor (no GPU beats its dense peak) used the FLOPs
// of the MFU convention, so --attention-flops full (twice a causal kernel's attention work)
// lengthened the predicted step wherever attention ran near the peak: llama-3.2-1b at seq 65536
// predicted 2.9137 s under full and 2.7922 s under causal. The floor is the work the kernels
// execute (causal for flash); the convention changes MFU/HFU only, by the ratio of the counts.
TEST(Throughput, AttentionFlopsConventionChangesMfuNotTheStepTime) {
    const ModelConfig m = load_model("llama-3.2-1b", kData);
    GpuSpec g = load_gpu("h100-sxm-80gb", kData);
    g.efficiency.attention_fraction_of_peak = 1.0;  // attention at the peak: the floor binds
    g.efficiency.gemm_max_fraction_of_peak = 1.0;
    Plan p;
    p.seq = 65536;
    p.recompute = Recompute::full;
    p = resolve_defaults(p, m);
    ThroughputOptions full, causal;
    full.attention_flops = AttentionFlops::full;
    causal.attention_flops = AttentionFlops::causal;
    const Throughput tf = estimate_throughput(m, g, p, full), tc = estimate_throughput(m, g, p, causal);
    EXPECT_DOUBLE_EQ(tf.step_time_s, tc.step_time_s);
    // Hardware FLOPs per token (Korthikanti et al. 2022, sec. 6.3, full recompute: 4 x forward),
    // forward attention scores + values 4 s q_width per layer under full, half under causal:
    // the two counts differ by 4 x 16 layers x 2 s q_width = 128 x 65536 x 2048 per token.
    const double diff_per_token = 4.0 * 16.0 * 2.0 * 65536.0 * 2048.0;
    EXPECT_NEAR(tf.hardware_flops_per_step - tc.hardware_flops_per_step, diff_per_token * 65536.0,
                1e-9 * tf.hardware_flops_per_step);
    EXPECT_NEAR(tf.hfu / tc.hfu, tf.hardware_flops_per_step / tc.hardware_flops_per_step, 1e-12);
    // The executed work never beats the peak.
    EXPECT_LE(tc.hfu, 1.0);
}

TEST(Throughput, RuntimeColumnSumsChargeTheirRowsUnderTheRuntimeProfile) {
    GpuSpec g = load_gpu("h100-sxm-80gb", kData);
    g.efficiency.column_sum_row_s = 1e-7;
    g.efficiency.layer_launch_overhead_s = 0;  // no host floor to hide them (the runtime's block has none)
    g.efficiency.tp_layer_launch_overhead_s = 0;
    struct Case {
        const char* model;
        std::int64_t tp;
        std::int64_t per_layer, final_norm;
        double extra_s;
    };
    for (const Case& c : {Case{"gpt2", 1, 49152, 8192, 0.1196032}, Case{"llama-3.2-1b", 1, 16384, 8192, 0.0540672},
                          Case{"gpt2", 4, 36864, 2048, 0.0888832}}) {
        const ModelConfig m = load_model(c.model, kData);
        Plan p;
        p.seq = 1024;
        p.mbs = 8;
        p.grad_acc = 2;
        p.tp = c.tp;
        p.sp = c.tp > 1;
        p = resolve_defaults(p, m);
        const RuntimeColumnSumRows rows = runtime_column_sum_rows(m, p);
        EXPECT_EQ(rows.per_layer, c.per_layer) << c.model;
        EXPECT_EQ(rows.final_norm, c.final_norm) << c.model;
        const ThroughputOptions runtime = throughput_options_for(runtime_profile(), m, p, {});
        EXPECT_TRUE(runtime.runtime_column_sums);
        ThroughputOptions without = runtime;
        without.runtime_column_sums = false;
        const Throughput with = estimate_throughput(m, g, p, runtime);
        EXPECT_NEAR(with.step_time_s - estimate_throughput(m, g, p, without).step_time_s, c.extra_s, 1e-9 * c.extra_s)
            << c.model;
        // The breakdown shows them apart, and its slices still add up to the step.
        EXPECT_NEAR(with.column_sums_s, c.extra_s, 1e-9 * c.extra_s) << c.model;
        double sum = 0, slice = -1;
        for (const TimeSlice& t : with.breakdown) {
            sum += t.seconds;
            if (t.name == "bias/norm weight-gradient column sums") slice = t.seconds;
        }
        EXPECT_NEAR(slice, c.extra_s, 1e-9 * c.extra_s) << c.model;
        EXPECT_NEAR(sum, with.step_time_s, 1e-12 * with.step_time_s) << c.model;
        EXPECT_FALSE(throughput_options_for(nanotron_profile(), m, p, {}).runtime_column_sums);
    }
}

// The runtime's fp8-mixed under ZeRO-3 casts each gathered layer's GEMM weights after each gather
// (forward and backward): an amax read (2 B), a cast read (2 B) and W, W^T written (1 + 1 B) per
// element. Llama-3.2-1B: a layer's GEMM weights are 2048 x (2048 + 2 x 512) q|k|v + 2048 x 2048
// out + 3 x 8192 x 2048 gate|up|down = 60,817,408 elements, 364,904,448 B per cast; 2 casts x 16
// layers x 2 micro-batches at 0.75 x 3.35 TB/s = 9.2951 ms more compute. ZeRO-2 casts once a step
// (not charged), and no other profile asks for it.
TEST(Throughput, RuntimeFp8ZeroThreeChargesTheGatheredWeightCasts) {
    GpuSpec g = load_gpu("h100-sxm-80gb", kData);
    const ModelConfig m = load_model("llama-3.2-1b", kData);
    Plan p;
    p.seq = 1024;
    p.mbs = 4;
    p.grad_acc = 2;
    p.dp = 2;
    p.zero = zero_weights;
    p.precision = Precision::fp8_mixed;
    p = resolve_defaults(p, m);
    const ThroughputOptions runtime = throughput_options_for(runtime_profile(), m, p, {});
    EXPECT_TRUE(runtime.fp8_casts_gathered_weights);
    ThroughputOptions without = runtime;
    without.fp8_casts_gathered_weights = false;
    const double extra_s = estimate_throughput(m, g, p, runtime).compute_s - estimate_throughput(m, g, p, without).compute_s;
    EXPECT_NEAR(extra_s, 0.00929508, 1e-6 * 0.00929508);
    Plan z2 = p;
    z2.zero = zero_gradients;
    EXPECT_FALSE(throughput_options_for(runtime_profile(), m, z2, {}).fp8_casts_gathered_weights);
    Plan bf = p;
    bf.precision = Precision::bf16_mixed;
    EXPECT_FALSE(throughput_options_for(runtime_profile(), m, bf, {}).fp8_casts_gathered_weights);
    EXPECT_FALSE(throughput_options_for(torchtitan_profile(), m, p, {}).fp8_casts_gathered_weights);
}

// fp8 GEMMs run at the figure of the recipe's kernels: Transformer Engine's by default,
// torchao's dynamic tensorwise scaling under a framework that uses it (torchtitan), torchao's
// rowwise whenever the plan asks for rowwise; a figure the spec lacks (0) falls back in that
// order, and plans that are not fp8-mixed see none.
TEST(Throughput, Fp8GemmsRunAtTheirRecipesFigure) {
    Efficiency e;
    e.fp8_gemm_max_fraction_of_peak = 0.55;
    e.fp8_dynamic_gemm_max_fraction_of_peak = 0.34;
    e.fp8_rowwise_gemm_max_fraction_of_peak = 0.28;
    const Fp8Kernels te{Fp8Scaling::tensorwise, false}, dynamic{Fp8Scaling::tensorwise, true},
        rowwise{Fp8Scaling::rowwise, true};
    EXPECT_EQ(kernel_efficiency(e, Precision::fp8_mixed, false, te).fp8_gemm_max_fraction_of_peak, 0.55);
    EXPECT_EQ(kernel_efficiency(e, Precision::fp8_mixed, false, dynamic).fp8_gemm_max_fraction_of_peak, 0.34);
    EXPECT_EQ(kernel_efficiency(e, Precision::fp8_mixed, false, rowwise).fp8_gemm_max_fraction_of_peak, 0.28);
    EXPECT_EQ(kernel_efficiency(e, Precision::bf16_mixed, false, rowwise).fp8_gemm_max_fraction_of_peak, 0.0);
    e.fp8_rowwise_gemm_max_fraction_of_peak = 0;
    EXPECT_EQ(kernel_efficiency(e, Precision::fp8_mixed, false, rowwise).fp8_gemm_max_fraction_of_peak, 0.34);
    e.fp8_dynamic_gemm_max_fraction_of_peak = 0;
    EXPECT_EQ(kernel_efficiency(e, Precision::fp8_mixed, false, rowwise).fp8_gemm_max_fraction_of_peak, 0.55);
    const ModelConfig m = load_model("llama-3-8b", kData);
    Plan p;
    p.precision = Precision::fp8_mixed;
    for (const char* name : {"megatron", "nanotron", "torchtitan", "pytorch", "deepspeed", "preflight-runtime"})
        EXPECT_EQ(throughput_options_for(*profile_by_name(name), m, p, {}).fp8_dynamic_scaling,
                  std::string(name) == "torchtitan")
            << name;
}

// The H100 spec's torchao figures reproduce torchao's published end-to-end speedups over bf16
// (pytorch/ao docs/source/workflows/training.md, "e2e training benchmarks", NVIDIA H100:
// Llama3-8B on 8 H100, FSDP2, batch 1, seq 8192, per-op SAC: bf16 6150, tensorwise 7689.5,
// rowwise 6768 tokens/s); Transformer Engine's figure gives a larger one on the same plan.
TEST(Throughput, TorchaoFloat8SpeedupsMatchItsPublishedTable) {
    const ModelConfig m = load_model("llama-3-8b", kData);
    const GpuSpec g = load_gpu("h100-sxm-80gb", kData);
    Plan p;
    p.seq = 8192, p.mbs = 1, p.dp = 8, p.zero = zero_weights, p.recompute = Recompute::selective;
    const FrameworkProfile& titan = *profile_by_name("torchtitan");
    auto tokens = [&](Precision pr, Fp8Scaling s, const FrameworkProfile& f) {
        Plan q = p;
        q.precision = pr, q.fp8_scaling = s;
        return estimate_throughput(m, g, q, throughput_options_for(f, m, q, {})).tokens_per_s_per_gpu;
    };
    const double bf16 = tokens(Precision::bf16_mixed, Fp8Scaling::tensorwise, titan);
    EXPECT_NEAR(tokens(Precision::fp8_mixed, Fp8Scaling::tensorwise, titan) / bf16, 7689.5 / 6150, 0.002);
    EXPECT_NEAR(tokens(Precision::fp8_mixed, Fp8Scaling::rowwise, titan) / bf16, 6768.0 / 6150, 0.002);
    EXPECT_GT(tokens(Precision::fp8_mixed, Fp8Scaling::tensorwise, *profile_by_name("megatron")) /
                  tokens(Precision::bf16_mixed, Fp8Scaling::tensorwise, *profile_by_name("megatron")),
              1.4);
}
