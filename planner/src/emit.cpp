// Framework configurations for a plan.
#include "preflight/planner/emit.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "emit_warn.hpp"
#include "megatron_defaults.hpp"
#include "torchtitan_models.hpp"
#include "preflight/planner/extensions.hpp"
#include "preflight/planner/frameworks.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/report.hpp"
#include "preflight/planner/shown_value.hpp"

namespace preflight {

using nlohmann::json;

std::string_view to_string(EmitFormat f) {
    switch (f) {
        case EmitFormat::deepspeed: return "deepspeed";
        case EmitFormat::megatron: return "megatron";
        case EmitFormat::torchtitan: return "torchtitan";
        case EmitFormat::preflight: return "preflight";
        case EmitFormat::peft: return "peft";
        case EmitFormat::nanotron: return "nanotron";
    }
    return "?";
}

std::optional<EmitFormat> parse_emit_format(std::string_view s) {
    for (EmitFormat f : {EmitFormat::deepspeed, EmitFormat::megatron, EmitFormat::torchtitan, EmitFormat::preflight,
                         EmitFormat::peft, EmitFormat::nanotron})
        if (s == to_string(f)) return f;
    return std::nullopt;
}

using emit_detail::exact_number;
using emit_detail::global_sequences;
using emit_detail::warn;

namespace {
std::vector<std::string> megatron_extension_arguments(const ModelConfig& m, const Plan& p, std::vector<std::string>* w);
std::string torchtitan_extensions(const ModelConfig& m, const Plan& p, std::vector<std::string>* w);
}  // namespace

namespace {

// Megatron-LM's --rotary-base is an int (arguments.py, type=int): a fractional rope_theta is
// written rounded, with a warning; printed from the double, never cast to an integer type.
std::string rotary_base(double theta, std::vector<std::string>* w) {
    char buf[64];
    const double whole = std::round(theta);
    std::snprintf(buf, sizeof buf, "%.0f", whole);
    if (whole != theta) {
        char given[40];
        std::snprintf(given, sizeof given, "%.17g", theta);
        warn(w, std::string("rope_theta ") + given + ": Megatron-LM's --rotary-base takes an integer, " + buf +
                    " written");
    }
    return buf;
}

// YaRN (Peng et al. 2023) as Megatron-LM's GPT model reads it (training/argument_utils.py
// _apply_yarn_config_from_args into YarnRotaryEmbedding): the scaling factor, the original context,
// the ramp's rotations, whether the correction range is rounded (transformers' truncate), and the
// attention factor as the mscale pair: mscale 1 with mscale_all_dim 0 gives 0.1 ln(factor) + 1,
// transformers' own when the config gives no pair.
void add_megatron_yarn_arguments(const RopeScaling& rs, std::vector<std::string>& a, std::vector<std::string>* w) {
    const auto g = exact_number;
    const bool pair = rs.mscale > 0 && rs.mscale_all_dim > 0;
    a.push_back("--rotary-scaling-factor " + g(rs.factor));
    a.push_back("--yarn-original-max-position-embeddings " + std::to_string(rs.original_max_positions));
    a.push_back("--yarn-beta-fast " + g(rs.beta_fast));
    a.push_back("--yarn-beta-slow " + g(rs.beta_slow));
    a.push_back("--mscale " + (pair ? g(rs.mscale) : std::string("1")));
    a.push_back("--mscale-all-dim " + (pair ? g(rs.mscale_all_dim) : std::string("0")));
    if (!rs.truncate) a.emplace_back("--no-yarn-correction-range-round-to-int");
    if (w && rs.attention_factor > 0)
        w->push_back("YaRN attention_factor " + g(rs.attention_factor) + " is not written: Megatron-LM derives the "
                     "factor from --mscale / --mscale-all-dim (0.1 ln(factor) + 1 here)");
}

// Model shape (Megatron-LM arguments.py names).
void add_megatron_model_arguments(const ModelConfig& m, std::vector<std::string>& a, std::vector<std::string>* w) {
    auto arg = [&](std::string flag, std::string value = {}) {
        a.push_back(value.empty() ? flag : flag + " " + value);
    };
    const auto s = [](auto v) { return std::to_string(v); };
    arg("--num-layers", s(m.layers));
    arg("--hidden-size", s(m.hidden));
    arg("--ffn-hidden-size", s(m.ffn_hidden));
    arg("--num-attention-heads", s(m.heads));
    if (m.head_dim * m.heads != m.hidden) arg("--kv-channels", s(m.head_dim));
    if (m.kv_heads != m.heads) {
        arg("--group-query-attention");
        arg("--num-query-groups", s(m.kv_heads));
    }
    if (m.mlp == MlpKind::swiglu && m.glu_clamp > 0) {
        // gpt-oss's experts: quick_gelu(gate) * (up + 1), both clamped (arguments.py --quick-geglu,
        // --glu-linear-offset, --activation-func-clamp-value).
        arg("--quick-geglu");
        arg("--glu-linear-offset", "1.0");
        arg("--activation-func-clamp-value", exact_number(m.glu_clamp));
    } else if (m.mlp == MlpKind::swiglu) {
        arg("--swiglu");
    }
    if (m.attention_sinks) arg("--softmax-type", "learnable");  // a learned sink logit per head (gpt-oss)
    // FlashAttention's window (left, right) counts the keys before the query: transformers' window of
    // W keys (the query's own included) is W - 1 to the left; every Nth layer full (1-based,
    // megatron/core/transformer/utils.py is_layer_window_attention).
    if (emit_detail::megatron_carries_window(m)) {
        arg("--window-size", s(m.sliding_window - 1) + ",0");
        if (m.full_attention_layers > 0) arg("--window-attn-skip-freq", s(m.full_attention_period));
    }
    if (m.norm == NormKind::rmsnorm) arg("--normalization", "RMSNorm");
    // TransformerConfig.layernorm_epsilon (--norm-epsilon, default 1e-5): Qwen's 1e-6 written out.
    if (m.norm_eps != megatron_defaults::kNormEpsilon) arg("--norm-epsilon", exact_number(m.norm_eps));
    // Per-head q/k norms of the same kind (Qwen3); OLMo's over the whole projections are the nearest
    // Megatron-LM has (warn_model_parts says so).
    if (m.qk_norm) arg("--qk-layernorm");
    const RopeScaling& rs = m.rope_scaling;
    const bool yarn = m.position == PositionKind::rope && rs.type == "yarn" && rs.factor > 0;
    arg("--position-embedding-type", yarn ? "yarn" : m.position == PositionKind::rope ? "rope" : "learned_absolute");
    if (m.position == PositionKind::rope && m.rope_theta != 10000.0)
        arg("--rotary-base", rotary_base(m.rope_theta, w));
    if (m.position == PositionKind::rope && m.rope_fraction != 1.0)  // partial_rotary_factor
        arg("--rotary-percent", exact_number(m.rope_fraction));
    // Llama 3.1's frequency scaling (rotary_pos_embedding.py _apply_scaling: low 1, high 4,
    // original context 8192 fixed; only the factor is a flag).
    if (yarn) {
        add_megatron_yarn_arguments(rs, a, w);
        // OLMo 3 scales only its full-attention layers' RoPE (transformers 4.57 Olmo3Model: one rotary
        // embedding per layer type); Megatron-LM's YaRN embedding serves every layer.
        if (m.family == ModelFamily::olmo3 && m.full_attention_layers > 0 && m.full_attention_layers < m.layers)
            warn(w, m.name + " applies its YaRN scaling to its full-attention layers only and plain RoPE to its "
                             "windowed layers; --position-embedding-type yarn scales every layer");
    } else if (rs.type == "llama3" && rs.factor > 0) {
        arg("--use-rope-scaling");
        arg("--rope-scaling-factor", exact_number(rs.factor));
        if (w && (rs.low_freq_factor != 1 || rs.high_freq_factor != 4 || rs.original_max_positions != 8192))
            w->push_back("RoPE scaling: Megatron fixes the llama3 low/high frequency factors at 1 and 4 and the "
                         "original context at 8192; this model's differ");
    } else if (!rs.type.empty() && w) {
        w->push_back("RoPE scaling '" + one_line(rs.type) + "' is not written (llama3's alone is): the positions "
                     "would run unscaled");
    }
    arg("--max-position-embeddings", s(m.max_positions));
    if (!m.tied_embeddings) arg("--untie-embeddings-and-output-weights");
    // Megatron's linear layers carry biases unless --disable-bias-linear (--add-qkv-bias puts
    // them back on q/k/v only, Qwen2's layout).
    if (!m.out_bias && !m.mlp_bias) arg("--disable-bias-linear");
    if (m.qkv_bias && !m.out_bias) arg("--add-qkv-bias");
    // The vocabulary the plan counted: Megatron pads it to a multiple of
    // make-vocab-size-divisible-by x tp (default 128 x tp); 1 keeps the plan's padding to tp.
    arg("--vocab-size", s(m.vocab));
    arg("--make-vocab-size-divisible-by", "1");
    if (m.is_moe()) {
        arg("--num-experts", s(m.experts));
        arg("--moe-router-topk", s(m.experts_per_token));
        // Megatron-LM renormalises unless the softmax runs before the top-k (moe_utils.py topk_routing_with_score_function).
        if (!m.moe_renormalize) arg("--moe-router-pre-softmax");
    }
}

// ZeRO over dp: Megatron's distributed optimizer (ZeRO-1), Megatron-FSDP (ZeRO-2 and ZeRO-3).
void add_megatron_zero_arguments(const Plan& p, std::vector<std::string>& a, std::vector<std::string>* w) {
    if (p.zero == 1) a.emplace_back("--use-distributed-optimizer");
    if (p.zero < 2) return;
    // Megatron's distributed optimizer alone keeps a full gradient buffer (ZeRO-1 memory);
    // Megatron-FSDP shards the gradients (optim_grads) and the parameters too (optim_grads_params).
    // arguments.py validate_args: it needs the fsdp_dtensor checkpoint format. (torch FSDP2,
    // --use-torch-fsdp2, refuses pipelines, expert parallelism, tied embeddings and fp16.)
    const std::string strategy = p.zero == 2 ? "optim_grads" : "optim_grads_params";
    a.insert(a.end(), {"--use-distributed-optimizer", "--use-megatron-fsdp",
                       "--data-parallel-sharding-strategy " + strategy, "--no-gradient-accumulation-fusion",
                       "--ckpt-format fsdp_dtensor"});
    // Megatron-FSDP's main gradients take the parameters' dtype unless told (arguments.py
    // --megatron-fsdp-main-grads-dtype, default auto; --accumulate-allreduce-grads-in-fp32 is not read).
    if (p.precision == Precision::bf16_mixed_fp32_grads) a.emplace_back("--megatron-fsdp-main-grads-dtype fp32");
    // Its main weights are an fp32 copy by default (--megatron-fsdp-main-params-dtype fp32), even
    // beside fp32 parameters; auto optimizes the parameters themselves (param_and_grad_buffer.py:
    // no main_weight_buffer), which is the fp32 and the pure-bf16 recipes.
    if (p.precision == Precision::fp32 || p.precision == Precision::bf16)
        a.emplace_back("--megatron-fsdp-main-params-dtype auto");
    warn(w, "ZeRO-" + std::to_string(p.zero) + ": emitted as Megatron-FSDP (--use-megatron-fsdp, sharding strategy " +
                strategy + "; --use-custom-fsdp before its rename); its checkpoints are fsdp_dtensor, and it refuses "
                "CUDA_DEVICE_MAX_CONNECTIONS=1");
}

// Precision: --bf16 / --fp16 / Transformer Engine's --fp8-format.
void add_megatron_precision_arguments(const Plan& p, std::vector<std::string>& a, std::vector<std::string>* w) {
    // With --bf16 Megatron keeps fp32 main gradients unless --grad-reduce-in-bf16 (arguments.py
    // validate_args), so the recipes with 16-bit gradients ask for it.
    switch (p.precision) {
        case Precision::fp32: break;
        case Precision::bf16_mixed:
            a.emplace_back("--bf16");
            a.emplace_back("--grad-reduce-in-bf16");
            break;
        case Precision::bf16_mixed_fp32_grads:
            a.emplace_back("--bf16");
            a.emplace_back("--accumulate-allreduce-grads-in-fp32");  // one fp32 main gradient, as the megatron profile holds
            break;
        case Precision::bf16:
            a.emplace_back("--bf16");
            a.emplace_back("--grad-reduce-in-bf16");
            if (p.zero < 2)
                warn(w, "Megatron keeps fp32 master weights with --bf16; pure bf16 (no master copy) has a switch only "
                        "under Megatron-FSDP (ZeRO-2/3: --megatron-fsdp-main-params-dtype auto)");
            break;
        case Precision::fp16_mixed: a.emplace_back("--fp16"); break;
        case Precision::fp8_mixed:
            a.emplace_back("--bf16");
            a.emplace_back("--grad-reduce-in-bf16");
            a.emplace_back("--fp8-format hybrid");  // Transformer Engine: e4m3 forward, e5m2 gradients
            // Delayed scaling, whose amax history the profile counts (memory.cpp); Megatron-LM's default
            // today (TransformerConfig.fp8_recipe), written so a change of default cannot change the job.
            a.emplace_back("--fp8-recipe delayed");
            // Transformer Engine fp8 parameters, gathered in fp8 by the distributed optimizer (fp8_params.cpp).
            if (p.fp8_param_gather) a.emplace_back("--fp8-param-gather");
            if (p.fp8_scaling == Fp8Scaling::rowwise)
                warn(w, "rowwise fp8 scaling is torchao's recipe; Transformer Engine's --fp8-format scales per "
                        "tensor, so this config runs tensorwise");
            break;
    }
}

// torchrun starting the plan's world size: the most GPUs per node (at most gpus_per_node) that
// divide it evenly, as torchrun starts the same count on every node. Megatron-LM's validate_args
// asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with tp or cp > 1 before Blackwell, except under FSDP
// (ZeRO-2/3 here), which wants it above 1.
std::string megatron_launch_line(const Plan& p, std::int64_t gpus_per_node) {
    const std::int64_t gpus = p.gpus();
    std::int64_t per_node = gpus_per_node > 0 ? std::min(gpus, gpus_per_node) : gpus;
    while (gpus % per_node != 0) --per_node;
    const std::int64_t nodes = gpus / per_node;
    std::string line = (p.tp > 1 || p.cp > 1) && p.zero < 2 ? "CUDA_DEVICE_MAX_CONNECTIONS=1 " : "";
    line += "torchrun ";
    line += nodes > 1 ? "--nnodes " + std::to_string(nodes) : "--standalone";
    line += " --nproc-per-node " + std::to_string(per_node) + " pretrain_gpt.py";
    if (nodes > 1) line = "# on each node, with its --node-rank and your --master-addr / --master-port:\n" + line;
    if (gpus_per_node > 0 && per_node != std::min(gpus, gpus_per_node))
        line = "# " + std::to_string(gpus) + " GPUs do not fill nodes of " + std::to_string(gpus_per_node) +
               " evenly: launched as " + std::to_string(nodes) + " x " + std::to_string(per_node) +
               " (torchrun starts as many on every node), where the plan placed them on full nodes\n" + line;
    return line;
}

}  // namespace

std::string megatron_arguments(const ModelConfig& m, const Plan& p, std::vector<std::string>* w,
                               const EmitOptions& opt) {
    std::vector<std::string> a;
    auto arg = [&](std::string flag, std::string value = {}) {
        a.push_back(value.empty() ? flag : flag + " " + value);
    };
    const auto s = [](auto v) { return std::to_string(v); };
    add_megatron_model_arguments(m, a, w);
    if (!emit_detail::megatron_carries_window(m)) emit_detail::warn_sliding_window(m, p, w, "Megatron-LM");
    emit_detail::warn_model_parts(m, w, "Megatron-LM", true);
    // Plan.
    arg("--seq-length", s(p.seq));
    arg("--micro-batch-size", s(p.mbs));
    arg("--global-batch-size", s(global_sequences(p)));  // Megatron derives accumulation = global / (micro * dp)
    arg("--tensor-model-parallel-size", s(p.tp));
    arg("--pipeline-model-parallel-size", s(p.pp));
    // The plan's uneven split (pipeline_uneven.cpp: transformer_block.py get_num_layers_to_build).
    if (p.pp_first_stage_layers > 0) arg("--decoder-first-pipeline-num-layers", s(p.pp_first_stage_layers));
    if (p.pp_last_stage_layers > 0) arg("--decoder-last-pipeline-num-layers", s(p.pp_last_stage_layers));
    if (const std::string why = pipeline_split_problem(megatron_profile(), m, p); !why.empty())
        warn(w, why + ": Megatron-LM refuses this launch as it stands (the plan puts the remainder on the first "
                      "stages; rank it with --framework megatron for a pp that divides them)");
    if (p.sp) arg("--sequence-parallel");
    add_megatron_zero_arguments(p, a, w);
    if (p.dp > 1) arg("--overlap-grad-reduce");
    // The overlaps the step time was judged with (TransformerEngine userbuffers need sequence
    // parallelism; the p2p overlap applies to the interleaved schedule).
    if (opt.tp_comm_overlap && p.tp > 1 && p.sp) arg("--tp-comm-overlap");
    // Megatron overlaps the interleaved schedule's sends by default (arguments.py has only
    // --no-overlap-p2p-communication), as `plan` judges them unless --no-overlap-p2p-comm. Without
    // the overlap validate_args wants more than 2 stages, so at pp 2 it stays on.
    if (!opt.overlap_p2p_comm && p.pp_schedule == PpSchedule::interleaved) {
        if (p.pp > 2)
            arg("--no-overlap-p2p-communication");
        else
            warn(w, "the interleaved schedule at pp 2 runs with Megatron's p2p overlap (it refuses to turn it off "
                    "there): the step time was judged without it (--no-overlap-p2p-comm)");
    }
    switch (p.recompute) {
        case Recompute::none: break;
        case Recompute::selective: arg("--recompute-activations"); break;
        case Recompute::full:
            arg("--recompute-granularity", "full");
            arg("--recompute-method", "uniform");
            arg("--recompute-num-layers", "1");
            break;
    }
    add_megatron_precision_arguments(p, a, w);
    // TransformerConfig.attention_backend: auto picks Transformer Engine's flash or fused kernel.
    arg("--attention-backend", p.attention == AttentionKind::flash ? "auto" : "unfused");
    arg("--attention-dropout", s(p.dropout));
    arg("--hidden-dropout", s(p.dropout));
    arg("--optimizer", p.optimizer == Optimizer::adamw ? "adam" : "sgd");  // Megatron's adam is AdamW (decoupled decay)
    for (std::string& x : megatron_extension_arguments(m, p, w)) a.push_back(std::move(x));

    std::ostringstream o;
    o << "# Megatron-LM launch (pretrain_gpt.py) from preflight plan: " << one_line(m.name) << " on " << p.gpus()
      << " GPUs, dp " << p.dp << " = world size / (tp " << p.tp << " * pp " << p.pp
      << (p.cp > 1 ? " * cp " + std::to_string(p.cp) : std::string()) << "), grad_acc " << p.grad_acc
      << ", " << p.global_batch_tokens() << " tokens per step\n";
    o << megatron_launch_line(p, opt.gpus_per_node) << " \\\n";
    for (std::size_t i = 0; i < a.size(); ++i) o << a[i] << (i + 1 < a.size() ? " \\\n" : "\n");
    return o.str();
}

namespace {

// [training] (torchtitan/config/job_config.py Training).
void torchtitan_training(std::ostringstream& o, const Plan& p, std::vector<std::string>* w) {
    o << "[training]\n";
    o << "seq_len = " << p.seq << "\n";
    if (p.pp > 1) {
        // distributed/pipeline_parallel.py: the schedule splits local_batch_size into micro-batches of
        // pipeline_parallel_microbatch_size; accumulation would repeat whole pipeline steps (a full
        // bubble each), so the plan's micro-batches are the pipeline's.
        o << "local_batch_size = " << p.mbs * p.grad_acc << "  # " << p.grad_acc << " pipeline micro-batches of "
          << p.mbs << "\n";
        o << "global_batch_size = " << global_sequences(p) << "  # = local * dp: no accumulation outside the pipeline\n";
    } else {
        o << "local_batch_size = " << p.mbs << "\n";
        o << "global_batch_size = " << global_sequences(p) << "  # gradient accumulation = global / (local * dp) = "
          << p.grad_acc << "\n";
    }
    std::string param = "bfloat16", reduce = "float32";
    switch (p.precision) {
        case Precision::fp32: param = "float32"; break;
        case Precision::bf16_mixed:
        case Precision::fp8_mixed: break;
        case Precision::bf16_mixed_fp32_grads:
            warn(w, "bf16-mixed-fp32-grads: torchtitan reduces into fp32 sharded gradients with no separate "
                    "accumulator, so this config runs bf16-mixed (memory --from reads it so: one fp32 gradient)");
            break;
        case Precision::bf16: break;  // training.dtype below
        case Precision::fp16_mixed:
            warn(w, "torchtitan's mixed_precision_param supports bfloat16 / float32; fp16 with loss scaling is not "
                    "offered, bfloat16 emitted");
            break;
    }
    // job_config.py Training.dtype (v0.2.0+): "bfloat16" keeps parameters, gradients and optimizer
    // states in bf16, the pure-bf16 recipe.
    if (p.precision == Precision::bf16) o << "dtype = \"bfloat16\"\n";
    o << "mixed_precision_param = \"" << param << "\"\n";
    o << "mixed_precision_reduce = \"" << reduce << "\"\n";
    if (p.offload != Offload::none) {
        o << "enable_cpu_offload = true\n";
        warn(w, "torchtitan's enable_cpu_offload (FSDP2 CPUOffloadPolicy) moves parameters, gradients and optimizer "
                "states to the host: more than --offload optimizer");
    }
}

}  // namespace

std::string torchtitan_toml(const ModelConfig& m, const Plan& p, std::vector<std::string>* w, const EmitOptions& opt) {
    std::ostringstream o;
    o << "# torchtitan job config fragment from preflight plan: " << one_line(m.name) << " on " << p.gpus() << " GPUs, "
      << p.global_batch_tokens() << " tokens per step\n";
    // A registry entry (torchtitan_models.hpp) builds the whole model, gpt-oss's sinks, gate and window too.
    const torchtitan_models::Entry* entry = torchtitan_models::of_catalog(m.name);
    if (!entry) emit_detail::warn_sliding_window(m, p, w, "torchtitan");
    emit_detail::warn_model_parts(m, w, "torchtitan", entry != nullptr);
    // One table per section: a second [training] or [parallelism] header is invalid TOML.
    if (entry != nullptr || p.precision == Precision::fp8_mixed) {
        o << "[model]\n";
        if (entry != nullptr) o << "name = \"" << entry->name << "\"\nflavor = \"" << entry->flavor << "\"\n";
        // components/quantization/float8.py registers the converter as "quantize.linear.float8".
        if (p.precision == Precision::fp8_mixed) o << "converters = [\"quantize.linear.float8\"]\n";
        o << "\n";
    } else {
        o << "# [model] name / flavor: torchtitan's registry entry for " << one_line(m.name) << "\n";
    }
    torchtitan_training(o, p, w);
    o << "\n";

    // ZeRO over dp -> FSDP2 sharding (ZeRO-3 = reshard after forward; ZeRO-2-like = never
    // reshard), ZeRO-0 -> pure replication (DDP).
    const std::int64_t replicate = p.zero == 0 ? p.dp : 1;
    const std::int64_t shard = p.zero == 0 ? 1 : p.dp;
    // The torchtitan profile's own rules (profiles/torchtitan.cpp check_torchtitan_plan), said.
    if (torchtitan_ddp_beside_other_parallelism(p))
        warn(w, "ZeRO-0 with tp, pp or ep above 1: torchtitan's DDP runs only when data parallelism is the whole "
                "mesh (parallelize.py refuses it); plan with --framework torchtitan, which uses FSDP here");
    if (p.cp > 1 && p.zero == 0)
        warn(w, "ZeRO-0 with cp: torchtitan shards with FSDP over the shard x cp ranks whenever cp is above 1 "
                "(parallel_dims.py fsdp_enabled), so the job holds less than planned; plan with --framework "
                "torchtitan, which plans --zero 2 or 3 there");
    if (torchtitan_amp_off(p) && p.precision != Precision::fp32 && p.precision != Precision::bf16)
        warn(w, "no FSDP (dp 1 or ZeRO-0, no cp) beside tp or pp: torchtitan turns mixed precision off "
                "(maybe_enable_amp) and the step runs in fp32");
    o << "[parallelism]\n";
    o << "data_parallel_replicate_degree = " << replicate << "\n";
    o << "data_parallel_shard_degree = " << shard << "\n";
    if (p.zero == 1 || p.zero == 2) {
        o << "fsdp_reshard_after_forward = \"never\"\n";
        if (p.zero == 1)
            warn(w, "ZeRO-1: torchtitan's FSDP2 has no optimizer-only sharding; emitted as FSDP without resharding "
                    "(ZeRO-2-like, less memory)");
    } else if (p.zero == 3) {
        o << "fsdp_reshard_after_forward = \"always\"\n";
    }
    o << "tensor_parallel_degree = " << p.tp << "\n";
    o << "pipeline_parallel_degree = " << p.pp << "\n";
    if (p.pp > 1) {
        o << "pipeline_parallel_schedule = \""
          << (p.pp_schedule == PpSchedule::gpipe ? "GPipe" : p.pp_schedule == PpSchedule::interleaved ? "Interleaved1F1B" : "1F1B")
          << "\"\n";
        o << "pipeline_parallel_microbatch_size = " << p.mbs << "\n";
    }
    o << torchtitan_extensions(m, p, w);
    if (p.tp > 1 && !p.sp) warn(w, "torchtitan's tensor parallelism always shards norms by sequence (SP on)");
    o << "\n[activation_checkpoint]\n";
    o << "mode = \"" << to_string(p.recompute) << "\"\n";
    if (p.recompute == Recompute::selective) o << "selective_ac_option = \"op\"\n";
    if (p.precision == Precision::fp8_mixed)
        o << "\n[quantize.linear.float8]\nrecipe_name = \"" << to_string(p.fp8_scaling) << "\"\n";
    // components/loss.py build_cross_entropy_loss: [compile] with "loss" in its components.
    if (opt.compiled_loss)
        o << "\n[compile]\nenable = true\ncomponents = [\"loss\"]  # the plan's memory assumes a compiled loss\n";
    if (p.attention == AttentionKind::eager) warn(w, "torchtitan uses SDPA (flash) attention; eager is not a switch");
    if (p.dropout > 0) warn(w, "dropout is set in the model definition, not the job config");
    if (p.optimizer == Optimizer::sgd)
        warn(w, "torchtitan builds Adam and AdamW only (components/optimizer.py): SGD has no switch, and its default "
                "AdamW holds 4 B per parameter more than planned");
    if (p.finetune != Finetune::full) warn(w, "torchtitan has no LoRA/QLoRA: use Hugging Face PEFT (--emit peft)");
    return o.str();
}

json preflight_plan_document(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan, const EmitOptions& opt) {
    json j = plan_to_json(plan);
    j["schema_version"] = kSchemaVersion;
    j["model"] = opt.model_reference.empty() ? model.name : opt.model_reference;
    j["gpu"] = opt.gpu_reference.empty() ? gpu.name : opt.gpu_reference;
    if (!opt.framework.empty()) j["framework"] = opt.framework;
    if (opt.model_config) j["model_config"] = *opt.model_config;
    return j;
}

Emitted emit_plan(EmitFormat format, const ModelConfig& model, const GpuSpec& gpu, const Plan& plan,
                  const EmitOptions& options) {
    Emitted e;
    if (options.compiled_loss && format != EmitFormat::torchtitan)
        warn(&e.warnings, "the plan's memory assumes a torch.compile'd loss (--compiled-loss); compile your loss "
                          "function, or an eager cross-entropy holds up to 14 B more per logit than planned");
    if (plan.fp8_param_gather && format != EmitFormat::megatron && format != EmitFormat::preflight)
        warn(&e.warnings, "the plan keeps the decoder layers' GEMM weights as fp8 parameters (--fp8-param-gather, "
                          "Megatron-LM's), which this format cannot express: the job keeps bf16 weights beside their "
                          "fp8 copies, 2 B more per such weight than planned");
    if (has_uneven_pipeline_split(plan) && format != EmitFormat::megatron && format != EmitFormat::preflight)
        warn(&e.warnings, "the plan splits the layers unevenly over the pipeline stages (--pp-first-stage-layers / "
                          "--pp-last-stage-layers, Megatron-LM's), which this format cannot express: the job splits "
                          "them its own way, not as planned");
    if ((options.tp_comm_overlap || options.overlap_p2p_comm) && format != EmitFormat::megatron)
        warn(&e.warnings, "the plan's step time assumes Megatron's communication overlap (--tp-comm-overlap / "
                          "--overlap-p2p-comm), which this format does not carry");
    switch (format) {
        case EmitFormat::deepspeed: e.text = deepspeed_config(plan, &e.warnings, options.deepspeed_zero).dump(2) + "\n"; break;
        case EmitFormat::megatron: {
            EmitOptions o = options;
            if (o.gpus_per_node == 0) o.gpus_per_node = gpu.gpus_per_node;
            e.text = megatron_arguments(model, plan, &e.warnings, o);
            break;
        }
        case EmitFormat::torchtitan: e.text = torchtitan_toml(model, plan, &e.warnings, options); break;
        case EmitFormat::preflight: e.text = preflight_plan_document(model, gpu, plan, options).dump(2) + "\n"; break;
        case EmitFormat::peft: e.text = peft_config(model, plan, &e.warnings).dump(2) + "\n"; break;
        case EmitFormat::nanotron: e.text = nanotron_yaml(model, plan, &e.warnings); break;
    }
    return e;
}

}  // namespace preflight

