// The step-time model's last stage (throughput.cpp estimate_throughput): its parts summed into
// the step time, tokens per second and MFU/HFU, the finiteness check and the named breakdown.
#pragma once

#include "preflight/planner/throughput.hpp"

namespace preflight::throughput_detail {

// Fills `out`'s totals from its parts; `recompute_s` is the recompute share of compute_s (shown
// apart in the breakdown). Throws InputError when a figure is not finite and positive.
void finish_throughput(Throughput& out, const ModelConfig& model, const Plan& p, const ThroughputOptions& opt,
                       double peak_flops_per_s, double recompute_s);

}  // namespace preflight::throughput_detail
