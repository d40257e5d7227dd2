#include "preflight/planner/allocator_model.hpp"

#include "preflight/planner/error.hpp"
#include "preflight/planner/limits.hpp"
#include "preflight/planner/memory.hpp"

#include <algorithm>
#include <cmath>

namespace preflight {

namespace {
std::int64_t round_up(std::int64_t v, std::int64_t unit) { return (v + unit - 1) / unit * unit; }
}  // namespace

std::int64_t torch_block_bytes(std::int64_t request) {
    if (request < kTorchMinBlockBytes) return kTorchMinBlockBytes;
    return round_up(request, kTorchMinBlockBytes);
}

std::int64_t torch_segment_bytes(std::int64_t request) {
    const std::int64_t block = torch_block_bytes(request);
    if (block <= kTorchSmallSizeBytes) return kTorchSmallBufferBytes;
    if (block < kTorchMinLargeAllocBytes) return kTorchLargeBufferBytes;
    return round_up(block, kTorchRoundLargeBytes);
}

std::array<double, kHostPaceInputs> host_pace_inputs(std::int64_t gpus, std::int64_t tp, std::int64_t pp,
                                                      std::int64_t gpus_per_node) {
    const std::int64_t per_node = std::max<std::int64_t>(1, gpus_per_node);
    const std::int64_t nodes = (std::max<std::int64_t>(1, gpus) + per_node - 1) / per_node;
    // A tp group over several nodes spans tp / gpus_per_node of them; within one node, 1 (log 0).
    const double tp_nodes = std::max(1.0, static_cast<double>(tp) / static_cast<double>(per_node));
    const double log2_tp_nodes = std::log2(tp_nodes);
    return {1.0, std::log2(static_cast<double>(nodes)), pp > 1 ? log2_tp_nodes : 0.0, pp > 1 ? 0.0 : log2_tp_nodes};
}

double host_wait_logit(const HostPaceModel& m, const std::array<double, kHostPaceInputs>& x) {
    return m.intercept * x[0] + m.per_log2_nodes * x[1] + m.per_log2_tp_nodes_in_pipeline * x[2] +
           m.per_log2_tp_nodes_single_stage * x[3];
}

std::int64_t mix_unsure_pace(std::int64_t running_ahead_bytes, std::int64_t waiting_bytes, double wait_probability) {
    const double p = std::clamp(wait_probability, 0.0, 1.0);
    return std::llround((1.0 - p) * static_cast<double>(running_ahead_bytes) + p * static_cast<double>(waiting_bytes));
}

AllocatorConstants range_low_constants(const AllocatorConstants& c) {
    AllocatorConstants low = c;
    low.activation_fragmentation = low.loss_stage_fragmentation = low.pipeline_runahead_fragmentation = 0;
    low.reserved_constant_bytes = 0;
    low.gradient_fragmentation = 0;
    return low;
}

AllocatorConstants range_high_constants(const AllocatorConstants& c) {
    const bool fitted = c.upper_activation_fragmentation > 0 || c.upper_loss_stage_fragmentation > 0 ||
                        c.upper_pipeline_runahead_fragmentation > 0 || c.upper_reserved_constant_bytes > 0;
    if (!fitted) return c;
    AllocatorConstants high = c;
    high.activation_fragmentation = c.upper_activation_fragmentation;
    high.loss_stage_fragmentation = c.upper_loss_stage_fragmentation;
    high.pipeline_runahead_fragmentation = c.upper_pipeline_runahead_fragmentation;
    high.reserved_constant_bytes = c.upper_reserved_constant_bytes;
    return high;
}

std::string_view to_string(HostPace p) {
    return p == HostPace::runs_ahead ? "runs-ahead" : "waits";
}

std::optional<HostPace> parse_host_pace(std::string_view s) {
    if (s == "runs-ahead") return HostPace::runs_ahead;
    if (s == "waits") return HostPace::waits_each_micro_batch;
    return std::nullopt;
}

ReservedExtra reserved_extra(std::int64_t activations, std::int64_t loss_hidden, std::int64_t runahead_hidden,
                             const AllocatorConstants& c) {
    // Fragmentation only adds (a fitted negative would predict a pool smaller than its tensors).
    const double parts[] = {std::max(0.0, c.activation_fragmentation) * static_cast<double>(activations),
                            std::max(0.0, c.loss_stage_fragmentation) * static_cast<double>(loss_hidden),
                            std::max(0.0, c.pipeline_runahead_fragmentation) * static_cast<double>(runahead_hidden)};
    // limits::check_plan keeps the tensors under kMaxBytes; a constant large enough to take a
    // part past it would overflow the rounding below, so it is refused, never wrapped.
    for (double part : parts)
        if (!(part <= static_cast<double>(limits::kMaxBytes)))
            throw InputError("--mbs", "the caching-allocator model's reserved pool exceeds kMaxBytes = 2^60 B per GPU");
    ReservedExtra x;
    x.activation_fragmentation_bytes = std::llround(parts[0]);
    x.loss_stage_bytes = std::llround(parts[1]);
    x.pipeline_runahead_bytes = std::llround(parts[2]);
    x.constant_bytes = std::max<std::int64_t>(0, c.reserved_constant_bytes);
    return x;
}

std::int64_t gradient_fragmentation_bytes(std::int64_t step_gradient_bytes, const AllocatorConstants& c) {
    const double part = std::max(0.0, c.gradient_fragmentation) * static_cast<double>(step_gradient_bytes);
    if (!(part <= static_cast<double>(limits::kMaxBytes)))
        throw InputError("--mbs", "the caching-allocator model's reserved pool exceeds kMaxBytes = 2^60 B per GPU");
    return std::llround(part);
}

std::int64_t reserved_pool_bytes(std::int64_t allocated, const ReservedExtra& extra) {
    // The pool is made of 2 MiB-rounded segments.
    return round_up(allocated + extra.total(), kTorchRoundLargeBytes);
}

PaceRules pace_rules(HostPace pace, bool pace_expected, std::optional<double> wait_probability,
                     const AllocatorConstants& c, std::optional<std::int64_t> high_reserved_bytes,
                     std::int64_t non_pytorch_bytes, std::int64_t capacity_bytes) {
    PaceRules r;
    if (pace == HostPace::runs_ahead && high_reserved_bytes) {
        r.top_need_bytes = range_top_need_bytes(*high_reserved_bytes, non_pytorch_bytes);
        r.flush = pace_expected && pool_outgrows_device(*high_reserved_bytes, non_pytorch_bytes, capacity_bytes);
    }
    r.mix = pace_expected && !r.flush && wait_probability && unsure_pace(*wait_probability, c.unsure_pace_band);
    return r;
}

std::int64_t range_top_need_bytes(std::int64_t high_reserved_bytes, std::int64_t non_pytorch_bytes) {
    // Both terms are bounded by limits::kMaxBytes (2^60): their sum cannot overflow.
    return high_reserved_bytes + non_pytorch_bytes;
}

bool pool_outgrows_device(std::int64_t high_reserved_bytes, std::int64_t non_pytorch_bytes, std::int64_t capacity_bytes) {
    return range_top_need_bytes(high_reserved_bytes, non_pytorch_bytes) > capacity_bytes;
}

void apply_allocator_model(MemoryReport& r, const AllocatorConstants& c, bool verdict_on_reserved,
                           std::int64_t loss_hidden_bytes, std::int64_t step_gradient_bytes, HostPace pace) {
    const MemoryBreakdown& b = r.at_peak;
    r.peak_allocated_bytes = r.peak_bytes - b.overhead;
    const bool runs_ahead = pace == HostPace::runs_ahead;
    const std::int64_t loss_hidden = runs_ahead && b.logits_and_loss > 0 ? loss_hidden_bytes : 0;
    // No pipeline run-ahead term here: only the nanotron profile's stage model has one fitted.
    r.reserved_extra = reserved_extra(b.activations, loss_hidden, 0, c);
    r.reserved_extra.gradient_fragmentation_bytes = gradient_fragmentation_bytes(step_gradient_bytes, c);
    r.peak_reserved_bytes = reserved_pool_bytes(r.peak_allocated_bytes, r.reserved_extra);
    r.non_pytorch_bytes = c.non_pytorch_bytes >= 0 ? c.non_pytorch_bytes : b.overhead;
    r.verdict_margin_bytes = std::max<std::int64_t>(0, c.verdict_margin_bytes);
    r.device_peak_bytes = r.peak_reserved_bytes + r.non_pytorch_bytes + r.verdict_margin_bytes;
    if (verdict_on_reserved) r.fits = r.device_peak_bytes <= r.capacity_bytes;
}

}  // namespace preflight
