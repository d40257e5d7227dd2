#include "attention.hpp"

#include "cudnn_sdpa.hpp"
#include "kernels.cuh"
#include "preflight/planner/profiles.hpp"

namespace preflight::runtime::cuda {

AttentionEngine::AttentionEngine(const Program& program, bool want_cudnn) : prog_(program) {
    const Dims& d = program.dims;
    if (program.plan.attention != AttentionKind::flash) return;
    if (program.act != DType::bf16) {
        note_ = "attention: the runtime's flash kernel (fp32 activations; cuDNN's fused attention is bf16 only)";
        return;
    }
    if (!want_cudnn) {
        note_ = "attention: the runtime's flash kernel (cuDNN attention switched off)";
        return;
    }
    if (d.cp > 1) {  // queries at their sequence positions against the gathered K and V (program_cp.cpp)
        note_ = "attention: the runtime's flash kernel (context parallelism: cuDNN is not used for it)";
        return;
    }
    std::string why;
    const std::int64_t workspace = runtime_flash_bwd_workspace_bytes(d.b, d.heads, d.kv_heads, d.s, d.head_dim, 2);
    sdpa_ = CudnnSdpa::create(d.b, d.s, d.heads, d.kv_heads, d.head_dim, d.window, workspace,
                              kRuntimeGemmWorkspaceBytes, why);
    // Layers of two kinds: the full layers' graph beside the windowed one; both or neither.
    if (sdpa_ && d.full_attention_period > 0) {
        std::string why_full;
        full_ = CudnnSdpa::create(d.b, d.s, d.heads, d.kv_heads, d.head_dim, 0, workspace, kRuntimeGemmWorkspaceBytes,
                                  why_full);
        if (!full_) {
            sdpa_.reset();
            why = "the full layers' graph: " + why_full;
        }
    }
    note_ = sdpa_ ? "attention: cuDNN fused flash attention (" + why + ")"
                  : "attention: the runtime's flash kernel (cuDNN fused attention unavailable: " + why + ")";
}

CudnnSdpa* AttentionEngine::graph_for(std::int64_t window) const {
    return window == 0 && full_ ? full_.get() : sdpa_.get();
}

AttentionEngine::~AttentionEngine() = default;

const char* AttentionEngine::backend() const {
    if (prog_.plan.attention != AttentionKind::flash) return "eager";
    return sdpa_ ? "cudnn" : "kernel";
}

void AttentionEngine::forward(const bf16* qkv, bf16* out, float* lse, std::int64_t window, cudaStream_t stream) {
    const Dims& d = prog_.dims;
    if (sdpa_) {
        graph_for(window)->forward(qkv, out, lse, shared_, stream);
        return;
    }
    launch_flash_fwd<bf16>(qkv, out, lse, d.b, d.s, d.heads, d.kv_heads, d.head_dim, window, stream);
}

void AttentionEngine::backward(const bf16* qkv, const bf16* out, const float* lse, const bf16* dout, bf16* dqkv,
                               void* workspace, std::int64_t workspace_bytes, std::int64_t window, cudaStream_t stream) {
    const Dims& d = prog_.dims;
    if (sdpa_) {
        graph_for(window)->backward(qkv, out, lse, dout, dqkv, workspace, workspace_bytes, shared_, stream);
        return;
    }
    launch_flash_bwd<bf16>(qkv, out, lse, dout, dqkv, static_cast<float*>(workspace), d.b, d.s, d.heads, d.kv_heads,
                           d.head_dim, window, stream);
}

}  // namespace preflight::runtime::cuda
