// NVML's view of device memory, loaded at run time (dlopen of libnvidia-ml.so.1, which
// ships with the driver), so neither the build nor a machine without a driver needs it.
// Host code only; no CUDA or NVML headers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace preflight::runtime {

class NvmlProbe {
public:
    // Loads NVML and opens the device with this PCI bus id ("0000:1B:00.0", as
    // cudaDeviceGetPCIBusId writes it; empty: NVML device index 0). Never throws: when
    // anything is missing, available() is false and why() says what.
    explicit NvmlProbe(const std::string& pci_bus_id = "");
    ~NvmlProbe();
    NvmlProbe(const NvmlProbe&) = delete;
    NvmlProbe& operator=(const NvmlProbe&) = delete;

    bool available() const { return device_ != nullptr; }
    const std::string& why() const { return why_; }
    // Device memory in use as NVML reports it (nvmlDeviceGetMemoryInfo: used), all processes.
    std::optional<std::int64_t> used_bytes() const;
    std::optional<std::int64_t> total_bytes() const;
    // Driver version string ("580.159.04"), or empty.
    std::string driver_version() const;

private:
    void* lib_ = nullptr;
    void* device_ = nullptr;
    std::string why_;
    void* get_memory_info_ = nullptr;
    void* shutdown_ = nullptr;
    void* driver_version_ = nullptr;
};

}  // namespace preflight::runtime
