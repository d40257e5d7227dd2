// OLMoE in the runtime: q/k RMSNorms over each token's whole q and k projections (OlmoeAttention
// q_norm of num_heads x head_dim, k_norm of num_key_value_heads x head_dim; QkNormGroups) and gate
// weights that are the softmax over all experts at the chosen ones, not renormalised
// (OlmoeSparseMoeBlock with norm_topk_prob false):
//  - the reference's norm and routing by hand, and the routing's backward against finite differences;
//  - the program, run on the host in double, gives the whole-model reference's loss and gradients
//    (every recompute mode, both attention kinds, three recipes);
//  - expert-, pipeline- and context-parallel ranks match one GPU;
//  - the dry runs of OLMoE-1B-7B's ranks equal the preflight-runtime profile's peak to the byte;
//  - tensor parallelism stays refused, naming --tp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "catalog_fixture.hpp"
#include "dry_run_compare.hpp"
#include "host_parity.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/runtime/reference.hpp"
#include "preflight/runtime/reference_model.hpp"
#include "preflight/runtime/reference_moe.hpp"

namespace preflight::runtime {
namespace {

using Vec = std::vector<double>;
using I64 = std::vector<std::int64_t>;

// OLMoE-shaped: 4 query heads and 2 key/value heads of 4 over a hidden size of 16, 4 SwiGLU experts
// of 24, top 2, gate weights not renormalised (OlmoeConfig's default, OLMoE-1B-7B's), vocabulary 300.
nlohmann::json micro_olmoe_config() {
    return {{"model_type", "olmoe"},       {"hidden_size", 16},        {"num_hidden_layers", 2},
            {"num_attention_heads", 4},    {"num_key_value_heads", 2}, {"intermediate_size", 24},
            {"num_experts", 4},            {"num_experts_per_tok", 2}, {"norm_topk_prob", false},
            {"vocab_size", 300},           {"max_position_embeddings", 16}};
}
ModelConfig micro_olmoe() { return model_from_hf_config(micro_olmoe_config(), "olmoe-test"); }

// One token, 2 query heads and 1 key/value head of 2: q = (1, 3, 0, 2) normalised as one group, its
// RMS sqrt((1 + 9 + 0 + 4) / 4) = sqrt(3.5) (per head it would be sqrt(5) and sqrt(2)); k = (1, 1),
// RMS 1; v passes.
TEST(Olmoe, WholeProjectionNormByHand) {
    const QkNormGroups g = qk_norm_groups(true, 2, 1, 2);
    ASSERT_EQ(g.q_groups, 1);
    ASSERT_EQ(g.q_width, 4);
    ASSERT_EQ(g.k_width, 2);
    Vec qkv = {1, 3, 0, 2, 1, 1, 5, 7}, saved(6);
    const double wq[] = {1, 2, 1, 2}, wk[] = {3, 1};
    ref::head_rmsnorm_fwd(qkv.data(), saved.data(), wq, wk, 1, 8, g, 0.0);
    const double r = std::sqrt(3.5);
    const Vec want = {1 / r, 6 / r, 0, 4 / r, 3, 1, 5, 7};
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(qkv[i], want[i], 1e-12) << i;
    EXPECT_EQ(saved, (Vec{1, 3, 0, 2, 1, 1}));
}

// One token, four experts, top 2, logits (0, ln 2, ln 3, 0): p = (1, 2, 3, 1) / 7 over all four;
// experts 2 then 1 chosen, gates 3/7 and 2/7 (renormalised they would be 3/5 and 2/5). With d gates
// (1, 0): sum_m g_m dg_m = 3/7, d logit_e = p_e ([e = 2] - 3/7) = (-3, -6, 12, -3) / 49, every expert
// one (renormalised: (0, -6, 6, 0) / 25, the unchosen none).
TEST(Olmoe, UnrenormalisedRoutingByHand) {
    const Vec logits = {0, std::log(2.0), std::log(3.0), 0}, dg = {1, 0};
    for (bool renormalize : {false, true}) {
        Vec gates(2), dl(4);
        I64 r(static_cast<std::size_t>(ref::routing_elements(1, 2, 4)));
        ref::moe_route(logits.data(), 1, 4, 2, renormalize, gates.data(), r.data());
        EXPECT_EQ(r[r.size() - 2], 2);  // the expert of pair 0, then of pair 1
        EXPECT_EQ(r[r.size() - 1], 1);
        EXPECT_NEAR(gates[0], renormalize ? 3.0 / 5 : 3.0 / 7, 1e-15);
        EXPECT_NEAR(gates[1], renormalize ? 2.0 / 5 : 2.0 / 7, 1e-15);
        ref::moe_route_bwd(dg.data(), gates.data(), r.data(), renormalize ? nullptr : logits.data(), 1, 4, 2, dl.data());
        const Vec want = renormalize ? Vec{0, -6.0 / 25, 6.0 / 25, 0} : Vec{-3.0 / 49, -6.0 / 49, 12.0 / 49, -3.0 / 49};
        for (std::size_t e = 0; e < 4; ++e) EXPECT_NEAR(dl[e], want[e], 1e-15) << e << (renormalize ? " renormalised" : "");
    }
}

// The unrenormalised routing's backward against central differences of sum dg . gates (3 tokens, 6
// experts, top 2; random logits far from ties, so the choice does not move under the step).
TEST(Olmoe, UnrenormalisedRoutingBackwardEqualsFiniteDifferences) {
    const std::int64_t rows = 3, E = 6, k = 2;
    const Vec logits = {0.3, -1.2, 0.9, 0.1, -0.4, 1.7, -0.8, 0.5, 1.1, -1.5, 0.0, 0.2, 2.0, -0.3, 0.6, 1.4, -2.1, 0.8};
    const Vec dg = {0.7, -1.3, 0.4, 2.2, -0.9, 0.5};
    auto objective = [&](const Vec& l) {
        Vec gates(static_cast<std::size_t>(rows * k));
        I64 r(static_cast<std::size_t>(ref::routing_elements(rows, k, E)));
        ref::moe_route(l.data(), rows, E, k, false, gates.data(), r.data());
        double sum = 0;
        for (std::size_t i = 0; i < gates.size(); ++i) sum += dg[i] * gates[i];
        return std::pair{sum, std::pair{gates, r}};
    };
    const auto routed = objective(logits).second;
    Vec dl(static_cast<std::size_t>(rows * E));
    ref::moe_route_bwd(dg.data(), routed.first.data(), routed.second.data(), logits.data(), rows, E, k, dl.data());
    for (std::size_t i = 0; i < logits.size(); ++i) {
        Vec plus = logits, minus = logits;
        plus[i] += 1e-6;
        minus[i] -= 1e-6;
        const double fd = (objective(plus).first - objective(minus).first) / 2e-6;
        EXPECT_NEAR(dl[i], fd, 1e-8) << "logit " << i;
        EXPECT_NE(dl[i], 0.0) << "logit " << i << ": an unchosen expert's logit gets a gradient too";
    }
}

TEST(OlmoeProgram, ParametersFollowThePlannerLayout) {
    const ModelConfig m = micro_olmoe();
    ASSERT_TRUE(m.qk_norm && m.qk_norm_whole && m.pre_norms && !m.moe_renormalize);
    // build_program throws when a unit's tensors differ from the planner's layout (runtime_unit_elements).
    const Program P = build_program(m, test_support::micro_plan(1, 1, 0, Precision::bf16_mixed));
    // Per layer: two norms of 16, q|k|v [32, 16], the q norm of 16 and the k norm of 8, o [16, 16], the
    // router [4, 16] and 4 experts' gate|up [48, 16] and down [16, 24]: 32 + 512 + 24 + 256 + 64 + 4 x 1,152
    // = 5,496; two layers, the final norm and an untied embedding and head of 300 x 16: 20,608.
    EXPECT_EQ(count_params(m).per_layer, 5496);
    EXPECT_EQ(count_params(m).total, 20608);
    int q_norms = 0, k_norms = 0;
    for (const ParamSpec& ps : P.params) {
        const bool q = ps.name.find("q_norm") != std::string::npos, k = ps.name.find("k_norm") != std::string::npos;
        if (q || k) EXPECT_EQ(ps.numel(), q ? 16 : 8) << ps.name;
        q_norms += q;
        k_norms += k;
    }
    EXPECT_EQ(q_norms, 2);  // one each a layer
    EXPECT_EQ(k_norms, 2);
}

TEST(OlmoeProgram, HostExecutionGivesTheReferenceGradients) {
    const ModelConfig m = micro_olmoe();
    int cases = 0;
    for (const Plan& p : test_support::single_gpu_matrix()) {
        const Program P = build_program(m, p);
        const Vec want = test_support::expect_host_matches_reference(P, to_flags(p));
        double qk = 0;  // the q norm gradients are not all zero, so the check above covers them
        for (const ParamSpec& ps : P.params)
            if (ps.name.find("q_norm") != std::string::npos)
                for (std::int64_t i = 0; i < ps.numel(); ++i) qk = std::max(qk, std::abs(want[static_cast<std::size_t>(ps.offset + i)]));
        EXPECT_GT(qk, 1e-6) << to_flags(p);
        ++cases;
    }
    EXPECT_EQ(cases, 3 * 2 * 3);
    // Both of OLMoE's choices change the loss: a per-head norm, or renormalised gates, is another model.
    const Plan p = test_support::micro_plan(1, 1, 0, Precision::fp32);
    ModelConfig per_head = m, renormalised = m;
    per_head.qk_norm_whole = false;
    renormalised.moe_renormalize = true;
    const double loss = test_support::reference_loss(m, p);
    EXPECT_GT(std::abs(test_support::reference_loss(per_head, p) - loss), 1e-6 * loss);
    EXPECT_GT(std::abs(test_support::reference_loss(renormalised, p) - loss), 1e-6 * loss);
}

// Expert parallelism (ep 2 over dp 2, a capacity factor of E / k = 2 so nothing is dropped) under
// ZeRO-1, 2 pipeline stages, and context parallelism over 2 ranks, each against one GPU.
TEST(OlmoeParity, ExpertPipelineAndContextParallelRanksMatchOneGpu) {
    Plan ep = test_support::micro_plan(1, 2, 1, Precision::bf16_mixed_fp32_grads);
    ep.ep = 2;
    ep.moe_capacity_factor = 2.0;
    Plan pp = test_support::micro_plan(1, 1, 0, Precision::bf16_mixed_fp32_grads);
    pp.pp = 2;
    pp.grad_acc = 4;
    Plan cp = test_support::micro_plan(1, 1, 0, Precision::bf16_mixed_fp32_grads);
    cp.cp = 2;
    cp.seq = 8;
    for (const auto& [name, plan] : {std::pair{"dp 2 ep 2", ep}, std::pair{"pp 2", pp}, std::pair{"cp 2", cp}}) {
        const test_support::Worst w = test_support::compare(micro_olmoe(), plan, 2);
        EXPECT_LE(w.loss, 1e-9) << name;
        EXPECT_LE(w.param, 1e-9) << name;
        std::printf("OLMoE %s vs one GPU, 2 steps: worst loss %.2e, parameter %.2e\n", name, w.loss, w.param);
    }
}

// The catalog's OLMoE-1B-7B (16 layers of 64 experts of 1,024, top 8; 16 heads of 128, q and k norms of
// 2,048 each): its ranks under data, expert, pipeline and context parallelism, bf16- and fp8-mixed; its
// kept router logits are the planner's "router logits (softmax over all experts)".
TEST(OlmoeDryRun, RanksEqualThePlanner) {
    const ModelConfig m = test::catalog_model("olmoe-1b-7b");
    int walks = 0;
    for (Precision pr : {Precision::bf16_mixed, Precision::fp8_mixed})
        for (Recompute rc : all_recomputes())
            for (auto [dp, ep, pp, cp, zero] : {std::tuple{8, 8, 1, 1, 1}, std::tuple{4, 2, 2, 1, 2},
                                                std::tuple{2, 1, 1, 2, 3}, std::tuple{1, 1, 1, 1, 0}}) {
                Plan p;
                p.seq = 4096;
                p.grad_acc = 4;
                p.dp = dp, p.ep = ep, p.pp = pp, p.cp = cp;
                p.zero = static_cast<ZeroStage>(zero);
                p.recompute = rc;
                p.precision = pr;
                for (std::int64_t rank : {std::int64_t{0}, p.gpus() - 1}) {
                    const test_support::Compared c = test_support::compare_with_planner(m, p, rank);
                    const std::string what = to_flags(p) + " rank " + std::to_string(rank) + ": dry run peak at " + c.where;
                    EXPECT_EQ(c.dry, c.planned) << what;
                    EXPECT_EQ(c.dry_phase, c.planned_phase) << what;
                    ++walks;
                }
            }
    EXPECT_EQ(walks, 2 * 3 * 4 * 2);
}

TEST(OlmoeSupport, RunsButNotUnderTensorParallelism) {
    const ModelConfig m = micro_olmoe();
    EXPECT_NO_THROW(check_runtime_model(m));
    EXPECT_NO_THROW(check_runtime_plan(m, test_support::micro_plan(1, 2, 1, Precision::bf16_mixed)));
    try {
        check_runtime_plan(m, test_support::micro_plan(2, 1, 0, Precision::bf16_mixed));
        ADD_FAILURE() << "OLMoE ran under tp 2";
    } catch (const InputError& e) {
        EXPECT_EQ(e.subject(), "--tp");
        EXPECT_NE(e.detail().find("whole q and k projections"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace preflight::runtime
