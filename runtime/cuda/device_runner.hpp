// The device side of the executor: the stream-ordered allocation backend and the op
// runner that launches each op of a step program on the GPU (shared by the measured
// run and the gradient capture).
#pragma once

#include <array>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>

#include "attention.hpp"
#include "comm.hpp"
#include "gemm.cuh"
#include "kernels.cuh"
#include "op_timer.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/runtime/nvml_probe.hpp"
#include "preflight/runtime/reference.hpp"
#include "preflight/runtime/runtime.hpp"
#include "preflight/runtime/synthetic.hpp"
#include "preflight/runtime/walker.hpp"

namespace preflight::runtime {

namespace cuda {

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

// After a failure that left the device usable: waits for the stream, then releases every
// buffer the run still holds (a device error while releasing propagates).
inline void release_all_buffers(BufferTable& table, TrackingAllocator& alloc, cudaStream_t stream) {
    cudaStreamSynchronize(stream);
    for (void*& p : table)
        if (p) {
            alloc.release(p);
            p = nullptr;
        }
    cudaStreamSynchronize(stream);
}


class DeviceRunner final : public OpRunner {
public:
    DeviceRunner(const Program& p, cudaStream_t s, std::uint64_t seed, Gemm& gemm, bool debug_sync = false)
        : P(p), d(p.dims), stream(s), seed_(seed), gemm_(gemm), debug_sync_(debug_sync) {}
    ~DeviceRunner() override;
    DeviceRunner(const DeviceRunner&) = delete;
    DeviceRunner& operator=(const DeviceRunner&) = delete;
    void set_step(std::int64_t step) {
        step_ = step;
        issued_ = 0;
        folded_ = {};
    }
    // Data, tensor and pipeline parallelism (device_runner_comm.cpp): the rank's communicators
    // by group (CommGroup; null where the plan has none), whose collectives run on a
    // communication stream of the runner's own, ordered against the compute stream by events (a
    // collective starts after everything the compute stream issued before it; a comm_wait op
    // makes the compute stream wait for one; a p2p op is waited for at once).
    void set_comm(const std::array<DeviceComm*, kCommGroups>& comms);
    void set_comm(DeviceComm* dp, DeviceComm* tp = nullptr) { set_comm({dp, tp, nullptr, nullptr}); }
    // The collectives of the step just synchronised: measured time per kind (start and done
    // events around each on the communication stream, the ZeRO-2/3 shard accumulation included).
    struct CommTimes {
        double all_reduce_s = 0, reduce_scatter_s = 0, all_gather_s = 0;
        std::int64_t count = 0;
        double bytes = 0;  // the buffers' bytes, as each rank passes them to the library
    };
    CommTimes comm_times() const;
    // Calls `hook` (after synchronising the stream) when op `op` is about to run, its
    // allocations made: where the driver's used memory is sampled.
    void sample_before(const Op* op, std::function<void()> hook) {
        sample_op_ = op;
        sample_hook_ = std::move(hook);
    }
    bool checks_each_op() const override { return debug_sync_; }
    // `preflight run --op-times`: every op of the steps walked while set gets its events (null: off).
    void set_op_timer(OpTimer* t) { timer_ = t; }
    void set_attention(AttentionEngine* a) { attention_ = a; }
    // GeLU fused into the fc1 GEMM (cuBLASLt GELU_AUX_BIAS) and its gradient into the fc2
    // dgrad GEMM (DGELU), bf16 programs only; the program (and so the memory) is unchanged:
    // the fc1 GEMM runs at the activation op, once the activation's buffer exists.
    void set_fuse_gelu(bool on) { fuse_gelu_ = on && P.act == DType::bf16 && P.model.mlp == MlpKind::gelu && !P.fp8; }
    void run(const Op& op, const BufferTable& t) override {
        if (&op == sample_op_ && sample_hook_) {
            PF_CUDA_CHECK(cudaStreamSynchronize(stream));
            sample_hook_();
        }
        if (timer_) timer_->begin_op(timed_label(op));
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

    // A view's first element (also for the runner's helpers in its .cpp files).
    template <class T>
    static T* at(const BufferTable& t, const View& v) {
        return static_cast<T*>(t[static_cast<std::size_t>(v.buffer)]) + v.offset;
    }

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
    // The expert offsets read back per routing table (its device address): every grouped GEMM of a
    // layer's forward and backward reads the same table, which only moe_route writes (and forgets here).
    std::map<const void*, std::vector<std::int64_t>> moe_offsets_;
    const Op* skip_gelu_bwd_ = nullptr;   // done by the fc2 dgrad's epilogue
    const Op* sample_op_ = nullptr;
    std::function<void()> sample_hook_;
    OpTimer* timer_ = nullptr;
    std::array<DeviceComm*, kCommGroups> comm_{};  // by CommGroup
    cudaStream_t comm_stream_ = nullptr;
    cudaEvent_t ready_ = nullptr;                    // the compute stream's point a collective starts after
    // A ring of start / done events over the step's latest collectives (timing, and the compute
    // stream's waits): collective k takes slot k mod the ring's size; before a slot is taken again
    // its collective's time is folded into folded_ (waiting for it to finish, so the host runs at
    // most a ring ahead of the communication stream).
    std::vector<cudaEvent_t> started_, done_;
    std::vector<std::pair<OpKind, double>> issued_kinds_;  // kind and bytes of each slot's collective
    std::int64_t issued_ = 0;                        // collectives issued this step
    CommTimes folded_;                               // the step's collectives whose slots were taken again
    void fold(std::size_t slot, CommTimes& into) const;

    template <class T>
    static T* base(const BufferTable& t, BufferId b) {
        return b == kNoBuffer ? nullptr : static_cast<T*>(t[static_cast<std::size_t>(b)]);
    }
    // A parameter's weights / gradients where they are while the op runs (Program::weight_at,
    // grad_at: a gathered unit under ZeRO-3, a unit gradient buffer under ZeRO-2/3).
    template <class T>
    T* param(const BufferTable& t, ParamId id) const {
        const ParamRef r = P.weight_at(id);
        return r.buffer == kNoBuffer ? nullptr : base<T>(t, r.buffer) + r.offset;
    }
    template <class T>
    T* grad(const BufferTable& t, ParamId id) const {
        const ParamRef r = P.grad_at(id);
        return r.buffer == kNoBuffer ? nullptr : base<T>(t, r.buffer) + r.offset;
    }
    float norm_eps() const { return static_cast<float>(P.hyper.norm_eps); }
    // The cross-entropy's gradient scale: the mean over the step's tokens (rows x grad_acc).
    float loss_scale() const { return static_cast<float>(1.0 / static_cast<double>(d.rows * d.grad_acc)); }
    bool layernorm() const { return P.model.norm == NormKind::layernorm; }

    // An op's label in the per-op times: its kind, "fp8 " before a linear with fp8 operands.
    std::string timed_label(const Op& op) const {
        const bool linear =
            op.kind == OpKind::linear_fwd || op.kind == OpKind::linear_bwd_data || op.kind == OpKind::linear_bwd_weight;
        return (linear && fp8_operands(op) ? "fp8 " : "") + std::string(to_string(op.kind));
    }
    // Every cuBLASLt product of an op goes through here (its shape noted when ops are timed).
    void run_gemm(const GemmArgs& g) {
        if (timer_) timer_->note_gemm({g.M, g.N, g.K, g.batch});
        gemm_.run(g, stream);
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
        run_gemm(g);
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
        run_gemm(g);
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
        run_gemm(g);
        if (op.p1 != kNoParam) {  // the bias gradient, a column-sum kernel of its own after the GEMM
            launch_bias_grad<T>(at<T>(t, op.v[0]), grad<T>(t, op.p1), op.v[0].rows, op.v[0].cols, op.v[0].ld, stream);
            if (timer_) timer_->relabel("linear_bwd_weight+bias_grad");
        }
    }

    // Eager attention GEMMs, batched over KV heads for each (sequence, head-in-group).
    struct EagerGeometry {
        std::int64_t seq, heads, kv_heads;
        std::int64_t group;       // query heads per key/value head
        std::int64_t head_dim;
        std::int64_t qkv_width;   // row stride of the fused q|k|v tensor
        std::int64_t q_width, kv_width;
        std::int64_t seq_squared; // elements of one head's score matrix
    };
    EagerGeometry eager_geometry() const {
        return {d.s, d.heads, d.kv_heads, d.heads / d.kv_heads, d.head_dim, d.qkv_width, d.q_width, d.kv_width, d.s * d.s};
    }

    template <class T>
    void eager(const Op& op, const BufferTable& t) {
        const EagerGeometry e = eager_geometry();
        const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(e.head_dim)));
        for (std::int64_t bb = 0; bb < d.b; ++bb)
            for (std::int64_t j = 0; j < e.group; ++j) {
                GemmArgs g;
                g.batch = static_cast<int>(e.kv_heads);
                const std::int64_t sc_off = (bb * e.heads + j) * e.seq_squared, sc_stride = e.group * e.seq_squared;
                switch (op.kind) {
                    case OpKind::eager_scores: {  // S = scale Q K^T
                        const T* qkv = at<T>(t, op.v[0]) + bb * e.seq * e.qkv_width;
                        g.trans_b = true;
                        g.M = e.seq, g.N = e.seq, g.K = e.head_dim;
                        g.A = qkv + j * e.head_dim, g.lda = e.qkv_width, g.stride_a = e.group * e.head_dim;
                        g.B = qkv + e.q_width, g.ldb = e.qkv_width, g.stride_b = e.head_dim;
                        g.D = at<T>(t, op.v[1]) + sc_off, g.ldd = e.seq, g.stride_d = sc_stride;
                        g.alpha = scale;
                        run_gemm(g);
                        break;
                    }
                    case OpKind::eager_pv: {  // O = P V
                        const T* qkv = at<T>(t, op.v[1]) + bb * e.seq * e.qkv_width;
                        g.M = e.seq, g.N = e.head_dim, g.K = e.seq;
                        g.A = at<T>(t, op.v[0]) + sc_off, g.lda = e.seq, g.stride_a = sc_stride;
                        g.B = qkv + e.q_width + e.kv_width, g.ldb = e.qkv_width, g.stride_b = e.head_dim;
                        g.D = at<T>(t, op.v[2]) + bb * e.seq * e.q_width + j * e.head_dim, g.ldd = e.q_width, g.stride_d = e.group * e.head_dim;
                        run_gemm(g);
                        break;
                    }
                    case OpKind::eager_dp: {  // dP = dO V^T
                        const T* qkv = at<T>(t, op.v[1]) + bb * e.seq * e.qkv_width;
                        g.trans_b = true;
                        g.M = e.seq, g.N = e.seq, g.K = e.head_dim;
                        g.A = at<T>(t, op.v[0]) + bb * e.seq * e.q_width + j * e.head_dim, g.lda = e.q_width, g.stride_a = e.group * e.head_dim;
                        g.B = qkv + e.q_width + e.kv_width, g.ldb = e.qkv_width, g.stride_b = e.head_dim;
                        g.D = at<T>(t, op.v[2]) + sc_off, g.ldd = e.seq, g.stride_d = sc_stride;
                        run_gemm(g);
                        break;
                    }
                    case OpKind::eager_dqkv: {
                        const T* ds = at<T>(t, op.v[0]) + sc_off;
                        const T* p = at<T>(t, op.v[1]) + sc_off;
                        const T* dout = at<T>(t, op.v[2]) + bb * e.seq * e.q_width + j * e.head_dim;
                        const T* qkv = at<T>(t, op.v[3]) + bb * e.seq * e.qkv_width;
                        T* dqkv = at<T>(t, op.v[4]) + bb * e.seq * e.qkv_width;
                        // dQ_h = scale dS K
                        GemmArgs q = g;
                        q.M = e.seq, q.N = e.head_dim, q.K = e.seq;
                        q.A = ds, q.lda = e.seq, q.stride_a = sc_stride;
                        q.B = qkv + e.q_width, q.ldb = e.qkv_width, q.stride_b = e.head_dim;
                        q.D = dqkv + j * e.head_dim, q.ldd = e.qkv_width, q.stride_d = e.group * e.head_dim;
                        q.alpha = scale;
                        run_gemm(q);
                        // dK_kv += scale dS^T Q_h ; dV_kv += P^T dO_h (summed over the group's heads)
                        GemmArgs k = g;
                        k.trans_a = true;
                        k.M = e.seq, k.N = e.head_dim, k.K = e.seq;
                        k.A = ds, k.lda = e.seq, k.stride_a = sc_stride;
                        k.B = qkv + j * e.head_dim, k.ldb = e.qkv_width, k.stride_b = e.group * e.head_dim;
                        k.D = dqkv + e.q_width, k.ldd = e.qkv_width, k.stride_d = e.head_dim;
                        k.alpha = scale;
                        if (j > 0) k.C = k.D, k.ldc = k.ldd, k.stride_c = k.stride_d, k.beta = 1.f;
                        run_gemm(k);
                        GemmArgs v = k;
                        v.alpha = 1.f;
                        v.A = p;
                        v.B = dout, v.ldb = e.q_width, v.stride_b = e.group * e.head_dim;
                        v.D = dqkv + e.q_width + e.kv_width;
                        v.C = j > 0 ? v.D : nullptr;
                        run_gemm(v);
                        break;
                    }
                    default: break;
                }
            }
    }

