// The fp8-mixed recipe of the step program: the layers' GEMMs take fp8 operands with per-tensor
// current scaling (amax of the tensor just before its cast: Transformer Engine's current scaling,
// torchao's tensorwise Float8 default), E4M3 for inputs and weights and E5M2 for output gradients
// (Micikevicius et al. 2022, sec. 4). Hopper's fp8 GEMMs take both operands K-major (cuBLASLt: "A
// transposed, B not"), so each tensor is cast row-major for one GEMM and transposed for another
// (as Transformer Engine keeps "row-wise" and "column-wise" data): forward X (row-major) with W;
// data gradient dY (row-major) with W^T; weight gradient dY^T with X^T, X^T kept from the forward.
// The weights are cast once per step into a cache of W and W^T; under ZeRO-3, a layer's after each
// gather of it, into a cache that lives as long as the gathered layer (torchao's Float8 under FSDP2
// without fp8 all-gather casts the gathered bf16 weight the same way). Master weights, optimizer,
// the non-GEMM ops, the attention products and the LM head stay as in bf16-mixed.
#include <stdexcept>

#include "preflight/planner/profiles.hpp"
#include "program_builder.hpp"

namespace preflight::runtime::program_detail {

namespace {

constexpr int kGemmsPerLayer = 4;  // qkv, out, up (gate|up or fc1), down (fc2)

// The layer GEMM weights, their layer and index. A mixture of experts' router and experts stay
// 16-bit, as torchtitan's Float8LinearConverter leaves its grouped experts (fp8 experts are its
// separate Float8GroupedExpertsConverter, components/quantization/float8.py): only the attention's
// q|k|v and output projections take fp8 there.
std::vector<std::pair<ParamId, int>> layer_gemm_weights(const Program& P) {
    std::vector<std::pair<ParamId, int>> v;
    for (const LayerParams& lp : P.layer_params) {
        v.emplace_back(lp.qkv_w, 0);
        v.emplace_back(lp.out_w, 1);
        if (P.dims.moe()) continue;
        v.emplace_back(lp.up_w, 2);
        v.emplace_back(lp.down_w, 3);
    }
    return v;
}

// ZeRO-3 holds no full weights: each layer unit is cast after its gathers, into its own cache.
bool per_unit_cache(const Program& P) { return P.plan.zero == zero_weights; }

bool has_fp8_copy(const Program& P, ParamId w) {
    return P.fp8 && w != kNoParam && P.fp8_weight_slot[static_cast<std::size_t>(w)] >= 0;
}

View whole_of(const Program& P, BufferId b, std::int64_t rows, std::int64_t cols) {
    (void)P;
    return {b, rows, cols, cols, 0};
}

// fp8_cast: v0 = the bf16 input, v1 = row-major copy (may be empty), v2 = transposed copy (may be empty).
Op& emit_cast(Builder& B, std::vector<Op>& out, const std::string& name, const Phase& ph, const View& in, BufferId rowwise,
              BufferId colwise, std::int32_t slot) {
    Program& P = B.p_;
    Op& o = B.emit(out, OpKind::fp8_cast, name + " fp8 cast", ph);
    o.v[0] = in;
    if (rowwise != kNoBuffer) {
        o.alloc.push_back(rowwise);
        o.v[1] = whole_of(P, rowwise, in.rows, in.cols);
    }
    if (colwise != kNoBuffer) {
        o.alloc.push_back(colwise);
        o.v[2] = whole_of(P, colwise, in.cols, in.rows);
    }
    o.scale_a = slot;
    return o;
}

}  // namespace

std::int32_t fp8_slot(std::int64_t layer, int gemm, Fp8Operand o) {
    return static_cast<std::int32_t>(((layer - 1) * kGemmsPerLayer + gemm) * 3 + static_cast<int>(o));
}

void add_fp8_buffers(Builder& B) {
    Program& P = B.p_;
    P.fp8_weight_offset.assign(P.params.size(), -1);
    P.fp8_weight_slot.assign(P.params.size(), -1);
    P.fp8_weight_buffer.assign(P.params.size(), kNoBuffer);
    if (!P.fp8) return;
    const bool per_unit = per_unit_cache(P);
    std::int64_t cache = 0, unit = -1;
    for (auto [w, j] : layer_gemm_weights(P)) {
        const ParamSpec& ps = P.params[static_cast<std::size_t>(w)];
        if (per_unit && ps.unit != unit) unit = ps.unit, cache = 0;  // offsets within the unit's cache
        P.fp8_weight_offset[static_cast<std::size_t>(w)] = cache;
        P.fp8_weight_slot[static_cast<std::size_t>(w)] = fp8_slot(ps.layer, j, Fp8Operand::weight);
        cache += 2 * ps.numel();  // W [N, K] and W^T [K, N]
    }
    if (!per_unit) {
        P.fp8_weights = B.buffer("fp8 weight cache (W, W^T)", Category::weights, DType::f8e4m3, cache);
        for (auto [w, j] : layer_gemm_weights(P)) P.fp8_weight_buffer[static_cast<std::size_t>(w)] = P.fp8_weights;
    }
    P.fp8_scales = B.buffer("fp8 scales (amax, dequantization factor)", Category::workspace, DType::f32,
                            2 * P.dims.layers * kGemmsPerLayer * 3);
}

void add_unit_fp8_buffers(Builder& B) {
    Program& P = B.p_;
    if (!P.fp8 || !per_unit_cache(P)) return;
    std::vector<std::int64_t> elements(P.layout.units.size(), 0);
    for (auto [w, j] : layer_gemm_weights(P)) {
        const ParamSpec& ps = P.params[static_cast<std::size_t>(w)];
        elements[static_cast<std::size_t>(ps.unit)] += 2 * ps.numel();
    }
    P.unit_fp8.assign(P.layout.units.size(), kNoBuffer);
    for (std::size_t u = 0; u < elements.size(); ++u)
        if (elements[u] > 0)
            P.unit_fp8[u] = B.buffer(unit_name(P.layout.units[u]) + " fp8 weights (W, W^T)", Category::sharding,
                                     DType::f8e4m3, elements[u]);
    for (auto [w, j] : layer_gemm_weights(P)) {
        const auto i = static_cast<std::size_t>(w);
        P.fp8_weight_buffer[i] = P.unit_fp8[static_cast<std::size_t>(P.params[i].unit)];
    }
}

void cast_unit_fp8(Builder& B, std::vector<Op>& out, std::size_t u, const Phase& ph) {
    Program& P = B.p_;
    if (P.unit_fp8.empty() || P.unit_fp8[u] == kNoBuffer) return;
    // fp8_cast_weights (one unit): the gathered unit's GEMM weights into its cache (allocated here)
    Op& o = B.emit(out, OpKind::fp8_cast_weights, unit_name(P.layout.units[u]) + " fp8 cast of the gathered weights", ph);
    o.unit = static_cast<std::int64_t>(u);
    o.alloc = {P.unit_fp8[u]};
}

BufferId emit_gemm_fwd(Builder& B, std::vector<Op>& out, const std::string& name, const Phase& ph, const View& in,
                       const View& y, ParamId w, ParamId b, const View& residual, bool free_input, bool run_gemm) {
    Program& P = B.p_;
    if (!has_fp8_copy(P, w)) {
        if (run_gemm) emit_linear_fwd(B, out, name, ph, in, y, w, b, residual);
        return kNoBuffer;
    }
    const std::int32_t ws = P.fp8_weight_slot[static_cast<std::size_t>(w)], xs = ws - 1;
    const BufferId x8 = run_gemm ? B.buffer(name + " input fp8", Category::temporary, DType::f8e4m3, in.rows * in.cols)
                                 : kNoBuffer;
    const BufferId x8t = B.buffer(name + " input fp8 (transposed)", Category::activations, DType::f8e4m3,
                                  in.rows * in.cols + kRuntimeFp8KeptScaleBytes);
    Op& cast = emit_cast(B, out, name, ph, in, x8, x8t, xs);
    cast.kept_scale = true;
    if (free_input) cast.free.push_back(in.buffer);
    if (!run_gemm) return x8t;
    emit_linear_fwd(B, out, name, ph, whole_of(P, x8, in.rows, in.cols), y, w, b, residual);
    Op& o = out.back();
    o.scale_a = xs;
    o.scale_b = ws;
    o.free.push_back(x8);
    return x8t;
}

void emit_gemm_bwd(Builder& B, std::vector<Op>& out, const std::string& name, const Phase& ph, const View& dy,
                   const View& x, BufferId x8t, const View& dx, ParamId w, ParamId b, std::vector<BufferId> alloc_dx) {
    Program& P = B.p_;
    if (!has_fp8_copy(P, w)) {
        // The fp8 path reads only x's width; the bf16 weight gradient reads x itself.
        if (x.buffer == kNoBuffer) throw std::logic_error(name + ": a bf16 weight gradient without its input");
        emit_linear_bwd(B, out, name, ph, dy, x, dx, w, b, std::move(alloc_dx));
        return;
    }
    const std::int32_t ws = P.fp8_weight_slot[static_cast<std::size_t>(w)], xs = ws - 1, gs = ws + 1;
    const std::int64_t M = dy.rows, N = dy.cols, K = x.cols;
    const BufferId g8 = B.buffer(name + " output gradient fp8", Category::temporary, DType::f8e5m2, M * N);
    const BufferId g8t = B.buffer(name + " output gradient fp8 (transposed)", Category::temporary, DType::f8e5m2, M * N);
    emit_cast(B, out, name + " gradient", ph, dy, g8, g8t, gs);
    emit_linear_bwd(B, out, name, ph, whole_of(P, g8, M, N), x, dx, w, b, std::move(alloc_dx));
    Op& dgrad = out[out.size() - 2];
    dgrad.scale_a = gs;
    dgrad.scale_b = ws;
    Op& wgrad = out.back();  // linear_bwd_weight under fp8: v0 = dY^T [N, M], v1 = X^T [K, M], v2 = dY (bias)
    wgrad.v[0] = whole_of(P, g8t, N, M);
    wgrad.v[1] = whole_of(P, x8t, K, M);
    wgrad.v[2] = dy;
    wgrad.scale_a = gs;
    wgrad.scale_b = xs;
    wgrad.kept_scale = true;
    wgrad.free.push_back(g8);
    wgrad.free.push_back(g8t);
}

}  // namespace preflight::runtime::program_detail
