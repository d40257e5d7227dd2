#include "preflight/planner/runtime_layout.hpp"

#include <algorithm>
#include <cmath>

#include "preflight/planner/checked.hpp"
#include "preflight/planner/qk_norm_groups.hpp"

namespace preflight {

std::int64_t ShardUnit::owned(std::int64_t rank) const {
    const std::int64_t first = rank * chunk;
    return std::clamp<std::int64_t>(elements - first, 0, chunk);
}

std::string unit_name(const ShardUnit& u) {
    switch (u.kind) {
        case UnitKind::embedding: return "embedding";
        case UnitKind::head: return "head";
        case UnitKind::experts: return "layer " + std::to_string(u.layer) + " experts";
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
                                          bool head_copies_embedding, std::int64_t ep) {
    const std::int64_t h = m.hidden, a = runtime_align(h);
    const bool ln = m.norm == NormKind::layernorm;
    const std::int64_t q = m.q_width() / tp, qkv = q + 2 * (m.kv_width() / tp);
    const std::int64_t f = m.ffn_hidden / tp, up = m.mlp == MlpKind::swiglu ? 2 * f : f;
    const std::int64_t vocab = runtime_align(checked_mul(vocab_rows, h, "vocab x hidden"));
    RuntimeUnitElements e;
    e.embedding = vocab;
    if (m.position == PositionKind::learned) e.embedding += runtime_align(checked_mul(m.max_positions, h, "positions x hidden"));
    // Layer: attention norm, q|k|v (+ bias), (q and k norms: Qwen3's of head_dim, replicated; OLMoE's
    // of the whole q and k widths), output (+ bias), MLP norm, gate|up or fc1 (+ bias), down or fc2 (+ bias).
    const QkNormGroups g = qk_norm_groups(m.qk_norm_whole, m.heads / tp, m.kv_heads / tp, m.head_dim);
    const std::int64_t attention = (ln ? 2 : 1) * a + runtime_align(qkv * h) + (m.qkv_bias ? runtime_align(qkv) : 0) +
                                   (m.qk_norm ? runtime_align(g.q_width) + runtime_align(g.k_width) : 0) +
                                   runtime_align(h * q) + (m.out_bias ? a : 0) + (ln ? 2 : 1) * a;
    e.layer = attention + runtime_align(up * h) + (m.mlp_bias ? runtime_align(up) : 0) + runtime_align(h * f) +
              (m.mlp_bias ? a : 0);
    // Mixture of experts (runtime check_runtime_model: SwiGLU experts without biases): the MLP is
    // the router [E, h] and the experts' stacked gate|up [E 2f, h] and down [E h, f].
    // Under expert parallelism (ep > 1) the rank's E / ep experts are a unit of their own.
    if (m.is_moe()) {
        const std::int64_t local = m.experts / std::max<std::int64_t>(ep, 1);
        const std::int64_t experts =
            runtime_align(checked_mul(checked_mul(local, up, "experts x MLP width"), h, "expert weights")) +
            runtime_align(checked_mul(checked_mul(local, h, "experts x hidden"), f, "expert weights"));
        e.layer = attention + runtime_align(checked_mul(m.experts, h, "experts x hidden")) + (ep > 1 ? 0 : experts);
        e.experts = ep > 1 ? experts : 0;
    }
    e.head = (ln ? 2 : 1) * a + (!m.tied_embeddings || head_copies_embedding ? vocab : 0);
    return e;
}

RuntimeMoeRows runtime_moe_rows(const ModelConfig& m, const Plan& p, std::int64_t tokens) {
    RuntimeMoeRows r;
    const std::int64_t ep = m.is_moe() ? std::max<std::int64_t>(p.ep, 1) : 1, k = m.is_moe() ? m.experts_per_token : 1;
    r.routed_tokens = ep * tokens;
    if (ep <= 1) {
        r.slots = tokens * k;
        return r;
    }
    const double balanced = static_cast<double>(r.routed_tokens * k) / static_cast<double>(m.experts);
    r.capacity = std::min<std::int64_t>(r.routed_tokens, static_cast<std::int64_t>(std::ceil(p.moe_capacity_factor * balanced)));
    r.slots = m.experts / ep * r.capacity;
    return r;
}

RuntimeLayout runtime_layout(const ModelConfig& model, const Plan& plan, std::int64_t vocab_rows,
                             const RuntimeStageSpan& span) {
    RuntimeLayout L;
    L.dp = plan.dp;
    L.zero = plan.zero;
    const RuntimeUnitElements e = runtime_unit_elements(model, vocab_rows, plan.tp,
                                                        span.last && !span.first && model.tied_embeddings, plan.ep);
    auto add = [&L, &plan](UnitKind kind, std::int64_t layer, std::int64_t elements) {
        ShardUnit u;
        u.kind = kind;
        u.layer = layer;
        u.elements = elements;
        // A layer's experts are shared by the dp / ep ranks holding them (expert parallelism).
        u.ranks = kind == UnitKind::experts ? L.dp / std::max<std::int64_t>(plan.ep, 1) : L.dp;
        // ZeRO >= 1: equal chunks over the unit's ranks, each aligned (Rajbhandari et al. 2020, sec. 5:
        // each rank owns 1/N_d of the states); the last ranks' chunks hold the padding.
        u.chunk = L.sharded() ? runtime_align((elements + u.ranks - 1) / u.ranks) : elements;
        u.padded = L.sharded() ? checked_mul(u.chunk, u.ranks, "shard chunk x --dp") : elements;
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
        const std::int64_t layer = at < span.model_layers.size() ? span.model_layers[at] : span.first_layer + i;
        add(UnitKind::layer, layer, e.layer);
        if (e.experts > 0) add(UnitKind::experts, layer, e.experts);
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
    // A layer's gathered and unreduced buffers: its unit and, under expert parallelism, its experts'.
    const ShardUnit* first = L.first_layer();
    const ShardUnit* experts = first && first + 1 < L.units.data() + L.units.size() && first[1].kind == UnitKind::experts
                                   ? first + 1 : nullptr;
    const std::int64_t emb = padded(L.embedding()), layer = padded(first) + padded(experts);
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
