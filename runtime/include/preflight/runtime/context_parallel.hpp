// Context parallelism's token placement, shared by the host reference and the CUDA kernels:
// each sequence of s_full tokens is cut into 2 cp equal chunks, and cp rank r holds chunks r and
// 2 cp - 1 - r (Llama 3 paper, sec. 3.3.2; Megatron-LM's get_batch_on_this_cp_rank), so every
// rank's causal attention does the same work.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PREFLIGHT_CP_HD __host__ __device__ __forceinline__
#else
#define PREFLIGHT_CP_HD inline
#endif

namespace preflight::runtime {

// The position in its sequence of a rank's local token i (0 <= i < s_local = s_full / cp).
PREFLIGHT_CP_HD std::int64_t cp_position(std::int64_t i, std::int64_t s_local, std::int64_t cp, std::int64_t rank) {
    if (cp <= 1) return i;
    const std::int64_t c = s_local / 2;
    return i < c ? rank * c + i : (2 * cp - 1 - rank) * c + (i - c);
}

// The row of the rank-major gathered buffer ([cp][b][s_local] rows: each rank's tokens as it holds
// them) that holds position p of sequence bi.
PREFLIGHT_CP_HD std::int64_t cp_gathered_row(std::int64_t bi, std::int64_t p, std::int64_t b, std::int64_t s_local,
                                             std::int64_t cp) {
    const std::int64_t c = s_local / 2, k = p / c;
    const std::int64_t r = k < cp ? k : 2 * cp - 1 - k;
    return (r * b + bi) * s_local + (k < cp ? 0 : c) + p % c;
}

}  // namespace preflight::runtime
