// Shared device helpers for the runtime kernels (device code: .cu files only): dtype conversion,
// block reductions. Kernels are templated on the storage type T (float or bf16)
// and accumulate in fp32.
#pragma once

#include "check.hpp"

namespace preflight::runtime::cuda {

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(bf16 x) { return __bfloat162float(x); }
template <class T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) { return x; }
template <>
__device__ __forceinline__ bf16 from_f<bf16>(float x) { return __float2bfloat16(x); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float part[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    v = lane < warps ? part[lane] : 0.f;
    return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v) {
    __shared__ float part[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    v = lane < warps ? part[lane] : -INFINITY;
    return warp_max(v);
}

// 16 bytes of T (4 fp32 or 8 bf16) moved with one vector load / store.
template <class T>
struct alignas(16) Pack16 {
    static constexpr int N = 16 / static_cast<int>(sizeof(T));
    T v[N];
};
template <class T>
__device__ __forceinline__ Pack16<T> load16(const T* p) {
    Pack16<T> r;
    *reinterpret_cast<int4*>(&r) = *reinterpret_cast<const int4*>(p);
    return r;
}
template <class T>
__device__ __forceinline__ void store16(T* p, const Pack16<T>& r) {
    *reinterpret_cast<int4*>(p) = *reinterpret_cast<const int4*>(&r);
}
// True when every pointer is 16-byte aligned (the vector kernels' precondition).
__host__ __device__ __forceinline__ bool aligned16(const void* a, const void* b = nullptr, const void* c = nullptr) {
    return ((reinterpret_cast<unsigned long long>(a) | reinterpret_cast<unsigned long long>(b) |
             reinterpret_cast<unsigned long long>(c)) & 15ull) == 0;
}

}  // namespace preflight::runtime::cuda
