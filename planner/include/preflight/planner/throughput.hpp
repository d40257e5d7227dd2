// FLOP counts and step-time / MFU / HFU model. Declarations agreed
// between the planner, the CLI's `plan` command and the Qt explorer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "preflight/planner/gpu.hpp"
#include "preflight/planner/memory.hpp"
#include "preflight/planner/model.hpp"
#include "preflight/planner/plan.hpp"

namespace preflight {

// How attention score/value FLOPs are counted: causal (half the s^2 work, what a
// causal kernel executes) or full (PaLM / Megatron convention, the default).
// Only the MFU/HFU numerators depend on it; the step-time model always charges the
// attention kernels for the causal work they execute.
enum class AttentionFlops { full, causal };
std::string_view to_string(AttentionFlops a);
std::optional<AttentionFlops> parse_attention_flops(std::string_view s);

// Forward FLOPs per token, op by op (2 FLOPs per multiply-add; GEMMs and the two
// attention matmuls only: norms, activations, softmax, biases and the embedding
// lookup are memory-bound and not counted, as in PaLM App. B and Narayanan et al. 2021).
struct ForwardFlopsPerToken {
    double qkv = 0;               // 2*h*(q_width + 2*kv_width)            (GQA-aware)
    double attention_scores = 0;  // Q K^T: 2*s*q_width (full) or s*q_width (causal)
    double attention_values = 0;  // P V:   same as the scores
    double attention_out = 0;     // 2*q_width*h
    double mlp = 0;               // top_k * (SwiGLU 6*h*f | GeLU 4*h*f)
    double router = 0;            // MoE router 2*h*experts
    double lm_head = 0;           // 2*h*V (once per token, not per layer)

