// Flags of the plan extensions: LoRA / QLoRA fine-tuning, CPU offload, pipeline
// schedules, context and expert parallelism.
#include "plan_flags.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/plan_extensions.hpp"

namespace preflight::cli {

void add_extension_flags(CLI::App& app, PlanFlags& f) {
    auto* g = "Fine-tuning, offload, schedules, context/expert parallelism";
    app.add_option("--finetune", f.finetune,
                   "full (default: every weight trained, pre-training accounting) | lora (frozen 16-bit base + "
                   "adapters, Hu et al. 2021) | qlora (frozen NF4 4-bit base with double-quantised constants, "
                   "Dettmers et al. 2023)")
        ->check(CLI::IsMember({"full", "lora", "qlora"}))
        ->group(g);
    app.add_option("--lora-rank", f.lora_rank, "LoRA rank r (default 8, PEFT LoraConfig's)")->group(g);
    app.add_option("--lora-alpha", f.lora_alpha,
                   "LoRA alpha; the update is scaled by alpha / r (default 8, PEFT's; no effect on memory)")
        ->group(g);
    app.add_option("--lora-targets", f.lora_targets,
                   "Projections with adapters: comma list of q,k,v,o,gate,up,down, or attention (= q,k,v,o) or "
                   "all-linear (QLoRA paper). Default q,v: PEFT's default target_modules for Llama/Mistral/Qwen2")
        ->group(g);
    app.add_option("--lora-dropout", f.lora_dropout,
                   "Dropout on each adapter's input (default 0, PEFT's); > 0 keeps a copy of the input and a mask per "
                   "adapter")
        ->group(g);
    app.add_option("--offload", f.offload,
                   "none (default) | optimizer (ZeRO-Offload: fp32 master weights, moments and fp32 gradients in host "
                   "memory, CPU optimizer step) | params (ZeRO-Infinity: the 16-bit parameters too; needs --zero 3)")
        ->check(CLI::IsMember({"none", "optimizer", "params"}))
        ->group(g);
    app.add_option("--pp-schedule", f.pp_schedule,
                   "Pipeline schedule with --pp > 1: 1f1b (default; stage i holds min(p-i, m) micro-batches) | gpipe "
                   "(all m held) | interleaved (v chunks per stage, bubble (p-1)/(v m); Narayanan et al. 2021)")
        ->check(CLI::IsMember({"1f1b", "gpipe", "interleaved"}))
        ->group(g);
    app.add_option("--vpp", f.vpp,
                   "Model chunks per pipeline stage for --pp-schedule interleaved (default 2 there, else 1; "
                   "Megatron --num-layers-per-virtual-pipeline-stage = layers / (pp * vpp))")
        ->group(g);
    app.add_option("--cp", f.cp,
                   "Context-parallel degree: each sequence split over cp GPUs, ring attention exchanging K/V "
                   "(default 1; GPUs = dp * tp * pp * cp)")
        ->group(g);
    app.add_option("--ep", f.ep, "Expert-parallel degree for MoE models: experts split over ep of the dp ranks (default 1)")
        ->group(g);
    app.add_option("--moe-capacity-factor", f.moe_capacity_factor,
                   "Assumed load of the busiest expert over the balanced load (router imbalance; default 1.0 = "
                   "perfectly balanced)")
        ->group(g);
}

void apply_extension_flags(const PlanFlags& f, Plan& p) {
    if (f.finetune) p.finetune = *parse_finetune(*f.finetune);
    if (f.lora_rank) p.lora.rank = *f.lora_rank;
    if (f.lora_alpha) p.lora.alpha = *f.lora_alpha;
    if (f.lora_dropout) p.lora.dropout = *f.lora_dropout;
    if (f.lora_targets) {
        const auto t = parse_lora_targets(*f.lora_targets);
        if (!t)
            throw InputError("--lora-targets", "'" + *f.lora_targets +
                                                   "' is not a comma list of q,k,v,o,gate,up,down (or attention, all-linear)");
        p.lora.targets = *t;
    }
    const bool lora_flag = f.lora_rank || f.lora_alpha || f.lora_dropout || f.lora_targets;
    if (lora_flag && p.finetune == Finetune::full)
        throw InputError("--lora-rank", "LoRA flags need --finetune lora or qlora");
    if (f.offload) p.offload = *parse_offload(*f.offload);
    if (f.pp_schedule) p.pp_schedule = *parse_pp_schedule(*f.pp_schedule);
    p.vpp = f.vpp.value_or(p.pp_schedule == PpSchedule::interleaved ? 2 : 1);
    if (f.cp) p.cp = *f.cp;
    if (f.ep) p.ep = *f.ep;
    if (f.moe_capacity_factor) p.moe_capacity_factor = *f.moe_capacity_factor;
}

}  // namespace preflight::cli

