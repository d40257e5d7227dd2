// Builds the step program of a plan: its parameters, buffers and the ops of set-up, step and teardown.
#include "preflight/runtime/program.hpp"

#include <algorithm>

#include "preflight/planner/error.hpp"
#include "preflight/planner/profiles.hpp"

namespace preflight::runtime {

namespace {

// Parameter offsets are aligned to 64 elements (128 B in bf16) for the GEMMs; model
// widths are multiples of 64 in practice, so this adds no padding.
constexpr std::int64_t kParamAlign = 64;

class Builder {
public:
    Builder(Program& p) : p_(p), d_(p.dims) {}

    BufferId buffer(std::string name, Category c, DType t, std::int64_t elements) {
        p_.buffers.push_back({std::move(name), c, t, elements});
        return static_cast<BufferId>(p_.buffers.size() - 1);
    }
    // Activation-sized [rows, cols] buffer at the activation dtype.
    BufferId act(std::string name, std::int64_t cols, Category c = Category::activations) {
        return buffer(std::move(name), c, p_.act, d_.rows * cols);
    }
    View full(BufferId b, std::int64_t cols) const { return {b, d_.rows, cols, cols, 0}; }

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

std::string L(std::int64_t l) {
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
                            bool produce_output, bool keep_core, const std::string& tag) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    const LayerParams& lp = P.layer_params[static_cast<std::size_t>(l - 1)];
    const Phase ph{PhaseKind::forward, l, mb};
    const std::string n = L(l) + tag;
    LayerFwd f;
    f.x = x;

