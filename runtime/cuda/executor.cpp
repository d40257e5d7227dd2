// The executor: runs a step program on device 0. Every allocation goes through the
// same walk() and TrackingAllocator as the dry run, with a stream-ordered
// cudaMallocAsync backend (no managed memory, no fallback: a failed allocation stops
// the run with phase, request and free memory).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <functional>
#include <memory>
#include <type_traits>

#include "attention.hpp"
#include "gemm.cuh"
#include "kernels.cuh"
#include "preflight/planner/profiles.hpp"
#include "preflight/runtime/nvml_probe.hpp"
#include "preflight/runtime/reference.hpp"
#include "preflight/runtime/runtime.hpp"
#include "preflight/runtime/synthetic.hpp"
#include "preflight/runtime/walker.hpp"

namespace preflight::runtime {

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

namespace cuda {
namespace {

// Stream-ordered allocations from the device's default pool, which keeps freed memory
// (release threshold = max) so steady-state steps make no driver calls.
class CudaBackend final : public AllocBackend {
public:
    explicit CudaBackend(cudaStream_t s) : stream_(s) {}
    void* allocate(std::int64_t bytes) override {
        void* p = nullptr;
        const cudaError_t e = cudaMallocAsync(&p, static_cast<std::size_t>(std::max<std::int64_t>(bytes, 1)), stream_);
        if (e == cudaSuccess) return p;
        // Only an out-of-memory failure is "does not fit"; anything else (a sticky fault
        // an earlier kernel left, a lost device) is a device error naming the op.
        if (classify_cuda_error(static_cast<int>(e)) == FailureKind::out_of_memory) {
            (void)cudaGetLastError();  // clear it; the caller reports the failed allocation
            return nullptr;
        }
        cuda_fail(e, "cudaMallocAsync", __FILE__, __LINE__);
    }
    void release(void* p) override {
        if (poisoned_) return;  // after a sticky fault every call fails: leave it to context teardown
        PF_CUDA_CHECK(cudaFreeAsync(p, stream_));
    }
    std::int64_t free_device_bytes() override {
        std::size_t f = 0, t = 0;
        return cudaMemGetInfo(&f, &t) == cudaSuccess ? static_cast<std::int64_t>(f) : -1;
    }
    const char* name() const override { return "cudaMallocAsync"; }
    void poison() { poisoned_ = true; }

private:
    cudaStream_t stream_;
    bool poisoned_ = false;
};

class DeviceRunner final : public OpRunner {
public:
    DeviceRunner(const Program& p, cudaStream_t s, std::uint64_t seed, Gemm& gemm, bool debug_sync = false)
        : P(p), d(p.dims), stream(s), seed_(seed), gemm_(gemm), debug_sync_(debug_sync) {}
    void set_step(std::int64_t step) { step_ = step; }
    // Calls `hook` (after synchronising the stream) when op `op` is about to run, its
    // allocations made: where the driver's used memory is sampled.
    void sample_before(const Op* op, std::function<void()> hook) {
        sample_op_ = op;
        sample_hook_ = std::move(hook);
    }
    bool checks_each_op() const override { return debug_sync_; }
    void set_attention(AttentionEngine* a) { attention_ = a; }
    // GeLU fused into the fc1 GEMM (cuBLASLt GELU_AUX_BIAS) and its gradient into the fc2
    // dgrad GEMM (DGELU), bf16 programs only; the program (and so the memory) is unchanged:
    // the fc1 GEMM runs at the activation op, once the activation's buffer exists.
    void set_fuse_gelu(bool on) { fuse_gelu_ = on && P.act == DType::bf16 && P.model.mlp == MlpKind::gelu; }
    void run(const Op& op, const BufferTable& t) override {
        if (&op == sample_op_ && sample_hook_) {
            PF_CUDA_CHECK(cudaStreamSynchronize(stream));
            sample_hook_();
        }
        if (P.act == DType::f32)
            run_t<float>(op, t);
        else
            run_t<bf16>(op, t);
        if (debug_sync_) {  // name the failing op: everything it launched has finished and been checked
            PF_CUDA_CHECK(cudaGetLastError());
            PF_CUDA_CHECK(cudaStreamSynchronize(stream));
        }
    }
    const float* loss_sum(const BufferTable& t) const { return static_cast<const float*>(t[static_cast<std::size_t>(P.scalars)]); }

private:
    const Program& P;
    const Dims& d;
    cudaStream_t stream;
    std::uint64_t seed_;
    Gemm& gemm_;
    bool debug_sync_ = false;
    std::int64_t step_ = 1;
    AttentionEngine* attention_ = nullptr;
    bool fuse_gelu_ = false;
    const Op* deferred_fc1_ = nullptr;    // the fc1 GEMM waiting for its activation op
    const Op* skip_gelu_bwd_ = nullptr;   // done by the fc2 dgrad's epilogue
    const Op* sample_op_ = nullptr;
    std::function<void()> sample_hook_;

    template <class T>
    static T* at(const BufferTable& t, const View& v) {
        return static_cast<T*>(t[static_cast<std::size_t>(v.buffer)]) + v.offset;
    }
    template <class T>
    static T* base(const BufferTable& t, BufferId b) {
        return b == kNoBuffer ? nullptr : static_cast<T*>(t[static_cast<std::size_t>(b)]);
    }
    template <class T>
    T* param(const BufferTable& t, ParamId id) const {
        return id == kNoParam ? nullptr : base<T>(t, P.weights) + P.params[static_cast<std::size_t>(id)].offset;
    }
    template <class T>
    T* grad(const BufferTable& t, ParamId id) const {
        return id == kNoParam ? nullptr : base<T>(t, P.grads) + P.params[static_cast<std::size_t>(id)].offset;
    }
    float norm_eps() const { return static_cast<float>(P.hyper.norm_eps); }
    bool layernorm() const { return P.model.norm == NormKind::layernorm; }