#include <cstdio>
#include <ostream>

#include "format.hpp"
#include "preflight/planner/extensions.hpp"

namespace preflight::cli {

void pin_extension_flags(const PlanFlags& f, PlanPins& pins) {
    Plan p;
    apply_extension_flags(f, p);  // parses and checks the values
    pins.finetune = p.finetune;
    pins.lora = p.lora;
    if (f.offload) pins.offload = p.offload;
    if (f.pp_schedule) pins.pp_schedule = p.pp_schedule;
    if (f.vpp) pins.vpp = p.vpp;
    if (f.cp) pins.cp = p.cp;
    if (f.ep) pins.ep = p.ep;
    pins.moe_capacity_factor = p.moe_capacity_factor;
}

namespace {
std::string fixed(double v, int digits) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.*f", digits, v);
    return buf;
}
}  // namespace

void print_extension_memory_lines(std::ostream& os, const ModelConfig& model, const Plan& plan,
                                  const MemoryReport& memory) {
    if (plan.finetune != Finetune::full) {
        const std::int64_t adapters = lora_params(model, plan.lora);
        const FrozenBase base = frozen_base(model, plan);
        os << "fine-tuning:           " << to_string(plan.finetune) << ", rank " << plan.lora.rank << " on "
           << lora_targets_to_string(plan.lora.targets) << ": " << group_digits(adapters) << " trainable adapter "
           << "parameters (" << fixed(100.0 * static_cast<double>(adapters) / static_cast<double>(memory.params.total), 3)
           << " % of " << format_count(memory.params.total) << "), fp32 weights + gradients + "
           << to_string(plan.optimizer) << " states\n";
        os << "frozen base (model):   " << format_bytes(base.total_bytes());
        if (plan.finetune == Finetune::qlora)
            os << " = NF4 " << format_bytes(base.quantized_bytes) << " (" << group_digits(base.quantized_params)
               << " weights, 4 bits + block constants) + " << format_bytes(base.other_bytes) << " other parameters ("
               << (plan.lora.fp32_non_quantized ? "fp32 after prepare_model_for_kbit_training" : "16-bit") << ")";
        os << "\n";
        if (plan.finetune == Finetune::qlora)
            os << "dequantised weight:    " << format_bytes(qlora_dequant_bytes(model, plan))
               << " (largest bf16 copy made for one GEMM, forward and input-gradient)\n";
    }
    if (plan.offload != Offload::none)
        os << "host memory:           " << format_bytes(memory.host_bytes_per_gpu) << " per GPU, "
           << format_bytes(memory.host_bytes_per_node) << " per node (offloaded "
           << (plan.offload == Offload::optimizer ? "fp32 master weights, moments, fp32 gradients"
                                                  : "16-bit parameters, fp32 master weights, moments, fp32 gradients")
           << ")\n";
    if (plan.pp > 1 && plan.pp_schedule != PpSchedule::one_f_one_b)
        os << "pipeline schedule:     " << to_string(plan.pp_schedule)
           << (plan.pp_schedule == PpSchedule::interleaved ? " with " + std::to_string(plan.vpp) + " chunks per stage" : "")
           << ", bubble " << fixed(100.0 * pipeline_bubble_fraction(plan), 1) << " % of the ideal step\n";
    if (plan.cp > 1)
        os << "context parallel:      " << plan.cp << " ranks per sequence (" << plan.seq / plan.cp
           << " tokens each), ring K/V buffers "
           << format_bytes(cp_ring_buffer_bytes(model, context_parallel_rank_plan(plan))) << "\n";
    if (plan.ep > 1)
        os << "expert parallel:       " << model.experts / plan.ep << " of " << model.experts
           << " experts per GPU; all-to-all buffers " << format_bytes(ep_all_to_all_buffer_bytes(model, plan))
           << " (capacity factor " << plan.moe_capacity_factor << ", an assumption)\n";
}

void print_extension_lines(std::ostream& os, const ModelConfig& model, const GpuSpec& gpu, const Plan& plan,
                           const MemoryReport& memory, const Throughput& th) {
    print_extension_memory_lines(os, model, plan, memory);
    if (plan.offload != Offload::none) {
        const OffloadAssumptions oa;
        os << "PCIe:                  " << fixed(th.pcie_bytes_per_step / 1e9, 2) << " GB per GPU per step over "
           << fixed(gpu.pcie_bandwidth_bytes_per_s.value_or(0) / 1e9, 1) << " GB/s (x " << oa.pcie_efficiency
           << "); CPU optimizer + exposed transfers " << fixed(th.offload_s, 3) << " s (assumes "
           << fixed(oa.host_bandwidth_bytes_per_s_per_gpu / 1e9, 0) << " GB/s of host memory bandwidth per GPU)\n";
    }
}

}  // namespace preflight::cli
