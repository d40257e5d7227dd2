// Failure classification of the device run, as pure host functions (no CUDA headers):
// which CUDA runtime error codes mean "out of memory" (the plan does not fit, exit 1)
// and which mean the device or a library failed (exit 3), and the error that names
// the op a failure happened in.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace preflight::runtime {

// What a failed CUDA / cuBLASLt / cuDNN call means for the run.
enum class FailureKind : std::uint8_t {
    out_of_memory,  // cudaErrorMemoryAllocation only: the plan does not fit
    device_fault,   // a kernel faulted (illegal address, assert, ...): the context is unusable ("sticky")
    no_device,      // no device, no driver, driver too old, no kernel image for this GPU
    library,        // cuBLASLt / cuDNN / NVML returned an error status
    other,          // any other CUDA error (invalid value, ...): a bug in the runtime
};
std::string_view to_string(FailureKind k);

// CUDA runtime error codes (driver_types.h, CUDA 12/13: cudaError_t values), kept here as
// integers so host code and tests can classify without CUDA headers; the CUDA library
// static_asserts that they match.
namespace cuda_code {
inline constexpr int success = 0, invalid_value = 1, memory_allocation = 2, initialization = 3,
                     stub_library = 34, insufficient_driver = 35, devices_unavailable = 46,
                     invalid_device_function = 98, no_device = 100, no_kernel_image = 209, ecc_uncorrectable = 214,
                     illegal_address = 700, launch_out_of_resources = 701, launch_timeout = 702, assert_failed = 710,
                     hardware_stack_error = 714, illegal_instruction = 715, misaligned_address = 716,
                     invalid_address_space = 717, invalid_pc = 718, launch_failure = 719,
                     system_driver_mismatch = 803, compat_not_supported = 804, unknown = 999;
}

// Only cudaErrorMemoryAllocation is out of memory; every other failure of an allocation
// (a sticky fault left by an earlier kernel, a lost device) is not "does not fit".
FailureKind classify_cuda_error(int code);
// True when the error leaves the CUDA context unusable: every later call fails with it.
bool is_sticky_cuda_error(int code);

// Exit code of `preflight run` for a failure: 1 out of memory, 3 anything else
// (docs/interface.md: 1 = does not fit, 3 = no GPU / runtime failure).
int exit_code_for(FailureKind k);

// A failed CUDA / library call (thrown by the CUDA library's checks): the call, the
// status code and its text, and what it means.
class DeviceError : public std::runtime_error {
public:
    DeviceError(FailureKind kind, int code, std::string call, std::string detail);
    FailureKind kind;
    int code;          // cudaError_t, cublasStatus_t or cudnnStatus_t value
    std::string call;  // the expression that failed
};

// Where in the program a failure happened.
struct OpLocation {
    std::string section;  // "set-up" | "step" | "teardown"
    std::int64_t index = -1;  // op index within the section
    std::string kind;         // OpKind name, e.g. "flash_bwd"
    std::int64_t layer = 0;   // 1-based layer (0 outside the layers)
    std::int64_t micro_batch = 0;
    std::int64_t step = 0;    // 1-based optimizer step (0 in set-up / teardown)
    std::string label;        // describe(): "backward layer 3 (micro-batch 1): L3 flash attention bwd"
    bool synchronised = false;  // true: the op was checked right after it ran (debug-sync), so it is
                                // the failing op; false: an asynchronous error surfaced here
};
std::string to_string(const OpLocation& at);

// A failure inside an op (not an out-of-memory allocation, which stays AllocationError).
class OpError : public std::runtime_error {
public:
    OpError(OpLocation at, FailureKind kind, int code, const std::string& detail);
    OpLocation at;
    FailureKind kind;
    int code;
};

// Debug-sync mode: synchronise and check after every op. On when `flag` is set or the
// environment variable PREFLIGHT_DEBUG_SYNC is set to anything but "" or "0".
bool debug_sync_requested(bool flag, const char* env_value);

// Why this build cannot run a plan on a device of compute capability `cc` (major x 10 + minor),
// "" when it can: its kernels, compiled for `built_archs` (CMAKE_CUDA_ARCHITECTURES, e.g. "90" or
// "80;90-real"), have no image the device loads (N: code for N and PTX that later devices JIT;
// N-real: code for major N/10 at minor N%10 or above; N-virtual: PTX only; a non-numeric entry
// such as "native" or "all" is not judged), or the plan is fp8-mixed and the device has no fp8
// tensor cores (compute capability 8.9, Ada, and later).
std::string device_support_problem(int cc, std::string_view built_archs, bool fp8);

}  // namespace preflight::runtime
