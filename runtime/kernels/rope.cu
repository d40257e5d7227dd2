// RoPE, rotate-half layout, in place on Q and K. CPU reference: ref::rope_fwd / rope_bwd.
#include "common.cuh"
#include "kernels.cuh"

namespace preflight::runtime::cuda {

template <class T>
__global__ void rope_kernel(T* qkv, const float* cos_t, const float* sin_t, i64 rows, i64 s, i64 nh, i64 C, i64 d,
                            float sign) {
    const i64 half = d / 2;
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

template <class T>
void launch_rope(T* qkv, const float* cos_t, const float* sin_t, i64 b, i64 s, i64 heads, i64 kv_heads, i64 d,
                 bool inverse, cudaStream_t stream) {
    const i64 nh = heads + kv_heads, n = b * s * nh * (d / 2);
    rope_kernel<T><<<grid_for(n, 256), 256, 0, stream>>>(qkv, cos_t, sin_t, b * s, s, nh, (heads + 2 * kv_heads) * d,
                                                         d, inverse ? -1.f : 1.f);
    PF_LAUNCH_CHECK();
}

template void launch_rope<float>(float*, const float*, const float*, i64, i64, i64, i64, i64, bool, cudaStream_t);
template void launch_rope<bf16>(bf16*, const float*, const float*, i64, i64, i64, i64, i64, bool, cudaStream_t);

}  // namespace preflight::runtime::cuda
