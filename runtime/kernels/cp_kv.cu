// Context parallelism's K|V moves (runtime/src/program_cp.cpp): a rank's K|V columns into its chunk
// of the rank-major gather buffer and back, and that buffer into sequence order and back. Each
// is a copy of rows of W = 2 kv_width elements, one thread per element.
// CPU reference: ref::cp_kv_pack / cp_kv_order / cp_kv_unorder / cp_kv_unpack (reference_cp.cpp).
#include "common.cuh"
#include "kernels.cuh"
#include "preflight/runtime/context_parallel.hpp"

namespace preflight::runtime::cuda {
namespace {

// Row `r` of the destination reads row src_row(r) of the source; both rows `W` wide, the qkv
// side at column offset q_width of rows C wide.
template <class T>
__global__ void cp_kv_kernel(const T* src, T* dst, CpKvMove move, CpKvShape g) {
    const i64 idx = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    const i64 rows = g.b * g.s, S = g.cp * g.s;
    const i64 total = (move == CpKvMove::pack || move == CpKvMove::unpack ? rows : g.b * S) * g.W;
    if (idx >= total) return;
    const i64 r = idx / g.W, j = idx % g.W;
    switch (move) {
        case CpKvMove::pack: dst[idx] = src[r * g.C + g.q_width + j]; break;
        case CpKvMove::unpack: dst[r * g.C + g.q_width + j] = src[(g.cp_rank * rows + r) * g.W + j]; break;
        case CpKvMove::order: dst[idx] = src[cp_gathered_row(r / S, r % S, g.b, g.s, g.cp) * g.W + j]; break;
        case CpKvMove::unorder: dst[cp_gathered_row(r / S, r % S, g.b, g.s, g.cp) * g.W + j] = src[idx]; break;
    }
}

}  // namespace

template <class T>
void launch_cp_kv(const T* src, T* dst, CpKvMove move, const CpKvShape& g, cudaStream_t stream) {
    const i64 rows = move == CpKvMove::pack || move == CpKvMove::unpack ? g.b * g.s : g.b * g.cp * g.s;
    cp_kv_kernel<T><<<grid_for(rows * g.W, 256), 256, 0, stream>>>(src, dst, move, g);
    PF_LAUNCH_CHECK();
}

template void launch_cp_kv<float>(const float*, float*, CpKvMove, const CpKvShape&, cudaStream_t);
template void launch_cp_kv<bf16>(const bf16*, bf16*, CpKvMove, const CpKvShape&, cudaStream_t);

}  // namespace preflight::runtime::cuda