namespace preflight {

namespace {

std::vector<std::string> megatron_extension_arguments(const ModelConfig& m, const Plan& p, std::vector<std::string>* w) {
    std::vector<std::string> a;
    // Megatron-LM arguments.py names.
    if (interleaved_counts_embedding_and_loss(p, m.layers)) {
        a.push_back("--num-virtual-stages-per-pipeline-rank " + std::to_string(p.vpp));
        a.push_back("--account-for-embedding-in-pipeline-split");
        a.push_back("--account-for-loss-in-pipeline-split");
    } else if (p.pp_schedule == PpSchedule::interleaved && has_uneven_pipeline_split(p)) {
        // validate_args refuses --num-layers-per-virtual-pipeline-stage beside the uneven split.
        a.push_back("--num-virtual-stages-per-pipeline-rank " + std::to_string(p.vpp));
    } else if (p.pp_schedule == PpSchedule::interleaved) {
        a.push_back("--num-layers-per-virtual-pipeline-stage " + std::to_string(m.layers / (p.pp * p.vpp)));
    }
    if (p.pp_schedule == PpSchedule::gpipe)
        warn(w, "Megatron-LM has no GPipe schedule: it runs 1F1B (less activation memory, same bubble)");
    if (p.cp > 1) a.push_back("--context-parallel-size " + std::to_string(p.cp));
    if (p.ep > 1) a.push_back("--expert-model-parallel-size " + std::to_string(p.ep));
    if (p.moe_capacity_factor != 1.0 && m.is_moe()) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "--moe-expert-capacity-factor %g", p.moe_capacity_factor);
        a.push_back(buf);
        // TransformerConfig.moe_expert_capacity_factor: tokens past the capacity are dropped.
        warn(w, "--moe-expert-capacity-factor makes Megatron drop the tokens past that capacity, which is what "
                "bounds the expert buffers as planned; without it no token is dropped and they follow the routing");
    }
    if (p.offload != Offload::none) {
        a.push_back("--optimizer-cpu-offload");
        a.push_back("--optimizer-offload-fraction 1.0");
        a.push_back("--use-precision-aware-optimizer");
        // megatron/core/optimizer: the precision-aware optimizer needs the distributed optimizer
        // (ZeRO-1 here) and Adam.
        if (p.zero != 1 || p.optimizer != Optimizer::adamw)
            warn(w, "optimizer offload: Megatron's --optimizer-cpu-offload runs only with the distributed optimizer "
                    "(ZeRO-1) and Adam; this plan (ZeRO-" + std::to_string(p.zero) + ", " +
                        std::string(to_string(p.optimizer)) + ") will be refused at optimizer set-up");
        warn(w, "optimizer offload: --optimizer-cpu-offload needs Megatron-core >= 0.10; parameter offload "
                "(ZeRO-Infinity) has no Megatron switch");
    }
    if (p.finetune != Finetune::full)
        warn(w, "Megatron-LM has no LoRA/QLoRA: use NeMo's PEFT or Hugging Face PEFT (--emit peft)");
    return a;
}

