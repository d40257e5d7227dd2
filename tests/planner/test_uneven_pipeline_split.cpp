// Megatron-LM's uneven pipeline split, --decoder-first/last-pipeline-num-layers (the plan's
// pp_first_stage_layers / pp_last_stage_layers, planner/src/pipeline_uneven.cpp), worked by hand
// for Llama-3-8B (32 decoder layers) on H100 80GB: seq 4096, micro-batch 1, 8 micro-batches,
// pp 4, 1F1B, bf16-mixed-fp32-grads, no recompute, tp 1, dp 1. Megatron-LM's rule (transformer_block.py
// get_num_layers_to_build): the first and last stage take the given counts, the stages between
// split the rest evenly.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "catalog_fixture.hpp"
#include "preflight/planner/emit.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/extensions.hpp"
#include "preflight/planner/memory.hpp"
#include "preflight/planner/plan_schema.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/search.hpp"
#include "preflight/planner/throughput.hpp"

namespace preflight {
namespace {

// One decoder layer's parameters: q and o 4096 x 4096, k and v 1024 x 4096, gate, up and down
// 14336 x 4096, two RMSNorm weights of 4096.
constexpr std::int64_t kLayerParams = 2 * 4096LL * 4096 + 2 * 1024LL * 4096 + 3 * 14336LL * 4096 + 2 * 4096;
static_assert(kLayerParams == 218'112'000);

Plan layout(std::int64_t first, std::int64_t last) {
    Plan p;
    p.seq = 4096, p.mbs = 1, p.grad_acc = 8, p.pp = 4;
    // fp32 main gradients (Megatron-LM's --bf16): no fp32 copy at the optimizer step, so every
    // stage's peak is in its backward, where the activations below are compared.
    p.precision = Precision::bf16_mixed_fp32_grads;
    p.pp_first_stage_layers = first;
    p.pp_last_stage_layers = last;
    return p;
}

MemoryReport evaluate(const Plan& p, std::optional<std::int64_t> stage = std::nullopt,
                      const FrameworkProfile& profile = megatron_profile()) {
    MemoryOptions o;
    o.profile = profile;
    o.pipeline_stage = stage;
    return evaluate_memory(test::catalog_model("llama-3-8b"), test::catalog_gpu("h100-sxm-80gb"), p, o);
}

std::vector<std::int64_t> stage_layers(const Plan& p) {
    std::vector<std::int64_t> v;
    for (std::int64_t s = 0; s < p.pp; ++s) v.push_back(pipeline_stage_layers(p, 32, s));
    return v;
}

void expect_refused(const Plan& p, const std::string& flag, const std::string& needle,
                    const FrameworkProfile& profile = megatron_profile()) {
    try {
        evaluate(p, std::nullopt, profile);
        ADD_FAILURE() << "not refused: " << to_flags(p);
    } catch (const InputError& e) {
        EXPECT_EQ(e.subject(), flag) << e.what();
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
}

// 32 layers, pp 4: first 6 and last 6 leave 20 for 2 middle stages, 10 each; first 5 alone leaves
// 27 for 3 stages, 9 each; last 5 alone likewise; pp 2 with first 12 leaves 20 for the last.
TEST(UnevenPipelineSplit, StageLayersFollowMegatronsRule) {
    EXPECT_EQ(stage_layers(layout(0, 0)), (std::vector<std::int64_t>{8, 8, 8, 8}));
    EXPECT_EQ(stage_layers(layout(6, 6)), (std::vector<std::int64_t>{6, 10, 10, 6}));
    EXPECT_EQ(stage_layers(layout(5, 0)), (std::vector<std::int64_t>{5, 9, 9, 9}));
    EXPECT_EQ(stage_layers(layout(0, 5)), (std::vector<std::int64_t>{9, 9, 9, 5}));
    Plan two = layout(12, 0);
    two.pp = 2;
    EXPECT_EQ(stage_layers(two), (std::vector<std::int64_t>{12, 20}));
    EXPECT_EQ(uneven_pipeline_stage_layers(layout(6, 6), 32), (std::vector<std::int64_t>{6, 10, 10, 6}));
    EXPECT_TRUE(uneven_pipeline_stage_layers(layout(0, 0), 32).empty());
    // Layer numbering (1-based) follows the earlier stages: stage 2 starts after 6 + 10 layers.
    const auto chunks = pipeline_stage_chunks(layout(6, 6), 32, 2);
    ASSERT_EQ(chunks.size(), 1u);
    EXPECT_EQ(chunks[0].first_layer, 17);
    EXPECT_EQ(chunks[0].layers, 10);
}

// 1F1B: stage s holds min(pp - s, 8) micro-batches: 4, 3, 2, 1. Layer x micro-batch units held:
// even 8/8/8/8: 32, 24, 16, 8 (stage 0 most loaded); uneven 6/10/10/6: 24, 30, 20, 6 (stage 1).
// Stage 1 also holds the most weights (10 layers against stage 0's 6 + the 128256 x 4096
// embedding, ~2.4 layers, and the last's 6 + the head), so it is the peak stage.
TEST(UnevenPipelineSplit, MostLoadedStageMovesToTheMiddle) {
    const MemoryReport even = evaluate(layout(0, 0)), uneven = evaluate(layout(6, 6));
    EXPECT_EQ(even.pipeline_stage, 0);
    EXPECT_EQ(even.layers_on_stage, 8);
    EXPECT_EQ(even.micro_batches_in_flight, 4);
    EXPECT_EQ(uneven.pipeline_stage, 1);
    EXPECT_EQ(uneven.layers_on_stage, 10);
    EXPECT_EQ(uneven.micro_batches_in_flight, 3);
    EXPECT_EQ(uneven.activations_per_layer_bytes, even.activations_per_layer_bytes);
}

// Stage by stage against the even split, A = one layer's activations of one micro-batch:
// stage 0 holds (6 - 8) x 4 = -8 A, stage 1 (10 - 8) x 3 = +6 A, stage 3 (6 - 8) x 1 = -2 A;
// stage 1's bf16 weights grow by 2 layers x 218,112,000 x 2 B = 872,448,000 B.
TEST(UnevenPipelineSplit, StageActivationsAndWeightsByHand) {
    const std::int64_t A = evaluate(layout(0, 0)).activations_per_layer_bytes;
    ASSERT_GT(A, 0);
    const std::pair<std::int64_t, std::int64_t> expected[] = {{0, -8}, {1, 6}, {3, -2}};
    for (const auto& [stage, units] : expected) {
        const MemoryReport e = evaluate(layout(0, 0), stage), u = evaluate(layout(6, 6), stage);
        EXPECT_EQ(u.at_peak.activations - e.at_peak.activations, units * A) << "stage " << stage;
    }
    const MemoryReport e1 = evaluate(layout(0, 0), 1), u1 = evaluate(layout(6, 6), 1);
    EXPECT_EQ(u1.at_peak.weights - e1.at_peak.weights, 2 * kLayerParams * 2);
    EXPECT_EQ(u1.at_peak.weights - e1.at_peak.weights, 872'448'000);
}

TEST(UnevenPipelineSplit, RefusedWhereMegatronRefusesItOrItIsNotModelled) {
    const std::string first = "--pp-first-stage-layers", last = "--pp-last-stage-layers";
    expect_refused(layout(20, 20), first, "places 40 layers; the model has 32");
    // 32 - 5 - 6 = 21 layers over 2 middle stages: Megatron-LM splits them evenly.
    expect_refused(layout(5, 6), first, "2 does not divide 21");
    Plan two = layout(6, 6);
    two.pp = 2;  // no middle stage: 20 layers would sit on none
    expect_refused(two, first, "Mismatch: 20 middle layers remaining but 0 middle PP stages");
    Plan three = layout(16, 16);
    three.pp = 3;  // a middle stage with no layer
    expect_refused(three, first, "Mismatch: 0 middle layers remaining but 1 middle PP stages");
    expect_refused(layout(0, -1), last, "positive");
    Plan one = layout(0, 32);
    one.pp = 1;
    expect_refused(one, last, "not modelled there");
    // Interleaved: TransformerConfig wants each stage's layers in whole chunks. 6 / 10 / 10 / 6
    // at 4 chunks: the first stage's 6 do not split; at 3: each middle stage's 10 do not.
    Plan interleaved = layout(6, 6);
    interleaved.pp_schedule = PpSchedule::interleaved;
    interleaved.vpp = 4;
    expect_refused(interleaved, first, "6 layers on the first stage do not split into --vpp 4");
    interleaved.vpp = 3;
    interleaved.grad_acc = 12;  // a multiple of pp (4) as the interleaved schedule needs
    expect_refused(interleaved, "--vpp", "10 layers on each middle stage");
    for (const std::string name : {"torchtitan", "deepspeed", "pytorch", "nanotron"})
        expect_refused(layout(6, 6), first, "use --framework megatron", *profile_by_name(name));
    expect_refused(layout(0, 6), last, "drop it from run", *profile_by_name("preflight-runtime"));
    EXPECT_NO_THROW(evaluate(layout(6, 6)));
}

// Interleaved with 2 chunks a stage over 6 / 10 / 10 / 6 (Megatron-LM transformer_layer.py
// get_transformer_layer_offset): each round of 16 layers gives the stages 3, 5, 5 and 3 in order,
// so stage 1 holds layers 4-8 and 20-24. Megatron-LM's interleaved warm-up on stage s is
// (pp - s - 1) * 2 + (v - 1) * pp forwards, one more before the first backward frees a chunk:
// stage 0 11, stage 1 9, stage 3 5 chunk micro-batches, at 3, 5 and 3 layers each.
TEST(UnevenPipelineSplit, InterleavedChunksFollowMegatronsOffsets) {
    Plan p = layout(6, 6);
    p.pp_schedule = PpSchedule::interleaved;
    p.vpp = 2;
    const std::vector<std::pair<std::int64_t, std::int64_t>> expected[] = {
        {{1, 3}, {17, 3}}, {{4, 5}, {20, 5}}, {{9, 5}, {25, 5}}, {{14, 3}, {30, 3}}};
    for (std::int64_t s = 0; s < 4; ++s) {
        const std::vector<StageChunk> chunks = pipeline_stage_chunks(p, 32, s);
        ASSERT_EQ(chunks.size(), 2u) << "stage " << s;
        for (std::size_t c = 0; c < 2; ++c) {
            EXPECT_EQ(chunks[c].first_layer, expected[s][c].first) << "stage " << s << " chunk " << c;
            EXPECT_EQ(chunks[c].layers, expected[s][c].second) << "stage " << s << " chunk " << c;
        }
    }
    EXPECT_EQ(pipeline_held_layer_units(p, 32, 0), 11 * 3);
    EXPECT_EQ(pipeline_held_layer_units(p, 32, 1), 9 * 5);
    EXPECT_EQ(pipeline_held_layer_units(p, 32, 3), 5 * 3);
    // Stage 1 at its peak holds 45 layers' activations against 1F1B's 3 micro-batches x 10 = 30.
    const std::int64_t A = evaluate(layout(0, 0)).activations_per_layer_bytes;
    EXPECT_EQ(evaluate(p, 1).at_peak.activations - evaluate(layout(6, 6), 1).at_peak.activations, 15 * A);
}

// The plan's flags and JSON carry the split only when given; --emit megatron prints Megatron's flags.
TEST(UnevenPipelineSplit, FlagsJsonAndEmit) {
    const ModelConfig m = test::catalog_model("llama-3-8b");
    Plan p = layout(0, 0);
    EXPECT_EQ(to_flags(p).find("stage-layers"), std::string::npos);
    EXPECT_EQ(megatron_arguments(m, p).find("pipeline-num-layers"), std::string::npos);
    p = layout(6, 6);
    EXPECT_NE(to_flags(p).find("--pp-first-stage-layers 6 --pp-last-stage-layers 6"), std::string::npos) << to_flags(p);
    nlohmann::json j;
    plan_fields_to_json(p, j);
    EXPECT_EQ(j.at("pp_first_stage_layers"), 6);
    EXPECT_EQ(j.at("pp_last_stage_layers"), 6);
    Plan back;
    plan_fields_from_json(j, back);
    EXPECT_EQ(back.pp_first_stage_layers, 6);
    EXPECT_EQ(back.pp_last_stage_layers, 6);
    std::vector<std::string> warnings;
    const std::string args = megatron_arguments(m, p, &warnings);
    EXPECT_NE(args.find("--decoder-first-pipeline-num-layers 6"), std::string::npos) << args;
    EXPECT_NE(args.find("--decoder-last-pipeline-num-layers 6"), std::string::npos) << args;
    const Emitted tt = emit_plan(EmitFormat::torchtitan, m, test::catalog_gpu("h100-sxm-80gb"), p, EmitOptions{});
    ASSERT_FALSE(tt.warnings.empty());
    EXPECT_NE(tt.warnings.front().find("--pp-first-stage-layers"), std::string::npos) << tt.warnings.front();
}

// The slowest stage sets the 1F1B slot, exactly as a framework's own split handed in as
// ThroughputOptions::stage_layers. The LM head (128256 x 4096 = 525,336,576 weights, 2.4 layers'
// worth of GEMM weights) rides on the last stage: the even split's slowest is 8 layers + the head,
// about 10.2 layers of work; 6 / 10 / 10 / 6 moves 2 layers off it and its slowest is a 10-layer
// middle stage, a little faster; 2 / 14 / 14 / 2 makes it 14 layers, slower.
TEST(UnevenPipelineSplit, StepTimeFollowsTheBusiestStage) {
    const ModelConfig m = test::catalog_model("llama-3-8b");
    const GpuSpec g = test::catalog_gpu("h100-sxm-80gb");
    ThroughputOptions given;
    given.stage_layers = {6, 10, 10, 6};
    const double even = estimate_throughput(m, g, layout(0, 0)).step_time_s;
    const double uneven = estimate_throughput(m, g, layout(6, 6)).step_time_s;
    EXPECT_DOUBLE_EQ(uneven, estimate_throughput(m, g, layout(0, 0), given).step_time_s);
    EXPECT_LT(uneven, even);
    EXPECT_GT(estimate_throughput(m, g, layout(2, 2)).step_time_s, even);
}

// The data-parallel reduction and the optimizer step cover the stage that holds the most
// parameters: at 6 / 10 / 10 / 6 a middle stage's 10 x 218,112,000 = 2,181,120,000, more than the
// first's 6 layers + the 525,336,576-row embedding (1,834,008,576) or the last's 6 layers + the
// final norm + the head (1,834,012,672). Judged alone (own_stage 1: that stage's own parameters)
// it gives the same figures (review of 2026-11-30: the busiest stage's max covered only the
// first and the last).
TEST(UnevenPipelineSplit, ReductionAndStepCoverTheStageWithTheMostParameters) {
    const ModelConfig m = test::catalog_model("llama-3-8b");
    const GpuSpec g = test::catalog_gpu("h100-sxm-80gb");
    Plan p = layout(6, 6);
    p.dp = 2, p.zero = ZeroStage{1};
    const Throughput job = estimate_throughput(m, g, p);
    ThroughputOptions alone;
    alone.own_stage = 1;
    const Throughput middle = estimate_throughput(m, g, p, alone);
    EXPECT_GT(job.optimizer_s, 0.0);
    EXPECT_DOUBLE_EQ(job.optimizer_s, middle.optimizer_s);
    EXPECT_DOUBLE_EQ(job.dp_communication_s, middle.dp_communication_s);
    alone.own_stage = 0;
    EXPECT_NEAR(estimate_throughput(m, g, p, alone).optimizer_s / job.optimizer_s, 1'834'008'576.0 / 2'181'120'000.0,
                1e-12);
}

// 32 layers do not split over pp 3 evenly (a refused --pp); 10 / 12 / 10 does. The search keeps
// the split on every plan, and takes it only with --pp pinned.
TEST(UnevenPipelineSplit, SearchKeepsThePinnedSplit) {
    const ModelConfig m = test::catalog_model("llama-3-8b");
    const GpuSpec g = test::catalog_gpu("h100-sxm-80gb");
    SearchRequest req;
    req.gpus = 24;
    req.gbs_tokens = 96 * 4096;
    req.seq = 4096;
    req.memory.profile = megatron_profile();
    req.pins.pp = 3;
    EXPECT_THROW(validate_request(m, g, req), InputError);
    req.pins.fixed.pp_first_stage_layers = 10;
    req.pins.fixed.pp_last_stage_layers = 10;
    const SearchResult r = search_plans(m, g, req);
    ASSERT_FALSE(r.candidates.empty());
    for (const Candidate& c : r.candidates) {
        EXPECT_EQ(c.plan.pp, 3);
        EXPECT_EQ(c.plan.pp_first_stage_layers, 10);
        EXPECT_EQ(c.plan.pp_last_stage_layers, 10);
    }
    req.pins.pp.reset();
    try {
        validate_request(m, g, req);
        ADD_FAILURE() << "not refused";
    } catch (const InputError& e) {
        EXPECT_EQ(e.subject(), "--pp-first-stage-layers");
    }
}

}  // namespace
}  // namespace preflight
