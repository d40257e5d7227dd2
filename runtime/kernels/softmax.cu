// Causal row softmax for eager attention (scores already scaled by the GEMM), through the sliding
// window when one is set. CPU reference: ref::attention_probs (whole eager forward) and ref::softmax_bwd.
#include "common.cuh"
#include "kernels.cuh"

namespace preflight::runtime::cuda {

namespace {
// The first column row query t sees: t - window + 1 under a sliding window, else 0.
__device__ __forceinline__ i64 first_column(i64 t, i64 window) { return window > 0 && t >= window ? t - window + 1 : 0; }
}  // namespace

// One block per row; row r is query position t = r % s, which sees columns first_column(t) .. t.
template <class T>
__global__ void causal_softmax_fwd_kernel(const T* scores, T* probs, i64 s, i64 window) {
    const i64 r = blockIdx.x, t = r % s, first = first_column(t, window);
    const T* x = scores + r * s;
    float mx = -INFINITY;
    for (i64 c = first + threadIdx.x; c <= t; c += blockDim.x) mx = fmaxf(mx, to_f(x[c]));
    mx = block_max(mx);
    float sum = 0.f;
    for (i64 c = first + threadIdx.x; c <= t; c += blockDim.x) sum += __expf(to_f(x[c]) - mx);
    sum = block_sum(sum);
    const float inv = 1.f / sum;
    for (i64 c = threadIdx.x; c < s; c += blockDim.x)
        probs[r * s + c] = from_f<T>(c >= first && c <= t ? __expf(to_f(x[c]) - mx) * inv : 0.f);
}

template <class T>
__global__ void causal_softmax_bwd_kernel(const T* p, const T* dp, T* ds, i64 s, i64 window) {
    const i64 r = blockIdx.x, t = r % s, first = first_column(t, window);
    float dot = 0.f;
    for (i64 c = first + threadIdx.x; c <= t; c += blockDim.x) dot += to_f(p[r * s + c]) * to_f(dp[r * s + c]);
    dot = block_sum(dot);
    for (i64 c = threadIdx.x; c < s; c += blockDim.x)
        ds[r * s + c] = from_f<T>(c >= first && c <= t ? to_f(p[r * s + c]) * (to_f(dp[r * s + c]) - dot) : 0.f);
}

template <class T>
void launch_causal_softmax_fwd(const T* scores, T* probs, i64 rows, i64 s, i64 window, cudaStream_t stream) {
    causal_softmax_fwd_kernel<T><<<static_cast<unsigned>(rows), 256, 0, stream>>>(scores, probs, s, window);
    PF_LAUNCH_CHECK();
}
template <class T>
void launch_causal_softmax_bwd(const T* probs, const T* dp, T* ds, i64 rows, i64 s, i64 window, cudaStream_t stream) {
    causal_softmax_bwd_kernel<T><<<static_cast<unsigned>(rows), 256, 0, stream>>>(probs, dp, ds, s, window);
    PF_LAUNCH_CHECK();
}

template void launch_causal_softmax_fwd<float>(const float*, float*, i64, i64, i64, cudaStream_t);
template void launch_causal_softmax_fwd<bf16>(const bf16*, bf16*, i64, i64, i64, cudaStream_t);
template void launch_causal_softmax_bwd<float>(const float*, const float*, float*, i64, i64, i64, cudaStream_t);
template void launch_causal_softmax_bwd<bf16>(const bf16*, const bf16*, bf16*, i64, i64, i64, cudaStream_t);

}  // namespace preflight::runtime::cuda
