// Number formatting shared by the CLI, the explorer and the reports (format.hpp).
#include <gtest/gtest.h>

#include <cstdint>

#include "preflight/planner/format.hpp"

namespace preflight {
namespace {

TEST(Format, BytesCountsAndDigits) {
    EXPECT_EQ(format_bytes(0), "0 B");
    EXPECT_EQ(format_bytes(std::int64_t{512} << 20), "512.0 MiB");
    EXPECT_EQ(group_digits(8030261248), "8,030,261,248");
    // Group boundaries, signs and the extremes of int64 (INT64_MIN's magnitude has no int64 negation).
    EXPECT_EQ(group_digits(0), "0");
    EXPECT_EQ(group_digits(999), "999");
    EXPECT_EQ(group_digits(1000), "1,000");
    EXPECT_EQ(group_digits(-123456), "-123,456");
    EXPECT_EQ(group_digits(-1234567), "-1,234,567");
    EXPECT_EQ(group_digits(INT64_MAX), "9,223,372,036,854,775,807");
    EXPECT_EQ(group_digits(INT64_MIN), "-9,223,372,036,854,775,808");
    EXPECT_EQ(format_count(8030261248), "8.03 B");
}

// The host-pace model's odds as the CLI and the explorer both print them: whole percent, with
// the ends said as "under 1 %" and "over 99 %" rather than 0 % or 100 %, which no model gives.
TEST(Format, WaitOddsInWholePercentWithoutZeroOrCertainty) {
    EXPECT_EQ(format_wait_odds(0.4145), "a wait 41 % likely");
    EXPECT_EQ(format_wait_odds(0.004), "a wait under 1 % likely");
    EXPECT_EQ(format_wait_odds(0.996), "a wait over 99 % likely");
    EXPECT_EQ(format_wait_odds(0.5), "a wait 50 % likely");
}

}  // namespace
}  // namespace preflight
