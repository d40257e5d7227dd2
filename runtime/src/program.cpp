// Builds the step program of a plan: its parameters, buffers and the ops of set-up, step and teardown.
#include "preflight/runtime/program.hpp"

#include <algorithm>
#include <stdexcept>

#include "preflight/planner/error.hpp"
#include "preflight/planner/profiles.hpp"
#include "program_builder.hpp"

namespace preflight::runtime {

namespace program_detail {
void Builder::end_unit() const {
    const ShardUnit& u = p_.layout.units[unit_];
    if (cursor_ - u.begin != u.elements)
        throw std::logic_error("the runtime's " + unit_name(u) + " holds " + std::to_string(cursor_ - u.begin) +
                               " parameter elements; the planner's layout (runtime_unit_elements) says " +
                               std::to_string(u.elements));
}
}  // namespace program_detail

namespace {

using namespace program_detail;

// Dimensions of one micro-batch of the plan on the model, as tensor-parallel rank tp_rank holds
// them (Shoeybi et al. 2019, sec. 3: each rank a 1/tp share of the heads, the MLP's hidden units
// and the vocabulary).
Dims program_dims(const ModelConfig& model, const Plan& plan, std::int64_t tp_rank) {
    Dims d;
    d.tp = plan.tp;
    d.s = plan.seq;
    d.b = plan.mbs;
    d.rows = d.s * d.b;
    d.sp = plan.sp && plan.tp > 1;
    d.srows = d.sp ? d.rows / plan.tp : d.rows;
    d.h = model.hidden;
    d.heads = model.heads / d.tp;
    d.kv_heads = model.kv_heads / d.tp;
    d.head_dim = model.head_dim;
    d.q_width = model.q_width() / d.tp;
    d.kv_width = model.kv_width() / d.tp;
    d.qkv_width = d.q_width + 2 * d.kv_width;
    d.ffn = model.ffn_hidden / d.tp;
    d.up_width = model.mlp == MlpKind::swiglu ? 2 * d.ffn : d.ffn;
    d.vocab = model.vocab;
    // Same padding as the planner's runtime profile (vocab_pad_multiple, times tp).
    const std::int64_t unit = kRuntimeVocabPadMultiple * d.tp;
    d.vocab_padded = (model.vocab + unit - 1) / unit * unit / d.tp;
    d.vocab_begin = tp_rank * d.vocab_padded;
    d.vocab_valid = std::clamp<std::int64_t>(model.vocab - d.vocab_begin, 0, d.vocab_padded);
    d.layers = model.layers;
    d.max_positions = model.max_positions;
    d.grad_acc = plan.grad_acc;
    return d;
}

// Where a rank's slice of each layer tensor sits in the whole tensor (tensor parallelism): the
// fused q|k|v holds this rank's query heads, then its key and value heads; the fused gate|up its
// share of the gate, then of up; the row-parallel output and down projections a column range.
struct LayerSlices {
    std::vector<RowBlock> qkv, up;
    std::int64_t qkv_rows = 0, up_rows = 0, q_cols = 0, q_col_begin = 0, f_cols = 0, f_col_begin = 0;
};
LayerSlices layer_slices(const ModelConfig& m, const Dims& d, std::int64_t t) {
    LayerSlices s;
    const std::int64_t Q = m.q_width(), KV = m.kv_width(), F = m.ffn_hidden;
    s.qkv = {{0, t * d.q_width, d.q_width}, {d.q_width, Q + t * d.kv_width, d.kv_width},
             {d.q_width + d.kv_width, Q + KV + t * d.kv_width, d.kv_width}};
    s.qkv_rows = Q + 2 * KV;
    if (m.mlp == MlpKind::swiglu) {
        s.up = {{0, t * d.ffn, d.ffn}, {d.ffn, F + t * d.ffn, d.ffn}};
        s.up_rows = 2 * F;
    } else {
        s.up = {{0, t * d.ffn, d.ffn}};
        s.up_rows = F;
    }
    s.q_cols = Q, s.q_col_begin = t * d.q_width, s.f_cols = F, s.f_col_begin = t * d.ffn;
    return s;
}

// Parameters of decoder layer l, in the planner's order (model.cpp param_tensors), q/k/v
// and gate/up fused; a rank's slices under tensor parallelism.
LayerParams add_layer_parameters(Builder& B, const ModelConfig& model, std::int64_t l, std::int64_t tp_rank) {
    const Dims& d = B.d_;
    const bool ln = model.norm == NormKind::layernorm;
    const bool swiglu = model.mlp == MlpKind::swiglu;
    const LayerSlices sl = layer_slices(model, d, tp_rank);
    const TpSlice column_qkv{sl.qkv, sl.qkv_rows, d.h, 0}, column_up{sl.up, sl.up_rows, d.h, 0};
    const TpSlice bias_qkv{sl.qkv, sl.qkv_rows, 1, 0}, bias_up{sl.up, sl.up_rows, 1, 0};
    const TpSlice row_out{{}, d.h, sl.q_cols, sl.q_col_begin}, row_down{{}, d.h, sl.f_cols, sl.f_col_begin};
    LayerParams lp;
    const std::string n = "layers." + std::to_string(l) + ".";
    lp.norm1_w = B.param(n + "attn_norm.weight", d.h, 1, l, false);
    if (ln) lp.norm1_b = B.param(n + "attn_norm.bias", d.h, 1, l, false);
    lp.qkv_w = B.param(n + "qkv_proj.weight", d.qkv_width, d.h, l, true, column_qkv);
    if (model.qkv_bias) lp.qkv_b = B.param(n + "qkv_proj.bias", d.qkv_width, 1, l, false, bias_qkv);
    lp.out_w = B.param(n + "o_proj.weight", d.h, d.q_width, l, true, row_out);
    if (model.out_bias) lp.out_b = B.param(n + "o_proj.bias", d.h, 1, l, false);
    lp.norm2_w = B.param(n + "mlp_norm.weight", d.h, 1, l, false);
    if (ln) lp.norm2_b = B.param(n + "mlp_norm.bias", d.h, 1, l, false);
    lp.up_w = B.param(n + (swiglu ? "gate_up_proj.weight" : "fc1.weight"), d.up_width, d.h, l, true, column_up);
    if (model.mlp_bias)
        lp.up_b = B.param(n + (swiglu ? "gate_up_proj.bias" : "fc1.bias"), d.up_width, 1, l, false, bias_up);
    lp.down_w = B.param(n + (swiglu ? "down_proj.weight" : "fc2.weight"), d.h, d.ffn, l, true, row_down);
    if (model.mlp_bias) lp.down_b = B.param(n + (swiglu ? "down_proj.bias" : "fc2.bias"), d.h, 1, l, false);
    return lp;
}

// Every parameter, unit by unit in the planner's layout (runtime_layout.hpp): the embeddings,
// the decoder layers, the final norm and the LM head (the word embedding itself when tied).
void add_parameters(Builder& B) {
    Program& P = B.p_;
    const ModelConfig& model = P.model;
    const Dims& d = P.dims;
    // Vocabulary-parallel embedding and head: this rank's rows of the padded vocabulary.
    const TpSlice vocab{{{0, d.vocab_begin, d.vocab_padded}}, d.vocab_padded * d.tp, d.h, 0};
    B.begin_unit(embedding_unit());
    P.wte = B.param("word_embedding", d.vocab_padded, d.h, 0, true, vocab);
    if (model.position == PositionKind::learned) P.wpe = B.param("position_embedding", d.max_positions, d.h, 0, true);
    B.end_unit();
    for (std::int64_t l = 1; l <= d.layers; ++l) {
        B.begin_unit(layer_unit(l));
        P.layer_params.push_back(add_layer_parameters(B, model, l, P.tp_rank));
        B.end_unit();
    }
    B.begin_unit(head_unit(P));
    P.normf_w = B.param("final_norm.weight", d.h, 1, 0, false);
    if (model.norm == NormKind::layernorm) P.normf_b = B.param("final_norm.bias", d.h, 1, 0, false);
    P.head = model.tied_embeddings ? P.wte : B.param("lm_head.weight", d.vocab_padded, d.h, 0, true, vocab);
    B.end_unit();
    P.param_elements = P.layout.full_elements;
}

// Persistent buffers, one allocation per category (llm.c style), with the set-up op that
// allocates them and the teardown op that frees them. Their sizes follow the ZeRO stage
// (runtime_layout.hpp runtime_state_elements).
void add_persistent_buffers(Builder& B) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    const RuntimeStateElements n = runtime_state_elements(P.layout);
    const bool sharded_grads = P.plan.zero >= zero_gradients;
    P.weights = B.buffer(P.plan.zero == zero_weights ? "weights shard" : "weights", Category::weights, P.weight, n.weights);
    if (P.master) P.master_weights = B.buffer("master weights", Category::master, DType::f32, n.optimizer);
    if (sharded_grads) {
        // The rank's reduced gradients: at the fp32 accumulation dtype when the recipe has one.
        const DType t = P.grad_accum_fp32 ? DType::f32 : P.grad;
        P.grad_shard = B.buffer("gradients shard", Category::gradients, t, n.gradients);
    } else {
        P.grads = B.buffer("gradients", Category::gradients, P.grad, n.gradients);
        if (P.grad_accum_fp32)
            P.grads_fp32 = B.buffer("gradients fp32 accumulation", Category::gradients, DType::f32, n.gradients);
    }
    if (P.plan.optimizer == Optimizer::adamw) {
        P.moment1 = B.buffer("adamw m", Category::optimizer, DType::f32, n.optimizer);
        P.moment2 = B.buffer("adamw v", Category::optimizer, DType::f32, n.optimizer);
    } else {
        P.moment1 = B.buffer("sgd momentum", Category::optimizer, DType::f32, n.optimizer);
    }
    add_fp8_buffers(B);
    P.gemm_workspace = B.buffer("cublaslt workspace", Category::workspace, DType::u8, kRuntimeGemmWorkspaceBytes);
    P.scalars = B.buffer("device scalars", Category::workspace, DType::u8, kRuntimeScalarsBytes);
    if (P.model.position == PositionKind::rope) {
        // cos/sin tables [s, head_dim] fp32, rotate-half layout (the planner's 2*s*d*4 bytes).
        P.rope_cos = B.buffer("rope cos", Category::workspace, DType::f32, d.s * d.head_dim);
        P.rope_sin = B.buffer("rope sin", Category::workspace, DType::f32, d.s * d.head_dim);
    }
    {
        Op& o = B.emit(P.setup, OpKind::init_params, "set-up: allocate and initialise", {PhaseKind::step_start, 0, 0});
        for (BufferId b = 0; b < static_cast<BufferId>(P.buffers.size()); ++b) o.alloc.push_back(b);
    }
    Op& o = B.emit(P.teardown, OpKind::teardown, "teardown", {PhaseKind::optimizer_step, 0, 0});
    o.free = P.setup.front().alloc;
    if (data_parallel(P)) add_unit_buffers(B);  // allocated and freed by the step's ops
}

// Synthetic tokens and the embedding of micro-batch mb; returns layer 1's input.
BufferId emit_embedding_forward(Builder& B, std::int64_t mb, BufferId tokens) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    {  // tokens: v0 = token ids [b, s]
        Op& o = B.emit(P.step, OpKind::tokens, "synthetic tokens", {PhaseKind::forward, 1, mb});
        o.alloc = {tokens};
        o.v[0] = {tokens, d.b, d.s, d.s, 0};
    }
    // Sequence parallelism: the partial embeddings go to a temporary, reduce-scattered into layer 1's input.
    const BufferId e = d.sp ? B.act("embedding partial sums", d.h, Category::temporary) : B.act(layer_label(1) + "attn norm in", d.h);
    if (P.plan.zero == zero_weights) {  // ZeRO-3: the embedding gathered for its op only
        gather_unit(B, P.step, embedding_unit(), {PhaseKind::forward, 1, mb});
        B.emit_wait(P.step, B.last_collective, {PhaseKind::forward, 1, mb});
    }
    // embedding_fwd: v0 = tokens, v1 = x; p0 = word embedding (this rank's vocabulary rows: the
    // others' tokens give 0), p1 = position embedding (added by tensor-parallel rank 0 only, before
    // the ranks' partial rows are summed).
    Op& o = B.emit(P.step, OpKind::embedding_fwd, "embedding", {PhaseKind::forward, 1, mb});
    o.alloc = {e};
    o.v[0] = {tokens, d.b, d.s, d.s, 0};
    o.v[1] = B.full(e, d.h);
    o.p0 = P.wte;
    o.p1 = P.tp_rank == 0 ? P.wpe : kNoParam;
    release_gathered(B, o, embedding_unit());
    return B.reduce_seq(P.step, layer_label(1) + "attn norm in", {PhaseKind::forward, 1, mb}, e, d.h, kNoBuffer,
                        Category::activations);
}

