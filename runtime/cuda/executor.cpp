// The executor: runs a step program on device 0. Every allocation goes through the
// same walk() and TrackingAllocator as the dry run, with a stream-ordered
// cudaMallocAsync backend (no managed memory, no fallback: a failed allocation stops
// the run with phase, request and free memory).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>

#include "gemm.cuh"
#include "kernels.cuh"
#include "preflight/planner/profiles.hpp"
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
        if (cudaMallocAsync(&p, static_cast<std::size_t>(std::max<std::int64_t>(bytes, 1)), stream_) != cudaSuccess) {
            cudaGetLastError();  // clear the sticky-free error state; the caller reports it
            return nullptr;
        }
        return p;
    }
    void release(void* p) override { cudaFreeAsync(p, stream_); }
    std::int64_t free_device_bytes() override {
        std::size_t f = 0, t = 0;
        return cudaMemGetInfo(&f, &t) == cudaSuccess ? static_cast<std::int64_t>(f) : -1;
    }
    const char* name() const override { return "cudaMallocAsync"; }

private:
    cudaStream_t stream_;
};

class DeviceRunner final : public OpRunner {
public:
    DeviceRunner(const Program& p, cudaStream_t s, std::uint64_t seed, Gemm& gemm)
        : P(p), d(p.dims), stream(s), seed_(seed), gemm_(gemm) {}
    void set_step(std::int64_t step) { step_ = step; }
    void run(const Op& op, const BufferTable& t) override {
        if (P.act == DType::f32)
            run_t<float>(op, t);
        else
            run_t<bf16>(op, t);
    }
    const float* loss_sum(const BufferTable& t) const { return static_cast<const float*>(t[static_cast<std::size_t>(P.scalars)]); }

private:
    const Program& P;
    const Dims& d;
    cudaStream_t stream;
    std::uint64_t seed_;
    Gemm& gemm_;
    std::int64_t step_ = 1;

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
        if (P.rope_cos != kNoBuffer)
            launch_rope_tables(base<float>(t, P.rope_cos), base<float>(t, P.rope_sin), d.s, d.head_dim, P.hyper.rope_base,
                               stream);
    }

    template <class T>
    void gemm_linear_fwd(const Op& op, const BufferTable& t) {
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
        gemm_.run(g, stream);
    }

    template <class T>
    void gemm_linear_bwd_data(const Op& op, const BufferTable& t) {
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
            case OpKind::linear_fwd: gemm_linear_fwd<T>(op, t); break;
            case OpKind::linear_bwd_data: gemm_linear_bwd_data<T>(op, t); break;
            case OpKind::linear_bwd_weight: gemm_linear_bwd_weight<T>(op, t); break;
            case OpKind::rope_fwd:
            case OpKind::rope_bwd:
                launch_rope<T>(at<T>(t, op.v[0]), base<float>(t, P.rope_cos), base<float>(t, P.rope_sin), d.b, d.s, d.heads,
                               d.kv_heads, d.head_dim, op.kind == OpKind::rope_bwd, stream);
                break;
            case OpKind::flash_fwd:
                launch_flash_fwd<T>(at<T>(t, op.v[0]), at<T>(t, op.v[1]), at<float>(t, op.v[2]), d.b, d.s, d.heads,
                                    d.kv_heads, d.head_dim, stream);
                break;
            case OpKind::flash_bwd:
                launch_flash_bwd<T>(at<T>(t, op.v[0]), at<T>(t, op.v[1]), at<float>(t, op.v[2]), at<T>(t, op.v[3]),
                                    at<T>(t, op.v[4]), at<float>(t, op.v[5]), d.b, d.s, d.heads, d.kv_heads, d.head_dim,
                                    stream);
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
            case OpKind::gelu_fwd: launch_gelu_fwd<T>(at<T>(t, op.v[0]), at<T>(t, op.v[1]), d.rows * d.ffn, stream); break;
            case OpKind::gelu_bwd:
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
};

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace
}  // namespace cuda