    template <class T>
    void init(const BufferTable& t) {
        gemm_.set_workspace(t[static_cast<std::size_t>(P.gemm_workspace)], static_cast<std::size_t>(kRuntimeGemmWorkspaceBytes));
        if (attention_) attention_->set_shared_workspace(t[static_cast<std::size_t>(P.gemm_workspace)]);
        const std::int64_t np = P.param_elements;
        float* master = base<float>(t, P.master_weights);
        PF_CUDA_CHECK(cudaMemsetAsync(t[static_cast<std::size_t>(P.weights)], 0, np * sizeof(T), stream));
        if (master) PF_CUDA_CHECK(cudaMemsetAsync(master, 0, np * 4, stream));
        const double resid_std = P.hyper.init_std / std::sqrt(2.0 * static_cast<double>(d.layers));  // GPT-2 paper, sec. 2.3
        for (std::size_t i = 0; i < P.params.size(); ++i) {
            const ParamSpec& ps = P.params[i];
            T* w = base<T>(t, P.weights) + ps.offset;
            float* m = master ? master + ps.offset : nullptr;
            const bool is_norm = ps.cols == 1 && ps.name.find("norm") != std::string::npos && ps.name.find(".weight") != std::string::npos;
            if (ps.cols == 1) {
                launch_fill<T>(w, m, ps.numel(), is_norm ? 1.f : 0.f, stream);
                continue;
            }
            const bool resid = ps.name.find("o_proj") != std::string::npos || ps.name.find("down_proj") != std::string::npos ||
                               ps.name.find("fc2") != std::string::npos;
            std::int64_t n = ps.numel();
            if (static_cast<ParamId>(i) == P.wte || static_cast<ParamId>(i) == P.head) n = d.vocab * d.h;  // padding rows stay 0
            launch_init_normal<T>(w, m, n, static_cast<float>(resid ? resid_std : P.hyper.init_std),
                                  mix64(seed_ ^ mix64(i + 1)), stream);
        }
        PF_CUDA_CHECK(cudaMemsetAsync(t[static_cast<std::size_t>(P.grads)], 0, np * dtype_bytes(P.grad), stream));
        if (P.grads_fp32 != kNoBuffer) PF_CUDA_CHECK(cudaMemsetAsync(t[static_cast<std::size_t>(P.grads_fp32)], 0, np * 4, stream));
        PF_CUDA_CHECK(cudaMemsetAsync(t[static_cast<std::size_t>(P.moment1)], 0, np * 4, stream));
        if (P.moment2 != kNoBuffer) PF_CUDA_CHECK(cudaMemsetAsync(t[static_cast<std::size_t>(P.moment2)], 0, np * 4, stream));
        PF_CUDA_CHECK(cudaMemsetAsync(t[static_cast<std::size_t>(P.scalars)], 0, kRuntimeScalarsBytes, stream));
        if (P.rope_cos != kNoBuffer) {
            // Tables computed on the host in double by the CPU reference's own function (the
            // model's rope_theta and rope_scaling), so both use the same frequencies.
            const std::size_t n = static_cast<std::size_t>(d.s * d.head_dim);
            std::vector<double> c(n), sn(n);
            ref::rope_tables(c.data(), sn.data(), d.s, d.head_dim,
                             ref::rope_inv_freq(d.head_dim, P.hyper.rope_base, P.hyper.rope_scaling));
            std::vector<float> cf(c.begin(), c.end()), sf(sn.begin(), sn.end());
            PF_CUDA_CHECK(cudaMemcpyAsync(base<float>(t, P.rope_cos), cf.data(), n * 4, cudaMemcpyHostToDevice, stream));
            PF_CUDA_CHECK(cudaMemcpyAsync(base<float>(t, P.rope_sin), sf.data(), n * 4, cudaMemcpyHostToDevice, stream));
            PF_CUDA_CHECK(cudaStreamSynchronize(stream));  // the host vectors go out of scope
        }
    }

    // The op `k` places after `op` in its section (step, set-up, teardown), or null.
    const Op* after(const Op& op, std::size_t k) const {
        for (const std::vector<Op>* sec : {&P.step, &P.setup, &P.teardown}) {
            if (sec->empty() || &op < sec->data() || &op >= sec->data() + sec->size()) continue;
            const std::size_t i = static_cast<std::size_t>(&op - sec->data()) + k;
            return i < sec->size() ? &(*sec)[i] : nullptr;
        }
        return nullptr;
    }

    template <class T>
    void gemm_linear_fwd(const Op& op, const BufferTable& t, const Op* gelu = nullptr) {
        GemmArgs g;
        g.trans_b = true;  // W is [N, K]
        g.M = op.v[1].rows;
        g.N = op.v[1].cols;
        g.K = op.v[0].cols;
        g.A = at<T>(t, op.v[0]);
        g.lda = op.v[0].ld;
        g.B = param<T>(t, op.p0);
        g.ldb = g.K;
        g.D = at<T>(t, op.v[1]);
        g.ldd = op.v[1].ld;
        if (op.v[2].buffer != kNoBuffer) {  // residual stream added (beta = 1)
            g.C = at<T>(t, op.v[2]);
            g.ldc = op.v[2].ld;
            g.beta = 1.f;
        }
        g.bias = param<T>(t, op.p1);
        if (gelu) {  // D = gelu(x W^T + b) into the activation, aux = the pre-activation (fc1 out)
            g.epilogue = GemmArgs::Epilogue::gelu_aux;
            g.aux = g.D;
            g.ldaux = g.ldd;
            g.D = at<T>(t, gelu->v[1]);
            g.ldd = gelu->v[1].ld;
        }
        gemm_.run(g, stream);
    }

