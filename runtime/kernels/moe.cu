// Mixture of experts: Mixtral's sparse MLP (Jiang et al. 2024, "Mixtral of Experts", sec. 2.1;
// HF transformers MixtralSparseMoeBlock), dropless token-choice top-k routing. The routing
// kernels, the dispatch of tokens to their experts' slots, the gate-weighted combine and their
// backward; the experts' grouped GEMMs run through cuBLASLt (cuda/device_runner_moe.cpp). CPU
// reference: ref::moe_* (reference_moe.hpp, which also lays out the i64 routing table: slot of
// each pair, pair of each slot, the E + 1 expert offsets, expert of each pair). Activations are
// T (float or bf16), gate weights fp32; every sum is accumulated in fp32 in the reference's order.
#include <stdexcept>
#include <string>

#include "common.cuh"
#include "kernels.cuh"

namespace preflight::runtime::cuda {

// The routing table's sections (reference_moe.hpp): [0, P) slot of pair p, [P, 2P) pair of slot s,
// [2P, 2P + E + 1) expert offsets, [2P + E + 1, 3P + E + 1) expert of pair p.
__host__ __device__ __forceinline__ i64 moe_offsets_at(i64 pairs) { return 2 * pairs; }
__host__ __device__ __forceinline__ i64 moe_expert_of_at(i64 pairs, i64 experts) { return 2 * pairs + experts + 1; }

// The row of pair p in the rank's expert buffers, or -1 (another rank's expert, or dropped past the
// capacity): ref::local_row.
__device__ __forceinline__ i64 moe_local_row(const i64* routing, i64 pairs, const MoeSlots& s, i64 p) {
    const i64 e = routing[moe_expert_of_at(pairs, s.experts) + p];
    if (e < s.first || e >= s.first + s.count) return -1;
    if (s.capacity == 0) return routing[p];
    const i64 j = routing[p] - routing[moe_offsets_at(pairs) + e];
    return j < s.capacity ? (e - s.first) * s.capacity + j : -1;
}

// Top-k routing of each token (one thread per token row): the k largest logits, the lower expert
// index first on a tie (ref::moe_route's order), and the gates = softmax over the chosen k
// (Mixtral sec. 2.1: softmax(TopK(x W_g)); equal to HF's softmax over all E renormalised over the
// top k), or, not `renormalize`, the softmax over all E at the chosen (OlmoeSparseMoeBlock with
// norm_topk_prob false). The j-th choice is the largest key (logit, then lower index) below the (j-1)-th's, so
// no per-row scratch is needed for any E. A NaN logit is never chosen; a row of NaNs only
// (reference undefined) picks expert 0 and gets NaN gates rather than an out-of-range expert.
template <class T>
__global__ void moe_topk_kernel(const T* logits, i64 rows, i64 experts, i64 k, bool renormalize, float* gates,
                                i64* expert_of) {
    const i64 t = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (t >= rows) return;
    const T* l = logits + t * experts;
    float* g = gates + t * k;
    float prev_v = INFINITY, top = 0.f, sum = 0.f;
    i64 prev_e = -1;
    for (i64 j = 0; j < k; ++j) {
        float best_v = NAN;
        i64 best_e = -1;
        for (i64 e = 0; e < experts; ++e) {
            const float v = to_f(l[e]);
            const bool after_prev = v < prev_v || (v == prev_v && e > prev_e);
            if (after_prev && (best_e < 0 || v > best_v)) {  // strict >: the lower index keeps a tie
                best_v = v;
                best_e = e;
            }
        }
        if (best_e < 0) best_e = 0;  // only NaNs left (best_v stays NaN)
        if (j == 0) top = best_v;
        const float ex = expf(best_v - top);
        g[j] = ex;
        sum += ex;
        expert_of[t * k + j] = best_e;
        prev_v = best_v;
        prev_e = best_e;
    }
    if (!renormalize) {  // the softmax's denominator over all E (`top` is the largest logit)
        sum = 0.f;
        for (i64 e = 0; e < experts; ++e) sum += expf(to_f(l[e]) - top);
    }
    const float inv = 1.f / sum;
    for (i64 j = 0; j < k; ++j) g[j] *= inv;
}

// The stable counting sort of the pairs by expert (ref::moe_route's second half), one block so
// that it is deterministic: the per-expert counts (integer shared atomics: order-free), the
// exclusive scan into the offsets, then the pairs in chunks of blockDim in increasing order.
// Inside a chunk, a pair's rank among the earlier pairs of its expert is its rank inside its warp
// (__match_any_sync) plus the same expert's pairs in the chunk's earlier warps; `next[e]` carries
// the slots expert e has handed out in earlier chunks. Slot of pair p = off[e] + (pairs of e
// before p): expert e's slots hold its pairs in increasing pair order, as the reference's.
// Shared memory: next[E] i64, then counts[warps][E] int. O(P / blockDim + E) steps per thread.
__global__ void moe_sort_kernel(i64* routing, i64 pairs, i64 experts) {
    extern __shared__ unsigned long long moe_smem[];
    i64* next = reinterpret_cast<i64*>(moe_smem);
    int* warp_count = reinterpret_cast<int*>(moe_smem + experts);
    const i64* expert_of = routing + moe_expert_of_at(pairs, experts);
    i64* off = routing + moe_offsets_at(pairs);
    const int warps = static_cast<int>(blockDim.x / 32), warp = static_cast<int>(threadIdx.x / 32),
              lane = static_cast<int>(threadIdx.x % 32);
    for (i64 e = threadIdx.x; e < experts; e += blockDim.x) next[e] = 0;
    __syncthreads();
    for (i64 p = threadIdx.x; p < pairs; p += blockDim.x) atomicAdd(&moe_smem[expert_of[p]], 1ull);
    __syncthreads();
    if (threadIdx.x == 0) {
        i64 acc = 0;
        for (i64 e = 0; e < experts; ++e) {
            const i64 c = next[e];
            off[e] = acc;
            next[e] = acc;
            acc += c;
        }
        off[experts] = acc;
    }
    __syncthreads();
    for (i64 chunk = 0; chunk < pairs; chunk += blockDim.x) {  // uniform trip count (barriers inside)
        const i64 p = chunk + threadIdx.x;
        const bool valid = p < pairs;
        const int e = valid ? static_cast<int>(expert_of[p]) : -1;
        const unsigned same = __match_any_sync(0xffffffffu, e);
        const int rank = __popc(same & ((1u << lane) - 1u));  // earlier lanes of this warp with expert e
        for (int i = static_cast<int>(threadIdx.x); i < warps * experts; i += static_cast<int>(blockDim.x))
            warp_count[i] = 0;
        __syncthreads();
        if (valid && rank == 0) warp_count[warp * experts + e] = __popc(same);
        __syncthreads();
        if (valid) {
            i64 s = next[e] + rank;
            for (int w = 0; w < warp; ++w) s += warp_count[w * experts + e];
            routing[p] = s;
            routing[pairs + s] = p;
        }
        __syncthreads();
        for (i64 x = threadIdx.x; x < experts; x += blockDim.x) {
            i64 c = 0;
            for (int w = 0; w < warps; ++w) c += warp_count[w * experts + x];
            next[x] += c;
        }
        __syncthreads();
    }
}

// Dispatch (ref::moe_dispatch): slot s of xd [P, h] receives its pair's token row, x[pair(s) / k].
template <class T>
__global__ void moe_dispatch_kernel(const T* x, const i64* routing, i64 pairs, i64 k, i64 h, T* xd) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= pairs * h) return;
    const i64 s = i / h, c = i % h;
    xd[i] = x[routing[pairs + s] / k * h + c];
}
// 16-byte variant (h a multiple of the pack width, 16-byte aligned rows): one pack per thread.
template <class T>
__global__ void moe_dispatch_vec_kernel(const T* x, const i64* routing, i64 pairs, i64 k, i64 h, T* xd) {
    constexpr int N = Pack16<T>::N;
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x, hp = h / N;
    if (i >= pairs * hp) return;
    const i64 s = i / hp, c = (i % hp) * N;
    store16(xd + s * h + c, load16(x + routing[pairs + s] / k * h + c));
}

