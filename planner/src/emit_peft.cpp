// A fine-tuning plan as PEFT and Hugging Face Trainer settings: peft.LoraConfig,
// transformers.BitsAndBytesConfig and TrainingArguments keys, with the model class's own module
// names for target_modules (plan_extensions.hpp HfModuleNames).
#include "preflight/planner/emit.hpp"

#include "emit_warn.hpp"
#include "preflight/planner/extensions.hpp"

namespace preflight {

using nlohmann::json;

using emit_detail::warn;

namespace {

// peft.LoraConfig fields, with the model class's own module names (target_modules) and, for
// experts held as parameter tensors, PEFT's target_parameters.
json lora_config(const ModelConfig& m, const Plan& p, std::vector<std::string>* w) {
    const HfModuleNames names = m.architecture == "MPTForCausalLM" ? HfModuleNames::mpt
                                : m.family == ModelFamily::gpt2    ? HfModuleNames::gpt2
                                : m.family == ModelFamily::mixtral ? HfModuleNames::mixtral
                                : m.family == ModelFamily::phi3    ? HfModuleNames::phi3
                                                                   : HfModuleNames::llama;
    const unsigned expert_bits = lora_gate | lora_up | lora_down;
    const bool gpt_oss = m.family == ModelFamily::gpt_oss;  // its experts: parameter tensors, not nn.Linear
    json targets = json::parse(lora_target_modules_json(gpt_oss ? p.lora.targets & ~expert_bits : p.lora.targets, names));
    if (names == HfModuleNames::mixtral && (p.lora.targets & expert_bits) != 0)
        warn(w, "Mixtral's experts: transformers releases with MixtralBlockSparseTop2MLP name them w1 (gate), w3 "
                "(up) and w2 (down), as emitted; releases whose MixtralExperts hold them as fused parameter tensors "
                "(gate_up_proj, down_proj) need PEFT's target_parameters instead");
    if ((m.family == ModelFamily::qwen3_moe || m.family == ModelFamily::olmoe) && (p.lora.targets & expert_bits) != 0)
        warn(w, std::string(m.family == ModelFamily::olmoe ? "OLMoE's experts: transformers releases with an OlmoeMLP"
                                                           : "Qwen3-MoE's experts: transformers releases with a Qwen3MoeMLP") +
                    " per expert name them gate_proj, up_proj and down_proj, as emitted (the router, mlp.gate, is "
                    "not adapted); releases whose experts hold fused parameter tensors need PEFT's target_parameters "
                    "instead");
    json lora = {{"r", p.lora.rank},          {"lora_alpha", p.lora.alpha}, {"lora_dropout", p.lora.dropout},
                 {"target_modules", targets}, {"bias", "none"},             {"task_type", "CAUSAL_LM"}};
    // PEFT's target_parameters (ParamWrapper, peft >= 0.17) adapts a 3-D expert tensor with one rank-r
    // pair per expert, the count planned.
    if (gpt_oss && (p.lora.targets & expert_bits) != 0) {
        json parameters = json::array();
        if (p.lora.targets & (lora_gate | lora_up)) parameters.push_back("mlp.experts.gate_up_proj");
        if (p.lora.targets & lora_down) parameters.push_back("mlp.experts.down_proj");
        lora["target_parameters"] = parameters;
    }
    const unsigned qkv = p.lora.targets & (lora_q | lora_k | lora_v);
    if (m.fused_qkv && qkv != 0 && qkv != (lora_q | lora_k | lora_v))
        warn(w, std::string(names == HfModuleNames::mpt    ? "MPT fuses q, k and v in Wqkv"
                            : names == HfModuleNames::phi3 ? "Phi-3 fuses q, k and v in qkv_proj"
                                                           : "GPT-2 fuses q, k and v in c_attn") +
                    ": PEFT adapts all three together, as planned");
    const unsigned gate_up = p.lora.targets & (lora_gate | lora_up);
    if (m.fused_gate_up && gate_up != 0 && gate_up != (lora_gate | lora_up))
        warn(w, std::string(gpt_oss ? "gpt-oss's experts fuse" : "Phi-3 fuses") +
                    " gate and up in gate_up_proj: PEFT adapts both together, as planned");
    return lora;
}

}  // namespace

json peft_config(const ModelConfig& m, const Plan& p, std::vector<std::string>* w) {
    json j;
    if (p.finetune == Finetune::full)
        warn(w, "a full fine-tune has no PEFT config: only the Trainer settings are emitted");
    else
        j["lora_config"] = lora_config(m, p, w);
    if (p.finetune == Finetune::qlora) {
        // transformers.BitsAndBytesConfig (QLoRA's recipe: NF4, double quantisation, bf16 compute).
        j["bnb_config"] = {{"load_in_4bit", true},
                           {"bnb_4bit_quant_type", "nf4"},
                           {"bnb_4bit_use_double_quant", p.lora.double_quant},
                           {"bnb_4bit_compute_dtype", p.precision == Precision::fp16_mixed ? "float16" : "bfloat16"}};
        j["prepare_model_for_kbit_training"] = {{"use_gradient_checkpointing", p.recompute == Recompute::full}};
    }
    // transformers.TrainingArguments: bf16 / fp16 are autocast with fp32 master weights.
    if (p.precision == Precision::fp8_mixed)
        warn(w, "the Trainer has no fp8 switch: bf16 is emitted (autocast, fp32 master weights); fp8 GEMMs need "
                "Transformer Engine or torchao Float8 through accelerate (mixed_precision='fp8')");
    if (p.precision == Precision::bf16)
        warn(w, "the Trainer's bf16 keeps fp32 master weights: the plan's pure-bf16 recipe (no master copy) is "
                "emitted as bf16-mixed, which holds more memory than planned");
    json t{{"per_device_train_batch_size", p.mbs},
           {"gradient_accumulation_steps", p.grad_acc},
           {"gradient_checkpointing", p.recompute == Recompute::full},
           {"bf16", p.precision == Precision::bf16_mixed || p.precision == Precision::bf16 ||
                        p.precision == Precision::bf16_mixed_fp32_grads || p.precision == Precision::fp8_mixed},
           {"fp16", p.precision == Precision::fp16_mixed},
           {"optim", p.optimizer == Optimizer::adamw ? "adamw_torch" : "sgd"}};
    if (p.recompute == Recompute::selective)
        warn(w, "Hugging Face checkpoints whole decoder layers only: selective recompute has no Trainer switch");
    if (p.optimizer == Optimizer::sgd)
        warn(w, "the Trainer's \"sgd\" is torch.optim.SGD with the learning rate only (no momentum buffer); the plan "
                "holds one: set optim_args \"momentum=0.9\" (or the momentum you train with)");
    if (p.dp > 1 || p.tp > 1 || p.pp > 1 || p.cp > 1)
        warn(w, "launch on " + std::to_string(p.gpus()) + " GPUs with torchrun / accelerate (data parallel " +
                    std::to_string(p.dp) + "); tensor, pipeline and context parallelism are not Trainer settings");
    if (p.offload != Offload::none || p.zero > 0)
        warn(w, "ZeRO / offload: pass the DeepSpeed config (--emit deepspeed) as TrainingArguments.deepspeed");
    j["training_arguments"] = t;
    j["max_length"] = p.seq;  // TRL SFTConfig's name (max_seq_length before TRL 0.20)
    return j;
}

}  // namespace preflight
