// One decoder layer's ops for the step program: forward (attention core, MLP), the
// recomputation a plan asks for, and backward, with the buffers each op allocates and frees.
#include <utility>

#include "preflight/planner/profiles.hpp"
#include "program_builder.hpp"

namespace preflight::runtime::program_detail {

BufferId Builder::gather_seq(std::vector<Op>& out, const std::string& name, const Phase& ph, BufferId shard,
                             std::int64_t cols) {
    if (!d_.sp) return shard;
    const BufferId whole = buffer(name + " (all-gathered)", Category::temporary, p_.act, d_.rows * cols);
    // all_gather: v0 = the whole [rows, cols] (allocated here), v1 = this rank's rows
    Op& o = emit_collective(out, OpKind::all_gather, name + " sequence-parallel all-gather", ph, -1);
    o.group = CommGroup::tp;
    o.alloc = {whole};
    o.v[0] = full(whole, cols);
    o.v[1] = seq(shard, cols);
    emit_wait(out, last_collective, ph);
    return whole;
}

BufferId Builder::reduce_seq(std::vector<Op>& out, const std::string& name, const Phase& ph, BufferId partial,
                             std::int64_t cols, BufferId residual, Category c) {
    if (!d_.sp) {
        tp_all_reduce(out, name, ph, full(partial, cols));
        return partial;
    }
    Op& rs = emit_collective(out, OpKind::reduce_scatter, name + " sequence-parallel reduce-scatter", ph, -1);
    rs.group = CommGroup::tp;
    rs.reduce = ReduceOp::sum;
    rs.v[0] = full(partial, cols);
    emit_wait(out, last_collective, ph);
    const BufferId mine = buffer(name, c, p_.act, d_.srows * cols);
    Op& o = emit(out, OpKind::seq_chunk, name + " (this rank's rows)", ph);
    o.alloc = {mine};
    o.v[0] = {partial, d_.srows, cols, cols, p_.tp_rank * d_.srows * cols};
    if (residual != kNoBuffer) o.v[1] = seq(residual, cols);
    o.v[2] = seq(mine, cols);
    o.free = {partial};
    return mine;
}

namespace {

// A row-parallel projection (Shoeybi et al. 2019, fig. 3's g): each rank's partial product over
// its columns, summed over the tensor-parallel ranks, plus the bias and the residual `res`.
// Without sequence parallelism the GEMM writes into the output `y` (named `y_name`) with the
// bias and residual added by rank 0 only, then all-reduces it; with it (Korthikanti et al. 2022,
// fig. 5's g-bar) the partial products go to a temporary [rows, h] that is reduce-scattered, and
// each rank adds the residual to its own rows. `run_gemm` false (a full-recompute re-forward)
// only re-creates an fp8 copy of the input. Returns emit_gemm_fwd's fp8 copy.
BufferId emit_row_parallel(Builder& B, std::vector<Op>& out, const std::string& name, const std::string& y_name,
                           const Phase& ph, const View& in, ParamId w, ParamId bias, BufferId res, bool free_input,
                           bool run_gemm, BufferId& y) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    const bool adds = P.tp_rank == 0 || P.emulated;  // alone, no rank 0 adds them into the sum
    if (!d.sp) {
        if (run_gemm) y = B.act(y_name, d.h);
        const BufferId kept = emit_gemm_fwd(B, out, name, ph, in, B.full(y, d.h), w, adds ? bias : kNoParam,
                                            adds ? B.full(res, d.h) : View{}, free_input, run_gemm);
        if (run_gemm) B.tp_all_reduce(out, name, ph, B.full(y, d.h));
        return kept;
    }
    if (!run_gemm) return emit_gemm_fwd(B, out, name, ph, in, View{}, w, kNoParam, View{}, free_input, false);
    const BufferId partial = B.act(name + " partial sums", d.h, Category::temporary);
    const BufferId kept = emit_gemm_fwd(B, out, name, ph, in, B.full(partial, d.h), w, adds ? bias : kNoParam, View{},
                                        free_input, true);
    y = B.reduce_seq(out, y_name, ph, partial, d.h, res, Category::activations);
    return kept;
}

// After a column-parallel GEMM (`gemm`) whose input `rows` was all-gathered into `gathered`
// (sequence parallelism): bf16 frees the gathered copy there and keeps the rows, gathered again
// for the weight gradient; fp8 freed the gathered copy with its cast (emit_gemm_fwd) and keeps
// the cast's transposed copy of all the rows instead, so the rows go too.
void release_gathered_input(const Program& P, Op& gemm, BufferId gathered, BufferId rows) {
    if (gathered == rows) return;
    gemm.free.push_back(P.fp8 ? rows : gathered);
}

// The Q|K heads of a [rows, qkv_width] buffer (q|k|v or its gradient).
View qk_heads(const Dims& d, BufferId qkv) { return {qkv, d.rows, d.q_width + d.kv_width, d.qkv_width, 0}; }

// q/k RMSNorm forward over Dims::qk_norm's groups (Qwen3Attention: q_norm(q_proj(x)) and k_norm(k_proj(x))
// per head; OlmoeAttention: over the whole projections), before RoPE, in place on qkv; returns its
// input's copy, kept for the backward as autograd keeps it (the planner's "Q/K norm input" tensors,
// activations.cpp add_qk_norm_inputs).
BufferId emit_head_norm_fwd(Builder& B, std::vector<Op>& out, const std::string& n, const Phase& ph, BufferId qkv,
                            const LayerParams& lp) {
    const Dims& d = B.d_;
    const BufferId kept = B.act(n + "q|k norm in", d.q_width + d.kv_width);
    Op& o = B.emit(out, OpKind::head_norm_fwd, n + "q/k norm", ph);
    o.alloc = {kept};
    o.v[0] = qk_heads(d, qkv);
    o.v[1] = B.full(kept, d.q_width + d.kv_width);
    o.p0 = lp.q_norm_w;
    o.p1 = lp.k_norm_w;
    return kept;
}

// Its backward in place on dqkv's Q|K heads, with the groups' rstd recomputed into a scratch beside
// the weight gradients' partial sums (runtime_head_norm_scratch_elements).
void emit_head_norm_bwd(Builder& B, std::vector<Op>& out, const std::string& n, const Phase& ph, BufferId kept,
                        BufferId dqkv, const LayerParams& lp) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    const std::int64_t elements = runtime_head_norm_scratch_elements(d.rows, d.qk_norm);
    const BufferId scratch = B.buffer(n + "q/k norm bwd scratch", Category::temporary, DType::f32, elements);
    Op& o = B.emit(out, OpKind::head_norm_bwd, n + "q/k norm bwd", ph);
    o.alloc = {scratch};
    o.v[0] = B.full(kept, d.q_width + d.kv_width);
    o.v[1] = qk_heads(d, dqkv);
    o.v[2] = {scratch, 1, elements, elements, 0};
    o.p0 = lp.q_norm_w;
    o.p1 = lp.k_norm_w;
    o.free = {scratch};
}

