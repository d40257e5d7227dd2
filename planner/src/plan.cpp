#include "preflight/planner/plan.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

#include "preflight/planner/error.hpp"
#include "preflight/planner/extensions.hpp"
#include "preflight/planner/format.hpp"
#include "preflight/planner/limits.hpp"
#include "preflight/planner/model.hpp"

namespace preflight {

namespace {
template <typename E, std::size_t N>
std::optional<E> parse_enum(std::string_view s, const std::array<E, N>& values) {
    for (E v : values)
        if (to_string(v) == s) return v;
    return std::nullopt;
}
constexpr std::array kPrecisions = {Precision::fp32, Precision::bf16_mixed, Precision::bf16_mixed_fp32_grads,
                                    Precision::bf16, Precision::fp16_mixed, Precision::fp8_mixed};
constexpr std::array kRecomputes = {Recompute::none, Recompute::selective, Recompute::full};
constexpr std::array kOptimizers = {Optimizer::adamw, Optimizer::sgd};
constexpr std::array kAttentions = {AttentionKind::flash, AttentionKind::eager};
constexpr std::array kFp8Scalings = {Fp8Scaling::tensorwise, Fp8Scaling::rowwise};

std::string str(std::int64_t v) { return std::to_string(v); }
}  // namespace

std::string_view to_string(Precision p) {
    switch (p) {
        case Precision::fp32: return "fp32";
        case Precision::bf16_mixed: return "bf16-mixed";
        case Precision::bf16_mixed_fp32_grads: return "bf16-mixed-fp32-grads";
        case Precision::bf16: return "bf16";
        case Precision::fp16_mixed: return "fp16-mixed";
        case Precision::fp8_mixed: return "fp8-mixed";
    }
    return "?";
}
std::string_view to_string(Recompute r) {
    switch (r) {
        case Recompute::none: return "none";
        case Recompute::selective: return "selective";
        case Recompute::full: return "full";
    }
    return "?";
}
std::string_view to_string(Optimizer o) { return o == Optimizer::adamw ? "adamw" : "sgd"; }
std::string_view to_string(AttentionKind a) { return a == AttentionKind::flash ? "flash" : "eager"; }
std::string_view to_string(Fp8Scaling s) { return s == Fp8Scaling::tensorwise ? "tensorwise" : "rowwise"; }

std::optional<Precision> parse_precision(std::string_view s) { return parse_enum(s, kPrecisions); }
std::optional<Recompute> parse_recompute(std::string_view s) { return parse_enum(s, kRecomputes); }
std::optional<Optimizer> parse_optimizer(std::string_view s) { return parse_enum(s, kOptimizers); }
std::optional<AttentionKind> parse_attention(std::string_view s) { return parse_enum(s, kAttentions); }
std::optional<Fp8Scaling> parse_fp8_scaling(std::string_view s) { return parse_enum(s, kFp8Scalings); }
std::span<const Precision> all_precisions() { return kPrecisions; }
std::span<const Recompute> all_recomputes() { return kRecomputes; }

std::optional<ZeroStage> zero_stage(std::int64_t stage) {
    if (stage < 0 || stage > 3) return std::nullopt;
    return static_cast<ZeroStage>(stage);
}

Plan resolve_defaults(Plan plan, const ModelConfig& model) {
    if (plan.seq == 0) plan.seq = std::min(model.max_positions, kDefaultSeqCap);
    return plan;
}

// " (tp can be 1, 2, 4 or 8)": the degrees that divide the heads, the key/value heads and the
// MLP width, as the refusal of any other names them.
std::string tp_choices(const ModelConfig& m) {
    const std::int64_t g = std::gcd(std::gcd(m.heads, m.kv_heads), m.ffn_hidden);
    std::vector<std::int64_t> d;
    for (std::int64_t i = 1; i <= g; ++i)  // g <= kMaxHeads = 16,384: a short loop
        if (g % i == 0) d.push_back(i);
    std::string s = " (tp can be ";
    for (std::size_t i = 0; i < d.size(); ++i)
        s += (i == 0 ? "" : i + 1 == d.size() ? " or " : ", ") + str(d[i]);
    return s + ")";
}

void validate_plan(const Plan& p, const ModelConfig& m) {
    const std::pair<const char*, std::int64_t> counts[] = {
        {"--seq", p.seq}, {"--mbs", p.mbs}, {"--grad-acc", p.grad_acc}, {"--dp", p.dp}, {"--tp", p.tp}, {"--pp", p.pp}};
    for (const auto& [flag, v] : counts)
        if (v <= 0) throw InputError(flag, "must be a positive integer, got " + str(v));
    if (p.zero < 0 || p.zero > 3) throw InputError("--zero", "must be 0, 1, 2 or 3, got " + str(p.zero));
    if (!(p.dropout >= 0.0 && p.dropout < 1.0))
        throw InputError("--dropout", "must be in [0, 1), got " + format_real(p.dropout));
    if (p.fp8_scaling != Fp8Scaling::tensorwise && p.precision != Precision::fp8_mixed)
        throw InputError("--fp8-scaling", std::string(to_string(p.fp8_scaling)) +
                                              " scaling applies to --precision fp8-mixed only, got --precision " +
                                              std::string(to_string(p.precision)));
    validate_fp8_param_gather(p);
    if (m.heads % p.tp != 0)
        throw InputError("--tp", str(p.tp) + " does not divide the model's " + str(m.heads) + " attention heads" +
                                     tp_choices(m));
    // Megatron splits key/value groups across tensor-parallel ranks.
    if (m.kv_heads % p.tp != 0)
        throw InputError("--tp", str(p.tp) + " does not divide the model's " + str(m.kv_heads) + " key/value heads" +
                                     tp_choices(m));
    if (m.ffn_hidden % p.tp != 0)
        throw InputError("--tp", str(p.tp) + " does not divide the MLP width " + str(m.ffn_hidden) + tp_choices(m));
    if (p.sp && p.tp == 1) throw InputError("--sp", "sequence parallelism needs --tp > 1");
    if (p.sp && p.seq % p.tp != 0)
        throw InputError("--sp", "sequence length " + str(p.seq) + " is not divisible by --tp " + str(p.tp));
    if (p.pp > m.layers)
        throw InputError("--pp", str(p.pp) + " pipeline stages exceed the model's " + str(m.layers) + " layers");
    validate_uneven_pipeline_split(p, m);
    // Learned positions have no row past the table; RoPE models are refused alike (one
    // rule for every family), since training beyond the context the config declares needs
    // a config that declares it (a longer max_position_embeddings, rope scaling).
    if (p.seq > m.max_positions)
        throw InputError("--seq", str(p.seq) + " exceeds the model's " + str(m.max_positions) +
                                      (m.position == PositionKind::learned ? " learned positions"
                                                                           : " positions (max_position_embeddings)"));
    limits::check_plan(p, m);  // documented bounds; no int64 overflow past this point
    validate_plan_extensions(p, m);  // fine-tuning, offload, schedules, cp, ep
}

ResolvedPlan::ResolvedPlan(const Plan& plan, const ModelConfig& model) : plan_(resolve_defaults(plan, model)) {
    validate_plan(plan_, model);
}

PrecisionBytes precision_bytes(Precision p) {
    // docs/interface.md, "Precision recipes"; Micikevicius et al. 2018 for mixed precision.
    switch (p) {
        case Precision::fp32: return {4, 4, 0, 0, 4, 4, 0};
        case Precision::bf16_mixed: return {2, 2, 0, 4, 2, 2, 0};
        // Nanotron-style fp32 gradient accumulation: 16-bit grads plus an fp32 buffer.
        case Precision::bf16_mixed_fp32_grads: return {2, 2, 4, 4, 2, 2, 0};
        case Precision::bf16: return {2, 2, 0, 0, 2, 2, 0};
        case Precision::fp16_mixed: return {2, 2, 0, 4, 2, 2, 0};
        // Transformer Engine on Hopper: bf16 weights plus an fp8 copy of each GEMM
        // weight and its transpose; GEMM inputs saved for backward in fp8.
        case Precision::fp8_mixed: return {2, 2, 0, 4, 2, 1, 2};
    }
    return {};
}

int optimizer_bytes_per_param(Optimizer o) {
    // AdamW: first and second moments in fp32 (Loshchilov & Hutter 2019);
    // SGD with momentum: one fp32 momentum buffer.
    return o == Optimizer::adamw ? 8 : 4;
}

}  // namespace preflight
