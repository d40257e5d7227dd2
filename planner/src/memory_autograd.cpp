// Gradients as plain PyTorch keeps them (FrameworkProfile::grads_set_to_none): no gradient
// buffer of its own, each param.grad allocated by autograd's AccumulateGrad when backward first
// reaches the parameter (torch/csrc/autograd/functions/accumulate_grad.h: a new gradient is
// stolen or cloned into an undefined .grad) and freed by zero_grad(set_to_none=True) after the
// optimizer step (torch/optim/optimizer.py, the default since PyTorch 2.0).
#include "activations.hpp"
#include "preflight/planner/extensions.hpp"
#include "stage_model.hpp"

namespace preflight::memory_detail {

void add_autograd_grads(StageModel& st, const ModelConfig& m, const Plan& p, const FrameworkProfile& prof,
                        const std::vector<ParamTensor>& tensors) {
    if (!prof.grads_set_to_none || p.zero != zero_none || uses_extended_states(p) || prof.runtime_shard_units) return;
    // The gradients' dtype is the states': fp32 under autocast over fp32 parameters (add_model_states).
    const PrecisionBytes pb = profile_precision_bytes(activations::runs_amp(prof, p) ? Precision::fp32 : p.precision, prof);
    // One allocation per tensor (and per accumulator where the recipe keeps one), rounded up to
    // the allocator's block as pad_state_allocations rounds the states.
    auto grad_bytes = [&](const ParamTensor& t) {
        const std::int64_t numel = tp_local_numel(t, p.tp, prof.vocab_pad_multiple);
        std::int64_t bytes = 0;
        for (const int width : {pb.gradient, pb.gradient_accum})
            if (width > 0) bytes += numel * width + allocation_padding(numel * width, prof.allocation_granularity_bytes);
        return bytes;
    };
    StageModel::AutogradGrads g;
    g.on = true;
    g.grad_acc = p.grad_acc;
    for (const ParamTensor& t : tensors) {
        if (t.place == TensorPlace::layer) g.per_layer += grad_bytes(t);
        // Backward starts at the loss: the LM head's weight (a tied embedding's, which the head
        // shares) and the final norm's before any layer; the other embeddings' after layer 1.
        const bool head_side = t.place == TensorPlace::final_norm || t.place == TensorPlace::lm_head ||
                               (m.tied_embeddings && t.name == "word_embedding" && st.first);
        if (head_side && st.last) g.head_side += grad_bytes(t);
    }
    st.autograd = g;
}

MemoryBreakdown with_autograd_grads(const StageModel& st, const Phase& ph, MemoryBreakdown b) {
    const StageModel::AutogradGrads& g = st.autograd;
    if (!g.on) return b;
    const std::int64_t all = st.states.gradients;
    // With more micro-batches than the stage holds at once, the one at the peak runs beside the
    // earlier ones' whole gradients; the step's start follows zero_grad.
    const bool beside_earlier = g.grad_acc > st.in_flight;
    switch (ph.kind) {
        case PhaseKind::step_start: b.gradients = 0; break;
        case PhaseKind::forward:
        case PhaseKind::output_loss: b.gradients = beside_earlier ? all : 0; break;
        case PhaseKind::backward:
            // Layers L down to l (the one running) have their gradients, the head side first.
            b.gradients = beside_earlier ? all : g.head_side + (st.layers - ph.layer + 1) * g.per_layer;
            break;
        case PhaseKind::grad_reduce:
        case PhaseKind::optimizer_step: b.gradients = all; break;
    }
    return b;
}

}  // namespace preflight::memory_detail