    template <class T>
    void gemm_linear_bwd_data(const Op& op, const BufferTable& t, const Op* gelu_bwd = nullptr) {
        GemmArgs g;  // dX[M, K] = dY[M, N] W[N, K]
        g.M = op.v[0].rows;
        g.N = op.v[1].cols;
        g.K = op.v[0].cols;
        g.A = at<T>(t, op.v[0]);
        g.lda = op.v[0].ld;
        g.B = param<T>(t, op.p0);
        g.ldb = g.N;
        g.D = at<T>(t, op.v[1]);
        g.ldd = op.v[1].ld;
        if (op.accumulate) {
            g.C = g.D;
            g.ldc = g.ldd;
            g.beta = 1.f;
        }
        if (gelu_bwd) {  // dA * gelu'(fc1 out) straight into d(fc1 out)
            g.epilogue = GemmArgs::Epilogue::dgelu;
            g.aux = at<T>(t, gelu_bwd->v[1]);
            g.ldaux = gelu_bwd->v[1].ld;
        }
        gemm_.run(g, stream);
    }

    template <class T>
    void gemm_linear_bwd_weight(const Op& op, const BufferTable& t) {
        GemmArgs g;  // dW[N, K] += dY^T X
        g.trans_a = true;
        g.M = op.v[0].cols;
        g.N = op.v[1].cols;
        g.K = op.v[0].rows;
        g.A = at<T>(t, op.v[0]);
        g.lda = op.v[0].ld;
        g.B = at<T>(t, op.v[1]);
        g.ldb = op.v[1].ld;
        g.D = grad<T>(t, op.p0);
        g.ldd = g.N;
        g.C = g.D;
        g.ldc = g.N;
        g.beta = 1.f;
        gemm_.run(g, stream);
        if (op.p1 != kNoParam) launch_bias_grad<T>(at<T>(t, op.v[0]), grad<T>(t, op.p1), op.v[0].rows, op.v[0].cols, op.v[0].ld, stream);
    }

    // Eager attention GEMMs, batched over KV heads for each (sequence, head-in-group).
    struct EagerGeo {
        std::int64_t s, H, KV, g, dh, C, qw, kvw, s2;
    };
    EagerGeo eg() const {
        return {d.s, d.heads, d.kv_heads, d.heads / d.kv_heads, d.head_dim, d.qkv_width, d.q_width, d.kv_width, d.s * d.s};
    }

    template <class T>
    void eager(const Op& op, const BufferTable& t) {
        const EagerGeo e = eg();
        const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(e.dh)));
        for (std::int64_t bb = 0; bb < d.b; ++bb)
            for (std::int64_t j = 0; j < e.g; ++j) {
                GemmArgs g;
                g.batch = static_cast<int>(e.KV);
                const std::int64_t sc_off = (bb * e.H + j) * e.s2, sc_stride = e.g * e.s2;
                switch (op.kind) {
                    case OpKind::eager_scores: {  // S = scale Q K^T
                        const T* qkv = at<T>(t, op.v[0]) + bb * e.s * e.C;
                        g.trans_b = true;
                        g.M = e.s, g.N = e.s, g.K = e.dh;
                        g.A = qkv + j * e.dh, g.lda = e.C, g.stride_a = e.g * e.dh;
                        g.B = qkv + e.qw, g.ldb = e.C, g.stride_b = e.dh;
                        g.D = at<T>(t, op.v[1]) + sc_off, g.ldd = e.s, g.stride_d = sc_stride;
                        g.alpha = scale;
                        gemm_.run(g, stream);
                        break;
                    }
                    case OpKind::eager_pv: {  // O = P V
                        const T* qkv = at<T>(t, op.v[1]) + bb * e.s * e.C;
                        g.M = e.s, g.N = e.dh, g.K = e.s;
                        g.A = at<T>(t, op.v[0]) + sc_off, g.lda = e.s, g.stride_a = sc_stride;
                        g.B = qkv + e.qw + e.kvw, g.ldb = e.C, g.stride_b = e.dh;
                        g.D = at<T>(t, op.v[2]) + bb * e.s * e.qw + j * e.dh, g.ldd = e.qw, g.stride_d = e.g * e.dh;
                        gemm_.run(g, stream);
                        break;
                    }
                    case OpKind::eager_dp: {  // dP = dO V^T
                        const T* qkv = at<T>(t, op.v[1]) + bb * e.s * e.C;
                        g.trans_b = true;
                        g.M = e.s, g.N = e.s, g.K = e.dh;
                        g.A = at<T>(t, op.v[0]) + bb * e.s * e.qw + j * e.dh, g.lda = e.qw, g.stride_a = e.g * e.dh;
                        g.B = qkv + e.qw + e.kvw, g.ldb = e.C, g.stride_b = e.dh;
                        g.D = at<T>(t, op.v[2]) + sc_off, g.ldd = e.s, g.stride_d = sc_stride;
                        gemm_.run(g, stream);
                        break;
                    }
                    case OpKind::eager_dqkv: {
                        const T* ds = at<T>(t, op.v[0]) + sc_off;
                        const T* p = at<T>(t, op.v[1]) + sc_off;
                        const T* dout = at<T>(t, op.v[2]) + bb * e.s * e.qw + j * e.dh;
                        const T* qkv = at<T>(t, op.v[3]) + bb * e.s * e.C;
                        T* dqkv = at<T>(t, op.v[4]) + bb * e.s * e.C;
                        // dQ_h = scale dS K
                        GemmArgs q = g;
                        q.M = e.s, q.N = e.dh, q.K = e.s;
                        q.A = ds, q.lda = e.s, q.stride_a = sc_stride;
                        q.B = qkv + e.qw, q.ldb = e.C, q.stride_b = e.dh;
                        q.D = dqkv + j * e.dh, q.ldd = e.C, q.stride_d = e.g * e.dh;
                        q.alpha = scale;
                        gemm_.run(q, stream);
                        // dK_kv += scale dS^T Q_h ; dV_kv += P^T dO_h (summed over the group's heads)
                        GemmArgs k = g;
                        k.trans_a = true;
                        k.M = e.s, k.N = e.dh, k.K = e.s;
                        k.A = ds, k.lda = e.s, k.stride_a = sc_stride;
                        k.B = qkv + j * e.dh, k.ldb = e.C, k.stride_b = e.g * e.dh;
                        k.D = dqkv + e.qw, k.ldd = e.C, k.stride_d = e.dh;
                        k.alpha = scale;
                        if (j > 0) k.C = k.D, k.ldc = k.ldd, k.stride_c = k.stride_d, k.beta = 1.f;
                        gemm_.run(k, stream);
                        GemmArgs v = k;
                        v.alpha = 1.f;
                        v.A = p;
                        v.B = dout, v.ldb = e.qw, v.stride_b = e.g * e.dh;
                        v.D = dqkv + e.qw + e.kvw;
                        v.C = j > 0 ? v.D : nullptr;
                        gemm_.run(v, stream);
                        break;
                    }
                    default: break;
                }
            }
    }

