// Host-safe CUDA helpers shared by kernels, launchers and tests: the bf16 type and
// error checks that throw (so a failed launch becomes a structured run error).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "preflight/runtime/errors.hpp"

namespace preflight::runtime::cuda {

using bf16 = __nv_bfloat16;

// The host-side classification (errors.hpp) keeps the codes as integers: they must match.
static_assert(cudaErrorMemoryAllocation == cuda_code::memory_allocation);
static_assert(cudaErrorIllegalAddress == cuda_code::illegal_address);
static_assert(cudaErrorLaunchFailure == cuda_code::launch_failure);
static_assert(cudaErrorAssert == cuda_code::assert_failed);
static_assert(cudaErrorMisalignedAddress == cuda_code::misaligned_address);
static_assert(cudaErrorNoDevice == cuda_code::no_device);
static_assert(cudaErrorNoKernelImageForDevice == cuda_code::no_kernel_image);
static_assert(cudaErrorInsufficientDriver == cuda_code::insufficient_driver);
static_assert(cudaErrorUnknown == cuda_code::unknown);

// Throws DeviceError (classified: only cudaErrorMemoryAllocation is out of memory). A
// non-sticky error is cleared from the runtime's last-error slot first.
[[noreturn]] inline void cuda_fail(cudaError_t e, const char* what, const char* file, int line) {
    const int code = static_cast<int>(e);
    if (!is_sticky_cuda_error(code)) (void)cudaGetLastError();
    throw DeviceError(classify_cuda_error(code), code, what,
                      std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e) + " at " + file + ":" +
                          std::to_string(line));
}

inline unsigned grid_for(std::int64_t n, int block) { return static_cast<unsigned>((n + block - 1) / block); }

}  // namespace preflight::runtime::cuda

#define PF_CUDA_CHECK(expr)                                                                         \
    do {                                                                                            \
        const cudaError_t pf_err_ = (expr);                                                         \
        if (pf_err_ != cudaSuccess) ::preflight::runtime::cuda::cuda_fail(pf_err_, #expr, __FILE__, __LINE__); \
    } while (0)
#define PF_LAUNCH_CHECK() PF_CUDA_CHECK(cudaGetLastError())