// Vocabulary-parallel cross-entropy (Megatron-LM, tensor_parallel/cross_entropy.py): the row's
// largest logit and then its sum of exponentials and its label's logit, each combined over the
// tensor-parallel ranks, so the full logits are never gathered. The buffers go before the head's
// backward.
void emit_vocab_parallel_statistics(Builder& B, const Phase& ph, const View& lv, BufferId labels, BufferId& max_rows,
                                    BufferId& sums) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    max_rows = B.buffer("logit max", Category::logits, DType::f32, d.rows);
    sums = B.buffer("exp sums and label logits", Category::logits, DType::f32, 2 * d.rows);
    {  // ce_max: v0 = logits, v1 = max [rows]
        Op& o = B.emit(P.step, OpKind::ce_max, "local logit max", ph);
        o.alloc = {max_rows};
        o.v[0] = lv;
        o.v[1] = {max_rows, d.rows, 1, 1, 0};
    }
    B.tp_all_reduce(P.step, "logit max", ph, {max_rows, 1, d.rows, d.rows, 0}, ReduceOp::max);
    {  // ce_sums: v0 = logits, v1 = labels, v2 = max, v3 = sums [rows, 2]
        Op& o = B.emit(P.step, OpKind::ce_sums, "local exp sums and label logits", ph);
        o.alloc = {sums};
        o.v[0] = lv;
        o.v[1] = {labels, d.b, d.s, d.s, 0};
        o.v[2] = {max_rows, d.rows, 1, 1, 0};
        o.v[3] = {sums, d.rows, 2, 2, 0};
    }
    B.tp_all_reduce(P.step, "exp sums and label logits", ph, {sums, 1, 2 * d.rows, 2 * d.rows, 0});
}