    f.xn1 = B.act(n + "attn norm out", d.h);
    {  // norm_fwd: v0 = x, v1 = y; p0 = weight, p1 = bias
        Op& o = B.emit(out, OpKind::norm_fwd, n + "attn norm", ph);
        o.alloc = {f.xn1};
        o.v[0] = B.full(x, d.h);
        o.v[1] = B.full(f.xn1, d.h);
        o.p0 = lp.norm1_w;
        o.p1 = lp.norm1_b;
    }
    f.qkv = B.act(n + "qkv", d.qkv_width);
    {  // linear_fwd: v0 = in [M,K], v1 = out [M,N], v2 = residual added (optional); p0 = W [N,K], p1 = bias
        Op& o = B.emit(out, OpKind::linear_fwd, n + "qkv proj", ph);
        o.alloc = {f.qkv};
        o.v[0] = B.full(f.xn1, d.h);
        o.v[1] = B.full(f.qkv, d.qkv_width);
        o.p0 = lp.qkv_w;
        o.p1 = lp.qkv_b;
    }
    if (P.model.position == PositionKind::rope) {  // rope_fwd: v0 = qkv (in place on Q and K)
        Op& o = B.emit(out, OpKind::rope_fwd, n + "rope", ph);
        o.v[0] = B.full(f.qkv, d.qkv_width);
    }
    f.attn = B.act(n + "attn out", d.q_width);
    const std::int64_t score_elems = d.b * d.heads * d.s * d.s;
    if (P.plan.attention == AttentionKind::flash) {
        // flash_fwd: v0 = qkv, v1 = out, v2 = log-sum-exp [b, heads, s] fp32
        f.core = B.buffer(n + "softmax lse", Category::activations, DType::f32, d.b * d.heads * d.s);
        Op& o = B.emit(out, OpKind::flash_fwd, n + "flash attention", ph);
        o.alloc = {f.core, f.attn};
        o.v[0] = B.full(f.qkv, d.qkv_width);
        o.v[1] = B.full(f.attn, d.q_width);
        o.v[2] = {f.core, d.b * d.heads, d.s, d.s, 0};
        if (!keep_core) o.free = {f.core};
    } else {
        // Eager: scores = Q K^T / sqrt(d) (transient), P = causal softmax (kept), out = P V.
        const BufferId scores = B.buffer(n + "scores", Category::temporary, P.act, score_elems);
        f.core = B.buffer(n + "softmax out", Category::activations, P.act, score_elems);
        const View sv{scores, d.b * d.heads * d.s, d.s, d.s, 0}, pv{f.core, d.b * d.heads * d.s, d.s, d.s, 0};
        {  // eager_scores: v0 = qkv, v1 = scores
            Op& o = B.emit(out, OpKind::eager_scores, n + "QK^T", ph);
            o.alloc = {scores};
            o.v[0] = B.full(f.qkv, d.qkv_width);
            o.v[1] = sv;
        }
        {  // eager_softmax: v0 = scores, v1 = probabilities
            Op& o = B.emit(out, OpKind::eager_softmax, n + "softmax", ph);
            o.alloc = {f.core};
            o.v[0] = sv;
            o.v[1] = pv;
            o.free = {scores};
        }
        {  // eager_pv: v0 = probabilities, v1 = qkv, v2 = out
            Op& o = B.emit(out, OpKind::eager_pv, n + "PV", ph);
            o.alloc = {f.attn};
            o.v[0] = pv;
            o.v[1] = B.full(f.qkv, d.qkv_width);
            o.v[2] = B.full(f.attn, d.q_width);
            if (!keep_core) o.free = {f.core};
        }
    }
    f.x1 = B.act(n + "mlp norm in", d.h);
    {
        Op& o = B.emit(out, OpKind::linear_fwd, n + "out proj", ph);
        o.alloc = {f.x1};
        o.v[0] = B.full(f.attn, d.q_width);
        o.v[1] = B.full(f.x1, d.h);
        o.v[2] = B.full(x, d.h);
        o.p0 = lp.out_w;
        o.p1 = lp.out_b;
    }
    f.xn2 = B.act(n + "mlp norm out", d.h);
    {
        Op& o = B.emit(out, OpKind::norm_fwd, n + "mlp norm", ph);
        o.alloc = {f.xn2};
        o.v[0] = B.full(f.x1, d.h);
        o.v[1] = B.full(f.xn2, d.h);
        o.p0 = lp.norm2_w;
        o.p1 = lp.norm2_b;
    }
    f.up = B.act(n + (P.model.mlp == MlpKind::swiglu ? "gate|up" : "fc1 out"), d.up_width);
    {
        Op& o = B.emit(out, OpKind::linear_fwd, n + "up proj", ph);
        o.alloc = {f.up};
        o.v[0] = B.full(f.xn2, d.h);
        o.v[1] = B.full(f.up, d.up_width);
        o.p0 = lp.up_w;
        o.p1 = lp.up_b;
    }
    f.act = B.act(n + "down in", d.ffn);
    {  // swiglu_fwd: v0 = gate|up, v1 = silu(gate)*up. gelu_fwd: v0 = fc1 out, v1 = gelu(.)
        Op& o = B.emit(out, P.model.mlp == MlpKind::swiglu ? OpKind::swiglu_fwd : OpKind::gelu_fwd, n + "activation",
                       ph);
        o.alloc = {f.act};
        o.v[0] = B.full(f.up, d.up_width);
        o.v[1] = B.full(f.act, d.ffn);
    }
    if (produce_output) {
        f.out = B.act(L(l + 1) + "attn norm in", d.h);
        Op& o = B.emit(out, OpKind::linear_fwd, n + "down proj", ph);
        o.alloc = {f.out};
        o.v[0] = B.full(f.act, d.ffn);
        o.v[1] = B.full(f.out, d.h);
        o.v[2] = B.full(f.x1, d.h);
        o.p0 = lp.down_w;
        o.p1 = lp.down_b;
    }
    return f;
}

// Backward of a linear: dX (= or +=) dY W, then dW += dY^T X and db += colsum(dY).
// linear_bwd_data: v0 = dY [M,N], v1 = dX [M,K]; p0 = W. linear_bwd_weight: v0 = dY, v1 = X; p0 = W, p1 = bias.
void emit_linear_bwd(Builder& B, std::vector<Op>& out, const std::string& name, const Phase& ph, const View& dy,
                     const View& x, const View& dx, ParamId w, ParamId b, std::vector<BufferId> alloc_dx) {
    {
        Op& o = B.emit(out, OpKind::linear_bwd_data, name + " dgrad", ph);
        o.alloc = std::move(alloc_dx);
        o.v[0] = dy;
        o.v[1] = dx;
        o.p0 = w;
    }
    {
        Op& o = B.emit(out, OpKind::linear_bwd_weight, name + " wgrad", ph);
        o.v[0] = dy;
        o.v[1] = x;
        o.p0 = w;
        o.p1 = b;
    }
}

// norm_bwd: v0 = x, v1 = dY (gradient of the norm output), v2 = dX (+= when accumulate),
// v3 = row statistics scratch [rows, 2] fp32 (recomputed, not kept); p0/p1 weight/bias grads.
void emit_norm_bwd(Builder& B, std::vector<Op>& out, const std::string& name, const Phase& ph, BufferId x,
                   BufferId dy, BufferId dx, bool accumulate, ParamId w, ParamId b, std::vector<BufferId> alloc,
                   std::vector<BufferId> free) {
    const Dims& d = B.d_;
    const BufferId stats = B.buffer(name + " stats", Category::temporary, DType::f32, d.rows * 2);
    Op& o = B.emit(out, OpKind::norm_bwd, name, ph);
    o.alloc = std::move(alloc);
    o.alloc.push_back(stats);
    o.v[0] = B.full(x, d.h);
    o.v[1] = B.full(dy, d.h);
    o.v[2] = B.full(dx, d.h);
    o.v[3] = {stats, d.rows, 2, 2, 0};
    o.accumulate = accumulate;
    o.p0 = w;
    o.p1 = b;
    o.free = std::move(free);
    o.free.push_back(stats);
}

// Backward of layer l. `dres` holds dLoss/d(layer output) and is updated in place to
// dLoss/d(layer input). Working buffers follow the planner's backward transient
// (memory.cpp backward_transient): dres + one more [rows, h] gradient + the widest op's
// gradients (MLP: dgate|dup; eager attention: dP and dS).
void emit_layer_backward(Builder& B, std::vector<Op>& out, std::int64_t l, std::int64_t mb, const LayerFwd& saved,
                         BufferId dres) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    const LayerParams& lp = P.layer_params[static_cast<std::size_t>(l - 1)];
    const Phase ph{PhaseKind::backward, l, mb};
    const std::string n = L(l);
    LayerFwd f = saved;