    template <class T>
    void run_t(const Op& op, const BufferTable& t) {
        switch (op.kind) {
            case OpKind::init_params: init<T>(t); break;
            case OpKind::teardown: break;
            case OpKind::zero_grads:
                PF_CUDA_CHECK(cudaMemsetAsync(t[static_cast<std::size_t>(P.grads)], 0, P.param_elements * dtype_bytes(P.grad), stream));
                if (P.grads_fp32 != kNoBuffer)
                    PF_CUDA_CHECK(cudaMemsetAsync(t[static_cast<std::size_t>(P.grads_fp32)], 0, P.param_elements * 4, stream));
                PF_CUDA_CHECK(cudaMemsetAsync(t[static_cast<std::size_t>(P.scalars)], 0, kRuntimeScalarsBytes, stream));
                break;
            case OpKind::tokens:
            case OpKind::labels:
                launch_synthetic_tokens(at<std::int64_t>(t, op.v[0]), d.b, d.s, d.vocab, seed_, step_, op.phase.micro_batch,
                                        op.kind == OpKind::labels, stream);
                break;
            case OpKind::embedding_fwd:
                launch_embedding_fwd<T>(at<std::int64_t>(t, op.v[0]), param<T>(t, op.p0), param<T>(t, op.p1),
                                        at<T>(t, op.v[1]), d.b, d.s, d.h, stream);
                break;
            case OpKind::embedding_bwd:
                launch_embedding_bwd<T>(at<std::int64_t>(t, op.v[0]), at<T>(t, op.v[1]), grad<T>(t, op.p0),
                                        grad<T>(t, op.p1), d.b, d.s, d.h, stream);
                break;
            case OpKind::norm_fwd:
                launch_norm_fwd<T>(at<T>(t, op.v[0]), param<T>(t, op.p0), param<T>(t, op.p1), at<T>(t, op.v[1]), d.rows,
                                   d.h, norm_eps(), layernorm(), stream);
                break;
            case OpKind::norm_bwd:
                launch_norm_bwd<T>(at<T>(t, op.v[0]), param<T>(t, op.p0), at<T>(t, op.v[1]), at<T>(t, op.v[2]),
                                   at<float>(t, op.v[3]), grad<T>(t, op.p0), grad<T>(t, op.p1), d.rows, d.h, norm_eps(),
                                   layernorm(), op.accumulate, stream);
                break;
            case OpKind::linear_fwd: {
                const Op* next = fuse_gelu_ ? after(op, 1) : nullptr;
                if (next && next->kind == OpKind::gelu_fwd && next->v[0].buffer == op.v[1].buffer && op.v[2].buffer == kNoBuffer &&
                    op.v[1].ld % 8 == 0 && next->v[1].ld % 8 == 0) {
                    deferred_fc1_ = &op;  // runs with the activation op
                    break;
                }
                gemm_linear_fwd<T>(op, t);
                break;
            }
            case OpKind::linear_bwd_data: {
                // fc2 dgrad, fc2 wgrad, activation backward on the dgrad's output: fuse the last.
                const Op* gb = fuse_gelu_ ? after(op, 2) : nullptr;
                if (gb && gb->kind == OpKind::gelu_bwd && gb->v[0].buffer == op.v[1].buffer && !op.accumulate &&
                    op.v[1].ld % 8 == 0 && gb->v[1].ld % 8 == 0) {
                    gemm_linear_bwd_data<T>(op, t, gb);
                    skip_gelu_bwd_ = gb;
                    break;
                }
                gemm_linear_bwd_data<T>(op, t);
                break;
            }
            case OpKind::linear_bwd_weight: gemm_linear_bwd_weight<T>(op, t); break;
            case OpKind::rope_fwd:
            case OpKind::rope_bwd:
                launch_rope<T>(at<T>(t, op.v[0]), base<float>(t, P.rope_cos), base<float>(t, P.rope_sin), d.b, d.s, d.heads,
                               d.kv_heads, d.head_dim, op.kind == OpKind::rope_bwd, stream);
                break;
            case OpKind::flash_fwd:
                if constexpr (std::is_same_v<T, bf16>) {
                    if (attention_) {
                        attention_->forward(at<T>(t, op.v[0]), at<T>(t, op.v[1]), at<float>(t, op.v[2]), stream);
                        break;
                    }
                }
                launch_flash_fwd<T>(at<T>(t, op.v[0]), at<T>(t, op.v[1]), at<float>(t, op.v[2]), d.b, d.s, d.heads,
                                    d.kv_heads, d.head_dim, stream);
                break;
            case OpKind::flash_bwd:
                if constexpr (std::is_same_v<T, bf16>) {
                    if (attention_) {
                        attention_->backward(at<T>(t, op.v[0]), at<T>(t, op.v[1]), at<float>(t, op.v[2]),
                                             at<T>(t, op.v[3]), at<T>(t, op.v[4]), at<std::uint8_t>(t, op.v[5]),
                                             op.v[5].cols, stream);
                        break;
                    }
                }
                launch_flash_bwd<T>(at<T>(t, op.v[0]), at<T>(t, op.v[1]), at<float>(t, op.v[2]), at<T>(t, op.v[3]),
                                    at<T>(t, op.v[4]), reinterpret_cast<float*>(at<std::uint8_t>(t, op.v[5])), d.b, d.s,
                                    d.heads, d.kv_heads, d.head_dim, stream);
                break;
            case OpKind::eager_scores:
            case OpKind::eager_pv:
            case OpKind::eager_dp:
            case OpKind::eager_dqkv: eager<T>(op, t); break;
            case OpKind::eager_softmax:
                launch_causal_softmax_fwd<T>(at<T>(t, op.v[0]), at<T>(t, op.v[1]), op.v[0].rows, d.s, stream);
                break;
            case OpKind::eager_softmax_bwd:
                launch_causal_softmax_bwd<T>(at<T>(t, op.v[0]), at<T>(t, op.v[1]), at<T>(t, op.v[2]), op.v[0].rows, d.s,
                                             stream);
                break;
            case OpKind::swiglu_fwd: launch_swiglu_fwd<T>(at<T>(t, op.v[0]), at<T>(t, op.v[1]), d.rows, d.ffn, stream); break;
            case OpKind::swiglu_bwd: launch_swiglu_bwd<T>(at<T>(t, op.v[1]), at<T>(t, op.v[0]), d.rows, d.ffn, stream); break;
            case OpKind::gelu_fwd:
                if (deferred_fc1_) {
                    const Op* fc1 = deferred_fc1_;
                    deferred_fc1_ = nullptr;
                    gemm_linear_fwd<T>(*fc1, t, &op);
                    break;
                }
                launch_gelu_fwd<T>(at<T>(t, op.v[0]), at<T>(t, op.v[1]), d.rows * d.ffn, stream);
                break;
            case OpKind::gelu_bwd:
                if (skip_gelu_bwd_ == &op) {
                    skip_gelu_bwd_ = nullptr;
                    break;
                }
                launch_gelu_bwd<T>(at<T>(t, op.v[1]), at<T>(t, op.v[0]), at<T>(t, op.v[0]), d.rows * d.ffn, stream);
                break;
            case OpKind::cross_entropy:
                launch_cross_entropy<T>(at<T>(t, op.v[0]), at<std::int64_t>(t, op.v[1]), at<float>(t, op.v[2]), d.rows,
                                        d.vocab, d.vocab_padded,
                                        static_cast<float>(1.0 / static_cast<double>(d.rows * d.grad_acc)), stream);
                break;
            case OpKind::loss_accumulate:
                launch_loss_sum(at<float>(t, op.v[0]), d.rows, base<float>(t, P.scalars), stream);
                break;
            case OpKind::grad_accumulate:
                launch_grad_accumulate(base<float>(t, P.grads_fp32), base<bf16>(t, P.grads), P.param_elements, stream);
                break;
            case OpKind::optimizer: optimizer(t); break;
        }
    }

