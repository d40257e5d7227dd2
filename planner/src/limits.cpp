// Input bounds (limits.hpp): every field and flag against its documented bound, and
// the plan's largest byte figures against kMaxBytes before any int64 arithmetic.
#include "preflight/planner/limits.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "preflight/planner/checked.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/extensions.hpp"
#include "preflight/planner/model.hpp"
#include "preflight/planner/plan.hpp"

namespace preflight::limits {

namespace {

std::string str(std::int64_t v) { return std::to_string(v); }

void at_most(const char* subject, std::int64_t v, std::int64_t bound, const char* bound_name) {
    if (v > bound)
        throw InputError(subject, str(v) + " exceeds the limit " + bound_name + " = " + str(bound));
}

// Layer units (one layer's activations of one micro-batch) the busiest stage holds at its
// peak, an upper bound for every schedule and stage split the memory model builds.
long double held_layer_units_bound(const Plan& p, const ModelConfig& m) {
    using LD = long double;
    const LD layers = static_cast<LD>(m.layers), pp = static_cast<LD>(p.pp), mb = static_cast<LD>(p.grad_acc);
    // nanotron's compute-cost split (pipeline_split.cpp) gives a stage at most its 1/pp share of
    // the cost of every layer plus the head, in layer costs, and one block more; the even split
    // less. A head costlier than (pp - 1) x the layers leaves every layer on stage 0.
    const LD layer_cost = 4.0L * static_cast<LD>(m.heads) * static_cast<LD>(m.head_dim) * static_cast<LD>(m.hidden) +
                          3.0L * static_cast<LD>(m.ffn_hidden) * static_cast<LD>(m.hidden);
    const LD head_in_layers = static_cast<LD>(m.vocab) * static_cast<LD>(m.hidden) / std::max(layer_cost, 1.0L);
    // An uneven split (pipeline_uneven.cpp) may put up to every layer but one per other stage on one stage.
    const LD stage_layers =
        has_uneven_pipeline_split(p) ? layers : std::min(layers, (layers + head_in_layers) / pp + 2.0L);
    switch (p.pp_schedule) {
        // GPipe holds every micro-batch (Huang et al. 2019); 1F1B at most pp (Narayanan et al. 2021, sec. 2.2).
        case PpSchedule::gpipe: return mb * stage_layers;
        case PpSchedule::one_f_one_b: return std::min(pp, mb) * stage_layers;
        case PpSchedule::interleaved: {
            // pipeline_schedule.cpp: at most (pp - 1) * 2 + (vpp - 1) * pp + 1 < pp * (vpp + 1) chunk
            // micro-batches of (layers + 2) / (pp * vpp) layers each. A vpp beyond the layers is
            // refused after this check (plan_extensions.cpp), so it is clamped here.
            const LD vpp = static_cast<LD>(std::clamp<std::int64_t>(p.vpp, 1, m.layers));
            return std::min(pp * (vpp + 1.0L), mb * vpp) * std::ceil((layers + 2.0L) / (pp * vpp));
        }
    }
    return mb * layers;
}

// Upper bound (in long double, which cannot overflow here) on every byte figure the memory
// model forms, term by term with generous per-element coefficients: each saved tensor is at
// most 8 bytes per element, each score-sized one (softmax, masks, eager transients) counted 32
// times. When this bound is below kMaxBytes (2^60), no int64 intermediate of the memory model
// can overflow.
void check_activation_bound(const Plan& p, const ModelConfig& m) {
    using LD = long double;
    const LD s = static_cast<LD>(p.seq), b = static_cast<LD>(p.mbs), sb = s * b;
    const LD ept = static_cast<LD>(std::max<std::int64_t>(m.experts_per_token, 1));
    // The busiest expert's load (finetune.cpp): up to 64 x the balanced share, checked after this.
    const LD capacity = std::isfinite(p.moe_capacity_factor) ? std::clamp(static_cast<LD>(p.moe_capacity_factor), 1.0L, 64.0L) : 64.0L;
    // Routed tokens (top-k, activations.cpp) are saved at the MLP width and, dispatched and
    // combined, at the hidden width: ept x capacity of each per token.
    const LD width_per_token = 64.0L * (static_cast<LD>(m.hidden) + static_cast<LD>(m.q_width()) +
                                        2.0L * static_cast<LD>(m.kv_width()) + static_cast<LD>(m.experts) +
                                        ept * capacity * (static_cast<LD>(m.ffn_hidden) + static_cast<LD>(m.hidden)));
    const LD scores_per_token = 32.0L * static_cast<LD>(m.heads) * s;
    const LD vocab_padded = static_cast<LD>(m.vocab) + 1024.0L * static_cast<LD>(p.tp);
    // Expert-parallel all-to-all buffers: routed tokens (top-k, capacity factor <= 64) of
    // width hidden, sent and received, <= 8 bytes each.
    const LD all_to_all = sb * ept * 64.0L * static_cast<LD>(m.hidden) * 16.0L;
    const LD units = held_layer_units_bound(p, m);
    const LD bound_bytes = units * sb * (width_per_token + scores_per_token) +
                           sb * (16.0L * vocab_padded + 64.0L * static_cast<LD>(m.hidden)) + all_to_all;
    if (bound_bytes <= static_cast<LD>(kMaxBytes)) return;
    // Name the flag that drives the figure: GPipe's micro-batches when they outnumber the
    // stages, a sequence whose score matrix dominates, else the micro-batch (tokens = seq x mbs).
    const bool gpipe_batches = p.pp_schedule == PpSchedule::gpipe && p.grad_acc > p.pp;
    const bool scores = scores_per_token > width_per_token;
    const char* flag = gpipe_batches ? "--grad-acc" : scores ? "--seq" : "--mbs";
    char eib[32];
    std::snprintf(eib, sizeof eib, "%.3Lg", bound_bytes / static_cast<LD>(kMaxBytes));
    throw InputError(flag, "seq " + str(p.seq) + " x mbs " + str(p.mbs) + " of " + m.name + " (grad_acc " +
                               str(p.grad_acc) + ", pp " + str(p.pp) + ") can hold up to " + eib +
                               " EiB of activations and buffers per GPU (a conservative bound), beyond the 2^60 B "
                               "(1 EiB) the memory model counts in: reduce " +
                               flag + (gpipe_batches ? " (GPipe holds every micro-batch)" : ""));
}

}  // namespace

void check_model(const ModelConfig& m) {
    const bool gpt2 = m.family == ModelFamily::gpt2;
    at_most(gpt2 ? "n_embd" : "hidden_size", m.hidden, kMaxWidth, "kMaxWidth");
    at_most(gpt2 ? "n_inner" : "intermediate_size", m.ffn_hidden, kMaxWidth, "kMaxWidth");
    at_most(gpt2 ? "n_head" : "num_attention_heads", m.heads, kMaxHeads, "kMaxHeads");
    at_most("num_key_value_heads", m.kv_heads, kMaxHeads, "kMaxHeads");
    at_most("head_dim", m.head_dim, kMaxWidth, "kMaxWidth");
    // q width = heads * head_dim; both are at most 2^20, so the product fits.
    at_most(gpt2 ? "n_head" : "num_attention_heads x head_dim", m.heads * m.head_dim, kMaxWidth, "kMaxWidth");
    at_most(gpt2 ? "n_layer" : "num_hidden_layers", m.layers, kMaxLayers, "kMaxLayers");
    at_most("vocab_size", m.vocab, kMaxVocab, "kMaxVocab");
    at_most(gpt2 ? "n_positions" : "max_position_embeddings", m.max_positions, kMaxPositions, "kMaxPositions");
    at_most(std::string(experts_key(m.family)).c_str(), m.experts, kMaxExperts, "kMaxExperts");
    const ParamCounts c = count_params(m);  // checked arithmetic: throws naming the field on overflow
    if (c.total > kMaxParams)
        throw InputError(gpt2 ? "n_embd" : "hidden_size",
                         "the model has " + str(c.total) + " parameters, beyond the limit kMaxParams = " +
                             str(kMaxParams));
}

void check_overhead_bytes(std::optional<std::int64_t> overhead) {
    if (!overhead) return;
    if (*overhead < 0) throw InputError("--overhead-bytes", "must be 0 or more, got " + str(*overhead));
    at_most("--overhead-bytes", *overhead, kMaxDeviceBytes, "kMaxDeviceBytes (1 PiB)");
}

void check_plan(const Plan& p, const ModelConfig& m) {
    at_most("--seq", p.seq, kMaxSeq, "kMaxSeq");
    at_most("--mbs", p.mbs, kMaxMbs, "kMaxMbs");
    at_most("--grad-acc", p.grad_acc, kMaxGlobalBatchTokens, "kMaxGlobalBatchTokens");
    at_most("--dp", p.dp, kMaxGpus, "kMaxGpus");
    at_most("--tp", p.tp, kMaxGpus, "kMaxGpus");
    at_most("--pp", p.pp, kMaxGpus, "kMaxGpus");
    // Each factor is at most 2^40, so pairwise products are checked one at a time.
    const std::int64_t gpus = checked_mul(checked_mul(p.dp, p.tp, "--dp x --tp"), p.pp, "--dp x --tp x --pp");
    at_most("--dp x --tp x --pp", gpus, kMaxGpus, "kMaxGpus");
    const std::int64_t tokens = checked_mul(
        checked_mul(checked_mul(p.seq, p.mbs, "--seq x --mbs"), p.grad_acc, "--seq x --mbs x --grad-acc"), p.dp,
        "--seq x --mbs x --grad-acc x --dp");
    at_most("--seq x --mbs x --grad-acc x --dp (global batch in tokens)", tokens, kMaxGlobalBatchTokens,
            "kMaxGlobalBatchTokens");

    check_activation_bound(p, m);
}

}  // namespace preflight::limits
