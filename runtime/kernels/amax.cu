// The per-tensor amax of fp8 current scaling (program_fp8.cpp): max |x| over a [rows, cols]
// view (row stride ld), into a device float. Non-negative floats order like their bit patterns,
// so the blocks combine with an integer atomicMax: the result does not depend on their order.
// One warp per row (rows strided over the grid's warps), its lanes across the columns: 16-byte
// loads (8 bf16) where the row starts and the row stride allow, one element per lane otherwise;
// no 64-bit division per element (the flat-index version spent more time dividing than loading).
// CPU reference: ref::quantize_fp8's amax (reference_fp8.cpp); tests/runtime/gpu/test_gpu_fp8.cpp.
#include "common.cuh"
#include "kernels.cuh"

namespace preflight::runtime::cuda {

template <class T, bool kVector>
__global__ void amax_kernel(const T* x, i64 rows, i64 cols, i64 ld, float* amax) {
    constexpr int kPer = kVector ? Pack16<T>::N : 1;
    const int lane = static_cast<int>(threadIdx.x % 32);
    const i64 warps = static_cast<i64>(gridDim.x) * (blockDim.x / 32);
    float m = 0.f;
    for (i64 r = static_cast<i64>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
        const T* row = x + r * ld;
        for (i64 c = static_cast<i64>(lane) * kPer; c < cols; c += 32 * kPer) {
            if constexpr (kVector) {
                const Pack16<T> v = load16(row + c);
#pragma unroll
                for (int k = 0; k < kPer; ++k) m = fmaxf(m, fabsf(to_f(v.v[k])));
            } else {
                m = fmaxf(m, fabsf(to_f(row[c])));
            }
        }
    }
    m = block_max(m);
    if (threadIdx.x == 0) atomicMax(reinterpret_cast<int*>(amax), __float_as_int(m));
}

template <class T>
void launch_amax(const T* x, i64 rows, i64 cols, i64 ld, float* amax, cudaStream_t stream) {
    PF_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
    if (rows == 0 || cols == 0) return;
    constexpr int kThreads = 256, kRowsPerBlock = kThreads / 32;
    const unsigned blocks = static_cast<unsigned>(std::min<i64>((rows + kRowsPerBlock - 1) / kRowsPerBlock, 132 * 8));
    // Whole 16-byte packs on every row: the columns and the row stride a multiple of a pack.
    const i64 n = Pack16<T>::N;
    if (aligned16(x) && cols % n == 0 && ld % n == 0)
        amax_kernel<T, true><<<blocks, kThreads, 0, stream>>>(x, rows, cols, ld, amax);
    else
        amax_kernel<T, false><<<blocks, kThreads, 0, stream>>>(x, rows, cols, ld, amax);
    PF_LAUNCH_CHECK();
}

template void launch_amax<bf16>(const bf16*, i64, i64, i64, float*, cudaStream_t);
template void launch_amax<float>(const float*, i64, i64, i64, float*, cudaStream_t);

}  // namespace preflight::runtime::cuda
