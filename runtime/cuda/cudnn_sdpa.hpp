// cuDNN fused flash attention (forward and backward; bf16 in and out, fp32 softmax
// stats; causal, optionally through a sliding window; GQA) for one fixed shape, built with the cuDNN graph (backend) API of
// cuDNN 9 (cudnn_graph.h). libcudnn is loaded with dlopen at the first use.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>

#include "check.hpp"

namespace preflight::runtime::cuda {

// The cuDNN library as loaded: version and where from, or why not (never throws).
struct CudnnLibrary {
    bool loaded = false;
    std::size_t version = 0;  // cudnnGetVersion(): 91900 for 9.19.0
    std::string path_or_error;
};
const CudnnLibrary& cudnn_library();

class CudnnSdpa {
public:
    // Builds and finalises both graphs for b sequences of s tokens, `heads` query heads,
    // `kv_heads` KV heads of size d, with qkv packed per token as [Q | K | V]. Null, with
    // `why` set, when cuDNN is missing, has no engine for the shape, the backward's fp32
    // dQ accumulator and softmax sum do not fit `workspace_bytes` (the program's flash
    // backward workspace), or an engine's own workspace exceeds `shared_workspace_bytes`
    // (the cuBLASLt workspace, which the stream-ordered ops share); on success `why`
    // describes the engines.
    // `window` > 0: a sliding window (each query sees itself and the window - 1 keys before it).
    static std::unique_ptr<CudnnSdpa> create(std::int64_t b, std::int64_t s, std::int64_t heads,
                                             std::int64_t kv_heads, std::int64_t d, std::int64_t window,
                                             std::int64_t workspace_bytes, std::int64_t shared_workspace_bytes,
                                             std::string& why);
    // Builds and finalises every tensor and operation descriptor of both graphs without a
    // device (no handle, no engine selection): "" when all finalise, else cuDNN's message.
    // `ops` receives the forward and backward operation counts.
    static std::string check_graphs(std::int64_t b, std::int64_t s, std::int64_t heads, std::int64_t kv_heads,
                                    std::int64_t d, std::int64_t window, int (&ops)[2]);
    ~CudnnSdpa();
    CudnnSdpa(const CudnnSdpa&) = delete;
    CudnnSdpa& operator=(const CudnnSdpa&) = delete;

    // out [b*s, heads*d]; lse [b, heads, s] fp32 = max + log(sum exp) of the scaled scores.
    // `shared` is the workspace shared with cuBLASLt (at least shared_workspace_bytes).
    void forward(const bf16* qkv, bf16* out, float* lse, void* shared, cudaStream_t stream);
    // dqkv [b*s, (heads + 2 kv_heads) d] overwritten.
    void backward(const bf16* qkv, const bf16* out, const float* lse, const bf16* dout, bf16* dqkv, void* workspace,
                  std::int64_t workspace_bytes, void* shared, cudaStream_t stream);

    struct Impl;

private:
    explicit CudnnSdpa(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace preflight::runtime::cuda