// Attention probabilities, eager: scores = Q K^T / sqrt(d) (transient, freed by the
// softmax), P = causal softmax (kept for backward). Names start with `prefix`.
BufferId emit_eager_probabilities(Builder& B, std::vector<Op>& out, const std::string& prefix, const Phase& ph,
                                  BufferId qkv) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    const std::int64_t score_elems = d.b * d.heads * d.s * d.s;
    const BufferId scores = B.buffer(prefix + "scores", Category::temporary, P.act, score_elems);
    const BufferId probabilities = B.buffer(prefix + "softmax out", Category::activations, P.act, score_elems);
    {  // eager_scores: v0 = qkv, v1 = scores
        Op& o = B.emit(out, OpKind::eager_scores, prefix + "QK^T", ph);
        o.alloc = {scores};
        o.v[0] = B.full(qkv, d.qkv_width);
        o.v[1] = B.scores(scores);
    }
    {  // eager_softmax: v0 = scores, v1 = probabilities
        Op& o = B.emit(out, OpKind::eager_softmax, prefix + "softmax", ph);
        o.alloc = {probabilities};
        o.v[0] = B.scores(scores);
        o.v[1] = B.scores(probabilities);
        o.free = {scores};
    }
    return probabilities;
}

// Fused flash attention forward: writes f.attn and a new log-sum-exp buffer (returned);
// `alloc_output` false re-runs it into an existing output (selective recompute).
BufferId emit_flash_forward(Builder& B, std::vector<Op>& out, const std::string& prefix, const Phase& ph,
                            const LayerFwd& f, bool alloc_output) {
    const Dims& d = B.d_;
    // Context parallelism: the whole sequence's K|V gathered first (program_cp.cpp), freed after.
    const BufferId kv = d.cp > 1 ? emit_cp_gather_kv(B, out, prefix, ph, f.qkv) : kNoBuffer;
    // flash_fwd: v0 = qkv, v1 = out, v2 = log-sum-exp [b, heads, s] fp32, v3 = cp: K|V in sequence order
    const BufferId lse = B.buffer(prefix + "softmax lse", Category::activations, DType::f32, d.b * d.heads * d.s);
    Op& o = B.emit(out, OpKind::flash_fwd, prefix + "flash attention", ph);
    o.alloc = {lse};
    if (alloc_output) o.alloc.push_back(f.attn);
    o.v[0] = B.full(f.qkv, d.qkv_width);
    o.v[1] = B.full(f.attn, d.q_width);
    o.v[2] = B.lse(lse);
    if (kv != kNoBuffer) {
        o.v[3] = cp_kv_view(d, kv);
        o.free.push_back(kv);
    }
    return lse;
}

