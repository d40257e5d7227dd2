// The per-tensor amax of fp8 current scaling (program_fp8.cpp): max |x| over a [rows, cols]
// view (row stride ld), into a device float. Non-negative floats order like their bit patterns,
// so the blocks combine with an integer atomicMax: the result does not depend on their order.
// CPU reference: ref::quantize_fp8's amax (reference_fp8.cpp); tests/runtime/gpu/test_gpu_fp8.cpp.
#include "common.cuh"
#include "kernels.cuh"

namespace preflight::runtime::cuda {

template <class T>
__global__ void amax_kernel(const T* x, i64 rows, i64 cols, i64 ld, float* amax) {
    float m = 0.f;
    const i64 n = rows * cols;
    for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += static_cast<i64>(gridDim.x) * blockDim.x)
        m = fmaxf(m, fabsf(to_f(x[(i / cols) * ld + i % cols])));
    m = block_max(m);
    if (threadIdx.x == 0) atomicMax(reinterpret_cast<int*>(amax), __float_as_int(m));
}

template <class T>
void launch_amax(const T* x, i64 rows, i64 cols, i64 ld, float* amax, cudaStream_t stream) {
    PF_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
    const i64 n = rows * cols;
    if (n == 0) return;
    const unsigned blocks = static_cast<unsigned>(std::min<i64>((n + 255) / 256, 132 * 8));
    amax_kernel<T><<<blocks, 256, 0, stream>>>(x, rows, cols, ld, amax);
    PF_LAUNCH_CHECK();
}

template void launch_amax<bf16>(const bf16*, i64, i64, i64, float*, cudaStream_t);
template void launch_amax<float>(const float*, i64, i64, i64, float*, cudaStream_t);

}  // namespace preflight::runtime::cuda
