// A rank's dry run against the planner's prediction for its pipeline stage (the
// preflight-runtime profile, no overhead): the peak bytes and the phase each puts the peak in.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "catalog_fixture.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/runtime/program.hpp"
#include "preflight/runtime/walker.hpp"

namespace preflight::runtime::test_support {

struct Compared {
    std::int64_t dry = 0, planned = 0;
    PhaseKind dry_phase{}, planned_phase{};
    std::string where;
};

inline Compared compare_with_planner(const ModelConfig& m, const Plan& p, std::int64_t rank) {
    const Program prog = build_program(m, p, rank);
    const DryRunResult d = dry_run(prog, 1, false);
    EXPECT_TRUE(d.leak_free);
    MemoryOptions mo;
    mo.profile = runtime_profile();
    mo.overhead_bytes = 0;
    mo.pipeline_stage = rank_coords(p, rank).pp;
    const MemoryReport r = evaluate_memory(m, test::catalog_gpu("h100-sxm-80gb"), p, mo);
    return {d.peak_bytes, r.peak_bytes, d.peak_phase, r.peak_phase.kind, d.peak_where};
}

}  // namespace preflight::runtime::test_support