// Attention core of one layer's forward: flash (output + log-sum-exp) or eager (kept
// softmax, then P V). Sets f.attn and f.core; `keep_core` false frees the core after use.
void emit_attention_core_forward(Builder& B, std::vector<Op>& out, const std::string& n, const Phase& ph, LayerFwd& f,
                                 bool keep_core) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    f.attn = B.act(n + "attn out", d.q_width);
    if (P.plan.attention == AttentionKind::flash) {
        f.core = emit_flash_forward(B, out, n, ph, f, true);
        if (!keep_core) out.back().free.push_back(f.core);
        return;
    }
    f.core = emit_eager_probabilities(B, out, n, ph, f.qkv);
    // eager_pv: v0 = probabilities, v1 = qkv, v2 = out
    Op& o = B.emit(out, OpKind::eager_pv, n + "PV", ph);
    o.alloc = {f.attn};
    o.v[0] = B.scores(f.core);
    o.v[1] = B.full(f.qkv, d.qkv_width);
    o.v[2] = B.full(f.attn, d.q_width);
    if (!keep_core) o.free = {f.core};
}

// MLP half of one layer's forward after the attention residual: norm, up projection,
// activation and (when `produce_output`) the down projection with the residual added.
void emit_mlp_forward(Builder& B, std::vector<Op>& out, std::int64_t l, const std::string& n, const Phase& ph,
                      LayerFwd& f, bool produce_output) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    const LayerParams& lp = P.layer_params[static_cast<std::size_t>(l - 1)];
    f.xn2 = B.seq_act(n + "mlp norm out", d.h);
    emit_norm_fwd(B, out, n + "mlp norm", ph, f.x1, f.xn2, lp.norm2_w, lp.norm2_b);
    if (d.moe()) return emit_moe_forward(B, out, l, n, ph, f, produce_output);
    f.up = B.act(n + (P.model.mlp == MlpKind::swiglu ? "gate|up" : "fc1 out"), d.up_width);
    const BufferId xg = B.gather_seq(out, n + "mlp norm out", ph, f.xn2, d.h);
    f.xn2_8t = emit_gemm_fwd(B, out, n + "up proj", ph, B.full(xg, d.h), B.full(f.up, d.up_width), lp.up_w, lp.up_b,
                             {}, P.fp8);
    release_gathered_input(P, out.back(), xg, f.xn2);
    emit_activation_fwd(B, out, n, ph, f);
    // Full recompute re-creates the down projection's kept input (fp8: its transposed copy) but
    // does not re-run the projection (emit_row_parallel).
    f.act_8t = emit_row_parallel(B, out, n + "down proj", layer_label(d, l + 1) + "attn norm in", ph, B.full(f.act, d.ffn),
                                 lp.down_w, lp.down_b, f.x1, P.fp8, produce_output, f.out);
}

}  // namespace

void emit_attention_after_qkv(Builder& B, std::vector<Op>& out, const std::string& n, const Phase& ph,
                              const LayerParams& lp, LayerFwd& f, bool keep_core) {
    Program& P = B.p_;
    if (P.model.qk_norm) f.qk_in = emit_head_norm_fwd(B, out, n, ph, f.qkv, lp);
    if (P.model.position == PositionKind::rope) {  // rope_fwd: v0 = qkv (in place on Q and K)
        Op& o = B.emit(out, OpKind::rope_fwd, n + "rope", ph);
        o.v[0] = B.full(f.qkv, P.dims.qkv_width);
    }
    emit_attention_core_forward(B, out, n, ph, f, keep_core);
}