// Final norm, LM head, cross-entropy and their backward for micro-batch mb, from the last
// layer's output x (freed here). Returns the residual gradient buffer dres, which holds
// dLoss/d(last layer output).
BufferId emit_output_and_loss(Builder& B, std::int64_t mb, BufferId x, bool reduce) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    const Phase out{PhaseKind::output_loss, 0, mb};
    output_gathers(B, P.step, out);
    const BufferId xnf = B.seq_act("final norm out", d.h);
    emit_norm_fwd(B, P.step, "final norm", out, x, xnf, P.normf_w, P.normf_b);
    // Sequence parallelism: the head keeps the gathered input for its weight gradient; the shard
    // goes (the final norm's backward reads its input, not its output).
    const BufferId xg = B.gather_seq(P.step, "final norm out", out, xnf, d.h);
    if (xg != xnf) P.step.back().free.push_back(xnf);
    const BufferId labels = B.buffer("labels", Category::activations, DType::i64, d.rows);
    {  // labels: v0 = next-token ids [b, s]
        Op& o = B.emit(P.step, OpKind::labels, "synthetic labels", out);
        o.alloc = {labels};
        o.v[0] = {labels, d.b, d.s, d.s, 0};
    }
    const BufferId logits = B.buffer("logits", Category::logits, P.act, d.rows * d.vocab_padded);
    const View lv{logits, d.rows, d.vocab_padded, d.vocab_padded, 0};
    emit_linear_fwd(B, P.step, "lm head", out, B.full(xg, d.h), lv, P.head, kNoParam);
    BufferId max_rows = kNoBuffer, sums = kNoBuffer;
    if (d.tp > 1) emit_vocab_parallel_statistics(B, out, lv, labels, max_rows, sums);
    const BufferId loss = B.buffer("loss per token", Category::logits, DType::f32, d.rows);
    {  // cross_entropy: v0 = logits (overwritten by dlogits, scaled 1/(rows*grad_acc)), v1 = labels, v2 = loss rows;
       // tensor parallel: v3 = the rows' max, v4 = their exp sums and label logits (freed here)
        Op& o = B.emit(P.step, OpKind::cross_entropy, "softmax cross-entropy", out);
        o.alloc = {loss};
        o.v[0] = lv;
        o.v[1] = {labels, d.b, d.s, d.s, 0};
        o.v[2] = {loss, d.rows, 1, 1, 0};
        if (d.tp > 1) {
            o.v[3] = {max_rows, d.rows, 1, 1, 0};
            o.v[4] = {sums, d.rows, 2, 2, 0};
            o.free = {max_rows, sums};
        }
    }
    {  // loss_accumulate: v0 = loss rows, summed into the device scalars
        Op& o = B.emit(P.step, OpKind::loss_accumulate, "loss sum", out);
        o.v[0] = {loss, d.rows, 1, 1, 0};
        o.free = {loss};
    }
    output_grads_begin(B, P.step, out);
    // dxnf is the head's input gradient (logits category: the planner counts it with the logits).
    const BufferId dxnf = B.buffer("d final norm out", Category::logits, P.act, d.rows * d.h);
    emit_linear_bwd(B, P.step, "lm head", out, lv, B.full(xg, d.h), B.full(dxnf, d.h), P.head, kNoParam, {dxnf});
    P.step.back().free = {logits};
    if (xg != xnf) P.step.back().free.push_back(xg);
    const BufferId dn = B.reduce_seq(P.step, "d final norm out (rank's rows)", out, dxnf, d.h, kNoBuffer, Category::logits);
    const BufferId dres = B.seq_act("d residual", d.h, Category::temporary);
    std::vector<BufferId> release = {dn, labels, x};
    if (xg == xnf) release.push_back(xnf);
    emit_norm_bwd(B, P.step, "final norm bwd", out, x, dn, dres, false, P.normf_w, P.normf_b, {dres}, release);
    output_end(B, P.step, out, reduce);
    return dres;
}

