// OLMo 2 in the runtime (program_post_norm.cpp): RMSNorms on the attention's and the MLP's outputs before
// each residual add, none on their inputs (transformers' Olmo2DecoderLayer), with OLMoE's q/k norms over
// the whole q and k projections:
//  - with both post-norm weights 0 every layer is the identity: the loss is the embedding's through the
//    final norm and the head, computed here by hand, and only the post-norm weights get gradients;
//  - the program, run on the host in double, gives the whole-model reference's loss and gradients
//    (every recompute mode, both attention kinds, three recipes; fp8: test_fp8_program.cpp);
//  - data-parallel (ZeRO-1 and 3), pipeline and context-parallel ranks match one GPU;
//  - the dry runs of OLMo-2-7B's and 13B's ranks equal the preflight-runtime profile's peak to the byte;
//  - tensor parallelism stays refused, naming --tp; Gemma 3's four norms a layer stay refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "catalog_fixture.hpp"
#include "dry_run_compare.hpp"
#include "host_parity.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/runtime/reference_model.hpp"

namespace preflight::runtime {
namespace {

using Vec = std::vector<double>;

// OLMo 2-shaped: 4 query heads and 2 key/value heads of 4 over a hidden size of 16, SwiGLU of 24,
// vocabulary 300, untied head.
ModelConfig micro_olmo2() { return test::olmo2_model(16, 2, 4, 2, 24, 300, 16); }

bool is_post_norm(const ParamSpec& ps) { return ps.name.find("post_norm") != std::string::npos; }

TEST(Olmo2Program, ParametersFollowThePlannerLayout) {
    const ModelConfig m = micro_olmo2();
    ASSERT_TRUE(m.post_norms && !m.pre_norms && m.qk_norm && m.qk_norm_whole);
    // build_program throws when a unit's tensors differ from the planner's layout (runtime_unit_elements).
    const Program P = build_program(m, test_support::micro_plan(1, 1, 0, Precision::bf16_mixed));
    // Per layer: q|k|v [32, 16], the q norm of 16 and the k norm of 8, o [16, 16], two post-norms of 16,
    // gate|up [48, 16] and down [16, 24]: 512 + 24 + 256 + 32 + 768 + 384 = 1,976; two layers, the final
    // norm of 16 and an untied embedding and head of 300 x 16: 3,952 + 16 + 9,600 = 13,568.
    EXPECT_EQ(count_params(m).per_layer, 1976);
    EXPECT_EQ(count_params(m).total, 13568);
    int post = 0, pre = 0;
    for (const ParamSpec& ps : P.params) {
        post += is_post_norm(ps) ? 1 : 0;
        pre += ps.name.find("attn_norm") != std::string::npos || ps.name.find("mlp_norm") != std::string::npos;
        if (is_post_norm(ps)) EXPECT_TRUE(ps.norm_weight) << ps.name;  // initialised to 1
    }
    EXPECT_EQ(post, 4);  // attn_post_norm and mlp_post_norm in each layer
    EXPECT_EQ(pre, 0);
}

// With both post-norm weights of every layer 0, norm(anything) = 0, so x1 = x and out = x1: the layers
// pass the embedding through. Then each token's loss is, by hand, with e the token's embedding row:
// xf = e / sqrt(mean(e^2) + eps) * w_final, logits = head xf (the 300 real rows), loss = logsumexp -
// logit[label]. In the backward a zero weight stops every gradient before the sublayers: only the
// post-norm weights (and the embedding, head and final norm) get one.
TEST(Olmo2Program, ZeroPostNormsMakeEveryLayerTheIdentity) {
    const Program P = build_program(micro_olmo2(), test_support::micro_plan(1, 1, 0, Precision::fp32));
    const Dims& d = P.dims;
    Vec w = ref::random_params(P, 3, 0.4);
    for (const ParamSpec& ps : P.params)
        if (is_post_norm(ps)) std::fill_n(w.begin() + ps.offset, ps.numel(), 0.0);
    const std::vector<ref::TokenBatch> batches = ref::synthetic_batches(P, 77, 1);
    const double* wte = w.data() + P.params[static_cast<std::size_t>(P.wte)].offset;
    const double* head = w.data() + P.params[static_cast<std::size_t>(P.head)].offset;
    const double* wf = w.data() + P.params[static_cast<std::size_t>(P.normf_w)].offset;
    double sum = 0;
    std::int64_t n = 0;
    for (const ref::TokenBatch& tb : batches)
        for (std::int64_t r = 0; r < d.rows; ++r) {
            const double* e = wte + tb.tokens[static_cast<std::size_t>(r)] * d.h;
            double ms = 0;
            for (std::int64_t i = 0; i < d.h; ++i) ms += e[i] * e[i] / static_cast<double>(d.h);
            Vec xf(static_cast<std::size_t>(d.h));
            for (std::int64_t i = 0; i < d.h; ++i) xf[static_cast<std::size_t>(i)] = e[i] / std::sqrt(ms + P.hyper.norm_eps) * wf[i];
            Vec logit(static_cast<std::size_t>(d.vocab));
            double top = -1e300;
            for (std::int64_t v = 0; v < d.vocab; ++v) {
                double z = 0;
                for (std::int64_t i = 0; i < d.h; ++i) z += head[v * d.h + i] * xf[static_cast<std::size_t>(i)];
                logit[static_cast<std::size_t>(v)] = z;
                top = std::max(top, z);
            }
            double se = 0;
            for (double z : logit) se += std::exp(z - top);
            sum += top + std::log(se) - logit[static_cast<std::size_t>(tb.labels[static_cast<std::size_t>(r)])];
            ++n;
        }
    Vec g;
    const double loss = ref::model_loss(P, w, batches, &g);
    EXPECT_NEAR(loss, sum / static_cast<double>(n), 1e-12 * loss);
    double post_grad = 0;
    for (const ParamSpec& ps : P.params) {
        if (ps.layer == 0) continue;  // the embedding, final norm and head
        for (std::int64_t i = 0; i < ps.numel(); ++i) {
            const double v = std::abs(g[static_cast<std::size_t>(ps.offset + i)]);
            if (is_post_norm(ps))
                post_grad = std::max(post_grad, v);
            else
                ASSERT_EQ(v, 0.0) << ps.name << " gets a gradient through a zero post-norm weight";
        }
    }
    EXPECT_GT(post_grad, 1e-6);
    // The host runs the same program to the same numbers.
    const test_support::HostLoss host = test_support::host_step_loss(P, w);
    EXPECT_NEAR(host.loss, loss, 1e-12 * loss);
}

TEST(Olmo2Program, HostExecutionGivesTheReferenceGradients) {
    const ModelConfig m = micro_olmo2();
    int cases = 0;
    for (const Plan& p : test_support::single_gpu_matrix()) {
        const Program P = build_program(m, p);
        const Vec want = test_support::expect_host_matches_reference(P, to_flags(p));
        double post = 0;  // the post-norm gradients are not all zero, so the check above covers them
        for (const ParamSpec& ps : P.params)
            if (is_post_norm(ps))
                for (std::int64_t i = 0; i < ps.numel(); ++i) post = std::max(post, std::abs(want[static_cast<std::size_t>(ps.offset + i)]));
        EXPECT_GT(post, 1e-6) << to_flags(p);
        ++cases;
    }
    EXPECT_EQ(cases, 3 * 2 * 3);
    // The norms' place matters: the same weights with pre-norms (Llama's layer) give another loss.
    const Plan p = test_support::micro_plan(1, 1, 0, Precision::fp32);
    ModelConfig pre = micro_olmo2();
    pre.pre_norms = true;
    pre.post_norms = false;
    const double loss = test_support::reference_loss(micro_olmo2(), p);
    EXPECT_GT(std::abs(test_support::reference_loss(pre, p) - loss), 1e-6 * loss);
}

// Data parallelism (dp 2 under ZeRO-1 and ZeRO-3), 2 pipeline stages, and context parallelism over 2
// ranks, each against one GPU.
TEST(Olmo2Parity, DataPipelineAndContextParallelRanksMatchOneGpu) {
    const Plan z1 = test_support::micro_plan(1, 2, 1, Precision::bf16_mixed_fp32_grads);
    Plan z3 = test_support::micro_plan(1, 2, 3, Precision::bf16_mixed);
    z3.recompute = Recompute::full;
    Plan pp = test_support::micro_plan(1, 1, 0, Precision::bf16_mixed_fp32_grads);
    pp.pp = 2;
    pp.grad_acc = 4;
    Plan cp = test_support::micro_plan(1, 1, 0, Precision::bf16_mixed_fp32_grads);
    cp.cp = 2;
    cp.seq = 8;
    for (const auto& [name, plan] : {std::pair{"dp 2 zero 1", z1}, std::pair{"dp 2 zero 3 full recompute", z3},
                                     std::pair{"pp 2", pp}, std::pair{"cp 2", cp}}) {
        const test_support::Worst w = test_support::compare(micro_olmo2(), plan, 2);
        EXPECT_LE(w.loss, 1e-9) << name;
        EXPECT_LE(w.param, 1e-9) << name;
        std::printf("OLMo 2 %s vs one GPU, 2 steps: worst loss %.2e, parameter %.2e\n", name, w.loss, w.param);
    }
}

// The catalog's OLMo-2-7B (32 layers, 32 heads of 128, q and k norms of 4,096 each) and 13B (40 layers,
// 40 heads): ranks under data, pipeline and context parallelism with ZeRO 0-3, bf16- and fp8-mixed,
// every recompute mode, both attention kinds.
TEST(Olmo2DryRun, RanksEqualThePlanner) {
    int walks = 0;
    for (const char* name : {"olmo-2-7b", "olmo-2-13b"}) {
        const ModelConfig m = test::catalog_model(name);
        for (Precision pr : {Precision::bf16_mixed, Precision::fp8_mixed})
            for (Recompute rc : all_recomputes())
                for (auto [dp, pp, cp, zero, eager] : {std::tuple{1, 1, 1, 0, false}, std::tuple{8, 1, 1, 3, false},
                                                       std::tuple{4, 2, 1, 2, false}, std::tuple{2, 1, 2, 1, false},
                                                       std::tuple{1, 1, 1, 1, true}}) {
                    Plan p;
                    p.seq = eager ? 1024 : 4096;
                    p.grad_acc = 4;
                    p.dp = dp, p.pp = pp, p.cp = cp;
                    p.zero = static_cast<ZeroStage>(zero);
                    p.recompute = rc;
                    p.precision = pr;
                    p.attention = eager ? AttentionKind::eager : AttentionKind::flash;
                    const std::vector<std::int64_t> ranks = p.gpus() == 1 ? std::vector<std::int64_t>{0}
                                                                          : std::vector<std::int64_t>{0, p.gpus() - 1};
                    for (std::int64_t rank : ranks) {
                        const test_support::Compared c = test_support::compare_with_planner(m, p, rank);
                        const std::string what = std::string(name) + " " + to_flags(p) + " rank " + std::to_string(rank) +
                                                 ": dry run peak at " + c.where;
                        EXPECT_EQ(c.dry, c.planned) << what;
                        EXPECT_EQ(c.dry_phase, c.planned_phase) << what;
                        ++walks;
                    }
                }
    }
    EXPECT_EQ(walks, 2 * 2 * 3 * (1 + 3 * 2 + 1));
}

TEST(Olmo2Support, RunsButNotUnderTensorParallelism) {
    const ModelConfig m = micro_olmo2();
    EXPECT_NO_THROW(check_runtime_model(m));
    EXPECT_NO_THROW(check_runtime_plan(m, test_support::micro_plan(1, 2, 1, Precision::bf16_mixed)));
    // OLMo's whole-projection q/k norms are refused first; without them the post-norms' own rule fires.
    ModelConfig no_qk_norm = m;
    no_qk_norm.qk_norm = no_qk_norm.qk_norm_whole = false;
    for (const auto& [model, words] : {std::pair{m, "whole q and k projections"}, std::pair{no_qk_norm, "sublayer outputs"}})
        try {
            check_runtime_plan(model, test_support::micro_plan(2, 1, 0, Precision::bf16_mixed));
            ADD_FAILURE() << "OLMo 2 ran under tp 2";
        } catch (const InputError& e) {
            EXPECT_EQ(e.subject(), "--tp");
            EXPECT_NE(e.detail().find(words), std::string::npos) << e.what();
        }
    // Gemma 3: norms on both sides of each sublayer.
    try {
        check_runtime_model(test::catalog_model("gemma-3-1b"));
        ADD_FAILURE() << "Gemma 3 ran";
    } catch (const InputError& e) {
        EXPECT_EQ(e.subject(), "--model");
        EXPECT_NE(e.detail().find("both the inputs and the outputs"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace preflight::runtime