// Saved tensors follow the planner's inventory (see program_builder.hpp).
LayerFwd emit_layer_forward(Builder& B, std::vector<Op>& out, std::int64_t l, std::int64_t mb, BufferId x,
                            bool produce_output, bool keep_core, const std::string& tag) {
    Program& P = B.p_;
    if (P.model.post_norms) return emit_post_norm_layer_forward(B, out, l, mb, x, produce_output, keep_core, tag);
    const Dims& d = P.dims;
    const LayerParams& lp = P.layer_params[static_cast<std::size_t>(l - 1)];
    const Phase ph{PhaseKind::forward, l, mb};
    const std::string n = layer_label(d, l) + tag;
    LayerFwd f;
    f.x = x;

    f.xn1 = B.seq_act(n + "attn norm out", d.h);
    emit_norm_fwd(B, out, n + "attn norm", ph, x, f.xn1, lp.norm1_w, lp.norm1_b);
    f.qkv = B.act(n + "qkv", d.qkv_width);
    const BufferId xg = B.gather_seq(out, n + "attn norm out", ph, f.xn1, d.h);
    f.xn1_8t = emit_gemm_fwd(B, out, n + "qkv proj", ph, B.full(xg, d.h), B.full(f.qkv, d.qkv_width), lp.qkv_w,
                             lp.qkv_b, {}, P.fp8);
    release_gathered_input(P, out.back(), xg, f.xn1);
    emit_attention_after_qkv(B, out, n, ph, lp, f, keep_core);
    // fp8: flash attention's backward reads its bf16 output; eager's does not, so it goes with the cast.
    f.attn_8t = emit_row_parallel(B, out, n + "out proj", n + "mlp norm in", ph, B.full(f.attn, d.q_width), lp.out_w,
                                  lp.out_b, x, P.fp8 && P.plan.attention == AttentionKind::eager, true, f.x1);
    emit_mlp_forward(B, out, l, n, ph, f, produce_output);
    return f;
}

// linear_fwd: v0 = in [M,K], v1 = out [M,N] (allocated here), v2 = residual added (optional);
// p0 = W [N,K], p1 = bias.
void emit_linear_fwd(Builder& B, std::vector<Op>& out, const std::string& name, const Phase& ph, const View& in,
                     const View& y, ParamId w, ParamId b, const View& residual) {
    Op& o = B.emit(out, OpKind::linear_fwd, name, ph);
    o.alloc = {y.buffer};
    o.v[0] = in;
    o.v[1] = y;
    o.v[2] = residual;
    o.p0 = w;
    o.p1 = b;
}

// norm_fwd: v0 = x, v1 = y (allocated here), v2 = a residual added to the norm's output (optional);
// p0 = weight, p1 = bias.
void emit_norm_fwd(Builder& B, std::vector<Op>& out, const std::string& name, const Phase& ph, BufferId x, BufferId y,
                   ParamId w, ParamId b, BufferId residual) {
    const Dims& d = B.d_;
    Op& o = B.emit(out, OpKind::norm_fwd, name, ph);
    o.alloc = {y};
    o.v[0] = B.seq(x, d.h);
    o.v[1] = B.seq(y, d.h);
    if (residual != kNoBuffer) o.v[2] = B.seq(residual, d.h);
    o.p0 = w;
    o.p1 = b;
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
    const BufferId stats = B.buffer(name + " stats", Category::temporary, DType::f32, d.srows * 2);
    Op& o = B.emit(out, OpKind::norm_bwd, name, ph);
    o.alloc = std::move(alloc);
    o.alloc.push_back(stats);
    o.v[0] = B.seq(x, d.h);
    o.v[1] = B.seq(dy, d.h);
    o.v[2] = B.seq(dx, d.h);
    o.v[3] = {stats, d.srows, 2, 2, 0};
    o.accumulate = accumulate;
    o.p0 = w;
    o.p1 = b;
    o.free = std::move(free);
    o.free.push_back(stats);
}