    // A linear's forward, or (fc1 followed by its GeLU, epilogues on) deferred to run fused with
    // the activation op; not when fc1 frees a buffer (sequence parallelism's all-gathered input):
    // deferred, it would read freed memory (on an H200, cuBLASLt refused its null input).
    template <class T>
    void linear_fwd(const Op& op, const BufferTable& t) {
        const Op* next = fuse_gelu_ && op.free.empty() ? after(op, 1) : nullptr;
        if (next && next->kind == OpKind::gelu_fwd && next->v[0].buffer == op.v[1].buffer && op.v[2].buffer == kNoBuffer &&
            op.v[1].ld % 8 == 0 && next->v[1].ld % 8 == 0) {
            deferred_fc1_ = &op;  // runs with the activation op
            if (timer_) timer_->relabel("linear_fwd:deferred");
            return;
        }
        gemm_linear_fwd<T>(op, t);
    }

    // A linear's data gradient; fc2's (dgrad, wgrad, then the GeLU backward on the dgrad's
    // output) takes the GeLU backward into its epilogue.
    template <class T>
    void linear_bwd_data(const Op& op, const BufferTable& t) {
        const Op* gb = fuse_gelu_ ? after(op, 2) : nullptr;
        if (gb && gb->kind == OpKind::gelu_bwd && gb->v[0].buffer == op.v[1].buffer && !op.accumulate &&
            op.v[1].ld % 8 == 0 && gb->v[1].ld % 8 == 0) {
            gemm_linear_bwd_data<T>(op, t, gb);
            skip_gelu_bwd_ = gb;
            if (timer_) timer_->relabel("linear_bwd_data+dgelu");
            return;
        }
        gemm_linear_bwd_data<T>(op, t);
    }

