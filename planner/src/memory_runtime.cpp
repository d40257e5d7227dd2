// The Preflight runtime's profile terms of the memory model (stage_model.hpp): its ZeRO buffers
// (runtime/src/program_comm.cpp), the peaks of its embedding ops, and its fp8 gradient casts.
#include <algorithm>

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
    const RuntimeStageSpan span{st.first, st.last, 1, st.layers};
    const RuntimeLayout layout = runtime_layout(m, p, padded_vocab_rows(m, p, prof), span);
    const RuntimeUnitBuffers b = runtime_unit_buffers(m, layout, p.precision);
    st.runtime_units = true;
    st.gather_layer = b.gather_layer;
    st.gather_head = b.gather_output;
    st.gather_embed = b.gather_embedding;
    st.unit_grad_layer = b.grad_layer;
    st.unit_grad_output = b.grad_output;
    st.unit_grad_embed = b.grad_embedding;
    const std::int64_t hidden_act = p.seq * p.mbs * m.hidden * precision_bytes(p.precision).activation;
    st.embed_fwd_act = hidden_act;
    st.embed_bwd_act = hidden_act;
}

// Profile (runtime_units): the runtime's embedding ops, in the phases of layer 1, hold the
// token ids, one [s, b, h] activation (layer 1's input in forward, the residual gradient in
// backward) and the embedding unit (gathered under ZeRO-3 in forward, its unreduced gradients
// under ZeRO-2/3 in backward) beside the states; the phase's peak is the larger of that and
// the layer's.
MemoryBreakdown with_embedding_point(const StageModel& st, const Phase& ph, const MemoryBreakdown& layer_point,
                                     std::int64_t earlier) {
    if (!st.runtime_units || !st.first || ph.layer != 1) return layer_point;
    const bool fwd = ph.kind == PhaseKind::forward;
    MemoryBreakdown e = layer_point;
    e.activations = earlier + st.act_embed + (fwd ? st.embed_fwd_act : st.embed_bwd_act);
    e.buffers = st.static_buffers + (fwd ? st.gather_embed : st.unit_grad_embed);
    return e.total() > layer_point.total() ? e : layer_point;
}

// Profile (runtime/src/program_fp8.cpp): a layer GEMM's backward casts its output gradient to fp8
// twice (row-major and transposed, 1 byte each) beside the bf16 one; widest at the up projection
// (with the gate|up gradient and the MLP norm's input gradient) and at q|k|v (with the attention
// norm's): the residual pair plus the gradient at 2 + 2 x 1 bytes.
std::int64_t runtime_fp8_backward_transient(const ModelConfig& m, const activations::ActivationDims& d) {
    const std::int64_t tokens = d.seq * d.micro_batch;
    const std::int64_t residual = 2 * tokens * d.hidden * d.residual_bytes / (d.sp ? d.tp : 1);
    const std::int64_t up = (m.mlp == MlpKind::swiglu ? 2 : 1) * d.ffn_hidden, qkv = d.q_width + 2 * d.kv_width;
    return residual + std::max(up, qkv) * tokens * (d.activation_bytes + 2) / d.tp;
}

}  // namespace preflight::memory_detail