std::vector<BufferId> layer_kept(const Program& P, const LayerFwd& f) {
    // fp8: the attention's GEMM inputs as their kept fp8 copies (flash's backward reads its bf16
    // output too); a mixture of experts' MLP keeps its own, 16-bit (program_moe.cpp).
    std::vector<BufferId> v;
    if (P.model.post_norms) {  // program_post_norm.cpp: the GEMMs read x (apart) and x1 themselves
        for (BufferId b : {f.qkv, P.fp8 ? f.attn_8t : f.attn, f.ya, f.x1, f.up, P.fp8 ? f.act_8t : f.act, f.ym})
            v.push_back(b);
        if (P.fp8) v.insert(v.end(), {f.xn1_8t, f.xn2_8t});
    } else {
        for (BufferId b : {P.fp8 ? f.xn1_8t : f.xn1, f.qkv, P.fp8 ? f.attn_8t : f.attn, f.x1}) v.push_back(b);
    }
    if (f.qk_in != kNoBuffer) v.push_back(f.qk_in);
    if (P.fp8 && P.plan.attention == AttentionKind::flash) v.push_back(f.attn);
    if (P.model.post_norms) return v;
    if (P.dims.moe()) {
        for (BufferId b : {f.xn2, f.gates, f.routing, f.xd, f.up, f.act, f.y}) v.push_back(b);
        if (f.logits != kNoBuffer) v.push_back(f.logits);
        return v;
    }
    for (BufferId b : {P.fp8 ? f.xn2_8t : f.xn2, f.up, P.fp8 ? f.act_8t : f.act}) v.push_back(b);
    return v;
}

// Recomputation at the start of layer l's backward (Korthikanti et al. 2022, sec. 4): full
// recompute re-runs the layer's forward, selective only its attention core. Updates `f` to
// the recomputed buffers and returns them (they go with the layer's last op).
std::vector<BufferId> emit_recompute(Builder& B, std::vector<Op>& out, std::int64_t l, std::int64_t mb, const Phase& ph,
                                     LayerFwd& f) {
    Program& P = B.p_;
    if (P.plan.recompute == Recompute::full) {
        std::vector<Op> re;
        f = emit_layer_forward(B, re, l, mb, f.x, false, true, "recompute ");
        for (auto& o : re) {
            o.phase = ph;
            out.push_back(std::move(o));
        }
        std::vector<BufferId> kept = layer_kept(P, f);
        kept.push_back(f.core);
        return kept;
    }
    if (P.plan.recompute == Recompute::selective) {
        const std::string prefix = layer_label(P.dims, l) + "recompute ";
        // Flash re-runs the fused kernel: it rewrites the (identical) output and the log-sum-exp.
        f.core = P.plan.attention == AttentionKind::flash ? emit_flash_forward(B, out, prefix, ph, f, false)
                                                          : emit_eager_probabilities(B, out, prefix, ph, f.qkv);
        return {f.core};
    }
    return {};
}

void emit_activation_fwd(Builder& B, std::vector<Op>& out, const std::string& n, const Phase& ph, LayerFwd& f) {
    const Program& P = B.p_;
    const Dims& d = P.dims;
    f.act = B.act(n + "down in", d.ffn);
    // swiglu_fwd: v0 = gate|up, v1 = silu(gate)*up. gelu_fwd: v0 = fc1 out, v1 = gelu(.)
    Op& o = B.emit(out, P.model.mlp == MlpKind::swiglu ? OpKind::swiglu_fwd : OpKind::gelu_fwd, n + "activation", ph);
    o.alloc = {f.act};
    o.v[0] = B.full(f.up, d.up_width);
    o.v[1] = B.full(f.act, d.ffn);
}

void emit_activation_bwd(Builder& B, std::vector<Op>& out, const std::string& n, const Phase& ph, const LayerFwd& f,
                         BufferId dgu) {
    const Program& P = B.p_;
    const Dims& d = P.dims;
    // swiglu_bwd / gelu_bwd: v0 = dGU (in: dA in the first f columns; out: input gradient), v1 = forward input
    Op& o = B.emit(out, P.model.mlp == MlpKind::swiglu ? OpKind::swiglu_bwd : OpKind::gelu_bwd, n + "activation bwd", ph);
    o.v[0] = B.full(dgu, d.up_width);
    o.v[1] = B.full(f.up, d.up_width);
}

