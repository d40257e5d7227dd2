#include "preflight/runtime/nvml_probe.hpp"

#include <dlfcn.h>

namespace preflight::runtime {

namespace {
// The few NVML declarations used (nvml.h, NVML API reference): opaque device handle,
// nvmlMemory_t {total, free, used} in bytes, status 0 = NVML_SUCCESS.
using nvmlReturn = int;
struct NvmlMemory {
    unsigned long long total, free, used;
};
using InitFn = nvmlReturn (*)();
using ShutdownFn = nvmlReturn (*)();
using ByPciFn = nvmlReturn (*)(const char*, void**);
using ByIndexFn = nvmlReturn (*)(unsigned int, void**);
using MemFn = nvmlReturn (*)(void*, NvmlMemory*);
using DriverFn = nvmlReturn (*)(char*, unsigned int);
}  // namespace

NvmlProbe::NvmlProbe(const std::string& pci_bus_id) {
    for (const char* name : {"libnvidia-ml.so.1", "libnvidia-ml.so"}) {
        lib_ = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (lib_) break;
    }
    if (!lib_) {
        why_ = "libnvidia-ml.so.1 not found (no NVIDIA driver on this machine)";
        return;
    }
    auto init = reinterpret_cast<InitFn>(dlsym(lib_, "nvmlInit_v2"));
    auto by_pci = reinterpret_cast<ByPciFn>(dlsym(lib_, "nvmlDeviceGetHandleByPciBusId_v2"));
    auto by_index = reinterpret_cast<ByIndexFn>(dlsym(lib_, "nvmlDeviceGetHandleByIndex_v2"));
    get_memory_info_ = dlsym(lib_, "nvmlDeviceGetMemoryInfo");
    shutdown_ = dlsym(lib_, "nvmlShutdown");
    driver_version_ = dlsym(lib_, "nvmlSystemGetDriverVersion");
    if (!init || !by_pci || !by_index || !get_memory_info_ || !shutdown_) {
        why_ = "libnvidia-ml lacks nvmlInit_v2 / nvmlDeviceGetHandleBy* / nvmlDeviceGetMemoryInfo";
        return;
    }
    if (const nvmlReturn r = init(); r != 0) {
        why_ = "nvmlInit_v2 returned " + std::to_string(r);
        shutdown_ = nullptr;
        return;
    }
    void* dev = nullptr;
    const nvmlReturn r = pci_bus_id.empty() ? by_index(0, &dev) : by_pci(pci_bus_id.c_str(), &dev);
    if (r != 0 || dev == nullptr) {
        why_ = "NVML has no device for PCI bus id '" + pci_bus_id + "' (status " + std::to_string(r) + ")";
        return;
    }
    device_ = dev;
}

NvmlProbe::~NvmlProbe() {
    if (shutdown_) reinterpret_cast<ShutdownFn>(shutdown_)();
    if (lib_) dlclose(lib_);
}

std::optional<std::int64_t> NvmlProbe::used_bytes() const {
    if (!device_) return std::nullopt;
    NvmlMemory m{};
    if (reinterpret_cast<MemFn>(get_memory_info_)(device_, &m) != 0) return std::nullopt;
    return static_cast<std::int64_t>(m.used);
}

std::optional<std::int64_t> NvmlProbe::total_bytes() const {
    if (!device_) return std::nullopt;
    NvmlMemory m{};
    if (reinterpret_cast<MemFn>(get_memory_info_)(device_, &m) != 0) return std::nullopt;
    return static_cast<std::int64_t>(m.total);
}

std::string NvmlProbe::driver_version() const {
    if (!device_ || !driver_version_) return {};
    char buf[96] = {};
    if (reinterpret_cast<DriverFn>(driver_version_)(buf, sizeof buf) != 0) return {};
    return buf;
}

}  // namespace preflight::runtime
