// The Preflight runtime's profile terms of the memory model (stage_model.hpp): its ZeRO buffers
// (runtime/src/program_comm.cpp), the peaks of its embedding ops, and its fp8 gradient casts.
#include <algorithm>

#include "preflight/planner/extensions.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/runtime_layout.hpp"
#include "stage_model.hpp"

namespace preflight::memory_detail {

namespace {
std::int64_t padded_vocab_rows(const ModelConfig& m, const Plan& p, const FrameworkProfile& prof) {
    const std::int64_t unit = std::max<std::int64_t>(prof.vocab_pad_multiple, 1) * p.tp;
    return (m.vocab + unit - 1) / unit * unit / p.tp;
}
}  // namespace

// Profile: the runtime's ZeRO buffers (runtime/src/program_comm.cpp): ZeRO-3 gathers one unit at a
// time (layer l and the prefetched l + 1 in forward, l and l - 1 in backward, the output layer's
// in output+loss); ZeRO-2/3 hold the gradients of the unit being computed and of the one being
// reduce-scattered meanwhile (the output layer's during output+loss and layer L's backward).
void add_runtime_unit_buffers(StageModel& st, const ModelConfig& m, const Plan& p, const FrameworkProfile& prof) {
    const RuntimeStageSpan span{st.first, st.last, 1, st.layers, {}};
    const RuntimeLayout layout = runtime_layout(m, p, padded_vocab_rows(m, p, prof), span);
    const RuntimeUnitBuffers b = runtime_unit_buffers(m, layout, p.precision);
    st.runtime_units = true;
    st.gather_layer = b.gather_layer;
    st.gather_head = b.gather_output;
    st.gather_embed = b.gather_embedding;
    st.unit_grad_layer = b.grad_layer;
    st.unit_grad_output = b.grad_output;
    st.unit_grad_embed = b.grad_embedding;
    // ZeRO-2/3 with a word embedding tied across pipeline stages: the unit holding it (the
    // embedding on the first stage, the head with the copy on the last) keeps its gradients from
    // the step's start until they are summed and reduce-scattered (program_comm.cpp
    // open_tied_unit_grads, tie_embedding_grads), instead of opening them in each backward.
    if (p.zero >= zero_gradients && m.tied_embeddings && p.pp > 1) {
        if (st.first) st.tied_unit_grads = b.grad_embedding, st.unit_grad_embed = 0;
        if (st.last) st.tied_unit_grads = b.grad_output, st.unit_grad_output = 0;
    }
    const std::int64_t hidden_act = p.seq * p.mbs * m.hidden * precision_bytes(p.precision).activation;
    // Sequence parallelism: the whole [s, b, h] (partial embeddings before their reduce-scatter, or
    // the gathered gradient) beside the rank's rows (layer 1's input, or the residual gradient).
    const std::int64_t rows_share = p.sp && p.tp > 1 ? hidden_act / p.tp : 0;
    st.embed_fwd_act = hidden_act;
    st.embed_fwd_rows = rows_share;
    st.embed_bwd_act = hidden_act + rows_share;
}

// Profile (runtime_units): the runtime's embedding ops, in the phases of layer 1, hold the
// token ids and one [s, b, h] activation beside the states: in forward the embedding's output
// beside the embedding unit gathered for it (ZeRO-3, freed with the op), then under sequence
// parallelism that output beside the rank's rows of layer 1's input; in backward the residual
// gradient (gathered beside its rows under sequence parallelism) beside the embedding's
// unreduced gradients (ZeRO-2/3). The phase's peak is the larger of that and the layer's.
MemoryBreakdown with_embedding_point(const StageModel& st, const Phase& ph, const MemoryBreakdown& layer_point,
                                     std::int64_t earlier) {
    if (!st.runtime_units || !st.first || ph.layer != 1) return layer_point;
    MemoryBreakdown e = layer_point;
    e.buffers = st.static_buffers + st.tied_unit_grads;
    if (ph.kind == PhaseKind::forward) {
        const bool at_gather = st.gather_embed >= st.embed_fwd_rows;
        e.activations = earlier + st.act_embed + st.embed_fwd_act + (at_gather ? 0 : st.embed_fwd_rows);
        e.buffers += at_gather ? st.gather_embed : 0;
    } else {
        e.activations = earlier + st.act_embed + st.embed_bwd_act;
        e.buffers += st.unit_grad_embed;
    }
    return e.total() > layer_point.total() ? e : layer_point;
}

std::vector<StageModel::ChunkView> runtime_chunk_views(const StageModel& st, const ModelConfig& m, const Plan& p,
                                                       std::int64_t stage) {
    const std::vector<StageChunk> chunks = pipeline_stage_chunks(p, m.layers, stage);
    const std::size_t v = chunks.size();
    // The residual gradient [s/tp (sp), b, h] the loss leaves for the model's last chunk's backward.
    const std::int64_t dres = p.seq * p.mbs * m.hidden * precision_bytes(p.precision).activation / (p.sp && p.tp > 1 ? p.tp : 1);
    std::vector<StageModel::ChunkView> views(v);
    std::vector<std::int64_t> held_bytes(v);
    std::int64_t first_layer = 1;
    for (std::size_t c = 0; c < v; ++c) {
        StageModel::ChunkView& w = views[c];
        w.first = st.first && c == 0;
        w.last = st.last && c + 1 == v;
        w.layers = chunks[c].layers;
        w.first_layer = first_layer;
        first_layer += w.layers;
        held_bytes[c] = w.layers * st.act_layer + (w.first ? st.act_embed : 0) + (w.last ? dres : 0);
    }
    // Walk the stage's steps. A pass computes beside every chunk micro-batch held (a backward
    // less its own), the activations and gradients received for later passes, and the outputs
    // computed but not yet sent (a steady-state forward's, through the backward after it): the
    // last two each one [s/tp (sp), b, h] buffer, as dres.
    std::int64_t held = 0, queued = 0, unsent = 0;
    const std::vector<PipelineStep> steps = interleaved_stage_steps(p, stage);
    for (std::size_t at = 0; at < steps.size(); ++at) {
        const PipelineStep& step = steps[at];
        if (!step.compute) {
            queued += (step.recv_forward ? 1 : 0) + (step.recv_backward ? 1 : 0);
            unsent -= static_cast<std::int64_t>(step.sends.size());
            continue;
        }
        const PipelinePass& ps = step.pass;
        StageModel::ChunkView& w = views[static_cast<std::size_t>(ps.chunk)];
        const std::int64_t own = held_bytes[static_cast<std::size_t>(ps.chunk)];
        const bool received = ps.forward ? !w.first : !w.last;
        queued -= received ? 1 : 0;
        const bool sent = ps.forward ? !w.last : !w.first;
        if (ps.forward) {
            w.earlier_fwd = std::max(w.earlier_fwd, held + (queued + unsent) * dres);
            held += own;
        } else {
            held -= own;
            const std::int64_t beside = held + (queued + unsent) * dres;
            // backward_at 0: none yet (step 0 is an exchange or a forward).
            if (w.backward_at == 0 || beside > w.earlier_bwd) w.earlier_bwd = beside, w.backward_at = at;
        }
        unsent += sent ? 1 : 0;
    }
    return views;
}

StageModel chunk_view_model(const StageModel& st, const StageModel::ChunkView& v) {
    StageModel view = st;
    view.chunk_views.clear();
    view.first = v.first;
    view.last = v.last;
    view.layers = v.layers;
    view.act_embed = v.first ? st.act_embed : 0;
    view.act_head = v.last ? st.act_head : 0;
    view.earlier_fwd = v.earlier_fwd;
    view.earlier_bwd = v.earlier_bwd;
    view.view_backward_at = v.backward_at;
    view.output_grads_freed_in_forward = true;  // program_comm.cpp output_pass_end
    return view;
}

// Profile (runtime/src/program_fp8.cpp): a layer GEMM's backward casts its output gradient to fp8
// twice (row-major and transposed, 1 byte each) beside the bf16 one; widest at the up projection
// (with the gate|up gradient and the MLP norm's input gradient) and at q|k|v (with the attention
// norm's): the residual pair plus the gradient at 2 + 2 x 1 bytes.
std::int64_t runtime_fp8_backward_transient(const ModelConfig& m, const activations::ActivationDims& d) {
    const std::int64_t tokens = d.seq * d.micro_batch;
    const std::int64_t residual = 2 * tokens * d.hidden * d.residual_bytes / (d.sp ? d.tp : 1);
    // The runtime's MoE MLP casts nothing (its experts stay 16-bit).
    const std::int64_t up = m.is_moe() ? 0 : (m.mlp == MlpKind::swiglu ? 2 : 1) * d.ffn_hidden, qkv = d.q_width + 2 * d.kv_width;
    return residual + std::max(up, qkv) * tokens * (d.activation_bytes + 2) / d.tp;
}

// Profile (runtime/src/program_moe.cpp emit_moe_backward): the MoE MLP's backward beside the residual
// gradient (its rows under sp), op by op: the output gradient gathered (sp, then over the ep block)
// for the combine's backward (d expert rows dy, d gate weights), the routing's (+ d router logits),
// the down dgrad (+ d(gate|up) of this rank's slice, dy freed after its wgrad), the up dgrad (+ d
// dispatched rows, dy's size; d(gate|up) freed after its wgrad), the dispatch's backward (+ the routed
// tokens' gradient, partial sums under tp and ep), its reduce-scatter's rows (ep), the router's
// weight gradient (+ its input gathered again, sp), the reduce-scatter's rows (sp), then the norm's
// (its row statistics). Expert rows and routed tokens: runtime_moe_rows.
static std::int64_t runtime_moe_backward_transient(const ModelConfig& m, const Plan& p, const activations::ActivationDims& d) {
    const bool sp = d.sp && d.tp > 1;
    const std::int64_t tokens = d.seq * d.micro_batch, rows = sp ? tokens / d.tp : tokens, a = d.activation_bytes;
    const RuntimeMoeRows r = runtime_moe_rows(m, p, tokens);
    const bool ep = r.routed_tokens > tokens;
    const std::int64_t pairs = r.routed_tokens * m.experts_per_token;
    const std::int64_t dy = r.slots * d.hidden * a, dg = pairs * 4, dl = r.routed_tokens * m.experts * a;
    const std::int64_t dgu = r.slots * 2 * d.ffn_hidden * a / d.tp, dn = tokens * d.hidden * a, stats = rows * 2 * 4;
    const std::int64_t gathered = sp ? tokens * d.hidden * a : 0, dn_rows = sp ? rows * d.hidden * a : 0;
    const std::int64_t block = ep ? r.routed_tokens * d.hidden * a : 0, dx = ep ? block : dn;
    const std::int64_t dres = rows * d.hidden * d.residual_bytes;
    return dres + std::max({gathered + block, (ep ? block : gathered) + dy + dg, dy + dg + dl, dy + dl + dgu,
                            dl + dgu + dy, dl + dy + dx, ep ? dl + dx + dn : 0, dl + dn + gathered, dn + dn_rows,
                            (sp ? dn_rows : dn) + stats});
}

// Profile (runtime/src/program_layer.cpp, sequence parallelism): a layer's backward holds the
// residual gradient's rows (s = [s/tp, b, h]) beside the widest of
//  - a column-parallel GEMM's input gradient at full rows before its reduce-scatter, then the
//    rank's rows of it and the input gathered again for the weight gradient: [s, b, h] + s,
//    with d(gate|up) (up projection) or d(q|k|v) (q|k|v projection);
//  - the output gradient gathered for a row-parallel GEMM, with its input gradient d(attn out);
//  - flash attention's backward (d(attn out), d(q|k|v), its workspace), or eager's (d(attn out),
//    dP and dS; then dS, d(attn out) and d(q|k|v)).
// Under fp8 each GEMM's output gradient is cast first (row-major and transposed, 1 byte each) and
// the column-parallel weight gradients read the kept fp8 copy, so nothing is gathered again:
//  - a column-parallel GEMM: its output gradient and the casts (2 x its bytes) with the input
//    gradient at full rows, [s, b, h];
//  - a row-parallel GEMM: the output gradient gathered, [s, b, h], and its casts (as much again)
//    with its input gradient d(gate|up) or d(attn out).
std::int64_t runtime_sp_backward_transient(const ModelConfig& m, const Plan& p, const activations::ActivationDims& d) {
    const std::int64_t tokens = d.seq * d.micro_batch, a = d.activation_bytes;
    const std::int64_t full = tokens * d.hidden * a, rows = full / d.tp;
    // A mixture of experts' MLP has its own (runtime_moe_backward_transient).
    const std::int64_t dgu = m.is_moe() ? 0 : (m.mlp == MlpKind::swiglu ? 2 : 1) * tokens * d.ffn_hidden * a / d.tp;
    const std::int64_t dqkv = tokens * (d.q_width + 2 * d.kv_width) * a / d.tp, dattn = tokens * d.q_width * a / d.tp;
    std::int64_t widest = p.precision == Precision::fp8_mixed
                              ? std::max({full + 2 * dgu, full + 2 * dqkv, 2 * full + dgu, 2 * full + dattn})
                              : std::max({full + rows + dgu, full + rows + dqkv, full + dattn});
    if (p.attention == AttentionKind::flash) {
        const std::int64_t ws = runtime_flash_bwd_workspace_bytes(d.micro_batch, m.heads / p.tp,
                                                                  std::max<std::int64_t>(1, m.kv_heads / p.tp), d.seq,
                                                                  m.head_dim, a, p.cp_full_seq > p.seq);
        widest = std::max(widest, dattn + dqkv + ws + cp_gathered_kv_bytes(m, p));
    } else {
        const std::int64_t scores = d.heads * d.seq * d.seq * d.micro_batch * a / d.tp;
        widest = std::max({widest, dattn + 2 * scores, scores + dattn + dqkv});
    }
    return rows + widest;
}

// Profile (runtime/src/program_layer.cpp emit_head_norm_bwd): the q/k norms' backward (Qwen3's per
// head, OLMoE's over the whole projections) holds its fp32 scratch (runtime_head_norm_scratch_elements)
// beside d(q|k|v) and the residual gradient's rows; 0 without those norms.
static std::int64_t runtime_head_norm_backward_transient(const ModelConfig& m, const Plan& p,
                                                         const activations::ActivationDims& d) {
    if (!m.qk_norm) return 0;
    const std::int64_t tokens = d.seq * d.micro_batch, heads = m.heads / p.tp, kv_heads = m.kv_heads / p.tp;
    return tokens * d.hidden * d.residual_bytes / (d.sp ? d.tp : 1) +
           tokens * (d.q_width + 2 * d.kv_width) * d.activation_bytes / d.tp +
           runtime_head_norm_scratch_elements(tokens, qk_norm_groups(m.qk_norm_whole, heads, kv_heads, m.head_dim)) * 4;
}

// Profile (runtime/src/program_post_norm.cpp, tp 1): a layer with norms on its sublayer outputs (OLMo 2)
// holds beside the residual gradient, op by op: a norm's input gradient with its row statistics, then
// with the GEMM backward it feeds (under fp8 first cast, 2 x 1 byte an element) and that GEMM's input
// gradient, d(gate|up) or d(attn out); d(gate|up) alone with its casts, its input gradient added into
// the residual gradient; and d(q|k|v) with its casts. The attention core's points are flash's and
// eager's as for pre-norms (runtime_flash_backward_transient, backward_transient).
static std::int64_t runtime_post_norm_backward_transient(const ModelConfig& m, const Plan& p,
                                                         const activations::ActivationDims& d) {
    const std::int64_t tokens = d.seq * d.micro_batch, a = d.activation_bytes, casts = p.precision == Precision::fp8_mixed ? 2 : 0;
    const std::int64_t res = tokens * d.hidden * d.residual_bytes, dnorm = tokens * d.hidden * a;
    const std::int64_t up = (m.mlp == MlpKind::swiglu ? 2 : 1) * tokens * d.ffn_hidden, qkv = tokens * (d.q_width + 2 * d.kv_width);
    return res + std::max({dnorm + tokens * 8, dnorm + casts * tokens * d.hidden + up * a, up * (a + casts),
                           dnorm + casts * tokens * d.hidden + tokens * d.q_width * a, qkv * (a + casts)});
}

std::int64_t profile_backward_transient(const ModelConfig& m, const Plan& p, const FrameworkProfile& prof,
                                        const activations::ActivationDims& d, std::int64_t generic) {
    const std::int64_t moe = prof.runtime_moe && m.is_moe() ? runtime_moe_backward_transient(m, p, d) : 0;
    const std::int64_t head_norms = prof.runtime_shard_units ? runtime_head_norm_backward_transient(m, p, d) : 0;
    std::int64_t t = std::max({generic, moe, head_norms});
    // The runtime gathers K and V (cp_gathered_kv_bytes) where others keep ring buffers.
    const std::int64_t cp_kv = prof.cp_gathers_kv ? cp_gathered_kv_bytes(m, p) : 0;
    if (prof.flash_bwd_workspace && p.attention == AttentionKind::flash)
        t = std::max(t, runtime_flash_backward_transient(m, p, d) + cp_kv);
    if (prof.runtime_shard_units && m.post_norms) return std::max(t, runtime_post_norm_backward_transient(m, p, d));
    if (prof.fp8_runtime_recipe && p.precision == Precision::fp8_mixed) t = std::max(t, runtime_fp8_backward_transient(m, d));
    if (prof.runtime_shard_units && d.sp && d.tp > 1)
        return std::max({runtime_sp_backward_transient(m, p, d), moe, head_norms});
    // Without sp, the q|k|v projection's input gradient [s, b, h] beside d(q|k|v) and the residual
    // gradient (program_layer.cpp emit_column_parallel_bwd): wider than flash's point when tp splits
    // q|k|v but not h (a helper-70 audit found it with a top-1 MoE of narrow experts, and a dense twin).
    const std::int64_t tokens = d.seq * d.micro_batch;
    if (prof.runtime_shard_units)
        t = std::max(t, tokens * d.hidden * (d.residual_bytes + d.activation_bytes) +
                            tokens * (d.q_width + 2 * d.kv_width) * d.activation_bytes / d.tp);
    return t;
}

std::int64_t runtime_flash_backward_transient(const ModelConfig& m, const Plan& p, const activations::ActivationDims& d) {
    // Flash backward holds dres, d(attn out), dqkv and its workspace (profiles.hpp) at once beside
    // the residual gradient pair (2 x [s, b, h]).
    const std::int64_t tokens = d.seq * d.micro_batch;
    return 2 * tokens * d.hidden * d.residual_bytes +
           tokens * (d.q_width + d.q_width + 2 * d.kv_width) * d.activation_bytes / d.tp +
           runtime_flash_bwd_workspace_bytes(d.micro_batch, m.heads / p.tp, std::max<std::int64_t>(1, m.kv_heads / p.tp),
                                             d.seq, m.head_dim, d.activation_bytes, p.cp_full_seq > p.seq) -
           tokens * d.hidden * d.residual_bytes;
}

}  // namespace preflight::memory_detail