    void optimizer(const BufferTable& t) {
        if (P.plan.optimizer == Optimizer::adamw) {
            adamw_multi(t);
            return;
        }
        const TrainHyper& hp = P.hyper;
        for (const ParamSpec& ps : P.params) {
            OptimizerArgs a;
            a.grad_f32 = P.grads_fp32 != kNoBuffer || P.grad == DType::f32;
            a.grad = P.grads_fp32 != kNoBuffer
                         ? static_cast<const void*>(base<float>(t, P.grads_fp32) + ps.offset)
                         : static_cast<const void*>(static_cast<const char*>(t[static_cast<std::size_t>(P.grads)]) +
                                                    ps.offset * dtype_bytes(P.grad));
            a.master = P.master ? base<float>(t, P.master_weights) + ps.offset : nullptr;
            a.weights_f32 = P.weight == DType::f32;
            a.weights = static_cast<char*>(t[static_cast<std::size_t>(P.weights)]) + ps.offset * dtype_bytes(P.weight);
            a.m = base<float>(t, P.moment1) + ps.offset;
            a.v = P.moment2 != kNoBuffer ? base<float>(t, P.moment2) + ps.offset : nullptr;
            a.n = ps.numel();
            a.lr = static_cast<float>(hp.lr);
            a.beta1 = static_cast<float>(hp.beta1);
            a.beta2 = static_cast<float>(hp.beta2);
            a.eps = static_cast<float>(hp.eps);
            a.weight_decay = ps.decay ? static_cast<float>(hp.weight_decay) : 0.f;
            a.momentum = static_cast<float>(hp.momentum);
            a.step = step_;
            if (P.plan.optimizer == Optimizer::adamw)
                launch_adamw(a, stream);
            else
                launch_sgd(a, stream);
        }
    }
    // AdamW in as few launches as possible: the whole flat parameter layout, up to
    // kAdamwMaxTensors tensors per launch (a tensor's padding to 64 elements included).
    void adamw_multi(const BufferTable& t) {
        const TrainHyper& hp = P.hyper;
        OptimizerArgs a;
        a.grad_f32 = P.grads_fp32 != kNoBuffer || P.grad == DType::f32;
        a.grad = P.grads_fp32 != kNoBuffer ? static_cast<const void*>(base<float>(t, P.grads_fp32))
                                           : static_cast<const void*>(t[static_cast<std::size_t>(P.grads)]);
        a.master = P.master ? base<float>(t, P.master_weights) : nullptr;
        a.weights_f32 = P.weight == DType::f32;
        a.weights = t[static_cast<std::size_t>(P.weights)];
        a.m = base<float>(t, P.moment1);
        a.v = base<float>(t, P.moment2);
        a.lr = static_cast<float>(hp.lr);
        a.beta1 = static_cast<float>(hp.beta1);
        a.beta2 = static_cast<float>(hp.beta2);
        a.eps = static_cast<float>(hp.eps);
        a.weight_decay = static_cast<float>(hp.weight_decay);
        a.step = step_;
        // Tensors in layout order (a tied head shares the embedding's slot and is skipped).
        std::vector<std::int64_t> begin;
        std::vector<char> decay;
        for (const ParamSpec& ps : P.params) {
            if (!begin.empty() && ps.offset <= begin.back()) continue;
            begin.push_back(ps.offset);
            decay.push_back(ps.decay ? 1 : 0);
        }
        for (std::size_t k = 0; k < begin.size(); k += kAdamwMaxTensors) {
            const std::size_t n = std::min<std::size_t>(kAdamwMaxTensors, begin.size() - k);
            const std::int64_t end = k + n < begin.size() ? begin[k + n] : P.param_elements;
            bool flags[kAdamwMaxTensors];
            for (std::size_t j = 0; j < n; ++j) flags[j] = decay[k + j] != 0;
            launch_adamw_multi(a, begin.data() + k, flags, static_cast<int>(n), end, stream);
        }
    }
};

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace
}  // namespace cuda

