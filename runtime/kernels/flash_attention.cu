// Causal flash attention (Dao et al. 2022; FlashAttention-2 loop order, Dao 2023), optionally
// through a sliding window (a query at position p sees keys p - window + 1 .. p; Beltagy et al.
// 2020, sec. 3.1; Mistral's and Phi-3's):
// tiles of 32 queries x 32 keys, online softmax, only the per-row log-sum-exp kept.
// Backward recomputes probabilities from the LSE in two kernels (dQ; dK and dV),
// so nothing is accumulated with atomics. GQA: query head h reads KV head h / g.
// CPU reference: ref::attention_fwd / ref::attention_bwd.
// Context parallelism (runtime/src/program_cp.cpp): the rank's queries sit at positions
// cp_position(t) of their sequence and read K and V from a separate [b, cp s, 2 kv d] buffer of the
// whole sequence, whose gradients go to a buffer of the same shape; CPU reference:
// ref::attention_fwd_cp / ref::attention_bwd_cp. Without it the positions are the rows and K, V
// are read from (and their gradients written to) the q|k|v rows themselves.
//
// Layout inside a warp: 8 rows (queries, or keys in the dK/dV kernel) of 4 lanes;
// lane c of a row owns elements c, c+4, c+8, ... of the head dimension (d <= 128,
// d % 4 == 0), so dot products need two shuffles and shared-memory reads are
// conflict-free broadcasts.
#include "common.cuh"
#include "kernels.cuh"
#include "preflight/runtime/context_parallel.hpp"