    // Recompute (Korthikanti et al. 2022, sec. 4): at the start of the layer's backward.
    std::vector<BufferId> recomputed;
    if (P.plan.recompute == Recompute::full) {
        std::vector<Op> re;
        f = emit_layer_forward(B, re, l, mb, saved.x, false, true, "recompute ");
        for (auto& o : re) {
            o.phase = ph;
            out.push_back(std::move(o));
        }
        recomputed = {f.xn1, f.qkv, f.core, f.attn, f.x1, f.xn2, f.up, f.act};
    } else if (P.plan.recompute == Recompute::selective) {
        if (P.plan.attention == AttentionKind::flash) {
            // Re-run the fused kernel: rewrites the (identical) output and the log-sum-exp.
            f.core = B.buffer(n + "recompute softmax lse", Category::activations, DType::f32, d.b * d.heads * d.s);
            Op& o = B.emit(out, OpKind::flash_fwd, n + "recompute flash attention", ph);
            o.alloc = {f.core};
            o.v[0] = B.full(f.qkv, d.qkv_width);
            o.v[1] = B.full(f.attn, d.q_width);
            o.v[2] = {f.core, d.b * d.heads, d.s, d.s, 0};
        } else {
            const std::int64_t se = d.b * d.heads * d.s * d.s;
            const BufferId scores = B.buffer(n + "recompute scores", Category::temporary, P.act, se);
            f.core = B.buffer(n + "recompute softmax out", Category::activations, P.act, se);
            const View sv{scores, d.b * d.heads * d.s, d.s, d.s, 0}, pv{f.core, d.b * d.heads * d.s, d.s, d.s, 0};
            Op& o1 = B.emit(out, OpKind::eager_scores, n + "recompute QK^T", ph);
            o1.alloc = {scores};
            o1.v[0] = B.full(f.qkv, d.qkv_width);
            o1.v[1] = sv;
            Op& o2 = B.emit(out, OpKind::eager_softmax, n + "recompute softmax", ph);
            o2.alloc = {f.core};
            o2.v[0] = sv;
            o2.v[1] = pv;
            o2.free = {scores};
        }
        recomputed = {f.core};
    }