namespace {

// Backward of a column-parallel projection (q|k|v, gate|up) whose input `x` (the norm output, the
// rank's rows under sequence parallelism, named `x_name`) was kept: returns the input gradient as
// the norm's backward reads it (`dx_name`), `dy_buffer` freed after the weight gradient. Without sequence
// parallelism the input gradient's partial sums (Shoeybi et al. 2019, fig. 3's f, backward) are
// all-reduced in place; with it (Korthikanti et al. 2022, fig. 5's g, backward) they are
// reduce-scattered to the rank's rows before the input is gathered again for the weight
// gradient (Megatron-LM keeps the rows only), so the two [rows, h] tensors are not held at once.
// Under fp8 the forward kept the fp8 transposed copy of all the rows (`x8t`): the weight gradient
// reads it, then the input gradient is reduce-scattered; nothing is gathered again.
BufferId emit_column_parallel_bwd(Builder& B, std::vector<Op>& out, const std::string& name, const std::string& x_name,
                                  const std::string& dx_name, const Phase& ph, const View& dy, BufferId x, BufferId x8t,
                                  ParamId w, ParamId b, BufferId dy_buffer) {
    const Dims& d = B.d_;
    const BufferId dx = B.act(d.sp ? dx_name + " partial sums" : dx_name, d.h, Category::temporary);
    if (d.sp && x8t != kNoBuffer) {  // fp8: the weight gradient reads the kept copy of all the rows
        emit_gemm_bwd(B, out, name, ph, dy, View{kNoBuffer, d.rows, d.h, d.h, 0}, x8t, B.full(dx, d.h), w, b, {dx});
        out.back().free.push_back(dy_buffer);
        return B.reduce_seq(out, dx_name, ph, dx, d.h, kNoBuffer, Category::temporary);
    }
    if (!d.sp) {
        emit_gemm_bwd(B, out, name, ph, dy, B.full(x, d.h), x8t, B.full(dx, d.h), w, b, {dx});
        out.back().free.push_back(dy_buffer);
        B.tp_all_reduce(out, name + " input gradient", ph, B.full(dx, d.h));
        return dx;
    }
    emit_linear_bwd(B, out, name, ph, dy, {}, B.full(dx, d.h), w, b, {dx});
    Op wgrad = std::move(out.back());  // emitted again once the input is gathered
    out.pop_back();
    const BufferId dn = B.reduce_seq(out, dx_name, ph, dx, d.h, kNoBuffer, Category::temporary);
    const BufferId xg = B.gather_seq(out, x_name, ph, x, d.h);
    wgrad.v[1] = B.full(xg, d.h);
    wgrad.free = {dy_buffer, xg};
    out.push_back(std::move(wgrad));
    return dn;
}

// MLP backward of layer l: dres (dLoss/d layer output) through the down projection, the
// activation, the up projection and the MLP norm, whose input gradient is added to dres.
void emit_mlp_backward(Builder& B, std::vector<Op>& out, const std::string& n, const Phase& ph, const LayerParams& lp,
                       const LayerFwd& f, BufferId dres) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    if (d.moe()) {
        const BufferId dn = emit_moe_backward(B, out, n, ph, lp, f, dres);
        emit_norm_bwd(B, out, n + "mlp norm bwd", ph, f.x1, dn, dres, true, lp.norm2_w, lp.norm2_b, {}, {dn});
        return;
    }
    // dGU [rows, up_width]: the down dgrad writes dA into its first f columns, the
    // activation backward turns it into d(gate)|d(up) (GeLU: d(fc1 out)) in place.
    const BufferId dgu = B.act(n + "d gate|up", d.up_width, Category::temporary);
    // Sequence parallelism: the reduce-scatter's backward all-gathers the output gradient.
    const BufferId dy = B.gather_seq(out, n + "d layer out", ph, dres, d.h);
    emit_gemm_bwd(B, out, n + "down proj", ph, B.full(dy, d.h), B.full(f.act, d.ffn), f.act_8t,
                  View{dgu, d.rows, d.ffn, d.up_width, 0}, lp.down_w, lp.down_b, {dgu});
    if (dy != dres) out.back().free.push_back(dy);
    emit_activation_bwd(B, out, n, ph, f, dgu);
    const BufferId dn = emit_column_parallel_bwd(B, out, n + "up proj", n + "mlp norm out", n + "d mlp norm out", ph,
                                                 B.full(dgu, d.up_width),
                                                 f.xn2, f.xn2_8t, lp.up_w, lp.up_b, dgu);
    emit_norm_bwd(B, out, n + "mlp norm bwd", ph, f.x1, dn, dres, true, lp.norm2_w, lp.norm2_b, {}, {dn});
}

