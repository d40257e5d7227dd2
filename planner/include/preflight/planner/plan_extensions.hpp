// Plan axes beyond pre-training's dp/tp/pp/ZeRO: parameter-efficient fine-tuning
// (LoRA, QLoRA), CPU offload (ZeRO-Offload / ZeRO-Infinity), pipeline schedules
// (GPipe, 1F1B, interleaved 1F1B), context parallelism and expert parallelism.
// Every default reproduces the pre-training plan exactly (full fine-tune, no offload,
// 1F1B, cp = ep = 1).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace preflight {

enum class Finetune { full, lora, qlora };
// GPipe (Huang et al. 2019): all forwards then all backwards. 1F1B (PipeDream-Flush,
// Narayanan et al. 2021, sec. 2.2.1). Interleaved 1F1B: v model chunks per device
// (Narayanan et al. 2021, sec. 2.2.2).
enum class PpSchedule { one_f_one_b, gpipe, interleaved };
// ZeRO-Offload (Ren et al. 2021): fp32 master weights, optimizer moments and the fp32
// gradients in host memory, the optimizer step on the CPU. ZeRO-Infinity
// (Rajbhandari et al. 2021): the 16-bit parameters in host memory as well (ZeRO-3 only).
enum class Offload { none, optimizer, optimizer_and_params };

// LoRA target projections (Hugging Face module names), a bit mask.
enum LoraTarget : unsigned {
    lora_q = 1u << 0,
    lora_k = 1u << 1,
    lora_v = 1u << 2,
    lora_o = 1u << 3,
    lora_gate = 1u << 4,  // GPT-2: fc1 (c_fc)
    lora_up = 1u << 5,    // GPT-2: fc1 (c_fc)
    lora_down = 1u << 6,  // GPT-2: fc2 (c_proj of the MLP)
};
inline constexpr unsigned kLoraAttention = lora_q | lora_k | lora_v | lora_o;
inline constexpr unsigned kLoraAllLinear = kLoraAttention | lora_gate | lora_up | lora_down;
// PEFT's default when LoraConfig(target_modules=None): the model type's entry in
// TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING, ["q_proj", "v_proj"] for Llama,
// Mistral, Qwen2 and Mixtral (peft/utils/constants.py).
inline constexpr unsigned kLoraPeftDefault = lora_q | lora_v;

struct LoraSettings {
    // PEFT LoraConfig defaults: r = 8, lora_alpha = 8, lora_dropout = 0.0.
    std::int64_t rank = 8;
    double alpha = 8;
    unsigned targets = kLoraPeftDefault;
    double dropout = 0.0;
    // QLoRA (Dettmers et al. 2023, sec. 3): NF4 blocks of 64 weights, each with an absmax
    // constant; double quantisation stores those constants in 8 bits, in blocks of 256
    // with one fp32 second-level constant.
    std::int64_t quant_block = 64;
    std::int64_t quant_const_block = 256;
    bool double_quant = true;
    // peft.prepare_model_for_kbit_training casts every parameter that is not 4-bit (the
    // embeddings, norms and the LM head) to fp32 (peft/utils/other.py).
    bool fp32_non_quantized = true;
};

std::string_view to_string(Finetune f);
std::string_view to_string(PpSchedule s);
std::string_view to_string(Offload o);
std::optional<Finetune> parse_finetune(std::string_view s);
std::optional<PpSchedule> parse_pp_schedule(std::string_view s);
std::optional<Offload> parse_offload(std::string_view s);
// "q,k,v,o" style lists; "attention" (q,k,v,o) and "all-linear" are accepted as sets.
std::optional<unsigned> parse_lora_targets(std::string_view s);
// "q,v" (canonical order q,k,v,o,gate,up,down).
std::string lora_targets_to_string(unsigned targets);
// How a Hugging Face model class names its projections, for PEFT's target_modules: Llama's
// q_proj ... down_proj (Mistral, Qwen2), GPT-2's fused c_attn / c_proj / c_fc, MPT's Wqkv /
// out_proj / up_proj / down_proj, Mixtral's attention as Llama's and its experts' w1 / w3 / w2,
// Phi-3's fused qkv_proj / o_proj / gate_up_proj / down_proj.
enum class HfModuleNames { llama, gpt2, mpt, mixtral, phi3 };
// Hugging Face module names (["q_proj", "v_proj"]) for PEFT's LoraConfig.
std::string lora_target_modules_json(unsigned targets, HfModuleNames names);

}  // namespace preflight
