// One decoder layer's kernels as Hugging Face's eager modules run them (eager_kernels.hpp).
//
// The layer is written down op by op, as transformers' modeling_gpt2.py / modeling_llama.py /
// modeling_phi3.py (v5) call them, on a small tape. Each op adds its forward kernels and records
// what its backward launches, from PyTorch's derivative formulas (tools/autograd/derivatives.yaml):
//  - a cast's backward casts the gradient back; autograd casts a gradient computed at another
//    dtype to its input's (torch/csrc/autograd/engine.cpp, validate_outputs);
//  - a product's backward multiplies the gradient by the other operand, per input; a sum
//    passes it through, unless the input was broadcast (a reduction) or of another dtype (a cast);
//  - a tensor read by k ops that send gradients back gets k - 1 gradient sums (AccumulateGrad
//    aside, autograd adds the incoming gradients);
//  - torch.autocast casts each fp32 activation to bf16 at every GEMM it feeds (activations are
//    not cached; only the weights' casts are, once per forward: autocast_mode.cpp cached_cast),
//    and runs pow, softmax and layer_norm in fp32 (the torch.amp op lists).
// GEMM and attention kernels count as launches only; their time is the roofline's.
#include "preflight/planner/eager_kernels.hpp"

#include <array>
#include <vector>

namespace preflight::eager {

namespace {

struct Tensor {
    double elems = 0;  // elements in the micro-batch
    int bytes = 2;
    bool grad = false;  // sends a gradient back
    int uses = 0;       // ops that send it a gradient
};

class Tape {
public:
    LayerKernels k;

    int bytes(int x) const { return t_[x].bytes; }
    int leaf(double elems, int bytes, bool grad) { return add({elems, bytes, grad, 0}); }

    // Ops over the attention scores charge their bytes to the score figures.
    void scores(bool on) { scores_ = on; }

