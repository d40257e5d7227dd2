// GPU test helpers: skip without a device, device buffers filled from / read into
// double vectors (converted to the kernel's dtype), outputs poisoned before a kernel.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "check.hpp"
#include "preflight/runtime/runtime.hpp"

namespace preflight::runtime::test {

#define PF_REQUIRE_GPU()                                                                         \
    do {                                                                                         \
        if (::preflight::runtime::device_count() == 0)                                           \
            GTEST_SKIP() << "no CUDA device present: GPU test skipped (run on a machine with a GPU)"; \
    } while (0)

inline double to_d(float x) { return x; }
inline double to_d(cuda::bf16 x) { return static_cast<double>(__bfloat162float(x)); }
template <class T>
T from_d(double x);
template <>
inline float from_d<float>(double x) { return static_cast<float>(x); }
template <>
inline cuda::bf16 from_d<cuda::bf16>(double x) { return __float2bfloat16(static_cast<float>(x)); }

// Values as the device will see them (rounded to T).
template <class T>
std::vector<double> rounded(std::vector<double> v) {
    for (auto& x : v) x = to_d(from_d<T>(x));
    return v;
}

inline std::vector<double> randn(std::size_t n, unsigned seed, double scale = 1.0) {
    std::mt19937 g(seed);
    std::normal_distribution<double> d(0.0, scale);
    std::vector<double> v(n);
    for (auto& x : v) x = d(g);
    return v;
}

template <class T>
class DeviceBuffer {
public:
    explicit DeviceBuffer(std::size_t n) : n_(n) {
        PF_CUDA_CHECK(cudaMalloc(&p_, std::max<std::size_t>(n, 1) * sizeof(T)));
        poison();
    }
    explicit DeviceBuffer(const std::vector<double>& v) : DeviceBuffer(v.size()) { upload(v); }
    ~DeviceBuffer() { cudaFree(p_); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    void poison() { PF_CUDA_CHECK(cudaMemset(p_, 0xFF, n_ * sizeof(T))); }  // NaN in fp32 and bf16
    void upload(const std::vector<double>& v) {
        std::vector<T> h(v.size());
        for (std::size_t i = 0; i < v.size(); ++i) h[i] = from_d<T>(v[i]);
        PF_CUDA_CHECK(cudaMemcpy(p_, h.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    }
    std::vector<double> download() const {
        PF_CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<T> h(n_);
        PF_CUDA_CHECK(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
        std::vector<double> v(n_);
        for (std::size_t i = 0; i < n_; ++i) v[i] = to_d(h[i]);
        return v;
    }
    T* get() { return p_; }
    std::size_t size() const { return n_; }

private:
    T* p_ = nullptr;
    std::size_t n_;
};

// Error bounds (documented per dtype): |gpu - ref| <= atol + rtol * max|ref| over the
// tensor. fp32: accumulation-order differences only (rtol 1e-4). bf16: inputs are
// rounded to bf16 before the reference runs, so the remaining error is the bf16 rounding
// of the output and of intermediates the kernel stores (8 mantissa bits: 2^-8 = 0.4 %
// each): rtol 2e-2.
template <class T>
double rtol() {
    return sizeof(T) == 4 ? 1e-4 : 2e-2;
}

inline void expect_close(const std::vector<double>& got, const std::vector<double>& ref, double rtol_v,
                         const char* what, double atol = 1e-6) {
    ASSERT_EQ(got.size(), ref.size()) << what;
    double scale = 0;
    for (double r : ref) scale = std::max(scale, std::abs(r));
    const double tol = atol + rtol_v * scale;
    std::size_t bad = 0;
    double worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        const double e = std::abs(got[i] - ref[i]);
        if (!(e <= tol)) ++bad;  // NaN (poison left) counts as bad
        if (e > worst || std::isnan(e)) worst = std::isnan(e) ? INFINITY : e;
    }
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements off; worst " << worst
                       << " > tol " << tol;
}

// The one-step plans of the gradient checks: seq 32, two sequences a micro-batch, one GPU.
inline Plan step_plan(Precision pr, Recompute rc, AttentionKind at, std::int64_t grad_acc) {
    Plan p;
    p.seq = 32;
    p.mbs = 2;
    p.grad_acc = grad_acc;
    p.precision = pr;
    p.recompute = rc;
    p.attention = at;
    return p;
}

}  // namespace preflight::runtime::test
