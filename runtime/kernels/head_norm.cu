// Per-head RMSNorm of Q and K (Qwen3's q_norm / k_norm: RMSNorm, Zhang & Sennrich 2019, over each
// head's d, before RoPE), forward and backward, on the Q|K heads of a fused [rows, (heads + 2
// kv_heads) d] buffer. CPU reference: ref::head_rmsnorm_fwd / _bwd. One warp per (token, head)
// group; the backward recomputes each group's rstd into a scratch, sums the weight gradients by
// column over slices of the groups and then the slices in order (deterministic, no atomics; the
// planner's runtime_head_norm_slices), then writes the input gradient over the output gradient.
#include "common.cuh"
#include "kernels.cuh"

namespace preflight::runtime::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;

struct HeadGroups {
    i64 groups, heads, nh, C, d;  // nh = heads + kv_heads; C: the fused row's width
    __device__ i64 row(i64 g) const { return g / nh; }
    __device__ i64 head(i64 g) const { return g % nh; }
    __device__ i64 at(i64 g) const { return row(g) * C + head(g) * d; }  // the group's first element in qkv
};

HeadGroups head_groups(i64 rows, i64 heads, i64 kv_heads, i64 d) {
    return {rows * (heads + kv_heads), heads, heads + kv_heads, (heads + 2 * kv_heads) * d, d};
}

__device__ __forceinline__ i64 warp_group() { return blockIdx.x * static_cast<i64>(kWarpsPerBlock) + threadIdx.x / 32; }

// 1 / sqrt(mean(x^2) + eps) over one group's d elements, the warp's lanes each summing every 32nd
// (every lane gets the result).
template <class T>
__device__ __forceinline__ float group_rstd(const T* x, i64 d, float eps) {
    float ss = 0.f;
    for (i64 i = threadIdx.x % 32; i < d; i += 32) {
        const float v = to_f(x[i]);
        ss += v * v;
    }
    return rsqrtf(warp_sum(ss) / static_cast<float>(d) + eps);
}

// y = x rstd w in place, x copied to `saved` (row g of [groups, d]).
template <class T>
__global__ void head_norm_fwd_kernel(T* qkv, T* saved, const T* wq, const T* wk, HeadGroups hg, float eps) {
    const i64 g = warp_group();
    if (g >= hg.groups) return;  // the whole warp: one group per warp
    const int lane = threadIdx.x % 32;
    T* x = qkv + hg.at(g);
    T* kept = saved + g * hg.d;
    const T* w = hg.head(g) < hg.heads ? wq : wk;
    const float rstd = group_rstd(x, hg.d, eps);
    for (i64 i = lane; i < hg.d; i += 32) {
        const T v = x[i];
        kept[i] = v;
        x[i] = from_f<T>(to_f(v) * rstd * to_f(w[i]));
    }
}

template <class T>
__global__ void head_norm_stats_kernel(const T* saved, float* rstd, HeadGroups hg, float eps) {
    const i64 g = warp_group();
    if (g >= hg.groups) return;
    const float r = group_rstd(saved + g * hg.d, hg.d, eps);
    if (threadIdx.x % 32 == 0) rstd[g] = r;
}

// Partial weight gradients: partial[(slice 2 + kind) d + c] = sum over the slice's groups of the kind
// (blockIdx.y 0: the Q heads, 1: the K heads) of dy x rstd at column c; block (32, 8) takes 32
// columns of one slice.
template <class T>
__global__ void head_norm_partials_kernel(const T* saved, const T* dqkv, const float* rstd, float* partial,
                                          HeadGroups hg, i64 slices) {
    const bool q = blockIdx.y == 0;
    const i64 c = blockIdx.x * 32 + threadIdx.x, kind_heads = q ? hg.heads : hg.nh - hg.heads;
    const i64 n = hg.groups / hg.nh * kind_heads, per = (n + slices - 1) / slices;
    const i64 begin = blockIdx.z * per, end = begin + per < n ? begin + per : n;
    float acc = 0.f;
    if (c < hg.d)
        for (i64 j = begin + threadIdx.y; j < end; j += blockDim.y) {
            const i64 g = (j / kind_heads) * hg.nh + (q ? 0 : hg.heads) + j % kind_heads;
            acc += to_f(dqkv[hg.at(g) + c]) * to_f(saved[g * hg.d + c]) * rstd[g];
        }
    __shared__ float part[8][33];
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y != 0 || c >= hg.d) return;
    for (int k = 1; k < static_cast<int>(blockDim.y); ++k) acc += part[k][threadIdx.x];
    partial[(blockIdx.z * 2 + blockIdx.y) * hg.d + c] = acc;
}

