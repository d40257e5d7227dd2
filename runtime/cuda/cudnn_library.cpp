// Loading libcudnn at run time (dlopen): which library, its version, and the entry
// points resolved from it.
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <type_traits>

#include "cudnn_fns.hpp"
#include "cudnn_sdpa.hpp"

namespace preflight::runtime::cuda {

namespace {

// The cuDNN entry points the graph API needs, resolved from the loaded library.
struct CudnnApi {
    void* lib = nullptr;
    std::size_t (*get_version)() = nullptr;
};

CudnnApi& api() {
    static CudnnApi a;
    return a;
}

}  // namespace

const CudnnLibrary& cudnn_library() {
    static CudnnLibrary lib;
    static std::once_flag once;
    std::call_once(once, [] {
#if !defined(PREFLIGHT_HAVE_CUDNN)
        lib.path_or_error = "this build has no cuDNN headers (cudnn_graph.h was not found at configure time)";
#else
        // libcudnn.so.9 is the dispatcher of cuDNN 9; it loads its sub-libraries (graph,
        // engines) from its own folder. LD_LIBRARY_PATH (or PREFLIGHT_CUDNN_LIB) selects it.
        const char* env = std::getenv("PREFLIGHT_CUDNN_LIB");
        std::string tried;
        for (const char* name : {env, "libcudnn.so.9", "libcudnn.so"}) {
            if (name == nullptr || *name == '\0') continue;
            api().lib = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
            if (api().lib) {
                lib.path_or_error = name;
                break;
            }
            tried += std::string(tried.empty() ? "" : "; ") + name + ": " + dlerror();
        }
        if (!api().lib) {
            lib.path_or_error = "libcudnn not loadable (" + tried + ")";
            return;
        }
        api().get_version = reinterpret_cast<std::size_t (*)()>(dlsym(api().lib, "cudnnGetVersion"));
        if (!api().get_version) {
            lib.path_or_error += ": no cudnnGetVersion";
            return;
        }
        lib.version = api().get_version();
        if (lib.version < 90000) {
            lib.path_or_error += ": version " + std::to_string(lib.version) + " is older than 9.0";
            return;
        }
        lib.loaded = true;
#endif
    });
    return lib;
}

#if defined(PREFLIGHT_HAVE_CUDNN)
const Fns& fns() {
    static Fns f;
    static std::once_flag once;
    std::call_once(once, [] {
        if (!cudnn_library().loaded) return;
        void* lib = api().lib;
        auto sym = [lib](auto& fp, const char* name) {
            fp = reinterpret_cast<std::remove_reference_t<decltype(fp)>>(dlsym(lib, name));
            return fp != nullptr;
        };
        f.ok = sym(f.create, "cudnnCreate") && sym(f.destroy, "cudnnDestroy") && sym(f.set_stream, "cudnnSetStream") &&
               sym(f.error_string, "cudnnGetErrorString") && sym(f.create_desc, "cudnnBackendCreateDescriptor") &&
               sym(f.destroy_desc, "cudnnBackendDestroyDescriptor") && sym(f.finalize, "cudnnBackendFinalize") &&
               sym(f.set, "cudnnBackendSetAttribute") && sym(f.get, "cudnnBackendGetAttribute") &&
               sym(f.execute, "cudnnBackendExecute");
        sym(f.last_error, "cudnnGetLastErrorString");  // optional
    });
    return f;
}

#endif

}  // namespace preflight::runtime::cuda
