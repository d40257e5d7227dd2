// The experts' grouped GEMMs on the device (device_runner_moe.cpp), apart from the runner so
// the GPU tests reach them.
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

#include "gemm.cuh"
#include "preflight/runtime/program.hpp"

namespace preflight::runtime::cuda {

// The experts' grouped GEMMs of a moe_linear_* op (program.hpp; CPU reference ref::moe_linear_*):
// one cuBLASLt product per expert e with slots, over rows [off[e], off[e + 1]) of the row-major
// [pairs, *] operands and its block of rows [e N, (e + 1) N) of the stacked [E N, K] weight
// (or its gradient); an expert without slots gets none (no zero-size GEMM). x [pairs, K] (row
// stride ldx) and y [pairs, N] (ldy): moe_linear_fwd: y = x W_e^T (w = the weights);
// moe_linear_bwd_data: x = dX = y W_e (y = dY; overwritten, may be a column window: ldx > K);
// moe_linear_bwd_weight: w = dW += y^T x (y = dY, beta = 1). `esize`: bytes per element.
std::vector<GemmArgs> moe_expert_gemms(OpKind kind, const std::vector<std::int64_t>& off, void* x, std::int64_t ldx,
                                       void* y, std::int64_t ldy, void* w, std::int64_t N, std::int64_t K,
                                       std::size_t esize);
// The E + 1 expert offsets of a routing table on the device (i64, reference_moe.hpp), read back
// after everything issued on `stream` before (synchronises it); throws std::runtime_error unless
// they run from 0 to pairs without decreasing.
std::vector<std::int64_t> moe_expert_offsets(const std::int64_t* routing, std::int64_t pairs, std::int64_t experts,
                                             cudaStream_t stream);

}  // namespace preflight::runtime::cuda