// Flash attention backward into dqkv (allocated here); frees its workspace and dattn.
void emit_flash_backward(Builder& B, std::vector<Op>& out, const std::string& n, const Phase& ph, const LayerFwd& f,
                         BufferId dattn, BufferId dqkv) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    // flash_bwd: v0 = qkv, v1 = out, v2 = lse, v3 = dOut, v4 = dqkv, v5 = workspace (u8): cuDNN's
    // fp32 dQ accumulator and softmax sum for 16-bit activations; the kernel's D = rowsum(dO*O)
    // fp32 in its first b*heads*s floats (profiles.hpp runtime_flash_bwd_workspace_bytes).
    // Context parallelism: v6 = the whole sequence's K|V (gathered again), v7 = its dK|dV.
    const BufferId kv = d.cp > 1 ? emit_cp_gather_kv(B, out, n, ph, f.qkv) : kNoBuffer;
    const BufferId dkv = d.cp > 1 ? B.buffer(n + "cp d k|v (sequence order)", Category::temporary, P.act,
                                             d.b * d.s_full * 2 * d.kv_width)
                                  : kNoBuffer;
    const BufferId dsum =
        B.buffer(n + "flash bwd workspace", Category::temporary, DType::u8,
                 runtime_flash_bwd_workspace_bytes(d.b, d.heads, d.kv_heads, d.s, d.head_dim, dtype_bytes(P.act), d.cp > 1));
    Op& o = B.emit(out, OpKind::flash_bwd, n + "flash attention bwd", ph);
    o.alloc = {dqkv, dsum};
    o.v[0] = B.full(f.qkv, d.qkv_width);
    o.v[1] = B.full(f.attn, d.q_width);
    o.v[2] = B.lse(f.core);
    o.v[3] = B.full(dattn, d.q_width);
    o.v[4] = B.full(dqkv, d.qkv_width);
    const std::int64_t ws_bytes = P.buffers[static_cast<std::size_t>(dsum)].elements;
    o.v[5] = {dsum, 1, ws_bytes, ws_bytes, 0};
    o.free = {dsum, dattn};
    if (kv == kNoBuffer) return;
    o.alloc.push_back(dkv);
    o.v[6] = cp_kv_view(d, kv);
    o.v[7] = cp_kv_view(d, dkv);
    o.free.push_back(kv);
    emit_cp_scatter_dkv(B, out, n, ph, dkv, dqkv);
}

// Eager attention backward into dqkv (allocated here): dP, the softmax backward, dQKV; frees dattn.
void emit_eager_backward(Builder& B, std::vector<Op>& out, const std::string& n, const Phase& ph, const LayerFwd& f,
                         BufferId dattn, BufferId dqkv) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    const std::int64_t score_elems = d.b * d.heads * d.s * d.s;
    const BufferId dp = B.buffer(n + "dP", Category::temporary, P.act, score_elems);
    const BufferId ds = B.buffer(n + "dS", Category::temporary, P.act, score_elems);
    {  // eager_dp: v0 = dOut, v1 = qkv, v2 = dP = dO V^T
        Op& o = B.emit(out, OpKind::eager_dp, n + "dP", ph);
        o.alloc = {dp};
        o.v[0] = B.full(dattn, d.q_width);
        o.v[1] = B.full(f.qkv, d.qkv_width);
        o.v[2] = B.scores(dp);
    }
    {  // eager_softmax_bwd: v0 = P, v1 = dP, v2 = dS = P * (dP - rowsum(P dP))
        Op& o = B.emit(out, OpKind::eager_softmax_bwd, n + "softmax bwd", ph);
        o.alloc = {ds};
        o.v[0] = B.scores(f.core);
        o.v[1] = B.scores(dp);
        o.v[2] = B.scores(ds);
        o.free = {dp};
    }
    {  // eager_dqkv: v0 = dS, v1 = P, v2 = dOut, v3 = qkv, v4 = dqkv (dQ = dS K/sqrt(d), dK = dS^T Q/sqrt(d), dV = P^T dO)
        Op& o = B.emit(out, OpKind::eager_dqkv, n + "dQKV", ph);
        o.alloc = {dqkv};
        o.v[0] = B.scores(ds);
        o.v[1] = B.scores(f.core);
        o.v[2] = B.full(dattn, d.q_width);
        o.v[3] = B.full(f.qkv, d.qkv_width);
        o.v[4] = B.full(dqkv, d.qkv_width);
        o.free = {ds, dattn};
    }
}

}  // namespace