    template <class T>
    void gelu_fwd(const Op& op, const BufferTable& t) {
        if (deferred_fc1_) {
            const Op* fc1 = deferred_fc1_;
            deferred_fc1_ = nullptr;
            gemm_linear_fwd<T>(*fc1, t, &op);
            if (timer_) timer_->relabel("linear_fwd+gelu");
            return;
        }
        launch_gelu_fwd<T>(at<T>(t, op.v[0]), at<T>(t, op.v[1]), d.rows * d.ffn, stream);
    }

    template <class T>
    void gelu_bwd(const Op& op, const BufferTable& t) {
        if (skip_gelu_bwd_ == &op) {  // already done in fc2's dgrad epilogue
            skip_gelu_bwd_ = nullptr;
            if (timer_) timer_->relabel("gelu_bwd:fused");
            return;
        }
        launch_gelu_bwd<T>(at<T>(t, op.v[1]), at<T>(t, op.v[0]), at<T>(t, op.v[0]), d.rows * d.ffn, stream);
    }

    // The micro-batch's tokens or labels (an emulated tensor-parallel rank's in its own rows).
    void synthetic_tokens(const Op& op, const BufferTable& t) {
        const TokenWindow w = token_window(P);
        launch_synthetic_tokens(at<std::int64_t>(t, op.v[0]), d.b, d.s, w.vocab, seed_, step_,
                                P.data_micro_batch(micro_batch_of(op)), op.kind == OpKind::labels, stream, w.first,
                                d.cp, d.cp_rank);
    }