// The [parallelism] keys of the extensions, written inside the one [parallelism] table.
std::string torchtitan_extensions(const ModelConfig& m, const Plan& p, std::vector<std::string>* w) {
    std::string o;
    if (p.cp > 1) o += "context_parallel_degree = " + std::to_string(p.cp) + "\n";
    if (p.ep > 1) o += "expert_parallel_degree = " + std::to_string(p.ep) + "\n";
    if (p.pp_schedule == PpSchedule::interleaved)
        // torchtitan/distributed/pipeline_parallel.py: ceil((layers + first_less + last_less) /
        // layers_per_stage) stages.
        o += "pipeline_parallel_layers_per_stage = " + std::to_string(interleaved_chunk_layers(p, m.layers)) + "\n";
    // The less-layer weights (default 1 each) count the embedding and the loss as a layer, which
    // leaves the first and last stage a layer short; 0 where the plan's stages hold the layers
    // alone (every schedule but interleaved chunks that count them).
    if (p.pp > 1 && !interleaved_counts_embedding_and_loss(p, m.layers))
        o += "pipeline_parallel_first_stage_less_layers = 0\npipeline_parallel_last_stage_less_layers = 0\n";
    if (interleaved_counts_embedding_and_loss(p, m.layers))
        warn(w, "the model's " + std::to_string(m.layers) + " layers fill " + std::to_string(p.pp * p.vpp) +
                    " chunks only with the embedding and the loss counted as a layer each (torchtitan: check "
                    "that its pipeline split places them so)");
    return o;
}

}  // namespace

}  // namespace preflight