// Working buffers follow the planner's backward transient (activations.cpp backward_transient):
// dres + one more [rows, h] gradient + the widest op's gradients (MLP: dgate|dup), or dres +
// d(attn out) + eager attention's (dP and dS, then dS and d(q|k|v)).
void emit_layer_backward(Builder& B, std::vector<Op>& out, std::int64_t l, std::int64_t mb, const LayerFwd& saved,
                         BufferId dres) {
    Program& P = B.p_;
    if (P.model.post_norms) return emit_post_norm_layer_backward(B, out, l, mb, saved, dres);
    const Dims& d = P.dims;
    const LayerParams& lp = P.layer_params[static_cast<std::size_t>(l - 1)];
    const Phase ph{PhaseKind::backward, l, mb};
    const std::string n = layer_label(d, l);
    LayerFwd f = saved;
    const std::vector<BufferId> recomputed = emit_recompute(B, out, l, mb, ph, f);
    emit_mlp_backward(B, out, n, ph, lp, f, dres);

    // Attention.
    const BufferId dattn = B.act(n + "d attn out", d.q_width, Category::temporary);
    const BufferId dy = B.gather_seq(out, n + "d mlp norm in", ph, dres, d.h);
    emit_gemm_bwd(B, out, n + "out proj", ph, B.full(dy, d.h), B.full(f.attn, d.q_width), f.attn_8t,
                  B.full(dattn, d.q_width), lp.out_w, lp.out_b, {dattn});
    if (dy != dres) out.back().free.push_back(dy);
    const BufferId dqkv = emit_attention_core_backward(B, out, n, ph, lp, f, dattn);
    const BufferId dn = emit_column_parallel_bwd(B, out, n + "qkv proj", n + "attn norm out", n + "d attn norm out", ph,
                                                 B.full(dqkv, d.qkv_width), f.xn1, f.xn1_8t, lp.qkv_w, lp.qkv_b, dqkv);
    std::vector<BufferId> release = layer_release(P, saved, f, recomputed);
    release.insert(release.begin(), dn);
    emit_norm_bwd(B, out, n + "attn norm bwd", ph, f.x, dn, dres, true, lp.norm1_w, lp.norm1_b, {}, release);
}

BufferId emit_attention_core_backward(Builder& B, std::vector<Op>& out, const std::string& n, const Phase& ph,
                                      const LayerParams& lp, const LayerFwd& f, BufferId dattn) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    const BufferId dqkv = B.act(n + "d qkv", d.qkv_width, Category::temporary);
    if (P.plan.attention == AttentionKind::flash)
        emit_flash_backward(B, out, n, ph, f, dattn, dqkv);
    else
        emit_eager_backward(B, out, n, ph, f, dattn, dqkv);
    if (P.model.position == PositionKind::rope) {  // rope_bwd: v0 = dqkv (in place)
        Op& o = B.emit(out, OpKind::rope_bwd, n + "rope bwd", ph);
        o.v[0] = B.full(dqkv, d.qkv_width);
    }
    if (P.model.qk_norm) emit_head_norm_bwd(B, out, n, ph, f.qk_in, dqkv, lp);
    return dqkv;
}

std::vector<BufferId> layer_release(const Program& P, const LayerFwd& saved, const LayerFwd& f,
                                    const std::vector<BufferId>& recomputed) {
    std::vector<BufferId> release = {saved.x};
    if (P.plan.recompute == Recompute::full) {
        release.insert(release.end(), recomputed.begin(), recomputed.end());
    } else {
        for (BufferId b : layer_kept(P, saved)) release.push_back(b);
        release.push_back(P.plan.recompute == Recompute::selective ? f.core : saved.core);
    }
    return release;
}

}  // namespace preflight::runtime::program_detail
