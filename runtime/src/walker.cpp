#include "preflight/runtime/walker.hpp"

namespace preflight::runtime {

void walk(const Program& program, const std::vector<Op>& ops, TrackingAllocator& allocator, BufferTable& buffers,
          OpRunner* runner) {
    buffers.resize(program.buffers.size(), nullptr);
    for (const Op& op : ops) {
        allocator.set_phase(op.phase.kind);
        if (!op.alloc.empty()) {
            const std::string where = describe(program, op);
            for (BufferId b : op.alloc) buffers[static_cast<std::size_t>(b)] = allocator.allocate(program.buffers[static_cast<std::size_t>(b)], where);
        }
        if (allocator.recording()) allocator.sample(describe(program, op), op.phase.kind);
        if (runner != nullptr) runner->run(op, buffers);
        for (BufferId b : op.free) {
            allocator.release(buffers[static_cast<std::size_t>(b)]);
            buffers[static_cast<std::size_t>(b)] = nullptr;
        }
    }
}

DryRunResult dry_run(const Program& program, int steps, bool timeline) {
    DryBackend backend;
    TrackingAllocator alloc(backend);
    BufferTable table;
    DryRunResult r;
    walk(program, program.setup, alloc, table, nullptr);
    r.persistent_bytes = alloc.current_total();
    for (int i = 0; i < steps; ++i) {
        const std::int64_t before = alloc.allocations();
        alloc.set_recording(timeline && i == steps - 1);
        walk(program, program.step, alloc, table, nullptr);
        alloc.set_recording(false);
        r.allocations_per_step = alloc.allocations() - before;
    }
    r.peak_bytes = alloc.peak_bytes();
    r.peak_breakdown = alloc.peak_breakdown();
    r.peak_where = alloc.peak_where();
    r.peak_phase = alloc.peak_phase();
    r.timeline = alloc.timeline();
    r.leak_free = alloc.current_total() == r.persistent_bytes;
    walk(program, program.teardown, alloc, table, nullptr);
    r.leak_free = r.leak_free && alloc.current_total() == 0 && alloc.live_allocations() == 0;
    return r;
}

}  // namespace preflight::runtime
