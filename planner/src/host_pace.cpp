// The step-time model's stall per micro-batch, and the host pace a plan is expected to run at
// (throughput.hpp expected_host_pace; allocator_model.hpp HostPace and HostPaceModel).
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

namespace {
double wait_logit(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan_in, const HostPaceModel& m) {
    const Plan plan = resolve_defaults(plan_in, model);
    return host_wait_logit(m, host_pace_inputs(plan.gpus(), plan.tp, plan.pp, gpu.gpus_per_node));
}
}  // namespace

HostPace expected_host_pace(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan_in,
                            const FrameworkProfile& profile) {
    const HostPaceModel& m = profile.allocator.pace;
    if (!m.fitted()) return HostPace::runs_ahead;  // PyTorch's asynchronous execution
    return wait_logit(model, gpu, plan_in, m) > 0 ? HostPace::waits_each_micro_batch : HostPace::runs_ahead;
}

std::optional<double> host_wait_probability(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan_in,
                                            const FrameworkProfile& profile) {
    const HostPaceModel& m = profile.allocator.pace;
    if (!m.fitted()) return std::nullopt;
    return 1.0 / (1.0 + std::exp(-wait_logit(model, gpu, plan_in, m)));  // the logistic function
}

}  // namespace preflight
