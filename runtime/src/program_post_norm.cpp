// A decoder layer whose norms sit on the sublayer outputs, before each residual add, with none on
// their inputs (OLMo 2 and 3: transformers' Olmo2DecoderLayer,
//   x1  = x  + post_attention_layernorm(o_proj(attention(q|k|v(x))))
//   out = x1 + post_feedforward_layernorm(down(act(gate|up(x1))))),
// at tensor parallelism 1 (check_runtime_plan). What it keeps is the planner's inventory without
// pre-norms (activations.cpp add_sublayer_input, add_post_norm_inputs): x and x1 as the GEMMs' inputs
// (fp8: their transposed fp8 copies beside them), and the two norms' inputs, o_proj's and down_proj's
// outputs. Each norm writes its output with the residual added (norm_fwd's v2), so no sum is kept;
// in the backward each norm's input gradient is a new buffer, and the first GEMM of each sublayer
// adds its input gradient into the residual gradient (linear_bwd_data's accumulate).
#include "program_builder.hpp"

namespace preflight::runtime::program_detail {

namespace {

// The MLP half of the forward from x1: gate|up, the activation, down into f.ym and, when
// `produce_output`, the next layer's input x1 + norm(ym). A full-recompute re-forward
// (`produce_output` false) re-runs down too: the norm's backward reads its output.
void emit_post_norm_mlp_forward(Builder& B, std::vector<Op>& out, std::int64_t l, const std::string& n,
                                const Phase& ph, LayerFwd& f, bool produce_output) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    const LayerParams& lp = P.layer_params[static_cast<std::size_t>(l - 1)];
    f.up = B.act(n + (P.model.mlp == MlpKind::swiglu ? "gate|up" : "fc1 out"), d.up_width);
    f.xn2_8t = emit_gemm_fwd(B, out, n + "up proj", ph, B.full(f.x1, d.h), B.full(f.up, d.up_width), lp.up_w, lp.up_b,
                             {}, false);
    emit_activation_fwd(B, out, n, ph, f);
    f.ym = B.act(n + "mlp post-norm in", d.h);
    f.act_8t = emit_gemm_fwd(B, out, n + "down proj", ph, B.full(f.act, d.ffn), B.full(f.ym, d.h), lp.down_w, lp.down_b,
                             {}, P.fp8);  // fp8: the 16-bit input goes with its cast
    if (!produce_output) return;
    f.out = B.act(layer_input_label(P, l + 1), d.h);
    emit_norm_fwd(B, out, n + "mlp post-norm", ph, f.ym, f.out, lp.norm2_w, lp.norm2_b, f.x1);
}

// A sublayer's output norm backward: its input gradient into a new [rows, h] buffer (returned).
BufferId emit_post_norm_bwd(Builder& B, std::vector<Op>& out, const std::string& name, const Phase& ph, BufferId x,
                            BufferId dres, ParamId w, ParamId b) {
    const BufferId dx = B.act("d " + name + " in", B.d_.h, Category::temporary);
    emit_norm_bwd(B, out, name + " bwd", ph, x, dres, dx, false, w, b, {dx}, {});
    return dx;
}

// A sublayer's first GEMM backward (q|k|v, gate|up): its input gradient added into dres; dy freed.
void emit_first_gemm_bwd(Builder& B, std::vector<Op>& out, const std::string& name, const Phase& ph, const View& dy,
                         BufferId x, BufferId x8t, BufferId dres, ParamId w, ParamId b) {
    const Dims& d = B.d_;
    emit_gemm_bwd(B, out, name, ph, dy, B.full(x, d.h), x8t, B.full(dres, d.h), w, b, {});
    out[out.size() - 2].accumulate = true;  // the data gradient (the weight gradient follows it)
    out.back().free.push_back(dy.buffer);
}

}  // namespace