// Dispatch in the capacity layout (expert parallelism): row i C + j of local expert i takes its
// j-th pair's token while j is below the expert's pair count, zero after.
template <class T>
__global__ void moe_dispatch_capacity_kernel(const T* x, const i64* routing, i64 pairs, i64 k, i64 h, MoeSlots s, T* xd) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= s.count * s.capacity * h) return;
    const i64 row = i / h, c = i % h, e = s.first + row / s.capacity, j = row % s.capacity;
    const i64 begin = routing[moe_offsets_at(pairs) + e], n = routing[moe_offsets_at(pairs) + e + 1] - begin;
    xd[i] = j < n ? x[routing[pairs + begin + j] / k * h + c] : from_f<T>(0.f);
}

// Combine (ref::moe_combine; Mixtral sec. 2.1, y = sum_j G(x)_j E_j(x)): out[t] = res[t] (res may
// be null) + sum_j gates[t, j] y[slot(t k + j)], one thread per output element, fp32 in j order.
template <class T>
__global__ void moe_combine_kernel(const T* y, const float* gates, const i64* routing, const T* res, i64 rows, i64 k,
                                   i64 h, MoeSlots s, T* out) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= rows * h) return;
    const i64 t = i / h, c = i % h;
    float acc = res ? to_f(res[i]) : 0.f;
    for (i64 j = 0; j < k; ++j) {
        const i64 row = moe_local_row(routing, rows * k, s, t * k + j);
        if (row >= 0) acc += gates[t * k + j] * to_f(y[row * h + c]);
    }
    out[i] = from_f<T>(acc);
}

