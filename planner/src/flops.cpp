// FLOP counts per op and per step.
#include <algorithm>
#include <cmath>

#include "preflight/planner/throughput.hpp"

namespace preflight {

std::string_view to_string(AttentionFlops a) { return a == AttentionFlops::full ? "full" : "causal"; }

std::optional<AttentionFlops> parse_attention_flops(std::string_view s) {
    if (s == "full") return AttentionFlops::full;
    if (s == "causal") return AttentionFlops::causal;
    return std::nullopt;
}

double causal_attention_pairs(std::int64_t seq, std::int64_t window) {
    const double s = static_cast<double>(seq);
    // Query i attends to min(i, w) keys: the triangle s^2/2 less the one beyond the window (the
    // kernels' s^2/2 convention, Dao et al. 2022; the diagonal's s/2 not counted).
    const double beyond = window > 0 && window < seq ? s - static_cast<double>(window) : 0.0;
    return 0.5 * s * s - 0.5 * beyond * beyond;
}

double mean_causal_pairs(const ModelConfig& m, std::int64_t seq) {
    // Layers of two kinds (Gemma 3, gpt-oss): the windowed layers' pairs and the full ones', averaged.
    const double windowed = causal_attention_pairs(seq, m.sliding_window);
    if (m.full_attention_layers <= 0 || m.layers <= 0) return windowed;
    const double L = static_cast<double>(m.layers), F = static_cast<double>(m.full_attention_layers);
    return ((L - F) * windowed + F * causal_attention_pairs(seq, 0)) / L;
}

ForwardFlopsPerToken forward_flops_per_token(const ModelConfig& m, std::int64_t seq, AttentionFlops convention) {
    const double h = static_cast<double>(m.hidden);
    const double qw = static_cast<double>(m.q_width());
    const double kvw = static_cast<double>(m.kv_width());
    const double f = static_cast<double>(m.ffn_hidden);
    const double s = static_cast<double>(seq);
    // A (M x K) by (K x N) matmul costs 2*M*N*K FLOPs; per token M = 1.
    ForwardFlopsPerToken r;
    r.qkv = 2.0 * h * (qw + 2.0 * kvw);  // q: h->a*d, k and v: h->kv*d (GQA, Ainslie et al. 2023)
    // Each query head scores s keys of width d, then mixes s values (PaLM App. B:
    // 2*2*s*H*Q forward per token per layer, i.e. 12*L*H*Q*T over forward+backward); a sliding
    // window of w keys caps them at w; the causal mask halves the s^2 work (causal_attention_pairs);
    // layers of both kinds count at their mean (mean_causal_pairs).
    const double window = m.sliding_window > 0 ? std::min(s, static_cast<double>(m.sliding_window)) : s;
    const double full_share = m.sliding_window > 0 && m.layers > 0
                                  ? static_cast<double>(m.full_attention_layers) / static_cast<double>(m.layers)
                                  : 0.0;
    const double keys = convention == AttentionFlops::causal ? mean_causal_pairs(m, seq) / s
                                                             : (1.0 - full_share) * window + full_share * s;
    r.attention_scores = 2.0 * keys * qw;
    r.attention_values = 2.0 * keys * qw;
    r.attention_out = 2.0 * qw * h;
    // SwiGLU (Shazeer 2020) has three h x f matrices (gate, up, down), GeLU two;
    // a token visits top_k experts (Fedus et al. 2022 / Mixtral: active experts only).
    const double mlp_mats = m.mlp == MlpKind::swiglu ? 3.0 : 2.0;
    const double k = m.is_moe() ? static_cast<double>(m.experts_per_token) : 1.0;
    r.mlp = k * mlp_mats * 2.0 * h * f;
    r.router = m.is_moe() ? 2.0 * h * static_cast<double>(m.experts) : 0.0;  // h -> experts logits
    r.lm_head = 2.0 * h * static_cast<double>(m.vocab);                      // output layer h -> V
    return r;
}

FlopCounts step_flops(const ModelConfig& model, const Plan& plan_in, AttentionFlops convention) {
    const Plan plan = resolve_defaults(plan_in, model);
    const ForwardFlopsPerToken f = forward_flops_per_token(model, plan.seq, convention);
    const double L = static_cast<double>(model.layers);
    const double forward = L * f.layer() + f.lm_head;
    FlopCounts c;
    // Backward = 2x forward (input gradient + weight gradient GEMMs; Narayanan et al. 2021, sec. 5.1).
    c.model_flops_per_token = 3.0 * forward;
    double extra = 0;
    switch (plan.recompute) {
        case Recompute::none: break;
        // Full recompute re-runs every layer's forward (not the output layer): the 4x
        // factor of Narayanan et al. 2021 eq. 3.
        case Recompute::full: extra = L * f.layer(); break;
        // Selective recompute re-runs only the attention core (Korthikanti et al. 2022, sec. 4.2).
        case Recompute::selective: extra = L * f.attention_core(); break;
    }
    c.hardware_flops_per_token = c.model_flops_per_token + extra;
    const double tokens = static_cast<double>(plan.global_batch_tokens());
    c.model_flops_per_step = c.model_flops_per_token * tokens;
    c.hardware_flops_per_step = c.hardware_flops_per_token * tokens;
    return c;
}

}  // namespace preflight
