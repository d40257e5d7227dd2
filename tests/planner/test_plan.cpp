// Plan helpers: flag rendering, JSON round trip, precision table.
#include <gtest/gtest.h>

#include "preflight/planner/error.hpp"
#include "preflight/planner/model.hpp"
#include "preflight/planner/report.hpp"

namespace preflight {
namespace {

TEST(Plan, FlagsReproduceThePlan) {
    Plan p;
    p.seq = 2048;
    p.mbs = 4;
    p.tp = 2;
    p.sp = true;
    p.zero = ZeroStage{3};
    p.recompute = Recompute::selective;
    p.precision = Precision::bf16_mixed_fp32_grads;
    p.dropout = 0.1;
    EXPECT_EQ(to_flags(p),
              "--seq 2048 --mbs 4 --grad-acc 1 --dp 1 --tp 2 --pp 1 --sp --zero 3 --recompute selective "
              "--precision bf16-mixed-fp32-grads --optimizer adamw --attention flash --dropout 0.1");
}

TEST(Plan, JsonRoundTrip) {
    Plan p;
    p.seq = 1024;
    p.grad_acc = 8;
    p.dp = 4;
    p.optimizer = Optimizer::sgd;
    p.attention = AttentionKind::eager;
    const Plan back = plan_from_json(plan_to_json(p));
    EXPECT_EQ(to_flags(back), to_flags(p));
    EXPECT_EQ(plan_to_json(p).at("global_batch_tokens"), 1024 * 8 * 4);
}

// --fp8-scaling is printed and written only when it is not the default, reads back, and
// applies to fp8-mixed only.
TEST(Plan, Fp8ScalingIsShownWhenSetAndNeedsTheFp8Recipe) {
    Plan p;
    p.precision = Precision::fp8_mixed;
    EXPECT_EQ(to_flags(p).find("--fp8-scaling"), std::string::npos);
    EXPECT_FALSE(plan_to_json(p).contains("fp8_scaling"));
    p.fp8_scaling = Fp8Scaling::rowwise;
    EXPECT_NE(to_flags(p).find("--precision fp8-mixed --fp8-scaling rowwise"), std::string::npos);
    EXPECT_EQ(plan_to_json(p).at("fp8_scaling"), "rowwise");
    EXPECT_EQ(plan_from_json(plan_to_json(p)).fp8_scaling, Fp8Scaling::rowwise);
    ModelConfig m;
    m.hidden = 64, m.layers = 2, m.heads = 4, m.kv_heads = 4, m.ffn_hidden = 256, m.vocab = 100, m.max_positions = 128;
    p.seq = 128;
    EXPECT_NO_THROW(validate_plan(p, m));
    p.precision = Precision::bf16_mixed;
    try {
        validate_plan(p, m);
        ADD_FAILURE() << "rowwise scaling with bf16-mixed was accepted";
    } catch (const InputError& e) {
        EXPECT_EQ(e.subject(), "--fp8-scaling");
        EXPECT_NE(std::string(e.what()).find("fp8-mixed only"), std::string::npos);
    }
}

TEST(Plan, PrecisionTableOfTheContract) {
    // docs/interface.md: weights / gradients / master bytes per parameter.
    struct Row {
        Precision p;
        int weights, grads, master;
    };
    for (const Row& r : {Row{Precision::fp32, 4, 4, 0}, Row{Precision::bf16_mixed, 2, 2, 4},
                         Row{Precision::bf16_mixed_fp32_grads, 2, 6, 4}, Row{Precision::bf16, 2, 2, 0},
                         Row{Precision::fp16_mixed, 2, 2, 4}}) {
        const PrecisionBytes b = precision_bytes(r.p);
        EXPECT_EQ(b.weight, r.weights) << to_string(r.p);
        EXPECT_EQ(b.gradient + b.gradient_accum, r.grads) << to_string(r.p);
        EXPECT_EQ(b.master, r.master) << to_string(r.p);
    }
}

}  // namespace
}  // namespace preflight
