// Megatron-LM's --fp8-param-gather (Plan::fp8_param_gather, planner/src/fp8_params.cpp): the
// decoder layers' GEMM weights as Transformer Engine fp8 parameters, by hand for Llama-3-8B at the
// layout of NVIDIA's fp8 example (Megatron-LM d98e8a6 examples/llama/train_llama3_8b_h100_fp8.sh:
// tp 1, pp 1, cp 1, micro-batch 1, seq 8192, global batch 128 on 8 GPUs, distributed optimizer,
// no recompute), and the refusals.
#include <gtest/gtest.h>

#include <string>

#include "catalog_fixture.hpp"
#include "preflight/planner/emit.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/memory.hpp"
#include "preflight/planner/plan_schema.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/search.hpp"
#include "preflight/planner/throughput.hpp"

namespace preflight {
namespace {

// Llama-3-8B's decoder-layer GEMM weights per layer: q and o 4096 x 4096, k and v 1024 x 4096,
// gate, up and down 14336 x 4096.
constexpr std::int64_t kLayerGemm = 2 * 4096LL * 4096 + 2 * 1024LL * 4096 + 3 * 14336LL * 4096;
static_assert(kLayerGemm == 218'103'808);
constexpr std::int64_t kParams = 8'030'261'248;  // every parameter (untied head)

Plan nvidia_fp8_example() {
    Plan p;
    p.seq = 8192, p.mbs = 1, p.grad_acc = 16, p.dp = 8, p.zero = ZeroStage{1};
    p.precision = Precision::fp8_mixed;
    return p;
}

MemoryReport evaluate(const Plan& p, const FrameworkProfile& profile = megatron_profile()) {
    MemoryOptions o;
    o.profile = profile;
    return evaluate_memory(test::catalog_model("llama-3-8b"), test::catalog_gpu("h100-sxm-80gb"), p, o);
}

void expect_refused(const Plan& p, const std::string& needle, const FrameworkProfile& profile = megatron_profile()) {
    try {
        evaluate(p, profile);
        ADD_FAILURE() << "not refused: " << to_flags(p);
    } catch (const InputError& e) {
        EXPECT_EQ(e.subject(), "--fp8-param-gather") << e.what();
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
}

// Without the flag each layer GEMM weight holds bf16 (2 B) + the fp8 cache and its transpose
// (2 B); with it the fp8 parameter and its transpose (2 B): 2 B x 32 x 218,103,808 =
// 13,958,643,712 B = 13.0 GiB less, and nothing else moves.
TEST(Fp8ParamGather, Llama3NvidiaExampleDropsTheBf16LayerWeights) {
    const Plan off = nvidia_fp8_example();
    Plan on = off;
    on.fp8_param_gather = true;
    const MemoryReport a = evaluate(off), b = evaluate(on);
    // Before: 2 B per parameter + 2 B per layer GEMM weight (Megatron-Core's LM head is a plain
    // ColumnParallelLinear, gpt_model.py: no fp8 copy); after, 2 B per parameter.
    EXPECT_EQ(a.at_peak.weights, 2 * kParams + 2 * 32 * kLayerGemm);
    EXPECT_EQ(a.at_peak.weights, 30'019'166'208);
    EXPECT_EQ(b.at_peak.weights, 16'060'522'496);
    EXPECT_EQ(a.at_peak.weights - b.at_peak.weights, 2 * 32 * kLayerGemm);
    EXPECT_EQ(a.at_peak.weights - b.at_peak.weights, 13LL << 30);
    EXPECT_EQ(a.at_peak.master_weights, b.at_peak.master_weights);
    EXPECT_EQ(a.at_peak.gradients, b.at_peak.gradients);
    EXPECT_EQ(a.at_peak.optimizer_states, b.at_peak.optimizer_states);
    EXPECT_EQ(a.at_peak.activations, b.at_peak.activations);
    EXPECT_EQ(a.at_peak.buffers, b.at_peak.buffers);
    EXPECT_EQ(a.peak_bytes - b.peak_bytes, 13LL << 30);
    EXPECT_FALSE(a.fits);  // the example, as the planner judged it before the flag was modelled
    EXPECT_TRUE(b.fits);   // ... and with it, as it runs
}

// Tensor parallelism splits the layer GEMM weights: the saving is per rank; a pipeline stage saves
// for its own layers only; expert copies count per expert-parallel rank.
TEST(Fp8ParamGather, SavingFollowsTheRanksShareOfTheLayers) {
    Plan p = nvidia_fp8_example();
    p.tp = 2, p.dp = 4, p.pp = 2, p.grad_acc = 32;
    Plan q = p;
    q.fp8_param_gather = true;
    MemoryOptions o;
    o.pipeline_stage = 1;
    const ModelConfig m = test::catalog_model("llama-3-8b");
    const GpuSpec g = test::catalog_gpu("h100-sxm-80gb");
    const std::int64_t saved = evaluate_memory(m, g, p, o).at_peak.weights - evaluate_memory(m, g, q, o).at_peak.weights;
    EXPECT_EQ(saved, 2 * 16 * kLayerGemm / 2);  // 16 layers on the stage, half of each on this tp rank
}

TEST(Fp8ParamGather, RefusedWhereMegatronRefusesItOrItIsNotModelled) {
    Plan p = nvidia_fp8_example();
    p.fp8_param_gather = true;
    Plan bf16 = p;
    bf16.precision = Precision::bf16_mixed;
    expect_refused(bf16, "--precision fp8-mixed");
    Plan z0 = p;
    z0.zero = ZeroStage{0};
    expect_refused(z0, "distributed optimizer");
    Plan z3 = p;
    z3.zero = ZeroStage{3};
    expect_refused(z3, "Megatron-FSDP");
    Plan offload = p;
    offload.offload = Offload::optimizer;
    expect_refused(offload, "--offload");
    for (const std::string name : {"torchtitan", "deepspeed", "pytorch", "nanotron"})
        expect_refused(p, "use --framework megatron", *profile_by_name(name));
    // `preflight run` executes Preflight's runtime whatever --framework says: drop the flag there.
    expect_refused(p, "drop it from run", *profile_by_name("preflight-runtime"));
    EXPECT_NO_THROW(evaluate(p));
}

// The plan's flags and JSON carry it only when on; --emit megatron prints Megatron's flag.
TEST(Fp8ParamGather, FlagsJsonAndEmit) {
    Plan p = nvidia_fp8_example();
    EXPECT_EQ(to_flags(p).find("--fp8-param-gather"), std::string::npos);
    p.fp8_param_gather = true;
    EXPECT_NE(to_flags(p).find("--precision fp8-mixed --fp8-param-gather"), std::string::npos) << to_flags(p);
    nlohmann::json j;
    plan_fields_to_json(p, j);
    EXPECT_EQ(j.at("fp8_param_gather"), true);
    Plan back;
    plan_fields_from_json(j, back);
    EXPECT_TRUE(back.fp8_param_gather);
    const std::string args = megatron_arguments(test::catalog_model("llama-3-8b"), p);
    EXPECT_NE(args.find("--fp8-format hybrid"), std::string::npos) << args;
    EXPECT_NE(args.find("--fp8-param-gather"), std::string::npos) << args;
    EXPECT_NE(args.find("--use-distributed-optimizer"), std::string::npos) << args;
    // Other frameworks' forms cannot say it: warned, since their job keeps 2 B more per weight.
    const Emitted tt = emit_plan(EmitFormat::torchtitan, test::catalog_model("llama-3-8b"),
                                 test::catalog_gpu("h100-sxm-80gb"), p, EmitOptions{});
    ASSERT_FALSE(tt.warnings.empty());
    EXPECT_NE(tt.warnings.front().find("--fp8-param-gather"), std::string::npos) << tt.warnings.front();
    p.fp8_param_gather = false;
    EXPECT_EQ(megatron_arguments(test::catalog_model("llama-3-8b"), p).find("--fp8-param-gather"), std::string::npos);
}

// The search keeps it on every plan, and takes it only with fp8-mixed and ZeRO-1 pinned.
TEST(Fp8ParamGather, SearchNeedsFp8AndZeroOnePinned) {
    const ModelConfig m = test::catalog_model("llama-3-8b");
    const GpuSpec g = test::catalog_gpu("h100-sxm-80gb");
    SearchRequest req;
    req.gpus = 8;
    req.gbs_tokens = 128 * 8192;
    req.seq = 8192;
    req.pins.fixed.fp8_param_gather = true;
    try {
        validate_request(m, g, req);
        ADD_FAILURE() << "not refused";
    } catch (const InputError& e) {
        EXPECT_EQ(e.subject(), "--fp8-param-gather");
    }
    req.pins.precision = Precision::fp8_mixed;
    req.pins.zero = ZeroStage{1};
    req.pins.tp = 1, req.pins.pp = 1;
    const SearchResult r = search_plans(m, g, req);
    ASSERT_FALSE(r.candidates.empty());
    for (const Candidate& c : r.candidates) EXPECT_TRUE(c.plan.fp8_param_gather) << to_flags(c.plan);
    req.memory.profile = *profile_by_name("torchtitan");
    EXPECT_THROW(validate_request(m, g, req), InputError);
}

}  // namespace
// Expert parallelism: a rank holds its own experts' weights, so their fp8 copies (and the flag's
// saving) are its share. Mixtral-8x7B at ep 8, one expert a rank: a layer's GEMM weights are
// q and o (4,096^2 each), k and v (1,024 x 4,096 each) and one expert's gate, up and down
// (14,336 x 4,096 each): 41,943,040 + 176,160,768 = 218,103,808 elements, their fp8 copy and
// transpose 2 B each: 32 x 436,207,616 = 13,958,643,712 B beside the bf16 weights (the router is
// no GEMM weight of Transformer Engine's; the LM head stays bf16).
TEST(Fp8ParamGather, ExpertParallelRanksCopyOnlyTheirOwnExperts) {
    Plan p;
    p.seq = 4096, p.mbs = 1, p.dp = 8, p.ep = 8, p.zero = ZeroStage{1}, p.recompute = Recompute::full;
    MemoryOptions o;
    o.profile = megatron_profile();
    const ModelConfig m = test::catalog_model("mixtral-8x7b");
    const GpuSpec g = test::catalog_gpu("h100-sxm-80gb");
    const std::int64_t bf16 = evaluate_memory(m, g, p, o).at_peak.weights;
    p.precision = Precision::fp8_mixed;
    EXPECT_EQ(evaluate_memory(m, g, p, o).at_peak.weights - bf16, 13'958'643'712);
    p.fp8_param_gather = true;
    EXPECT_EQ(evaluate_memory(m, g, p, o).at_peak.weights, bf16);
}

// The step time: the distributed optimizer's all-gather of updated weights moves the layer GEMM
// weights as 1-byte fp8 data, so it carries 32 x 218,103,808 B = 6,979,321,856 B less. A ring
// all-gather over dp 8 inside a node sends 7/8 of its bytes over the NVLink bandwidth (450 GB/s
// in the H100 SXM spec, times the spec's collective bus efficiency); its latency term and the
// overlapped reduce-scatter do not change, and nothing else in the step does.
TEST(Fp8ParamGather, StepTimeGathersTheLayerWeightsInOneByte) {
    const ModelConfig m = test::catalog_model("llama-3-8b");
    const GpuSpec g = test::catalog_gpu("h100-sxm-80gb");
    const Plan off = nvidia_fp8_example();
    Plan on = off;
    on.fp8_param_gather = true;
    const Throughput a = estimate_throughput(m, g, off, throughput_options_for(megatron_profile(), m, off, {}));
    const Throughput b = estimate_throughput(m, g, on, throughput_options_for(megatron_profile(), m, on, {}));
    const double bus_bytes_per_s = 450e9 * g.efficiency.collective_bus_efficiency;
    const double saved_s = 7.0 / 8.0 * static_cast<double>(32 * kLayerGemm) / bus_bytes_per_s;
    EXPECT_NEAR(a.dp_communication_s - b.dp_communication_s, saved_s, 1e-9);
    EXPECT_NEAR(a.step_time_s - b.step_time_s, saved_s, 1e-9);
    EXPECT_EQ(a.compute_s, b.compute_s);
    EXPECT_EQ(a.optimizer_s, b.optimizer_s);
}

}  // namespace preflight
