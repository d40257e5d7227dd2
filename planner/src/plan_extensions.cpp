// Plan extension names, validation, model states per pipeline stage under fine-tuning,
// offload and expert parallelism, and context / expert parallelism buffers.
#include <algorithm>
#include <array>
#include <cmath>

#include "activations.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/extensions.hpp"
#include "preflight/planner/format.hpp"
#include "preflight/planner/limits.hpp"

namespace preflight {

std::string_view to_string(Finetune f) {
    switch (f) {
        case Finetune::full: return "full";
        case Finetune::lora: return "lora";
        case Finetune::qlora: return "qlora";
    }
    return "?";
}
std::string_view to_string(PpSchedule s) {
    switch (s) {
        case PpSchedule::one_f_one_b: return "1f1b";
        case PpSchedule::gpipe: return "gpipe";
        case PpSchedule::interleaved: return "interleaved";
    }
    return "?";
}
std::string_view to_string(Offload o) {
    switch (o) {
        case Offload::none: return "none";
        case Offload::optimizer: return "optimizer";
        case Offload::optimizer_and_params: return "params";
    }
    return "?";
}
std::optional<Finetune> parse_finetune(std::string_view s) {
    for (Finetune f : {Finetune::full, Finetune::lora, Finetune::qlora})
        if (s == to_string(f)) return f;
    return std::nullopt;
}
std::optional<PpSchedule> parse_pp_schedule(std::string_view s) {
    for (PpSchedule v : {PpSchedule::one_f_one_b, PpSchedule::gpipe, PpSchedule::interleaved})
        if (s == to_string(v)) return v;
    return std::nullopt;
}
std::optional<Offload> parse_offload(std::string_view s) {
    for (Offload v : {Offload::none, Offload::optimizer, Offload::optimizer_and_params})
        if (s == to_string(v)) return v;
    return std::nullopt;
}

namespace {
constexpr std::array<std::pair<std::string_view, unsigned>, 7> kTargetNames = {{{"q", lora_q},
                                                                                {"k", lora_k},
                                                                                {"v", lora_v},
                                                                                {"o", lora_o},
                                                                                {"gate", lora_gate},
                                                                                {"up", lora_up},
                                                                                {"down", lora_down}}};
}  // namespace

std::optional<unsigned> parse_lora_targets(std::string_view s) {
    if (s == "attention") return kLoraAttention;
    if (s == "all-linear") return kLoraAllLinear;
    unsigned mask = 0;
    while (!s.empty()) {
        const auto comma = s.find(',');
        std::string_view item = s.substr(0, comma);
        if (item.ends_with("_proj")) item.remove_suffix(5);  // accept q_proj, v_proj, ...
        bool found = false;
        for (const auto& [name, bit] : kTargetNames)
            if (item == name) {
                mask |= bit;
                found = true;
            }
        if (!found) return std::nullopt;
        if (comma == std::string_view::npos) break;
        s.remove_prefix(comma + 1);
    }
    if (mask == 0) return std::nullopt;
    return mask;
}

std::string lora_targets_to_string(unsigned targets) {
    std::string s;
    for (const auto& [name, bit] : kTargetNames)
        if (targets & bit) {  // appended piecewise: GCC 12 warns (-Wrestrict) on "," + string
            if (!s.empty()) s += ',';
            s += name;
        }
    return s;
}

std::string lora_target_modules_json(unsigned targets, HfModuleNames names) {
    std::string s = "[";
    auto add = [&](std::string_view n) { s += (s.size() > 1 ? ", \"" : "\"") + std::string(n) + "\""; };
    const bool qkv = (targets & (lora_q | lora_k | lora_v)) != 0;
    switch (names) {
        case HfModuleNames::gpt2:  // transformers GPT2Attention / GPT2MLP: fused c_attn for q, k, v
            if (qkv) add("c_attn");
            if (targets & lora_o) add("attn.c_proj");
            if (targets & (lora_gate | lora_up)) add("c_fc");
            if (targets & lora_down) add("mlp.c_proj");
            break;
        case HfModuleNames::mpt:  // transformers MptAttention (fused Wqkv, out_proj) / MptMLP (no gate)
            if (qkv) add("Wqkv");
            if (targets & lora_o) add("out_proj");
            if (targets & (lora_gate | lora_up)) add("up_proj");
            if (targets & lora_down) add("down_proj");
            break;
        case HfModuleNames::mixtral:  // MixtralBlockSparseTop2MLP: act(w1 x) * w3 x, then w2
            for (const auto& [name, bit] : kTargetNames)
                if ((targets & bit) && (bit & (lora_q | lora_k | lora_v | lora_o))) add(std::string(name) + "_proj");
            if (targets & lora_gate) add("w1");
            if (targets & lora_down) add("w2");
            if (targets & lora_up) add("w3");
            break;
        case HfModuleNames::phi3:  // transformers Phi3Attention (qkv_proj, o_proj) / Phi3MLP (gate_up_proj, down_proj)
            if (qkv) add("qkv_proj");
            if (targets & lora_o) add("o_proj");
            if (targets & (lora_gate | lora_up)) add("gate_up_proj");
            if (targets & lora_down) add("down_proj");
            break;
        case HfModuleNames::llama:
            for (const auto& [name, bit] : kTargetNames)
                if (targets & bit) add(std::string(name) + "_proj");
            break;
    }
    return s + "]";
}

namespace {
std::string str(std::int64_t v) { return std::to_string(v); }

std::int64_t padded_vocab_local(std::int64_t vocab, std::int64_t tp, std::int64_t pad_multiple) {
    const std::int64_t unit = std::max<std::int64_t>(pad_multiple, 1) * tp;
    return (vocab + unit - 1) / unit * unit / tp;
}

// The LoRA/QLoRA settings themselves (no layout enters).
void check_lora_settings(const Plan& p, const ModelConfig& m) {
    if (p.lora.rank < 1) throw InputError("--lora-rank", "must be a positive integer, got " + str(p.lora.rank));
    if (p.lora.rank > m.hidden)
        throw InputError("--lora-rank", str(p.lora.rank) + " exceeds the hidden size " + str(m.hidden));
    if ((p.lora.targets & kLoraAllLinear) == 0) throw InputError("--lora-targets", "names no projection");
    check_lora_size(m, p.lora);
    if (!(p.lora.alpha > 0 && std::isfinite(p.lora.alpha))) throw InputError("--lora-alpha", "must be a positive number");
    if (!(p.lora.dropout >= 0.0 && p.lora.dropout < 1.0)) throw InputError("--lora-dropout", "must be in [0, 1)");
    if (p.lora.quant_block < 1 || p.lora.quant_const_block < 1)
        throw InputError("--finetune", "quantisation block sizes must be positive");
    if (p.precision == Precision::fp8_mixed)
        throw InputError("--precision", "fp8-mixed has no LoRA/QLoRA recipe (PEFT trains in bf16/fp16/fp32)");
}

void check_vpp_bounds(const Plan& p, const ModelConfig& m) {
    if (p.vpp < 1) throw InputError("--vpp", "must be a positive integer, got " + str(p.vpp));
    // Bounds before any product below (limits.hpp: no int64 overflow past validation).
    if (p.vpp > m.layers)
        throw InputError("--vpp", str(p.vpp) + " model chunks per stage exceed the model's " + str(m.layers) + " layers");
}

void check_interleaved_chunks(const Plan& p) {
    if (p.pp_schedule == PpSchedule::interleaved && p.vpp < 2)
        throw InputError("--vpp", "the interleaved schedule needs --vpp >= 2 model chunks per stage");
}

void check_cp_bounds(const Plan& p) {
    if (p.cp < 1) throw InputError("--cp", "must be a positive integer, got " + str(p.cp));
    if (p.cp > limits::kMaxGpus)
        throw InputError("--cp", str(p.cp) + " exceeds the limit kMaxGpus = " + str(limits::kMaxGpus));
}

// ep's bounds and the model's experts (not the data-parallel ranks it shards over).
void check_ep_against_model(const Plan& p, const ModelConfig& m) {
    if (p.ep < 1) throw InputError("--ep", "must be a positive integer, got " + str(p.ep));
    if (p.ep > limits::kMaxGpus)
        throw InputError("--ep", str(p.ep) + " exceeds the limit kMaxGpus = " + str(limits::kMaxGpus));
    if (p.ep > 1) {
        if (!m.is_moe()) throw InputError("--ep", "expert parallelism needs a mixture-of-experts model");
        if (m.experts % p.ep != 0)
            throw InputError("--ep", str(p.ep) + " does not divide the model's " + str(m.experts) + " experts");
    }
}

void check_capacity_factor(const Plan& p, const ModelConfig& m) {
    if (!(p.moe_capacity_factor >= 1.0 && p.moe_capacity_factor <= 64.0))
        throw InputError("--moe-capacity-factor", "must be in [1, 64], got " + format_real(p.moe_capacity_factor));
    // A dense model routes nothing: the factor would change no figure, so it is no setting to accept.
    if (p.moe_capacity_factor != 1.0 && !m.is_moe())
        throw InputError("--moe-capacity-factor", "applies to mixture-of-experts models; " + m.name + " has no experts");
}

}  // namespace

void validate_extension_settings(const Plan& p, const ModelConfig& m) {
    if (p.finetune != Finetune::full) check_lora_settings(p, m);
    check_vpp_bounds(p, m);
    check_interleaved_chunks(p);
    check_cp_bounds(p);
    check_ep_against_model(p, m);
    check_capacity_factor(p, m);
}

void validate_plan_extensions(const Plan& p, const ModelConfig& m) {
    if (p.finetune != Finetune::full) {
        check_lora_settings(p, m);
        if (p.finetune == Finetune::qlora && p.tp > 1)
            throw InputError("--tp", "QLoRA's bitsandbytes 4-bit layers have no tensor parallelism; use --tp 1");
    }
    if (p.offload == Offload::optimizer_and_params && p.zero != 3)
        throw InputError("--offload", "'params' (ZeRO-Infinity parameter offload) needs --zero 3");
    check_vpp_bounds(p, m);
    if (p.pp_schedule == PpSchedule::interleaved) {
        if (p.pp < 2) throw InputError("--pp-schedule", "interleaved needs --pp > 1");
        check_interleaved_chunks(p);
        // Under the uneven split the stages' own counts must divide (validate_uneven_pipeline_split).
        if (!has_uneven_pipeline_split(p) && m.layers % (p.pp * p.vpp) != 0 &&
            !interleaved_counts_embedding_and_loss(p, m.layers))
            throw InputError("--vpp", "pp * vpp = " + str(p.pp * p.vpp) + " divides neither the model's " +
                                          str(m.layers) + " layers nor layers + 2 (Megatron-LM needs whole chunks; "
                                          "its embedding and loss can take one layer slot each)");
        if (p.grad_acc % p.pp != 0)
            throw InputError("--grad-acc", str(p.grad_acc) + " micro-batches is not a multiple of --pp " + str(p.pp) +
                                               " (Megatron-LM's interleaved schedule requires it)");
    } else if (p.vpp != 1) {
        throw InputError("--vpp", "needs --pp-schedule interleaved");
    }
    // With one stage there is no pipeline to schedule: Megatron-LM runs each micro-batch's
    // forward and backward back to back (forward_backward_no_pipelining), so a GPipe plan of
    // pp 1 would charge every micro-batch's activations for a schedule no framework runs.
    if (p.pp_schedule == PpSchedule::gpipe && p.pp < 2) throw InputError("--pp-schedule", "gpipe needs --pp > 1");
    check_cp_bounds(p);
    // dp * tp * pp is within kMaxGpus (limits::check_plan), so this product cannot overflow.
    if (p.gpus() > limits::kMaxGpus)
        throw InputError("--cp", "dp * tp * pp * cp = " + str(p.gpus()) + " GPUs exceeds the limit kMaxGpus = " +
                                     str(limits::kMaxGpus));
    if (p.cp > 1) {
        // Load-balanced ring attention splits each sequence into 2 * cp chunks (Megatron-LM
        // context parallelism, Transformer Engine's attention with cp).
        if (p.seq % (2 * p.cp) != 0)
            throw InputError("--cp", "sequence length " + str(p.seq) + " is not divisible by 2 * cp = " + str(2 * p.cp));
        if (p.attention != AttentionKind::flash)
            throw InputError("--attention", "context parallelism runs on flash attention kernels (ring or all-gather); use flash");
        if (p.sp && (p.seq / p.cp) % p.tp != 0)
            throw InputError("--sp", "seq / cp = " + str(p.seq / p.cp) + " is not divisible by --tp " + str(p.tp));
    }
    check_ep_against_model(p, m);
    if (const std::string why = ep_data_parallel_problem(p); !why.empty()) throw InputError("--ep", why);
    check_capacity_factor(p, m);
}

std::string ep_data_parallel_problem(const Plan& p) {
    if (p.ep <= 1 || (p.dp * p.cp) % p.ep == 0) return {};
    return str(p.ep) + " does not divide the data-parallel ranks dp * cp = " + str(p.dp * p.cp) +
           " (experts are sharded over data-parallel ranks)";
}

bool uses_extended_states(const Plan& p) {
    return p.finetune != Finetune::full || p.offload != Offload::none || p.ep > 1;
}

namespace {

// One copy of a tensor on one tensor-parallel rank (the vocabulary padded as the profile pads it).
std::int64_t tp_local_copy(const ParamTensor& t, const Plan& p, const FrameworkProfile& prof) {
    switch (t.split) {
        case TpSplit::replicated: return t.rows * t.cols;
        case TpSplit::column: return t.rows / p.tp * t.cols;
        case TpSplit::row: return t.rows * (t.cols / p.tp);
        case TpSplit::vocab: return padded_vocab_local(t.rows, p.tp, prof.vocab_pad_multiple) * t.cols;
    }
    return t.rows * t.cols;
}

}  // namespace

StageStates extended_stage_states(const ModelConfig& m, const Plan& p, const FrameworkProfile& prof,
                                  std::int64_t layers, bool first, bool last) {
    const PrecisionBytes pb = profile_precision_bytes(p.precision, prof);
    const bool lora = p.finetune != Finetune::full;
    const bool qlora = p.finetune == Finetune::qlora;
    const int moment_bytes = optimizer_state_bytes(prof, p.precision, p.optimizer, activations::runs_amp(prof, p));
    StageStates out;
    ModelStateBytes& g = out.gpu;
    std::int64_t opt_elements = 0;  // elements of the optimizer partition (for the host copy)
    // DeepSpeed with its optimizer offloaded under ZeRO-2/3 moves each reduced gradient straight
    // into the fp32 host partition (stage_1_and_2.py / stage3.py: self.device 'cpu' with offload;
    // async_inplace_copy_grad_to_fp32_buffer_from_gpu): no gradient partition stays on the GPU.
    const bool host_grads = prof.deepspeed_zero_optimizer && p.offload != Offload::none && p.zero >= 2;
    // Shard of n elements over a ZeRO group of `ranks` (sharded when `on`).
    auto part = [](std::int64_t n, std::int64_t ranks, bool on) { return on ? shard_elements(n, ranks) : n; };
    for (const ParamTensor& t : param_tensors(m)) {
        std::int64_t count = 0;
        switch (t.place) {
            case TensorPlace::embedding:
                count = (first ? 1 : 0) + (last && !first && m.tied_embeddings && t.name == "word_embedding" ? 1 : 0);
                break;
            case TensorPlace::layer: count = layers; break;
            case TensorPlace::final_norm:
            case TensorPlace::lm_head: count = last ? 1 : 0; break;
        }
        if (count == 0) continue;
        // Expert copies split over ep ranks; their ZeRO group is the dp / ep expert-data-parallel ranks.
        const bool expert = t.copies > 1;
        const std::int64_t copies = expert ? t.copies / p.ep : t.copies;
        const std::int64_t group = expert ? p.dp / p.ep : p.dp;
        const std::int64_t per_copy = tp_local_copy(t, p, prof);
        const std::int64_t n = count * copies * per_copy;
        if (!lora) {
            g.weights += part(n, group, p.zero == 3) * pb.weight;
            g.gradients += host_grads ? 0 : part(n, group, p.zero >= 2) * (pb.gradient + pb.gradient_accum);
            const std::int64_t o = part(n, group, p.zero >= 1);
            g.master_weights += o * pb.master;
            g.optimizer_states += o * moment_bytes;
            opt_elements += o;
            out.trainable_params += n;
            continue;
        }
        // Frozen base weight: NF4 (QLoRA decoder linears) or the weight dtype; no gradient,
        // master copy or optimizer state. ZeRO-3 partitions frozen parameters too.
        std::int64_t base_bytes = 0;
        if (qlora && qlora_quantizes(m, t))
            base_bytes = count * copies * nf4_bytes(per_copy, p.lora).total();
        else
            base_bytes = n * (qlora && p.lora.fp32_non_quantized ? 4 : pb.weight);
        g.weights += p.zero == 3 ? (base_bytes + group - 1) / group : base_bytes;
        if (t.place == TensorPlace::layer && t.gemm_weight) {
            // Adapters: fp32 weights (PEFT autocast_adapter_dtype=True upcasts bf16/fp16
            // adapters), fp32 gradients, the optimizer's fp32 moments, no separate master.
            const std::int64_t in = t.split == TpSplit::row ? t.cols / p.tp : t.cols;
            const std::int64_t outd = t.split == TpSplit::column ? t.rows / p.tp : t.rows;
            const std::int64_t a = count * copies * p.lora.rank * (in + outd);  // A: r x in, B: out x r
            // Only targeted projections carry adapters.
            const bool targeted = (lora_target_bit(t.name) & p.lora.targets) != 0;
            if (!targeted) continue;
            g.weights += part(a, group, p.zero == 3) * 4;
            g.gradients += host_grads ? 0 : part(a, group, p.zero >= 2) * 4;
            const std::int64_t o = part(a, group, p.zero >= 1);
            g.optimizer_states += o * moment_bytes;
            opt_elements += o;
            out.trainable_params += a;
        }
    }
    if (p.offload != Offload::none) {
        // Ren et al. 2021, sec. 4.1: master partition, moments, gradients on the host (fp32; bf16 by a bf16 master).
        out.host_bytes = opt_elements * (2 * (pb.master > 0 ? pb.master : 4) + moment_bytes);
        g.master_weights = 0;
        g.optimizer_states = 0;
        if (p.offload == Offload::optimizer_and_params) {
            out.host_bytes += g.weights;
            g.weights = 0;
        }
    }
    return out;
}

Plan context_parallel_rank_plan(const Plan& p) {
    if (p.cp <= 1) return p;
    Plan r = p;
    r.cp_full_seq = p.seq;
    r.seq = p.seq / p.cp;
    r.dp = p.dp * p.cp;
    r.cp = 1;
    return r;
}

std::int64_t cp_ring_buffer_bytes(const ModelConfig& m, const Plan& rank_view) {
    if (rank_view.cp_full_seq <= rank_view.seq) return 0;
    // Ring attention (Liu et al. 2023; Megatron-LM / Transformer Engine context parallelism):
    // the K and V chunk being computed on and the one arriving (double buffer); the backward
    // also circulates dK and dV, four chunk-sized tensors each way.
    const std::int64_t chunk = rank_view.seq * rank_view.mbs * m.kv_width() / rank_view.tp *
                               precision_bytes(rank_view.precision).activation;
    return 2 * 2 * 2 * chunk;
}

std::int64_t cp_gathered_kv_bytes(const ModelConfig& m, const Plan& rank_view) {
    if (rank_view.cp_full_seq <= rank_view.seq) return 0;
    // [b, cp x s, 2 x kv_width / tp] at the activation dtype, two of them.
    return 2 * rank_view.mbs * rank_view.cp_full_seq * 2 * m.kv_width() / rank_view.tp *
           precision_bytes(rank_view.precision).activation;
}

std::int64_t ep_all_to_all_buffer_bytes(const ModelConfig& m, const Plan& p) {
    if (p.ep <= 1 || !m.is_moe()) return 0;
    // Dispatch: the permuted tokens sent and the tokens received for the local experts, at
    // the capacity-factor share (stated assumption for the busiest rank).
    const double routed = static_cast<double>(p.seq * p.mbs * m.experts_per_token) * p.moe_capacity_factor;
    return 2 * static_cast<std::int64_t>(std::llround(routed)) * m.hidden * precision_bytes(p.precision).activation;
}

std::int64_t extension_transient_bytes(const ModelConfig& m, const Plan& p) {
    return qlora_dequant_bytes(m, p) + cp_ring_buffer_bytes(m, p) + ep_all_to_all_buffer_bytes(m, p);
}

}  // namespace preflight