    double layer() const { return qkv + attention_scores + attention_values + attention_out + mlp + router; }
    double attention_core() const { return attention_scores + attention_values; }
};
// The (query, key) pairs a causal attention kernel scores in one sequence of `seq` tokens: s^2/2,
// less the (s - w)^2/2 pairs beyond a sliding window of w keys (0: no window).
double causal_attention_pairs(std::int64_t seq, std::int64_t window);
// The same for one layer of the model, at the mean over its layers where some attend through the
// window and others to the whole sequence (ModelConfig::full_attention_layers, Gemma 3, gpt-oss).
double mean_causal_pairs(const ModelConfig& m, std::int64_t seq);

ForwardFlopsPerToken forward_flops_per_token(const ModelConfig& model, std::int64_t seq,
                                             AttentionFlops convention = AttentionFlops::full);

struct FlopCounts {
    double model_flops_per_step = 0;     // forward + backward, no recompute (MFU numerator)
    double hardware_flops_per_step = 0;  // + what recompute re-executes (HFU numerator)
    double model_flops_per_token = 0;
    double hardware_flops_per_token = 0;
};

// Whole-step FLOPs over all GPUs for the plan's global batch.
// model = 3 * forward (backward = 2 * forward: input and weight gradients);
// hardware adds one more forward of every layer under full recompute and the
// attention core's forward under selective recompute (Korthikanti et al. 2022, sec. 5).
FlopCounts step_flops(const ModelConfig& model, const Plan& plan, AttentionFlops convention = AttentionFlops::full);

struct ThroughputOptions {
    AttentionFlops attention_flops = AttentionFlops::full;
    // Data-parallel gradient bucket (PyTorch DDP bucket_cap_mb = 25): the last
    // bucket's reduction cannot overlap the backward pass.
    std::int64_t grad_bucket_bytes = 25 * kMiB;
    // Fill Throughput::breakdown (strings; the search turns it off for speed).
    bool breakdown = true;
    // Layers per pipeline stage when a framework splits them its own way (size pp; the
    // first stage holds the embedding, the last the output layer). Empty: the planner's
    // split (extra layers to the first stages).
    std::vector<std::int64_t> stage_layers;
    // >= 0 (and pp > 1, 1F1B): the step of that pipeline stage's own work, as one rank of it run
    // alone does it (`preflight run --emulate-rank`): its layers, its embedding or output layer,
    // its parameters' optimizer step, with the slots, bubble and communication of a stage that
    // paced itself. -1: the job's step, which the slowest stage sets for every rank.
    std::int64_t own_stage = -1;
    // Sequence-parallel TP collectives issued asynchronously beside the GEMMs of the same
    // linear (nanotron tp_linear_async_communication in reduce-scatter mode): only the part of
    // each collective its GEMM does not cover is exposed. Off: every TP collective is exposed.
    bool tp_async_overlap = false;
    // Megatron-Core with TransformerEngine's userbuffers (--tp-comm-overlap; Megatron-Bridge
    // CommOverlapConfig.tp_comm_overlap): with sequence parallelism each all-gather and
    // reduce-scatter runs in chunks pipelined with the GEMM it feeds or follows, forward and
    // backward, so only what that GEMM does not cover is exposed. Takes precedence over
    // tp_async_overlap. Off: Megatron's default, every TP collective exposed.
    bool tp_comm_overlap = false;
    // Interleaved 1F1B with Megatron's overlap_p2p_comm (Megatron-core's default since 0.4, off with
    // --no-overlap-p2p-communication; Megatron-Bridge sets it whenever vpp > 1): a
    // model chunk's sends and receives run beside the next chunk's compute, so only what that
    // compute does not cover is exposed. Applies to the interleaved schedule only.
    bool p2p_overlap = false;
    // Charge the GPU spec's fitted per-micro-batch stall (Efficiency::microbatch_sync_*). It was
    // measured on nanotron's runs on one cluster (its pipeline p2p polls metadata with
    // time.sleep(0.1); the sweep's 64-node jobs stall without a pipeline too), so only the
    // nanotron profile turns it on: other frameworks are not charged that cluster's stall.
    bool cluster_stall = false;
    // Charge the GPU spec's fitted host time per layer and TP rank when the pipeline's stages
    // span nodes (Efficiency::pipeline_span_layer_host_per_tp_s). Read off nanotron's runs on
    // the same cluster, so only the nanotron profile turns it on.
    bool spanning_pipeline_host = false;
    // Selective recompute as torchtitan's op-level policy (FrameworkProfile::selective_op_sac):
    // backward re-runs the unsaved GEMMs (wk, wo, w3: the even-numbered mm calls), the norms,
    // RoPE, SiLU and, with sequence parallelism, the two all-gathers, instead of the attention
    // core (Korthikanti et al.). SwiGLU dense models only; others keep the attention core.
    bool selective_op_sac = false;
    // The attention core runs the GPU's native fused kernels (Efficiency::
    // fused_attention_fraction_of_peak where the spec gives one): Megatron-Core's default
    // TransformerEngine attention (megatron/core/extensions/transformer_engine.py
    // TEDotProductAttention; on Hopper TE picks cuDNN fused attention or FlashAttention-3).
    // Off: FlashAttention-2-class kernels (PyTorch SDPA's flash backend, the flash-attn package).
    // On by default like the default (Megatron-like) profile; FrameworkProfile::fused_attention.
    bool fused_attention = true;
    // fp8-mixed GEMMs run through torchao's Float8Linear with dynamic scaling (Efficiency::
    // fp8_dynamic_gemm_max_fraction_of_peak): torchtitan's float8 converter. Off: Transformer
    // Engine (Megatron-Core, Composer's amp_fp8). FrameworkProfile::fp8_dynamic_scaling.
    bool fp8_dynamic_scaling = false;
    // Flash attention runs on the FP32 units whatever the activation dtype: the Preflight
    // runtime's own kernel (runtime/kernels/flash_attention.cu, fp32 math), which a 16-bit plan
    // runs when cuDNN is missing or refuses the shape (`preflight run --no-cudnn`; the report's
    // measured.attention_backend "kernel"). Charged at the fp32 kernel's figure against the fp32
    // peak (Efficiency::fp32_attention_fraction_of_peak), the same FLOP/s as in the fp32 recipe.
    bool attention_on_fp32_units = false;
    // The Preflight runtime's column-sum kernels (Efficiency::column_sum_row_s): each micro-batch's
    // backward charges runtime_column_sum_rows(...) x column_sum_row_s. Set by the runtime profile.
    bool runtime_column_sums = false;
    // Context parallelism all-gather based, as the Preflight runtime runs it (runtime/src/program_cp.cpp):
    // each layer gathers the whole sequence's K and V in the forward, again in a recomputed forward
    // and in the backward, and reduce-scatters dK and dV, each waited for at once (nothing hidden
    // behind attention, as ring attention hides its hops). Set by the runtime profile.
    bool cp_all_gather_kv = false;
    // The Preflight runtime's fp8-mixed under ZeRO-3 casts each gathered layer's GEMM weights (an
    // amax pass and a cast into W and W^T) after each gather, in forward and in backward, where
    // ZeRO 0-2 cast them once a step. Set by the runtime profile.
    bool fp8_casts_gathered_weights = false;
    // Under fp8-mixed a mixture of experts' router and experts run 16-bit GEMMs (the Preflight
    // runtime's: runtime/src/program_fp8.cpp), at the dense bf16 rate, with no casts. Set by the
    // runtime profile.
    bool moe_experts_16bit = false;
    // Expert parallelism all-gather based (the Preflight runtime's, runtime/src/program_moe.cpp): the
    // ep block's tokens gathered and the partial combine reduce-scattered, in place of all-to-alls.
    // Set by the runtime profile.
    bool ep_all_gather_tokens = false;
    // Hugging Face transformers' eager modules under plain PyTorch (the pytorch profile): each
    // layer's elementwise ops run one kernel each, with autocast's casts and autograd's backward
    // kernels (planner/src/eager_kernels.cpp), in place of the fused passes the other frameworks
    // run; and the host dispatches every kernel, eager_kernel_host_s each, in place of
    // Efficiency::layer_launch_overhead_s. Dense models on one GPU (tp 1) only.
    bool hf_eager_kernels = false;
    bool hf_autocast = false;          // torch.autocast(bfloat16) over fp32 parameters
    double eager_kernel_host_s = 0.0;  // host time to dispatch one kernel (FrameworkProfile, fitted)
    // The whole model runs under torch.compile (a PyTorch run's measured.compiled): Inductor fuses the
    // elementwise ops, so the pytorch profile leaves hf_eager_kernels off and keeps the fused passes.
    bool model_compiled = false;
    // The cross-entropy runs under torch.compile (MemoryOptions::compiled_loss, --compiled-loss): one
    // fused pass over the logits each way, not Hugging Face's eager loss kernels (hf_eager_kernels).
    bool compiled_loss = false;
};

// Rows the Preflight runtime's column-sum kernels walk in one micro-batch's backward
// (runtime/src/program_layer.cpp): per layer, the two norms' weight gradients over the rank's
// rows (s*b, or s*b/tp under sequence parallelism) and one bias gradient over s*b rows for each
// linear with a bias (q/k/v, the attention output, and both MLP linears when the model has
// them); on the last stage, the final norm's.
struct RuntimeColumnSumRows {
    std::int64_t per_layer = 0;
    std::int64_t final_norm = 0;
};
RuntimeColumnSumRows runtime_column_sum_rows(const ModelConfig& model, const Plan& plan);

// One named slice of the step time (for display: compute, exposed communication, bubble, ...).
struct TimeSlice {
    std::string name;
    double seconds = 0;
};

// The host's dispatch of every kernel, where it is counted (ThroughputOptions::hf_eager_kernels):
// each layer costs max(0, kernels_per_layer x per_kernel_s - layer_device_s), `layer_slots` times.
struct HostDispatch {
    std::int64_t kernels_per_layer = 0;  // forward, recomputed forward and backward launches of one layer
    double per_kernel_s = 0;
    double layer_device_s = 0;           // the GPU's work for one layer and micro-batch
    std::int64_t layer_slots = 0;        // layers of the busiest stage x micro-batches
};

struct Throughput {
    double step_time_s = 0;
    double tokens_per_s = 0;          // all GPUs
    double tokens_per_s_per_gpu = 0;
    double mfu = 0;                   // model FLOPs / (step time * GPUs * dense peak)
    double hfu = 0;                   // hardware FLOPs / (step time * GPUs * dense peak)
    double model_flops_per_step = 0;
    double hardware_flops_per_step = 0;
    double peak_flops_per_s = 0;      // dense peak of the compute precision used
    std::int64_t gpus = 0;
    std::int64_t tokens_per_step = 0;
    // Components of the step time (they sum to step_time_s).
    double compute_s = 0;             // forward + backward (+ recompute) of all micro-batches, steady state
    double column_sums_s = 0;         // of which the runtime's column-sum kernels (ThroughputOptions::runtime_column_sums)
    double tp_communication_s = 0;    // tensor-parallel collectives (not overlapped)
    double pp_communication_s = 0;    // pipeline point-to-point sends
    double pipeline_bubble_s = 0;     // 1F1B bubble (p-1) stage-slots
    double launch_overhead_s = 0;     // host dispatch per layer and micro-batch (fitted)
    double microbatch_sync_s = 0;     // per-micro-batch synchronisation growing with nodes (fitted)
    double dp_communication_s = 0;    // exposed data-parallel / ZeRO communication
    double optimizer_s = 0;           // optimizer step (memory-bound)
    double overhead_s = 0;            // fixed per-step overhead
    // Extensions (extensions.hpp); 0 for plans without them.
    double cp_ep_communication_s = 0;  // exposed ring-attention K/V exchange + expert all-to-all
    double ep_communication_s = 0;     // its expert-parallel part (the token exchange)
    double offload_s = 0;              // CPU optimizer step + exposed PCIe transfers
    double pcie_bytes_per_step = 0;    // host<->device bytes per GPU per step (offload)
    std::optional<HostDispatch> host_dispatch;  // where kernels are counted; else the spec's per-layer figure
    std::vector<TimeSlice> breakdown;
};

// GEMM and attention efficiencies of a precision's kernels: the fp32 recipe's where the spec
// gives them (Efficiency::fp32_*), else the 16-bit figures; fp8-mixed GEMMs at the figure of
// the recipe's kernels (Transformer Engine, torchao dynamic tensorwise or rowwise: Efficiency).
struct KernelEfficiency {
    double gemm_max_fraction_of_peak = 0;  // 16-bit GEMMs (fp32's under the fp32 recipe)
    double gemm_half_efficiency_dim = 0;
    double attention_fraction_of_peak = 0;
    double fp8_gemm_max_fraction_of_peak = 0;  // the fp8-mixed recipe's GEMMs against the fp8 peak; 0 otherwise
};
// Which fp8 GEMM path runs: the plan's scaling and the framework's casts (ThroughputOptions).
struct Fp8Kernels {
    Fp8Scaling scaling = Fp8Scaling::tensorwise;
    bool dynamic_scaling = false;
};
// fused_attention: the framework runs the GPU's native fused attention (ThroughputOptions).
KernelEfficiency kernel_efficiency(const Efficiency& e, Precision precision, bool fused_attention = false,
                                   Fp8Kernels fp8 = {});

// The attention kernels' peak and their fraction of it for this plan: the activation dtype's
// peak (fp8 recipes keep attention in bf16; `fallback_peak_flops_per_s` where the spec has
// none) at kernel_efficiency's attention figure, or, for a flash plan on the FP32 units
// (ThroughputOptions::attention_on_fp32_units), the fp32 peak at the fp32 kernel's figure.
struct AttentionRate {
    double peak_flops_per_s = 0;
    double fraction_of_peak = 0;
};
AttentionRate attention_rate(const GpuSpec& gpu, const Plan& p, const ThroughputOptions& opt,
                             double fallback_peak_flops_per_s);

// Throws InputError when the GPU has no published peak for the plan's compute precision.
// `base` adjusted by the framework profile for this plan (FrameworkProfile::adjust_throughput).
ThroughputOptions throughput_options_for(const FrameworkProfile& profile, const ModelConfig& model, const Plan& plan,
                                         ThroughputOptions base);

Throughput estimate_throughput(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan,
                               const ThroughputOptions& options = {});

// The step-time model's stall per micro-batch of a loop on `nodes` nodes (charged under
// ThroughputOptions::cluster_stall): the GPU spec's microbatch_sync_* constants.
double stall_per_micro_batch_s(const Efficiency& e, const Plan& plan, std::int64_t nodes);
// The host pace a plan is expected to run at (allocator_model.hpp): the profile's fitted
// HostPaceModel from the layout (waits when its logit is positive); a profile without one runs
// ahead (PyTorch's default).
HostPace expected_host_pace(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan,
                            const FrameworkProfile& profile);
// The probability the profile's host-pace model gives a wait for this layout, 1 / (1 + e^-logit)
// (a logistic regression's fitted probability); nullopt for a profile without a fitted model.
// expected_host_pace expects a wait exactly where it is above 0.5.
std::optional<double> host_wait_probability(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan,
                                            const FrameworkProfile& profile);

// Dense peak used for MFU/HFU: fp32 -> fp32 (PyTorch leaves TF32 off for matmuls by
// default), bf16 recipes -> bf16, fp16-mixed -> fp16, fp8-mixed -> fp8. nullopt when
// the GPU spec publishes none.
std::optional<double> compute_peak_flops_per_s(const GpuSpec& gpu, Precision precision);
// The name of that peak's number format: "fp32", "bf16", "fp16" or "fp8".
const char* compute_peak_name(Precision precision);

// MFU or HFU (Chowdhery et al. 2022, app. B): a step's FLOPs (the whole job's) over the step time
// times every GPU's dense peak. The one definition the planner, the runtime's report and
// validate --check use.
inline double flops_utilization(double flops_per_step, double step_time_s, std::int64_t gpus, double peak_flops_per_s) {
    return flops_per_step / (step_time_s * static_cast<double>(gpus) * peak_flops_per_s);
}

// One GEMM, M x N x K (times `batch`), as the step model times it under `precision`'s kernels
// (its GEMM constants; fp8-mixed: the fp8 figure against the fp8 peak): the larger of its FLOPs at
// gemm_max * d / (d + half_dim) of the dense peak, d = min(M, N, K), and its operands' and result's
// bytes at the achievable HBM rate. InputError when the GPU spec publishes no peak for the precision.
double gemm_time_s(const GpuSpec& gpu, Precision precision, double m, double n, double k, double batch = 1);

// Time and cost to train on `train_tokens` tokens at the estimated step time.
struct TrainingTime {
    std::int64_t steps = 0;  // ceil(train_tokens / tokens per step)
    double wall_s = 0;
    double gpu_hours = 0;
};
TrainingTime training_time(const Throughput& t, std::int64_t train_tokens);

}  // namespace preflight
