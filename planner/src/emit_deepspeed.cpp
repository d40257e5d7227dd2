// The DeepSpeed ds_config for a plan (deepspeed_config, emit.hpp): keys as in the DeepSpeed
// configuration JSON reference (deepspeed.ai/docs/config-json) and its code at v0.19.6.
#include <string>
#include <vector>

#include "emit_warn.hpp"
#include "preflight/planner/emit.hpp"
#include "preflight/planner/extensions.hpp"

namespace preflight {

using nlohmann::json;
using emit_detail::global_sequences;
using emit_detail::warn;

namespace {

// The recipe: bf16 / fp16 blocks and data_types (runtime/config.py).
void deepspeed_precision(const Plan& p, json& c, std::vector<std::string>* w) {
    switch (p.precision) {
        case Precision::bf16_mixed: c["bf16"] = {{"enabled", true}}; break;
        case Precision::bf16_mixed_fp32_grads:
            c["bf16"] = {{"enabled", true}};
            // engine.py _do_optimizer_sanity_check: bf16 with fp32 accumulation needs ZeRO (1-3);
            // without it the mix raises NotImplementedError.
            if (p.zero > 0)
                c["data_types"] = {{"grad_accum_dtype", "fp32"}};
            else
                warn(w, "bf16-mixed-fp32-grads at ZeRO-0: DeepSpeed accumulates bf16 gradients in fp32 only under "
                        "ZeRO 1-3 (it refuses the mix without ZeRO); emitted with bf16 gradients, without the fp32 "
                        "accumulator the plan counts");
            break;
        case Precision::bf16:
            // runtime/config.py: bf16 master weights, gradients and optimizer states (ZeRO 1-3; the
            // deepspeed profile refuses ZeRO-0, as DeepSpeed asserts).
            c["bf16"] = {{"enabled", true}, {"bf16_master_weights_and_grads", true}, {"bf16_optimizer_states", true}};
            if (p.zero == 0)
                warn(w, "pure bf16 at ZeRO-0: DeepSpeed keeps bf16 master weights only under ZeRO 1-3 "
                        "(bf16_master_weights_and_grads asserts a ZeRO stage); use --zero 1");
            break;
        case Precision::fp16_mixed:
            c["fp16"] = {{"enabled", true}, {"loss_scale", 0}, {"initial_scale_power", 16}};  // dynamic loss scaling
            break;
        case Precision::fp8_mixed:
            c["bf16"] = {{"enabled", true}};
            warn(w, "DeepSpeed's config has no fp8 recipe: bf16 is emitted; run the GEMMs through Transformer "
                    "Engine (te.fp8_autocast) for fp8-mixed");
            break;
        case Precision::fp32:
            c["bf16"] = {{"enabled", false}};
            c["fp16"] = {{"enabled", false}};
            break;
    }
}

// The optimizer. engine.py _configure_basic_optimizer builds a config optimizer from its type
// (DeepSpeed's own, or one torch.optim names: SGD) and params; without the block the training
// script's optimizer is used.
void deepspeed_optimizer(const Plan& p, json& c, std::vector<std::string>* w) {
    if (p.optimizer == Optimizer::sgd) {
        c["optimizer"] = {{"type", "SGD"}, {"params", {{"momentum", 0.9}}}};
        warn(w, "optimizer: torch.optim.SGD with momentum 0.9 (the one momentum buffer per weight the plan counts; "
                "momentum 0 keeps none); set optimizer.params.lr, torch's default is 0.001");
        return;
    }
    // AdamW is left to the script, whose learning rate this config cannot know. The memory counts
    // DeepSpeed's FusedAdam (memory_deepspeed.cpp); torch.optim.AdamW's foreach step
    // (_multi_tensor_adam: _foreach_sqrt of the second moments) holds an fp32 temporary per element
    // it steps; without ZeRO, FP16_UnfusedOptimizer's fp32 gradients and that temporary come to the
    // 8 B per parameter FP16_Optimizer's copies take (fp16/unfused_optimizer.py step).
    const bool fp16_wrapper = p.zero == zero_none && p.precision != Precision::fp32 &&
                              !(p.pp > 1 && p.precision == Precision::bf16_mixed);  // not BF16_Optimizer
    if (!fp16_wrapper && p.offload == Offload::none)  // offloaded: DeepSpeedCPUAdam steps on the host
        warn(w, "optimizer: none named, so the training script's runs; the memory counts DeepSpeed's FusedAdam "
                "(an \"optimizer\" block of type AdamW with your lr, or deepspeed.ops.adam.FusedAdam handed to "
                "deepspeed.initialize): torch.optim.AdamW's foreach step holds 4 B more per element it updates");
}

void deepspeed_extensions(const Plan& p, json& c, std::vector<std::string>* w) {
    // zero_optimization.offload_optimizer / offload_param (DeepSpeed config-json reference, "ZeRO
    // optimizations for FP16 training": device cpu, pin_memory).
    if (p.offload != Offload::none) {
        if (p.zero == 0) {
            // Stage 1, not 2: the pipeline engine refuses ZeRO-2/3 (runtime/pipe/engine.py).
            c["zero_optimization"]["stage"] = 1;
            warn(w, "DeepSpeed offloads the optimizer only under ZeRO 1-3: stage 1 emitted (the same memory at dp 1; "
                    "above it the optimizer states are sharded as well)");
        }
        c["zero_optimization"]["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};
        if (p.offload == Offload::optimizer_and_params)
            c["zero_optimization"]["offload_param"] = {{"device", "cpu"}, {"pin_memory", true}};
    }
    if (p.pp > 1) {
        // deepspeed/runtime/config.py get_pipeline_config keys; DeepSpeed's PipelineEngine runs
        // its own 1F1B-style TrainSchedule.
        c["pipeline"] = {{"stages", p.pp},
                         {"partition", "parameters"},
                         {"activation_checkpoint_interval", p.recompute == Recompute::full ? 1 : 0}};
        // Only activation_checkpoint_interval is read from it (pipe/engine.py); the stages and their
        // partition come from the model's PipelineModule.
        warn(w, "pipeline.stages and pipeline.partition record the plan; DeepSpeed takes them from the model: "
                "PipelineModule(layers, num_stages=" + std::to_string(p.pp) + ", partition_method=\"parameters\")");
        if (p.pp_schedule != PpSchedule::one_f_one_b)
            warn(w, "DeepSpeed's pipeline engine runs 1F1B (TrainSchedule); the " + std::string(to_string(p.pp_schedule)) +
                        " schedule has no switch");
    }
    if (p.finetune != Finetune::full)
        warn(w, "LoRA/QLoRA: wrap the model with PEFT (preflight plan --emit peft prints its LoraConfig); DeepSpeed "
                "then trains only the adapters");
    if (p.cp > 1)
        warn(w, "context parallelism (ring attention) has no DeepSpeed config key; DeepSpeed-Ulysses splits "
                "sequences differently (sequence_parallel_size in Megatron-DeepSpeed)");
    if (p.ep > 1)
        warn(w, "expert parallelism is set in code: deepspeed.moe.layer.MoE(..., ep_size=" + std::to_string(p.ep) + ")");
}

}  // namespace

json deepspeed_config(const Plan& p, std::vector<std::string>* w, const DeepSpeedZeroSettings& buckets) {
    // Keys as in the DeepSpeed configuration JSON reference (deepspeed.ai/docs/config-json).
    json c;
    // = micro batch * accumulation * data-parallel size. Without an mpu (config-only AutoTP, no
    // Megatron-DeepSpeed) DeepSpeed takes the whole world as data-parallel (runtime/config.py
    // _configure_train_batch_size), so with tensor or context parallelism the product would not hold.
    if (p.tp * p.cp == 1)
        c["train_batch_size"] = global_sequences(p);
    else
        warn(w, "train_batch_size left out: with tensor or context parallelism DeepSpeed counts every rank as "
                "data-parallel unless it is handed the model-parallel groups (mpu); micro batch and accumulation "
                "set the batch (preflight memory --from reads this file back with --gpus " + std::to_string(p.gpus()) + ")");
    c["train_micro_batch_size_per_gpu"] = p.mbs;
    c["gradient_accumulation_steps"] = p.grad_acc;
    // The buckets the deepspeed profile charged (memory_deepspeed.cpp): reduce_bucket_size where it is
    // not zero/config.py's default ("auto" where the Trainer fills it), overlap_comm as judged (left
    // out where the judged config left it to DeepSpeed's default).
    c["zero_optimization"] = {{"stage", p.zero}, {"contiguous_gradients", true}};
    if (buckets.overlap_comm) c["zero_optimization"]["overlap_comm"] = *buckets.overlap_comm;
    if (buckets.reduce_bucket_hidden_squared)
        c["zero_optimization"]["reduce_bucket_size"] = "auto";
    else if (buckets.reduce_bucket_elements != DeepSpeedZeroSettings{}.reduce_bucket_elements)
        c["zero_optimization"]["reduce_bucket_size"] = buckets.reduce_bucket_elements;
    // ZeRO-3's sub-group and prefetcher (memory_deepspeed.cpp add_zero3_terms), where not the defaults.
    const DeepSpeedZeroSettings defaults;
    if (p.zero == zero_weights && buckets.sub_group_elements != defaults.sub_group_elements)
        c["zero_optimization"]["sub_group_size"] = buckets.sub_group_elements;
    if (p.zero == zero_weights && buckets.max_live_elements != defaults.max_live_elements)
        c["zero_optimization"]["stage3_max_live_parameters"] = buckets.max_live_elements;
    if (p.zero == zero_weights && buckets.prefetch_elements != defaults.prefetch_elements)
        c["zero_optimization"]["stage3_prefetch_bucket_size"] = buckets.prefetch_elements;
    deepspeed_precision(p, c, w);
    deepspeed_optimizer(p, c, w);
    if (p.recompute != Recompute::none) {
        c["activation_checkpointing"] = {{"partition_activations", p.tp > 1},
                                         {"contiguous_memory_optimization", false},
                                         {"cpu_checkpointing", false},
                                         {"synchronize_checkpoint_boundary", false},
                                         {"profile", false}};
        warn(w, "activation_checkpointing configures deepspeed.checkpointing; the model must checkpoint each layer "
                "(HF: model.gradient_checkpointing_enable())");
        if (p.recompute == Recompute::selective)
            warn(w, "DeepSpeed has no selective (attention-only) recompute; checkpoint the attention core in the "
                    "model code, or use full recompute");
    }
    if (p.tp > 1) {
        c["tensor_parallel"] = {{"autotp_size", p.tp}};
        warn(w, "tensor parallelism: 'tensor_parallel.autotp_size' needs DeepSpeed AutoTP training (>= 0.16.4)");
    }
    if (p.pp > 1)
        warn(w, "pipeline parallelism is set in code: deepspeed.pipe.PipelineModule(num_stages=" + std::to_string(p.pp) +
                    ")");
    if (p.sp) warn(w, "sequence parallelism has no DeepSpeed config key (Megatron-DeepSpeed: --sequence-parallel)");
    // What the model and the script set, which a ds_config has no key for: said, so that nothing
    // the plan was judged with is lost on the way (memory --from reads the file at the default seq).
    warn(w, "the sequence length " + std::to_string(p.seq) + " is the training script's (its data's max length); "
            "preflight memory --from reads this file back with --seq " + std::to_string(p.seq));
    if (p.dropout > 0) warn(w, "dropout is set in the model's config (attention and hidden dropout), not the ds_config");
    if (p.attention == AttentionKind::eager)
        warn(w, "eager attention is the model's (Hugging Face: attn_implementation=\"eager\"), not a ds_config key");
    deepspeed_extensions(p, c, w);
    // zero/utils.py ZERO_SUPPORTED_OPTIMIZERS lacks torch.optim.SGD: engine.py asserts under ZeRO
    // without the key (the stage written, which offload may have raised to 1).
    if (p.optimizer == Optimizer::sgd && c["zero_optimization"]["stage"].get<int>() > 0)
        c["zero_allow_untested_optimizer"] = true;
    return c;
}

}  // namespace preflight
