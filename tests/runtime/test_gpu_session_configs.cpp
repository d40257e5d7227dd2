// validation/gpu_session/gpu_session_configs.json, the plans the GPU session records: every plan is one
// the runtime can run, is predicted to fit an 80 GB H100 (runtime profile, 1 GiB overhead),
// and the set covers what the issue asks for (>= 12 plans; gpt2 .. gpt2-xl and
// llama-3.2-1b; seq 512-4096; several micro-batch sizes; every recompute mode; >= 3
// precisions; the llama-3.2-1b bf16-mixed seq 2048 flash headline run).
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "catalog_fixture.hpp"
#include "preflight/planner/report.hpp"
#include "preflight/runtime/runtime.hpp"

namespace preflight::runtime {
namespace {

TEST(GpuSessionConfigs, EveryPlanRunsFitsAndTheSetCoversTheIssue) {
    std::ifstream in(preflight::test::data_dir() / ".." / "validation" / "gpu_session" / "gpu_session_configs.json");
    ASSERT_TRUE(in) << "validation/gpu_session/gpu_session_configs.json";
    const auto j = nlohmann::json::parse(in);
    const GpuSpec gpu = preflight::test::catalog_gpu(j.at("gpu_default").get<std::string>());
    std::set<std::string> ids, models, precisions, recomputes;
    std::set<std::int64_t> mbs, seqs;
    int headline = 0;
    for (const auto& c : j.at("configs")) {
        const std::string id = c.at("id");
        EXPECT_TRUE(ids.insert(id).second) << "duplicate id " << id;
        const ModelConfig m = preflight::test::catalog_model(c.at("model"));
        const Plan plan = resolve_defaults(plan_from_json(c), m);
        EXPECT_NO_THROW(check_supported(m, plan)) << id;
        const Predicted p = predict(m, gpu, plan, RunOptions{});
        EXPECT_TRUE(p.memory.fits) << id;
        EXPECT_LE(p.memory.peak_bytes, gpu.memory_bytes * 85 / 100) << id << ": keep 15 % headroom for the allocator";
        // predicted_peak_gib documents the prediction when the set was chosen; a planner change that
        // moves it by more than 10 % means the set should be re-checked (and the field refreshed).
        const double gib = static_cast<double>(p.memory.peak_bytes) / (1 << 30);
        EXPECT_NEAR(c.at("predicted_peak_gib").get<double>(), gib, 0.1 * gib) << id;
        models.insert(m.name);
        precisions.insert(std::string(to_string(plan.precision)));
        recomputes.insert(std::string(to_string(plan.recompute)));
        mbs.insert(plan.mbs);
        seqs.insert(plan.seq);
        if (c.value("headline", false)) {
            ++headline;
            EXPECT_EQ(m.name, "llama-3.2-1b");
            EXPECT_EQ(plan.seq, 2048);
            EXPECT_EQ(plan.precision, Precision::bf16_mixed);
            EXPECT_EQ(plan.attention, AttentionKind::flash);
        }
    }
    EXPECT_GE(ids.size(), 12u);
    EXPECT_EQ(models, (std::set<std::string>{"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "llama-3.2-1b"}));
    EXPECT_GE(precisions.size(), 3u);
    EXPECT_EQ(recomputes, (std::set<std::string>{"none", "selective", "full"}));
    EXPECT_GE(mbs.size(), 3u);
    EXPECT_EQ(*seqs.begin(), 512);
    EXPECT_EQ(*seqs.rbegin(), 4096);
    EXPECT_EQ(headline, 1);
}

}  // namespace
}  // namespace preflight::runtime