    // MLP. dGU [rows, up_width]: the down dgrad writes dA into its first f columns, the
    // activation backward turns it into d(gate)|d(up) (GeLU: d(fc1 out)) in place.
    const BufferId dgu = B.act(n + "d gate|up", d.up_width, Category::temporary);
    emit_linear_bwd(B, out, n + "down proj", ph, B.full(dres, d.h), B.full(f.act, d.ffn),
                    View{dgu, d.rows, d.ffn, d.up_width, 0}, lp.down_w, lp.down_b, {dgu});
    {  // swiglu_bwd / gelu_bwd: v0 = dGU (in: dA in the first f columns; out: input gradient), v1 = forward input
        Op& o = B.emit(out, P.model.mlp == MlpKind::swiglu ? OpKind::swiglu_bwd : OpKind::gelu_bwd,
                       n + "activation bwd", ph);
        o.v[0] = B.full(dgu, d.up_width);
        o.v[1] = B.full(f.up, d.up_width);
    }
    const BufferId dxn2 = B.act(n + "d mlp norm out", d.h, Category::temporary);
    emit_linear_bwd(B, out, n + "up proj", ph, B.full(dgu, d.up_width), B.full(f.xn2, d.h), B.full(dxn2, d.h),
                    lp.up_w, lp.up_b, {dxn2});
    out.back().free = {dgu};
    emit_norm_bwd(B, out, n + "mlp norm bwd", ph, f.x1, dxn2, dres, true, lp.norm2_w, lp.norm2_b, {}, {dxn2});

