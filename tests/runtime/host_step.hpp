// One optimizer step of a rank's program on the host executor (HostRunner), alone: its
// collectives by group, the whole model's parameters drawn once (ref::random_params, seed 5,
// scale 0.4) and sliced to the rank. Shared by the tensor- and pipeline-parallel tests of
// emulated ranks.
#pragma once

#include <array>
#include <cmath>

#include "preflight/runtime/host_runner.hpp"
#include "preflight/runtime/reference_model.hpp"
#include "preflight/runtime/walker.hpp"

namespace preflight::runtime::test_support {

struct HostStep {
    double loss_sum = 0;          // the step's summed per-token loss (0 on a stage without the loss)
    bool weights_finite = true;  // every weight after the update
};

inline HostStep run_host_step(const ModelConfig& m, const Program& prog, std::array<HostCollectives*, kCommGroups> comms) {
    HostRunner run(prog, 9, comms);
    const Program whole = build_program(m, single_gpu_plan(prog.plan));
    run.params = shard_parameters(whole, ref::random_params(whole, 5, 0.4), prog);
    DryBackend backend;
    TrackingAllocator alloc(backend);
    BufferTable table;
    walk(prog, prog.setup, alloc, table, &run, "set-up");
    walk(prog, prog.step, alloc, table, &run, "step", 1);
    HostStep s;
    s.loss_sum = run.loss_sum;
    for (double v : run.buffer(prog.weights)) s.weights_finite = s.weights_finite && std::isfinite(v);
    walk(prog, prog.teardown, alloc, table, &run, "teardown");
    return s;
}

}  // namespace preflight::runtime::test_support