// dwq / dwk[c] += the slices' partial sums, in slice order (deterministic).
template <class T>
__global__ void head_norm_weights_kernel(const float* partial, T* dwq, T* dwk, i64 d, i64 slices) {
    const i64 c = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (c >= 2 * d) return;
    const i64 kind = c / d, col = c % d;
    float acc = 0.f;
    for (i64 z = 0; z < slices; ++z) acc += partial[(z * 2 + kind) * d + col];
    T* dw = kind == 0 ? dwq : dwk;
    dw[col] = from_f<T>(to_f(dw[col]) + acc);
}

// dx = rstd (dy w - xhat mean(dy w xhat)), xhat = x rstd, over dy in place (each lane reads its
// elements before it writes them).
template <class T>
__global__ void head_norm_dx_kernel(const T* saved, T* dqkv, const float* rstd, const T* wq, const T* wk,
                                    HeadGroups hg) {
    const i64 g = warp_group();
    if (g >= hg.groups) return;
    const int lane = threadIdx.x % 32;
    const T* x = saved + g * hg.d;
    T* dy = dqkv + hg.at(g);
    const T* w = hg.head(g) < hg.heads ? wq : wk;
    const float r = rstd[g];
    float m2 = 0.f;
    for (i64 i = lane; i < hg.d; i += 32) m2 += to_f(dy[i]) * to_f(w[i]) * to_f(x[i]) * r;
    m2 = warp_sum(m2) / static_cast<float>(hg.d);
    for (i64 i = lane; i < hg.d; i += 32) dy[i] = from_f<T>(r * (to_f(dy[i]) * to_f(w[i]) - to_f(x[i]) * r * m2));
}

}  // namespace

template <class T>
void launch_head_norm_fwd(T* qkv, T* saved, const T* wq, const T* wk, i64 rows, i64 heads, i64 kv_heads, i64 d,
                          float eps, cudaStream_t stream) {
    const HeadGroups hg = head_groups(rows, heads, kv_heads, d);
    if (hg.groups == 0) return;
    head_norm_fwd_kernel<T><<<grid_for(hg.groups, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, stream>>>(qkv, saved, wq, wk,
                                                                                                    hg, eps);
    PF_LAUNCH_CHECK();
}

template <class T>
void launch_head_norm_bwd(const T* saved, T* dqkv, float* scratch, const T* wq, const T* wk, T* dwq, T* dwk, i64 rows,
                          i64 heads, i64 kv_heads, i64 d, i64 slices, float eps, cudaStream_t stream) {
    const HeadGroups hg = head_groups(rows, heads, kv_heads, d);
    if (hg.groups == 0) return;
    float* rstd = scratch;
    float* partial = scratch + hg.groups;  // [slices, 2, d]
    const unsigned blocks = grid_for(hg.groups, kWarpsPerBlock);
    head_norm_stats_kernel<T><<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(saved, rstd, hg, eps);
    PF_LAUNCH_CHECK();
    // The weight gradients read dy before the input gradient overwrites it.
    const dim3 grid(grid_for(d, 32), 2, static_cast<unsigned>(slices));
    head_norm_partials_kernel<T><<<grid, dim3(32, 8), 0, stream>>>(saved, dqkv, rstd, partial, hg, slices);
    PF_LAUNCH_CHECK();
    head_norm_weights_kernel<T><<<grid_for(2 * d, 128), 128, 0, stream>>>(partial, dwq, dwk, d, slices);
    PF_LAUNCH_CHECK();
    head_norm_dx_kernel<T><<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(saved, dqkv, rstd, wq, wk, hg);
    PF_LAUNCH_CHECK();
}

template void launch_head_norm_fwd<float>(float*, float*, const float*, const float*, i64, i64, i64, i64, float,
                                          cudaStream_t);
template void launch_head_norm_fwd<bf16>(bf16*, bf16*, const bf16*, const bf16*, i64, i64, i64, i64, float, cudaStream_t);
template void launch_head_norm_bwd<float>(const float*, float*, float*, const float*, const float*, float*, float*, i64,
                                          i64, i64, i64, i64, float, cudaStream_t);
template void launch_head_norm_bwd<bf16>(const bf16*, bf16*, float*, const bf16*, const bf16*, bf16*, bf16*, i64, i64,
                                         i64, i64, i64, float, cudaStream_t);

}  // namespace preflight::runtime::cuda
