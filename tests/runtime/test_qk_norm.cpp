// Qwen3 and Qwen3-MoE in the runtime: per-head q/k norms (program_layer.cpp emit_head_norm_fwd / _bwd)
// and, for Qwen3-MoE, Mixtral's router when its gate weights are renormalised (norm_topk_prob true):
//  - the program, run on the host in double, gives the whole-model reference's loss and gradients
//    (every recompute mode, both attention kinds, three recipes; Qwen3 tied and untied, Qwen3-MoE);
//  - tensor-parallel ranks (each holding some heads, so part of each q/k norm weight's gradient)
//    match one GPU once those gradients are summed over the ranks, with and without sequence
//    parallelism, beside data parallelism under every ZeRO stage; Qwen3-MoE under tp and ep too;
//  - the dry runs of Qwen3-8B's and Qwen3-30B-A3B's ranks equal the preflight-runtime profile's peak
//    to the byte;
//  - the runtime still refuses OLMo 2's layer (its norms on the sublayer outputs).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "dry_run_compare.hpp"
#include "host_parity.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/runtime/host_runner.hpp"
#include "preflight/runtime/reference.hpp"
#include "preflight/runtime/reference_model.hpp"

namespace preflight::runtime {
namespace {

using Vec = std::vector<double>;

// Qwen3-shaped: 4 query heads and 2 key/value heads of 8 (q width 32 over a hidden size of 16, as
// Qwen3-0.6B's 2,048 over 1,024), SwiGLU of 24, vocabulary 300 (tp 2 splits it unevenly).
ModelConfig micro_qwen3(bool tied = false) {
    const nlohmann::json cfg = {{"model_type", "qwen3"},       {"hidden_size", 16},        {"num_hidden_layers", 2},
                                {"num_attention_heads", 4},    {"num_key_value_heads", 2}, {"head_dim", 8},
                                {"intermediate_size", 24},     {"vocab_size", 300},        {"max_position_embeddings", 16},
                                {"tie_word_embeddings", tied}};
    return model_from_hf_config(cfg, "qwen3-test");
}

// Qwen3-MoE-shaped: the layer above with 4 SwiGLU experts of width 24, top 2, gate weights renormalised
// (norm_topk_prob true, as Qwen3-30B-A3B's; the reference computes them as Mixtral's).
ModelConfig micro_qwen3_moe() {
    const nlohmann::json cfg = {{"model_type", "qwen3_moe"},      {"hidden_size", 16},        {"num_hidden_layers", 2},
                                {"num_attention_heads", 4},       {"num_key_value_heads", 2}, {"head_dim", 8},
                                {"intermediate_size", 48},        {"moe_intermediate_size", 24},
                                {"num_experts", 4},               {"num_experts_per_tok", 2}, {"norm_topk_prob", true},
                                {"vocab_size", 300},              {"max_position_embeddings", 16}};
    return model_from_hf_config(cfg, "qwen3-moe-test");
}

TEST(QkNormProgram, ParametersFollowThePlannerLayout) {
    const ModelConfig m = micro_qwen3();
    ASSERT_TRUE(m.qk_norm && !m.qk_norm_whole);
    // build_program throws when a unit's tensors differ from the planner's layout (runtime_unit_elements).
    const Program P = build_program(m, test_support::micro_plan(1, 1, 0, Precision::bf16_mixed));
    // Per layer: two norms of 16, q|k|v [64, 16], o [16, 32], gate|up [48, 16], down [16, 24] and the q/k
    // norms' 8 + 8 = 2,736; two layers, the final norm, an untied embedding and head of 300 x 16: 15,088.
    EXPECT_EQ(count_params(m).total, 15088);
    EXPECT_EQ(count_params(m).per_layer, 2736);
    // The runtime pads the embedding and the head to its vocabulary multiple (zero rows); the layout
    // aligns each tensor apart (param_elements counts that padding too).
    std::int64_t elements = 0, norms = 0;
    for (const ParamSpec& ps : P.params) elements += ps.numel();
    EXPECT_EQ(elements, 15088 + 2 * (P.dims.vocab_padded - 300) * 16);
    for (const ParamSpec& ps : P.params)
        if (ps.name.find("q_norm") != std::string::npos || ps.name.find("k_norm") != std::string::npos) {
            EXPECT_EQ(ps.numel(), 8) << ps.name;
            ++norms;
        }
    EXPECT_EQ(norms, 4);  // q and k, two layers
}

TEST(QkNormProgram, HostExecutionGivesTheReferenceGradients) {
    int cases = 0;
    for (int model = 0; model < 3; ++model)  // untied, tied, Qwen3-MoE
        for (const Plan& p : test_support::single_gpu_matrix()) {
            const ModelConfig m = model == 2 ? micro_qwen3_moe() : micro_qwen3(model == 1);
            const Program P = build_program(m, p);
            const Vec want = test_support::expect_host_matches_reference(P, m.name + " " + to_flags(p));
            ASSERT_EQ(want.size(), static_cast<std::size_t>(P.param_elements));
            double qk = 0;  // the reference's q norm gradients: not all zero, so the check above covers them
            for (const ParamSpec& ps : P.params)
                if (ps.name.find("q_norm") != std::string::npos)
                    for (std::int64_t k = 0; k < ps.numel(); ++k)
                        qk = std::max(qk, std::abs(want[static_cast<std::size_t>(ps.offset + k)]));
            EXPECT_GT(qk, 1e-6) << to_flags(p) << ": the q norm weights get no gradient";
            ++cases;
        }
    EXPECT_EQ(cases, 3 * 3 * 2 * 3);
}

// Which replicated tensors get their gradients summed over tp (ParamSpec::tp_partial_grad): with
// sequence parallelism every norm's weight and bias (each rank normalises its rows), without it the
// per-head q/k norms only (each rank its heads); none at tp 1. One all-reduce each before the optimizer.
// And which tensors are norm weights (initialised to 1).
TEST(QkNormProgram, NormTensorsAreMarkedWhereTheyAreMade) {
    for (bool tied : {false, true})
        for (auto [tp, sp] : {std::pair{1, false}, std::pair{2, false}, std::pair{2, true}}) {
            Plan p = test_support::micro_plan(tp, 1, 0, Precision::bf16_mixed);
            p.sp = sp;
            const Program P = build_program(micro_qwen3(tied), p, 0);
            int flagged = 0;
            for (const ParamSpec& ps : P.params) {
                const bool norm = ps.name.find("norm") != std::string::npos;
                const bool head_norm = ps.name.find("q_norm") != std::string::npos || ps.name.find("k_norm") != std::string::npos;
                EXPECT_EQ(ps.tp_partial_grad, tp > 1 && (sp ? norm : head_norm)) << ps.name << " tp " << tp << (sp ? " sp" : "");
                flagged += ps.tp_partial_grad;
            }
            // Two layers: attn, mlp, q and k norms each, and the final norm.
            EXPECT_EQ(flagged, tp == 1 ? 0 : sp ? 9 : 4) << "tp " << tp << (sp ? " sp" : "");
            int reduces = 0;
            for (const Op& op : P.step)
                reduces += op.kind == OpKind::all_reduce && op.group == CommGroup::tp && op.phase.kind == PhaseKind::grad_reduce;
            EXPECT_EQ(reduces, flagged) << "tp " << tp << (sp ? " sp" : "");
        }
    // The norms' weights (initialised to 1: ParamSpec::norm_weight), LayerNorm's biases apart (GPT-2).
    for (const ModelConfig& m : {micro_qwen3(), test::catalog_model("gpt2")}) {
        int weights = 0;
        for (const ParamSpec& ps : build_program(m, test_support::micro_plan(1, 1, 0, Precision::fp32), 0).params) {
            const bool want = ps.name.find("norm") != std::string::npos && ps.name.find(".weight") != std::string::npos;
            EXPECT_EQ(ps.norm_weight, want) << m.name << " " << ps.name;
            weights += ps.norm_weight;
        }
        EXPECT_EQ(weights, m.name == "gpt2" ? 2 * 12 + 1 : 4 * 2 + 1) << m.name;
    }
}

// test_support::micro_plan in bf16-mixed with fp32 gradients, with or without sequence parallelism.
Plan micro_plan(std::int64_t tp, std::int64_t dp, int zero, bool sp) {
    Plan p = test_support::micro_plan(tp, dp, zero, Precision::bf16_mixed_fp32_grads);
    p.sp = sp;
    return p;
}

TEST(QkNormParity, TensorParallelRanksSumTheNormGradients) {
    int cases = 0;
    test_support::Worst worst;
    auto keep = [&](const test_support::Worst& w) {
        worst.loss = std::max(worst.loss, w.loss);
        worst.param = std::max(worst.param, w.param);
    };
    for (bool sp : {false, true}) {
        {  // tp 2: two query heads and one key/value head a rank
            const test_support::Worst w = test_support::compare(micro_qwen3(), micro_plan(2, 1, 0, sp), 3);
            EXPECT_LE(w.loss, 1e-9) << "tp 2" << (sp ? " sp" : "");
            EXPECT_LE(w.param, 1e-9) << "tp 2" << (sp ? " sp" : "");
            keep(w);
            ++cases;
        }
        for (int zero : {0, 1, 2, 3}) {
            const test_support::Worst w = test_support::compare(micro_qwen3(), micro_plan(2, 2, zero, sp), 3);
            EXPECT_LE(w.loss, 1e-9) << "dp 2 tp 2 zero " << zero << (sp ? " sp" : "");
            EXPECT_LE(w.param, 1e-9) << "dp 2 tp 2 zero " << zero << (sp ? " sp" : "");
            keep(w);
            ++cases;
        }
    }
    EXPECT_EQ(cases, 2 * 5);
    std::printf("Qwen3 tp 2 alone and beside dp 2 (ZeRO 0-3), with and without sp, vs one GPU, 3 steps, %d cases: worst "
                "loss %.2e, worst parameter %.2e\n",
                cases, worst.loss, worst.param);
}

// Qwen3-MoE's ranks: tp 2 with sp (the norms' sum beside the gate weights'), and expert parallelism
// (ep 2 over dp 2, a capacity factor of E / k = 2 so nothing is dropped) under ZeRO-1.
TEST(QkNormParity, Qwen3MoeRanksMatchOneGpu) {
    Plan tp = micro_plan(2, 1, 0, true);
    test_support::Worst w = test_support::compare(micro_qwen3_moe(), tp, 2);
    EXPECT_LE(w.loss, 1e-9) << "tp 2 sp";
    EXPECT_LE(w.param, 1e-9) << "tp 2 sp";
    Plan ep = micro_plan(1, 2, 1, false);
    ep.ep = 2;
    ep.moe_capacity_factor = 2.0;
    const test_support::Worst tp_worst = w;
    w = test_support::compare(micro_qwen3_moe(), ep, 2);
    EXPECT_LE(w.loss, 1e-9) << "dp 2 ep 2";
    EXPECT_LE(w.param, 1e-9) << "dp 2 ep 2";
    std::printf("Qwen3-MoE vs one GPU, 2 steps: tp 2 sp worst loss %.2e, parameter %.2e; dp 2 ep 2 worst loss %.2e, "
                "parameter %.2e\n",
                tp_worst.loss, tp_worst.param, w.loss, w.param);
}

TEST(QkNormParity, PipelineAndContextParallelRanksMatchOneGpu) {
    Plan pp = micro_plan(1, 1, 0, false);
    pp.pp = 2;
    pp.grad_acc = 4;
    test_support::Worst w = test_support::compare(micro_qwen3(true), pp, 2);
    EXPECT_LE(w.loss, 1e-9) << "pp 2";
    EXPECT_LE(w.param, 1e-9) << "pp 2";
    Plan cp = micro_plan(2, 1, 0, true);
    cp.cp = 2;
    cp.seq = 8;  // each cp rank: two chunks of 2 tokens of each sequence
    const test_support::Worst pp_worst = w;
    w = test_support::compare(micro_qwen3(), cp, 2);
    EXPECT_LE(w.loss, 1e-9) << "tp 2 sp cp 2";
    EXPECT_LE(w.param, 1e-9) << "tp 2 sp cp 2";
    std::printf("Qwen3 vs one GPU, 2 steps: pp 2 (tied) worst loss %.2e, parameter %.2e; tp 2 sp cp 2 worst loss %.2e, "
                "parameter %.2e\n",
                pp_worst.loss, pp_worst.param, w.loss, w.param);
}

// A rank's dry run against the runtime profile: the peak to the byte, and the phase that holds it.
test_support::Compared expect_walk_equal(const ModelConfig& m, const Plan& p, std::int64_t rank) {
    const test_support::Compared c = test_support::compare_with_planner(m, p, rank);
    const std::string what = m.name + " " + to_flags(p) + " rank " + std::to_string(rank) + ": dry run peak at " + c.where;
    EXPECT_EQ(c.dry, c.planned) << what;
    EXPECT_EQ(c.dry_phase, c.planned_phase) << what;
    return c;
}

// The catalog's Qwen3-8B (32 query heads, 8 key/value heads of 128): the q/k norms' kept input is
// the planner's "Q norm input" and "K norm input" ([s, b, 4,096 + 1,024] / tp at 2 bytes).
TEST(QkNormDryRun, Qwen3RanksEqualThePlanner) {
    const ModelConfig m = test::catalog_model("qwen3-8b");
    int plans = 0;
    for (std::int64_t tp : {1, 2, 8})
        for (bool sp : {false, true})
            for (Recompute rc : all_recomputes())
                for (Precision pr : {Precision::bf16_mixed, Precision::fp8_mixed}) {
                    if (sp && tp == 1) continue;
                    Plan p;
                    p.seq = 4096;
                    p.mbs = 1;
                    p.tp = tp;
                    p.sp = sp;
                    p.dp = 8 / tp;
                    p.zero = zero_optimizer_states;
                    p.recompute = rc;
                    p.precision = pr;
                    expect_walk_equal(m, p, p.gpus() - 1);
                    ++plans;
                }
    EXPECT_EQ(plans, (1 + 2 + 2) * 3 * 2);
}

TEST(QkNormDryRun, PipelineContextAndEagerRanksEqualThePlanner) {
    const ModelConfig m = test::catalog_model("qwen3-8b");
    auto check = [&](const Plan& p) {
        for (std::int64_t rank : {std::int64_t{0}, p.gpus() - 1}) expect_walk_equal(m, p, rank);
    };
    Plan p;
    p.seq = 4096;
    p.mbs = 1;
    p.tp = 2;
    p.pp = 4;
    p.grad_acc = 8;
    check(p);
    p.pp_schedule = PpSchedule::interleaved;
    p.vpp = 3;
    check(p);
    Plan c;
    c.seq = 8192;
    c.mbs = 1;
    c.tp = 2;
    c.sp = true;
    c.cp = 2;
    check(c);
    Plan e;
    e.seq = 1024;
    e.mbs = 2;
    e.attention = AttentionKind::eager;
    e.zero = zero_weights;
    e.dp = 2;
    check(e);
}

// Small layers (one or two query heads of 2 or 8 over one key/value head, a few tokens): there the q/k
// norms' backward scratch, beside d(q|k|v), can outweigh the flash workspace and d(attn out), and sets
// the stage's peak (memory_runtime.cpp runtime_head_norm_backward_transient; without that term 109 of
// a wider grid's walks came out over the prediction, at "q/k norm bwd", by 4-34 bytes in those printed).
TEST(QkNormDryRun, SmallLayersWhereTheNormBackwardSetsThePeak) {
    int walks = 0, at_norm = 0;
    for (int hidden : {16, 64})
        for (int heads : {1, 2})
            for (int d : {2, 8})
                for (int seq : {1, 2, 4})
                    for (int mbs : {1, 2})
                        for (auto at : {AttentionKind::flash, AttentionKind::eager})
                            for (auto pr : {Precision::fp32, Precision::bf16_mixed})
                                for (auto rc : all_recomputes()) {
                                    const nlohmann::json cfg = {
                                        {"model_type", "qwen3"},       {"hidden_size", hidden},  {"num_hidden_layers", 1},
                                        {"num_attention_heads", heads}, {"num_key_value_heads", 1}, {"head_dim", d},
                                        {"intermediate_size", 8},      {"vocab_size", 2},         {"max_position_embeddings", 64}};
                                    Plan p;
                                    p.seq = seq;
                                    p.mbs = mbs;
                                    p.attention = at;
                                    p.precision = pr;
                                    p.recompute = rc;
                                    const test_support::Compared c =
                                        expect_walk_equal(model_from_hf_config(cfg, "small-h" + std::to_string(hidden) +
                                                                                        "-q" + std::to_string(heads) +
                                                                                        "-d" + std::to_string(d)),
                                                          p, 0);
                                    at_norm += c.where.find("q/k norm bwd") != std::string::npos ? 1 : 0;
                                    ++walks;
                                }
    EXPECT_EQ(walks, 2 * 2 * 2 * 3 * 2 * 2 * 2 * 3);
    EXPECT_GT(at_norm, 0) << "no walk peaks at the q/k norms' backward: the grid no longer tests its term";
    std::printf("%d small Qwen3 layers walked, %d peaking at the q/k norms' backward, each equal to the planner\n", walks,
                at_norm);
}

// The catalog's Qwen3-30B-A3B (48 layers of 128 experts of 768, top 8; 32 query heads and 4 key/value heads
// of 128): its ranks under expert, tensor, pipeline and context parallelism, bf16- and fp8-mixed.
TEST(QkNormDryRun, Qwen3MoeRanksEqualThePlanner) {
    const ModelConfig m = test::catalog_model("qwen3-30b-a3b");
    int walks = 0;
    for (Precision pr : {Precision::bf16_mixed, Precision::fp8_mixed})
        for (auto [dp, ep, tp, pp, cp, zero] : {std::tuple{8, 8, 1, 1, 1, 1}, std::tuple{4, 4, 2, 1, 1, 3},
                                                std::tuple{4, 4, 1, 4, 1, 1}, std::tuple{2, 2, 2, 1, 2, 2}}) {
            Plan p;
            p.seq = 4096;
            p.grad_acc = 4;
            p.dp = dp, p.ep = ep, p.tp = tp, p.sp = tp > 1, p.pp = pp, p.cp = cp;
            p.zero = static_cast<ZeroStage>(zero);
            p.recompute = Recompute::selective;
            p.precision = pr;
            for (std::int64_t rank : {std::int64_t{0}, p.gpus() - 1}) {
                expect_walk_equal(m, p, rank);
                ++walks;
            }
        }
    EXPECT_EQ(walks, 2 * 4 * 2);
}

// OLMo 2's layer, read as transformers build it (norms on the sublayer outputs, none on their inputs),
// runs since 2026-12-04 (test_olmo2.cpp); Qwen3-MoE's gate weights run renormalised or not
// (norm_topk_prob; OLMoE's whole-projection norms: test_olmoe.cpp).
TEST(QkNormSupport, Olmo2RunsAndQwen3MoeRunsEitherGates) {
    nlohmann::json olmo = {{"model_type", "olmo2"},     {"hidden_size", 64},       {"num_hidden_layers", 2},
                           {"num_attention_heads", 4},  {"num_key_value_heads", 4}, {"intermediate_size", 96},
                           {"vocab_size", 300},         {"max_position_embeddings", 64}};
    EXPECT_NO_THROW(check_runtime_model(model_from_hf_config(olmo, "olmo")));
    nlohmann::json moe = olmo;
    moe["model_type"] = "qwen3_moe";
    moe["num_experts"] = 4;
    moe["num_experts_per_tok"] = 2;
    moe["moe_intermediate_size"] = 32;
    EXPECT_NO_THROW(check_runtime_model(model_from_hf_config(moe, "qwen3-moe")));  // norm_topk_prob false
    moe["norm_topk_prob"] = true;  // Qwen3-30B-A3B's
    EXPECT_NO_THROW(check_runtime_model(model_from_hf_config(moe, "qwen3-moe")));
    EXPECT_NO_THROW(check_runtime_model(micro_qwen3()));
}

}  // namespace
}  // namespace preflight::runtime