RunReport run_on_device(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan_in, const RunOptions& opt) {
    using namespace cuda;
    RunReport r = report_for("device", model, gpu, plan_in, opt);
    const Plan plan = r.plan;
    Program prog = build_program(model, plan);
    prog.hyper = opt.hyper;
    r.measured.warmup_steps = opt.warmup;

    // Context and library set-up, measured with cudaMemGetInfo (the overhead).
    PF_CUDA_CHECK(cudaSetDevice(0));
    PF_CUDA_CHECK(cudaFree(nullptr));  // creates the primary context
    cudaDeviceProp prop{};
    PF_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    int driver = 0, rt = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&rt);
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
    std::size_t free_b = 0, total_b = 0;
    PF_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    r.measured.overhead_bytes = static_cast<std::int64_t>(total_b - free_b);  // everything in use before our first allocation
    std::int64_t min_free = static_cast<std::int64_t>(free_b);

    const auto t0 = std::chrono::steady_clock::now();
    CudaBackend backend(stream);
    TrackingAllocator alloc(backend, [t0] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
    BufferTable table;
    DeviceRunner runner(prog, stream, opt.seed, gemm);
    float* host_loss = nullptr;
    PF_CUDA_CHECK(cudaMallocHost(&host_loss, sizeof(float)));
    cudaEvent_t start = nullptr, stop = nullptr;
    PF_CUDA_CHECK(cudaEventCreate(&start));
    PF_CUDA_CHECK(cudaEventCreate(&stop));
    const double tokens_per_step = static_cast<double>(plan.global_batch_tokens());
    try {
        walk(prog, prog.setup, alloc, table, &runner);
        PF_CUDA_CHECK(cudaStreamSynchronize(stream));
        std::uint64_t zero = 0;
        PF_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
        const int total_steps = opt.warmup + opt.steps;
        // The timeline is recorded on a warm-up step when there is one (its host-side
        // labelling would otherwise perturb a timed step).
        const int record_at = opt.timeline ? std::max(0, opt.warmup - 1) : -1;
        for (int i = 0; i < total_steps; ++i) {
            runner.set_step(i + 1);
            alloc.set_recording(i == record_at);
            PF_CUDA_CHECK(cudaEventRecord(start, stream));
            walk(prog, prog.step, alloc, table, &runner);
            PF_CUDA_CHECK(cudaEventRecord(stop, stream));
            PF_CUDA_CHECK(cudaMemcpyAsync(host_loss, runner.loss_sum(table), sizeof(float), cudaMemcpyDeviceToHost, stream));
            PF_CUDA_CHECK(cudaEventSynchronize(stop));
            PF_CUDA_CHECK(cudaStreamSynchronize(stream));
            alloc.set_recording(false);
            float ms = 0;
            PF_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
            const double loss = static_cast<double>(*host_loss) / static_cast<double>(prog.dims.rows * prog.dims.grad_acc);
            r.measured.losses.push_back(loss);
            if (i >= opt.warmup) r.measured.step_times_s.push_back(ms / 1e3);
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
        walk(prog, prog.teardown, alloc, table, &runner);
        PF_CUDA_CHECK(cudaStreamSynchronize(stream));
    } catch (const AllocationError& e) {
        r.status = "allocation-failed";
        r.failure = FailureInfo{e.where, e.buffer, std::string(to_string(e.category)), e.requested_bytes, e.free_bytes,
                                e.in_use_bytes, e.what()};
    } catch (const std::exception& e) {
        r.status = "error";
        r.failure = FailureInfo{};
        r.failure->message = e.what();
    }
    if (r.failure) {  // release what the failed run still holds
        cudaStreamSynchronize(stream);
        for (void*& p : table)
            if (p) {
                alloc.release(p);
                p = nullptr;
            }
        cudaStreamSynchronize(stream);
    }
    r.measured.tracked_peak_bytes = alloc.peak_bytes();
    r.measured.peak_breakdown = alloc.peak_breakdown();
    r.measured.peak_where = alloc.peak_where();
    r.timeline = alloc.timeline();
    std::uint64_t used_high = 0;
    if (cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &used_high) == cudaSuccess)
        r.measured.pool_peak_bytes = static_cast<std::int64_t>(used_high);
    r.measured.device_used_peak_bytes = static_cast<std::int64_t>(total_b) - min_free;
    if (!r.measured.step_times_s.empty()) r.measured.step_time_s = median(r.measured.step_times_s);
    fill_measured_throughput(r);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaFreeHost(host_loss);
    cudaMemPoolTrimTo(pool, 0);
    cudaStreamDestroy(stream);
    return r;
}

// Reads a persistent f32 / bf16 buffer back as doubles (synchronous).
static std::vector<double> download_buffer(const Program& prog, const BufferTable& table, BufferId id, cudaStream_t stream) {
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
    PF_CUDA_CHECK(cudaSetDevice(0));
    cudaStream_t stream = nullptr;
    PF_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    StepGradients out;
    {
        Gemm gemm(prog.act == DType::f32);
        CudaBackend backend(stream);
        TrackingAllocator alloc(backend);
        BufferTable table;
        DeviceRunner runner(prog, stream, opt.seed, gemm);
        try {
            walk(prog, prog.setup, alloc, table, &runner);
            out.weights = download_buffer(prog, table, prog.weights, stream);
            runner.set_step(1);
            walk(prog, prog.step, alloc, table, &runner);
            out.gradients = download_buffer(prog, table, prog.grads_fp32 != kNoBuffer ? prog.grads_fp32 : prog.grads, stream);
            float loss_sum = 0;
            PF_CUDA_CHECK(cudaMemcpy(&loss_sum, runner.loss_sum(table), sizeof(float), cudaMemcpyDeviceToHost));
            out.loss = static_cast<double>(loss_sum) / static_cast<double>(prog.dims.rows * prog.dims.grad_acc);
            walk(prog, prog.teardown, alloc, table, &runner);
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
