// Mixture of experts in the runtime (runtime/src/program_moe.cpp; Mixtral's sparse MLP): the
// routing by hand, the host program's gradients against central finite differences of its own
// loss, the ranks of MoE plans against one GPU (loopback ranks in threads, in double), the
// refusals, and each rank's dry run against the planner's preflight-runtime profile.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <span>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "catalog_fixture.hpp"
#include "dry_run_compare.hpp"
#include "host_parity.hpp"
#include "preflight/runtime/host_runner.hpp"
#include "preflight/runtime/reference_model.hpp"
#include "preflight/runtime/reference_moe.hpp"
#include "preflight/runtime/runtime.hpp"

namespace preflight::runtime {
namespace {

using Vec = std::vector<double>;
using I64 = std::vector<std::int64_t>;

// A Mixtral-shaped config: RMSNorm, RoPE, GQA, `experts` SwiGLU experts of width ffn, top-k.
ModelConfig micro_mixtral(std::int64_t layers = 2, std::int64_t experts = 4, std::int64_t k = 2) {
    nlohmann::json cfg = {{"model_type", "mixtral"},        {"hidden_size", 16},         {"num_hidden_layers", layers},
                          {"num_attention_heads", 4},       {"num_key_value_heads", 2},  {"intermediate_size", 24},
                          {"vocab_size", 13},               {"max_position_embeddings", 32},
                          {"num_local_experts", experts},   {"num_experts_per_tok", k},  {"tie_word_embeddings", false}};
    return model_from_hf_config(cfg, "mixtral-test");
}

// Two tokens, four experts, top 2. Token 0's logits (1, 3, 2, 3): experts 1 and 3 tie at 3 (the
// lower index first), gates e^0 / (e^0 + e^0) = 1/2 each. Token 1's (0, ln 3, 0, 0): expert 1, then
// 0 (first of the tied zeros), gates 3/4 and 1/4. Expert 0 gets pair 3 (slot 0), expert 1 pairs
// 0 and 2 (slots 1, 2), expert 3 pair 1 (slot 3).
TEST(Moe, RoutingByHand) {
    const Vec logits = {1, 3, 2, 3, 0, std::log(3.0), 0, 0};
    Vec gates(4);
    I64 r(static_cast<std::size_t>(ref::routing_elements(2, 2, 4)));
    ref::moe_route(logits.data(), 2, 4, 2, true, gates.data(), r.data());
    EXPECT_NEAR(gates[0], 0.5, 1e-15);
    EXPECT_NEAR(gates[1], 0.5, 1e-15);
    EXPECT_NEAR(gates[2], 0.75, 1e-15);
    EXPECT_NEAR(gates[3], 0.25, 1e-15);
    const I64 want = {1, 3, 2, 0,  // slot of pair 0..3
                      3, 0, 2, 1,  // pair of slot 0..3
                      0, 1, 3, 3, 4,  // offsets of experts 0..3, end
                      1, 3, 1, 0};  // expert of pair 0..3
    EXPECT_EQ(r, want);
    // Combine: out[t] = res + sum_j gate y[slot]; y rows 10, 20, 30, 40 (h = 1).
    const Vec y = {10, 20, 30, 40}, res = {1, 2};
    Vec out(2);
    ref::moe_combine(y.data(), gates.data(), r.data(), res.data(), 2, 2, 4, 1, ref::ExpertSlots{0, 4, 0}, out.data());
    EXPECT_DOUBLE_EQ(out[0], 1 + 0.5 * 20 + 0.5 * 40);
    EXPECT_DOUBLE_EQ(out[1], 2 + 0.75 * 30 + 0.25 * 10);
    // Routing backward: dl_j = g_j (dg_j - sum_m g_m dg_m); token 0, dg (2, 4): 1/2 (2 - 3), 1/2 (4 - 3).
    const Vec dg = {2, 4, 0, 0};
    Vec dl(8);
    ref::moe_route_bwd(dg.data(), gates.data(), r.data(), nullptr, 2, 4, 2, dl.data());
    const Vec want_dl = {0, -0.5, 0, 0.5, 0, 0, 0, 0};
    EXPECT_EQ(dl, want_dl);
}

// One step's loss of a program on the host from `params` (a single GPU plan, fp32).
double host_loss(const Program& P, const Vec& params, Vec* grads = nullptr) {
    test_support::HostLoss r = test_support::host_step_loss(P, params);
    if (grads) *grads = std::move(r.grads);
    return r.loss;
}

// The program's gradients of the router, the experts and the norm before them equal central finite
// differences of its own loss, for every recompute mode: the backward of the routing, the combine,
// the dispatch and the experts' GEMMs is checked against the forward alone.
TEST(Moe, GradientsEqualFiniteDifferencesOfTheLoss) {
    const ModelConfig m = micro_mixtral();
    int checked = 0;
    for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
        Plan p;
        p.seq = 6;
        p.mbs = 2;
        p.grad_acc = 2;
        p.recompute = rc;
        p.precision = Precision::fp32;
        const Program P = build_program(m, p);
        const Vec params = ref::random_params(P, 5, 0.4);
        Vec grads;
        host_loss(P, params, &grads);
        for (const ParamSpec& ps : P.params) {
            if (ps.layer == 0) continue;
            for (std::int64_t i : {std::int64_t{0}, ps.numel() / 2 + 1, ps.numel() - 1}) {
                const std::size_t at = static_cast<std::size_t>(ps.offset + i);
                const double eps = 1e-5;
                Vec plus = params, minus = params;
                plus[at] += eps;
                minus[at] -= eps;
                const double fd = (host_loss(P, plus) - host_loss(P, minus)) / (2 * eps);
                EXPECT_NEAR(grads[at], fd, 1e-7 + 1e-6 * std::abs(fd)) << ps.name << "[" << i << "] " << to_string(rc);
                ++checked;
            }
        }
    }
    EXPECT_EQ(checked, 3 * 2 * 7 * 3);  // modes x layers x tensors (2 norms, q|k|v, out, router, 2 experts) x 3
}

// One case of the MoE parity tests: the plan's layout, ZeRO stage, recompute mode and the model's top-k.
struct RankCase {
    std::int64_t dp, ep, tp, pp, cp;
    bool sp;
    int zero;
    Recompute rc;
    std::int64_t k;
};

// Each case in fp32 and bf16-mixed (seq 8, mbs 2, grad_acc 2; 2 layers, 4 experts) against one GPU
// over 2 steps, each run within 1e-9; under ep a capacity factor of E / k, so no pair is dropped.
// Returns the worst deviations and the number of runs.
std::pair<test_support::Worst, int> compare_cases(std::span<const RankCase> cases) {
    test_support::Worst worst;
    int n = 0;
    for (const RankCase& c : cases)
        for (Precision pr : {Precision::fp32, Precision::bf16_mixed}) {
            Plan p;
            p.seq = 8;
            p.mbs = 2;
            p.grad_acc = 2;
            p.dp = c.dp;
            p.ep = c.ep;
            p.tp = c.tp;
            p.sp = c.sp;
            p.pp = c.pp;
            p.cp = c.cp;
            p.zero = static_cast<ZeroStage>(c.zero);
            p.recompute = c.rc;
            p.precision = pr;
            if (c.ep > 1) p.moe_capacity_factor = 4.0 / static_cast<double>(c.k);  // E / k: nothing dropped
            const test_support::Worst w = test_support::compare(micro_mixtral(2, 4, c.k), p, 2);
            EXPECT_LE(w.loss, 1e-9) << to_flags(p) << " top-" << c.k;
            EXPECT_LE(w.param, 1e-9) << to_flags(p) << " top-" << c.k;
            worst.loss = std::max(worst.loss, w.loss);
            worst.param = std::max(worst.param, w.param);
            ++n;
        }
    return {worst, n};
}

// The ranks of MoE plans match one GPU running the same global batch: data parallelism under every
// ZeRO stage (the experts' weights, gradients and states sharded with the layer's unit), tensor
// parallelism with and without sp (each rank a slice of every expert, the gate weights' gradient
// summed over the ranks), pipeline stages (plain and interleaved), context parallelism (a rank routes
// its own tokens: routing is per token), every recompute mode, fp32 and bf16-mixed, top-1 and top-2.
TEST(Moe, RanksMatchOneGpu) {
    const RankCase cases[] = {
        {2, 1, 1, 1, 1, false, 0, Recompute::none, 2},      {2, 1, 1, 1, 1, false, 1, Recompute::full, 2},
        {2, 1, 1, 1, 1, false, 2, Recompute::selective, 1}, {2, 1, 1, 1, 1, false, 3, Recompute::none, 2},
        {1, 1, 1, 2, 1, false, 0, Recompute::full, 2},      {1, 1, 1, 1, 2, false, 0, Recompute::none, 2},
        {2, 1, 1, 2, 1, false, 1, Recompute::selective, 2}, {2, 1, 1, 1, 2, false, 3, Recompute::full, 1},
        {1, 1, 2, 1, 1, false, 0, Recompute::none, 2},      {1, 1, 2, 1, 1, true, 0, Recompute::selective, 2},
        {2, 1, 2, 1, 1, true, 3, Recompute::full, 2},       {1, 1, 2, 2, 1, true, 1, Recompute::none, 1},
        {1, 1, 2, 1, 2, false, 2, Recompute::full, 2},
    };
    const auto [worst, n] = compare_cases(cases);
    Plan inter;  // 4 layers, pp 2 x 2 chunks of one layer
    inter.seq = 8;
    inter.grad_acc = 2;
    inter.pp = 2;
    inter.pp_schedule = PpSchedule::interleaved;
    inter.vpp = 2;
    const test_support::Worst w = test_support::compare(micro_mixtral(4, 4, 2), inter, 2);
    EXPECT_LE(w.loss, 1e-9);
    EXPECT_LE(w.param, 1e-9);
    std::printf("MoE ranks vs one GPU, 2 steps, %d cases + interleaved: worst loss %.2e, worst parameter %.2e (relative)\n",
                n, std::max(worst.loss, w.loss), std::max(worst.param, w.param));
    EXPECT_EQ(n, 26);
}

// fp8-mixed: the attention's q|k|v and output GEMMs take fp8 operands, the router and the experts
// stay bf16 (program_fp8.cpp layer_gemm_weights). Data-parallel ranks under ZeRO 0-3 and pipeline
// stages, with every recompute mode, cast the same tensors one GPU casts (per micro-batch, per
// tensor), so they match it (tensor and context parallelism cast slices: their amax differs).
TEST(Moe, Fp8RanksMatchOneGpu) {
    nlohmann::json cfg = {{"model_type", "mixtral"},  {"hidden_size", 32},        {"num_hidden_layers", 2},
                          {"num_attention_heads", 2}, {"num_key_value_heads", 1}, {"intermediate_size", 24},
                          {"vocab_size", 13},         {"max_position_embeddings", 32},
                          {"num_local_experts", 4},   {"num_experts_per_tok", 2}};
    const ModelConfig m = model_from_hf_config(cfg, "mixtral-fp8-test");  // q|k|v widths 32, 16, 16
    int n = 0;
    for (auto [dp, pp, zero, rc] : {std::tuple{2, 1, 0, Recompute::none}, std::tuple{2, 1, 1, Recompute::full},
                                    std::tuple{2, 1, 3, Recompute::selective}, std::tuple{1, 2, 0, Recompute::full}}) {
        Plan p;
        p.recompute = rc;
        p.seq = 16;
        p.grad_acc = 2;
        p.dp = dp;
        p.pp = pp;
        p.zero = static_cast<ZeroStage>(zero);
        p.precision = Precision::fp8_mixed;
        const test_support::Worst w = test_support::compare(m, p, 2);
        EXPECT_LE(w.loss, 1e-9) << to_flags(p);
        EXPECT_LE(w.param, 1e-9) << to_flags(p);
        ++n;
    }
    EXPECT_EQ(n, 4);
    // Only the attention's weights have fp8 copies: two a layer.
    Plan one;
    one.seq = 16;
    one.precision = Precision::fp8_mixed;
    const Program P = build_program(m, one);
    int cached = 0;
    for (std::size_t i = 0; i < P.params.size(); ++i) cached += P.fp8_weight_offset[i] >= 0 ? 1 : 0;
    EXPECT_EQ(cached, 2 * 2);
}

// Expert parallelism (program_moe.cpp): the ep ranks of a block all-gather their tokens, each runs
// its E / ep experts on the pairs they take and the partial combine is reduce-scattered back; an
// expert's weights, gradients and states are a unit of their own over the dp / ep ranks holding it,
// its weight gradient scaled by 1 / ep. With a capacity factor of E / k no pair is dropped (each
// expert may take every token of the block), so the ranks match one GPU: dp 2 and 4 under every
// ZeRO stage, with tp 2 (with and without sp), pp 2 and the interleaved schedule, every recompute
// mode, top-1 and top-2, fp32 and bf16-mixed.
TEST(Moe, ExpertParallelRanksMatchOneGpu) {
    const RankCase cases[] = {
        {2, 2, 1, 1, 1, false, 0, Recompute::none, 2},      {2, 2, 1, 1, 1, false, 1, Recompute::full, 2},
        {4, 2, 1, 1, 1, false, 2, Recompute::selective, 1}, {4, 2, 1, 1, 1, false, 3, Recompute::none, 2},
        {4, 4, 1, 1, 1, false, 1, Recompute::none, 2},      {2, 2, 2, 1, 1, false, 0, Recompute::selective, 2},
        {2, 2, 2, 1, 1, true, 3, Recompute::full, 2},       {2, 2, 1, 2, 1, false, 1, Recompute::none, 2},
        // Beside context parallelism the blocks are formed over dp x cp (Megatron-Core's expert
        // groups): the cp ranks of one sequence exchange their chunks' tokens, which routing treats
        // alike (it is per token).
        {1, 2, 1, 1, 2, false, 0, Recompute::none, 2},      {2, 2, 1, 1, 2, false, 3, Recompute::full, 2},
        {2, 4, 1, 1, 2, false, 1, Recompute::selective, 1}, {1, 2, 2, 1, 2, true, 2, Recompute::none, 2},
        {1, 2, 1, 2, 2, false, 1, Recompute::full, 2},
    };
    const auto [worst, n] = compare_cases(cases);
    std::printf("expert-parallel ranks vs one GPU, 2 steps, %d cases: worst loss %.2e, worst parameter %.2e (relative)\n",
                n, worst.loss, worst.param);
    EXPECT_EQ(n, 26);
}

// Each expert-parallel rank's walk equals the preflight-runtime profile (runtime_moe_rows: the ep
// block's routed tokens, each local expert's capacity rows; the layer's experts a unit of their own
// over the dp / ep ranks; the block's gathered tokens and partial sums in backward): ep 2 to 8 of
// Mixtral-8x7B and a 16-expert top-2 model, every ZeRO stage, tp 2 with sp, pp 2 and 4, cp 2 (the
// blocks over dp x cp), capacity factors 1 and 1.25, every recompute mode, bf16-mixed and fp8-mixed,
// first and last rank.
TEST(Moe, ExpertParallelDryRunsEqualThePlanner) {
    nlohmann::json cfg = {{"model_type", "mixtral"}, {"hidden_size", 512},  {"num_hidden_layers", 4},
                          {"num_attention_heads", 8},  {"num_key_value_heads", 2}, {"intermediate_size", 1024},
                          {"vocab_size", 1000},        {"max_position_embeddings", 8192},
                          {"num_local_experts", 16},   {"num_experts_per_tok", 2}};
    const ModelConfig small = model_from_hf_config(cfg, "small-moe");
    int plans = 0;
    for (const ModelConfig& m : {test::catalog_model("mixtral-8x7b"), small})
        for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full})
            for (Precision pr : {Precision::bf16_mixed, Precision::fp8_mixed})
                for (auto [dp, ep, tp, pp, cp, zero, cf] :
                     {std::tuple{2, 2, 1, 1, 1, 0, 1.0}, std::tuple{8, 8, 1, 4, 1, 1, 1.0},
                      std::tuple{4, 2, 2, 1, 1, 2, 1.25}, std::tuple{4, 4, 1, 2, 1, 3, 1.25},
                      std::tuple{2, 4, 1, 1, 2, 1, 1.0}, std::tuple{1, 2, 2, 2, 2, 3, 1.25}}) {
                    Plan p;
                    p.seq = 4096;
                    p.grad_acc = 4;
                    p.dp = dp;
                    p.ep = ep;
                    p.cp = cp;
                    p.tp = tp;
                    p.sp = tp > 1;
                    p.pp = pp;
                    p.zero = static_cast<ZeroStage>(zero);
                    p.moe_capacity_factor = cf;
                    p.recompute = rc;
                    p.precision = pr;
                    for (std::int64_t rank : {std::int64_t{0}, p.gpus() - 1}) {
                        const test_support::Compared c = test_support::compare_with_planner(m, p, rank);
                        const std::string what = m.name + " " + to_flags(p) + " rank " + std::to_string(rank);
                        EXPECT_EQ(c.dry, c.planned) << what << ": dry run peak at " << c.where;
                        EXPECT_EQ(c.dry_phase, c.planned_phase) << what << ": dry run peak at " << c.where;
                        ++plans;
                    }
                }
    EXPECT_EQ(plans, 2 * 3 * 2 * 6 * 2);
}