// One micro-batch: embedding, every layer's forward, output and loss, every layer's
// backward, the embedding's backward and (fp32 accumulation) the gradient accumulation, with
// the data-parallel collectives around them (program_comm.cpp; `reduce`: this micro-batch
// reduces its gradients).
void emit_micro_batch(Builder& B, std::int64_t mb, bool reduce) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    const Recompute recompute = P.plan.recompute;
    const BufferId tokens = B.buffer("tokens", Category::activations, DType::i64, d.rows);
    BufferId x = emit_embedding_forward(B, mb, tokens);
    std::vector<LayerFwd> saved;
    for (std::int64_t l = 1; l <= d.layers; ++l) {
        layer_forward_gathers(B, P.step, l, {PhaseKind::forward, l, mb});
        // Selective recompute drops the attention core right after use; full recompute
        // keeps only the layer input (everything else goes with the layer's last op).
        LayerFwd f = emit_layer_forward(B, P.step, l, mb, x, true, recompute != Recompute::selective, "");
        if (recompute == Recompute::full) {
            for (BufferId b : layer_kept(P, f)) P.step.back().free.push_back(b);
            P.step.back().free.push_back(f.core);
        }
        release_gathered(B, P.step.back(), layer_unit(l));
        saved.push_back(f);
        x = f.out;
    }
    const BufferId dres = emit_output_and_loss(B, mb, x, reduce);
    for (std::int64_t l = d.layers; l >= 1; --l) {
        const Phase ph{PhaseKind::backward, l, mb};
        layer_backward_begin(B, P.step, l, ph);
        emit_layer_backward(B, P.step, l, mb, saved[static_cast<std::size_t>(l - 1)], dres);
        layer_backward_end(B, P.step, l, ph, reduce);
    }
    const Phase emb{PhaseKind::backward, 1, mb};
    embedding_backward_begin(B, P.step, emb);
    const BufferId dg = B.gather_seq(P.step, "d embedding out", emb, dres, d.h);  // sequence parallelism
    {  // embedding_bwd: v0 = tokens, v1 = dres; p0/p1 word/position embedding grads
        Op& o = B.emit(P.step, OpKind::embedding_bwd, "embedding bwd", emb);
        o.v[0] = {tokens, d.b, d.s, d.s, 0};
        o.v[1] = B.full(dg, d.h);
        o.p0 = P.wte;
        o.p1 = P.wpe;
        o.free = {dres, tokens};
        if (dg != dres) o.free.push_back(dg);
    }
    embedding_backward_end(B, P.step, emb, reduce);
    if (P.grads_fp32 != kNoBuffer)  // grad_accumulate: fp32 buffer += 16-bit gradients, which are then zeroed
        B.emit(P.step, OpKind::grad_accumulate, "accumulate gradients in fp32", {PhaseKind::backward, 1, mb});
}

