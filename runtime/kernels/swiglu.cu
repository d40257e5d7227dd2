// SwiGLU: act = silu(gate) * up over gu = [gate | up]. CPU reference: ref::swiglu_fwd / swiglu_bwd.
#include "common.cuh"
#include "kernels.cuh"

namespace preflight::runtime::cuda {

template <class T>
__global__ void swiglu_fwd_kernel(const T* gu, T* act, i64 rows, i64 f) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= rows * f) return;
    const i64 r = i / f, c = i % f;
    const float g = to_f(gu[r * 2 * f + c]), u = to_f(gu[r * 2 * f + f + c]);
    act[i] = from_f<T>(g / (1.f + __expf(-g)) * u);
}

// In place: dgu[:, :f] holds dact on entry; each thread reads its dact, g, u and writes dg, du.
template <class T>
__global__ void swiglu_bwd_kernel(const T* gu, T* dgu, i64 rows, i64 f) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= rows * f) return;
    const i64 r = i / f, c = i % f;
    const float g = to_f(gu[r * 2 * f + c]), u = to_f(gu[r * 2 * f + f + c]);
    const float da = to_f(dgu[r * 2 * f + c]);
    const float sig = 1.f / (1.f + __expf(-g));
    dgu[r * 2 * f + c] = from_f<T>(da * u * sig * (1.f + g * (1.f - sig)));
    dgu[r * 2 * f + f + c] = from_f<T>(da * g * sig);
}

template <class T>
void launch_swiglu_fwd(const T* gu, T* act, i64 rows, i64 f, cudaStream_t stream) {
    swiglu_fwd_kernel<T><<<grid_for(rows * f, 256), 256, 0, stream>>>(gu, act, rows, f);
    PF_LAUNCH_CHECK();
}
template <class T>
void launch_swiglu_bwd(const T* gu, T* dgu, i64 rows, i64 f, cudaStream_t stream) {
    swiglu_bwd_kernel<T><<<grid_for(rows * f, 256), 256, 0, stream>>>(gu, dgu, rows, f);
    PF_LAUNCH_CHECK();
}

template void launch_swiglu_fwd<float>(const float*, float*, i64, i64, cudaStream_t);
template void launch_swiglu_fwd<bf16>(const bf16*, bf16*, i64, i64, cudaStream_t);
template void launch_swiglu_bwd<float>(const float*, float*, i64, i64, cudaStream_t);
template void launch_swiglu_bwd<bf16>(const bf16*, bf16*, i64, i64, cudaStream_t);

}  // namespace preflight::runtime::cuda
