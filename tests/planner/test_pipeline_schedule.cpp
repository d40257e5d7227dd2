// The pipeline stages' model chunks and the order of their passes (planner pipeline_schedule.cpp),
// against the orders worked out by hand from Narayanan et al. 2021 (sec. 2.2) and Megatron-LM's
// schedules.py (get_schedule_table, get_pp_rank_microbatches).
#include <gtest/gtest.h>

#include <string>

#include "preflight/planner/extensions.hpp"

namespace preflight {
namespace {

Plan pipeline(std::int64_t pp, std::int64_t vpp, std::int64_t grad_acc) {
    Plan p;
    p.pp = pp;
    p.vpp = vpp;
    p.pp_schedule = vpp > 1 ? PpSchedule::interleaved : PpSchedule::one_f_one_b;
    p.grad_acc = grad_acc;
    return p;
}

// "F1c0 B1c1 ...": F or B, the micro-batch, the chunk.
std::string order_text(const Plan& p, std::int64_t stage) {
    std::string s;
    for (const PipelinePass& ps : pipeline_stage_order(p, stage)) {
        s += ps.forward ? "F" : "B";
        s += std::to_string(ps.micro_batch);
        s += "c";
        s += std::to_string(ps.chunk);
        s += " ";
    }
    return s;
}

// pp 2, v 2, m 4. Megatron's table with groups of pp = 2 micro-batches: (1,c0) (2,c0) (1,c1)
// (2,c1) (3,c0) (4,c0) (3,c1) (4,c1); backwards the same with the chunks reversed. Stage 0 warms
// up with (2 - 0 - 1) * 2 + (2 - 1) * 2 = 4 forwards, stage 1 with 2.
TEST(PipelineOrder, InterleavedTwoStagesTwoChunksByHand) {
    const Plan p = pipeline(2, 2, 4);
    EXPECT_EQ(order_text(p, 0), "F1c0 F2c0 F1c1 F2c1 F3c0 B1c1 F4c0 B2c1 F3c1 B1c0 F4c1 B2c0 B3c1 B4c1 B3c0 B4c0 ");
    EXPECT_EQ(order_text(p, 1), "F1c0 F2c0 F1c1 B1c1 F2c1 B2c1 F3c0 B1c0 F4c0 B2c0 F3c1 B3c1 F4c1 B4c1 B3c0 B4c0 ");
}

// One chunk: 1F1B (min(p - stage - 1, m) warm-up forwards), and GPipe (all forwards first).
TEST(PipelineOrder, OneFOneBAndGpipeByHand) {
    Plan p = pipeline(4, 1, 6);
    EXPECT_EQ(order_text(p, 0), "F1c0 F2c0 F3c0 F4c0 B1c0 F5c0 B2c0 F6c0 B3c0 B4c0 B5c0 B6c0 ");
    EXPECT_EQ(order_text(p, 3), "F1c0 B1c0 F2c0 B2c0 F3c0 B3c0 F4c0 B4c0 F5c0 B5c0 F6c0 B6c0 ");
    p.pp_schedule = PpSchedule::gpipe;
    p.grad_acc = 2;
    EXPECT_EQ(order_text(p, 3), "F1c0 F2c0 B1c0 B2c0 ");
}

// The most chunk micro-batches a stage holds is pipeline_in_flight's: warm-up + 1, at most m v.
TEST(PipelineOrder, ChunkMicroBatchesHeldAreTheWarmUpPlusOne) {
    for (auto [pp, vpp, m] : {std::tuple{2, 2, 4}, std::tuple{4, 2, 8}, std::tuple{4, 3, 4}, std::tuple{8, 2, 16}})
        for (std::int64_t stage = 0; stage < pp; ++stage) {
            const Plan p = pipeline(pp, vpp, m);
            std::int64_t held = 0, most = 0;
            for (const PipelinePass& ps : pipeline_stage_order(p, stage)) {
                held += ps.forward ? 1 : -1;
                most = std::max(most, held);
            }
            EXPECT_EQ(held, 0);
            EXPECT_EQ(most, pipeline_in_flight(p, stage)) << pp << " " << vpp << " " << m << " stage " << stage;
        }
}

// Llama-3-8B's 32 layers at pp 4, v 2: 4 layers a chunk, stage i holding the model's layers
// 4i + 1 .. 4i + 4 (virtual stage i) and 16 + 4i + 1 .. (virtual stage 4 + i).
TEST(PipelineChunks, EvenChunksByHand) {
    const Plan p = pipeline(4, 2, 8);
    for (std::int64_t stage = 0; stage < 4; ++stage) {
        const std::vector<StageChunk> c = pipeline_stage_chunks(p, 32, stage);
        ASSERT_EQ(c.size(), 2u);
        EXPECT_EQ(c[0].first_layer, 4 * stage + 1);
        EXPECT_EQ(c[1].first_layer, 16 + 4 * stage + 1);
        EXPECT_EQ(c[0].layers, 4);
        EXPECT_EQ(c[1].layers, 4);
    }
    // One chunk: the stage's contiguous layers (GPT-2's 12 at pp 5: 3, 3, 2, 2, 2).
    const std::vector<StageChunk> one = pipeline_stage_chunks(pipeline(5, 1, 5), 12, 2);
    ASSERT_EQ(one.size(), 1u);
    EXPECT_EQ(one[0].first_layer, 7);
    EXPECT_EQ(one[0].layers, 2);
}

// Llama-3.1-405B's 126 layers at pp 8, v 2: 16 chunks divide 126 + 2 = 128 slots, 8 each; slot 0
// is the embedding's and slot 127 the loss's. Stage 0's chunk 0 holds layers 1-7, its chunk 1
// (virtual stage 8, slots 64-71) layers 64-71; stage 7's chunk 1 (slots 120-127) layers 120-126.
TEST(PipelineChunks, EmbeddingAndLossSlotsByHand) {
    const Plan p = pipeline(8, 2, 16);
    const std::vector<StageChunk> s0 = pipeline_stage_chunks(p, 126, 0), s7 = pipeline_stage_chunks(p, 126, 7);
    EXPECT_EQ(s0[0].first_layer, 1);
    EXPECT_EQ(s0[0].layers, 7);
    EXPECT_EQ(s0[1].first_layer, 64);
    EXPECT_EQ(s0[1].layers, 8);
    EXPECT_EQ(s7[0].first_layer, 56);
    EXPECT_EQ(s7[0].layers, 8);
    EXPECT_EQ(s7[1].first_layer, 120);
    EXPECT_EQ(s7[1].layers, 7);
    std::int64_t total = 0;
    for (std::int64_t stage = 0; stage < 8; ++stage) {
        std::int64_t on_stage = 0;
        for (const StageChunk& c : pipeline_stage_chunks(p, 126, stage)) on_stage += c.layers;
        EXPECT_EQ(on_stage, pipeline_stage_layers(p, 126, stage));
        total += on_stage;
    }
    EXPECT_EQ(total, 126);
}

}  // namespace
}  // namespace preflight