// Beside cp the ep exchange is reported apart (predicted.ep_communication_s) and timed over its
// group's span, tp x ep ranks (Megatron-Core's expert grid; the runtime's blocks of its dp x cp
// ranks). Mixtral-8x7B (32 layers, hidden 4,096, K|V 8 x 128) at seq 8192, cp 2, dp 4, ep 8,
// selective recompute, 2 micro-batches, on an H100 (8 to a node: the group is inside one):
// ep: 2 x 32 x 4 exchanges of (ep - 1) x 4,096 tokens x 4,096 x 2 B = 234,881,024 B;
// cp: 2 x 32 x 4 exchanges of (cp - 1) x 2 x 4,096 x 1,024 x 2 B = 16,777,216 B.
TEST(Moe, ExpertParallelExchangeBesideCpIsReportedApart) {
    Plan p;
    p.seq = 8192;
    p.cp = 2;
    p.dp = 4;
    p.ep = 8;
    p.grad_acc = 2;
    p.recompute = Recompute::selective;
    const GpuSpec gpu = test::catalog_gpu("h100-sxm-80gb");
    ASSERT_TRUE(gpu.runtime.has_value());
    const double bus = gpu.intra_node_bandwidth_bytes_per_s * gpu.runtime->efficiency.collective_bus_efficiency;
    const Predicted pr = predict(test::catalog_model("mixtral-8x7b"), gpu, p, RunOptions{});
    ASSERT_TRUE(pr.ep_communication_s.has_value());
    ASSERT_TRUE(pr.cp_communication_s.has_value());
    EXPECT_NEAR(*pr.ep_communication_s, 2 * 32 * 4 * 234881024.0 / bus, 1e-9);
    EXPECT_NEAR(*pr.cp_communication_s, 2 * 32 * 4 * 16777216.0 / bus, 1e-9);
}

