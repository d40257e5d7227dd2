// The activation inventory of one decoder layer (activations.hpp).
#include "activations.hpp"

#include <algorithm>

#include "preflight/planner/extensions.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/runtime_layout.hpp"

namespace preflight::activations {

namespace {

// Hugging Face eager modules under plain PyTorch (profile hf_module_inventory), read
// from transformers' LlamaRMSNorm, LlamaMLP, NewGELUActivation (GPT-2's "gelu_new")
// and eager attention, with the autocast op lists of the torch.amp docs (pow and
// softmax produce fp32 under autocast). Dense models only.
std::vector<ActivationTensor> hf_inventory(const ModelConfig& m, const Plan& p, const FrameworkProfile& prof,
                                           const ActivationDims& d) {
    const std::int64_t tokens = d.seq * d.micro_batch;
    const std::int64_t sp_div = d.sp ? d.tp : 1;
    const bool amp = runs_amp(prof, p);
    const std::int64_t wide = amp ? 4 : d.activation_bytes;  // output of an autocast-to-fp32 op
    std::vector<ActivationTensor> v;
    auto tp_item = [&](std::string_view n, std::int64_t bytes, bool core = false) {
        v.push_back({n, bytes / d.tp, core});
    };
    auto sp_item = [&](std::string_view n, std::int64_t bytes) { v.push_back({n, bytes / sp_div, false}); };
    auto norm_then_gemm = [&](bool attention) {
        if (m.norm == NormKind::rmsnorm) {
            // x.to(float32) is saved by pow (it is the fp32 residual itself under AMP), and
            // `weight * x.to(input_dtype)` saves the normalized tensor at the residual dtype.
            sp_item(attention ? "attention norm input (fp32)" : "MLP norm input (fp32)", tokens * d.hidden * 4);
            sp_item(attention ? "attention norm normalized" : "MLP norm normalized",
                    tokens * d.hidden * d.residual_bytes);
            if (prof.norm_row_stats) sp_item(attention ? "attention norm rsqrt" : "MLP norm rsqrt", tokens * 4);
        } else {
            sp_item(attention ? "attention norm input" : "MLP norm input", tokens * d.hidden * d.residual_bytes);
            if (prof.norm_row_stats) sp_item(attention ? "attention norm mean/rstd" : "MLP norm mean/rstd", tokens * 8);
        }
        sp_item(attention ? "QKV GEMM input (norm output)" : "MLP GEMM input (norm output)",
                tokens * d.hidden * d.gemm_input_bytes);
    };
    norm_then_gemm(true);
    if (m.qk_norm) {
        // Qwen3RMSNorm on the q_proj / k_proj outputs (activation dtype), op by op as above: pow
        // saves the fp32 copy, the weight product the normalized tensor cast back to that dtype.
        tp_item("Q norm input (fp32)", tokens * d.q_width * 4);
        tp_item("Q norm normalized", tokens * d.q_width * d.activation_bytes);
        tp_item("K norm input (fp32)", tokens * d.kv_width * 4);
        tp_item("K norm normalized", tokens * d.kv_width * d.activation_bytes);
        if (prof.norm_row_stats) tp_item("Q/K norm rsqrt", tokens * (m.heads + m.kv_heads) * 4);
    }
    const bool eager = p.attention == AttentionKind::eager;
    tp_item("Q (after RoPE)", tokens * d.q_width * d.activation_bytes);
    // Eager attention repeats K/V to every query head (repeat_kv) before the matmuls that save them.
    tp_item("K (after RoPE)", tokens * (eager ? d.q_width : d.kv_width) * d.activation_bytes);
    // Phi-3's V is a view of the qkv_proj output (Phi3Attention slices it): the attention that saves V
    // keeps that whole tensor, unless the K/V heads are repeated into a copy first (GQA under eager
    // attention, or under fp32 SDPA as validation/pytorch/train.py runs it).
    const bool repeats_kv = d.q_width != d.kv_width && (eager || p.precision == Precision::fp32);
    if (m.fused_qkv && m.position == PositionKind::rope && !repeats_kv)
        tp_item("QKV projection output (V is a view of it)", tokens * (d.q_width + 2 * d.kv_width) * d.activation_bytes);
    else
        tp_item("V", tokens * (eager ? d.q_width : d.kv_width) * d.activation_bytes);
    const std::int64_t scores = d.heads * d.seq * d.seq * d.micro_batch;
    if (eager) {
        // Llama: softmax(..., dtype=float32); GPT-2: softmax under autocast (fp32) or in
        // the model dtype; then .to(dtype) feeds the P*V matmul, a second tensor when it casts.
        const std::int64_t soft = m.norm == NormKind::rmsnorm ? 4 : wide;
        tp_item("softmax output", scores * soft, true);
        if (soft != d.activation_bytes)
            tp_item("softmax output cast (P*V matmul input)", scores * d.activation_bytes, true);
    } else {
        // SDPA flash saves q, k, v, its output and the fp32 log-sum-exp; its output is the
        // o_proj input (the transpose back is a view), so only the log-sum-exp is extra.
        tp_item("softmax log-sum-exp (fp32)", d.heads * tokens * 4, true);
    }
    tp_item("attention output (out-proj GEMM input)", tokens * d.q_width * d.gemm_input_bytes);
    norm_then_gemm(false);
    if (m.mlp == MlpKind::swiglu) {
        tp_item("gate projection output", tokens * d.ffn_hidden * d.activation_bytes);
        tp_item("up projection output", tokens * d.ffn_hidden * d.activation_bytes);
        tp_item("silu(gate) (saved by the product)", tokens * d.ffn_hidden * d.activation_bytes);
        tp_item("down GEMM input (silu(gate)*up)", tokens * d.ffn_hidden * d.gemm_input_bytes);
    } else {
        // 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3))) op by op: x, 0.5*x, tanh out, 1+tanh.
        tp_item("GeLU input (fc1 output)", tokens * d.ffn_hidden * d.activation_bytes);
        tp_item("0.5*x", tokens * d.ffn_hidden * d.activation_bytes);
        tp_item("tanh output", tokens * d.ffn_hidden * wide);
        tp_item("1+tanh", tokens * d.ffn_hidden * wide);
        tp_item("fc2 GEMM input (GeLU output)", tokens * d.ffn_hidden * d.gemm_input_bytes);
    }
    return v;
}

}  // namespace

// Profile addition: a mixed recipe run under torch.autocast with fp32 parameters.
bool runs_amp(const FrameworkProfile& prof, const Plan& p) {
    // Without FSDP torchtitan runs autocast only for dp alone (with tp or pp it turns mixed precision
    // off, and its profile refuses the mixed recipes there).
    const bool without_fsdp = prof.amp_without_fsdp && p.zero == zero_none && p.cp <= 1 && p.tp == 1 && p.pp == 1;
    return (prof.amp_fp32_parameters || without_fsdp) &&
           (p.precision == Precision::bf16_mixed || p.precision == Precision::bf16_mixed_fp32_grads ||
            p.precision == Precision::fp16_mixed);
}

ActivationDims activation_dims(const ModelConfig& m, const Plan& p, const FrameworkProfile& prof) {
    const PrecisionBytes pb = precision_bytes(p.precision);
    return {p.seq, p.mbs, m.hidden, m.q_width(), m.kv_width(), m.ffn_hidden, m.heads, p.tp, p.sp, pb.activation,
            pb.gemm_input, runs_amp(prof, p) ? 4 : pb.activation};
}

// Profile (runtime/src/program_moe.cpp): the runtime's MoE MLP keeps its norm output (the rank's rows),
// each token's k gate weights (fp32) and the i64 routing table (reference_moe.hpp: slot and expert
// per pair, pair per slot, E + 1 offsets) in place of the router's probabilities, the dispatched
// tokens and the experts' outputs of all the micro-batch's tokens (every tensor-parallel rank routes
// them all), and its slice of the experts' gate, up and SwiGLU outputs; all 16-bit, under fp8-mixed too.
// Gate weights left unrenormalised (OLMoE's) keep the router logits too, whose softmax over all E the
// routing's backward reads (program_moe.cpp). Under expert parallelism the routing covers the ep
// block's tokens and the expert rows are the rank's experts' capacity (runtime_moe_rows).
static void add_runtime_moe_mlp(std::vector<ActivationTensor>& v, const ModelConfig& m, const Plan& p,
                                const ActivationDims& d) {
    const std::int64_t tokens = d.seq * d.micro_batch, a = d.activation_bytes;
    const RuntimeMoeRows r = runtime_moe_rows(m, p, tokens);
    const std::int64_t pairs = r.routed_tokens * m.experts_per_token, S = r.slots;
    v.push_back({"MLP norm output (router and dispatch input)", tokens * d.hidden * a / (d.sp ? d.tp : 1), false});
    v.push_back({"gate weights (fp32)", pairs * 4, false});
    v.push_back({"routing table (i64)", (3 * pairs + m.experts + 1) * 8, false});
    if (!m.moe_renormalize) v.push_back({"router logits (softmax over all experts)", r.routed_tokens * m.experts * a, false});
    v.push_back({"expert rows: dispatched tokens", S * d.hidden * a, false});
    v.push_back({"expert rows: gate projection output", S * d.ffn_hidden * a / d.tp, false});
    v.push_back({"expert rows: up projection output", S * d.ffn_hidden * a / d.tp, false});
    v.push_back({"expert rows: SwiGLU output (down GEMM input)", S * d.ffn_hidden * a / d.tp, false});
    v.push_back({"expert rows: expert outputs (for the weighted combine)", S * d.hidden * a, false});
}

// Q/k RMSNorms before RoPE (Megatron-Core attention.py q_layernorm / k_layernorm, Transformer Engine's
// RMSNorm): the backward reads their inputs, the q and k projections (split by TP), and with row
// statistics an fp32 rstd per row: of each head and token, or of each token when the norm spans the
// whole projection (OLMo's, whose every rank keeps its tokens' two, as the sum runs over the ranks).
static void add_qk_norm_inputs(std::vector<ActivationTensor>& v, const ModelConfig& m, const FrameworkProfile& prof,
                               const ActivationDims& d) {
    const std::int64_t tokens = d.seq * d.micro_batch;
    v.push_back({"Q norm input (q projection)", tokens * d.q_width * d.activation_bytes / d.tp, false});
    v.push_back({"K norm input (k projection)", tokens * d.kv_width * d.activation_bytes / d.tp, false});
    if (!prof.norm_row_stats) return;
    if (m.qk_norm_whole)
        v.push_back({"Q/K norm statistics (whole projection)", tokens * 2 * 4, false});
    else
        v.push_back({"Q/K norm statistics", tokens * (m.heads + m.kv_heads) * 4 / d.tp, false});
}

// Gemma 3's and OLMo's norms on the attention output and the MLP output, before each residual add
// (Megatron-Core and Transformer Engine RMSNorm alike): each keeps its input, the sublayer's output (h
// per token, split by SP as the residual stream is), and with row statistics the fp32 rstd of each token.
static void add_post_norm_inputs(std::vector<ActivationTensor>& v, const FrameworkProfile& prof,
                                     const ActivationDims& d) {
    const std::int64_t tokens = d.seq * d.micro_batch, sp_div = d.sp ? d.tp : 1;
    v.push_back({"post-attention norm input (o_proj output)", tokens * d.hidden * d.activation_bytes / sp_div, false});
    v.push_back({"post-MLP norm input (down output)", tokens * d.hidden * d.activation_bytes / sp_div, false});
    if (prof.norm_row_stats) v.push_back({"post-sublayer norm statistics", 2 * tokens * 4 / sp_div, false});
}

// The norms beyond the two pre-norms: q/k norms (Qwen3, Gemma 3, OLMo), post-sublayer norms (Gemma 3, OLMo).
static void add_extra_norm_inputs(std::vector<ActivationTensor>& v, const ModelConfig& m, const FrameworkProfile& prof,
                                  const ActivationDims& d) {
    if (m.qk_norm) add_qk_norm_inputs(v, m, prof, d);
    if (m.post_norms) add_post_norm_inputs(v, prof, d);
}

// A sublayer's input as its norm and first GEMMs keep it. Pre-norm: the norm's input (with row
// statistics also its fp32 rstd, or LayerNorm's mean and rstd) and its output, the GEMMs' input. Without
// pre-norms (OLMo) the GEMMs read the residual stream itself, kept as their input alone (a residual
// add's backward reads nothing). `gemm_input` false: the runtime's MoE MLP keeps that input itself.
static void add_sublayer_input(std::vector<ActivationTensor>& v, const ModelConfig& m, const Plan& p,
                               const FrameworkProfile& prof, const ActivationDims& d, bool attention, bool gemm_input) {
    const std::int64_t tokens = d.seq * d.micro_batch, sp_div = d.sp ? d.tp : 1;
    const std::int64_t norm_stats = m.norm == NormKind::layernorm ? 8 : 4;  // fp32 mean+rstd / rstd per row
    if (m.pre_norms) {
        v.push_back({attention ? "attention norm input" : "MLP norm input",
                     tokens * d.hidden * d.activation_bytes / sp_div, false});
        if (prof.norm_row_stats)
            v.push_back({attention ? "attention norm statistics" : "MLP norm statistics", tokens * norm_stats / sp_div,
                         false});
    }
    if (!gemm_input) return;
    // Profile: the runtime's fp8 keeps the transposed fp8 copy of the gathered norm output (all the
    // rows) for the column-parallel weight gradients, not the rank's rows (program_layer.cpp).
    const bool runtime_fp8 = prof.fp8_runtime_recipe && p.precision == Precision::fp8_mixed;
    const std::string_view name =
        attention ? (m.pre_norms ? "QKV GEMM input (norm output)" : "QKV GEMM input (layer input)")
                  : (m.pre_norms ? "MLP GEMM input (norm output)" : "MLP GEMM input (residual stream)");
    v.push_back({name, tokens * d.hidden * d.gemm_input_bytes / (runtime_fp8 ? 1 : sp_div), false});
    // Profile (runtime/src/program_post_norm.cpp): under fp8 the residual stream the GEMM read stays
    // beside its fp8 copy (the pre-norm layer keeps it too, as its norm's input).
    if (runtime_fp8 && !m.pre_norms)
        v.push_back({attention ? "layer input (16-bit, beside its fp8 copy)" : "residual stream after attention (16-bit, "
                                                                              "beside its fp8 copy)",
                     tokens * d.hidden * d.activation_bytes, false});
}

// Full per-layer saved set, before recompute filtering. Item sizes follow
// Korthikanti et al. 2022, sec. 4.1 (eq. 1), generalised to GQA, SwiGLU, MoE and
// flash attention; `tp_div` tensors are split by TP (eq. 2), the rest only by SP (eq. 3).
std::vector<ActivationTensor> full_inventory(const ModelConfig& m, const Plan& p, const FrameworkProfile& prof) {
    const ActivationDims d = activation_dims(m, p, prof);
    if (prof.hf_module_inventory && !m.is_moe()) return hf_inventory(m, p, prof, d);  // profile addition
    const std::int64_t tokens = d.seq * d.micro_batch;
    const std::int64_t sp_div = d.sp ? d.tp : 1;
    const bool drop = p.dropout > 0.0;
    std::vector<ActivationTensor> v;
    v.reserve(20);
    auto tp_item = [&](std::string_view n, std::int64_t bytes, bool core = false) {
        v.push_back({n, bytes / d.tp, core});
    };
    auto sp_item = [&](std::string_view n, std::int64_t bytes) { v.push_back({n, bytes / sp_div, false}); };
    const bool runtime_fp8 = prof.fp8_runtime_recipe && p.precision == Precision::fp8_mixed;
    add_sublayer_input(v, m, p, prof, d, true, true);
    add_extra_norm_inputs(v, m, prof, d);
    tp_item("Q (after RoPE)", tokens * d.q_width * d.activation_bytes);
    tp_item("K (after RoPE)", tokens * d.kv_width * d.activation_bytes);
    tp_item("V", tokens * d.kv_width * d.activation_bytes);
    const std::int64_t scores = d.heads * d.seq * d.seq * d.micro_batch;  // a*s^2*b elements
    if (p.attention == AttentionKind::eager) {
        tp_item("softmax output", scores * d.activation_bytes, true);
        if (drop) {
            tp_item("attention dropout mask", scores * 1, true);
            tp_item("attention dropout output", scores * d.activation_bytes, true);
        }
    } else {
        // FlashAttention (Dao et al. 2022, alg. 2) keeps only the fp32 log-sum-exp per row;
        // dropout masks are regenerated from the RNG state.
        tp_item("softmax log-sum-exp (fp32)", d.heads * tokens * 4, true);
    }
    tp_item("attention output (out-proj GEMM input)", tokens * d.q_width * d.gemm_input_bytes);
    // Profile: under fp8 the out-proj input above is its fp8 copy; flash's backward reads the bf16
    // output (the runtime's, and Transformer Engine's fused attention under Megatron-LM).
    const bool te_fp8 = p.precision == Precision::fp8_mixed && prof.fp8_attention_output_16bit_kept;
    if ((runtime_fp8 || te_fp8) && p.attention == AttentionKind::flash)
        tp_item("attention output (bf16, flash backward input)", tokens * d.q_width * d.activation_bytes);
    if (drop) sp_item("attention residual dropout mask", tokens * d.hidden * 1);
    const bool runtime_moe = m.is_moe() && prof.runtime_moe;
    add_sublayer_input(v, m, p, prof, d, false, !runtime_moe);
    if (runtime_moe) add_runtime_moe_mlp(v, m, p, d);
    // Tokens through each expert: a dense MLP sees every token once; top-k routing k times.
    const std::int64_t routed = tokens * (m.is_moe() ? m.experts_per_token : 1);
    if (m.is_moe() && !runtime_moe) {
        sp_item("router probabilities (fp32)", tokens * m.experts * 4);
        sp_item("dispatched tokens (expert GEMM input)", routed * d.hidden * d.gemm_input_bytes);
    }
    if (runtime_moe) {
        // add_runtime_moe_mlp above holds the experts' saved tensors.
    } else if (m.mlp == MlpKind::swiglu) {
        // SwiGLU (Shazeer 2020): silu(gate) * up; backward needs gate and up, the
        // product feeds the down projection.
        tp_item("gate projection output", routed * d.ffn_hidden * d.activation_bytes);
        tp_item("up projection output", routed * d.ffn_hidden * d.activation_bytes);
        tp_item("down GEMM input (silu(gate)*up)", routed * d.ffn_hidden * d.gemm_input_bytes);
    } else {
        tp_item("GeLU input (fc1 output)", routed * d.ffn_hidden * d.activation_bytes);
        tp_item("fc2 GEMM input (GeLU output)", routed * d.ffn_hidden * d.gemm_input_bytes);
    }
    // Profile: Megatron-LM weights the expert outputs inside the activation and keeps none for the combine.
    if (m.is_moe() && !runtime_moe && !prof.moe_probs_in_activation)
        sp_item("expert outputs (for weighted combine)", routed * d.hidden * d.activation_bytes);
    if (drop) sp_item("MLP residual dropout mask", tokens * d.hidden * 1);
    // Profile: each kept fp8 input carries its own scales (program_fp8.cpp): four GEMMs', two with experts.
    if (runtime_fp8)
        v.push_back({runtime_moe ? "fp8 input scales (2 GEMMs, amax and dequantization factor)"
                                 : "fp8 input scales (4 GEMMs, amax and dequantization factor)",
                     (runtime_moe ? 2 : 4) * kRuntimeFp8KeptScaleBytes, false});
    adjust_layer_inventory(m, p, v);  // LoRA / QLoRA, MoE capacity (extensions.hpp)
    return v;
}

std::int64_t sum_bytes(const std::vector<ActivationTensor>& v) {
    std::int64_t total = 0;
    for (const auto& t : v) total += t.bytes;
    return total;
}

// torchtitan's op policy counts aten.mm calls per layer forward and saves the odd-numbered ones.
// Its Llama block (torchtitan/models/llama/model.py) runs wq, wk, wv, wo, then w1, w3, w2: saved
// are wq (1st), wv (3rd), w1 (5th) and w2 (7th); the flash SDPA outputs (attention output and
// fp32 log-sum-exp) and, with sequence parallelism, the two reduce-scatter outputs (after wo and
// w2, s*b*h/tp each) are in its save list; the checkpoint keeps the layer input. A row-parallel
// w2 under tp > 1 returns the full-width partial sum (s*b*h on every rank) before its
// reduce-scatter. Float8 linears dispatch aten.mm on their float8 tensors and are counted alike.
bool op_sac_applies(const ModelConfig& m) { return m.mlp == MlpKind::swiglu && !m.is_moe(); }

std::vector<ActivationTensor> op_sac_inventory(const ModelConfig& m, const Plan& p, const ActivationDims& d) {
    if (!op_sac_applies(m)) return {};
    const std::int64_t tokens = d.seq * d.micro_batch;
    const int a = d.activation_bytes;
    std::vector<ActivationTensor> v;
    v.push_back({"layer input (checkpoint)", layer_input_bytes(d), false});
    v.push_back({"wq output (1st mm)", tokens * d.q_width * a / d.tp, false});
    v.push_back({"wv output (3rd mm)", tokens * d.kv_width * a / d.tp, false});
    v.push_back({"SDPA output", tokens * d.q_width * a / d.tp, false});
    if (p.attention == AttentionKind::flash) v.push_back({"SDPA log-sum-exp (fp32)", d.heads * tokens * 4 / d.tp, false});
    v.push_back({"w1 output (5th mm)", tokens * d.ffn_hidden * a / d.tp, false});
    v.push_back({"w2 output (7th mm)", tokens * d.hidden * a, false});  // full width on every TP rank
    if (d.sp && d.tp > 1) v.push_back({"reduce-scatter outputs (wo, w2)", 2 * tokens * d.hidden * a / d.tp, false});
    return v;
}

// Layer input kept under full recompute (Korthikanti et al. 2022, sec. 4.3, eq. 5).
std::int64_t layer_input_bytes(const ActivationDims& d) {
    return d.seq * d.micro_batch * d.hidden * d.residual_bytes / (d.sp ? d.tp : 1);
}

// Within-layer working memory. Forward: eager attention holds the raw s^2 scores
// while the softmax output is written. Backward: the residual-stream gradient in
// and out, plus the largest op's input gradients (eager: dP and dS in the softmax
// backward, then dS beside d(q|k|v) as the scores' gradient is multiplied out, the
// wider at sequences under about 3 x head_dim; MLP: the gradients of its widest
// intermediates).
std::int64_t forward_transient(const ModelConfig&, const Plan& p, const ActivationDims& d) {
    if (p.attention != AttentionKind::eager) return 0;
    return d.heads * d.seq * d.seq * d.micro_batch * d.activation_bytes / d.tp;
}
std::int64_t backward_transient(const ModelConfig& m, const Plan& p, const ActivationDims& d) {
    const std::int64_t residual = d.seq * d.micro_batch * d.hidden * d.residual_bytes / (d.sp ? d.tp : 1);
    const std::int64_t routed = d.seq * d.micro_batch * (m.is_moe() ? m.experts_per_token : 1);
    const std::int64_t mlp = (m.mlp == MlpKind::swiglu ? 2 : 1) * routed * d.ffn_hidden * d.activation_bytes / d.tp;
    if (p.attention != AttentionKind::eager) return 2 * residual + mlp;
    // Eager attention's backward beside the residual gradient: d(attn out), this rank's heads only
    // (not a second residual-wide gradient), and the score gradients.
    const std::int64_t tokens = d.seq * d.micro_batch;
    const std::int64_t scores = d.heads * d.seq * tokens * d.activation_bytes / d.tp;
    const std::int64_t dattn = tokens * d.q_width * d.activation_bytes / d.tp;
    const std::int64_t dqkv = tokens * (d.q_width + 2 * d.kv_width) * d.activation_bytes / d.tp;
    return residual + std::max(residual + mlp, dattn + std::max(2 * scores, scores + dqkv));
}

// What a layer keeps for backward out of its full saved set under the plan's recompute.
std::vector<ActivationTensor> kept_for_backward(std::vector<ActivationTensor> full, const ModelConfig& model,
                                                const Plan& plan, const FrameworkProfile& profile) {
    switch (plan.recompute) {
        case Recompute::none: return full;
        case Recompute::selective:
            if (profile.selective_op_sac && op_sac_applies(model))
                return op_sac_inventory(model, plan, activation_dims(model, plan, profile));
            std::erase_if(full, [](const ActivationTensor& t) { return t.attention_core; });
            return full;
        case Recompute::full: return {{"layer input", layer_input_bytes(activation_dims(model, plan, profile)), false}};
    }
    return full;
}


}  // namespace preflight::activations
