// Step totals: the parts of estimate_throughput (throughput.cpp) summed into the step time,
// tokens per second and MFU/HFU.
#include <cmath>
#include <string>
#include <utility>

#include "preflight/planner/error.hpp"
#include "activations.hpp"
#include "throughput_totals.hpp"

namespace preflight::throughput_detail {

namespace {

// The step's model and hardware FLOPs with attention counted under `convention`.
FlopCounts counted_flops(const ModelConfig& model, const Plan& p, const ThroughputOptions& opt,
                         AttentionFlops convention) {
    FlopCounts fc = step_flops(model, p, convention);
    if (opt.selective_op_sac && p.recompute == Recompute::selective && activations::op_sac_applies(model)) {
        // torchtitan's op policy re-runs wk, wo and w3 rather than the attention core.
        const ForwardFlopsPerToken f = forward_flops_per_token(model, p.seq, convention);
        const double h = static_cast<double>(model.hidden);
        const double rerun = 2.0 * h * static_cast<double>(model.kv_width()) + f.attention_out +
                             2.0 * h * static_cast<double>(model.ffn_hidden);
        const double per_token = static_cast<double>(model.layers) * (rerun - f.attention_core());
        fc.hardware_flops_per_token += per_token;
        fc.hardware_flops_per_step += per_token * static_cast<double>(p.global_batch_tokens());
    }
    return fc;
}

}  // namespace

// Totals, MFU/HFU (Chowdhery et al. 2022, App. B; Korthikanti et al. 2022, sec. 6.3), the
// finiteness check and the named breakdown.
void finish_throughput(Throughput& out, const ModelConfig& model, const Plan& p, const ThroughputOptions& opt,
                       double peak_flops_per_s, double recompute_s) {
    out.gpus = p.gpus();
    const FlopCounts fc = counted_flops(model, p, opt, opt.attention_flops);
    // No GPU executes FLOPs faster than its dense peak: the compute time is at least the
    // hardware FLOPs its kernels execute per GPU at peak. A causal flash kernel executes the
    // causal half of the attention scores (throughput.cpp attention_core), eager attention the full
    // s^2 work, whichever convention the MFU numerator counts in: --attention-flops changes
    // MFU/HFU, never the step time. (So under `full` MFU can pass 100 % at long sequences,
    // counting work no causal kernel runs; the CLI says so under its tables.)
    const AttentionFlops executed = p.attention == AttentionKind::flash ? AttentionFlops::causal : AttentionFlops::full;
    const double executed_flops = executed == opt.attention_flops
                                      ? fc.hardware_flops_per_step
                                      : counted_flops(model, p, opt, executed).hardware_flops_per_step;
    const double floor_s = executed_flops / (static_cast<double>(out.gpus) * peak_flops_per_s);
    if (out.compute_s + out.launch_overhead_s < floor_s) out.compute_s = floor_s - out.launch_overhead_s;
    out.step_time_s = out.compute_s + out.launch_overhead_s + out.tp_communication_s + out.pp_communication_s +
                      out.pipeline_bubble_s + out.microbatch_sync_s + out.dp_communication_s + out.optimizer_s +
                      out.overhead_s;
    out.tokens_per_step = p.global_batch_tokens();
    out.tokens_per_s = static_cast<double>(out.tokens_per_step) / out.step_time_s;
    out.tokens_per_s_per_gpu = out.tokens_per_s / static_cast<double>(out.gpus);
    out.model_flops_per_step = fc.model_flops_per_step;
    out.hardware_flops_per_step = fc.hardware_flops_per_step;
    out.peak_flops_per_s = peak_flops_per_s;
    out.mfu = flops_utilization(out.model_flops_per_step, out.step_time_s, out.gpus, out.peak_flops_per_s);
    out.hfu = flops_utilization(out.hardware_flops_per_step, out.step_time_s, out.gpus, out.peak_flops_per_s);
    // Never print a NaN or infinity: a non-finite figure means an input out of range.
    for (const auto& [what, v] : {std::pair{"step_time_s", out.step_time_s}, std::pair{"tokens_per_s", out.tokens_per_s},
                                  std::pair{"mfu", out.mfu}, std::pair{"hfu", out.hfu}})
        if (!(std::isfinite(v) && v > 0))
            throw InputError(what, "the step-time model gives " + std::to_string(v) + " for plan " + to_flags(p) +
                                       ": an input (GPU spec rates, efficiency constants, plan) is out of range");
    if (opt.breakdown)
        out.breakdown = {{"forward + backward compute", out.compute_s - recompute_s - out.column_sums_s},
                         {"recompute", recompute_s},
                         {"host dispatch (per layer and micro-batch)", out.launch_overhead_s},
                         {"tensor-parallel collectives", out.tp_communication_s},
                         {"pipeline sends", out.pp_communication_s},
                         {"pipeline bubble", out.pipeline_bubble_s},
                         {"micro-batch synchronisation", out.microbatch_sync_s},
                         {"data-parallel communication (exposed)", out.dp_communication_s},
                         {"optimizer step", out.optimizer_s},
                         {"fixed overhead", out.overhead_s}};
    if (opt.breakdown && opt.runtime_column_sums)  // the runtime's own kernels, apart (Efficiency::column_sum_row_s)
        out.breakdown.insert(out.breakdown.begin() + 1, {"bias/norm weight-gradient column sums", out.column_sums_s});
}

}  // namespace preflight::throughput_detail
