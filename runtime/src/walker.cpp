#include "preflight/runtime/walker.hpp"

#include <stdexcept>

namespace preflight::runtime {

OpLocation locate(const Program& program, const std::vector<Op>& ops, std::size_t index, const char* section,
                  std::int64_t step, bool synchronised, std::int64_t micro_batch_offset) {
    OpLocation at;
    at.section = section;
    at.step = step;
    at.synchronised = synchronised;
    if (index >= ops.size()) return at;
    const Op& op = ops[index];
    at.index = static_cast<std::int64_t>(index);
    at.kind = std::string(to_string(op.kind));
    at.layer = op.phase.layer;
    at.micro_batch = op.phase.micro_batch + micro_batch_offset;
    at.label = describe(program, op, micro_batch_offset);
    return at;
}

bool timeline_keeps(const Program& program, const Op& op, std::int64_t micro_batch_offset) {
    const std::int64_t mb = op.phase.micro_batch + micro_batch_offset;
    return mb <= 1 || mb == program.dims.grad_acc;
}

void walk(const Program& program, const std::vector<Op>& ops, TrackingAllocator& allocator, BufferTable& buffers,
          OpRunner* runner, const char* section, std::int64_t step) {
    buffers.resize(program.buffers.size(), nullptr);
    allocator.begin_section(&ops == &program.setup      ? Section::setup
                            : &ops == &program.step     ? Section::step
                            : &ops == &program.teardown ? Section::teardown
                                                        : Section::other);
    // The repeated micro-batch: after its last op, back to its first until it has run `times` times.
    const Program::Repeat& rep = program.repeat;
    const bool repeats = &ops == &program.step && rep.times > 1;
    std::int64_t iteration = 0;
    const auto in_block = [&](std::size_t i) { return repeats && i >= rep.begin && i < rep.end; };
    // A dry walk (no runner) walks the block's first two runs and its last: each run starts from
    // the same buffers alive and makes the same allocations and frees, so the runs between would
    // repeat the second's bytes exactly (no new peak, no timeline sample: they are neither the
    // first nor the last micro-batch); their allocations are counted.
    const bool skips = repeats && runner == nullptr && rep.times > 3;
    for (std::size_t i = 0; i < ops.size(); ++i) {
        const Op& op = ops[i];
        const std::int64_t run = in_block(i) ? iteration * rep.stride : 0;  // micro-batches on
        if (runner != nullptr) runner->micro_batch_offset = run;
        try {
            allocator.set_phase(op.phase.kind);
            for (BufferId b : op.alloc) {
                void*& slot = buffers[static_cast<std::size_t>(b)];
                const BufferSpec& spec = program.buffers[static_cast<std::size_t>(b)];
                if (slot != nullptr) throw std::logic_error("buffer " + spec.name + " is allocated while still live");
                slot = allocator.allocate_at(spec, [&] { return describe(program, op, run); });
            }
            if (allocator.recording() && timeline_keeps(program, op, run))
                allocator.sample(describe(program, op, run), op.phase.kind);
            if (runner != nullptr) runner->run(op, buffers);
            for (BufferId b : op.free) {
                allocator.release(buffers[static_cast<std::size_t>(b)]);
                buffers[static_cast<std::size_t>(b)] = nullptr;
            }
        } catch (const AllocationError&) {
            throw;  // out of memory: the plan does not fit
        } catch (const OpError&) {
            throw;
        } catch (const DeviceError& e) {
            const bool sync = runner != nullptr && runner->checks_each_op();
            throw OpError(locate(program, ops, i, section, step, sync, run), e.kind, e.code,
                          e.what());
        } catch (const std::exception& e) {
            const bool sync = runner != nullptr && runner->checks_each_op();
            throw OpError(locate(program, ops, i, section, step, sync, run), FailureKind::other,
                          -1, e.what());
        }
        if (repeats && i + 1 == rep.end) {
            if (++iteration == 2 && skips) {
                const auto per_run = static_cast<std::int64_t>(allocations_in(ops, rep.begin, rep.end));
                allocator.pass_over_allocations(per_run * (rep.times - 3));
                iteration = rep.times - 1;
            }
            if (iteration < rep.times) i = rep.begin - 1;  // the loop's ++i lands on the block's first op
        }
    }
}

std::int64_t peak_step_op(const Program& program) {
    // A runner that records the tracked total each op sees (after its allocations).
    struct Probe final : OpRunner {
        TrackingAllocator* alloc = nullptr;
        const Program* prog = nullptr;
        std::int64_t index = -1, best = -1, best_bytes = -1;
        void run(const Op& op, const BufferTable&) override {
            index = &op - prog->step.data();
            if (alloc->current_total() > best_bytes) {
                best_bytes = alloc->current_total();
                best = index;
            }
        }
    };
    DryBackend backend;
    TrackingAllocator alloc(backend);
    BufferTable table;
    walk(program, program.setup, alloc, table, nullptr, "set-up");
    Probe probe;
    probe.alloc = &alloc;
    probe.prog = &program;
    walk(program, program.step, alloc, table, &probe, "step", 1);
    walk(program, program.teardown, alloc, table, nullptr, "teardown");
    return probe.best;
}

DryRunResult dry_run(const Program& program, int steps, bool timeline) {
    DryBackend backend;
    TrackingAllocator alloc(backend);
    BufferTable table;
    DryRunResult r;
    walk(program, program.setup, alloc, table, nullptr, "set-up");
    r.persistent_bytes = alloc.current_total();
    for (int i = 0; i < steps; ++i) {
        const std::int64_t before = alloc.allocations();
        alloc.set_recording(timeline && i == steps - 1);
        walk(program, program.step, alloc, table, nullptr, "step", i + 1);
        alloc.set_recording(false);
        r.allocations_per_step = alloc.allocations() - before;
    }
    r.peak_bytes = alloc.peak_bytes();
    r.peak_breakdown = alloc.peak_breakdown();
    r.peak_where = alloc.peak_where();
    r.peak_phase = alloc.peak_phase();
    r.timeline = alloc.timeline();
    r.leak_free = alloc.current_total() == r.persistent_bytes;
    walk(program, program.teardown, alloc, table, nullptr, "teardown");
    r.leak_free = r.leak_free && alloc.current_total() == 0 && alloc.live_allocations() == 0;
    return r;
}

}  // namespace preflight::runtime
