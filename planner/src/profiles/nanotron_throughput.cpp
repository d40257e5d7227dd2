// nanotron's step-time specifics, read from huggingface/nanotron (src/nanotron/...), as the
// Ultra-Scale Playbook sweep ran it (scaling_benchmarks.py: tp_mode REDUCE_SCATTER with
// tp_linear_async_communication on, pp_engine 1f1b).
#include "preflight/planner/frameworks.hpp"

namespace preflight {

void adjust_throughput_nanotron(const ModelConfig& model, const Plan& plan, ThroughputOptions& o) {
    // models/base.py build_model: blocks assigned to stages by compute cost.
    o.stage_layers.clear();
    if (plan.pp > 1)
        for (const StageBlocks& b : pipeline_stages(model, plan.pp, PipelineSplit::nanotron_compute_cost))
            o.stage_layers.push_back(b.layers);
    // parallel/tensor_parallel/functional.py _ColumnLinearAsyncCommunication and
    // _RowLinearAsyncCommunication: the all-gathers and reduce-scatters run beside GEMMs.
    o.tp_async_overlap = plan.sp && plan.tp > 1;
    o.grad_bucket_bytes = 25 * kMiB;  // config ddp_bucket_cap_mb 25
    // parallel/pipeline_parallel/p2p.py P2P._send_meta / _recv_meta (branch nouamane/bench2 since
    // 67c5ebb6) poll each message's metadata with time.sleep(0.1): the stall the GPU spec's
    // microbatch_sync_* constants were fitted to on the sweep's runs.
    o.cluster_stall = true;
    // The sweep's pipelines across nodes pace each layer at a host time that grows with tp
    // (Efficiency::pipeline_span_layer_host_per_tp_s, fitted on those runs).
    o.spanning_pipeline_host = true;
}

ThroughputOptions nanotron_throughput_options(const ModelConfig& model, const Plan& plan) {
    ThroughputOptions o;
    o.breakdown = false;
    return throughput_options_for(nanotron_profile(), model, plan, o);  // the profile's settings, in one place
}

}  // namespace preflight
