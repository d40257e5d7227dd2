// The host executor's fp8 ops (host_runner.hpp): the casts with per-tensor current scaling and
// the fp8 GEMMs, computed as the device computes them (reference.hpp quantize_fp8 semantics):
// the quantized operands' product times both dequantization factors, then the bias and the
// residual in bf16's place (double here).
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "preflight/runtime/host_runner.hpp"
#include "preflight/runtime/reference.hpp"

namespace preflight::runtime {

namespace {

ref::Fp8Format format_of(DType t) { return t == DType::f8e5m2 ? ref::Fp8Format::e5m2 : ref::Fp8Format::e4m3; }

}  // namespace

// Quantizes rows x cols elements read through `at(i, j)` into `row` ([rows, cols], may be null)
// and `col` ([cols, rows], may be null); the amax and dequantization factor go to scale slot `slot`.
template <class At>
void HostRunner::quantize_into(At at, std::int64_t rows, std::int64_t cols, DType t, double* row, double* col, int slot) {
    std::vector<double> x(static_cast<std::size_t>(rows * cols));
    for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j) x[static_cast<std::size_t>(i * cols + j)] = at(i, j);
    const ref::Fp8Tensor q = ref::quantize_fp8(x.data(), rows * cols, format_of(t));
    for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j) {
            const double v = q.q[static_cast<std::size_t>(i * cols + j)];
            if (row) row[i * cols + j] = v;
            if (col) col[j * rows + i] = v;
        }
    double* s = buf_.at(P.fp8_scales).data() + 2 * slot;
    s[0] = q.amax;
    s[1] = q.scale_inv;
}

double HostRunner::scale_inv(int slot) { return buf_.at(P.fp8_scales).at(static_cast<std::size_t>(2 * slot + 1)); }

void HostRunner::run_fp8(const Op& op) {
    if (op.kind == OpKind::fp8_cast_weights) {  // every layer GEMM weight (or unit op.unit's) into its cache
        for (std::size_t i = 0; i < P.params.size(); ++i) {
            const std::int64_t off = P.fp8_weight_offset[i];
            if (off < 0) continue;
            const ParamSpec& ps = P.params[i];
            if (op.unit >= 0 && ps.unit != op.unit) continue;
            const ParamRef at_w = P.weight_at(static_cast<ParamId>(i));
            const double* w = buf_.at(at_w.buffer).data() + at_w.offset;
            double* cache = buf_.at(P.fp8_weight_buffer[i]).data() + off;
            quantize_into([&](std::int64_t r, std::int64_t c) { return w[r * ps.cols + c]; }, ps.rows, ps.cols,
                          DType::f8e4m3, cache, cache + ps.numel(), P.fp8_weight_slot[i]);
        }
        return;
    }
    // fp8_cast: v0 the bf16 input; v1 / v2 the row-major / transposed copies.
    const View& in = op.v[0];
    const double* src = at(in);
    const DType t = P.buffers[static_cast<std::size_t>(op.v[1].buffer != kNoBuffer ? op.v[1].buffer : op.v[2].buffer)].dtype;
    quantize_into([&](std::int64_t r, std::int64_t c) { return src[r * in.ld + c]; }, in.rows, in.cols, t,
                  op.v[1].buffer != kNoBuffer ? at(op.v[1]) : nullptr, op.v[2].buffer != kNoBuffer ? at(op.v[2]) : nullptr,
                  op.scale_a);
    if (op.kept_scale) {  // the kept X^T's own amax and dequantization factor, after its elements
        const double* s = buf_.at(P.fp8_scales).data() + 2 * op.scale_a;
        std::copy(s, s + 2, at(op.v[2]) + in.rows * in.cols);
    }
}

// The fp8 GEMMs of a linear (program_fp8.cpp emit_gemm_fwd / emit_gemm_bwd): forward X8 (v0) with
// the cached W8; data gradient dY8 (v0) with the cached W8^T; weight gradient dY8^T (v0) with the
// kept X8^T (v1), the bias gradient from the bf16 dY (v2).
void HostRunner::run_fp8_linear(const Op& op) {
    const ParamSpec& ps = P.params[static_cast<std::size_t>(op.p0)];
    const auto wi = static_cast<std::size_t>(op.p0);
    const double* cache = buf_.at(P.fp8_weight_buffer[wi]).data() + P.fp8_weight_offset[wi];
    // The weight gradient dequantises X^T by the factor its cast kept with it (Op::kept_scale).
    const double x_scale_inv = op.kept_scale ? at(op.v[1])[op.v[1].rows * op.v[1].cols + 1] : scale_inv(op.scale_b);
    const double s = scale_inv(op.scale_a) * x_scale_inv;
    const std::int64_t N = ps.rows, K = ps.cols;
    if (op.kind == OpKind::linear_fwd) {  // Y[M, N] = s X8 W8^T (+ b) (+ residual)
        const View &x = op.v[0], &y = op.v[1];
        const double *X = at(x), *b = w(op.p1), *res = op.v[2].buffer != kNoBuffer ? at(op.v[2]) : nullptr;
        double* Y = at(y);
        for (std::int64_t i = 0; i < x.rows; ++i)
            for (std::int64_t n = 0; n < N; ++n) {
                double acc = 0;
                for (std::int64_t k = 0; k < K; ++k) acc += X[i * x.ld + k] * cache[n * K + k];
                Y[i * y.ld + n] = s * acc + (b ? b[n] : 0.0) + (res ? res[i * op.v[2].ld + n] : 0.0);
            }
    } else if (op.kind == OpKind::linear_bwd_data) {  // dX[M, K] (=|+=) s dY8 (W8^T)^T
        const View &dy = op.v[0], &dx = op.v[1];
        const double* G = at(dy);
        const double* WT = cache + ps.numel();  // [K, N]
        double* D = at(dx);
        for (std::int64_t i = 0; i < dy.rows; ++i)
            for (std::int64_t k = 0; k < K; ++k) {
                double acc = 0;
                for (std::int64_t n = 0; n < N; ++n) acc += G[i * dy.ld + n] * WT[k * N + n];
                D[i * dx.ld + k] = s * acc + (op.accumulate ? D[i * dx.ld + k] : 0.0);
            }
    } else {  // linear_bwd_weight: dW[N, K] += s dY8^T (X8^T)^T; db += colsum(dY)
        const View &gt = op.v[0], &xt = op.v[1];
        const double *G = at(gt), *X = at(xt);
        double* dW = g(op.p0);
        const std::int64_t M = gt.cols;
        for (std::int64_t n = 0; n < N; ++n)
            for (std::int64_t k = 0; k < K; ++k) {
                double acc = 0;
                for (std::int64_t m = 0; m < M; ++m) acc += G[n * gt.ld + m] * X[k * xt.ld + m];
                dW[n * K + k] += s * acc;
            }
        if (op.p1 != kNoParam) {
            const View& dy = op.v[2];
            const double* Y = at(dy);
            double* db = g(op.p1);
            for (std::int64_t i = 0; i < dy.rows; ++i)
                for (std::int64_t n = 0; n < N; ++n) db[n] += Y[i * dy.ld + n];
        }
    }
}

}  // namespace preflight::runtime
