// Internal to the runtime's program builder (program.cpp, program_layer.cpp): the builder
// that appends buffers, parameters and ops to a Program, and the emitters of one decoder
// layer's forward and backward.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "preflight/runtime/program.hpp"

namespace preflight::runtime::program_detail {

// Parameter offsets are aligned to 64 elements (128 B in bf16) for the GEMMs; model
// widths are multiples of 64 in practice, so this adds no padding.
inline constexpr std::int64_t kParamAlign = 64;

class Builder {
public:
    explicit Builder(Program& p) : p_(p), d_(p.dims) {}

    BufferId buffer(std::string name, Category c, DType t, std::int64_t elements) {
        p_.buffers.push_back({std::move(name), c, t, elements});
        return static_cast<BufferId>(p_.buffers.size() - 1);
    }
    // Activation-sized [rows, cols] buffer at the activation dtype.
    BufferId act(std::string name, std::int64_t cols, Category c = Category::activations) {
        return buffer(std::move(name), c, p_.act, d_.rows * cols);
    }
    View full(BufferId b, std::int64_t cols) const { return {b, d_.rows, cols, cols, 0}; }
    // [b*heads*s, s] attention scores or probabilities.
    View scores(BufferId b) const { return {b, d_.b * d_.heads * d_.s, d_.s, d_.s, 0}; }
    // [b*heads, s] fp32 log-sum-exp of flash attention.
    View lse(BufferId b) const { return {b, d_.b * d_.heads, d_.s, d_.s, 0}; }

    Op& emit(std::vector<Op>& out, OpKind k, std::string name, Phase ph) {
        out.push_back(Op{});
        Op& o = out.back();
        o.kind = k;
        o.name = std::move(name);
        o.phase = ph;
        return o;
    }

    ParamId param(std::string name, std::int64_t rows, std::int64_t cols, std::int64_t layer, bool decay) {
        p_.params.push_back({std::move(name), rows, cols, p_.param_elements, layer, decay});
        p_.param_elements += (rows * cols + kParamAlign - 1) / kParamAlign * kParamAlign;
        return static_cast<ParamId>(p_.params.size() - 1);
    }

    Program& p_;
    const Dims& d_;
};

// "L<l> ": the prefix of layer l's buffer and op names.
inline std::string layer_label(std::int64_t l) {
    std::string s = "L";  // appended piecewise: GCC 12 warns (-Wrestrict) on "L" + to_string(l)
    s += std::to_string(l);
    s += ' ';
    return s;
}

// The buffers one layer's forward creates.
struct LayerFwd {
    BufferId x = kNoBuffer, xn1 = kNoBuffer, qkv = kNoBuffer, core = kNoBuffer, attn = kNoBuffer, x1 = kNoBuffer,
             xn2 = kNoBuffer, up = kNoBuffer, act = kNoBuffer, out = kNoBuffer;
};

// Emits one layer's forward. Saved tensors follow the planner's inventory
// (memory.cpp full_inventory): x (norm input), xn1 (QKV GEMM input), qkv (Q, K after
// RoPE and V), softmax output (eager) or log-sum-exp (flash), attention output, x1
// (MLP norm input), xn2 (MLP GEMM input), gate|up or fc1 output, down/fc2 GEMM input.
// `produce_output` false (full-recompute re-forward) stops before the down projection.
// `keep_core` false (selective recompute) frees the attention core after use.
LayerFwd emit_layer_forward(Builder& B, std::vector<Op>& out, std::int64_t l, std::int64_t mb, BufferId x,
                            bool produce_output, bool keep_core, const std::string& tag);

// Backward of layer l. `dres` holds dLoss/d(layer output) and is updated in place to
// dLoss/d(layer input).
void emit_layer_backward(Builder& B, std::vector<Op>& out, std::int64_t l, std::int64_t mb, const LayerFwd& saved,
                         BufferId dres);

// Forward of a linear: y = in W^T + b (+ residual), y's buffer allocated by the op.
void emit_linear_fwd(Builder& B, std::vector<Op>& out, const std::string& name, const Phase& ph, const View& in,
                     const View& y, ParamId w, ParamId b, const View& residual = {});

// Forward of a norm over rows of width h: y = norm(x), y allocated by the op.
void emit_norm_fwd(Builder& B, std::vector<Op>& out, const std::string& name, const Phase& ph, BufferId x, BufferId y,
                   ParamId w, ParamId b);

// Backward of a linear: dX (= or +=) dY W, then dW += dY^T X and db += colsum(dY).
void emit_linear_bwd(Builder& B, std::vector<Op>& out, const std::string& name, const Phase& ph, const View& dy,
                     const View& x, const View& dx, ParamId w, ParamId b, std::vector<BufferId> alloc_dx);

// Backward of a norm: x's gradient written (or added, `accumulate`) into dx.
void emit_norm_bwd(Builder& B, std::vector<Op>& out, const std::string& name, const Phase& ph, BufferId x,
                   BufferId dy, BufferId dx, bool accumulate, ParamId w, ParamId b, std::vector<BufferId> alloc,
                   std::vector<BufferId> free);

}  // namespace preflight::runtime::program_detail