    // Attention.
    const BufferId dattn = B.act(n + "d attn out", d.q_width, Category::temporary);
    emit_linear_bwd(B, out, n + "out proj", ph, B.full(dres, d.h), B.full(f.attn, d.q_width),
                    B.full(dattn, d.q_width), lp.out_w, lp.out_b, {dattn});
    const BufferId dqkv = B.act(n + "d qkv", d.qkv_width, Category::temporary);
    if (P.plan.attention == AttentionKind::flash) {
        // flash_bwd: v0 = qkv, v1 = out, v2 = lse, v3 = dOut, v4 = dqkv, v5 = workspace (u8): cuDNN's
        // fp32 dQ accumulator and softmax sum for 16-bit activations; the kernel's D = rowsum(dO*O)
        // fp32 in its first b*heads*s floats (profiles.hpp runtime_flash_bwd_workspace_bytes).
        const BufferId dsum = B.buffer(n + "flash bwd workspace", Category::temporary, DType::u8,
                                       runtime_flash_bwd_workspace_bytes(d.b, d.heads, d.s, d.head_dim,
                                                                         dtype_bytes(P.act)));
        Op& o = B.emit(out, OpKind::flash_bwd, n + "flash attention bwd", ph);
        o.alloc = {dqkv, dsum};
        o.v[0] = B.full(f.qkv, d.qkv_width);
        o.v[1] = B.full(f.attn, d.q_width);
        o.v[2] = {f.core, d.b * d.heads, d.s, d.s, 0};
        o.v[3] = B.full(dattn, d.q_width);
        o.v[4] = B.full(dqkv, d.qkv_width);
        const std::int64_t ws_bytes = P.buffers[static_cast<std::size_t>(dsum)].elements;
        o.v[5] = {dsum, 1, ws_bytes, ws_bytes, 0};
        o.free = {dsum, dattn};
    } else {
        const std::int64_t se = d.b * d.heads * d.s * d.s;
        const BufferId dp = B.buffer(n + "dP", Category::temporary, P.act, se);
        const BufferId ds = B.buffer(n + "dS", Category::temporary, P.act, se);
        const View pv{f.core, d.b * d.heads * d.s, d.s, d.s, 0};
        const View dpv{dp, d.b * d.heads * d.s, d.s, d.s, 0}, dsv{ds, d.b * d.heads * d.s, d.s, d.s, 0};
        {  // eager_dp: v0 = dOut, v1 = qkv, v2 = dP = dO V^T
            Op& o = B.emit(out, OpKind::eager_dp, n + "dP", ph);
            o.alloc = {dp};
            o.v[0] = B.full(dattn, d.q_width);
            o.v[1] = B.full(f.qkv, d.qkv_width);
            o.v[2] = dpv;
        }
        {  // eager_softmax_bwd: v0 = P, v1 = dP, v2 = dS = P * (dP - rowsum(P dP))
            Op& o = B.emit(out, OpKind::eager_softmax_bwd, n + "softmax bwd", ph);
            o.alloc = {ds};
            o.v[0] = pv;
            o.v[1] = dpv;
            o.v[2] = dsv;
            o.free = {dp};
        }
        {  // eager_dqkv: v0 = dS, v1 = P, v2 = dOut, v3 = qkv, v4 = dqkv (dQ = dS K/sqrt(d), dK = dS^T Q/sqrt(d), dV = P^T dO)
            Op& o = B.emit(out, OpKind::eager_dqkv, n + "dQKV", ph);
            o.alloc = {dqkv};
            o.v[0] = dsv;
            o.v[1] = pv;
            o.v[2] = B.full(dattn, d.q_width);
            o.v[3] = B.full(f.qkv, d.qkv_width);
            o.v[4] = B.full(dqkv, d.qkv_width);
            o.free = {ds, dattn};
        }
    }
    if (P.model.position == PositionKind::rope) {  // rope_bwd: v0 = dqkv (in place)
        Op& o = B.emit(out, OpKind::rope_bwd, n + "rope bwd", ph);
        o.v[0] = B.full(dqkv, d.qkv_width);
    }
    const BufferId dxn1 = B.act(n + "d attn norm out", d.h, Category::temporary);
    emit_linear_bwd(B, out, n + "qkv proj", ph, B.full(dqkv, d.qkv_width), B.full(f.xn1, d.h), B.full(dxn1, d.h),
                    lp.qkv_w, lp.qkv_b, {dxn1});
    out.back().free = {dqkv};
    // The layer's saved tensors (and any recomputed ones) go with its last op.
    std::vector<BufferId> release = {dxn1, saved.x};
    if (P.plan.recompute == Recompute::full) {
        release.insert(release.end(), recomputed.begin(), recomputed.end());
    } else {
        for (BufferId b : {saved.xn1, saved.qkv, saved.attn, saved.x1, saved.xn2, saved.up, saved.act})
            release.push_back(b);
        release.push_back(P.plan.recompute == Recompute::selective ? f.core : saved.core);
    }
    emit_norm_bwd(B, out, n + "attn norm bwd", ph, f.x, dxn1, dres, true, lp.norm1_w, lp.norm1_b, {}, release);
}

}  // namespace

