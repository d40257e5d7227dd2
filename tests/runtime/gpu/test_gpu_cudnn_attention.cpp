// cuDNN fused flash attention (bf16, causal, sliding windows, GQA) against the CPU reference, forward
// (output and saved softmax stats) and backward; skipped without a GPU, and with a message
// naming why when libcudnn is missing or refuses the shape.
#include <gtest/gtest.h>

#include "cudnn_sdpa.hpp"
#include "gpu_util.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/runtime/reference.hpp"

namespace preflight::runtime::test {
namespace {

using cuda::bf16;

TEST(CudnnAttention, MatchesTheCpuReference) {
    PF_REQUIRE_GPU();
    if (!cuda::cudnn_library().loaded)
        GTEST_SKIP() << "cuDNN not loadable here: " << cuda::cudnn_library().path_or_error;
    // MHA and GQA (llama-3.2-1b: 32 query heads on 8 KV heads, d = 64), a d = 128 shape, odd s;
    // sliding windows (the last field: Phi-3's and Mistral's mask) of 100 and 37 keys.
    for (ref::AttnShape a : {ref::AttnShape{2, 128, 4, 4, 64}, ref::AttnShape{1, 256, 8, 2, 64},
                             ref::AttnShape{1, 100, 4, 1, 128}, ref::AttnShape{1, 256, 8, 2, 64, 1, 0, 100},
                             ref::AttnShape{2, 128, 4, 4, 128, 1, 0, 37}}) {
        const std::int64_t ws_bytes = runtime_flash_bwd_workspace_bytes(a.b, a.heads, a.kv_heads, a.s, a.d, 2);
        std::string why;
        auto sdpa = cuda::CudnnSdpa::create(a.b, a.s, a.heads, a.kv_heads, a.d, a.window, ws_bytes,
                                            kRuntimeGemmWorkspaceBytes, why);
        ASSERT_TRUE(sdpa) << "cuDNN refused b=" << a.b << " s=" << a.s << " heads=" << a.heads
                          << " kv=" << a.kv_heads << " d=" << a.d << " window=" << a.window << ": " << why;
        std::printf("cuDNN SDPA b=%lld s=%lld h=%lld kv=%lld d=%lld window=%lld: %s\n", (long long)a.b,
                    (long long)a.s, (long long)a.heads, (long long)a.kv_heads, (long long)a.d, (long long)a.window,
                    why.c_str());
        const std::int64_t n = a.b * a.s * a.qkv_width(), no = a.b * a.s * a.heads * a.d;
        const auto qkv = rounded<bf16>(randn(n, 21)), dout = rounded<bf16>(randn(no, 22));
        DeviceBuffer<bf16> dq(qkv), dout_(dout), out(no), dqkv(n);
        DeviceBuffer<float> lse(a.b * a.heads * a.s);
        DeviceBuffer<std::uint8_t> ws(static_cast<std::size_t>(ws_bytes)), shared(kRuntimeGemmWorkspaceBytes);
        sdpa->forward(dq.get(), out.get(), lse.get(), shared.get(), nullptr);
        std::vector<double> o(no), l(a.b * a.heads * a.s), g(n);
        ref::attention_fwd(qkv.data(), o.data(), l.data(), a);
        expect_close(out.download(), o, rtol<bf16>(), "cudnn fwd out");
        // The saved stats are max + log(sum exp) of the scaled scores: the reference's log-sum-exp.
        expect_close(lse.download(), l, 1e-3, "cudnn fwd stats", 1e-3);
        sdpa->backward(dq.get(), out.get(), lse.get(), dout_.get(), dqkv.get(), ws.get(), ws_bytes, shared.get(), nullptr);
        ref::attention_bwd(qkv.data(), dout.data(), g.data(), a);
        expect_close(dqkv.download(), g, 2 * rtol<bf16>(), "cudnn bwd dqkv");
    }
}

// No device needed: every tensor and operation descriptor of both graphs finalises in the
// cuDNN library present (its shape, type and attribute checks); engines need a GPU.
TEST(CudnnGraphHost, EveryDescriptorFinalises) {
    if (!cuda::cudnn_library().loaded)
        GTEST_SKIP() << "cuDNN not loadable here: " << cuda::cudnn_library().path_or_error;
    // The last: Phi-3-mini's sliding window of 2047 keys over 4096 tokens.
    for (ref::AttnShape a : {ref::AttnShape{4, 2048, 32, 8, 64}, ref::AttnShape{2, 128, 4, 4, 64},
                             ref::AttnShape{1, 4096, 32, 32, 96, 1, 0, 2047}}) {
        int ops[2] = {0, 0};
        const std::string err = cuda::CudnnSdpa::check_graphs(a.b, a.s, a.heads, a.kv_heads, a.d, a.window, ops);
        EXPECT_EQ(err, "") << "heads " << a.heads << " kv " << a.kv_heads << " window " << a.window;
        // The window's left edge: 2 gen_index, column + window, compare, select = 5 more in each graph.
        const int window_ops = a.window > 0 ? 5 : 0;
        // Forward: QK^T, scale, 2 gen_index, cmp, select, max, sub, exp, sum, log, add, div, PV = 14.
        EXPECT_EQ(ops[0], 14 + window_ops);
        // Backward: dO*O, row sum, *1 (softmax sum); QK^T, scale, -stats, 4 mask ops, exp; reshape P^T,
        // dV matmul; dO V^T, -softmax sum, *P, scale; reshape dS^T, dK matmul; reshape K, dQ matmul,
        // identity to bf16 = 22, plus the dV and dK head-group reductions with GQA = 24.
        EXPECT_EQ(ops[1], (a.heads != a.kv_heads ? 24 : 22) + window_ops);
    }
}

}  // namespace
}  // namespace preflight::runtime::test
