// The device backend (device.hpp) of a build with CUDA: loads the CUDA executor module
// (device_module.hpp) the first time a command asks for a device, and forwards to it.
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "preflight/runtime/device_module.hpp"

namespace preflight::runtime {

namespace {

// Where the module is looked for: $PREFLIGHT_CUDA_MODULE alone when set; else beside the
// running executable (build/cli/, where CMake puts it), then where this build wrote it.
std::vector<std::string> module_candidates() {
    if (const char* env = std::getenv("PREFLIGHT_CUDA_MODULE"); env != nullptr && *env != '\0') return {env};
    std::vector<std::string> paths;
    std::string exe(PATH_MAX, '\0');
    const ssize_t n = readlink("/proc/self/exe", exe.data(), exe.size() - 1);
    if (n > 0) {
        exe.resize(static_cast<std::size_t>(n));
        paths.push_back(exe.substr(0, exe.rfind('/') + 1) + kDeviceModuleFile);
    }
    paths.emplace_back(PREFLIGHT_CUDA_MODULE_PATH);
    return paths;
}

struct LoadedModule {
    const DeviceModule* table = nullptr;
    std::string why;  // why it could not be loaded ("" when loaded)
};

LoadedModule load_module() {
    LoadedModule m;
    std::vector<std::string> tried;  // one reason per path
    for (const std::string& path : module_candidates()) {
        void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (lib == nullptr) {
            const char* err = dlerror();
            tried.push_back(err != nullptr ? std::string(err) : path + ": not loadable");
            continue;
        }
        using Entry = const DeviceModule* (*)();
        const auto entry = reinterpret_cast<Entry>(dlsym(lib, kDeviceModuleEntry));
        const DeviceModule* t = entry != nullptr ? entry() : nullptr;
        if (t == nullptr || t->abi != kDeviceModuleAbi || !(t->layout == DeviceModuleLayout{})) {
            tried.push_back(path + ": built by another version of Preflight (rebuild it with this one)");
            dlclose(lib);
            continue;
        }
        m.table = t;  // kept loaded for the life of the process
        return m;
    }
    m.why = "the CUDA backend (" + std::string(kDeviceModuleFile) + ") could not be loaded: ";
    for (std::size_t i = 0; i < tried.size(); ++i) m.why += (i > 0 ? "; " : "") + tried[i];
    return m;
}

const LoadedModule& module() {
    static const LoadedModule m = load_module();  // loaded once, on first use
    return m;
}

const DeviceModule& require_module() {
    const LoadedModule& m = module();
    if (m.table == nullptr) throw std::runtime_error(m.why);
    return *m.table;
}

}  // namespace

std::string_view device_backend_unavailable_reason() { return module().why; }

int device_count() {
    const LoadedModule& m = module();
    return m.table == nullptr ? 0 : m.table->device_count();
}

RunReport run_on_device(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan, const RunOptions& options) {
    return require_module().run_on_device(model, gpu, plan, options);
}

StepGradients capture_step_gradients(const ModelConfig& model, const Plan& plan, const RunOptions& options) {
    return require_module().capture_step_gradients(model, plan, options);
}

}  // namespace preflight::runtime

namespace preflight::runtime {

std::vector<RankResult> run_ranks_on_device(const ModelConfig& model, const Plan& plan, const RunOptions& options,
                                            int steps) {
    return require_module().run_ranks_on_device(model, plan, options, steps);
}

}  // namespace preflight::runtime
