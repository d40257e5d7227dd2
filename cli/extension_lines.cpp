// Report lines of the plan extensions (LoRA / QLoRA fine-tuning, CPU offload, pipeline
// schedules, context and expert parallelism); their flags come from the plan field table.
#include <cstdio>
#include <ostream>

#include "format.hpp"
#include "plan_flags.hpp"
#include "preflight/planner/extensions.hpp"

namespace preflight::cli {

void print_extension_memory_lines(std::ostream& os, const ModelConfig& model, const Plan& plan,
                                  const MemoryReport& memory, const FrameworkProfile& profile) {
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
    if (plan.cp > 1) {
        const Plan rank = context_parallel_rank_plan(plan);
        os << "context parallel:      " << plan.cp << " ranks per sequence (" << plan.seq / plan.cp << " tokens each), "
           << (profile.cp_gathers_kv ? "gathered K/V buffers " + format_bytes(cp_gathered_kv_bytes(model, rank)) +
                                           " (all-gather, two copies of the sequence's K and V)"
                                     : "ring K/V buffers " + format_bytes(cp_ring_buffer_bytes(model, rank)))
           << "\n";
    }
    if (plan.ep > 1)
        os << "expert parallel:       " << model.experts / plan.ep << " of " << model.experts
           << " experts per GPU; all-to-all buffers " << format_bytes(ep_all_to_all_buffer_bytes(model, plan))
           << " (capacity factor " << plan.moe_capacity_factor << ", an assumption)\n";
}

void print_extension_lines(std::ostream& os, const ModelConfig& model, const GpuSpec& gpu, const Plan& plan,
                           const MemoryReport& memory, const Throughput& th, const FrameworkProfile& profile) {
    print_extension_memory_lines(os, model, plan, memory, profile);
    if (plan.offload != Offload::none) {
        const OffloadAssumptions oa;
        os << "PCIe:                  " << fixed(th.pcie_bytes_per_step / 1e9, 2) << " GB per GPU per step over "
           << fixed(gpu.pcie_bandwidth_bytes_per_s.value_or(0) / 1e9, 1) << " GB/s (x " << oa.pcie_efficiency
           << "); CPU optimizer + exposed transfers " << fixed(th.offload_s, 3) << " s (assumes "
           << fixed(oa.host_bandwidth_bytes_per_s_per_gpu / 1e9, 0) << " GB/s of host memory bandwidth per GPU)\n";
    }
}

}  // namespace preflight::cli
