// The CPU reference of fp8 quantization (reference.hpp), against values derived by hand from
// the formats (Micikevicius et al. 2022, table 1): E4M3 has 3 mantissa bits, exponents down to
// -6 (subnormals to 2^-9) and saturates at 448; E5M2 has 2 mantissa bits, exponents down to -14
// (subnormals to 2^-16) and saturates at 57,344. Ties round to the even mantissa.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "preflight/runtime/reference.hpp"

namespace preflight::runtime::ref {
namespace {

TEST(Fp8Reference, E4M3RoundsToNearestEvenAndSaturates) {
    const Fp8Format f = Fp8Format::e4m3;
    EXPECT_EQ(fp8_max(f), 448.0);
    EXPECT_EQ(round_fp8(1.0, f), 1.0);
    EXPECT_EQ(round_fp8(0.0, f), 0.0);
    EXPECT_EQ(round_fp8(448.0, f), 448.0);
    EXPECT_EQ(round_fp8(500.0, f), 448.0);
    EXPECT_EQ(round_fp8(-1e6, f), -448.0);
    EXPECT_EQ(round_fp8(1.0625, f), 1.0);     // halfway 1.000 | 1.125: even mantissa 000
    EXPECT_EQ(round_fp8(1.1875, f), 1.25);    // halfway 1.125 | 1.250: even mantissa 010
    EXPECT_EQ(round_fp8(1.2, f), 1.25);
    EXPECT_EQ(round_fp8(-3.3, f), -3.25);     // spacing 0.25 in [2, 4)
    EXPECT_EQ(round_fp8(432.0, f), 448.0);    // halfway 416 (1.101) | 448 (1.110): even
    EXPECT_EQ(round_fp8(420.0, f), 416.0);
    EXPECT_EQ(round_fp8(std::ldexp(1.0, -9), f), std::ldexp(1.0, -9));      // smallest subnormal
    EXPECT_EQ(round_fp8(std::ldexp(1.0, -10), f), 0.0);                     // halfway to 0: even
    EXPECT_EQ(round_fp8(3 * std::ldexp(1.0, -10), f), std::ldexp(1.0, -8));  // 1.5 quanta: 2
    EXPECT_EQ(round_fp8(std::ldexp(1.0, -6) * 1.0625, f), std::ldexp(1.0, -6));  // smallest normal, tie
    EXPECT_TRUE(std::isnan(round_fp8(std::numeric_limits<double>::quiet_NaN(), f)));
}

TEST(Fp8Reference, E5M2RoundsToNearestEvenAndSaturates) {
    const Fp8Format f = Fp8Format::e5m2;
    EXPECT_EQ(fp8_max(f), 57344.0);
    EXPECT_EQ(round_fp8(1.125, f), 1.0);   // halfway 1.00 | 1.25: even mantissa 00
    EXPECT_EQ(round_fp8(1.375, f), 1.5);   // halfway 1.25 | 1.50: even mantissa 10
    EXPECT_EQ(round_fp8(60000.0, f), 57344.0);
    EXPECT_EQ(round_fp8(-49152.0, f), -49152.0);  // 1.10 x 2^15
    EXPECT_EQ(round_fp8(std::ldexp(1.0, -16), f), std::ldexp(1.0, -16));  // smallest subnormal
    EXPECT_EQ(round_fp8(std::ldexp(1.0, -17), f), 0.0);
    EXPECT_EQ(round_fp8(0.3, f), 0.3125);  // spacing 2^-4 in [0.25, 0.5)
}

TEST(Fp8Reference, CurrentScalingMapsTheAmaxToTheLargestValue) {
    const double x[] = {0.5, -2.0, 1.0, 0.01};
    const Fp8Tensor t = quantize_fp8(x, 4, Fp8Format::e4m3);
    EXPECT_EQ(t.amax, 2.0);
    EXPECT_EQ(t.scale, 224.0);  // 448 / 2
    EXPECT_FLOAT_EQ(static_cast<float>(t.scale_inv), 1.0f / 224.0f);
    EXPECT_EQ(t.q[0], 112.0);
    EXPECT_EQ(t.q[1], -448.0);
    EXPECT_EQ(t.q[2], 224.0);
    EXPECT_EQ(t.q[3], 2.25);  // 2.24 to the nearest E4M3 (spacing 0.25 in [2, 4))
    const double zeros[] = {0.0, 0.0};
    const Fp8Tensor z = quantize_fp8(zeros, 2, Fp8Format::e5m2);
    EXPECT_EQ(z.scale, 1.0);  // an all-zero tensor keeps scale 1
    EXPECT_EQ(z.q[0], 0.0);
    // The dequantized tensor is within half a spacing of the input: |q * scale_inv - x| <= 2^-4 |x| (E4M3).
    for (int i = 0; i < 4; ++i)
        EXPECT_LE(std::abs(t.q[static_cast<std::size_t>(i)] * t.scale_inv - x[i]), std::ldexp(std::abs(x[i]), -4) + 1e-12);
}

}  // namespace
}  // namespace preflight::runtime::ref
