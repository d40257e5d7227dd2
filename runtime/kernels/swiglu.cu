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

// 16-byte variants (f a multiple of the pack width, 16-byte aligned rows): each thread
// handles one pack of gate, up and the output columns.
template <class T>
__global__ void swiglu_fwd_vec_kernel(const T* gu, T* act, i64 rows, i64 f) {
    constexpr int N = Pack16<T>::N;
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x, fp = f / N;
    if (i >= rows * fp) return;
    const i64 r = i / fp, c = (i % fp) * N;
    const Pack16<T> g = load16(gu + r * 2 * f + c), u = load16(gu + r * 2 * f + f + c);
    Pack16<T> o;
#pragma unroll
    for (int k = 0; k < N; ++k) {
        const float gv = to_f(g.v[k]);
        o.v[k] = from_f<T>(gv / (1.f + __expf(-gv)) * to_f(u.v[k]));
    }
    store16(act + r * f + c, o);
}

template <class T>
__global__ void swiglu_bwd_vec_kernel(const T* gu, T* dgu, i64 rows, i64 f) {
    constexpr int N = Pack16<T>::N;
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x, fp = f / N;
    if (i >= rows * fp) return;
    const i64 r = i / fp, c = (i % fp) * N;
    const Pack16<T> g = load16(gu + r * 2 * f + c), u = load16(gu + r * 2 * f + f + c), da = load16(dgu + r * 2 * f + c);
    Pack16<T> dg, du;
#pragma unroll
    for (int k = 0; k < N; ++k) {
        const float gv = to_f(g.v[k]), uv = to_f(u.v[k]), d = to_f(da.v[k]);
        const float sig = 1.f / (1.f + __expf(-gv));
        dg.v[k] = from_f<T>(d * uv * sig * (1.f + gv * (1.f - sig)));
        du.v[k] = from_f<T>(d * gv * sig);
    }
    store16(dgu + r * 2 * f + c, dg);
    store16(dgu + r * 2 * f + f + c, du);
}

template <class T>
void launch_swiglu_fwd(const T* gu, T* act, i64 rows, i64 f, cudaStream_t stream) {
    constexpr int N = Pack16<T>::N;
    if (f % N == 0 && aligned16(gu, act))
        swiglu_fwd_vec_kernel<T><<<grid_for(rows * f / N, 256), 256, 0, stream>>>(gu, act, rows, f);
    else
        swiglu_fwd_kernel<T><<<grid_for(rows * f, 256), 256, 0, stream>>>(gu, act, rows, f);
    PF_LAUNCH_CHECK();
}
template <class T>
void launch_swiglu_bwd(const T* gu, T* dgu, i64 rows, i64 f, cudaStream_t stream) {
    constexpr int N = Pack16<T>::N;
    if (f % N == 0 && aligned16(gu, dgu))
        swiglu_bwd_vec_kernel<T><<<grid_for(rows * f / N, 256), 256, 0, stream>>>(gu, dgu, rows, f);
    else
        swiglu_bwd_kernel<T><<<grid_for(rows * f, 256), 256, 0, stream>>>(gu, dgu, rows, f);
    PF_LAUNCH_CHECK();
}

template void launch_swiglu_fwd<float>(const float*, float*, i64, i64, cudaStream_t);
template void launch_swiglu_fwd<bf16>(const bf16*, bf16*, i64, i64, cudaStream_t);
template void launch_swiglu_bwd<float>(const float*, float*, i64, i64, cudaStream_t);
template void launch_swiglu_bwd<bf16>(const bf16*, bf16*, i64, i64, cudaStream_t);

}  // namespace preflight::runtime::cuda
