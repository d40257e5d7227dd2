// Initialisation and small elementwise helpers: normal init (Box-Muller on a counter
// hash; either output may be null), fills, RoPE tables (CPU reference: ref::rope_tables), fp32
// gradient accumulation.
#include "common.cuh"
#include "kernels.cuh"
#include "preflight/runtime/synthetic.hpp"

namespace preflight::runtime::cuda {

// Element i of the output is element m.local0 + i of a rank's slice, whose row r and column c
// are element m.first + r * m.global_cols + c of the whole tensor (InitMap): a rank's shard or
// tensor-parallel slice of a tensor gets the values the whole tensor would have there.
template <class T>
__global__ void init_normal_kernel(T* w, float* master, i64 n, float std_dev, std::uint64_t seed, InitMap m) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    const i64 l = m.local0 + i;
    const std::uint64_t e = static_cast<std::uint64_t>(m.first + l / m.cols * m.global_cols + l % m.cols);
    const double u1 = synthetic_uniform(seed, 2 * e);
    const double u2 = synthetic_uniform(seed, 2 * e + 1);
    const float z = static_cast<float>(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2)) * std_dev;
    if (master) master[i] = z;
    if (w) w[i] = from_f<T>(z);
}

template <class T>
__global__ void fill_kernel(T* w, float* master, i64 n, float value) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    if (master) master[i] = value;
    if (w) w[i] = from_f<T>(value);
}

template <class T>
void launch_init_normal(T* w, float* master, i64 n, float std_dev, std::uint64_t seed, cudaStream_t stream, InitMap m) {
    if (n == 0) return;
    if (m.cols < 1 || m.global_cols < m.cols)
        throw DeviceError(FailureKind::other, 0, "launch_init_normal", "slice columns out of range");
    init_normal_kernel<T><<<grid_for(n, 256), 256, 0, stream>>>(w, master, n, std_dev, seed, m);
    PF_LAUNCH_CHECK();
}
template <class T>
void launch_fill(T* w, float* master, i64 n, float value, cudaStream_t stream) {
    if (n == 0) return;
    fill_kernel<T><<<grid_for(n, 256), 256, 0, stream>>>(w, master, n, value);
    PF_LAUNCH_CHECK();
}
template void launch_init_normal<float>(float*, float*, i64, float, std::uint64_t, cudaStream_t, InitMap);
template void launch_init_normal<bf16>(bf16*, float*, i64, float, std::uint64_t, cudaStream_t, InitMap);
template void launch_fill<float>(float*, float*, i64, float, cudaStream_t);
template void launch_fill<bf16>(bf16*, float*, i64, float, cudaStream_t);

__global__ void rope_tables_kernel(float* cos_t, float* sin_t, i64 s, i64 d, double base) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= s * d) return;
    const i64 t = i / d, k = (i % d) % (d / 2);
    const double ang = static_cast<double>(t) * pow(base, -2.0 * static_cast<double>(k) / static_cast<double>(d));
    cos_t[i] = static_cast<float>(cos(ang));
    sin_t[i] = static_cast<float>(sin(ang));
}

void launch_rope_tables(float* cos_t, float* sin_t, i64 s, i64 d, double base, cudaStream_t stream) {
    rope_tables_kernel<<<grid_for(s * d, 256), 256, 0, stream>>>(cos_t, sin_t, s, d, base);
    PF_LAUNCH_CHECK();
}

__global__ void grad_accumulate_kernel(float* acc, bf16* g, i64 n) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    acc[i] += __bfloat162float(g[i]);
    g[i] = __float2bfloat16(0.f);
}

void launch_grad_accumulate(float* acc, bf16* g, i64 n, cudaStream_t stream) {
    grad_accumulate_kernel<<<grid_for(n, 256), 256, 0, stream>>>(acc, g, n);
    PF_LAUNCH_CHECK();
}

}  // namespace preflight::runtime::cuda