std::vector<double> download_buffer(const Program& prog, const BufferTable& table, BufferId id, cudaStream_t stream);

namespace {

// The initial parameters for the PyTorch reference (RunOptions::save_init_path).
void save_initial_parameters(const Program& prog, const BufferTable& table, const std::string& path,
                             cudaStream_t stream) {
    const std::vector<double> w =
        download_buffer(prog, table, prog.master_weights != kNoBuffer ? prog.master_weights : prog.weights, stream);
    std::string bytes(w.size() * 4, '\0');
    for (std::size_t i = 0; i < w.size(); ++i) {
        const float f = static_cast<float>(w[i]);
        std::memcpy(&bytes[i * 4], &f, 4);
    }
    write_file_atomic(path, bytes);
    nlohmann::json idx = {{"model", prog.model.name}, {"dtype", "float32"}, {"elements", w.size()},
                          {"vocab", prog.dims.vocab}, {"tensors", nlohmann::json::array()}};
    for (const ParamSpec& ps : prog.params)
        idx["tensors"].push_back({{"name", ps.name}, {"offset", ps.offset}, {"rows", ps.rows}, {"cols", ps.cols}});
    idx["tied_embeddings"] = prog.model.tied_embeddings;
    write_file_atomic(path + ".json", idx.dump(1) + "\n");
}

// Device-used memory (total - free) now, or -1.
std::int64_t device_used_now() {
    std::size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    return static_cast<std::int64_t>(t - f);
}

// The driver-side samples of one run, baseline subtracted as they are taken.
struct DriverSampler {
    DriverMemory& out;
    NvmlProbe& nvml;
    std::int64_t baseline = 0, nvml_baseline = -1;
    std::int64_t sample() {  // device used - baseline; updates the peaks
        const std::int64_t used = device_used_now();
        if (used < 0) return -1;
        const std::int64_t v = used - baseline;
        out.used_peak_bytes = std::max(out.used_peak_bytes.value_or(v), v);
        ++out.samples;
        if (nvml_baseline >= 0)
            if (const auto n = nvml.used_bytes())
                out.nvml_used_peak_bytes = std::max(out.nvml_used_peak_bytes.value_or(*n - nvml_baseline), *n - nvml_baseline);
        return v;
    }
};

}  // namespace

