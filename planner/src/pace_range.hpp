// The range of a pace-dependent caching-allocator model and the verdict it gives
// (memory.hpp MemoryReport::device_peak_low/high_bytes, memory_verdict); internal to the planner.
#pragma once

#include "preflight/planner/memory.hpp"

namespace preflight {

// Sets the range of a report made at its pace (expected or given): the same evaluation with the
// host waiting and the range's low constants, and with the host running ahead and its high
// constants (allocator_model.hpp range_low_constants, range_high_constants). A host that runs
// ahead is judged at the top of that range too (range_top_need_bytes); an expected running-ahead
// pool whose top outgrows the device becomes the waiting pace's report (pool_outgrows_device).
// No-op for profiles whose allocator model does not depend on the pace.
void set_pace_range(MemoryReport& r, const ModelConfig& model, const GpuSpec& gpu, const Plan& plan,
                    MemoryOptions options);

}  // namespace preflight
