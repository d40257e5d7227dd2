// RMSNorm of Q and K over the groups of QkNormGroups (Zhang & Sennrich 2019; before RoPE): Qwen3's
// q_norm / k_norm over each head's d, OLMo's over each token's whole q and k projections; forward and
// backward, on the Q|K columns of a fused [rows, (heads + 2 kv_heads) d] buffer. CPU reference:
// ref::head_rmsnorm_fwd / _bwd. One warp per (token, group); the backward recomputes each group's rstd
// into a scratch, sums the weight gradients by column over slices of the groups and then the slices in
// order (deterministic, no atomics; the planner's runtime_head_norm_slices), then writes the input
// gradient over the output gradient.
#include "common.cuh"
#include "kernels.cuh"

namespace preflight::runtime::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;

// The (token, group) pairs: group g is group j(g) of row row(g); Q's q_groups of q_width columns
// come first, then K's. `kept_w`: a row's width in the kept copy (the Q|K columns).
struct HeadGroups {
    i64 groups, nq, nk, dq, dk, C;  // C: the fused row's width
    __device__ i64 per_row() const { return nq + nk; }
    __device__ i64 row(i64 g) const { return g / per_row(); }
    __device__ i64 j(i64 g) const { return g % per_row(); }
    __device__ bool q(i64 g) const { return j(g) < nq; }
    __device__ i64 width(i64 g) const { return q(g) ? dq : dk; }
    __device__ i64 offset(i64 g) const { return q(g) ? j(g) * dq : nq * dq + (j(g) - nq) * dk; }
    __device__ i64 kept_w() const { return nq * dq + nk * dk; }
    __device__ i64 at(i64 g) const { return row(g) * C + offset(g); }         // the group's first element in qkv
    __device__ i64 kept(i64 g) const { return row(g) * kept_w() + offset(g); }  // and in the kept copy
};

HeadGroups head_groups(i64 rows, const QkNormGroups& g, i64 C) {
    return {rows * g.per_row(), g.q_groups, g.k_groups, g.q_width, g.k_width, C};
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
    T* kept = saved + hg.kept(g);
    const T* w = hg.q(g) ? wq : wk;
    const i64 n = hg.width(g);
    const float rstd = group_rstd(x, n, eps);
    for (i64 i = lane; i < n; i += 32) {
        const T v = x[i];
        kept[i] = v;
        x[i] = from_f<T>(to_f(v) * rstd * to_f(w[i]));
    }
}

template <class T>
__global__ void head_norm_stats_kernel(const T* saved, float* rstd, HeadGroups hg, float eps) {
    const i64 g = warp_group();
    if (g >= hg.groups) return;
    const float r = group_rstd(saved + hg.kept(g), hg.width(g), eps);
    if (threadIdx.x % 32 == 0) rstd[g] = r;
}

// Partial weight gradients: partial[slice (dq + dk) + (kind 0: c, 1: dq + c)] = sum over the slice's
// groups of the kind (blockIdx.y 0: Q's, 1: K's) of dy x rstd at column c; block (32, 8) takes 32
// columns of one slice.
template <class T>
__global__ void head_norm_partials_kernel(const T* saved, const T* dqkv, const float* rstd, float* partial,
                                          HeadGroups hg, i64 slices) {
    const bool q = blockIdx.y == 0;
    const i64 c = blockIdx.x * 32 + threadIdx.x, kind_groups = q ? hg.nq : hg.nk, width = q ? hg.dq : hg.dk;
    const i64 n = hg.groups / hg.per_row() * kind_groups, per = (n + slices - 1) / slices;
    const i64 begin = blockIdx.z * per, end = begin + per < n ? begin + per : n;
    float acc = 0.f;
    if (c < width)
        for (i64 j = begin + threadIdx.y; j < end; j += blockDim.y) {
            const i64 g = (j / kind_groups) * hg.per_row() + (q ? 0 : hg.nq) + j % kind_groups;
            acc += to_f(dqkv[hg.at(g) + c]) * to_f(saved[hg.kept(g) + c]) * rstd[g];
        }
    __shared__ float part[8][33];
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y != 0 || c >= width) return;
    for (int k = 1; k < static_cast<int>(blockDim.y); ++k) acc += part[k][threadIdx.x];
    partial[blockIdx.z * (hg.dq + hg.dk) + (q ? 0 : hg.dq) + c] = acc;
}

