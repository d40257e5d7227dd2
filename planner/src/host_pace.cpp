// The host pace a plan is expected to run at, from the step-time model's fitted stall
// (throughput.hpp expected_host_pace; allocator_model.hpp HostPace).
#include <algorithm>
#include <cmath>

#include "preflight/planner/throughput.hpp"

namespace preflight {

// Fitted per-micro-batch synchronisation stall that grows with the job's node count: a saturating
// x / (1 + x) with x = (nodes / half)^exponent, a fraction of it without pipeline parallelism
// (fitted on the nanotron sweep: the GPU spec's "efficiency" provenance).
double stall_per_micro_batch_s(const Efficiency& e, const Plan& p, std::int64_t nodes) {
    const double x = std::pow(static_cast<double>(nodes) / e.microbatch_sync_half_nodes, e.microbatch_sync_node_exponent);
    return e.microbatch_sync_s * x / (1.0 + x) * (p.pp > 1 ? 1.0 : e.microbatch_sync_no_pipeline_fraction);
}

double expected_stall_per_micro_batch_s(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan_in,
                                        const FrameworkProfile& profile) {
    const Plan plan = resolve_defaults(plan_in, model);
    if (!throughput_options_for(profile, model, plan, {}).cluster_stall) return 0.0;
    const std::int64_t per_node = std::max(1, gpu.gpus_per_node);
    return stall_per_micro_batch_s(gpu.efficiency, plan, (plan.gpus() + per_node - 1) / per_node);
}

HostPace expected_host_pace(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan,
                            const FrameworkProfile& profile) {
    return expected_stall_per_micro_batch_s(model, gpu, plan, profile) >= kHostWaitStallPerMicroBatchS
               ? HostPace::waits_each_micro_batch
               : HostPace::runs_ahead;
}

}  // namespace preflight
