// The cast of fp8 current scaling (program_fp8.cpp): x [rows, cols] (row stride ld) times
// scale = max_fp8 / amax (1 for an amax of 0), rounded to E4M3 or E5M2 with saturation, into a
// row-major copy and / or a transposed one ([cols, rows]: Hopper's fp8 GEMMs take both operands
// K-major). Tiles of 32 x 32 go through shared memory so both writes are coalesced. slot[0] holds
// the amax (launch_amax), slot[1] receives the dequantization factor 1 / scale.
// CPU reference: ref::quantize_fp8 (reference_fp8.cpp); tests/runtime/gpu/test_gpu_fp8.cpp.
#include <cuda_fp8.h>

#include "common.cuh"
#include "kernels.cuh"

namespace preflight::runtime::cuda {

namespace {

constexpr int kTile = 32;

__device__ __forceinline__ float fp8_scale(float amax, bool e5m2) {
    const float max_fp8 = e5m2 ? 57344.f : 448.f;
    return amax > 0.f && isfinite(amax) ? max_fp8 / amax : 1.f;
}

}  // namespace

template <class T>
__global__ void fp8_cast_kernel(const T* x, i64 rows, i64 cols, i64 ld, float* slot, bool e5m2, std::uint8_t* row_out,
                                std::uint8_t* col_out) {
    __shared__ std::uint8_t tile[kTile][kTile + 4];
    const float scale = fp8_scale(slot[0], e5m2);
    const __nv_fp8_interpretation_t kind = e5m2 ? __NV_E5M2 : __NV_E4M3;
    const i64 r0 = static_cast<i64>(blockIdx.y) * kTile, c0 = static_cast<i64>(blockIdx.x) * kTile;
    for (int dy = threadIdx.y; dy < kTile; dy += blockDim.y) {
        const i64 r = r0 + dy, c = c0 + threadIdx.x;
        std::uint8_t q = 0;
        if (r < rows && c < cols) {
            q = __nv_cvt_float_to_fp8(to_f(x[r * ld + c]) * scale, __NV_SATFINITE, kind);
            if (row_out) row_out[r * cols + c] = q;
        }
        tile[dy][threadIdx.x] = q;
    }
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) slot[1] = 1.f / scale;
    if (!col_out) return;
    __syncthreads();
    for (int dx = threadIdx.y; dx < kTile; dx += blockDim.y) {  // transposed: row c0 + dx of [cols, rows]
        const i64 c = c0 + dx, r = r0 + threadIdx.x;
        if (c < cols && r < rows) col_out[c * rows + r] = tile[threadIdx.x][dx];
    }
}

template <class T>
void launch_fp8_cast(const T* x, i64 rows, i64 cols, i64 ld, float* slot, bool e5m2, std::uint8_t* row_out,
                     std::uint8_t* col_out, cudaStream_t stream) {
    if (rows == 0 || cols == 0) return;
    const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile), static_cast<unsigned>((rows + kTile - 1) / kTile));
    fp8_cast_kernel<T><<<grid, dim3(kTile, 8), 0, stream>>>(x, rows, cols, ld, slot, e5m2, row_out, col_out);
    PF_LAUNCH_CHECK();
}

template void launch_fp8_cast<bf16>(const bf16*, i64, i64, i64, float*, bool, std::uint8_t*, std::uint8_t*, cudaStream_t);
template void launch_fp8_cast<float>(const float*, i64, i64, i64, float*, bool, std::uint8_t*, std::uint8_t*,
                                     cudaStream_t);

}  // namespace preflight::runtime::cuda
