#include <set>

#include <gtest/gtest.h>

#include "catalog_fixture.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/validation/matrix.hpp"

using namespace preflight;
using namespace preflight::validation;

TEST(Matrix, SmokeHasAtMostSixRunsThatTheRuntimeAccepts) {
    const Matrix m = load_matrix("smoke", default_matrices_dir());
    EXPECT_EQ(m.name, "smoke");
    EXPECT_GE(m.runs.size(), 1u);
    EXPECT_LE(m.runs.size(), 6u);
    for (const auto& r : m.runs) {
        const ModelConfig model = test::catalog_model(r.model);
        EXPECT_NO_THROW(validate_plan(resolve_defaults(r.plan, model), model)) << r.id;
    }
}

TEST(Matrix, FullCoversTheIssuesGrid) {
    const Matrix m = load_matrix("full", default_matrices_dir());
    ASSERT_GE(m.runs.size(), 40u);
    std::set<std::string> models, precisions, recomputes, attentions;
    std::set<std::int64_t> grad_accs;
    std::int64_t seq_lo = 1 << 30, seq_hi = 0, mbs_lo = 1 << 30, mbs_hi = 0;
    for (const auto& r : m.runs) {
        models.insert(r.model);
        precisions.insert(std::string(to_string(r.plan.precision)));
        recomputes.insert(std::string(to_string(r.plan.recompute)));
        attentions.insert(std::string(to_string(r.plan.attention)));
        grad_accs.insert(r.plan.grad_acc);
        seq_lo = std::min(seq_lo, r.plan.seq), seq_hi = std::max(seq_hi, r.plan.seq);
        mbs_lo = std::min(mbs_lo, r.plan.mbs), mbs_hi = std::max(mbs_hi, r.plan.mbs);
        const ModelConfig model = test::catalog_model(r.model);
        EXPECT_NO_THROW(validate_plan(resolve_defaults(r.plan, model), model)) << r.id;
    }
    for (const char* name : {"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"}) EXPECT_TRUE(models.count(name)) << name;
    // Llama-style models between 0.3 and 1.5 B parameters.
    int llama_style = 0;
    for (const auto& name : models) {
        const ModelConfig mc = test::catalog_model(name);
        const auto p = count_params(mc).total;
        if (mc.family != ModelFamily::gpt2 && p >= 300'000'000 && p <= 1'500'000'000) ++llama_style;
    }
    EXPECT_GE(llama_style, 2);
    EXPECT_EQ(seq_lo, 512);
    EXPECT_EQ(seq_hi, 4096);
    EXPECT_EQ(mbs_lo, 1);
    EXPECT_EQ(mbs_hi, 16);
    EXPECT_EQ(grad_accs, (std::set<std::int64_t>{1, 4}));
    EXPECT_EQ(recomputes, (std::set<std::string>{"none", "selective", "full"}));
    EXPECT_EQ(precisions, (std::set<std::string>{"fp32", "bf16-mixed", "bf16-mixed-fp32-grads", "bf16"}));
    EXPECT_EQ(attentions, (std::set<std::string>{"flash", "eager"}));
    // Every plan fits an 80 GB H100 under both the runtime and the (heavier) PyTorch profile; the
    // pytorch profile refuses selective recompute, which the runner does not run in PyTorch.
    const GpuSpec h100 = test::catalog_gpu("h100-sxm-80gb");
    for (const auto& r : m.runs) {
        MemoryOptions o;
        for (const auto& prof : {runtime_profile(), pytorch_profile()}) {
            if (prof.name == "pytorch" && r.plan.recompute == Recompute::selective) continue;
            o.profile = prof;
            const MemoryReport mr = evaluate_memory(test::catalog_model(r.model), h100, r.plan, o);
            EXPECT_LE(mr.peak_bytes, h100.memory_bytes) << r.id << " " << prof.name;
        }
    }
    // Tolerances declared per source and quantity.
    for (const char* src : {kSourceRuntime, kSourcePytorch})
        for (const char* q : {"peak_bytes", "step_time_s", "mfu", "overhead_bytes"})
            EXPECT_TRUE(m.tolerances.at(src).count(q)) << src << " " << q;
}

TEST(Matrix, ToleranceIsAbsolutePlusRelative) {
    const Tolerance t{10.0, 0.01};
    EXPECT_TRUE(t.within(1010.0, 1000.0));   // |10| <= 10 + 10
    EXPECT_TRUE(t.within(1020.0, 1000.0));   // |20| <= 20
    EXPECT_FALSE(t.within(1020.5, 1000.0));
    EXPECT_TRUE(t.within(980.0, 1000.0));
    EXPECT_FALSE(t.within(979.0, 1000.0));
}

TEST(Matrix, BadInputNamesTheField) {
    using nlohmann::json;
    const json ok_run = {{"id", "a"}, {"model", "gpt2"}, {"plan", {{"seq", 512}}}};
    EXPECT_NO_THROW(matrix_from_json({{"name", "x"}, {"runs", {ok_run}}}, "m"));
    try {
        matrix_from_json({{"name", "x"}, {"runs", {ok_run, ok_run}}}, "m");
        FAIL();
    } catch (const InputError& e) {
        EXPECT_EQ(e.subject(), "m.runs[1].id");
    }
    json bad = ok_run;
    bad["plan"]["dp"] = 2;
    EXPECT_THROW(matrix_from_json({{"name", "x"}, {"runs", {bad}}}, "m"), InputError);
    bad = ok_run;
    bad["plan"]["precision"] = "fp13";
    try {
        matrix_from_json({{"name", "x"}, {"runs", {bad}}}, "m");
        FAIL();
    } catch (const InputError& e) {
        EXPECT_EQ(e.subject(), "m.runs[0].plan.precision");
    }
    EXPECT_THROW(matrix_from_json({{"name", "x"}, {"runs", json::array()}}, "m"), InputError);
    EXPECT_THROW(matrix_from_json({{"name", "x"}, {"runs", {ok_run}}, {"tolerances", {{"pytorch", {{"peak_bytes", {{"rel", -1}}}}}}}}, "m"),
                 InputError);
    // A misspelt source, quantity or bound would leave the defaults judging: each is refused by name.
    const std::pair<json, std::string> typos[] = {
        {{{"preflight-runtim", {{"peak_bytes", {{"rel", 0}}}}}}, "m.tolerances.preflight-runtim"},
        {{{"preflight-runtime", {{"peak_byte", {{"rel", 0}}}}}}, "m.tolerances.preflight-runtime.peak_byte"},
        {{{"pytorch", {{"mfu", {{"relative", 0}}}}}}, "m.tolerances.pytorch.mfu.relative"}};
    for (const auto& [tolerances, subject] : typos) {
        try {
            matrix_from_json({{"name", "x"}, {"runs", {ok_run}}, {"tolerances", tolerances}}, "m");
            ADD_FAILURE() << subject;
        } catch (const InputError& e) {
            EXPECT_EQ(e.subject(), subject);
        }
    }
    // A framework profile's name is a source (a report predicted by that profile).
    EXPECT_NO_THROW(matrix_from_json({{"name", "x"}, {"runs", {ok_run}}, {"tolerances", {{"megatron", {{"mfu", {{"rel", 0.5}}}}}}}}, "m"));
}

TEST(Matrix, RunArgumentsAreThePlanFlags) {
    MatrixRun r;
    r.id = "x";
    r.model = "gpt2";
    r.plan.seq = 512;
    r.plan.mbs = 4;
    r.plan.grad_acc = 4;
    r.plan.recompute = Recompute::full;
    r.plan.precision = Precision::bf16;
    r.plan.attention = AttentionKind::eager;
    r.steps = 7;
    r.warmup = 1;
    const std::vector<std::string> want = {"--model", "gpt2", "--gpu", "h100-sxm-80gb", "--seq", "512", "--mbs", "4",
                                           "--grad-acc", "4", "--recompute", "full", "--precision", "bf16",
                                           "--optimizer", "adamw", "--attention", "eager", "--steps", "7", "--warmup", "1"};
    EXPECT_EQ(run_arguments(r, "h100-sxm-80gb"), want);
}