LayerFwd emit_post_norm_layer_forward(Builder& B, std::vector<Op>& out, std::int64_t l, std::int64_t mb, BufferId x,
                                      bool produce_output, bool keep_core, const std::string& tag) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    const LayerParams& lp = P.layer_params[static_cast<std::size_t>(l - 1)];
    const Phase ph{PhaseKind::forward, l, mb};
    const std::string n = layer_label(d, l) + tag;
    LayerFwd f;
    f.x = x;
    f.qkv = B.act(n + "qkv", d.qkv_width);
    f.xn1_8t = emit_gemm_fwd(B, out, n + "qkv proj", ph, B.full(x, d.h), B.full(f.qkv, d.qkv_width), lp.qkv_w, lp.qkv_b,
                             {}, false);
    emit_attention_after_qkv(B, out, n, ph, lp, f, keep_core);
    // fp8: flash attention's backward reads its bf16 output; eager's does not, so it goes with the cast.
    f.ya = B.act(n + "attn post-norm in", d.h);
    f.attn_8t = emit_gemm_fwd(B, out, n + "out proj", ph, B.full(f.attn, d.q_width), B.full(f.ya, d.h), lp.out_w,
                              lp.out_b, {}, P.fp8 && P.plan.attention == AttentionKind::eager);
    f.x1 = B.act(n + "mlp in", d.h);
    emit_norm_fwd(B, out, n + "attn post-norm", ph, f.ya, f.x1, lp.norm1_w, lp.norm1_b, x);
    emit_post_norm_mlp_forward(B, out, l, n, ph, f, produce_output);
    return f;
}

// Working buffers beside dres (memory_runtime.cpp runtime_post_norm_backward_transient): a norm's
// input gradient with the GEMM backward it feeds (d(gate|up) or d(attn out), and under fp8 its
// casts), then the attention core's, then d(q|k|v) (or d(gate|up)) with its casts alone.
void emit_post_norm_layer_backward(Builder& B, std::vector<Op>& out, std::int64_t l, std::int64_t mb,
                                   const LayerFwd& saved, BufferId dres) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    const LayerParams& lp = P.layer_params[static_cast<std::size_t>(l - 1)];
    const Phase ph{PhaseKind::backward, l, mb};
    const std::string n = layer_label(d, l);
    LayerFwd f = saved;
    const std::vector<BufferId> recomputed = emit_recompute(B, out, l, mb, ph, f);

    // MLP: out = x1 + norm(down(act(gate|up(x1)))).
    const BufferId dym = emit_post_norm_bwd(B, out, n + "mlp post-norm", ph, f.ym, dres, lp.norm2_w, lp.norm2_b);
    const BufferId dgu = B.act(n + "d gate|up", d.up_width, Category::temporary);
    emit_gemm_bwd(B, out, n + "down proj", ph, B.full(dym, d.h), B.full(f.act, d.ffn), f.act_8t,
                  View{dgu, d.rows, d.ffn, d.up_width, 0}, lp.down_w, lp.down_b, {dgu});
    out.back().free.push_back(dym);
    emit_activation_bwd(B, out, n, ph, f, dgu);
    emit_first_gemm_bwd(B, out, n + "up proj", ph, B.full(dgu, d.up_width), f.x1, f.xn2_8t, dres, lp.up_w, lp.up_b);

    // Attention: x1 = x + norm(o_proj(attention(q|k|v(x)))).
    const BufferId dya = emit_post_norm_bwd(B, out, n + "attn post-norm", ph, f.ya, dres, lp.norm1_w, lp.norm1_b);
    const BufferId dattn = B.act(n + "d attn out", d.q_width, Category::temporary);
    emit_gemm_bwd(B, out, n + "out proj", ph, B.full(dya, d.h), B.full(f.attn, d.q_width), f.attn_8t,
                  B.full(dattn, d.q_width), lp.out_w, lp.out_b, {dattn});
    out.back().free.push_back(dya);
    const BufferId dqkv = emit_attention_core_backward(B, out, n, ph, lp, f, dattn);
    emit_first_gemm_bwd(B, out, n + "qkv proj", ph, B.full(dqkv, d.qkv_width), f.x, f.xn1_8t, dres, lp.qkv_w, lp.qkv_b);
    // The layer's saved tensors (and any recomputed ones) go with its last op.
    const std::vector<BufferId> release = layer_release(P, saved, f, recomputed);
    out.back().free.insert(out.back().free.end(), release.begin(), release.end());
}

}  // namespace preflight::runtime::program_detail