// The combine's backward (ref::moe_combine_bwd), one warp per pair p = t k + j at slot s:
// dy[s] = gates[p] dout[t] (the expert output's gradient) and dgates[p] = <dout[t], y[s]> (the
// gate weight's, fp32; the warp's lanes stride over h, then a warp sum: deterministic).
template <class T>
__global__ void moe_combine_bwd_kernel(const T* dout, const T* y, const float* gates, const i64* routing, i64 pairs,
                                       i64 k, i64 h, MoeSlots s, T* dy, float* dgates) {
    const i64 p = (blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x) / 32;  // the same for the whole warp
    const int lane = static_cast<int>(threadIdx.x % 32);
    if (p >= pairs) return;
    const i64 t = p / k, row = moe_local_row(routing, pairs, s, p);
    if (row < 0) {  // another rank's expert, or dropped: no gradient from this rank
        if (lane == 0) dgates[p] = 0.f;
        return;
    }
    const float g = gates[p];
    float dot = 0.f;
    for (i64 c = lane; c < h; c += 32) {
        const float d = to_f(dout[t * h + c]);
        dy[row * h + c] = from_f<T>(g * d);
        dot += d * to_f(y[row * h + c]);
    }
    dot = warp_sum(dot);
    if (lane == 0) dgates[p] = dot;
}