    int cast(int x, int bytes) {
        const Tensor in = t_[x];
        if (in.bytes == bytes) return x;
        fwd(in.elems * (in.bytes + bytes));
        if (use(x)) bwd(in.elems * (in.bytes + bytes));
        return add({in.elems, bytes, in.grad, 0});
    }
    // x times (or plus) a Python scalar, or negated: the gradient is scaled (`passes` = false)
    // or passed through (`passes` = true, x + c).
    int scalar_op(int x, bool passes = false) {
        const Tensor in = t_[x];
        fwd(2.0 * in.elems * in.bytes);
        if (use(x) && !passes) bwd(2.0 * in.elems * in.bytes);
        return add({in.elems, in.bytes, in.grad, 0});
    }
    // tanh, silu, rsqrt: the backward reads the gradient and the saved input or output.
    int unary(int x) {
        const Tensor in = t_[x];
        fwd(2.0 * in.elems * in.bytes);
        if (use(x)) bwd(3.0 * in.elems * in.bytes);
        return add({in.elems, in.bytes, in.grad, 0});
    }
    // pow(x, n): backward grad * n * x.pow(n - 1), three kernels (derivatives.yaml pow_backward).
    int power(int x) {
        const Tensor in = t_[x];
        fwd(2.0 * in.elems * in.bytes);
        if (use(x)) bwd(2.0 * in.elems * in.bytes), bwd(2.0 * in.elems * in.bytes), bwd(3.0 * in.elems * in.bytes);
        return add({in.elems, in.bytes, in.grad, 0});
    }
    // x * y or x + y at `out_bytes` (type promotion); the smaller operand is broadcast.
    int binary(int x, int y, int out_bytes, bool product) {
        const Tensor a = t_[x], b = t_[y];
        const double out = a.elems > b.elems ? a.elems : b.elems;
        fwd(a.elems * a.bytes + b.elems * b.bytes + out * out_bytes);
        const int ids[2] = {x, y};
        for (int i = 0; i < 2; ++i) {
            const Tensor in = t_[ids[i]], other = t_[ids[1 - i]];
            if (!use(ids[i])) continue;
            if (product) bwd(out * out_bytes * 2.0 + other.elems * other.bytes);
            if (in.elems < out)
                bwd(out * out_bytes + in.elems * in.bytes);  // sum over the broadcast dimensions
            else if (in.bytes != out_bytes)
                bwd(out * (out_bytes + in.bytes));  // the gradient cast to the input's dtype
        }
        return add({out, out_bytes, a.grad || b.grad, 0});
    }
    // x.split(...) into views of `elems` each; the backward concatenates their gradients.
    std::vector<int> split(int x, std::vector<double> elems) {
        const Tensor in = t_[x];
        if (use(x)) bwd(2.0 * in.elems * in.bytes);
        std::vector<int> parts;
        for (double e : elems) parts.push_back(add({e, in.bytes, in.grad, 0}));
        return parts;
    }
    // x[..., a:b], a view of `elems`. Backward (slice_backward): a zero-filled gradient of x's size,
    // the slice's gradient copied in; autograd then sums the gradients of x's slices (finish).
    int slice(int x, double elems) {
        const Tensor in = t_[x];
        if (use(x)) bwd(in.elems * in.bytes), bwd(2.0 * elems * in.bytes);
        return add({elems, in.bytes, in.grad, 0});
    }
    // x.mean(-1, keepdim=True) to `out_elems`; the backward expands the gradient back.
    int row_mean(int x, double out_elems) {
        const Tensor in = t_[x];
        fwd(in.elems * in.bytes + out_elems * in.bytes);
        if (use(x)) bwd(out_elems * in.bytes + in.elems * in.bytes);
        return add({out_elems, in.bytes, in.grad, 0});
    }
    // .contiguous() after a transpose: a copy forward, a view of the gradient backward.
    int copy(int x) {
        const Tensor in = t_[x];
        fwd(2.0 * in.elems * in.bytes);
        use(x);
        return add({in.elems, in.bytes, in.grad, 0});
    }
    // repeat_kv: expand + reshape copies x `factor` times; the backward sums the copies.
    int repeat(int x, double factor) {
        const Tensor in = t_[x];
        if (factor <= 1.0) return x;
        fwd(in.elems * in.bytes * (1.0 + factor));
        if (use(x)) bwd(in.elems * in.bytes * (1.0 + factor));
        return add({in.elems * factor, in.bytes, in.grad, 0});
    }
    // rotate_half: cat((-x2, x1)) of x's two halves. Backward: the negation's, and each slice's
    // slice_backward (a zero-filled gradient of x's size, the half copied in); two reads of x.
    int rotate_half(int x) {
        const Tensor in = t_[x];
        const double e = in.elems, b = in.bytes;
        fwd(e * b);          // -x2
        fwd(2.0 * e * b);    // cat
        if (use(x)) {
            use(x);
            bwd(e * b);  // neg backward over the half
            for (int i = 0; i < 2; ++i) bwd(e * b), bwd(e * b);  // zeros, then the half copied in
        }
        return add({e, in.bytes, in.grad, 0});
    }
    // torch.nn.LayerNorm (autocast: fp32): one kernel; the backward's input gradient, and the
    // weight and bias gradients reading the output gradient and the input again.
    int layer_norm(int x, int out_bytes) {
        const Tensor in = t_[x];
        fwd(in.elems * (in.bytes + out_bytes));
        if (use(x)) bwd(in.elems * (out_bytes + 2.0 * in.bytes)), bwd(in.elems * (out_bytes + in.bytes));
        return add({in.elems, out_bytes, in.grad, 0});
    }
    // softmax (one kernel, at `out_bytes` when given a dtype); backward reads gradient and output.
    int softmax(int x, int out_bytes) {
        const Tensor in = t_[x];
        fwd(in.elems * (in.bytes + out_bytes));
        if (use(x)) bwd(in.elems * (2.0 * out_bytes + in.bytes));
        return add({in.elems, out_bytes, in.grad, 0});
    }
    // A linear layer's GEMM (its bytes are the roofline's). Under autocast each fp32 weight and
    // bias is cast to bf16 once per forward and its bf16 gradient cast back to fp32.
    int gemm(int x, double out_elems, int out_bytes, double weight_params, double bias_params, bool autocast) {
        ++k.fwd_kernels;
        if (use(x)) ++k.bwd_kernels;  // input gradient
        ++k.bwd_kernels;              // weight gradient
        if (bias_params > 0) bwd(out_elems * out_bytes + bias_params * out_bytes);  // bias gradient: column sums
        for (double params : {weight_params, bias_params}) {
            if (!autocast || params <= 0) continue;
            fwd(params * 6.0);
            bwd(params * 6.0);
        }
        return add({out_elems, out_bytes, true, 0});
    }
    // A batched matmul of two activations (eager attention) or the fused attention kernel.
    int kernel_of(std::vector<int> inputs, double out_elems, int out_bytes, int bwd_kernels) {
        ++k.fwd_kernels;
        for (int x : inputs) use(x);
        k.bwd_kernels += bwd_kernels;
        return add({out_elems, out_bytes, true, 0});
    }

