// Walks a program section through the tracking allocator: for each op, allocate
// its buffers, run it (device executor) or not (dry run), free its buffers. This is
// the one code path that decides allocations, for both.
#pragma once

#include <vector>

#include "preflight/runtime/allocator.hpp"
#include "preflight/runtime/errors.hpp"
#include "preflight/runtime/program.hpp"

namespace preflight::runtime {

// Device pointer per BufferId (nullptr while not allocated).
using BufferTable = std::vector<void*>;

class OpRunner {
public:
    virtual ~OpRunner() = default;
    virtual void run(const Op& op, const BufferTable& buffers) = 0;
    // True when run() synchronises and checks the device after every op (debug-sync
    // mode), so a failure it reports belongs to that op.
    virtual bool checks_each_op() const { return false; }
    // Within a later run of the step's repeated block (Program::repeat) walk() sets how many
    // micro-batches on it is (0 outside it): an op's micro-batch is micro_batch_of(op).
    std::int64_t micro_batch_offset = 0;
    std::int64_t micro_batch_of(const Op& op) const { return op.phase.micro_batch + micro_batch_offset; }
};

// Whether the timeline samples `op`: the step's own ops and those of its first and last
// micro-batch. The micro-batches between run the same ops on the same sizes as the first,
// so a long gradient accumulation keeps a bounded timeline (and a bounded report).
bool timeline_keeps(const Program& program, const Op& op, std::int64_t micro_batch_offset = 0);
// How many micro-batches of a step with `grad_acc` that rule leaves out of the timeline.
inline std::int64_t timeline_omitted_micro_batches(std::int64_t grad_acc) { return grad_acc > 2 ? grad_acc - 2 : 0; }

// Runs `ops` in order; the program's own step with its repeated block (Program::repeat) run
// `times` times (a copy of the step runs it once; a dry walk, without a runner, its first two runs
// and its last, counting the allocations of those between). `runner` may be null (dry run). Samples the timeline after
// each op's allocations when the allocator is recording (the ops timeline_keeps). An
// out-of-memory allocation propagates as AllocationError; any other failure inside an op (its allocations, its
// run, its frees) is rethrown as OpError naming the op: `section` ("set-up", "step",
// "teardown"), its index, kind, layer, micro-batch and the 1-based `step`.
void walk(const Program& program, const std::vector<Op>& ops, TrackingAllocator& allocator, BufferTable& buffers,
          OpRunner* runner, const char* section = "step", std::int64_t step = 0);

// The location record of op `index` of `ops` (for errors raised outside walk(), e.g. at
// the end-of-step synchronisation: the step's last op, not synchronised); an op of the repeated
// micro-batch names its iteration's micro-batch.
OpLocation locate(const Program& program, const std::vector<Op>& ops, std::size_t index, const char* section,
                  std::int64_t step, bool synchronised, std::int64_t micro_batch_offset = 0);

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

// Index in program.step of the op at whose allocations the tracked total peaks (the
// first such op), found by a dry walk: where the device run samples the driver's
// used memory. -1 for an empty step.
std::int64_t peak_step_op(const Program& program);

// Setup, `steps` steps (timeline of the last one), teardown, with no device.
DryRunResult dry_run(const Program& program, int steps = 1, bool timeline = true);

}  // namespace preflight::runtime
