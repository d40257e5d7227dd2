// CPU reference of the fp8 quantization (reference.hpp): rounding to E4M3 / E5M2 and per-tensor
// current scaling, as runtime/kernels/amax.cu and fp8_cast.cu compute it.
#include <cmath>

#include "preflight/runtime/reference.hpp"

namespace preflight::runtime::ref {

namespace {

struct Fp8Spec {
    int mantissa_bits;
    int min_normal_exponent;  // 1 - bias
    double max;
};

// Micikevicius et al. 2022, table 1.
Fp8Spec spec(Fp8Format f) {
    return f == Fp8Format::e4m3 ? Fp8Spec{3, -6, 448.0} : Fp8Spec{2, -14, 57344.0};
}

}  // namespace

double fp8_max(Fp8Format f) { return spec(f).max; }

double round_fp8(double x, Fp8Format f) {
    if (std::isnan(x)) return x;
    const Fp8Spec s = spec(f);
    const double a = std::abs(x);
    if (a == 0) return x;
    if (a >= s.max) return std::copysign(s.max, x);  // saturated (and beyond the largest finite)
    int e2 = 0;
    std::frexp(a, &e2);  // a = m 2^e2, m in [0.5, 1): the leading bit is 2^(e2 - 1)
    const int e = std::max(e2 - 1, s.min_normal_exponent);  // subnormals share the smallest exponent
    const double quantum = std::ldexp(1.0, e - s.mantissa_bits);
    const double r = std::nearbyint(a / quantum) * quantum;  // ties to even (the default rounding mode)
    return std::copysign(std::min(r, s.max), x);
}

double fp8_scale(double amax, Fp8Format f) {
    if (!(amax > 0) || !std::isfinite(amax)) return 1.0;
    return static_cast<double>(static_cast<float>(fp8_max(f)) / static_cast<float>(amax));
}

Fp8Tensor quantize_fp8(const double* x, i64 n, Fp8Format f) {
    Fp8Tensor t;
    for (i64 i = 0; i < n; ++i) t.amax = std::max(t.amax, std::abs(x[i]));
    t.scale = fp8_scale(t.amax, f);
    t.scale_inv = static_cast<double>(1.0f / static_cast<float>(t.scale));
    t.q.resize(static_cast<std::size_t>(n));
    for (i64 i = 0; i < n; ++i)
        t.q[static_cast<std::size_t>(i)] = round_fp8(static_cast<double>(static_cast<float>(x[i] * t.scale)), f);
    return t;
}

}  // namespace preflight::runtime::ref
