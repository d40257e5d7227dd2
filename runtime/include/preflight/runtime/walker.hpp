// Walks a program section through the tracking allocator: for each op, allocate
// its buffers, run it (device executor) or not (dry run), free its buffers. This is
// the one code path that decides allocations, for both.
#pragma once

#include <vector>

#include "preflight/runtime/allocator.hpp"
#include "preflight/runtime/program.hpp"

namespace preflight::runtime {

// Device pointer per BufferId (nullptr while not allocated).
using BufferTable = std::vector<void*>;

class OpRunner {
public:
    virtual ~OpRunner() = default;
    virtual void run(const Op& op, const BufferTable& buffers) = 0;
};

// Runs `ops` in order. `runner` may be null (dry run). Samples the timeline after
// each op's allocations when the allocator is recording.
void walk(const Program& program, const std::vector<Op>& ops, TrackingAllocator& allocator, BufferTable& buffers,
          OpRunner* runner);

struct DryRunResult {
    std::int64_t peak_bytes = 0;  // tracked allocations at the peak (no context overhead)
    CategoryBytes peak_breakdown{};
    std::string peak_where;
    PhaseKind peak_phase = PhaseKind::step_start;
    std::int64_t persistent_bytes = 0;  // after setup
    std::int64_t allocations_per_step = 0;
    std::vector<TimelineSample> timeline;  // one step
    bool leak_free = true;                 // everything freed after teardown
};

// Setup, `steps` steps (timeline of the last one), teardown, with no device.
DryRunResult dry_run(const Program& program, int steps = 1, bool timeline = true);

}  // namespace preflight::runtime
