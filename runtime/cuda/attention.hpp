// Flash attention of the step program: cuDNN's fused flash attention (bf16, causal, GQA)
// through the cuDNN graph (backend) API when libcudnn loads and supports the shape,
// else the runtime's own kernel (flash_attention.cu: the fp32 path and the reference).
// cuDNN is loaded at run time (dlopen of libcudnn.so.9), so the build needs only its
// headers and a machine without cuDNN still runs every plan.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "check.hpp"
#include "preflight/runtime/program.hpp"

namespace preflight::runtime::cuda {

class CudnnSdpa;  // the cuDNN graphs (attention.cpp)

class AttentionEngine {
public:
    // `want_cudnn` false, an fp32 or eager program, or cuDNN missing / refusing the
    // shape: the kernel path (note() says why).
    AttentionEngine(const Program& program, bool want_cudnn);
    ~AttentionEngine();
    AttentionEngine(const AttentionEngine&) = delete;
    AttentionEngine& operator=(const AttentionEngine&) = delete;

    bool cudnn() const { return sdpa_ != nullptr; }
    // The workspace cuDNN's engines share with cuBLASLt (the program's GEMM workspace).
    void set_shared_workspace(void* p) { shared_ = p; }
    const char* backend() const;  // "cudnn" | "kernel" | "eager"
    const std::string& note() const { return note_; }

    // qkv [b*s, (H + 2 KV) d], out [b*s, H d], lse [b, H, s] fp32 (the saved softmax stats);
    // `window` the layer's (Dims::window_of: the program's window, or 0 on a full layer).
    void forward(const bf16* qkv, bf16* out, float* lse, std::int64_t window, cudaStream_t stream);
    // dqkv overwritten; `workspace` is the program's flash backward workspace buffer.
    void backward(const bf16* qkv, const bf16* out, const float* lse, const bf16* dout, bf16* dqkv, void* workspace,
                  std::int64_t workspace_bytes, std::int64_t window, cudaStream_t stream);

private:
    CudnnSdpa* graph_for(std::int64_t window) const;
    const Program& prog_;
    std::unique_ptr<CudnnSdpa> sdpa_;  // the program's window (every layer's, or the windowed layers')
    std::unique_ptr<CudnnSdpa> full_;  // layers of two kinds: the full layers' graph
    void* shared_ = nullptr;
    std::string note_;
};

}  // namespace preflight::runtime::cuda
