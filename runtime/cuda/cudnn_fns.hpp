// The cuDNN entry points the flash-attention graphs use, resolved with dlsym from the
// libcudnn that cudnn_library() loaded.
#pragma once

#if defined(PREFLIGHT_HAVE_CUDNN)
#include <cudnn_graph.h>

namespace preflight::runtime::cuda {

// The cuDNN entry points used, resolved with dlsym from the loaded libcudnn.
struct Fns {
    decltype(&cudnnCreate) create = nullptr;
    decltype(&cudnnDestroy) destroy = nullptr;
    decltype(&cudnnSetStream) set_stream = nullptr;
    decltype(&cudnnGetErrorString) error_string = nullptr;
    decltype(&cudnnGetLastErrorString) last_error = nullptr;
    decltype(&cudnnBackendCreateDescriptor) create_desc = nullptr;
    decltype(&cudnnBackendDestroyDescriptor) destroy_desc = nullptr;
    decltype(&cudnnBackendFinalize) finalize = nullptr;
    decltype(&cudnnBackendSetAttribute) set = nullptr;
    decltype(&cudnnBackendGetAttribute) get = nullptr;
    decltype(&cudnnBackendExecute) execute = nullptr;
    bool ok = false;
};

// The resolved entry points (ok false when libcudnn did not load or lacks one).
const Fns& fns();

}  // namespace preflight::runtime::cuda

#endif