    template <class T>
    void run_t(const Op& op, const BufferTable& t) {
        switch (op.kind) {
            case OpKind::init_params: init(t); break;
            case OpKind::teardown: break;
            case OpKind::zero_grads: zero_gradients(t); break;
            case OpKind::tokens:
            case OpKind::labels: synthetic_tokens(op, t); break;
            case OpKind::embedding_fwd:
                launch_embedding_fwd<T>(at<std::int64_t>(t, op.v[0]), param<T>(t, op.p0), param<T>(t, op.p1),
                                        at<T>(t, op.v[1]), d.b, d.s, d.h, stream, d.vocab_begin, d.vocab_padded);
                break;
            case OpKind::embedding_bwd:
                launch_embedding_bwd<T>(at<std::int64_t>(t, op.v[0]), at<T>(t, op.v[1]), grad<T>(t, op.p0),
                                        grad<T>(t, op.p1), d.b, d.s, d.h, stream, d.vocab_begin, d.vocab_padded);
                break;
            case OpKind::norm_fwd:
            case OpKind::norm_bwd:
            case OpKind::head_norm_fwd:
            case OpKind::head_norm_bwd: norms<T>(op, t); break;
            case OpKind::linear_fwd: fp8_operands(op) ? fp8_linear(op, t) : linear_fwd<T>(op, t); break;
            case OpKind::linear_bwd_data: fp8_operands(op) ? fp8_linear(op, t) : linear_bwd_data<T>(op, t); break;
            case OpKind::linear_bwd_weight: fp8_operands(op) ? fp8_linear(op, t) : gemm_linear_bwd_weight<T>(op, t); break;
            case OpKind::fp8_cast:
            case OpKind::fp8_cast_weights: run_fp8(op, t); break;
            case OpKind::rope_fwd:
            case OpKind::rope_bwd:
                launch_rope<T>(at<T>(t, op.v[0]), base<float>(t, P.rope_cos), base<float>(t, P.rope_sin), d.b, d.s, d.heads,
                               d.kv_heads, d.head_dim, d.rope_dims, op.kind == OpKind::rope_bwd, stream);
                break;
            case OpKind::flash_fwd:
            case OpKind::flash_bwd: run_flash(op, t); break;
            case OpKind::eager_scores:
            case OpKind::eager_pv:
            case OpKind::eager_dp:
            case OpKind::eager_dqkv: eager<T>(op, t); break;
            case OpKind::eager_softmax:
                launch_causal_softmax_fwd<T>(at<T>(t, op.v[0]), at<T>(t, op.v[1]), op.v[0].rows, d.s,
                                             d.window_of(op.phase.layer), stream);
                break;
            case OpKind::eager_softmax_bwd:
                launch_causal_softmax_bwd<T>(at<T>(t, op.v[0]), at<T>(t, op.v[1]), at<T>(t, op.v[2]), op.v[0].rows, d.s,
                                             d.window_of(op.phase.layer), stream);
                break;
            case OpKind::swiglu_fwd:
            case OpKind::swiglu_bwd: swiglu<T>(op, t); break;
            case OpKind::gelu_fwd: gelu_fwd<T>(op, t); break;
            case OpKind::gelu_bwd: gelu_bwd<T>(op, t); break;
            case OpKind::cross_entropy:
            case OpKind::ce_max:
            case OpKind::ce_sums: cross_entropy<T>(op, t); break;
            case OpKind::seq_chunk: seq_chunk<T>(op, t); break;
            case OpKind::loss_accumulate:
                launch_loss_sum(at<float>(t, op.v[0]), d.rows, base<float>(t, P.scalars), stream);
                break;
            case OpKind::grad_accumulate: accumulate_grads(op, t); break;
            case OpKind::optimizer: optimizer(t); break;
            case OpKind::unit_grads_begin:
            case OpKind::all_reduce:
            case OpKind::reduce_scatter:
            case OpKind::all_gather:
            case OpKind::comm_wait: run_data_parallel(op, t); break;
            case OpKind::p2p: run_p2p(op, t); break;
            case OpKind::cp_kv_pack:
            case OpKind::cp_kv_order:
            case OpKind::cp_kv_unorder:
            case OpKind::cp_kv_unpack: run_cp(op, t); break;
            case OpKind::moe_route: case OpKind::moe_dispatch: case OpKind::moe_linear_fwd:
            case OpKind::moe_linear_bwd_data: case OpKind::moe_linear_bwd_weight: case OpKind::moe_combine:
            case OpKind::moe_combine_bwd: case OpKind::moe_route_bwd: case OpKind::moe_dispatch_bwd: run_moe<T>(op, t); break;
        }
    }