RunReport run_on_device(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan_in, const RunOptions& opt) {
    using namespace cuda;
    RunReport r = report_for("device", model, gpu, plan_in, opt);
    const Plan plan = r.plan;
    Program prog = build_program(model, plan);
    prog.hyper = opt.hyper;
    use_model_rope(prog);
    r.measured.warmup_steps = opt.warmup;
    r.measured.debug_sync = opt.debug_sync;
    DriverMemory& dm = r.measured.driver;

    // NVML first (its used memory before this process creates a context is the baseline),
    // then the context, then the libraries: each step's cost measured by the driver.
    char pci[32] = {};
    const bool have_pci = cudaDeviceGetPCIBusId(pci, sizeof pci, 0) == cudaSuccess;  // no context needed
    if (!have_pci) (void)cudaGetLastError();
    NvmlProbe nvml(have_pci ? std::string(pci) : std::string());
    dm.nvml = nvml.available() ? "ok" : nvml.why();
    const std::optional<std::int64_t> nvml_before = nvml.used_bytes();

    PF_CUDA_CHECK(cudaSetDevice(0));
    PF_CUDA_CHECK(cudaFree(nullptr));  // creates the primary context
    const std::int64_t used_after_context = device_used_now();
    DriverSampler sampler{dm, nvml};
    if (nvml_before) {
        sampler.baseline = *nvml_before;
        sampler.nvml_baseline = *nvml_before;
        dm.baseline_source = "nvml-before-context";
        dm.context_bytes = used_after_context - *nvml_before;
    } else {
        sampler.baseline = used_after_context;  // the context itself is then not counted
        dm.baseline_source = "cudaMemGetInfo-after-context";
    }
    dm.baseline_bytes = sampler.baseline;

    cudaDeviceProp prop{};
    PF_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    int driver = 0, rt = 0;
    PF_CUDA_CHECK(cudaDriverGetVersion(&driver));
    PF_CUDA_CHECK(cudaRuntimeGetVersion(&rt));
    auto ver = [](int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); };
    r.device = DeviceInfo{prop.name, ver(driver), ver(rt), static_cast<std::int64_t>(prop.totalGlobalMem),
                          prop.major * 10 + prop.minor};
    cudaStream_t stream = nullptr;
    PF_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaMemPool_t pool = nullptr;
    PF_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
    std::uint64_t threshold = std::numeric_limits<std::uint64_t>::max();
    PF_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    Gemm gemm(prog.act == DType::f32);
    AttentionEngine attention(prog, opt.cudnn_attention);
    r.measured.attention_backend = attention.backend();
    if (!attention.note().empty() && opt.progress) opt.progress(attention.note());
    std::size_t free_b = 0, total_b = 0;
    PF_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    r.measured.overhead_bytes = static_cast<std::int64_t>(total_b - free_b) - sampler.baseline;  // context + libraries
    dm.libraries_bytes = static_cast<std::int64_t>(total_b - free_b) - used_after_context;
    sampler.sample();
    std::int64_t min_free = static_cast<std::int64_t>(free_b);

    const auto t0 = std::chrono::steady_clock::now();
    CudaBackend backend(stream);
    TrackingAllocator alloc(backend, [t0] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
    BufferTable table;
    DeviceRunner runner(prog, stream, opt.seed, gemm, opt.debug_sync);
    runner.set_attention(&attention);
    runner.set_fuse_gelu(opt.fuse_epilogues);
    const std::int64_t peak_op = peak_step_op(prog);
    float* host_loss = nullptr;
    PF_CUDA_CHECK(cudaMallocHost(&host_loss, sizeof(float)));
    cudaEvent_t start = nullptr, stop = nullptr;
    PF_CUDA_CHECK(cudaEventCreate(&start));
    PF_CUDA_CHECK(cudaEventCreate(&stop));
    const double tokens_per_step = static_cast<double>(plan.global_batch_tokens());
    int step_now = 0;  // 1-based step in flight (0: set-up / teardown)
    try {
        walk(prog, prog.setup, alloc, table, &runner, "set-up");
        PF_CUDA_CHECK(cudaStreamSynchronize(stream));
        dm.after_setup_bytes = sampler.sample();
        if (!opt.save_init_path.empty()) save_initial_parameters(prog, table, opt.save_init_path, stream);
        std::uint64_t zero = 0;
        PF_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
        PF_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero));
        const int total_steps = opt.warmup + opt.steps;
        // The timeline is recorded on a warm-up step when there is one (its host-side
        // labelling would otherwise perturb a timed step); so is the synchronised sample
        // of the driver's used memory at the predicted peak op (step 1 always).
        const int record_at = opt.timeline ? std::max(0, opt.warmup - 1) : -1;
        for (int i = 0; i < total_steps; ++i) {
            step_now = i + 1;
            runner.set_step(i + 1);
            alloc.set_recording(i == record_at);
            if (i == 0 && peak_op >= 0) {
                const Op* at = &prog.step[static_cast<std::size_t>(peak_op)];
                dm.peak_op = describe(prog, *at);
                runner.sample_before(at, [&] { dm.at_peak_op_bytes = sampler.sample(); });
            } else {
                runner.sample_before(nullptr, {});
            }
            PF_CUDA_CHECK(cudaEventRecord(start, stream));
            walk(prog, prog.step, alloc, table, &runner, "step", i + 1);
            try {
                PF_CUDA_CHECK(cudaEventRecord(stop, stream));
                PF_CUDA_CHECK(cudaMemcpyAsync(host_loss, runner.loss_sum(table), sizeof(float), cudaMemcpyDeviceToHost, stream));
                PF_CUDA_CHECK(cudaEventSynchronize(stop));
                PF_CUDA_CHECK(cudaStreamSynchronize(stream));
            } catch (const DeviceError& e) {
                // An asynchronous failure surfaced at the end of the step: name the step's last op.
                throw OpError(locate(prog, prog.step, prog.step.size() - 1, "step", i + 1, false), e.kind, e.code, e.what());
            }
            alloc.set_recording(false);
            float ms = 0;
            PF_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
            const double loss = static_cast<double>(*host_loss) / static_cast<double>(prog.dims.rows * prog.dims.grad_acc);
            r.measured.losses.push_back(loss);
            if (i >= opt.warmup) r.measured.step_times_s.push_back(ms / 1e3);
            const std::int64_t used = sampler.sample();
            if (i == 0) dm.after_warmup_bytes = used;
            std::size_t f = 0, tt = 0;
            if (cudaMemGetInfo(&f, &tt) == cudaSuccess) min_free = std::min(min_free, static_cast<std::int64_t>(f));
            if (opt.progress) {
                char line[200];
                std::snprintf(line, sizeof line, "step %d/%d%s: loss %.4f, %.1f ms, %.0f tokens/s", i + 1, total_steps,
                              i < opt.warmup ? " (warm-up)" : "", loss, ms, tokens_per_step / (ms / 1e3));
                opt.progress(line);
            }
            if (!std::isfinite(loss)) throw std::runtime_error("loss is not finite at step " + std::to_string(i + 1));
        }
        step_now = 0;
        walk(prog, prog.teardown, alloc, table, &runner, "teardown");
        PF_CUDA_CHECK(cudaStreamSynchronize(stream));
    } catch (const AllocationError& e) {
        r.status = "allocation-failed";
        r.failure = FailureInfo{};
        r.failure->kind = std::string(to_string(FailureKind::out_of_memory));
        r.failure->where = e.where;
        r.failure->buffer = e.buffer;
        r.failure->category = std::string(to_string(e.category));
        r.failure->requested_bytes = e.requested_bytes;
        r.failure->free_bytes = e.free_bytes;
        r.failure->in_use_bytes = e.in_use_bytes;
        r.failure->message = e.what();
    } catch (const OpError& e) {
        r.status = "error";
        r.failure = FailureInfo{};
        r.failure->kind = std::string(to_string(e.kind));
        r.failure->op = e.at;
        r.failure->code = e.code;
        r.failure->where = e.at.label;
        r.failure->message = e.what();
        if (e.kind == FailureKind::device_fault) backend.poison();
    } catch (const DeviceError& e) {
        r.status = "error";
        r.failure = FailureInfo{};
        r.failure->kind = std::string(to_string(e.kind));
        r.failure->code = e.code;
        r.failure->where = step_now > 0 ? "step " + std::to_string(step_now) : "set-up / teardown";
        r.failure->message = e.what();
        if (e.kind == FailureKind::device_fault) backend.poison();
    } catch (const std::exception& e) {
        r.status = "error";
        r.failure = FailureInfo{};
        r.failure->kind = std::string(to_string(FailureKind::other));
        r.failure->message = e.what();
    }
    if (r.failure && r.failure->kind != to_string(FailureKind::device_fault)) {  // release what the failed run holds
        try {
            cudaStreamSynchronize(stream);
            for (void*& p : table)
                if (p) {
                    alloc.release(p);
                    p = nullptr;
                }
            cudaStreamSynchronize(stream);
        } catch (const std::exception&) {
            // A second failure while cleaning up: the first one is what the report names.
        }
    }
    r.measured.tracked_peak_bytes = alloc.peak_bytes();
    r.measured.peak_breakdown = alloc.peak_breakdown();
    r.measured.peak_where = alloc.peak_where();
    r.timeline = alloc.timeline();
    std::uint64_t used_high = 0, reserved_high = 0;
    if (cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &used_high) == cudaSuccess) {
        r.measured.pool_peak_bytes = static_cast<std::int64_t>(used_high);
        dm.pool_used_peak_bytes = static_cast<std::int64_t>(used_high);
    }
    if (cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &reserved_high) == cudaSuccess)
        dm.pool_reserved_peak_bytes = static_cast<std::int64_t>(reserved_high);
    (void)cudaGetLastError();
    // The driver's figure: largest sampled device-used memory over the baseline.
    r.measured.device_used_peak_bytes = dm.used_peak_bytes;
    (void)min_free;
    if (!r.measured.step_times_s.empty()) r.measured.step_time_s = median(r.measured.step_times_s);
    fill_measured_throughput(r);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaFreeHost(host_loss);
    cudaMemPoolTrimTo(pool, 0);
    cudaStreamDestroy(stream);
    (void)cudaGetLastError();
    return r;
}