// The routing's backward (ref::moe_route_bwd; the top-k selection passes no gradient). Renormalised
// gates (no `logits`), the softmax over the chosen logits: dlogits[t, e_j] = g_j (dg_j - sum_m g_m
// dg_m) for each chosen expert e_j, 0 for the others. Gates p at the chosen, p the softmax over all E
// of the kept `logits`: dlogits[t, e] = p_e ([e chosen] dg_e - sum_m g_m dg_m), p_e recomputed from
// the row's logits. One thread per element of dlogits [rows, E].
template <class T>
__global__ void moe_route_bwd_kernel(const float* dgates, const float* gates, const i64* expert_of, const T* logits,
                                     i64 rows, i64 experts, i64 k, T* dlogits) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= rows * experts) return;
    const i64 t = i / experts, e = i % experts;
    float dot = 0.f;
    for (i64 j = 0; j < k; ++j) dot += gates[t * k + j] * dgates[t * k + j];
    float v = 0.f;
    if (logits) {
        const T* l = logits + t * experts;
        float top = -INFINITY, z = 0.f;
        for (i64 m = 0; m < experts; ++m) top = fmaxf(top, to_f(l[m]));
        for (i64 m = 0; m < experts; ++m) z += expf(to_f(l[m]) - top);
        const float p = expf(to_f(l[e]) - top) / z;
        v = -p * dot;
        for (i64 j = 0; j < k; ++j)
            if (expert_of[t * k + j] == e) v += p * dgates[t * k + j];
    } else {
        for (i64 j = 0; j < k; ++j)
            if (expert_of[t * k + j] == e) v = gates[t * k + j] * (dgates[t * k + j] - dot);
    }
    dlogits[i] = from_f<T>(v);
}

// The dispatch's backward (ref::moe_dispatch_bwd): dx[t] (= or += when accumulate) sum_j
// dxd[slot(t k + j)], one thread per element, fp32 in j order after the old value.
template <class T>
__global__ void moe_dispatch_bwd_kernel(const T* dxd, const i64* routing, i64 rows, i64 k, i64 h, MoeSlots s, T* dx,
                                        bool accumulate) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= rows * h) return;
    const i64 t = i / h, c = i % h;
    float acc = accumulate ? to_f(dx[i]) : 0.f;
    for (i64 j = 0; j < k; ++j) {
        const i64 row = moe_local_row(routing, rows * k, s, t * k + j);
        if (row >= 0) acc += to_f(dxd[row * h + c]);
    }
    dx[i] = from_f<T>(acc);
}

template <class T>
void launch_moe_route(const T* logits, float* gates, i64* routing, i64 rows, i64 experts, i64 k, bool renormalize,
                      cudaStream_t stream) {
    if (experts < 1 || experts > kMoeMaxExperts || k < 1 || k > experts || rows < 0)
        throw std::invalid_argument("launch_moe_route: needs 1 <= k <= experts <= " + std::to_string(kMoeMaxExperts) +
                                    " (experts " + std::to_string(experts) + ", k " + std::to_string(k) + ")");
    const i64 pairs = rows * k;
    if (rows > 0) {
        moe_topk_kernel<T><<<grid_for(rows, 128), 128, 0, stream>>>(logits, rows, experts, k, renormalize, gates,
                                                                    routing + moe_expert_of_at(pairs, experts));
        PF_LAUNCH_CHECK();
    }
    constexpr int threads = 1024;  // also with no pairs: the offsets are written (all 0)
    const std::size_t smem = static_cast<std::size_t>(experts) * (sizeof(i64) + sizeof(int) * (threads / 32));
    moe_sort_kernel<<<1, threads, smem, stream>>>(routing, pairs, experts);
    PF_LAUNCH_CHECK();
}

template <class T>
void launch_moe_dispatch(const T* x, const i64* routing, i64 rows, i64 k, i64 h, MoeSlots s, T* xd, cudaStream_t stream) {
    constexpr int N = Pack16<T>::N;
    const i64 pairs = rows * k;
    if (s.capacity > 0) {  // expert parallelism: the rank's experts' C rows each
        if (s.count * s.capacity * h == 0) return;
        moe_dispatch_capacity_kernel<T><<<grid_for(s.count * s.capacity * h, 256), 256, 0, stream>>>(x, routing, pairs, k,
                                                                                                  h, s, xd);
        PF_LAUNCH_CHECK();
        return;
    }
    if (pairs * h == 0) return;
    if (h % N == 0 && aligned16(x, xd))
        moe_dispatch_vec_kernel<T><<<grid_for(pairs * h / N, 256), 256, 0, stream>>>(x, routing, pairs, k, h, xd);
    else
        moe_dispatch_kernel<T><<<grid_for(pairs * h, 256), 256, 0, stream>>>(x, routing, pairs, k, h, xd);
    PF_LAUNCH_CHECK();
}

