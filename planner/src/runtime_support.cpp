// What the Preflight runtime executes (runtime/src/program*.cpp), as planner-side checks. The
// runtime's check_supported (so `preflight run`) and the preflight-runtime profile's hooks (so
// `memory`, `plan` and the explorer under --framework preflight-runtime) call the same ones: the
// profile never recommends a plan `run` refuses.
#include <algorithm>
#include <string>
#include <vector>

#include "preflight/planner/error.hpp"
#include "preflight/planner/extensions.hpp"
#include "preflight/planner/limits.hpp"
#include "preflight/planner/profiles.hpp"

namespace preflight {

namespace {

[[noreturn]] void not_run(const char* flag, const std::string& why) {
    throw InputError(flag, why + " (the Preflight runtime executes full pre-training of dense models and of "
                                 "Mixtral-style mixtures of experts, data-, tensor-, pipeline-, context- and expert-parallel; "
                                 "`preflight memory` or `plan` under another --framework models this plan)");
}

// The MLP nonlinearities the kernels compute: SiLU in the SwiGLU (swiglu.cu); GeLU in GPT-2's MLP
// with the tanh approximation (gelu.cu), which stands for the exact erf form too (they differ by
// under 1e-3, Hendrycks & Gimpel 2016, sec. 2). Any other would train another model, silently.
void check_runtime_activation(const ModelConfig& m) {
    const std::string& a = m.activation;
    if (a.empty()) return;  // not named: the family's own
    if (m.mlp == MlpKind::swiglu && a != "silu" && a != "swish")
        throw InputError("hidden_act", "'" + a + "' is not implemented by the runtime (its SwiGLU computes silu)");
    if (m.mlp == MlpKind::gelu && a != "gelu_new" && a != "gelu_pytorch_tanh" && a != "gelu" && a != "gelu_fast")
        throw InputError("activation_function", "'" + a + "' is not implemented by the runtime (its GeLU MLP computes "
                                                      "gelu_new, the tanh approximation)");
}

}  // namespace

void check_runtime_fp8(const ModelConfig& m, const Plan& p) {
    if (p.precision != Precision::fp8_mixed) return;
    const std::string why = " (the Preflight runtime's fp8-mixed recipe)";
    if (p.fp8_scaling != Fp8Scaling::tensorwise)
        throw InputError("--fp8-scaling", "rowwise scaling is not implemented by the runtime; use tensorwise" + why);
    // A tensor-parallel rank's GEMMs take its slice of the widths (tp divides them: validate_plan), a
    // context-parallel rank's its seq / cp tokens of each sequence.
    const std::int64_t tp = std::max<std::int64_t>(p.tp, 1), cp = std::max<std::int64_t>(p.cp, 1);
    const std::string per_rank = tp > 1 ? " / --tp" : "";
    const std::string rows = cp > 1 ? "--seq / --cp x --mbs" : "--seq x --mbs";
    std::vector<std::pair<std::string, std::int64_t>> dims = {{"hidden_size", m.hidden},
                                                              {"heads x head_dim" + per_rank, m.q_width() / tp},
                                                              {"key/value heads x head_dim" + per_rank, m.kv_width() / tp},
                                                              {rows, p.seq / cp * p.mbs}};
    // A mixture of experts' MLP runs 16-bit (program_fp8.cpp): its width takes no fp8 GEMM.
    if (!m.is_moe()) dims.emplace_back("intermediate_size" + per_rank, m.ffn_hidden / tp);
    for (const auto& [what, v] : dims)
        if (v % 16 != 0)
            throw InputError(what == rows ? "--seq" : "--model",
                             what + " = " + std::to_string(v) + " is not a multiple of 16, as cuBLASLt's fp8 GEMMs need" +
                                 why);
}

void check_runtime_pipeline(const ModelConfig& m, const Plan& p) {
    if (p.pp <= 1) return;
    const std::string why = " (the Preflight runtime's pipeline runs 1F1B, plain or interleaved)";
    if (p.pp_schedule == PpSchedule::gpipe)
        throw InputError("--pp-schedule", "GPipe is not implemented by the runtime; use 1f1b or interleaved");
    // A tied word embedding lives on the first and the last stage; their gradients are summed once
    // the micro-batches are done (Megatron-LM's finalize_model_grads), so under ZeRO-2/3 the unit
    // holding it keeps its 16-bit gradients all step (program_comm.cpp open_tied_unit_grads): a
    // recipe that accumulates gradients in fp32 would lose that there.
    if (p.zero >= zero_gradients && m.tied_embeddings && precision_bytes(p.precision).gradient_accum > 0)
        throw InputError("--zero", "ZeRO-2/3 with pipeline parallelism and a tied word embedding under " +
                                       std::string(to_string(p.precision)) +
                                       " is not implemented by the runtime (the tied unit would accumulate its "
                                       "gradients over the micro-batches in 16 bits, not fp32); use --zero 0 or 1, "
                                       "or --precision bf16-mixed" + why);
}

void check_runtime_model(const ModelConfig& m) {
    if (m.attention_sinks)
        not_run("--model", "attention sinks (" + std::string(to_string(m.family)) +
                               "'s learned logit per head in the softmax) are not implemented by the runtime");
    // Mixture of experts: Mixtral's sparse MLP (SwiGLU experts without biases, top-k routing).
    if (m.is_moe() && (m.mlp != MlpKind::swiglu || m.mlp_bias))
        not_run("--model", "mixture-of-experts models are implemented by the runtime with SwiGLU experts without "
                           "biases (Mixtral's) only");
    if (m.experts > limits::kMaxRuntimeExperts)
        not_run("--model", std::to_string(m.experts) + " experts a layer: the runtime routes at most " +
                               std::to_string(limits::kMaxRuntimeExperts) + " (limits::kMaxRuntimeExperts)");
    // q/k norms run per head (Qwen3's) and over the whole projections (OLMoE's; program_layer.cpp
    // emit_head_norm_fwd, QkNormGroups); the gate weights renormalised over the chosen experts (Mixtral's)
    // or not (OLMoE's; moe.cu, reference_moe.hpp).
    // The layer normalises the sublayers' inputs (pre-norms: every family but OLMo) or, OLMo 2 and 3's,
    // their outputs before each residual add (post-norms: program_post_norm.cpp); not both (Gemma 3's).
    if (m.pre_norms && m.post_norms)
        not_run("--model", "norms on both the inputs and the outputs of the attention and the MLP (" +
                               std::string(to_string(m.family)) + "'s four norms a layer) are not implemented by the "
                               "runtime (it runs either kind alone)");
    if (!m.pre_norms && !m.post_norms)
        not_run("--model", std::string(to_string(m.family)) + "'s layer has no norms on its sublayers");
    if (m.post_norms && m.is_moe())
        not_run("--model", "a mixture of experts with norms on the sublayer outputs is not implemented by the runtime");
    if (m.head_dim % 2 != 0 && m.position == PositionKind::rope) not_run("--model", "RoPE needs an even head_dim");
    // The RoPE tables (runtime ref::rope_frequencies) know Llama 3's scaling and LongRoPE (Phi-3's
    // per-frequency factors and attention factor), no other: a type scales without a factor too.
    const std::string& scaling = m.rope_scaling.type;
    if (m.position == PositionKind::rope && !scaling.empty() && scaling != "default" && scaling != "llama3" &&
        scaling != "longrope")
        throw InputError("rope_scaling.rope_type",
                         "'" + m.rope_scaling.type + "' is not implemented by the runtime (llama3 and longrope are)");
    // RoPE over the first rope_dims() of each head (partial_rotary_factor: Phi-4-mini's 0.75) rotates
    // pairs (i, i + rope_dims / 2) there and leaves the rest, as transformers' Phi3 apply_rotary_pos_emb.
    if (m.position == PositionKind::rope && (m.rope_dims() < 2 || m.rope_dims() % 2 != 0))
        throw InputError("partial_rotary_factor", "rotates " + std::to_string(m.rope_dims()) + " of each head's " +
                                                      std::to_string(m.head_dim) + " dimensions; the runtime's RoPE "
                                                      "needs an even number, at least 2");
    if (m.head_dim > 128) not_run("--model", "head_dim above 128 is not supported by the attention kernels");
    if (m.layers > limits::kMaxRuntimeLayers)
        not_run("--model", std::to_string(m.layers) + " layers: the runtime plans its memory for at most " +
                               std::to_string(limits::kMaxRuntimeLayers) + " (limits::kMaxRuntimeLayers; its arena's "
                               "placement grows with the cube of the layers)");
    check_runtime_activation(m);
}

void check_runtime_plan(const ModelConfig& m, const Plan& p) {
    check_runtime_pipeline(m, p);
    if (p.precision == Precision::fp16_mixed)
        not_run("--precision", "fp16-mixed is not implemented by the runtime; use fp32, bf16-mixed, "
                               "bf16-mixed-fp32-grads, bf16 or fp8-mixed");
    check_runtime_fp8(m, p);
    // A sliding window on every layer, or on the layers between every full_attention_period-th
    // (Gemma 3's, gpt-oss's, OLMo 3's), is the runtime's (Dims::window_of: flash_attention.cu, the cuDNN
    // graphs' left bound, the eager softmax); a layer_types list that follows no period is not.
    if (m.full_attention_layers > 0 && m.full_attention_period == 0 && m.attention_window(p.seq) > 0)
        not_run("--seq", std::to_string(p.seq) + " tokens outrun " + m.name + "'s sliding window of " +
                             std::to_string(m.sliding_window) + " keys on " +
                             std::to_string(m.layers - m.full_attention_layers) + " of its " +
                             std::to_string(m.layers) + " layers, and its layer_types list places its full layers "
                             "with no period, which the runtime does not follow; use --seq " +
                             std::to_string(m.sliding_window) + " or less");
    // A norm over the whole q (k) projection needs every head's squares; a tensor-parallel rank holds
    // some heads only, and the runtime sums no statistics across the ranks.
    if (m.qk_norm_whole && p.tp > 1)
        not_run("--tp", "q/k norms over the whole q and k projections (" + std::string(to_string(m.family)) +
                            "'s q_norm and k_norm) under tensor parallelism are not implemented by the runtime (each "
                            "rank holds some heads, and the norm's sum of squares spans them all); use --tp 1");
    // Post-norms run on the residual stream's whole rows and replicated weights: tensor parallelism
    // would all-reduce the sublayer output before its norm, which the runtime's layer does not emit.
    if (m.post_norms && p.tp > 1)
        not_run("--tp", "norms on the sublayer outputs (" + std::string(to_string(m.family)) +
                            "'s post_attention_layernorm and post_feedforward_layernorm) under tensor parallelism are "
                            "not implemented by the runtime; use --tp 1");
    if (p.dropout != 0.0) not_run("--dropout", "must be 0 (dropout is not implemented by the runtime)");
    if (m.is_moe() && p.ep <= 1 && p.moe_capacity_factor != 1.0)
        not_run("--moe-capacity-factor", "without expert parallelism the runtime's experts are dropless (each token's k "
                                         "choices get a slot: rows x k slots whatever the load), so a capacity factor "
                                         "does not describe them; leave it at 1, or give --ep (each expert then takes at "
                                         "most the factor times its balanced share of the block's tokens)");
    // The interleaved schedule (check_runtime_pipeline) and context parallelism (K and V
    // all-gathered, program_cp.cpp; RoPE models: learned positions would need the same map) are
    // the runtime's; the error names the setting that is not.
    Plan runs = p;
    runs.pp_schedule = PpSchedule::one_f_one_b;
    runs.vpp = 1;
    if (p.cp > 1 && m.position != PositionKind::rope)
        not_run("--cp", "context parallelism is implemented by the runtime for RoPE models only (this model has "
                        "learned positions)");
    runs.cp = 1;
    if (m.is_moe()) runs.ep = 1, runs.moe_capacity_factor = 1.0;  // expert parallelism: program_moe.cpp
    if (uses_extended_throughput(runs))
        throw InputError(extended_setting_flag(runs), "the Preflight runtime executes full pre-training plans only (no "
                                                      "LoRA/QLoRA, offload or ep)");
    // Bounded work: the runtime and its dry run walk every micro-batch and layer of a step.
    // A rank walks its stage's layers: the most are the first stage's under the even split (its
    // remainder goes first), a middle stage's under the interleaved embedding and loss slots.
    std::int64_t layers = 0;
    for (std::int64_t s = 0; s < p.pp; ++s) layers = std::max(layers, pipeline_stage_layers(p, m.layers, s));
    // What a step holds at once is reached by max(2, pp) micro-batches: the later ones reuse the
    // buffers of those in flight (1F1B holds at most pp; the first and the reducing last micro-batch
    // differ only without a pipeline), so that many measure the same per-GPU peak. The interleaved
    // schedule's first stage warms up with pp v + pp - 2 chunk micro-batches: 2 pp fill it.
    const std::int64_t same_peak =
        p.pp_schedule == PpSchedule::interleaved ? 2 * p.pp : std::max<std::int64_t>(2, p.pp);
    // The step's ops do not grow with the micro-batches (the runtime's Program::repeat runs one
    // micro-batch, or a period of a pipeline's steady state, again): only the layer-steps walked bound it.
    const std::int64_t max_layer_steps = limits::kMaxRuntimeRepeatedLayerSteps;
    const std::string hint = same_peak < p.grad_acc && same_peak * layers <= max_layer_steps
                                 ? "; --grad-acc " + std::to_string(same_peak) +
                                       " holds the same per-GPU peak (later micro-batches reuse the buffers of those in "
                                       "flight) and runs"
                                 : "";
    if (p.grad_acc * layers > max_layer_steps)
        throw InputError("--grad-acc", std::to_string(p.grad_acc) + (p.grad_acc == 1 ? " micro-batch x " : " micro-batches x ") +
                                           std::to_string(layers) + " layers a stage exceed the limit kMaxRuntimeRepeatedLayerSteps = " +
                                           std::to_string(max_layer_steps) + " of `preflight run`" + hint);
}

}  // namespace preflight