// Reads a persistent f32 / bf16 buffer back as doubles (synchronous).
std::vector<double> download_buffer(const Program& prog, const BufferTable& table, BufferId id, cudaStream_t stream) {
    const BufferSpec& spec = prog.buffers[static_cast<std::size_t>(id)];
    std::vector<double> out(static_cast<std::size_t>(spec.elements));
    PF_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (spec.dtype == DType::f32) {
        std::vector<float> h(out.size());
        PF_CUDA_CHECK(cudaMemcpy(h.data(), table[static_cast<std::size_t>(id)], h.size() * 4, cudaMemcpyDeviceToHost));
        for (std::size_t i = 0; i < h.size(); ++i) out[i] = h[i];
    } else if (spec.dtype == DType::bf16) {
        std::vector<cuda::bf16> h(out.size());
        PF_CUDA_CHECK(cudaMemcpy(h.data(), table[static_cast<std::size_t>(id)], h.size() * 2, cudaMemcpyDeviceToHost));
        for (std::size_t i = 0; i < h.size(); ++i) out[i] = static_cast<double>(__bfloat162float(h[i]));
    } else {
        throw std::runtime_error("download_buffer: " + spec.name + " is not f32 or bf16");
    }
    return out;
}

StepGradients capture_step_gradients(const ModelConfig& model, const Plan& plan_in, const RunOptions& opt) {
    using namespace cuda;
    const Plan plan = resolve_defaults(plan_in, model);
    Program prog = build_program(model, plan);
    prog.hyper = opt.hyper;
    use_model_rope(prog);
    PF_CUDA_CHECK(cudaSetDevice(0));
    cudaStream_t stream = nullptr;
    PF_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    StepGradients out;
    {
        Gemm gemm(prog.act == DType::f32);
        CudaBackend backend(stream);
        TrackingAllocator alloc(backend);
        BufferTable table;
        DeviceRunner runner(prog, stream, opt.seed, gemm, opt.debug_sync);
        AttentionEngine attention(prog, opt.cudnn_attention);
        runner.set_attention(&attention);
        runner.set_fuse_gelu(opt.fuse_epilogues);
        try {
            walk(prog, prog.setup, alloc, table, &runner, "set-up");
            out.weights = download_buffer(prog, table, prog.weights, stream);
            runner.set_step(1);
            walk(prog, prog.step, alloc, table, &runner, "step", 1);
            out.gradients = download_buffer(prog, table, prog.grads_fp32 != kNoBuffer ? prog.grads_fp32 : prog.grads, stream);
            float loss_sum = 0;
            PF_CUDA_CHECK(cudaMemcpy(&loss_sum, runner.loss_sum(table), sizeof(float), cudaMemcpyDeviceToHost));
            out.loss = static_cast<double>(loss_sum) / static_cast<double>(prog.dims.rows * prog.dims.grad_acc);
            walk(prog, prog.teardown, alloc, table, &runner, "teardown");
            PF_CUDA_CHECK(cudaStreamSynchronize(stream));
        } catch (...) {
            cudaStreamSynchronize(stream);
            for (void*& p : table)
                if (p) {
                    alloc.release(p);
                    p = nullptr;
                }
            cudaStreamSynchronize(stream);
            cudaStreamDestroy(stream);
            throw;
        }
    }
    cudaStreamDestroy(stream);
    return out;
}

}  // namespace preflight::runtime
