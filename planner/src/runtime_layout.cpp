#include "preflight/planner/runtime_layout.hpp"

#include <algorithm>

#include "preflight/planner/checked.hpp"

namespace preflight {

std::int64_t ShardUnit::owned(std::int64_t rank) const {
    const std::int64_t first = rank * chunk;
    return std::clamp<std::int64_t>(elements - first, 0, chunk);
}

std::string unit_name(const ShardUnit& u) {
    switch (u.kind) {
        case UnitKind::embedding: return "embedding";
        case UnitKind::head: return "head";
        case UnitKind::layer: break;
    }
    return "layer " + std::to_string(u.layer);
}

const ShardUnit* RuntimeLayout::embedding() const {
    return !units.empty() && units.front().kind == UnitKind::embedding ? &units.front() : nullptr;
}
const ShardUnit* RuntimeLayout::head() const {
    return !units.empty() && units.back().kind == UnitKind::head ? &units.back() : nullptr;
}
const ShardUnit* RuntimeLayout::first_layer() const {
    for (const ShardUnit& u : units)
        if (u.kind == UnitKind::layer) return &u;
    return nullptr;
}

RuntimeUnitElements runtime_unit_elements(const ModelConfig& m, std::int64_t vocab_rows, std::int64_t tp,
                                          bool head_copies_embedding) {
    const std::int64_t h = m.hidden, a = runtime_align(h);
    const bool ln = m.norm == NormKind::layernorm;
    const std::int64_t q = m.q_width() / tp, qkv = q + 2 * (m.kv_width() / tp);
    const std::int64_t f = m.ffn_hidden / tp, up = m.mlp == MlpKind::swiglu ? 2 * f : f;
    const std::int64_t vocab = runtime_align(checked_mul(vocab_rows, h, "vocab x hidden"));
    RuntimeUnitElements e;
    e.embedding = vocab;
    if (m.position == PositionKind::learned) e.embedding += runtime_align(checked_mul(m.max_positions, h, "positions x hidden"));
    // Layer: attention norm, q|k|v (+ bias), output (+ bias), MLP norm, gate|up or fc1 (+ bias), down or fc2 (+ bias).
    e.layer = (ln ? 2 : 1) * a + runtime_align(qkv * h) + (m.qkv_bias ? runtime_align(qkv) : 0) + runtime_align(h * q) +
              (m.out_bias ? a : 0) + (ln ? 2 : 1) * a + runtime_align(up * h) + (m.mlp_bias ? runtime_align(up) : 0) +
              runtime_align(h * f) + (m.mlp_bias ? a : 0);
    // Mixture of experts (runtime check_runtime_model: SwiGLU experts without biases): the MLP is
    // the router [E, h] and the experts' stacked gate|up [E 2f, h] and down [E h, f].
    if (m.is_moe())
        e.layer = (ln ? 2 : 1) * a + runtime_align(qkv * h) + (m.qkv_bias ? runtime_align(qkv) : 0) +
                  runtime_align(h * q) + (m.out_bias ? a : 0) + (ln ? 2 : 1) * a +
                  runtime_align(checked_mul(m.experts, h, "experts x hidden")) +
                  runtime_align(checked_mul(checked_mul(m.experts, up, "experts x MLP width"), h, "expert weights")) +
                  runtime_align(checked_mul(checked_mul(m.experts, h, "experts x hidden"), f, "expert weights"));
    e.head = (ln ? 2 : 1) * a + (!m.tied_embeddings || head_copies_embedding ? vocab : 0);
    return e;
}

RuntimeLayout runtime_layout(const ModelConfig& model, const Plan& plan, std::int64_t vocab_rows,
                             const RuntimeStageSpan& span) {
    RuntimeLayout L;
    L.dp = plan.dp;
    L.zero = plan.zero;
    const RuntimeUnitElements e =
        runtime_unit_elements(model, vocab_rows, plan.tp, span.last && !span.first && model.tied_embeddings);
    auto add = [&L](UnitKind kind, std::int64_t layer, std::int64_t elements) {
        ShardUnit u;
        u.kind = kind;
        u.layer = layer;
        u.elements = elements;
        // ZeRO >= 1: dp equal chunks, each aligned (Rajbhandari et al. 2020, sec. 5: each rank
        // owns 1/N_d of the states); the last ranks' chunks hold the padding.
        u.chunk = L.sharded() ? runtime_align((elements + L.dp - 1) / L.dp) : elements;
        u.padded = L.sharded() ? checked_mul(u.chunk, L.dp, "shard chunk x --dp") : elements;
        u.begin = L.full_elements;
        u.shard_begin = L.shard_elements;
        L.full_elements = checked_add(L.full_elements, u.padded, "parameters (padded for --dp)");
        L.shard_elements += u.chunk;
        L.units.push_back(u);
    };
    if (span.first) add(UnitKind::embedding, 0, e.embedding);
    const std::int64_t layers = span.layers < 0 ? model.layers : span.layers;
    for (std::int64_t i = 0; i < layers; ++i) {
        const std::size_t at = static_cast<std::size_t>(i);
        add(UnitKind::layer, at < span.model_layers.size() ? span.model_layers[at] : span.first_layer + i, e.layer);
    }
    if (span.last) add(UnitKind::head, 0, e.head);
    if (!L.sharded()) L.shard_elements = L.full_elements;
    return L;
}

int runtime_shard_gradient_bytes(Precision precision) {
    const PrecisionBytes pb = precision_bytes(precision);
    return pb.gradient_accum > 0 ? pb.gradient_accum : pb.gradient;
}

RuntimeUnitBuffers runtime_unit_buffers(const ModelConfig& model, const RuntimeLayout& L, Precision precision) {
    RuntimeUnitBuffers b;
    const PrecisionBytes pb = precision_bytes(precision);
    auto padded = [](const ShardUnit* u) { return u ? u->padded : 0; };
    const std::int64_t emb = padded(L.embedding()), layer = padded(L.first_layer());
    const std::int64_t output = padded(L.head()) + (L.head() && model.tied_embeddings ? emb : 0);
    if (L.zero == zero_weights) {
        b.gather_embedding = emb * pb.weight;
        b.gather_layer = layer * pb.weight;
        b.gather_output = output * pb.weight;
    }
    if (L.zero >= zero_gradients) {
        b.grad_embedding = emb * pb.gradient;
        b.grad_layer = layer * pb.gradient;
        b.grad_output = output * pb.gradient;
    }
    return b;
}

RuntimeStateElements runtime_state_elements(const RuntimeLayout& L) {
    RuntimeStateElements s;
    s.weights = L.zero == zero_weights ? L.shard_elements : L.full_elements;
    s.gradients = L.zero >= zero_gradients ? L.shard_elements : L.full_elements;
    s.optimizer = L.sharded() ? L.shard_elements : L.full_elements;
    return s;
}

}  // namespace preflight

namespace preflight {

ModelStateBytes runtime_model_states(const RuntimeLayout& L, Precision precision, Optimizer optimizer) {
    const RuntimeStateElements e = runtime_state_elements(L);
    const PrecisionBytes pb = precision_bytes(precision);
    ModelStateBytes b;
    b.weights = e.weights * pb.weight;
    b.gradients = e.gradients * (L.zero >= zero_gradients ? runtime_shard_gradient_bytes(precision)
                                                          : pb.gradient + pb.gradient_accum);
    b.master_weights = e.optimizer * pb.master;
    b.optimizer_states = e.optimizer * optimizer_bytes_per_param(optimizer);
    return b;
}

}  // namespace preflight
