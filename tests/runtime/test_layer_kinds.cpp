// Layers of two kinds in the runtime (Dims::window_of): every full_attention_period-th model layer
// attends to the whole sequence, the others through the sliding window (OLMo 3's one in four,
// Gemma 3's one in six, gpt-oss's one in two), past the window as well as within it:
//  - each stage layer takes its model layer's window, under a pipeline and its interleaved chunks;
//  - the program, run on the host in double, gives the whole-model reference's loss and gradients,
//    which differ from those with the window on every layer or on none;
//  - pipeline (1F1B and interleaved), context-, data- and tensor-parallel ranks match one GPU;
//  - the dry runs of an OLMo 3 7B shape at 8,192 tokens (window 4,096) equal the planner's peak;
//  - a layer_types list that follows no period stays refused past the window, naming --seq.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "dry_run_compare.hpp"
#include "host_parity.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/runtime/reference_model.hpp"

namespace preflight::runtime {
namespace {

using Vec = std::vector<double>;

// OLMo 3-shaped (Olmo3Config: every fourth layer full when layer_types is absent): 4 layers, hidden
// 16, 4 query heads on 2 key/value heads of 4, SwiGLU of 24, a window of 3 keys.
nlohmann::json micro_olmo3_config() {
    return {{"model_type", "olmo3"},    {"hidden_size", 16},        {"num_hidden_layers", 4},
            {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"intermediate_size", 24},
            {"vocab_size", 300},        {"max_position_embeddings", 32}, {"sliding_window", 3}};
}
ModelConfig micro_olmo3() { return model_from_hf_config(micro_olmo3_config(), "olmo3-test"); }

// Mistral-shaped (pre-norm, so tensor parallelism runs) with every second of its 2 layers full, as a
// layer_types list of period 2 gives Gemma 3's and gpt-oss's own layers.
ModelConfig micro_two_kinds_llama() {
    nlohmann::json cfg = {{"model_type", "mistral"},     {"hidden_size", 16},        {"num_hidden_layers", 2},
                          {"num_attention_heads", 4},    {"num_key_value_heads", 2}, {"intermediate_size", 24},
                          {"vocab_size", 300},           {"max_position_embeddings", 32}, {"sliding_window", 3}};
    ModelConfig m = model_from_hf_config(cfg, "mistral-two-kinds");
    m.full_attention_layers = 1;
    m.full_attention_period = 2;
    return m;
}

TEST(LayerKindsProgram, EachStageLayerTakesItsModelLayersWindow) {
    const ModelConfig m = micro_olmo3();
    ASSERT_EQ(m.full_attention_period, 4);
    ASSERT_EQ(m.full_attention_layers, 1);
    Plan p = test_support::micro_plan(1, 1, 0, Precision::bf16_mixed);  // seq 6, past the window of 3
    const Dims one = build_program(m, p).dims;
    for (std::int64_t l : {1, 2, 3}) EXPECT_EQ(one.window_of(l), 3) << "layer " << l;
    EXPECT_EQ(one.window_of(4), 0);
    p.pp = 2;
    p.grad_acc = 4;
    const Dims last = build_program(m, p, 1).dims;  // model layers 3 and 4 as stage layers 1 and 2
    EXPECT_EQ(last.window_of(1), 3);
    EXPECT_EQ(last.window_of(2), 0);
    p.pp_schedule = PpSchedule::interleaved;  // chunks of one layer: stage 1 holds model layers 2 and 4
    p.vpp = 2;
    const Dims chunked = build_program(m, p, 1).dims;
    EXPECT_EQ(chunked.model_layer(2), 4);
    EXPECT_EQ(chunked.window_of(1), 3);
    EXPECT_EQ(chunked.window_of(2), 0);
    // Within the window the two kinds are one: no layer is windowed.
    Plan short_seq = test_support::micro_plan(1, 1, 0, Precision::bf16_mixed);
    short_seq.seq = 3;
    const Dims within = build_program(m, short_seq).dims;
    for (std::int64_t l = 1; l <= 4; ++l) EXPECT_EQ(within.window_of(l), 0) << "layer " << l;
}

TEST(LayerKindsProgram, HostExecutionGivesTheReferenceGradients) {
    int cases = 0;
    const ModelConfig m = micro_olmo3();
    for (const Plan& p : test_support::single_gpu_matrix()) {
        test_support::expect_host_matches_reference(build_program(m, p), m.name + " " + to_flags(p));
        ++cases;
    }
    EXPECT_EQ(cases, 3 * 2 * 3);
    // Which layer is full matters: the window on every layer, or on none, gives another loss.
    const Plan p = test_support::micro_plan(1, 1, 0, Precision::fp32);
    ModelConfig every = m, none = m;
    every.full_attention_layers = 0;
    every.full_attention_period = 0;
    none.sliding_window = 0;
    none.full_attention_layers = 0;
    none.full_attention_period = 0;
    const double loss = test_support::reference_loss(m, p);
    EXPECT_GT(std::abs(test_support::reference_loss(every, p) - loss), 1e-6 * loss);
    EXPECT_GT(std::abs(test_support::reference_loss(none, p) - loss), 1e-6 * loss);
}

// OLMo 3: 2 pipeline stages (the full layer on the second), interleaved 2 x 2 (one layer a chunk), cp 2
// over 8 tokens in 4 chunks of 2 (the window of 3 reaching across chunks the other rank holds), dp 2
// under ZeRO-3; the pre-norm shape at dp 2 x tp 2 with sequence parallelism.
TEST(LayerKindsParity, ParallelRanksMatchOneGpu) {
    struct Case {
        const char* what;
        ModelConfig model;
        Plan plan;
    };
    std::vector<Case> cases;
    Plan pp = test_support::micro_plan(1, 1, 0, Precision::bf16_mixed_fp32_grads);
    pp.pp = 2;
    pp.grad_acc = 4;
    cases.push_back({"OLMo 3 pp 2", micro_olmo3(), pp});
    Plan vpp = pp;
    vpp.pp_schedule = PpSchedule::interleaved;
    vpp.vpp = 2;
    cases.push_back({"OLMo 3 pp 2 vpp 2", micro_olmo3(), vpp});
    Plan cp = test_support::micro_plan(1, 1, 0, Precision::bf16_mixed_fp32_grads);
    cp.cp = 2;
    cp.seq = 8;
    cases.push_back({"OLMo 3 cp 2", micro_olmo3(), cp});
    cases.push_back({"OLMo 3 dp 2 zero 3", micro_olmo3(), test_support::micro_plan(1, 2, 3, Precision::bf16_mixed)});
    Plan tp = test_support::micro_plan(2, 2, 1, Precision::bf16_mixed_fp32_grads);
    tp.sp = true;
    cases.push_back({"two-kind Mistral dp 2 tp 2 sp", micro_two_kinds_llama(), tp});
    for (const Case& c : cases) {
        const test_support::Worst w = test_support::compare(c.model, c.plan, 2);
        EXPECT_LE(w.loss, 1e-9) << c.what;
        EXPECT_LE(w.param, 1e-9) << c.what;
        std::printf("%s vs one GPU, 2 steps: worst loss %.2e, parameter %.2e\n", c.what, w.loss, w.param);
    }
}

// Olmo3Config's defaults at OLMo 3 7B's published shape (32 layers of 4,096, 32 heads, SwiGLU of
// 11,008; window 4,096, every fourth layer full) at 8,192 tokens: its ranks walk equal to the profile
// (the window keeps no tensor of its own), flash and eager, bf16- and fp8-mixed.
TEST(LayerKindsDryRun, PastTheWindowEqualsThePlanner) {
    nlohmann::json cfg = {{"model_type", "olmo3"},      {"hidden_size", 4096},       {"num_hidden_layers", 32},
                          {"num_attention_heads", 32},  {"intermediate_size", 11008}, {"vocab_size", 100278},
                          {"max_position_embeddings", 65536}};
    const ModelConfig m = model_from_hf_config(cfg, "olmo3-7b-shape");
    ASSERT_EQ(m.sliding_window, 4096);
    int walks = 0;
    for (Precision pr : {Precision::bf16_mixed, Precision::fp8_mixed})
        for (auto [dp, pp, cp, zero, eager] : {std::tuple{8, 1, 1, 3, false}, std::tuple{2, 4, 1, 1, false},
                                               std::tuple{2, 1, 2, 1, false}, std::tuple{1, 1, 1, 1, true}}) {
            Plan p;
            p.seq = 8192;
            p.grad_acc = 4;
            p.dp = dp, p.pp = pp, p.cp = cp;
            p.zero = static_cast<ZeroStage>(zero);
            p.recompute = Recompute::selective;
            p.precision = pr;
            p.attention = eager ? AttentionKind::eager : AttentionKind::flash;
            for (std::int64_t rank : {std::int64_t{0}, p.gpus() - 1}) {
                const test_support::Compared c = test_support::compare_with_planner(m, p, rank);
                EXPECT_EQ(c.dry, c.planned) << to_flags(p) << " rank " << rank << ": dry run peak at " << c.where;
                ++walks;
            }
        }
    EXPECT_EQ(walks, 2 * 4 * 2);
}

TEST(LayerKindsSupport, ALayerTypesListWithNoPeriodStaysRefusedPastTheWindow) {
    nlohmann::json cfg = micro_olmo3_config();
    cfg["layer_types"] = {"sliding_attention", "full_attention", "full_attention", "sliding_attention"};
    const ModelConfig m = model_from_hf_config(cfg, "olmo3-no-period");
    ASSERT_EQ(m.full_attention_period, 0);
    Plan p = test_support::micro_plan(1, 1, 0, Precision::bf16_mixed);
    try {
        check_runtime_plan(m, p);
        ADD_FAILURE() << "ran layers of two kinds with no period past the window";
    } catch (const InputError& e) {
        EXPECT_EQ(e.subject(), "--seq");
        EXPECT_NE(e.detail().find("no period"), std::string::npos) << e.what();
    }
    p.seq = 3;  // within the window: every layer alike
    EXPECT_NO_THROW(check_runtime_plan(m, p));
    EXPECT_NO_THROW(check_runtime_plan(micro_olmo3(), test_support::micro_plan(1, 1, 0, Precision::bf16_mixed)));
}

}  // namespace
}  // namespace preflight::runtime
