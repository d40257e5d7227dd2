// ZeRO-Offload (Ren et al. 2021) and ZeRO-Infinity's parameter offload (Rajbhandari et
// al. 2021): which model states live in host memory and what crosses PCIe each step.
#include "preflight/planner/extensions.hpp"

#include <algorithm>

#include "preflight/planner/checked.hpp"

namespace preflight {

std::int64_t host_bytes_per_node(const std::vector<std::int64_t>& host_bytes_by_stage, std::int64_t ranks_per_stage,
                                 std::int64_t gpus_per_node) {
    const auto stages = static_cast<std::int64_t>(host_bytes_by_stage.size());
    const std::int64_t ranks = stages * ranks_per_stage;  // the plan's GPUs (limits::kMaxGpus)
    const std::int64_t node = std::clamp<std::int64_t>(gpus_per_node, 1, std::max<std::int64_t>(ranks, 1));
    // before[s]: host bytes of every rank of stages 0..s-1. Each term is a GPU's host bytes (a
    // checked product) times at most kMaxGpus ranks.
    std::vector<std::int64_t> before(static_cast<std::size_t>(stages) + 1, 0);
    for (std::int64_t s = 0; s < stages; ++s)
        before[static_cast<std::size_t>(s) + 1] =
            checked_add(before[static_cast<std::size_t>(s)],
                        checked_mul(host_bytes_by_stage[static_cast<std::size_t>(s)], ranks_per_stage,
                                    "--offload (host bytes per GPU x ranks per stage)"),
                        "--offload (host bytes of the job)");
    auto upto = [&](std::int64_t r) {  // host bytes of ranks 0..r-1
        const std::int64_t s = r / ranks_per_stage;
        return s >= stages ? before.back()
                           : before[static_cast<std::size_t>(s)] +
                                 host_bytes_by_stage[static_cast<std::size_t>(s)] * (r % ranks_per_stage);
    };
    auto window = [&](std::int64_t w) {  // host bytes of node w (ranks w x node ..)
        const std::int64_t first = w * node;
        return first >= ranks ? 0 : upto(std::min(first + node, ranks)) - upto(first);
    };
    // A node that spans a stage boundary holds the first rank of a stage, or its last; one wholly
    // inside a stage holds node x that stage's bytes, as every other such node of it: so the nodes
    // holding each stage's first and last rank, and one after its first, are all to compare
    // (O(stages), not O(nodes): a million GPUs would otherwise cost every plan judged 10^5 steps).
    std::int64_t most = 0;
    for (std::int64_t s = 0; s < stages; ++s) {
        const std::int64_t w0 = s * ranks_per_stage / node, w1 = ((s + 1) * ranks_per_stage - 1) / node;
        most = std::max({most, window(w0), window(w1), w1 - w0 >= 2 ? window(w0 + 1) : 0});
    }
    return most;
}

OffloadSplit offload_state_bytes(std::int64_t params, Precision precision, Optimizer optimizer, int zero,
                                 std::int64_t dp, Offload offload) {
    OffloadSplit s;
    s.gpu = model_state_bytes(params, precision, optimizer, zero, dp);
    if (offload == Offload::none) return s;
    // Ren et al. 2021, sec. 4.1 (offload strategy): the GPU keeps the 16-bit parameters and
    // gradients (4 B per parameter under mixed precision); the CPU holds the fp32 parameters,
    // momentum and variance (12 B) and receives the gradients, kept as an fp32 partition for
    // the CPU-Adam step (DeepSpeed stage_1_and_2.py: single_partition_of_fp32_groups and
    // their fp32 .grad on the offload device), 4 B more.
    const std::int64_t shard = zero >= 1 ? shard_elements(params, dp) : params;
    const int master = 4;  // DeepSpeed creates the fp32 partition even when the recipe has no master copy
    s.host_bytes = shard * (master + optimizer_bytes_per_param(optimizer) + 4);
    s.gpu.master_weights = 0;
    s.gpu.optimizer_states = 0;
    if (offload == Offload::optimizer_and_params) {
        // ZeRO-Infinity (ZeRO-3 only): the 16-bit parameter partition moves to the host too;
        // the GPU holds only the layers it gathers (the memory model's ZeRO-3 gather buffers).
        s.host_bytes += s.gpu.weights;
        s.gpu.weights = 0;
    }
    return s;
}

PcieTraffic offload_pcie_traffic(const ModelConfig& model, const Plan& plan) {
    PcieTraffic t;
    if (plan.offload == Offload::none) return t;
    const ParamCounts pc = count_params(model);
    const PrecisionBytes pb = precision_bytes(plan.precision);
    const double dp = static_cast<double>(plan.dp * plan.cp);
    const double per_stage_tp = 1.0 / static_cast<double>(plan.pp * plan.tp);
    double trainable = 0, grad_bytes = pb.gradient, param_bytes = pb.weight;
    if (plan.finetune == Finetune::full) {
        trainable = static_cast<double>(pc.total) * per_stage_tp;
    } else {
        trainable = static_cast<double>(lora_params(model, plan.lora)) * per_stage_tp;
        grad_bytes = 4;  // PEFT adapters are fp32
        param_bytes = 4;
    }
    const double shard = plan.zero >= 1 ? trainable / dp : trainable;
    t.gradients_to_host = shard * grad_bytes;
    t.params_to_device = shard * param_bytes;
    if (plan.offload == Offload::optimizer_and_params) {
        // Every micro-batch streams this rank's parameter partition in for the forward and
        // again for the backward (then all-gathered over dp).
        const double all = static_cast<double>(pc.total) * per_stage_tp;
        const double base_bytes = plan.finetune == Finetune::full ? pb.weight : 2.0;
        t.param_fetches = 2.0 * static_cast<double>(plan.grad_acc) * all / dp * base_bytes;
    }
    return t;
}

}  // namespace preflight
