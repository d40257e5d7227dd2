// The cast of fp8 current scaling (program_fp8.cpp): x [rows, cols] (row stride ld) times
// scale = max_fp8 / amax (1 for an amax of 0), rounded to E4M3 or E5M2 with saturation, into a
// row-major copy and / or a transposed one ([cols, rows]: Hopper's fp8 GEMMs take both operands
// K-major). Tiles go through shared memory so both writes are coalesced. slot[0] holds the amax
// (launch_amax), slot[1] receives the dequantization factor 1 / scale.
// Two kernels, the same bytes: where rows and columns come in whole 8-element runs and the
// pointers allow (bf16 input, the shapes of every fp8 GEMM operand, whose dimensions are
// multiples of 16), 64 x 64 tiles with 16-byte loads and 8-byte stores, each thread converting 8
// values at a time; otherwise 32 x 32 tiles, one element per thread and access.
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

namespace {

constexpr int kVecTile = 64;                     // rows and columns of a vector tile
constexpr int kRun = 8;                          // elements one thread converts at a time
constexpr int kTileWords = kVecTile / 4 + 1;     // a tile row of 64 bytes plus one padding word
constexpr int kTileStride = 4 * kTileWords;      // 68 bytes: column reads spread over the banks

// Eight values times `scale`, as fp8 bytes, little-endian in two words.
template <class T>
__device__ __forceinline__ uint2 to_fp8_run(const Pack16<T>& v, float scale, __nv_fp8_interpretation_t kind) {
    std::uint32_t w[2] = {0, 0};
#pragma unroll
    for (int k = 0; k < kRun; ++k)
        w[k / 4] |= static_cast<std::uint32_t>(__nv_cvt_float_to_fp8(to_f(v.v[k]) * scale, __NV_SATFINITE, kind))
                    << (8 * (k % 4));
    return make_uint2(w[0], w[1]);
}

}  // namespace

// A 64 x 64 tile: each thread loads runs of 8 bf16 (16 bytes) along a row, writes their 8 bytes
// to the row-major copy and the tile; then gathers runs of 8 rows down a tile column for the
// transposed copy. Needs cols % 8 == 0 (and rows % 8 == 0 for col_out), 16-byte aligned x and
// ld % 8 == 0, 8-byte aligned outputs.
template <class T>
__global__ void fp8_cast_vec_kernel(const T* x, i64 rows, i64 cols, i64 ld, float* slot, bool e5m2,
                                    std::uint8_t* row_out, std::uint8_t* col_out) {
    static_assert(Pack16<T>::N == kRun, "the vector cast takes 8 two-byte values per 16-byte load");
    __shared__ std::uint32_t tile[kVecTile * kTileWords];
    const float scale = fp8_scale(slot[0], e5m2);
    const __nv_fp8_interpretation_t kind = e5m2 ? __NV_E5M2 : __NV_E4M3;
    const i64 r0 = static_cast<i64>(blockIdx.y) * kVecTile, c0 = static_cast<i64>(blockIdx.x) * kVecTile;
    constexpr int kRuns = kVecTile * kVecTile / kRun;  // 512 runs of 8 in a tile
    for (int q = static_cast<int>(threadIdx.x); q < kRuns; q += static_cast<int>(blockDim.x)) {
        const int tr = q / (kVecTile / kRun), tc = (q % (kVecTile / kRun)) * kRun;  // tile row, first column
        const i64 r = r0 + tr, c = c0 + tc;
        uint2 b = make_uint2(0, 0);
        if (r < rows && c < cols) {
            b = to_fp8_run(load16(x + r * ld + c), scale, kind);
            if (row_out) *reinterpret_cast<uint2*>(row_out + r * cols + c) = b;
        }
        tile[tr * kTileWords + tc / 4] = b.x;
        tile[tr * kTileWords + tc / 4 + 1] = b.y;
    }
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) slot[1] = 1.f / scale;
    if (!col_out) return;
    __syncthreads();
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(tile);
    for (int q = static_cast<int>(threadIdx.x); q < kRuns; q += static_cast<int>(blockDim.x)) {
        // Consecutive threads take consecutive runs down one column: 8 of them write its 64 bytes.
        const int tc = q / (kVecTile / kRun), tr = (q % (kVecTile / kRun)) * kRun;
        const i64 c = c0 + tc, r = r0 + tr;
        if (c >= cols || r >= rows) continue;
        std::uint32_t w[2] = {0, 0};
#pragma unroll
        for (int k = 0; k < kRun; ++k)
            w[k / 4] |= static_cast<std::uint32_t>(bytes[(tr + k) * kTileStride + tc]) << (8 * (k % 4));
        *reinterpret_cast<uint2*>(col_out + c * rows + r) = make_uint2(w[0], w[1]);
    }
}

template <class T>
void launch_fp8_cast(const T* x, i64 rows, i64 cols, i64 ld, float* slot, bool e5m2, std::uint8_t* row_out,
                     std::uint8_t* col_out, cudaStream_t stream) {
    if (rows == 0 || cols == 0) return;
    if constexpr (sizeof(T) == 2) {
        const auto aligned8 = [](const void* p) { return (reinterpret_cast<unsigned long long>(p) & 7ull) == 0; };
        if (aligned16(x) && ld % kRun == 0 && cols % kRun == 0 && aligned8(row_out) && aligned8(col_out) &&
            (col_out == nullptr || rows % kRun == 0)) {
            const dim3 grid(static_cast<unsigned>((cols + kVecTile - 1) / kVecTile),
                            static_cast<unsigned>((rows + kVecTile - 1) / kVecTile));
            fp8_cast_vec_kernel<T><<<grid, 256, 0, stream>>>(x, rows, cols, ld, slot, e5m2, row_out, col_out);
            PF_LAUNCH_CHECK();
            return;
        }
    }
    const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile), static_cast<unsigned>((rows + kTile - 1) / kTile));
    fp8_cast_kernel<T><<<grid, dim3(kTile, 8), 0, stream>>>(x, rows, cols, ld, slot, e5m2, row_out, col_out);
    PF_LAUNCH_CHECK();
}

template void launch_fp8_cast<bf16>(const bf16*, i64, i64, i64, float*, bool, std::uint8_t*, std::uint8_t*, cudaStream_t);
template void launch_fp8_cast<float>(const float*, i64, i64, i64, float*, bool, std::uint8_t*, std::uint8_t*,
                                     cudaStream_t);

}  // namespace preflight::runtime::cuda