    // The softmax cross-entropy, whole or vocabulary-parallel (ce_max, ce_sums, then the finish
    // over the tensor-parallel statistics in v3 / v4).
    template <class T>
    void cross_entropy(const Op& op, const BufferTable& t) {
        const std::int64_t* labels = op.kind == OpKind::ce_max ? nullptr : at<std::int64_t>(t, op.v[1]);
        if (op.kind == OpKind::ce_max)
            launch_ce_max<T>(at<T>(t, op.v[0]), at<float>(t, op.v[1]), d.rows, d.vocab_valid, d.vocab_padded, stream);
        else if (op.kind == OpKind::ce_sums)
            launch_ce_sums<T>(at<T>(t, op.v[0]), labels, at<float>(t, op.v[2]), at<float>(t, op.v[3]), d.rows,
                              d.vocab_valid, d.vocab_padded, d.vocab_begin, stream);
        else if (op.v[3].buffer != kNoBuffer)
            launch_ce_finish<T>(at<T>(t, op.v[0]), labels, at<float>(t, op.v[3]), at<float>(t, op.v[4]),
                                at<float>(t, op.v[2]), d.rows, d.vocab_valid, d.vocab_padded, d.vocab_begin, loss_scale(),
                                stream);
        else
            launch_cross_entropy<T>(at<T>(t, op.v[0]), labels, at<float>(t, op.v[2]), d.rows, d.vocab, d.vocab_padded,
                                    loss_scale(), stream);
    }

