// Host-safe CUDA helpers shared by kernels, launchers and tests: the bf16 type and
// error checks that throw (so a failed launch becomes a structured run error).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace preflight::runtime::cuda {

using bf16 = __nv_bfloat16;

[[noreturn]] inline void cuda_fail(cudaError_t e, const char* what, const char* file, int line) {
    throw std::runtime_error(std::string("CUDA error in ") + what + " (" + file + ":" + std::to_string(line) +
                             "): " + cudaGetErrorString(e));
}

inline unsigned grid_for(std::int64_t n, int block) { return static_cast<unsigned>((n + block - 1) / block); }

}  // namespace preflight::runtime::cuda

#define PF_CUDA_CHECK(expr)                                                                         \
    do {                                                                                            \
        const cudaError_t pf_err_ = (expr);                                                         \
        if (pf_err_ != cudaSuccess) ::preflight::runtime::cuda::cuda_fail(pf_err_, #expr, __FILE__, __LINE__); \
    } while (0)
#define PF_LAUNCH_CHECK() PF_CUDA_CHECK(cudaGetLastError())