namespace preflight::runtime::cuda {
namespace {

constexpr int kTile = 32;         // queries per block / keys per tile
constexpr int kWarps = 4;         // 4 warps x 8 rows = 32 rows
constexpr int kMaxPerLane = 32;   // d / 4 for d = 128

// s queries of each sequence in rows C wide; S keys in rows KC wide, K at column koff, V after it.
struct Geo {
    i64 s, heads, kv, d, C, qw;
    float scale;
    i64 S, KC, koff, cp, cp_rank;
    i64 window;  // 0: every key up to the query's position
    __device__ i64 q(i64 b, i64 t, i64 h) const { return (b * s + t) * C + h * d; }
    __device__ i64 k(i64 b, i64 u, i64 kh) const { return (b * S + u) * KC + koff + kh * d; }
    __device__ i64 v(i64 b, i64 u, i64 kh) const { return (b * S + u) * KC + koff + (kv + kh) * d; }
    __device__ i64 o(i64 b, i64 t, i64 h) const { return (b * s + t) * qw + h * d; }
    __device__ i64 pos(i64 t) const { return cp_position(t, s, cp, cp_rank); }
    // The last key any query of the tile starting at q0 reads (positions rise with t).
    __device__ i64 last_key(i64 q0) const { return pos(q0 + 32 - 1 < s - 1 ? q0 + 32 - 1 : s - 1); }
    // The first key the query at position p sees, and whether it sees key u.
    __device__ i64 first_key(i64 p) const { return window > 0 && p >= window ? p - window + 1 : 0; }
    __device__ bool sees(i64 p, i64 u) const { return u <= p && u >= first_key(p); }
    // The first key tile any query of the tile starting at q0 reads.
    __device__ i64 first_tile(i64 q0) const { return first_key(pos(q0)) / 32 * 32; }
};

__device__ __forceinline__ float group4_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    return v;
}

// Loads keys [k0, k0 + 32) of KV head kh into Ks, Vs (zeros past S).
template <class T>
__device__ void load_kv_tile(const T* kvp, const Geo& g, i64 b, i64 kh, i64 k0, float (*Ks)[128], float (*Vs)[128]) {
    for (int idx = threadIdx.x; idx < kTile * g.d; idx += blockDim.x) {
        const int j = idx / static_cast<int>(g.d), i = idx % static_cast<int>(g.d);
        const i64 u = k0 + j;
        Ks[j][i] = u < g.S ? to_f(kvp[g.k(b, u, kh) + i]) : 0.f;
        Vs[j][i] = u < g.S ? to_f(kvp[g.v(b, u, kh) + i]) : 0.f;
    }
}

template <class T>
__global__ void __launch_bounds__(128) flash_fwd_kernel(const T* qkv, const T* kvp, T* out, float* lse, Geo g) {
    __shared__ float Ks[kTile][128], Vs[kTile][128];
    const i64 bh = blockIdx.y, b = bh / g.heads, h = bh % g.heads, kh = h / (g.heads / g.kv);
    const i64 q0 = static_cast<i64>(blockIdx.x) * kTile;
    const int lane = threadIdx.x % 32, c = lane % 4;
    const i64 t_raw = q0 + (threadIdx.x / 32) * 8 + lane / 4;
    const i64 t = t_raw < g.s ? t_raw : g.s - 1;  // rows past s compute a copy, write nothing
    const i64 pt = g.pos(t);
    const int per = static_cast<int>(g.d / 4);
    float q[kMaxPerLane], acc[kMaxPerLane];
#pragma unroll
    for (int e = 0; e < kMaxPerLane; ++e) {
        q[e] = e < per ? to_f(qkv[g.q(b, t, h) + c + 4 * e]) : 0.f;
        acc[e] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    const i64 last = g.last_key(q0), first = g.first_key(pt);
    for (i64 k0 = g.first_tile(q0); k0 <= last; k0 += kTile) {
        __syncthreads();
        load_kv_tile(kvp, g, b, kh, k0, Ks, Vs);
        __syncthreads();
        if (!__any_sync(0xffffffffu, pt >= k0 && first < k0 + kTile)) continue;
        float sc[kTile];
        float mt = -INFINITY;
#pragma unroll
        for (int j = 0; j < kTile; ++j) {
            float part = 0.f;
#pragma unroll
            for (int e = 0; e < kMaxPerLane; ++e)
                if (e < per) part += q[e] * Ks[j][c + 4 * e];
            const float full = group4_sum(part) * g.scale;
            sc[j] = g.sees(pt, k0 + j) ? full : -INFINITY;
            mt = fmaxf(mt, sc[j]);
        }
        const float mn = fmaxf(m, mt);
        // A row whose window has not begun in this tile (all its scores masked) changes nothing.
        const float base = mn == -INFINITY ? 0.f : mn;
        const float corr = __expf(m - base);
        l *= corr;
#pragma unroll
        for (int e = 0; e < kMaxPerLane; ++e) acc[e] *= corr;
#pragma unroll
        for (int j = 0; j < kTile; ++j) {
            const float p = __expf(sc[j] - base);
            l += p;
#pragma unroll
            for (int e = 0; e < kMaxPerLane; ++e)
                if (e < per) acc[e] += p * Vs[j][c + 4 * e];
        }
        m = mn;
    }
    if (t_raw < g.s) {
        const float inv = 1.f / l;
#pragma unroll
        for (int e = 0; e < kMaxPerLane; ++e)
            if (e < per) out[g.o(b, t, h) + c + 4 * e] = from_f<T>(acc[e] * inv);
        if (c == 0) lse[bh * g.s + t] = m + __logf(l);
    }
}

// D[b, h, t] = sum_i dO * O (one warp per row).
template <class T>
__global__ void flash_dsum_kernel(const T* out, const T* dout, float* dsum, Geo g, i64 rows) {
    const i64 row = blockIdx.x * static_cast<i64>(blockDim.x / 32) + threadIdx.x / 32;  // (b, h, t)
    if (row >= rows) return;
    const i64 t = row % g.s, bh = row / g.s, b = bh / g.heads, h = bh % g.heads;
    float acc = 0.f;
    for (i64 i = threadIdx.x % 32; i < g.d; i += 32) acc += to_f(out[g.o(b, t, h) + i]) * to_f(dout[g.o(b, t, h) + i]);
    acc = warp_sum(acc);
    if (threadIdx.x % 32 == 0) dsum[row] = acc;
}

// dQ = scale * sum_u dS_tu K_u, dS = P (dP - D), P recomputed from the LSE.
template <class T>
__global__ void __launch_bounds__(128) flash_dq_kernel(const T* qkv, const T* kvp, const float* lse, const T* dout,
                                                       const float* dsum, T* dqkv, Geo g) {
    __shared__ float Ks[kTile][128], Vs[kTile][128];
    const i64 bh = blockIdx.y, b = bh / g.heads, h = bh % g.heads, kh = h / (g.heads / g.kv);
    const i64 q0 = static_cast<i64>(blockIdx.x) * kTile;
    const int lane = threadIdx.x % 32, c = lane % 4;
    const i64 t_raw = q0 + (threadIdx.x / 32) * 8 + lane / 4;
    const i64 t = t_raw < g.s ? t_raw : g.s - 1;
    const i64 pt = g.pos(t);
    const int per = static_cast<int>(g.d / 4);
    float q[kMaxPerLane], dO[kMaxPerLane], dq[kMaxPerLane];
#pragma unroll
    for (int e = 0; e < kMaxPerLane; ++e) {
        q[e] = e < per ? to_f(qkv[g.q(b, t, h) + c + 4 * e]) : 0.f;
        dO[e] = e < per ? to_f(dout[g.o(b, t, h) + c + 4 * e]) : 0.f;
        dq[e] = 0.f;
    }
    const float L = lse[bh * g.s + t], D = dsum[bh * g.s + t];
    const i64 last = g.last_key(q0), first = g.first_key(pt);
    for (i64 k0 = g.first_tile(q0); k0 <= last; k0 += kTile) {
        __syncthreads();
        load_kv_tile(kvp, g, b, kh, k0, Ks, Vs);
        __syncthreads();
        if (!__any_sync(0xffffffffu, pt >= k0 && first < k0 + kTile)) continue;
#pragma unroll 4
        for (int j = 0; j < kTile; ++j) {
            float ps = 0.f, pd = 0.f;
#pragma unroll
            for (int e = 0; e < kMaxPerLane; ++e)
                if (e < per) {
                    ps += q[e] * Ks[j][c + 4 * e];
                    pd += dO[e] * Vs[j][c + 4 * e];
                }
            const float sc = group4_sum(ps) * g.scale, dp = group4_sum(pd);
            const float p = g.sees(pt, k0 + j) ? __expf(sc - L) : 0.f;
            const float ds = p * (dp - D);
#pragma unroll
            for (int e = 0; e < kMaxPerLane; ++e)
                if (e < per) dq[e] += ds * Ks[j][c + 4 * e];
        }
    }
    if (t_raw < g.s)
#pragma unroll
        for (int e = 0; e < kMaxPerLane; ++e)
            if (e < per) dqkv[g.q(b, t, h) + c + 4 * e] = from_f<T>(dq[e] * g.scale);
}

// dK_u = scale * sum_{h in group, t sees u} dS_tu Q_t; dV_u = sum P_tu dO_t. One block per
// 32 keys of one KV head; each warp owns 8 keys (4 lanes each), queries stream through smem.
// K, V are read from kvp and their gradients written to dkvp (both the q|k|v rows without cp).
template <class T>
__global__ void __launch_bounds__(128) flash_dkv_kernel(const T* qkv, const T* kvp, const float* lse, const T* dout,
                                                        const float* dsum, T* dkvp, Geo g) {
    __shared__ float Qs[kTile][128], dOs[kTile][128], Ls[kTile], Ds[kTile];
    const i64 bk = blockIdx.y, b = bk / g.kv, kh = bk % g.kv, group = g.heads / g.kv;
    const i64 k0 = static_cast<i64>(blockIdx.x) * kTile;
    const int lane = threadIdx.x % 32, c = lane % 4;
    const i64 u_raw = k0 + (threadIdx.x / 32) * 8 + lane / 4;
    const i64 u = u_raw < g.S ? u_raw : g.S - 1;
    const int per = static_cast<int>(g.d / 4);
    float k[kMaxPerLane], v[kMaxPerLane], dk[kMaxPerLane], dv[kMaxPerLane];
#pragma unroll
    for (int e = 0; e < kMaxPerLane; ++e) {
        k[e] = e < per ? to_f(kvp[g.k(b, u, kh) + c + 4 * e]) : 0.f;
        v[e] = e < per ? to_f(kvp[g.v(b, u, kh) + c + 4 * e]) : 0.f;
        dk[e] = dv[e] = 0.f;
    }
    for (i64 j = 0; j < group; ++j) {
        const i64 h = kh * group + j, bh = b * g.heads + h;
        // Without cp no query before k0 reads these keys; with it a tile is skipped (by the whole
        // block at once) when its last position is before them, and with a window when its first
        // query's window begins after them.
        for (i64 q0 = g.cp > 1 ? 0 : k0; q0 < g.s; q0 += kTile) {
            if (g.last_key(q0) < k0 || g.first_key(g.pos(q0)) >= k0 + kTile) continue;
            __syncthreads();
            for (int idx = threadIdx.x; idx < kTile * g.d; idx += blockDim.x) {
                const int r = idx / static_cast<int>(g.d), i = idx % static_cast<int>(g.d);
                const i64 t = q0 + r;
                Qs[r][i] = t < g.s ? to_f(qkv[g.q(b, t, h) + i]) : 0.f;
                dOs[r][i] = t < g.s ? to_f(dout[g.o(b, t, h) + i]) : 0.f;
            }
            if (threadIdx.x < kTile) {
                const i64 t = q0 + threadIdx.x;
                Ls[threadIdx.x] = t < g.s ? lse[bh * g.s + t] : 0.f;
                Ds[threadIdx.x] = t < g.s ? dsum[bh * g.s + t] : 0.f;
            }
            __syncthreads();
#pragma unroll 4
            for (int r = 0; r < kTile; ++r) {
                const i64 t = q0 + r;
                float ps = 0.f, pd = 0.f;
#pragma unroll
                for (int e = 0; e < kMaxPerLane; ++e)
                    if (e < per) {
                        ps += Qs[r][c + 4 * e] * k[e];
                        pd += dOs[r][c + 4 * e] * v[e];
                    }
                const float sc = group4_sum(ps) * g.scale, dp = group4_sum(pd);
                const float p = (t < g.s && g.sees(g.pos(t), u_raw) && u_raw < g.S) ? __expf(sc - Ls[r]) : 0.f;
                const float ds = p * (dp - Ds[r]);
#pragma unroll
                for (int e = 0; e < kMaxPerLane; ++e)
                    if (e < per) {
                        dv[e] += p * dOs[r][c + 4 * e];
                        dk[e] += ds * Qs[r][c + 4 * e];
                    }
            }
        }
    }
    if (u_raw < g.S)
#pragma unroll
        for (int e = 0; e < kMaxPerLane; ++e)
            if (e < per) {
                dkvp[g.k(b, u, kh) + c + 4 * e] = from_f<T>(dk[e] * g.scale);
                dkvp[g.v(b, u, kh) + c + 4 * e] = from_f<T>(dv[e]);
            }
}

// Without cp: K and V in the q|k|v rows (S = s). With it: kv [b, cp s, 2 kv d].
Geo geometry(i64 s, i64 heads, i64 kv, i64 d, i64 window, i64 cp = 1, i64 cp_rank = 0) {
    const i64 C = (heads + 2 * kv) * d;
    Geo g{s, heads, kv, d, C, heads * d, static_cast<float>(1.0 / sqrt(static_cast<double>(d))), s, C, heads * d, 1, 0,
          window};
    if (cp > 1) {
        g.S = cp * s;
        g.KC = 2 * kv * d;
        g.koff = 0;
        g.cp = cp;
        g.cp_rank = cp_rank;
    }
    return g;
}

void check_head_dim(i64 d) {
    if (d > 128 || d % 4 != 0) throw std::runtime_error("flash attention: head_dim must be a multiple of 4, at most 128");
}

template <class T>
void flash_fwd(const T* qkv, const T* kvp, T* out, float* lse, i64 b, const Geo& g, cudaStream_t stream) {
    check_head_dim(g.d);
    const dim3 grid(static_cast<unsigned>((g.s + kTile - 1) / kTile), static_cast<unsigned>(b * g.heads));
    flash_fwd_kernel<T><<<grid, 32 * kWarps, 0, stream>>>(qkv, kvp, out, lse, g);
    PF_LAUNCH_CHECK();
}

template <class T>
void flash_bwd(const T* qkv, const T* kvp, const T* out, const float* lse, const T* dout, T* dqkv, T* dkvp, float* dsum,
               i64 b, const Geo& g, cudaStream_t stream) {
    check_head_dim(g.d);
    const i64 rows = b * g.heads * g.s;
    flash_dsum_kernel<T><<<grid_for(rows, 8), 256, 0, stream>>>(out, dout, dsum, g, rows);
    PF_LAUNCH_CHECK();
    const unsigned q_tiles = static_cast<unsigned>((g.s + kTile - 1) / kTile);
    const unsigned k_tiles = static_cast<unsigned>((g.S + kTile - 1) / kTile);
    flash_dq_kernel<T><<<dim3(q_tiles, static_cast<unsigned>(b * g.heads)), 32 * kWarps, 0, stream>>>(
        qkv, kvp, lse, dout, dsum, dqkv, g);
    PF_LAUNCH_CHECK();
    flash_dkv_kernel<T><<<dim3(k_tiles, static_cast<unsigned>(b * g.kv)), 32 * kWarps, 0, stream>>>(
        qkv, kvp, lse, dout, dsum, dkvp, g);
    PF_LAUNCH_CHECK();
}

}  // namespace

template <class T>
void launch_flash_fwd(const T* qkv, T* out, float* lse, i64 b, i64 s, i64 heads, i64 kv_heads, i64 d, i64 window,
                      cudaStream_t stream) {
    flash_fwd(qkv, qkv, out, lse, b, geometry(s, heads, kv_heads, d, window), stream);
}

template <class T>
void launch_flash_bwd(const T* qkv, const T* out, const float* lse, const T* dout, T* dqkv, float* dsum, i64 b, i64 s,
                      i64 heads, i64 kv_heads, i64 d, i64 window, cudaStream_t stream) {
    flash_bwd(qkv, qkv, out, lse, dout, dqkv, dqkv, dsum, b, geometry(s, heads, kv_heads, d, window), stream);
}

template <class T>
void launch_flash_fwd_cp(const T* qkv, const T* kv, T* out, float* lse, i64 b, i64 s, i64 heads, i64 kv_heads, i64 d,
                         i64 cp, i64 cp_rank, i64 window, cudaStream_t stream) {
    flash_fwd(qkv, kv, out, lse, b, geometry(s, heads, kv_heads, d, window, cp, cp_rank), stream);
}

template <class T>
void launch_flash_bwd_cp(const T* qkv, const T* kv, const T* out, const float* lse, const T* dout, T* dqkv, T* dkv,
                         float* dsum, i64 b, i64 s, i64 heads, i64 kv_heads, i64 d, i64 cp, i64 cp_rank,
                         i64 window, cudaStream_t stream) {
    flash_bwd(qkv, kv, out, lse, dout, dqkv, dkv, dsum, b, geometry(s, heads, kv_heads, d, window, cp, cp_rank),
              stream);
}

template void launch_flash_fwd<float>(const float*, float*, float*, i64, i64, i64, i64, i64, i64, cudaStream_t);
template void launch_flash_fwd<bf16>(const bf16*, bf16*, float*, i64, i64, i64, i64, i64, i64, cudaStream_t);
template void launch_flash_bwd<float>(const float*, const float*, const float*, const float*, float*, float*, i64, i64,
                                      i64, i64, i64, i64, cudaStream_t);
template void launch_flash_bwd<bf16>(const bf16*, const bf16*, const float*, const bf16*, bf16*, float*, i64, i64, i64,
                                     i64, i64, i64, cudaStream_t);
template void launch_flash_fwd_cp<float>(const float*, const float*, float*, float*, i64, i64, i64, i64, i64, i64, i64,
                                         i64, cudaStream_t);
template void launch_flash_fwd_cp<bf16>(const bf16*, const bf16*, bf16*, float*, i64, i64, i64, i64, i64, i64, i64, i64,
                                        cudaStream_t);
template void launch_flash_bwd_cp<float>(const float*, const float*, const float*, const float*, const float*, float*,
                                         float*, float*, i64, i64, i64, i64, i64, i64, i64, i64, cudaStream_t);
template void launch_flash_bwd_cp<bf16>(const bf16*, const bf16*, const bf16*, const float*, const bf16*, bf16*, bf16*,
                                        float*, i64, i64, i64, i64, i64, i64, i64, i64, cudaStream_t);

}  // namespace preflight::runtime::cuda
