// `preflight run --op-times`: the per-op times summed by label and by GEMM shape, and their JSON
// (op_times.hpp). The numbers are hand-made: five ops, their sums worked out below.
#include <gtest/gtest.h>

#include "preflight/runtime/op_times.hpp"

namespace preflight::runtime {
namespace {

TEST(OpTimes, AGemmIsTwoFlopsPerMultiplyAddTimesTheBatch) {
    EXPECT_DOUBLE_EQ(gemm_flops({3, 5, 7, 1}), 210.0);  // 2 x 3 x 5 x 7
    EXPECT_DOUBLE_EQ(gemm_flops({3, 5, 7, 2}), 420.0);
}

std::vector<OpTiming> five_ops() {
    return {{"linear_fwd", 1, 1024.0, {4, 8, 16, 1}, 1e-3},  // 2 x 4 x 8 x 16 = 1024
            {"norm_fwd", 0, 0.0, {}, 0.25e-3},
            {"linear_fwd", 1, 1024.0, {4, 8, 16, 1}, 3e-3},
            {"eager_scores", 2, 64.0, {2, 2, 2, 2}, 2e-3},  // two GEMMs: not a shape row
            {"linear_fwd", 1, 16.0, {2, 2, 2, 1}, 0.5e-3}};
}

TEST(OpTimes, SumsByLabelLongestFirst) {
    const OpTimes t = aggregate_op_times(five_ops());
    EXPECT_EQ(t.ops, 5);
    EXPECT_NEAR(t.total_s, 6.75e-3, 1e-15);  // 1 + 0.25 + 3 + 2 + 0.5 ms
    ASSERT_EQ(t.by_label.size(), 3u);
    EXPECT_EQ(t.by_label[0].label, "linear_fwd");
    EXPECT_EQ(t.by_label[0].count, 3);
    EXPECT_NEAR(t.by_label[0].time_s, 4.5e-3, 1e-15);
    EXPECT_DOUBLE_EQ(t.by_label[0].gemm_flops, 2064.0);  // 1024 + 1024 + 16
    EXPECT_EQ(t.by_label[1].label, "eager_scores");
    EXPECT_EQ(t.by_label[2].label, "norm_fwd");
    EXPECT_DOUBLE_EQ(t.by_label[2].gemm_flops, 0.0);
}

TEST(OpTimes, SumsSingleGemmOpsByShape) {
    const OpTimes t = aggregate_op_times(five_ops());
    ASSERT_EQ(t.gemms.size(), 2u);  // eager_scores ran two GEMMs: left out
    EXPECT_EQ(t.gemms[0].label, "linear_fwd");
    EXPECT_EQ(t.gemms[0].shape, (GemmShape{4, 8, 16, 1}));
    EXPECT_EQ(t.gemms[0].count, 2);
    EXPECT_NEAR(t.gemms[0].time_s, 4e-3, 1e-15);
    EXPECT_DOUBLE_EQ(t.gemms[0].flops, 2048.0);
    EXPECT_EQ(t.gemms[1].shape, (GemmShape{2, 2, 2, 1}));
    EXPECT_EQ(t.gemms[1].count, 1);
}

TEST(OpTimes, JsonCarriesSharesAndRates) {
    const nlohmann::json j = op_times_to_json(aggregate_op_times(five_ops()));
    EXPECT_EQ(j.at("ops"), 5);
    EXPECT_NEAR(j.at("by_kind").at(0).at("share").get<double>(), 4.5 / 6.75, 1e-12);
    EXPECT_EQ(j.at("gemms").at(0).at("m"), 4);
    EXPECT_EQ(j.at("gemms").at(0).at("k"), 16);
    EXPECT_NEAR(j.at("gemms").at(0).at("flops_per_s").get<double>(), 2048.0 / 4e-3, 1e-6);
    EXPECT_TRUE(j.at("how").is_string());
}

TEST(OpTimes, NoOpsGiveEmptyTablesAndNoShare) {
    const OpTimes t = aggregate_op_times({});
    EXPECT_EQ(t.ops, 0);
    EXPECT_TRUE(t.by_label.empty());
    EXPECT_TRUE(op_times_to_json(t).at("by_kind").empty());
}

}  // namespace
}  // namespace preflight::runtime
