// Synthetic tokens on the device (CPU reference: preflight/runtime/synthetic.hpp, same function).
#include "common.cuh"
#include "kernels.cuh"
#include "preflight/runtime/context_parallel.hpp"
#include "preflight/runtime/synthetic.hpp"

namespace preflight::runtime::cuda {

__global__ void synthetic_tokens_kernel(std::int64_t* out, i64 b, i64 s, i64 vocab, std::uint64_t seed, i64 step,
                                        i64 mb, int shift, i64 first, i64 cp, i64 cp_rank) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= b * s) return;
    out[i] = first + synthetic_token(seed, step, mb, i / s, cp_position(i % s, s, cp, cp_rank) + shift, vocab);
}

void launch_synthetic_tokens(std::int64_t* out, i64 b, i64 s, i64 vocab, std::uint64_t seed, i64 step, i64 mb,
                             bool labels, cudaStream_t stream, i64 first, i64 cp, i64 cp_rank) {
    synthetic_tokens_kernel<<<grid_for(b * s, 256), 256, 0, stream>>>(out, b, s, vocab, seed, step, mb, labels ? 1 : 0,
                                                                      first, cp, cp_rank);
    PF_LAUNCH_CHECK();
}

}  // namespace preflight::runtime::cuda
