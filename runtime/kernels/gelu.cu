// GeLU, tanh approximation (GPT-2). CPU reference: ref::gelu_fwd / gelu_bwd.
#include "common.cuh"
#include "kernels.cuh"

namespace preflight::runtime::cuda {

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/pi)

template <class T>
__global__ void gelu_fwd_kernel(const T* x, T* y, i64 n) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    const float v = to_f(x[i]);
    y[i] = from_f<T>(0.5f * v * (1.f + tanhf(kGeluC * (v + 0.044715f * v * v * v))));
}

template <class T>
__global__ void gelu_bwd_kernel(const T* x, const T* dy, T* dx, i64 n) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    const float v = to_f(x[i]);
    const float th = tanhf(kGeluC * (v + 0.044715f * v * v * v));
    const float du = kGeluC * (1.f + 3.f * 0.044715f * v * v);
    dx[i] = from_f<T>(to_f(dy[i]) * (0.5f * (1.f + th) + 0.5f * v * (1.f - th * th) * du));
}

// 16-byte variants: each thread moves one Pack16 (4 fp32 / 8 bf16) per tensor.
template <class T>
__global__ void gelu_fwd_vec_kernel(const T* x, T* y, i64 packs) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= packs) return;
    constexpr int N = Pack16<T>::N;
    const Pack16<T> xv = load16(x + i * N);
    Pack16<T> yv;
#pragma unroll
    for (int k = 0; k < N; ++k) {
        const float v = to_f(xv.v[k]);
        yv.v[k] = from_f<T>(0.5f * v * (1.f + tanhf(kGeluC * (v + 0.044715f * v * v * v))));
    }
    store16(y + i * N, yv);
}

template <class T>
__global__ void gelu_bwd_vec_kernel(const T* x, const T* dy, T* dx, i64 packs) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= packs) return;
    constexpr int N = Pack16<T>::N;
    const Pack16<T> xv = load16(x + i * N), gv = load16(dy + i * N);
    Pack16<T> o;
#pragma unroll
    for (int k = 0; k < N; ++k) {
        const float v = to_f(xv.v[k]);
        const float th = tanhf(kGeluC * (v + 0.044715f * v * v * v));
        const float du = kGeluC * (1.f + 3.f * 0.044715f * v * v);
        o.v[k] = from_f<T>(to_f(gv.v[k]) * (0.5f * (1.f + th) + 0.5f * v * (1.f - th * th) * du));
    }
    store16(dx + i * N, o);
}

template <class T>
void launch_gelu_fwd(const T* x, T* y, i64 n, cudaStream_t stream) {
    constexpr int N = Pack16<T>::N;
    if (n % N == 0 && aligned16(x, y))
        gelu_fwd_vec_kernel<T><<<grid_for(n / N, 256), 256, 0, stream>>>(x, y, n / N);
    else
        gelu_fwd_kernel<T><<<grid_for(n, 256), 256, 0, stream>>>(x, y, n);
    PF_LAUNCH_CHECK();
}
template <class T>
void launch_gelu_bwd(const T* x, const T* dy, T* dx, i64 n, cudaStream_t stream) {
    constexpr int N = Pack16<T>::N;
    if (n % N == 0 && aligned16(x, dy, dx))
        gelu_bwd_vec_kernel<T><<<grid_for(n / N, 256), 256, 0, stream>>>(x, dy, dx, n / N);
    else
        gelu_bwd_kernel<T><<<grid_for(n, 256), 256, 0, stream>>>(x, dy, dx, n);
    PF_LAUNCH_CHECK();
}

template void launch_gelu_fwd<float>(const float*, float*, i64, cudaStream_t);
template void launch_gelu_fwd<bf16>(const bf16*, bf16*, i64, cudaStream_t);
template void launch_gelu_bwd<float>(const float*, const float*, float*, i64, cudaStream_t);
template void launch_gelu_bwd<bf16>(const bf16*, const bf16*, bf16*, i64, cudaStream_t);

}  // namespace preflight::runtime::cuda