Program build_program(const ModelConfig& model, const Plan& plan_in) {
    const Plan plan = resolve_defaults(plan_in, model);
    validate_plan(plan, model);
    check_supported(model, plan);

    Program P;
    P.model = model;
    P.plan = plan;
    use_model_rope(P);
    Dims& d = P.dims;
    d.s = plan.seq;
    d.b = plan.mbs;
    d.rows = d.s * d.b;
    d.h = model.hidden;
    d.heads = model.heads;
    d.kv_heads = model.kv_heads;
    d.head_dim = model.head_dim;
    d.q_width = model.q_width();
    d.kv_width = model.kv_width();
    d.qkv_width = d.q_width + 2 * d.kv_width;
    d.ffn = model.ffn_hidden;
    d.up_width = model.mlp == MlpKind::swiglu ? 2 * d.ffn : d.ffn;
    d.vocab = model.vocab;
    // Same padding as the planner's runtime profile (vocab_pad_multiple).
    d.vocab_padded = (model.vocab + kRuntimeVocabPadMultiple - 1) / kRuntimeVocabPadMultiple * kRuntimeVocabPadMultiple;
    d.layers = model.layers;
    d.max_positions = model.max_positions;
    d.grad_acc = plan.grad_acc;

    // Precision recipes (docs/interface.md table): compute copy, gradients, master.
    const PrecisionBytes pb = precision_bytes(plan.precision);
    P.act = pb.activation == 4 ? DType::f32 : DType::bf16;
    P.weight = pb.weight == 4 ? DType::f32 : DType::bf16;
    P.grad = pb.gradient == 4 ? DType::f32 : DType::bf16;
    P.master = pb.master > 0;
    P.grad_accum_fp32 = pb.gradient_accum > 0;

    Builder B(P);
    // Parameters, in the planner's order (model.cpp param_tensors), q/k/v and gate/up fused.
    const bool ln = model.norm == NormKind::layernorm;
    P.wte = B.param("word_embedding", d.vocab_padded, d.h, 0, true);
    if (model.position == PositionKind::learned) P.wpe = B.param("position_embedding", d.max_positions, d.h, 0, true);
    for (std::int64_t l = 1; l <= d.layers; ++l) {
        LayerParams lp;
        const std::string n = "layers." + std::to_string(l) + ".";
        lp.norm1_w = B.param(n + "attn_norm.weight", d.h, 1, l, false);
        if (ln) lp.norm1_b = B.param(n + "attn_norm.bias", d.h, 1, l, false);
        lp.qkv_w = B.param(n + "qkv_proj.weight", d.qkv_width, d.h, l, true);
        if (model.qkv_bias) lp.qkv_b = B.param(n + "qkv_proj.bias", d.qkv_width, 1, l, false);
        lp.out_w = B.param(n + "o_proj.weight", d.h, d.q_width, l, true);
        if (model.out_bias) lp.out_b = B.param(n + "o_proj.bias", d.h, 1, l, false);
        lp.norm2_w = B.param(n + "mlp_norm.weight", d.h, 1, l, false);
        if (ln) lp.norm2_b = B.param(n + "mlp_norm.bias", d.h, 1, l, false);
        lp.up_w = B.param(n + (model.mlp == MlpKind::swiglu ? "gate_up_proj.weight" : "fc1.weight"), d.up_width, d.h,
                          l, true);
        if (model.mlp_bias)
            lp.up_b = B.param(n + (model.mlp == MlpKind::swiglu ? "gate_up_proj.bias" : "fc1.bias"), d.up_width, 1,
                              l, false);
        lp.down_w = B.param(n + (model.mlp == MlpKind::swiglu ? "down_proj.weight" : "fc2.weight"), d.h, d.ffn, l,
                            true);
        if (model.mlp_bias)
            lp.down_b = B.param(n + (model.mlp == MlpKind::swiglu ? "down_proj.bias" : "fc2.bias"), d.h, 1, l, false);
        P.layer_params.push_back(lp);
    }
    P.normf_w = B.param("final_norm.weight", d.h, 1, 0, false);
    if (ln) P.normf_b = B.param("final_norm.bias", d.h, 1, 0, false);
    P.head = model.tied_embeddings ? P.wte : B.param("lm_head.weight", d.vocab_padded, d.h, 0, true);

    // Persistent buffers: one allocation per category (llm.c style).
    const std::int64_t np = P.param_elements;
    P.weights = B.buffer("weights", Category::weights, P.weight, np);
    if (P.master) P.master_weights = B.buffer("master weights", Category::master, DType::f32, np);
    P.grads = B.buffer("gradients", Category::gradients, P.grad, np);
    if (P.grad_accum_fp32) P.grads_fp32 = B.buffer("gradients fp32 accumulation", Category::gradients, DType::f32, np);
    if (plan.optimizer == Optimizer::adamw) {
        P.moment1 = B.buffer("adamw m", Category::optimizer, DType::f32, np);
        P.moment2 = B.buffer("adamw v", Category::optimizer, DType::f32, np);
    } else {
        P.moment1 = B.buffer("sgd momentum", Category::optimizer, DType::f32, np);
    }
    P.gemm_workspace = B.buffer("cublaslt workspace", Category::workspace, DType::u8, kRuntimeGemmWorkspaceBytes);
    P.scalars = B.buffer("device scalars", Category::workspace, DType::u8, kRuntimeScalarsBytes);
    if (model.position == PositionKind::rope) {
        // cos/sin tables [s, head_dim] fp32, rotate-half layout (the planner's 2*s*d*4 bytes).
        P.rope_cos = B.buffer("rope cos", Category::workspace, DType::f32, d.s * d.head_dim);
        P.rope_sin = B.buffer("rope sin", Category::workspace, DType::f32, d.s * d.head_dim);
    }
    {
        Op& o = B.emit(P.setup, OpKind::init_params, "set-up: allocate and initialise", {PhaseKind::step_start, 0, 0});
        for (BufferId b = 0; b < static_cast<BufferId>(P.buffers.size()); ++b) o.alloc.push_back(b);
    }
    {
        Op& o = B.emit(P.teardown, OpKind::teardown, "teardown", {PhaseKind::optimizer_step, 0, 0});
        o.free = P.setup.front().alloc;
    }

    // One step.
    B.emit(P.step, OpKind::zero_grads, "zero gradients and loss", {PhaseKind::step_start, 0, 0});
    for (std::int64_t mb = 1; mb <= d.grad_acc; ++mb) {
        const BufferId tokens = B.buffer("tokens", Category::activations, DType::i64, d.rows);
        {  // tokens: v0 = token ids [b, s]
            Op& o = B.emit(P.step, OpKind::tokens, "synthetic tokens", {PhaseKind::forward, 1, mb});
            o.alloc = {tokens};
            o.v[0] = {tokens, d.b, d.s, d.s, 0};
        }
        BufferId x = B.act(L(1) + "attn norm in", d.h);
        {  // embedding_fwd: v0 = tokens, v1 = x; p0 = word embedding, p1 = position embedding
            Op& o = B.emit(P.step, OpKind::embedding_fwd, "embedding", {PhaseKind::forward, 1, mb});
            o.alloc = {x};
            o.v[0] = {tokens, d.b, d.s, d.s, 0};
            o.v[1] = B.full(x, d.h);
            o.p0 = P.wte;
            o.p1 = P.wpe;
        }
        std::vector<LayerFwd> saved;
        for (std::int64_t l = 1; l <= d.layers; ++l) {
            // Selective recompute drops the attention core right after use; full recompute
            // keeps only the layer input (everything else goes with the layer's last op).
            LayerFwd f = emit_layer_forward(B, P.step, l, mb, x, true, plan.recompute != Recompute::selective, "");
            if (plan.recompute == Recompute::full)
                P.step.back().free = {f.xn1, f.qkv, f.core, f.attn, f.x1, f.xn2, f.up, f.act};
            saved.push_back(f);
            x = f.out;
        }

        // Output layer and loss.
        const Phase out{PhaseKind::output_loss, 0, mb};
        const BufferId xnf = B.act("final norm out", d.h);
        {
            Op& o = B.emit(P.step, OpKind::norm_fwd, "final norm", out);
            o.alloc = {xnf};
            o.v[0] = B.full(x, d.h);
            o.v[1] = B.full(xnf, d.h);
            o.p0 = P.normf_w;
            o.p1 = P.normf_b;
        }
        const BufferId labels = B.buffer("labels", Category::activations, DType::i64, d.rows);
        {  // labels: v0 = next-token ids [b, s]
            Op& o = B.emit(P.step, OpKind::labels, "synthetic labels", out);
            o.alloc = {labels};
            o.v[0] = {labels, d.b, d.s, d.s, 0};
        }
        const BufferId logits = B.buffer("logits", Category::logits, P.act, d.rows * d.vocab_padded);
        const View lv{logits, d.rows, d.vocab_padded, d.vocab_padded, 0};
        {
            Op& o = B.emit(P.step, OpKind::linear_fwd, "lm head", out);
            o.alloc = {logits};
            o.v[0] = B.full(xnf, d.h);
            o.v[1] = lv;
            o.p0 = P.head;
        }
        const BufferId loss = B.buffer("loss per token", Category::logits, DType::f32, d.rows);
        {  // cross_entropy: v0 = logits (overwritten by dlogits, scaled 1/(rows*grad_acc)), v1 = labels, v2 = loss rows
            Op& o = B.emit(P.step, OpKind::cross_entropy, "softmax cross-entropy", out);
            o.alloc = {loss};
            o.v[0] = lv;
            o.v[1] = {labels, d.b, d.s, d.s, 0};
            o.v[2] = {loss, d.rows, 1, 1, 0};
        }
        {  // loss_accumulate: v0 = loss rows, summed into the device scalars
            Op& o = B.emit(P.step, OpKind::loss_accumulate, "loss sum", out);
            o.v[0] = {loss, d.rows, 1, 1, 0};
            o.free = {loss};
        }
        const BufferId dxnf = B.buffer("d final norm out", Category::logits, P.act, d.rows * d.h);
        emit_linear_bwd(B, P.step, "lm head", out, lv, B.full(xnf, d.h), B.full(dxnf, d.h), P.head, kNoParam, {dxnf});
        P.step.back().free = {logits};
        const BufferId dres = B.act("d residual", d.h, Category::temporary);
        emit_norm_bwd(B, P.step, "final norm bwd", out, x, dxnf, dres, false, P.normf_w, P.normf_b, {dres},
                      {dxnf, xnf, labels, x});
        // dxnf is the head's input gradient (logits category: the planner counts it with the logits).
        for (std::int64_t l = d.layers; l >= 1; --l)
            emit_layer_backward(B, P.step, l, mb, saved[static_cast<std::size_t>(l - 1)], dres);
        {  // embedding_bwd: v0 = tokens, v1 = dres; p0/p1 word/position embedding grads
            Op& o = B.emit(P.step, OpKind::embedding_bwd, "embedding bwd", {PhaseKind::backward, 1, mb});
            o.v[0] = {tokens, d.b, d.s, d.s, 0};
            o.v[1] = B.full(dres, d.h);
            o.p0 = P.wte;
            o.p1 = P.wpe;
            o.free = {dres, tokens};
        }
        if (P.grad_accum_fp32)  // grad_accumulate: fp32 buffer += 16-bit gradients, which are then zeroed
            B.emit(P.step, OpKind::grad_accumulate, "accumulate gradients in fp32", {PhaseKind::backward, 1, mb});
    }
    B.emit(P.step, OpKind::optimizer, plan.optimizer == Optimizer::adamw ? "adamw" : "sgd",
           {PhaseKind::optimizer_step, 0, 0});
    return P;
}

void use_model_rope(Program& P) {
    P.hyper.rope_base = P.model.rope_theta;
    P.hyper.rope_scaling = P.model.rope_scaling;
}

std::string describe(const Program&, const Op& op) { return preflight::describe(op.phase) + ": " + op.name; }

}  // namespace preflight::runtime
