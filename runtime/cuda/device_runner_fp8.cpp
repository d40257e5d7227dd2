// The DeviceRunner's fp8 ops (device_runner.hpp; program_fp8.cpp emits them): the casts with
// per-tensor current scaling (amax.cu, then fp8_cast.cu) and the layers' fp8 GEMMs through
// cuBLASLt with each operand's dequantization factor.
#include "device_runner.hpp"

namespace preflight::runtime::cuda {

namespace {

float* slot_ptr(const Program& P, const BufferTable& t, std::int32_t slot) {
    return static_cast<float*>(t[static_cast<std::size_t>(P.fp8_scales)]) + 2 * slot;
}

std::uint8_t* bytes_at(const BufferTable& t, const View& v) {
    return v.buffer == kNoBuffer ? nullptr : static_cast<std::uint8_t*>(t[static_cast<std::size_t>(v.buffer)]) + v.offset;
}

// Where W (then W^T) of an fp8 layer GEMM weight sits: the step's cache, or its unit's under ZeRO-3.
std::uint8_t* weight_cache(const Program& P, const BufferTable& t, ParamId w) {
    const auto i = static_cast<std::size_t>(w);
    return static_cast<std::uint8_t*>(t[static_cast<std::size_t>(P.fp8_weight_buffer[i])]) + P.fp8_weight_offset[i];
}

GemmArgs::Fp8 fp8_kind(DType d) { return d == DType::f8e5m2 ? GemmArgs::Fp8::e5m2 : GemmArgs::Fp8::e4m3; }

}  // namespace

void DeviceRunner::run_fp8(const Op& op, const BufferTable& t) {
    if (op.kind == OpKind::fp8_cast_weights) {  // every layer GEMM weight (or unit op.unit's): W and W^T into its cache
        for (std::size_t i = 0; i < P.params.size(); ++i) {
            if (P.fp8_weight_offset[i] < 0) continue;
            const ParamSpec& ps = P.params[i];
            if (op.unit >= 0 && ps.unit != op.unit) continue;
            const bf16* w = param<bf16>(t, static_cast<ParamId>(i));
            float* slot = slot_ptr(P, t, P.fp8_weight_slot[i]);
            std::uint8_t* w8 = weight_cache(P, t, static_cast<ParamId>(i));
            launch_amax<bf16>(w, ps.rows, ps.cols, ps.cols, slot, stream);
            launch_fp8_cast<bf16>(w, ps.rows, ps.cols, ps.cols, slot, false, w8, w8 + ps.numel(), stream);
        }
        return;
    }
    // fp8_cast: v0 the bf16 input, v1 / v2 the row-major / transposed copies (either may be empty).
    const View& in = op.v[0];
    const bf16* x = static_cast<const bf16*>(t[static_cast<std::size_t>(in.buffer)]) + in.offset;
    const BufferId out = op.v[1].buffer != kNoBuffer ? op.v[1].buffer : op.v[2].buffer;
    const bool e5m2 = P.buffers[static_cast<std::size_t>(out)].dtype == DType::f8e5m2;
    float* slot = slot_ptr(P, t, op.scale_a);
    launch_amax<bf16>(x, in.rows, in.cols, in.ld, slot, stream);
    launch_fp8_cast<bf16>(x, in.rows, in.cols, in.ld, slot, e5m2, bytes_at(t, op.v[1]), bytes_at(t, op.v[2]), stream);
    if (op.kept_scale)  // the kept X^T's own amax and dequantization factor, after its elements (Op::kept_scale)
        PF_CUDA_CHECK(cudaMemcpyAsync(bytes_at(t, op.v[2]) + in.rows * in.cols, slot, 2 * sizeof(float),
                                      cudaMemcpyDeviceToDevice, stream));
}

// Forward: Y [M, N] = X8 [M, K] W8 [N, K]^T (+ bias, + residual); data gradient: dX [M, K] =
// dY8 [M, N] (W8^T [K, N])^T; weight gradient: dW [N, K] += dY8^T [N, M] (X8^T [K, M])^T, the bias
// gradient from the bf16 dY (v2). Every product takes both operands K-major.
void DeviceRunner::fp8_linear(const Op& op, const BufferTable& t) {
    const ParamSpec& ps = P.params[static_cast<std::size_t>(op.p0)];
    const std::uint8_t* w8 = weight_cache(P, t, op.p0);
    const std::int64_t N = ps.rows, K = ps.cols;
    const View &v0 = op.v[0], &v1 = op.v[1];
    GemmArgs g;
    g.trans_b = true;
    g.A = bytes_at(t, v0);
    g.lda = v0.ld;
    g.fp8_a = fp8_kind(P.buffers[static_cast<std::size_t>(v0.buffer)].dtype);
    g.a_scale = slot_ptr(P, t, op.scale_a) + 1;
    // The weight gradient dequantises X^T (v1) by the factor its cast kept after it (Op::kept_scale).
    g.b_scale = op.kept_scale ? reinterpret_cast<float*>(bytes_at(t, v1) + v1.rows * v1.cols) + 1
                              : slot_ptr(P, t, op.scale_b) + 1;
    if (op.kind == OpKind::linear_fwd) {
        g.M = v0.rows, g.N = N, g.K = K;
        g.B = w8, g.ldb = K, g.fp8_b = GemmArgs::Fp8::e4m3;
        g.D = at<bf16>(t, v1), g.ldd = v1.ld;
        if (op.v[2].buffer != kNoBuffer) g.C = at<bf16>(t, op.v[2]), g.ldc = op.v[2].ld, g.beta = 1.f;
        g.bias = param<bf16>(t, op.p1);
        g.fast_accum = true;
    } else if (op.kind == OpKind::linear_bwd_data) {
        g.M = v0.rows, g.N = K, g.K = N;
        g.B = w8 + ps.numel(), g.ldb = N, g.fp8_b = GemmArgs::Fp8::e4m3;  // W^T [K, N]
        g.D = at<bf16>(t, v1), g.ldd = v1.ld;
        if (op.accumulate) g.C = g.D, g.ldc = g.ldd, g.beta = 1.f;
    } else {
        g.M = N, g.N = K, g.K = v0.cols;
        g.B = bytes_at(t, v1), g.ldb = v1.ld, g.fp8_b = fp8_kind(P.buffers[static_cast<std::size_t>(v1.buffer)].dtype);
        g.D = grad<bf16>(t, op.p0), g.ldd = K, g.C = g.D, g.ldc = K, g.beta = 1.f;
    }
    run_gemm(g);
    if (op.kind == OpKind::linear_bwd_weight && op.p1 != kNoParam) {
        // The bias gradient's column sums run inside this op's time, as in the bf16 path: say so,
        // or the op's GEMM rate would read as the fp8 product's alone.
        launch_bias_grad<bf16>(at<bf16>(t, op.v[2]), grad<bf16>(t, op.p1), op.v[2].rows, op.v[2].cols, op.v[2].ld, stream);
        if (timer_) timer_->relabel("fp8 linear_bwd_weight+bias_grad");
    }
}

}  // namespace preflight::runtime::cuda
