// RoPE, rotate-half layout, in place on Q and K: pairs (k, k + rot/2) of the first rot dimensions of
// each head (rot = d but for a partial rotary model), the rest untouched. Tables [s, d].
// CPU reference: ref::rope_fwd / rope_bwd.
#include "common.cuh"
#include "kernels.cuh"

namespace preflight::runtime::cuda {

template <class T>
__global__ void rope_kernel(T* qkv, const float* cos_t, const float* sin_t, i64 rows, i64 s, i64 nh, i64 C, i64 d,
                            i64 rot, float sign) {
    const i64 half = rot / 2;
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= rows * nh * half) return;
    const i64 r = i / (nh * half), hh = (i / half) % nh, k = i % half;
    const i64 t = r % s;
    T* v = qkv + r * C + hh * d;
    const float c = cos_t[t * d + k], sn = sign * sin_t[t * d + k];
    const float x0 = to_f(v[k]), x1 = to_f(v[k + half]);
    v[k] = from_f<T>(x0 * c - x1 * sn);
    v[k + half] = from_f<T>(x1 * c + x0 * sn);
}

// 16-byte variant: each thread rotates one pack of N pairs (k..k+N-1, k+half..k+half+N-1).
template <class T>
__global__ void rope_vec_kernel(T* qkv, const float* cos_t, const float* sin_t, i64 rows, i64 s, i64 nh, i64 C, i64 d,
                                i64 rot, float sign) {
    constexpr int N = Pack16<T>::N;
    const i64 half = rot / 2, packs = half / N;
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= rows * nh * packs) return;
    const i64 r = i / (nh * packs), hh = (i / packs) % nh, k = (i % packs) * N;
    const i64 t = r % s;
    T* v = qkv + r * C + hh * d;
    const Pack16<T> a = load16(v + k), b = load16(v + k + half);
    Pack16<T> ya, yb;
#pragma unroll
    for (int j = 0; j < N; ++j) {
        const float c = cos_t[t * d + k + j], sn = sign * sin_t[t * d + k + j];
        const float x0 = to_f(a.v[j]), x1 = to_f(b.v[j]);
        ya.v[j] = from_f<T>(x0 * c - x1 * sn);
        yb.v[j] = from_f<T>(x1 * c + x0 * sn);
    }
    store16(v + k, ya);
    store16(v + k + half, yb);
}

template <class T>
void launch_rope(T* qkv, const float* cos_t, const float* sin_t, i64 b, i64 s, i64 heads, i64 kv_heads, i64 d,
                 i64 rot, bool inverse, cudaStream_t stream) {
    const i64 nh = heads + kv_heads, n = b * s * nh * (rot / 2), C = (heads + 2 * kv_heads) * d;
    constexpr int N = Pack16<T>::N;
    // 16-byte packs need the half and the head's start aligned (d a multiple of the pack too).
    if ((rot / 2) % N == 0 && d % N == 0 && aligned16(qkv))
        rope_vec_kernel<T><<<grid_for(n / N, 256), 256, 0, stream>>>(qkv, cos_t, sin_t, b * s, s, nh, C, d, rot,
                                                                     inverse ? -1.f : 1.f);
    else
        rope_kernel<T><<<grid_for(n, 256), 256, 0, stream>>>(qkv, cos_t, sin_t, b * s, s, nh, C, d, rot,
                                                             inverse ? -1.f : 1.f);
    PF_LAUNCH_CHECK();
}

template void launch_rope<float>(float*, const float*, const float*, i64, i64, i64, i64, i64, i64, bool, cudaStream_t);
template void launch_rope<bf16>(bf16*, const float*, const float*, i64, i64, i64, i64, i64, i64, bool, cudaStream_t);

}  // namespace preflight::runtime::cuda