// dwq[c] / dwk[c] += the slices' partial sums, in slice order (deterministic); c over dq + dk columns.
template <class T>
__global__ void head_norm_weights_kernel(const float* partial, T* dwq, T* dwk, i64 dq, i64 dk, i64 slices) {
    const i64 c = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (c >= dq + dk) return;
    float acc = 0.f;
    for (i64 z = 0; z < slices; ++z) acc += partial[z * (dq + dk) + c];
    T* dw = c < dq ? dwq + c : dwk + (c - dq);
    *dw = from_f<T>(to_f(*dw) + acc);
}

// dx = rstd (dy w - xhat mean(dy w xhat)), xhat = x rstd, over dy in place (each lane reads its
// elements before it writes them).
template <class T>
__global__ void head_norm_dx_kernel(const T* saved, T* dqkv, const float* rstd, const T* wq, const T* wk,
                                    HeadGroups hg) {
    const i64 g = warp_group();
    if (g >= hg.groups) return;
    const int lane = threadIdx.x % 32;
    const T* x = saved + hg.kept(g);
    T* dy = dqkv + hg.at(g);
    const T* w = hg.q(g) ? wq : wk;
    const i64 n = hg.width(g);
    const float r = rstd[g];
    float m2 = 0.f;
    for (i64 i = lane; i < n; i += 32) m2 += to_f(dy[i]) * to_f(w[i]) * to_f(x[i]) * r;
    m2 = warp_sum(m2) / static_cast<float>(n);
    for (i64 i = lane; i < n; i += 32) dy[i] = from_f<T>(r * (to_f(dy[i]) * to_f(w[i]) - to_f(x[i]) * r * m2));
}

}  // namespace

template <class T>
void launch_head_norm_fwd(T* qkv, T* saved, const T* wq, const T* wk, i64 rows, i64 ld, const QkNormGroups& groups,
                          float eps, cudaStream_t stream) {
    const HeadGroups hg = head_groups(rows, groups, ld);
    if (hg.groups == 0) return;
    head_norm_fwd_kernel<T><<<grid_for(hg.groups, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, stream>>>(qkv, saved, wq, wk,
                                                                                                    hg, eps);
    PF_LAUNCH_CHECK();
}

template <class T>
void launch_head_norm_bwd(const T* saved, T* dqkv, float* scratch, const T* wq, const T* wk, T* dwq, T* dwk, i64 rows,
                          i64 ld, const QkNormGroups& groups, float eps, cudaStream_t stream) {
    const HeadGroups hg = head_groups(rows, groups, ld);
    if (hg.groups == 0) return;
    const i64 slices = runtime_head_norm_slices(rows, groups);
    float* rstd = scratch;
    float* partial = scratch + hg.groups;  // [slices, dq + dk]
    const unsigned blocks = grid_for(hg.groups, kWarpsPerBlock);
    head_norm_stats_kernel<T><<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(saved, rstd, hg, eps);
    PF_LAUNCH_CHECK();
    // The weight gradients read dy before the input gradient overwrites it.
    const dim3 grid(grid_for(std::max(hg.dq, hg.dk), 32), 2, static_cast<unsigned>(slices));
    head_norm_partials_kernel<T><<<grid, dim3(32, 8), 0, stream>>>(saved, dqkv, rstd, partial, hg, slices);
    PF_LAUNCH_CHECK();
    head_norm_weights_kernel<T><<<grid_for(hg.dq + hg.dk, 128), 128, 0, stream>>>(partial, dwq, dwk, hg.dq, hg.dk,
                                                                                 slices);
    PF_LAUNCH_CHECK();
    head_norm_dx_kernel<T><<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(saved, dqkv, rstd, wq, wk, hg);
    PF_LAUNCH_CHECK();
}

template void launch_head_norm_fwd<float>(float*, float*, const float*, const float*, i64, i64, const QkNormGroups&,
                                          float, cudaStream_t);
template void launch_head_norm_fwd<bf16>(bf16*, bf16*, const bf16*, const bf16*, i64, i64, const QkNormGroups&, float,
                                         cudaStream_t);
template void launch_head_norm_bwd<float>(const float*, float*, float*, const float*, const float*, float*, float*, i64,
                                          i64, const QkNormGroups&, float, cudaStream_t);
template void launch_head_norm_bwd<bf16>(const bf16*, bf16*, float*, const bf16*, const bf16*, bf16*, bf16*, i64, i64,
                                         const QkNormGroups&, float, cudaStream_t);

}  // namespace preflight::runtime::cuda
