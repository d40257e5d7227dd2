#include "preflight/runtime/errors.hpp"

#include <algorithm>
#include <cstring>
#include <optional>

namespace preflight::runtime {

std::string_view to_string(FailureKind k) {
    switch (k) {
        case FailureKind::out_of_memory: return "out-of-memory";
        case FailureKind::device_fault: return "device-fault";
        case FailureKind::no_device: return "no-device";
        case FailureKind::library: return "library-error";
        case FailureKind::other: return "cuda-error";
    }
    return "?";
}

FailureKind classify_cuda_error(int code) {
    using namespace cuda_code;
    if (code == memory_allocation) return FailureKind::out_of_memory;
    if (is_sticky_cuda_error(code)) return FailureKind::device_fault;
    switch (code) {
        case initialization:
        case stub_library:
        case insufficient_driver:
        case devices_unavailable:
        case invalid_device_function:
        case no_device:
        case no_kernel_image:
        case system_driver_mismatch:
        case compat_not_supported: return FailureKind::no_device;
        default: return FailureKind::other;
    }
}

bool is_sticky_cuda_error(int code) {
    using namespace cuda_code;
    // CUDA runtime API docs (cudaError_t): these leave the process's context in an
    // inconsistent state; it must be destroyed before the device is used again.
    switch (code) {
        case ecc_uncorrectable:
        case illegal_address:
        case launch_timeout:
        case assert_failed:
        case hardware_stack_error:
        case illegal_instruction:
        case misaligned_address:
        case invalid_address_space:
        case invalid_pc:
        case launch_failure:
        case unknown: return true;
        default: return false;
    }
}

int exit_code_for(FailureKind k) { return k == FailureKind::out_of_memory ? 1 : 3; }

namespace {
std::string device_error_text(FailureKind kind, int code, const std::string& call, const std::string& detail) {
    std::string s = std::string(to_string(kind)) + ": " + call + " returned " + std::to_string(code);
    if (!detail.empty()) s += " (" + detail + ")";
    if (kind == FailureKind::device_fault)
        s += "; the CUDA context is unusable after this error (every later call fails with it)";
    return s;
}
}  // namespace

DeviceError::DeviceError(FailureKind kind_, int code_, std::string call_, std::string detail)
    : std::runtime_error(device_error_text(kind_, code_, call_, detail)), kind(kind_), code(code_), call(std::move(call_)) {}

std::string to_string(const OpLocation& at) {
    std::string s = at.section + " op " + std::to_string(at.index) + " (" + at.kind;
    if (at.layer > 0) s += ", layer " + std::to_string(at.layer);
    if (at.micro_batch > 0) s += ", micro-batch " + std::to_string(at.micro_batch);
    if (at.step > 0) s += ", step " + std::to_string(at.step);
    s += "): " + at.label;
    return s;
}

namespace {
std::string op_error_text(const OpLocation& at, const std::string& detail) {
    std::string s = (at.synchronised ? "failed in " : "error surfaced at ") + to_string(at) + ": " + detail;
    if (!at.synchronised)
        s += " [asynchronous: the failing op is this one or an earlier one; rerun with --debug-sync or "
             "PREFLIGHT_DEBUG_SYNC=1 to name it]";
    return s;
}
}  // namespace

OpError::OpError(OpLocation at_, FailureKind kind_, int code_, const std::string& detail)
    : std::runtime_error(op_error_text(at_, detail)), at(std::move(at_)), kind(kind_), code(code_) {}

bool debug_sync_requested(bool flag, const char* env_value) {
    if (flag) return true;
    return env_value != nullptr && env_value[0] != '\0' && std::strcmp(env_value, "0") != 0;
}

namespace {
// Whether one CMAKE_CUDA_ARCHITECTURES entry gives a device of capability `cc` an image it loads;
// nullopt for an entry that names no architecture number ("native", "all", "all-major").
std::optional<bool> entry_runs_on(std::string_view entry, int cc) {
    std::size_t digits = 0;
    while (digits < entry.size() && digits < 4 && entry[digits] >= '0' && entry[digits] <= '9') ++digits;
    if (digits == 0) return std::nullopt;
    int arch = 0;
    for (std::size_t i = 0; i < digits; ++i) arch = arch * 10 + (entry[i] - '0');
    const std::string_view suffix = entry.substr(digits);
    if (suffix == "-real") return cc / 10 == arch / 10 && cc >= arch;  // SASS: same major, minor at or above
    if (suffix == "a" || suffix == "a-real") return cc == arch;  // architecture-specific features
    return cc >= arch;  // "N" and "N-virtual" embed PTX, which the driver compiles for later devices
}
}  // namespace

std::string device_support_problem(int cc, std::string_view built_archs, bool fp8) {
    const auto version = [](int c) { return std::to_string(c / 10) + "." + std::to_string(c % 10); };
    bool judged = false, runs = false, symbolic = false;  // symbolic: "native" and the like, not judged
    for (std::size_t at = 0; at <= built_archs.size();) {
        const std::size_t end = std::min(built_archs.find(';', at), built_archs.size());
        if (const std::optional<bool> r = entry_runs_on(built_archs.substr(at, end - at), cc)) {
            judged = true;
            runs = runs || *r;
        } else if (end > at) {
            symbolic = true;
        }
        at = end + 1;
    }
    if (judged && !runs && !symbolic)
        return "this build's kernels are compiled for CMAKE_CUDA_ARCHITECTURES=" + std::string(built_archs) +
               " and this GPU has compute capability " + version(cc) + ": rebuild with -DCMAKE_CUDA_ARCHITECTURES=" +
               std::to_string(cc);
    if (fp8 && cc < 89)
        return "fp8-mixed needs fp8 tensor cores (compute capability 8.9 or later: Ada, Hopper, Blackwell) and this "
               "GPU has compute capability " + version(cc) + ": --precision bf16-mixed";
    return "";
}

}  // namespace preflight::runtime