// What the runtime does not run with experts is refused naming the flag: a capacity factor without
// expert parallelism (its experts are dropless), more experts than its routing kernel sorts. fp8-mixed
// runs (the attention's GEMMs in fp8, the experts in bf16), whatever intermediate_size is, and so does
// expert parallelism beside context parallelism.
TEST(Moe, RefusalsNameTheFlag) {
    const ModelConfig m = test::catalog_model("mixtral-8x7b");
    auto refused = [&](Plan p, const std::string& flag) {
        try {
            check_supported(m, resolve_defaults(p, m));
            ADD_FAILURE() << to_flags(p) << " was accepted";
        } catch (const InputError& e) {
            EXPECT_EQ(e.subject(), flag) << e.what();
        }
    };
    Plan fp8;
    fp8.precision = Precision::fp8_mixed;
    EXPECT_NO_THROW(check_supported(m, resolve_defaults(fp8, m)));
    nlohmann::json odd = {{"model_type", "mixtral"},  {"hidden_size", 64},        {"num_hidden_layers", 2},
                          {"num_attention_heads", 4}, {"num_key_value_heads", 4}, {"intermediate_size", 40},
                          {"vocab_size", 100},        {"max_position_embeddings", 64},
                          {"num_local_experts", 4},   {"num_experts_per_tok", 2}};
    Plan odd_fp8 = fp8;
    odd_fp8.seq = 64;
    EXPECT_NO_THROW(check_supported(model_from_hf_config(odd, "odd"), resolve_defaults(odd_fp8, model_from_hf_config(odd, "odd"))));
    Plan ep_cp;  // expert parallelism beside context parallelism runs: its blocks span dp x cp
    ep_cp.dp = 4;
    ep_cp.ep = 2;
    ep_cp.cp = 2;
    ep_cp.seq = 4096;
    EXPECT_NO_THROW(check_supported(m, resolve_defaults(ep_cp, m)));
    Plan cf;  // a capacity factor without expert parallelism (dropless)
    cf.moe_capacity_factor = 1.25;
    refused(cf, "--moe-capacity-factor");
    Plan ep = cf;  // ... which expert parallelism takes
    ep.dp = 8;
    ep.ep = 8;
    EXPECT_NO_THROW(check_supported(m, resolve_defaults(ep, m)));
    // The routing kernel's bound: 257 experts a layer are refused naming the model.
    nlohmann::json wide = {{"model_type", "mixtral"},      {"hidden_size", 64},         {"num_hidden_layers", 2},
                           {"num_attention_heads", 4},     {"num_key_value_heads", 4},  {"intermediate_size", 64},
                           {"vocab_size", 100},            {"max_position_embeddings", 64},
                           {"num_local_experts", 257},     {"num_experts_per_tok", 2}};
    try {
        check_supported(model_from_hf_config(wide, "wide"), Plan{});
        ADD_FAILURE() << "257 experts were accepted";
    } catch (const InputError& e) {
        EXPECT_EQ(e.subject(), "--model") << e.what();
        EXPECT_NE(std::string(e.what()).find("257 experts a layer"), std::string::npos) << e.what();
    }
    Plan ok;
    ok.dp = 4;
    ok.tp = 2;
    ok.sp = true;
    ok.zero = ZeroStage{3};
    EXPECT_NO_THROW(check_supported(m, resolve_defaults(ok, m)));
}

