#include "preflight/planner/profiles.hpp"

#include <algorithm>

#include "preflight/planner/error.hpp"
#include "preflight/planner/extensions.hpp"
#include "preflight/planner/frameworks.hpp"
#include "preflight/planner/runtime_layout.hpp"
#include "preflight/planner/throughput.hpp"

namespace preflight {

namespace {

// The runtime reduces gradients one shard unit at a time while the backward goes on
// (runtime/src/program_comm.cpp); the embedding's is reduced last, after the embedding's
// backward, with nothing left to hide it: the exposed tail is that unit's reduction.
void adjust_throughput_runtime(const ModelConfig& model, const Plan& plan, ThroughputOptions& o) {
    const std::int64_t unit = kRuntimeVocabPadMultiple * plan.tp;
    const std::int64_t vocab_rows = (model.vocab + unit - 1) / unit * unit / plan.tp;
    const PrecisionBytes pb = precision_bytes(plan.precision);
    o.grad_bucket_bytes = runtime_unit_elements(model, vocab_rows, plan.tp).embedding *
                          (pb.gradient_accum > 0 ? pb.gradient_accum : pb.gradient);
    o.runtime_column_sums = true;
    // Context parallelism's attention runs the runtime's own kernel, never cuDNN's (its queries sit
    // at their sequence positions: runtime/cuda/device_runner_attention.cpp run_flash), and its K/V
    // exchange is the all-gather's.
    if (plan.cp > 1) {
        o.attention_on_fp32_units = true;
        o.cp_all_gather_kv = true;
    }
    o.fp8_casts_gathered_weights = plan.zero == zero_weights && plan.precision == Precision::fp8_mixed;
    o.moe_experts_16bit = model.is_moe();  // program_fp8.cpp: the experts stay 16-bit under fp8-mixed
    o.ep_all_gather_tokens = true;          // program_moe.cpp: expert parallelism's token exchange
}

// Hugging Face modules run eagerly (ThroughputOptions::hf_eager_kernels) on the one GPU the profile
// models (check_pytorch_plan); the mixed recipes under torch.autocast over fp32 parameters (train.py
// PRECISIONS). Plans on several GPUs reach this profile only from published runs of other PyTorch
// codebases (data set llm-foundry: Composer FSDP over MPT's fused modules), whose kernels are not
// Hugging Face's eager ones: they keep the fused passes and the spec's host time per layer, as a
// model under torch.compile does (ThroughputOptions::model_compiled).
void adjust_throughput_pytorch(const ModelConfig&, const Plan& plan, ThroughputOptions& o) {
    if (plan.gpus() != 1 || plan.zero != zero_none || o.model_compiled) return;
    o.hf_eager_kernels = true;
    o.hf_autocast = plan.precision == Precision::bf16_mixed || plan.precision == Precision::bf16_mixed_fp32_grads;
    // Least squares (log ratio) over our 23 PyTorch eager runs' step times on H100/H200, 2026-12-02
    // (validation/pytorch/fit_host.py; held out by model: step time P50 12.2 %, P95 28.2 %).
    o.eager_kernel_host_s = 3.87e-5;
}

// Plain PyTorch on one GPU (validation/pytorch/train.py): no DistributedDataParallel, no
// sharding, no model parallelism (its memory has no DDP buckets or collectives).
void check_pytorch_plan(const ModelConfig& m, const Plan& p) {
    // Its saved tensors and eager kernels are transformers' modules written down op by op (GPT-2,
    // Llama, Qwen, Phi-3): norms on the sublayer outputs (Gemma3RMSNorm, (1 + weight) in fp32; OLMo's
    // Olmo2RMSNorm, weight times the fp32 normalized tensor) and q/k norms over whole projections (OLMo's,
    // OLMoE's) are not.
    if (m.post_norms || !m.pre_norms || m.qk_norm_whole)
        throw InputError("--model", m.name + ": the pytorch profile counts Hugging Face's GPT-2, Llama, Qwen and "
                                             "Phi-3 modules op by op, not " + std::string(to_string(m.family)) +
                                             "'s norms (on the sublayer outputs, or over the whole q and k "
                                             "projections); use --framework deepspeed, torchtitan or megatron");
    // gpt-oss's eager attention appends the sink logits to every row of scores, and its experts run
    // as batched matmuls over parameter tensors: neither is written down op by op.
    if (m.attention_sinks)
        throw InputError("--model", m.name + ": the pytorch profile counts Hugging Face's GPT-2, Llama, Qwen and "
                                             "Phi-3 modules op by op, not gpt-oss's sink attention and experts; use "
                                             "--framework deepspeed, torchtitan or megatron");
    const char* flag = p.dp > 1 ? "--dp" : p.tp > 1 ? "--tp" : p.pp > 1 ? "--pp" : p.cp > 1 ? "--cp" : p.ep > 1 ? "--ep"
                                                                                                      : nullptr;
    if (flag)
        throw InputError(flag, "the pytorch profile models one GPU (a Hugging Face model under plain PyTorch, as "
                               "validation/pytorch/train.py runs it: no DistributedDataParallel buckets, no model "
                               "parallelism); for several GPUs use --framework torchtitan, deepspeed or megatron");
    if (p.zero > 0)
        throw InputError("--zero", "the pytorch profile models one GPU without ZeRO; for ZeRO/FSDP use --framework "
                                   "deepspeed or torchtitan");
    if (p.precision == Precision::fp8_mixed || p.precision == Precision::fp16_mixed)
        throw InputError("--precision", "the pytorch profile runs train.py's recipes: fp32, bf16-mixed, "
                                        "bf16-mixed-fp32-grads, bf16 (no fp16 loss scaling, no fp8)");
    // transformers' gradient_checkpointing_enable() checkpoints whole decoder layers (train.py
    // refuses --recompute selective with exit 2).
    if (p.recompute == Recompute::selective)
        throw InputError("--recompute", "Hugging Face transformers checkpoints whole layers "
                                        "(gradient_checkpointing_enable), with no selective (attention-core) "
                                        "recompute: use none or full");
}

// What Megatron-LM (d98e8a6) cannot run, as `--emit megatron` writes it (emit.cpp).
void check_megatron_plan(const ModelConfig&, const Plan& p) {
    // --optimizer-cpu-offload needs --use-precision-aware-optimizer (arguments.py validate_args), which
    // needs Adam (optimizer_config.py __post_init__) and the distributed optimizer (optimizer/__init__.py);
    // under Megatron-FSDP (ZeRO-2/3) it is not modelled. Parameters stay on the GPU (no ZeRO-Infinity).
    if (p.offload == Offload::optimizer_and_params)
        throw InputError("--offload", "Megatron-LM offloads the optimizer only (--optimizer-cpu-offload); parameter "
                                      "offload is DeepSpeed's ZeRO-Infinity: --offload optimizer, or --framework "
                                      "deepspeed");
    if (p.offload == Offload::optimizer && (p.zero != zero_optimizer_states || p.optimizer != Optimizer::adamw))
        throw InputError("--offload", "Megatron-LM's --optimizer-cpu-offload runs through the precision-aware "
                                      "optimizer, which needs Adam and the distributed optimizer (modelled as --zero 1; "
                                      "not under Megatron-FSDP): --zero 1 --optimizer adamw, got --zero " +
                                          std::to_string(p.zero) + " --optimizer " + std::string(to_string(p.optimizer)));
    // Megatron-LM keeps fp32 main weights beside --bf16 parameters (its optimizer's main params are
    // fp32 or fp16, --main-params-dtype); only Megatron-FSDP has bf16 main parameters.
    if (p.precision == Precision::bf16 && p.zero < zero_gradients)
        throw InputError("--precision", "pure bf16 (no fp32 master copy) runs under Megatron-LM only through "
                                        "Megatron-FSDP (--zero 2 or 3, --megatron-fsdp-main-params-dtype auto); with "
                                        "its distributed optimizer or without ZeRO it keeps fp32 main weights: "
                                        "--precision bf16-mixed, or --zero 2 or 3");
}

}  // namespace

FrameworkProfile megatron_profile() {
    FrameworkProfile p;  // the defaults describe Megatron-LM (memory.hpp)
    p.pipeline_split_divides_layers = true;
    p.offload_needs_zero = true;
    p.check_plan = &check_megatron_plan;
    return p;
}

// The divisibility assert after the virtual-pipeline block of validate_args (d98e8a6), skipped with
// --decoder-first/last-pipeline-num-layers (validate_uneven_pipeline_split has their rule); the
// interleaved schedule is checked apart (validate_plan_extensions: layers or layers + 2).
std::string pipeline_split_problem(const FrameworkProfile& profile, const ModelConfig& m, const Plan& p) {
    if (!profile.pipeline_split_divides_layers || p.pp < 2 || p.pp_schedule == PpSchedule::interleaved ||
        m.layers % p.pp == 0 || has_uneven_pipeline_split(p))
        return {};
    return "pp " + std::to_string(p.pp) + " does not divide the " + std::to_string(m.layers) +
           " layers: Megatron-LM splits them evenly (validate_args) unless --decoder-first/last-pipeline-num-layers "
           "give an uneven split (--pp-first-stage-layers / --pp-last-stage-layers)";
}

std::string pipeline_degree_problem(const FrameworkProfile& profile, const ModelConfig& m, std::int64_t pp) {
    Plan p;
    p.pp = pp;
    std::string why = pipeline_split_problem(profile, m, p);
    if (!why.empty() && (m.layers + 2) % pp == 0) why.clear();
    return why;
}

RuntimeColumnSumRows runtime_column_sum_rows(const ModelConfig& model, const Plan& plan) {
    const std::int64_t rows = plan.seq * plan.mbs;  // checked by validate_plan: well inside int64
    const std::int64_t norm_rows = plan.sp ? rows / plan.tp : rows;
    const std::int64_t biases = (model.qkv_bias ? 1 : 0) + (model.out_bias ? 1 : 0) + (model.mlp_bias ? 2 : 0);
    return {2 * norm_rows + biases * rows, norm_rows};
}

FrameworkProfile non_megatron_profile() {
    FrameworkProfile p;
    p.megatron_fsdp = false;
    p.main_grad_fp32_copy_at_step = false;
    p.moe_probs_in_activation = false;
    p.fp8_attention_output_16bit_kept = false;
    p.sp_head_gather_buffer = false;
    p.fp8_param_gather = false;
    p.uneven_pipeline_split = false;
    p.p2p_overlap_by_default = false;
    return p;
}

FrameworkProfile runtime_profile() {
    FrameworkProfile p = non_megatron_profile();
    // Each micro-batch's bf16 gradients, accumulated into fp32 across micro-batches (program.cpp).
    p.fp32_main_grads_only = false;
    p.name = "preflight-runtime";
    // Gradients are reduced per shard unit (runtime_layout.hpp) in place: no bucket copies.
    p.grad_bucket_bytes = 0;
    p.grad_buckets_in_flight = 0;
    p.logits_fp32_copy = false;
    p.norm_row_stats = false;
    p.vocab_pad_multiple = kRuntimeVocabPadMultiple;
    p.workspace_bytes = kRuntimeGemmWorkspaceBytes + kRuntimeScalarsBytes;
    p.head_input_grad_with_logits = true;
    // Sequence parallelism: the LM head keeps its all-gathered input for its weight gradient
    // (runtime/src/program.cpp emit_output_and_loss; the final norm's shard goes after the gather).
    p.head_saves_gathered_input = true;
    p.full_recompute_shares_input = true;
    p.flash_bwd_workspace = true;
    // Model states, ZeRO shards and the collectives' unit buffers follow runtime_layout.hpp:
    // gradients are reduced in place in the gradient buffer (ZeRO-0/1) or in each unit's own
    // buffer (ZeRO-2/3), so there are no separate DDP buckets (grad_buckets_in_flight 0).
    p.runtime_shard_units = true;
    p.fp8_runtime_recipe = true;
    p.cp_gathers_kv = true;
    p.runtime_moe = true;
    p.check_model = &check_runtime_model;
    p.check_plan = &check_runtime_plan;
    p.adjust_throughput = &adjust_throughput_runtime;
    // Its attention speed is the "runtime" block's own attention fraction, fitted on its runs
    // (cuDNN SDPA or its own kernel), not the spec's fused-attention figure for Megatron.
    p.fused_attention = false;
    // runtime/src/program_types.cpp check_supported: no fp16-mixed.
    p.precisions = {Precision::fp32, Precision::bf16_mixed, Precision::bf16_mixed_fp32_grads, Precision::bf16,
                    Precision::fp8_mixed};
    return p;
}

GpuSpec gpu_for_profile(const GpuSpec& gpu, const FrameworkProfile& profile) {
    if (profile.name != "preflight-runtime" || !gpu.runtime) return gpu;
    GpuSpec g = gpu;
    g.efficiency = gpu.runtime->efficiency;
    g.efficiency.provenance = "the Preflight runtime's own, fitted on its device runs: " + gpu.runtime->provenance;
    g.overhead_bytes = gpu.runtime->overhead_bytes;
    // full_recompute_pool_slack_fraction stays 0: the runtime plans its arena (runtime/include/
    // preflight/runtime/arena.hpp) and keeps no pool slack; runtime::predict adds it for a run
    // with the pool allocator.
    return g;
}

FrameworkProfile pytorch_profile() {
    FrameworkProfile p = non_megatron_profile();
    p.fp32_main_grads_only = false;  // autocast: fp32 parameters and gradients, no 16-bit ones
    p.name = "pytorch";
    p.grad_bucket_bytes = 0;  // one GPU, no DistributedDataParallel
    p.grad_buckets_in_flight = 0;
    p.logits_fp32_copy = true;
    // F.cross_entropy = log_softmax (saves its fp32 output) + nll_loss; at the loss's
    // backward the saved output, nll_loss's fp32 input gradient and log_softmax's input
    // gradient are alive together beside the model's logits.
    p.loss_fp32_logit_buffers = 3;
    p.norm_row_stats = true;  // LayerNorm saves mean/rstd; HF RMSNorm saves rsqrt(var+eps)
    p.vocab_pad_multiple = 1;
    p.workspace_bytes = 0;
    p.head_input_grad_with_logits = false;
    p.full_recompute_shares_input = true;  // torch.utils.checkpoint re-runs the layer on its saved input
    p.amp_fp32_parameters = true;
    p.autocast_weight_copies = true;
    p.hf_module_inventory = true;
    p.optimizer_moments_param_dtype = true;
    p.optimizer_step_temp_moments = 1;  // foreach AdamW: _foreach_sqrt(exp_avg_sqs)
    p.grads_set_to_none = true;  // train.py: opt.zero_grad(set_to_none=True) after each step
    // The caching allocator's pool beyond those tensors (allocator_model.hpp gradient_fragmentation):
    // least squares over our 15 PyTorch runs on H100/H200 (validation/pytorch/fit_reserve.py; held
    // out by model, the pool's error P50 4.9 %, P95 13.2 %); the fit is judged on that pool plus
    // the GPU spec's overhead, as the driver sees it.
    p.allocator.gradient_fragmentation = 0.8731;
    p.allocator.provenance =
        "fitted on our 15 PyTorch runs (data/measurements, 5 models, H100 and H200), 2026-12-02: reserved - "
        "allocated per byte of the step's gradients";
    p.verdict_on_reserved = true;
    p.allocation_granularity_bytes = kTorchBlockBytes;
    p.fused_attention = false;  // transformers' sdpa / flash_attention_2: FlashAttention-2-class kernels
    p.check_plan = &check_pytorch_plan;
    p.adjust_throughput = &adjust_throughput_pytorch;
    // train.py's recipes (PRECISIONS): no fp16 loss scaling, no fp8.
    p.precisions = {Precision::fp32, Precision::bf16_mixed, Precision::bf16_mixed_fp32_grads, Precision::bf16};
    p.recomputes = {Recompute::none, Recompute::full};  // check_pytorch_plan: no selective recompute
    return p;
}

bool runs_precision(const FrameworkProfile& profile, Precision precision) {
    return profile.precisions.empty() ||
           std::find(profile.precisions.begin(), profile.precisions.end(), precision) != profile.precisions.end();
}

Precision default_precision(const FrameworkProfile& profile) {
    return runs_precision(profile, Precision::bf16_mixed) ? Precision::bf16_mixed : profile.precisions.front();
}

std::vector<std::string> framework_names() {
    return {"megatron", "nanotron", "torchtitan", "deepspeed", "preflight-runtime", "pytorch"};
}

std::optional<FrameworkProfile> profile_by_name(std::string_view name) {
    if (name == "megatron") return megatron_profile();
    if (name == "preflight-runtime") return runtime_profile();
    if (name == "pytorch") return pytorch_profile();
    if (name == "nanotron") return nanotron_profile();
    if (name == "torchtitan") return torchtitan_profile();
    if (name == "deepspeed") return deepspeed_profile();
    return std::nullopt;
}

}  // namespace preflight
