// The DeviceRunner's mixture-of-experts ops (device_runner.hpp; program_moe.cpp emits them, their
// operands in program.hpp; the host runner's twin: host_runner_moe.cpp): Mixtral's sparse MLP
// (Jiang et al. 2024, sec. 2.1). The routing, dispatch, combine and their backward are the
// kernels of moe.cu; the experts' linears are grouped GEMMs: the expert offsets of the routing
// table read back to the host, then one cuBLASLt product per expert with slots over its rows of
// the slot-major operands and its block of the stacked weight.
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "device_runner.hpp"
#include "moe_gemm.hpp"
#include "preflight/planner/limits.hpp"

namespace preflight::runtime::cuda {

// The planner refuses wider layers (check_runtime_model), so the route launcher's bound never trips in a run.
static_assert(kMoeMaxExperts == limits::kMaxRuntimeExperts);

namespace {

// The moe kernels take row-major contiguous tensors of a known shape (program_moe.cpp's views).
void expect_view(const Op& op, int i, std::int64_t rows, std::int64_t cols) {
    const View& v = op.v[static_cast<std::size_t>(i)];
    if (v.buffer == kNoBuffer || v.rows != rows || v.cols != cols || v.ld != cols)
        throw std::logic_error("DeviceRunner: " + op.name + " (" + std::string(to_string(op.kind)) + "): view v" +
                               std::to_string(i) + " is [" + std::to_string(v.rows) + ", " + std::to_string(v.cols) +
                               "] ld " + std::to_string(v.ld) + ", expected contiguous [" + std::to_string(rows) +
                               ", " + std::to_string(cols) + "]");
}

const char* byte_ptr(const void* p, std::int64_t elements, std::size_t esize) {
    return static_cast<const char*>(p) + elements * static_cast<std::int64_t>(esize);
}

}  // namespace

std::vector<GemmArgs> moe_expert_gemms(OpKind kind, const std::vector<std::int64_t>& off, void* x, std::int64_t ldx,
                                       void* y, std::int64_t ldy, void* w, std::int64_t N, std::int64_t K,
                                       std::size_t esize) {
    std::vector<GemmArgs> out;
    for (std::size_t e = 0; e + 1 < off.size(); ++e) {
        const std::int64_t first = off[e], m = off[e + 1] - off[e];
        if (m <= 0) continue;  // no slots: no GEMM (and so no zero-size product)
        void* we = const_cast<char*>(byte_ptr(w, static_cast<std::int64_t>(e) * N * K, esize));  // W_e [N, K]
        const void* xe = byte_ptr(x, first * ldx, esize);
        const void* ye = byte_ptr(y, first * ldy, esize);
        GemmArgs g;
        switch (kind) {
            case OpKind::moe_linear_fwd:  // Y_e [m, N] = X_e [m, K] W_e^T
                g.trans_b = true;
                g.M = m, g.N = N, g.K = K;
                g.A = xe, g.lda = ldx;
                g.B = we, g.ldb = K;
                g.D = const_cast<void*>(ye), g.ldd = ldy;
                break;
            case OpKind::moe_linear_bwd_data:  // dX_e [m, K] = dY_e [m, N] W_e [N, K] (overwritten)
                g.M = m, g.N = K, g.K = N;
                g.A = ye, g.lda = ldy;
                g.B = we, g.ldb = K;
                g.D = const_cast<void*>(xe), g.ldd = ldx;
                break;
            case OpKind::moe_linear_bwd_weight:  // dW_e [N, K] += dY_e^T [N, m] X_e [m, K]
                g.trans_a = true;
                g.M = N, g.N = K, g.K = m;
                g.A = ye, g.lda = ldy;
                g.B = xe, g.ldb = ldx;
                g.D = we, g.ldd = K;
                g.C = we, g.ldc = K;
                g.beta = 1.f;
                break;
            default: throw std::logic_error("moe_expert_gemms: not a grouped linear");
        }
        out.push_back(g);
    }
    return out;
}

std::vector<std::int64_t> moe_expert_offsets(const std::int64_t* routing, std::int64_t pairs, std::int64_t experts,
                                             cudaStream_t stream) {
    std::vector<std::int64_t> off(static_cast<std::size_t>(experts + 1));
    PF_CUDA_CHECK(cudaMemcpyAsync(off.data(), routing + 2 * pairs, off.size() * sizeof(std::int64_t),
                                  cudaMemcpyDeviceToHost, stream));
    PF_CUDA_CHECK(cudaStreamSynchronize(stream));
    bool ok = off.front() == 0 && off.back() == pairs;
    for (std::size_t e = 0; e + 1 < off.size(); ++e) ok = ok && off[e] <= off[e + 1];
    if (!ok)
        throw std::runtime_error("mixture of experts: the routing table's expert offsets do not run from 0 to " +
                                 std::to_string(pairs) + " pairs (last " + std::to_string(off.back()) + ")");
    return off;
}

// The first row of each local expert and the end: C each under expert parallelism (no read-back),
// else the routing's offsets, read back once per routing table (a stream sync) and cached by its
// address until moe_route writes there again.
const std::vector<std::int64_t>& DeviceRunner::expert_rows(const std::int64_t* routing, std::int64_t pairs) {
    const Dims& d = P.dims;
    auto cached = moe_offsets_.find(routing);
    if (cached != moe_offsets_.end()) return cached->second;
    std::vector<std::int64_t> off;
    if (d.capacity > 0)
        for (std::int64_t i = 0; i <= d.local_experts; ++i) off.push_back(i * d.capacity);
    else
        off = moe_expert_offsets(routing, pairs, d.experts, stream);
    return moe_offsets_.emplace(routing, std::move(off)).first->second;
}

template <class T>
void DeviceRunner::run_moe(const Op& op, const BufferTable& t) {
    // The router sees the ep block's tokens (ep x rows under expert parallelism); the expert
    // buffers hold this rank's experts' rows (MoeSlots, reference_moe.hpp ExpertSlots).
    const std::int64_t E = d.experts, k = d.topk, rows = d.route_rows(), pairs = rows * k, h = d.h, S = d.slots();
    const MoeSlots slots{E, d.expert0, d.local_experts, d.capacity};
    // Every op reads the routing table (v2; v3 for the combine's backward); moe_route writes it.
    const int rv = op.kind == OpKind::moe_combine_bwd ? 3 : 2;
    expect_view(op, rv, 1, d.routing_elements());
    std::int64_t* routing = at<std::int64_t>(t, op.v[static_cast<std::size_t>(rv)]);
    switch (op.kind) {
        case OpKind::moe_route:  // v0 = logits -> v1 = gates, v2 = routing
            expect_view(op, 0, rows, E);
            expect_view(op, 1, rows, k);
            moe_offsets_.erase(routing);  // a new table at this address: its offsets are read again
            launch_moe_route<T>(at<T>(t, op.v[0]), at<float>(t, op.v[1]), routing, rows, E, k, d.renormalize_gates,
                                stream);
            break;
        case OpKind::moe_dispatch:  // v0 = x -> v1 = the slots
            expect_view(op, 0, rows, h);
            expect_view(op, 1, S, h);
            launch_moe_dispatch<T>(at<T>(t, op.v[0]), routing, rows, k, h, slots, at<T>(t, op.v[1]), stream);
            break;
        case OpKind::moe_linear_fwd:  // v0 = X [pairs, K], v1 = Y [pairs, N]; p0 = W [E N, K]
        case OpKind::moe_linear_bwd_data:  // v0 = dY [pairs, N], v1 = dX [pairs, K] (a window: ld >= K)
        case OpKind::moe_linear_bwd_weight: {  // v0 = dY [pairs, N], v1 = X [pairs, K]; dW += into p0's gradient
            const bool fwd = op.kind == OpKind::moe_linear_fwd;
            const View& xv = fwd ? op.v[0] : op.v[1];
            const View& yv = fwd ? op.v[1] : op.v[0];
            const std::int64_t N = yv.cols, K = xv.cols;
            const ParamSpec& ps = P.params[static_cast<std::size_t>(op.p0)];
            if (xv.rows != S || yv.rows != S || xv.ld < K || yv.ld < N || ps.rows != d.local_experts * N || ps.cols != K)
                throw std::logic_error("DeviceRunner: " + op.name + ": grouped linear operands [" +
                                       std::to_string(xv.rows) + ", " + std::to_string(K) + "] / [" +
                                       std::to_string(yv.rows) + ", " + std::to_string(N) + "] against the stacked " +
                                       ps.name + " [" + std::to_string(ps.rows) + ", " + std::to_string(ps.cols) + "]");
            T* w = op.kind == OpKind::moe_linear_bwd_weight ? grad<T>(t, op.p0) : param<T>(t, op.p0);
            const std::vector<std::int64_t>& off = expert_rows(routing, pairs);
            for (GemmArgs g : moe_expert_gemms(op.kind, off, at<T>(t, xv), xv.ld, at<T>(t, yv), yv.ld, w, N, K, sizeof(T))) {
                if (op.kind == OpKind::moe_linear_bwd_weight) g.alpha = op.scale;  // 1 / ep (program_moe.cpp)
                run_gemm(g);
            }
            break;
        }
        case OpKind::moe_combine:  // v0 = expert outputs, v1 = gates, v3 = out, v4 = residual (may be empty)
            expect_view(op, 0, S, h);
            expect_view(op, 1, rows, k);
            expect_view(op, 3, rows, h);
            if (op.v[4].buffer != kNoBuffer) expect_view(op, 4, rows, h);
            launch_moe_combine<T>(at<T>(t, op.v[0]), at<float>(t, op.v[1]), routing,
                                  op.v[4].buffer == kNoBuffer ? nullptr : at<T>(t, op.v[4]), rows, k, h, slots,
                                  at<T>(t, op.v[3]), stream);
            break;
        case OpKind::moe_combine_bwd:  // v0 = dOut, v1 = expert outputs, v2 = gates -> v4 = dy, v5 = d gates
            expect_view(op, 0, rows, h);
            expect_view(op, 1, S, h);
            expect_view(op, 2, rows, k);
            expect_view(op, 4, S, h);
            expect_view(op, 5, rows, k);
            launch_moe_combine_bwd<T>(at<T>(t, op.v[0]), at<T>(t, op.v[1]), at<float>(t, op.v[2]), routing, rows, k, h,
                                      slots, at<T>(t, op.v[4]), at<float>(t, op.v[5]), stream);
            break;
        case OpKind::moe_route_bwd:  // v0 = d gates, v1 = gates -> v3 = d logits
            expect_view(op, 0, rows, k);
            expect_view(op, 1, rows, k);
            expect_view(op, 3, rows, E);
            if (!d.renormalize_gates) expect_view(op, 4, rows, E);
            launch_moe_route_bwd<T>(at<float>(t, op.v[0]), at<float>(t, op.v[1]), routing,
                                    d.renormalize_gates ? nullptr : at<T>(t, op.v[4]), rows, E, k, at<T>(t, op.v[3]),
                                    stream);
            break;
        case OpKind::moe_dispatch_bwd:  // v0 = d slots -> v1 = dx (+= when accumulate)
            expect_view(op, 0, S, h);
            expect_view(op, 1, rows, h);
            launch_moe_dispatch_bwd<T>(at<T>(t, op.v[0]), routing, rows, k, h, slots, at<T>(t, op.v[1]), op.accumulate,
                                       stream);
            break;
        default: throw std::logic_error("DeviceRunner: not a mixture-of-experts op");
    }
}

template <class T>
void DeviceRunner::swiglu(const Op& op, const BufferTable& t) {
    if (op.kind == OpKind::swiglu_fwd)
        launch_swiglu_fwd<T>(at<T>(t, op.v[0]), at<T>(t, op.v[1]), op.v[0].rows, d.ffn, stream);
    else  // v0: d(act) in, d(gate)|d(up) out; v1: gate|up
        launch_swiglu_bwd<T>(at<T>(t, op.v[1]), at<T>(t, op.v[0]), op.v[0].rows, d.ffn, stream);
}

template void DeviceRunner::run_moe<float>(const Op&, const BufferTable&);
template void DeviceRunner::run_moe<bf16>(const Op&, const BufferTable&);
template void DeviceRunner::swiglu<float>(const Op&, const BufferTable&);
template void DeviceRunner::swiglu<bf16>(const Op&, const BufferTable&);

}  // namespace preflight::runtime::cuda