    // Gradient sums of the tensors read more than once.
    LayerKernels finish() {
        for (const Tensor& x : t_)
            for (int i = 1; i < x.uses; ++i) bwd(3.0 * x.elems * x.bytes);
        return k;
    }

private:
    std::vector<Tensor> t_;
    bool scores_ = false;

    int add(Tensor x) {
        t_.push_back(x);
        return static_cast<int>(t_.size()) - 1;
    }
    bool use(int x) {
        if (!t_[x].grad) return false;
        ++t_[x].uses;
        return true;
    }
    void fwd(double bytes) {
        (scores_ ? k.score_fwd_bytes : k.fwd_bytes) += bytes;
        ++k.fwd_kernels;
    }
    void bwd(double bytes, int kernels = 1) {
        (scores_ ? k.score_bwd_bytes : k.bwd_bytes) += bytes;
        k.bwd_kernels += kernels;
    }
};

// Widths and dtypes of the layer.
struct Shape {
    double tokens = 0, h = 0, q = 0, kv = 0, f = 0, heads = 0, seq = 0, head_dim = 0;
    int act = 2;       // GEMM outputs and the model's own dtype
    int residual = 2;  // the residual stream (fp32 under autocast: fp32 embeddings)
    bool autocast = false;
    bool eager = false;
};

// An activation as a GEMM reads it: autocast casts fp32 to bf16 at every GEMM call.
int gemm_input(Tape& t, int x, const Shape& s) { return s.autocast ? t.cast(x, 2) : x; }

// softmax over the scores and P*V; `llama`: softmax(dtype=float32) then .to(dtype) (Llama's
// eager_attention_forward); GPT-2: softmax under autocast's fp32 list, then .type(value.dtype).
int eager_core(Tape& t, int q, int k, int v, const Shape& s, bool llama) {
    const double factor = s.q / s.kv;  // repeat_kv, then the matmuls' autocast casts
    q = gemm_input(t, q, s);
    k = gemm_input(t, t.repeat(k, factor), s);
    v = gemm_input(t, t.repeat(v, factor), s);
    const double scores = s.tokens * s.heads * s.seq;
    t.scores(true);
    int a = t.kernel_of({q, k}, scores, s.act, 2);  // Q K^T
    a = t.scalar_op(a);                             // * scaling
    // + the 4-D causal mask, built at the model's dtype (fp32 parameters under autocast: the sum is fp32)
    const int wide = s.autocast ? 4 : s.act;
    a = t.binary(a, t.leaf(scores / s.heads, wide, false), wide, false);
    if (llama) {
        a = t.softmax(a, 4);
    } else {
        if (s.autocast) a = t.cast(a, 4);
        a = t.softmax(a, s.autocast ? 4 : s.act);
    }
    a = t.cast(a, s.act);
    t.scores(false);
    return t.kernel_of({a, v}, s.tokens * s.q, s.act, 2);  // P V
}

// Llama's RMSNorm op by op over `rows` rows of `width` (x.to(float32), pow(2).mean(-1),
// rsqrt(var + eps), x * rsqrt, .to(input_dtype), weight * x); the weight is a parameter (the
// residual dtype), so the product promotes to the wider of the two.
int rms_norm(Tape& t, int x, const Shape& s, double rows, double width) {
    const int in_bytes = t.bytes(x);
    const int weight = t.leaf(width, s.residual, true);  // broadcast over the rows
    const int xf = t.cast(x, 4);
    const int var = t.row_mean(t.power(xf), rows);
    const int rs = t.unary(t.scalar_op(var, true));
    const int xn = t.cast(t.binary(xf, rs, 4, true), in_bytes);
    return t.binary(weight, xn, in_bytes > s.residual ? in_bytes : s.residual, true);
}

// q, k and v from the normalized input: GPT-2's c_attn split three ways; Phi-3's qkv_proj sliced
// (Phi3Attention: qkv[..., :q], ...); otherwise q_proj, k_proj and v_proj.
std::array<int, 3> projections(Tape& t, int x, const Shape& s, const ModelConfig& m) {
    const double width = s.q + 2 * s.kv;
    if (m.fused_qkv) {
        const int qkv = t.gemm(gemm_input(t, x, s), s.tokens * width, s.act, s.h * width, m.qkv_bias ? width : 0,
                               s.autocast);
        if (m.position != PositionKind::rope) {
            const std::vector<int> parts = t.split(qkv, {s.tokens * s.q, s.tokens * s.kv, s.tokens * s.kv});
            return {parts[0], parts[1], parts[2]};
        }
        return {t.slice(qkv, s.tokens * s.q), t.slice(qkv, s.tokens * s.kv), t.slice(qkv, s.tokens * s.kv)};
    }
    const double bias_q = m.qkv_bias ? s.q : 0, bias_kv = m.qkv_bias ? s.kv : 0;
    return {t.gemm(gemm_input(t, x, s), s.tokens * s.q, s.act, s.h * s.q, bias_q, s.autocast),
            t.gemm(gemm_input(t, x, s), s.tokens * s.kv, s.act, s.h * s.kv, bias_kv, s.autocast),
            t.gemm(gemm_input(t, x, s), s.tokens * s.kv, s.act, s.h * s.kv, bias_kv, s.autocast)};
}

// The attention block from its normalized input to the attention output before o_proj.
int attention(Tape& t, int qkv_in, const Shape& s, const ModelConfig& m, int cos, int sin) {
    auto [q, k, v] = projections(t, qkv_in, s, m);
    if (m.position == PositionKind::rope) {
        if (m.qk_norm) {  // Qwen3Attention: q_norm / k_norm over each head's head_dim, before RoPE
            q = rms_norm(t, q, s, s.tokens * s.q / s.head_dim, s.head_dim);
            k = rms_norm(t, k, s, s.tokens * s.kv / s.head_dim, s.head_dim);
        }
        auto rope = [&](int x) {  // (x * cos) + (rotate_half(x) * sin), cos/sin at the residual dtype
            const int xc = t.binary(x, cos, s.residual, true);
            return t.binary(xc, t.binary(t.rotate_half(x), sin, s.residual, true), s.residual, false);
        };
        q = rope(q);
        k = rope(k);
    }
    const bool llama = m.norm == NormKind::rmsnorm;
    int a = 0;
    if (s.eager) {
        a = eager_core(t, q, k, v, s, llama);
    } else {
        // SDPA (autocast's lower-precision list): fp32 q/k cast to bf16; K/V repeated only on the
        // fp32 path (validation/pytorch/train.py's causal SDPA, transformers' repeat_kv).
        const double factor = s.act == 4 ? s.q / s.kv : 1.0;
        a = t.kernel_of({gemm_input(t, q, s), t.repeat(gemm_input(t, k, s), factor), t.repeat(v, factor)},
                        s.tokens * s.q, s.act, 3);  // flash backward: preprocess, main, dq convert
    }
    return t.copy(a);  // transpose(1, 2).contiguous()
}

// The normalization before a block: LayerNorm, or Llama's RMSNorm.
int norm(Tape& t, int x, const Shape& s, bool rms) {
    if (!rms) return t.layer_norm(x, s.autocast ? 4 : s.residual);
    return rms_norm(t, x, s, s.tokens, s.h);
}

}  // namespace

LayerKernels hf_layer_kernels(const ModelConfig& m, const Plan& p, bool autocast) {
    Shape s;
    s.tokens = static_cast<double>(p.seq) * static_cast<double>(p.mbs);
    s.h = static_cast<double>(m.hidden);
    s.q = static_cast<double>(m.q_width());
    s.kv = static_cast<double>(m.kv_width());
    s.f = static_cast<double>(m.ffn_hidden);
    s.heads = static_cast<double>(m.heads);
    s.seq = static_cast<double>(p.seq);
    s.head_dim = static_cast<double>(m.head_dim);
    s.act = autocast ? 2 : precision_bytes(p.precision).activation;
    s.residual = autocast ? 4 : s.act;
    s.autocast = autocast;
    s.eager = p.attention == AttentionKind::eager;
    const bool rms = m.norm == NormKind::rmsnorm;

    Tape t;
    const int x = t.leaf(s.tokens * s.h, s.residual, true);
    const int cos = t.leaf(s.tokens * s.head_dim, s.residual, false), sin = cos;
    const int a = attention(t, norm(t, x, s, rms), s, m, cos, sin);
    const int o = t.gemm(gemm_input(t, a, s), s.tokens * s.h, s.act, s.q * s.h, m.out_bias ? s.h : 0, autocast);
    const int x2 = t.binary(x, o, s.residual, false);
    const int n2 = norm(t, x2, s, rms);
    int inner = 0;
    const double bias_f = m.mlp_bias ? s.f : 0, bias_h = m.mlp_bias ? s.h : 0;
    if (m.mlp == MlpKind::swiglu) {  // down(silu(gate(x)) * up(x)); silu runs at bf16 under autocast
        int g = 0, u = 0;
        if (m.fused_gate_up) {  // Phi3MLP: gate_up_proj, then chunk(2, dim=-1)
            const int gu = t.gemm(gemm_input(t, n2, s), 2 * s.tokens * s.f, s.act, 2 * s.h * s.f, 0, autocast);
            const std::vector<int> parts = t.split(gu, {s.tokens * s.f, s.tokens * s.f});
            g = parts[0], u = parts[1];
        } else {
            g = t.gemm(gemm_input(t, n2, s), s.tokens * s.f, s.act, s.h * s.f, bias_f, autocast);
            u = t.gemm(gemm_input(t, n2, s), s.tokens * s.f, s.act, s.h * s.f, bias_f, autocast);
        }
        inner = t.binary(t.unary(g), u, s.act, true);
    } else {  // gelu_new: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * pow(x, 3)))), pow in fp32
        const int u = t.gemm(gemm_input(t, n2, s), s.tokens * s.f, s.act, s.h * s.f, bias_f, autocast);
        const int cubic = t.scalar_op(t.power(s.autocast ? t.cast(u, 4) : u));
        const int wide = s.autocast ? 4 : s.act;
        const int inner_tanh = t.unary(t.scalar_op(t.binary(u, cubic, wide, false)));
        inner = t.binary(t.scalar_op(u), t.scalar_op(inner_tanh, true), wide, true);
    }
    const int d = t.gemm(gemm_input(t, inner, s), s.tokens * s.h, s.act, s.f * s.h, bias_h, autocast);
    t.binary(x2, d, s.residual, false);
    return t.finish();
}

}  // namespace preflight::eager