    // Sequence parallelism: v2 = v0 (this rank's rows of a reduce-scattered buffer) + v1 (the
    // residual, may be empty): a copy, then an fp32 add rounded once (accumulate.cu).
    template <class T>
    void seq_chunk(const Op& op, const BufferTable& t) {
        const std::int64_t n = op.v[2].rows * op.v[2].cols;
        PF_CUDA_CHECK(cudaMemcpyAsync(at<T>(t, op.v[2]), at<T>(t, op.v[0]), static_cast<std::size_t>(n) * sizeof(T),
                                      cudaMemcpyDeviceToDevice, stream));
        if (op.v[1].buffer != kNoBuffer) launch_accumulate<T, T>(at<T>(t, op.v[2]), at<T>(t, op.v[1]), n, stream);
    }

    // Non-template parts (device_runner_state.cpp): set-up of the parameters (whole, or this
    // rank's shards), the gradients and loss at 0, the optimizer over this rank's regions.
    void init(const BufferTable& t);
    template <class T>
    void init_parameters(const BufferTable& t);
    void zero_gradients(const BufferTable& t);
    void accumulate_grads(const Op& op, const BufferTable& t);  // grad_accumulate
    void optimizer(const BufferTable& t);
    void adamw_region(const OptimizerRegion& r, const BufferTable& t);
    void sgd_region(const OptimizerRegion& r, const BufferTable& t);
    // The collectives and waits, and the pipeline's sends and receives (device_runner_comm.cpp).
    void run_data_parallel(const Op& op, const BufferTable& t);
    void run_p2p(const Op& op, const BufferTable& t);
    // Flash attention (device_runner_attention.cpp): cuDNN's fused kernels for bf16 when the
    // engine is set, else the runtime's kernel; under context parallelism always the runtime's
    // kernel, its queries at their sequence positions against the whole sequence's K and V, and
    // the K|V moves (run_cp).
    void run_flash(const Op& op, const BufferTable& t);
    void run_cp(const Op& op, const BufferTable& t);
    // fp8-mixed (device_runner_fp8.cpp): the casts, and a linear whose operands are fp8.
    bool fp8_operands(const Op& op) const {
        return P.fp8 && is_fp8(P.buffers[static_cast<std::size_t>(op.v[0].buffer)].dtype);
    }
    void run_fp8(const Op& op, const BufferTable& t);
    void fp8_linear(const Op& op, const BufferTable& t);
    // Mixture of experts (device_runner_moe.cpp; program_moe.cpp emits the ops): the routing,
    // dispatch and combine kernels (moe.cu) and the experts' grouped GEMMs (moe_expert_gemms).
    template <class T>
    void run_moe(const Op& op, const BufferTable& t);
    const std::vector<std::int64_t>& expert_rows(const std::int64_t* routing, std::int64_t pairs);
    // SwiGLU forward or backward on the view's rows (a micro-batch's, or rows x k expert slots).
    template <class T>
    void swiglu(const Op& op, const BufferTable& t);
    // The norms (device_runner_norms.cpp): norm_fwd / _bwd, and Qwen3's per-head q/k norms.
    template <class T>
    void norms(const Op& op, const BufferTable& t);
};

inline double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace cuda

// Reads a persistent f32 / bf16 buffer back as doubles (synchronous).
std::vector<double> download_buffer(const Program& prog, const BufferTable& table, BufferId id, cudaStream_t stream);

}  // namespace preflight::runtime