// Micro-batches 2.. run the same ops on the same buffers as a template micro-batch (each
// buffer is freed within its micro-batch): copies with their index, so the program's buffer
// table does not grow with gradient accumulation. ZeRO-0/1 reduce only in the last
// micro-batch, which then has a template of its own.
void emit_micro_batches(Builder& B) {
    Program& P = B.p_;
    const std::int64_t K = P.dims.grad_acc;
    const bool every = P.plan.zero >= zero_gradients || !data_parallel(P);
    const std::size_t first = P.step.size();
    emit_micro_batch(B, 1, data_parallel(P) && (every || K == 1));
    const std::size_t per_micro_batch = P.step.size() - first;
    const std::int64_t copies = every ? K - 1 : std::max<std::int64_t>(K - 2, 0);
    P.step.reserve(P.step.size() + static_cast<std::size_t>(copies + 1) * per_micro_batch + 16);
    for (std::int64_t mb = 2; mb <= copies + 1; ++mb)
        for (std::size_t i = first; i < first + per_micro_batch; ++i) {
            P.step.push_back(P.step[i]);  // no reallocation: reserved above
            P.step.back().phase.micro_batch = mb;
        }
    if (!every && K > 1) emit_micro_batch(B, K, true);
}

}  // namespace

Program build_program(const ModelConfig& model, const Plan& plan_in, std::int64_t rank) {
    const Plan plan = resolve_defaults(plan_in, model);
    validate_plan(plan, model);
    check_supported(model, plan);
    const std::int64_t world = plan.dp * plan.tp;
    if (rank < 0 || rank >= world)
        throw InputError("--emulate-rank", "rank " + std::to_string(rank) + " is outside the plan's ranks 0.." +
                                               std::to_string(world - 1) + " (--dp " + std::to_string(plan.dp) +
                                               " x --tp " + std::to_string(plan.tp) + ")");

    Program P;
    P.model = model;
    P.plan = plan;
    P.rank = rank;
    const RankCoords at = rank_coords(plan, rank);
    P.tp_rank = at.tp;
    P.dp_rank = at.dp;
    use_model_rope(P);
    P.dims = program_dims(model, plan, P.tp_rank);
    P.layout = runtime_layout(model, plan, P.dims.vocab_padded);
    // Precision recipes (docs/interface.md table): compute copy, gradients, master.
    const PrecisionBytes pb = precision_bytes(plan.precision);
    P.act = pb.activation == 4 ? DType::f32 : DType::bf16;
    P.weight = pb.weight == 4 ? DType::f32 : DType::bf16;
    P.grad = pb.gradient == 4 ? DType::f32 : DType::bf16;
    P.master = pb.master > 0;
    P.grad_accum_fp32 = pb.gradient_accum > 0;
    P.fp8 = plan.precision == Precision::fp8_mixed;

    Builder B(P);
    add_parameters(B);
    add_persistent_buffers(B);
    B.emit(P.step, OpKind::zero_grads, "zero gradients and loss", {PhaseKind::step_start, 0, 0});
    if (P.fp8)  // fp8_cast_weights: the updated weights into the fp8 cache, once per step
        B.emit(P.step, OpKind::fp8_cast_weights, "fp8 cast of the layers' weights", {PhaseKind::step_start, 0, 0});
    emit_micro_batches(B);
    reduce_accumulated(B, P.step);
    wait_all(B, P.step, {PhaseKind::grad_reduce, 0, 0});
    reduce_sequence_parallel_grads(B, P.step);
    B.emit(P.step, OpKind::optimizer, plan.optimizer == Optimizer::adamw ? "adamw" : "sgd",
           {PhaseKind::optimizer_step, 0, 0});
    gather_updated(B, P.step);
    return P;
}

void use_model_rope(Program& P) {
    P.hyper.rope_base = P.model.rope_theta;
    P.hyper.rope_scaling = P.model.rope_scaling;
}

std::string describe(const Program&, const Op& op) { return preflight::describe(op.phase) + ": " + op.name; }

}  // namespace preflight::runtime