template <class T>
void launch_moe_combine(const T* y, const float* gates, const i64* routing, const T* res, i64 rows, i64 k, i64 h,
                        MoeSlots s, T* out, cudaStream_t stream) {
    if (rows * h == 0) return;
    moe_combine_kernel<T><<<grid_for(rows * h, 256), 256, 0, stream>>>(y, gates, routing, res, rows, k, h, s, out);
    PF_LAUNCH_CHECK();
}

template <class T>
void launch_moe_combine_bwd(const T* dout, const T* y, const float* gates, const i64* routing, i64 rows, i64 k, i64 h,
                            MoeSlots s, T* dy, float* dgates, cudaStream_t stream) {
    const i64 pairs = rows * k;
    if (s.capacity > 0)  // rows no pair fills stay 0 (their GEMMs run on them)
        PF_CUDA_CHECK(cudaMemsetAsync(dy, 0, static_cast<std::size_t>(s.count * s.capacity * h) * sizeof(T), stream));
    if (pairs == 0) return;
    moe_combine_bwd_kernel<T><<<grid_for(pairs * 32, 256), 256, 0, stream>>>(dout, y, gates, routing, pairs, k, h, s, dy,
                                                                             dgates);
    PF_LAUNCH_CHECK();
}

template <class T>
void launch_moe_route_bwd(const float* dgates, const float* gates, const i64* routing, const T* logits, i64 rows,
                          i64 experts, i64 k, T* dlogits, cudaStream_t stream) {
    if (rows * experts == 0) return;
    moe_route_bwd_kernel<T><<<grid_for(rows * experts, 256), 256, 0, stream>>>(
        dgates, gates, routing + moe_expert_of_at(rows * k, experts), logits, rows, experts, k, dlogits);
    PF_LAUNCH_CHECK();
}

template <class T>
void launch_moe_dispatch_bwd(const T* dxd, const i64* routing, i64 rows, i64 k, i64 h, MoeSlots s, T* dx,
                             bool accumulate, cudaStream_t stream) {
    if (rows * h == 0) return;
    moe_dispatch_bwd_kernel<T><<<grid_for(rows * h, 256), 256, 0, stream>>>(dxd, routing, rows, k, h, s, dx, accumulate);
    PF_LAUNCH_CHECK();
}

#define PF_MOE_INSTANTIATE(T)                                                                                        \
    template void launch_moe_route<T>(const T*, float*, i64*, i64, i64, i64, bool, cudaStream_t);                    \
    template void launch_moe_dispatch<T>(const T*, const i64*, i64, i64, i64, MoeSlots, T*, cudaStream_t);           \
    template void launch_moe_combine<T>(const T*, const float*, const i64*, const T*, i64, i64, i64, MoeSlots, T*,   \
                                        cudaStream_t);                                                               \
    template void launch_moe_combine_bwd<T>(const T*, const T*, const float*, const i64*, i64, i64, i64, MoeSlots, T*, \
                                            float*, cudaStream_t);                                                   \
    template void launch_moe_route_bwd<T>(const float*, const float*, const i64*, const T*, i64, i64, i64, T*,       \
                                          cudaStream_t);                                                             \
    template void launch_moe_dispatch_bwd<T>(const T*, const i64*, i64, i64, i64, MoeSlots, T*, bool, cudaStream_t);
PF_MOE_INSTANTIATE(float)
PF_MOE_INSTANTIATE(bf16)
#undef PF_MOE_INSTANTIATE

}  // namespace preflight::runtime::cuda
