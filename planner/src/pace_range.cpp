// The range of a pace-dependent caching-allocator model, the running-ahead verdict at its top,
// the allocator's flush, and the three-way verdict (pace_range.hpp, memory.hpp memory_verdict).
#include "pace_range.hpp"

#include <algorithm>
#include <utility>

#include "preflight/planner/allocator_model.hpp"
#include "preflight/planner/throughput.hpp"

namespace preflight {

std::string_view memory_verdict(const MemoryReport& r) {
    if (r.device_peak_low_bytes && r.device_peak_high_bytes) {
        if (*r.device_peak_high_bytes <= r.capacity_bytes) return "fits";
        return *r.device_peak_low_bytes <= r.capacity_bytes ? "may-not-fit" : "does-not-fit";
    }
    return r.fits ? "fits" : "does-not-fit";
}

namespace {

// An unsure pace (allocator_model.hpp unsure_pace_band): r's reserved figures become its pace's and
// `other`'s (the other pace, the same constants) weighted by the wait probability, and its point
// need follows; a running-ahead need at the top of the range (`top_need`, 0 for none) stays
// where it is higher.
void mix_in_other_pace(MemoryReport& r, const MemoryReport& other, std::int64_t top_need) {
    const double p = *r.host_wait_probability;
    const bool ahead = r.host_pace == HostPace::runs_ahead;
    const auto mix = [&](std::int64_t mine, std::int64_t theirs) {
        return ahead ? mix_unsure_pace(mine, theirs, p) : mix_unsure_pace(theirs, mine, p);
    };
    r.peak_reserved_bytes = mix(r.peak_reserved_bytes, other.peak_reserved_bytes);
    for (std::size_t i = 0; i < r.stage_reserved_bytes.size() && i < other.stage_reserved_bytes.size(); ++i)
        r.stage_reserved_bytes[i] = mix(r.stage_reserved_bytes[i], other.stage_reserved_bytes[i]);
    ReservedExtra& e = r.reserved_extra;
    const ReservedExtra& o = other.reserved_extra;
    e.activation_fragmentation_bytes = mix(e.activation_fragmentation_bytes, o.activation_fragmentation_bytes);
    e.loss_stage_bytes = mix(e.loss_stage_bytes, o.loss_stage_bytes);
    e.pipeline_runahead_bytes = mix(e.pipeline_runahead_bytes, o.pipeline_runahead_bytes);
    e.constant_bytes = mix(e.constant_bytes, o.constant_bytes);
    e.gradient_fragmentation_bytes = mix(e.gradient_fragmentation_bytes, o.gradient_fragmentation_bytes);
    const std::int64_t point = r.peak_reserved_bytes + r.non_pytorch_bytes + r.verdict_margin_bytes;
    r.device_peak_bytes = std::max(point, top_need);
    r.need_at_range_top = top_need > point;
    r.fits = r.device_peak_bytes <= r.capacity_bytes;
    r.unsure_pace_mix = true;
}

}  // namespace

void set_pace_range(MemoryReport& r, const ModelConfig& model, const GpuSpec& gpu, const Plan& plan,
                    MemoryOptions options) {
    const AllocatorConstants c = options.profile.allocator;
    if (!options.pace_range || !pace_changes_memory(c, options.profile.verdict_on_reserved)) return;
    if (r.host_pace_expected) r.host_wait_probability = host_wait_probability(model, gpu, plan, options.profile);
    const bool timeline = std::exchange(options.timeline, false);
    options.pace_range = false;
    options.host_pace = HostPace::waits_each_micro_batch;
    options.profile.allocator = range_low_constants(c);
    const MemoryReport low = evaluate_memory(model, gpu, plan, options);
    options.host_pace = HostPace::runs_ahead;
    options.profile.allocator = range_high_constants(c);
    const MemoryReport high = evaluate_memory(model, gpu, plan, options);
    const PaceRules rules = pace_rules(r.host_pace, r.host_pace_expected, r.host_wait_probability, c,
                                       high.peak_reserved_bytes, high.non_pytorch_bytes, high.capacity_bytes);
    const std::int64_t top_need = rules.top_need_bytes;  // a running-ahead host's need at the top of the range
    if (r.host_pace == HostPace::runs_ahead) {  // expected or given: the need at the top of the range
        if (top_need > r.device_peak_bytes) {
            r.device_peak_bytes = top_need;
            r.need_at_range_top = true;
        }
        r.fits = r.device_peak_bytes <= r.capacity_bytes;
    }
    if (rules.flush) {
        options.host_pace = HostPace::waits_each_micro_batch;
        options.profile.allocator = c;
        options.timeline = timeline;
        MemoryReport waits = evaluate_memory(model, gpu, plan, options);
        waits.host_pace_expected = true;
        waits.host_wait_probability = r.host_wait_probability;
        waits.allocator_flush = true;
        waits.reserved_running_ahead_bytes = r.peak_reserved_bytes;
        waits.device_peak_bytes = r.device_peak_bytes;
        waits.need_at_range_top = r.need_at_range_top;
        waits.fits = r.fits;
        r = std::move(waits);
    }
    if (rules.mix) {
        options.profile.allocator = c;
        options.timeline = false;
        options.host_pace = r.host_pace == HostPace::runs_ahead ? HostPace::waits_each_micro_batch : HostPace::runs_ahead;
        mix_in_other_pace(r, evaluate_memory(model, gpu, plan, options), top_need);
    }
    // The point (r, at the expected or given pace) lies inside: an upper-envelope term below its
    // median fit (a quantile fit need not order every coefficient) never pulls the top under it.
    r.device_peak_low_bytes = std::min(low.device_peak_bytes, r.device_peak_bytes);
    r.device_peak_high_bytes = std::max(high.device_peak_bytes, r.device_peak_bytes);
    r.reserved_low_bytes = std::min(low.peak_reserved_bytes, r.peak_reserved_bytes);
    r.reserved_high_bytes = std::max(high.peak_reserved_bytes, r.peak_reserved_bytes);
}

}  // namespace preflight