// What each MoE rank's program allocates is what the planner's preflight-runtime profile predicts
// (activations.cpp add_runtime_moe_mlp; memory_runtime.cpp: the MoE backward; under fp8 the
// attention's casts and no fp8 copies of the experts):
// the peak and its phase, for Mixtral-8x7B and two small MoEs (top-2 of 16, top-1 of 4), over
// recompute modes, precisions, ZeRO stages, pipeline stages and tensor parallelism with and without sp.
TEST(Moe, DryRunsEqualThePlanner) {
    const ModelConfig small = [] {
        nlohmann::json cfg = {{"model_type", "mixtral"}, {"hidden_size", 512},  {"num_hidden_layers", 4},
                              {"num_attention_heads", 8},  {"num_key_value_heads", 2}, {"intermediate_size", 1024},
                              {"vocab_size", 1000},        {"max_position_embeddings", 8192},
                              {"num_local_experts", 16},   {"num_experts_per_tok", 2}};
        return model_from_hf_config(cfg, "small-moe");
    }();
    int plans = 0;
    for (const ModelConfig& m : {test::catalog_model("mixtral-8x7b"), small, micro_mixtral(4, 4, 1)})
        for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full})
            for (Precision pr : {Precision::bf16_mixed, Precision::fp32, Precision::fp8_mixed})
                for (auto [pp, zero, tp, sp] : {std::tuple{4, 1, 1, false}, std::tuple{1, 3, 1, false},
                                                std::tuple{1, 1, 2, false}, std::tuple{2, 3, 2, true}}) {
                    if (pr == Precision::fp8_mixed && m.kv_width() % 16 != 0) continue;  // fp8 GEMMs: widths of 16
                    Plan p;
                    p.tp = tp;
                    p.sp = sp;
                    p.seq = m.max_positions >= 4096 ? 4096 : 16;
                    p.mbs = 1;
                    p.grad_acc = 4;
                    p.dp = 2;
                    p.pp = m.layers % pp == 0 ? pp : 1;
                    p.zero = static_cast<ZeroStage>(zero);
                    p.recompute = rc;
                    p.precision = pr;
                    for (std::int64_t rank : {std::int64_t{0}, p.gpus() - 1}) {
                        const test_support::Compared c = test_support::compare_with_planner(m, p, rank);
                        const std::string what = m.name + " " + to_flags(p) + " rank " + std::to_string(rank);
                        EXPECT_EQ(c.dry, c.planned) << what << ": dry run peak at " << c.where;
                        EXPECT_EQ(c.dry_phase, c.planned_phase) << what << ": dry run peak at " << c.where;
                        ++plans;
                    }
                }
    EXPECT_EQ(plans, (2 * 3 + 1 * 2) * 3 * 4 * 2);  // fp8 for the two models whose widths are multiples of 16
}

}  // namespace
}  // namespace preflight::runtime
