// Input bounds (limits.hpp): every field and flag against its documented bound, and
// the plan's largest byte figures against kMaxBytes before any int64 arithmetic.
#include "preflight/planner/limits.hpp"

#include <algorithm>
#include <string>

#include "preflight/planner/checked.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/model.hpp"
#include "preflight/planner/plan.hpp"

namespace preflight::limits {

namespace {

std::string str(std::int64_t v) { return std::to_string(v); }

void at_most(const char* subject, std::int64_t v, std::int64_t bound, const char* bound_name) {
    if (v > bound)
        throw InputError(subject, str(v) + " exceeds the limit " + bound_name + " = " + str(bound));
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
    at_most("num_local_experts", m.experts, kMaxExperts, "kMaxExperts");
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

    // Upper bound (in long double, which cannot overflow here) on every byte figure the
    // memory model forms, term by term with generous per-element coefficients: each
    // saved tensor is at most 8 bytes per element, each score-sized one (softmax,
    // masks, eager transients) counted 32 times. When this bound is below kMaxBytes
    // (2^60), no int64 intermediate of the memory model can overflow.
    using LD = long double;
    const LD s = static_cast<LD>(p.seq), b = static_cast<LD>(p.mbs), sb = s * b;
    const LD ept = static_cast<LD>(std::max<std::int64_t>(m.experts_per_token, 1));
    const LD per_token_layer = 64.0L * (static_cast<LD>(m.hidden) + static_cast<LD>(m.q_width()) +
                                        2.0L * static_cast<LD>(m.kv_width()) + static_cast<LD>(m.experts) +
                                        ept * static_cast<LD>(m.ffn_hidden)) +
                               32.0L * static_cast<LD>(m.heads) * s;
    const LD layer = sb * per_token_layer;
    const LD in_flight = static_cast<LD>(std::min(p.pp, p.grad_acc));
    const LD vocab_padded = static_cast<LD>(m.vocab) + 1024.0L * static_cast<LD>(p.tp);
    // Expert-parallel all-to-all buffers: routed tokens (top-k, capacity factor <= 64) of
    // width hidden, sent and received, <= 8 bytes each.
    const LD all_to_all = sb * ept * 64.0L * static_cast<LD>(m.hidden) * 16.0L;
    const LD activations = static_cast<LD>(m.layers) * layer * in_flight +
                           sb * (16.0L * vocab_padded + 64.0L * static_cast<LD>(m.hidden)) + all_to_all;
    if (activations > static_cast<LD>(kMaxBytes)) {
        // Name the flag that drives the figure: a sequence whose score matrix dominates,
        // else the micro-batch (tokens per micro-batch = seq x mbs).
        const bool scores = 32.0L * static_cast<LD>(m.heads) * s > per_token_layer / 2;
        throw InputError(scores ? "--seq" : "--mbs",
                         "seq " + str(p.seq) + " x mbs " + str(p.mbs) + " of " + m.name +
                             " needs more than kMaxBytes = 2^60 B (1 EiB) of activations and buffers per GPU: reduce " +
                             (scores ? "--seq" : "--mbs"));
    }
}

}  // namespace preflight::limits
