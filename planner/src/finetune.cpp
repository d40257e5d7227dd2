// LoRA (Hu et al. 2021) and QLoRA (Dettmers et al. 2023) as Hugging Face PEFT and
// bitsandbytes run them: frozen base weights (bf16, or NF4 with double-quantised block
// constants), fp32 adapters with their gradients and optimizer moments, the adapters'
// saved tensors, and QLoRA's dequantised weight during each GEMM.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "preflight/planner/error.hpp"
#include "preflight/planner/extensions.hpp"
#include "preflight/planner/limits.hpp"

namespace preflight {

namespace {

}  // namespace

unsigned lora_target_bit(std::string_view tensor) {
    if (tensor == "q_proj.weight") return lora_q;
    if (tensor == "k_proj.weight") return lora_k;
    if (tensor == "v_proj.weight") return lora_v;
    if (tensor == "o_proj.weight") return lora_o;
    if (tensor == "gate_proj.weight") return lora_gate;
    if (tensor == "up_proj.weight") return lora_up;
    if (tensor == "down_proj.weight") return lora_down;
    if (tensor == "qkv_proj.weight") return lora_q | lora_k | lora_v;  // GPT-2's c_attn, Phi-3's qkv_proj
    if (tensor == "gate_up_proj.weight") return lora_gate | lora_up;    // Phi-3's gate_up_proj
    if (tensor == "fc1.weight") return lora_gate | lora_up;  // GPT-2's c_fc
    if (tensor == "fc2.weight") return lora_down;            // GPT-2's MLP c_proj
    return 0;
}

namespace {

// Adapter elements of one targeted weight (rows = output dim, cols = input dim) on one
// tensor-parallel rank: A is r x in, B is out x r (PEFT lora_A / lora_B).
std::int64_t adapter_elements(const ParamTensor& t, std::int64_t rank, std::int64_t tp) {
    const std::int64_t in = t.split == TpSplit::row ? t.cols / tp : t.cols;
    const std::int64_t out = t.split == TpSplit::column ? t.rows / tp : t.rows;
    return t.copies * rank * (in + out);
}

bool is_targeted(const ParamTensor& t, unsigned targets) {
    return t.place == TensorPlace::layer && t.gemm_weight && (lora_target_bit(t.name) & targets) != 0;
}

// Stable names for the saved tensors the adapters add (one per target kind).
struct AdapterNames {
    std::string_view intermediate, dropout_out, dropout_mask;
};
AdapterNames adapter_names(unsigned bit) {
    switch (bit) {
        case lora_q: return {"LoRA q: A output (rank r)", "LoRA q: dropout output", "LoRA q: dropout mask"};
        case lora_k: return {"LoRA k: A output (rank r)", "LoRA k: dropout output", "LoRA k: dropout mask"};
        case lora_v: return {"LoRA v: A output (rank r)", "LoRA v: dropout output", "LoRA v: dropout mask"};
        case lora_o: return {"LoRA o: A output (rank r)", "LoRA o: dropout output", "LoRA o: dropout mask"};
        case lora_gate: return {"LoRA gate: A output (rank r)", "LoRA gate: dropout output", "LoRA gate: dropout mask"};
        case lora_up: return {"LoRA up: A output (rank r)", "LoRA up: dropout output", "LoRA up: dropout mask"};
        case lora_gate | lora_up:
            return {"LoRA fc1: A output (rank r)", "LoRA fc1: dropout output", "LoRA fc1: dropout mask"};
        case lora_q | lora_k | lora_v:
            return {"LoRA qkv: A output (rank r)", "LoRA qkv: dropout output", "LoRA qkv: dropout mask"};
        default: return {"LoRA down: A output (rank r)", "LoRA down: dropout output", "LoRA down: dropout mask"};
    }
}

}  // namespace

std::int64_t lora_params_per_layer(const ModelConfig& model, const LoraSettings& lora, std::int64_t tp) {
    std::int64_t n = 0;
    for (const ParamTensor& t : param_tensors(model))
        if (is_targeted(t, lora.targets)) n += adapter_elements(t, lora.rank, tp);
    return n;
}

std::int64_t lora_params(const ModelConfig& model, const LoraSettings& lora) {
    return model.layers * lora_params_per_layer(model, lora, 1);
}

void check_lora_size(const ModelConfig& model, const LoraSettings& lora) {
    // Same count as lora_params (copies x r x (in + out) per targeted weight, per layer), in
    // long double: with experts' weights targeted it can pass 2^63 for ranks <= hidden.
    long double per_layer = 0;
    for (const ParamTensor& t : param_tensors(model))
        if (is_targeted(t, lora.targets))
            per_layer += static_cast<long double>(t.copies) * static_cast<long double>(lora.rank) *
                         (static_cast<long double>(t.rows) + static_cast<long double>(t.cols));
    const long double total = per_layer * static_cast<long double>(model.layers);
    if (total > static_cast<long double>(limits::kMaxParams)) {
        char count[32];
        std::snprintf(count, sizeof count, "%.3g", static_cast<double>(total));
        throw InputError("--lora-rank", "rank " + std::to_string(lora.rank) + " on " +
                                            lora_targets_to_string(lora.targets) + " of " + model.name + " gives " +
                                            count +
                                            " adapter parameters, beyond the limit kMaxParams = " +
                                            std::to_string(limits::kMaxParams) + ": use a smaller --lora-rank");
    }
}

Nf4Bytes nf4_bytes(std::int64_t numel, const LoraSettings& lora) {
    // Dettmers et al. 2023, sec. 3: 4-bit NormalFloat codes, two per byte; one absmax per
    // block of 64 (32 bits, 0.5 bit per parameter), or with double quantisation an 8-bit
    // absmax plus one fp32 constant per 256 absmax values (8/64 + 32/(64*256) = 0.127 bit).
    Nf4Bytes b;
    b.weights = (numel + 1) / 2;
    const std::int64_t blocks = (numel + lora.quant_block - 1) / lora.quant_block;
    b.constants = lora.double_quant ? blocks + (blocks + lora.quant_const_block - 1) / lora.quant_const_block * 4
                                    : blocks * 4;
    return b;
}

bool qlora_quantizes(const ModelConfig& model, const ParamTensor& t) {
    const bool parameter_tensor = model.family == ModelFamily::gpt_oss && t.copies > 1;  // GptOssExperts
    return t.place == TensorPlace::layer && t.gemm_weight && !parameter_tensor;
}

FrozenBase frozen_base(const ModelConfig& model, const Plan& plan) {
    FrozenBase f;
    const bool qlora = plan.finetune == Finetune::qlora;
    const int other_bytes = qlora && plan.lora.fp32_non_quantized ? 4 : precision_bytes(plan.precision).weight;
    for (const ParamTensor& t : param_tensors(model)) {
        const std::int64_t count = t.place == TensorPlace::layer ? model.layers : 1;
        // bitsandbytes via transformers quantises the decoder layers' nn.Linear weights; the
        // embeddings, the LM head (kept in 16 bits by get_keys_to_not_convert), norms and biases stay.
        if (qlora && qlora_quantizes(model, t)) {
            f.quantized_params += count * t.numel();
            f.quantized_bytes += count * t.copies * nf4_bytes(t.rows * t.cols, plan.lora).total();
        } else {
            f.other_params += count * t.numel();
            f.other_bytes += count * t.numel() * other_bytes;
        }
    }
    return f;
}

std::int64_t qlora_dequant_bytes(const ModelConfig& model, const Plan& plan) {
    if (plan.finetune != Finetune::qlora) return 0;
    // bitsandbytes MatMul4Bit: F.dequantize_4bit(B) materialises the whole weight in the
    // compute dtype (bf16) for the forward GEMM and again for the input-gradient GEMM.
    std::int64_t largest = 0;
    for (const ParamTensor& t : param_tensors(model))
        if (qlora_quantizes(model, t)) largest = std::max(largest, t.rows * t.cols / plan.tp);
    return largest * 2;
}

void adjust_layer_inventory(const ModelConfig& model, const Plan& plan, std::vector<ActivationTensor>& v) {
    const PrecisionBytes pb = precision_bytes(plan.precision);
    const std::int64_t sb = plan.seq * plan.mbs;
    const std::int64_t routed = sb * (model.is_moe() ? model.experts_per_token : 1);
    if (model.is_moe() && plan.moe_capacity_factor != 1.0) {
        // Stated assumption: the busiest expert (what its rank must hold) receives
        // capacity_factor times the balanced share of routed tokens.
        static constexpr std::array<std::string_view, 7> kRouted = {
            "dispatched tokens (expert GEMM input)", "gate projection output", "up projection output",
            "down GEMM input (silu(gate)*up)", "GeLU input (fc1 output)", "fc2 GEMM input (GeLU output)",
            "expert outputs (for weighted combine)"};
        for (auto& t : v)
            if (std::find(kRouted.begin(), kRouted.end(), t.name) != kRouted.end())
                t.bytes = static_cast<std::int64_t>(std::llround(static_cast<double>(t.bytes) * plan.moe_capacity_factor));
    }
    if (plan.finetune == Finetune::full) return;
    const unsigned tg = plan.lora.targets;
    // A frozen projection's weight needs no gradient, so autograd does not save its input
    // (PyTorch's generated mm/addmm backward saves `self` only when the weight's gradient is
    // computed; bitsandbytes MatMul4Bit saves only the 4-bit weight). An input stays when an
    // adapter (lora_A) reads it, or another op saves it (flash attention keeps its output).
    auto drop = [&](std::string_view name) {
        std::erase_if(v, [&](const ActivationTensor& t) { return t.name == name; });
    };
    if (!(tg & (lora_q | lora_k | lora_v))) drop("QKV GEMM input (norm output)");
    if (!(tg & lora_o) && plan.attention == AttentionKind::eager) drop("attention output (out-proj GEMM input)");
    if (!(tg & (lora_gate | lora_up))) {
        drop("MLP GEMM input (norm output)");
        drop("dispatched tokens (expert GEMM input)");
    }
    if (!(tg & lora_down)) {
        drop("down GEMM input (silu(gate)*up)");
        drop("fc2 GEMM input (GeLU output)");
    }
    // lora_B saves lora_A's output (tokens x r); with lora_dropout > 0 every adapter has its
    // own nn.Dropout, whose output (lora_A's input) and 1-byte mask are saved.
    for (const ParamTensor& t : param_tensors(model)) {
        if (!is_targeted(t, tg)) continue;
        const AdapterNames n = adapter_names(lora_target_bit(t.name));
        const std::int64_t tokens = t.copies > 1 ? routed : sb;
        const std::int64_t in = t.split == TpSplit::row ? t.cols / plan.tp : t.cols;
        v.push_back({n.intermediate, tokens * plan.lora.rank * pb.activation, false});
        if (plan.lora.dropout > 0) {
            v.push_back({n.dropout_out, tokens * in * pb.activation, false});
            v.push_back({n.dropout_mask, tokens * in, false});
        }
    }
}

}  // namespace preflight
