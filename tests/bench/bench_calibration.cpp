// Held-out accuracy on the external measured runs, next to the uncalibrated defaults, so
// the calibration's gain is visible (BENCHMARK_MAIN() lives in bench_planner.cpp).
// Figures are counters (fractions: 0.29 = 29 %): tok_* = tokens/s per GPU abs. relative
// error; mem_* = fit/OOM verdict accuracy and reserved-peak error. "before" = uncalibrated
// defaults (default profile for memory), "held_out" = k-fold CV by family/configuration.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <filesystem>

#include "preflight/planner/catalog.hpp"
#include "preflight/validation/external_memory.hpp"
#include "preflight/validation/external_runs.hpp"
#include "preflight/validation/throughput_fit.hpp"

namespace {

using namespace preflight;

const std::filesystem::path kExternal = std::filesystem::path(PREFLIGHT_TEST_DATA_DIR) / "measurements" / "external";

void BM_HeldOutAccuracy(benchmark::State& state) {
    for (const auto& folder : validation::find_external_datasets(kExternal)) {
        const validation::ExternalDataset d = validation::read_external_dataset(folder);
        if (d.evaluation_only) continue;  // never fitted on (validate --check reports its errors)
        const GpuSpec gpu = load_gpu(d.gpu, PREFLIGHT_TEST_DATA_DIR);
        validation::ThroughputGate g;
        validation::MemoryCrossValidation m;
        for (auto _ : state) {
            g = validation::throughput_gate(d, gpu);
            m = validation::memory_cross_validation(d.runs, gpu, g.cv.folds);
        }
        state.counters["tok_p50_before"] = g.cv.before.p50;
        state.counters["tok_p50_held_out"] = g.cv.held_out.p50;
        state.counters["tok_p95_before"] = g.cv.before.p95;
        state.counters["tok_p95_held_out"] = g.cv.held_out.p95;
        state.counters["mem_verdict_before"] = m.before_figures.verdict_accuracy;
        state.counters["mem_verdict_held_out"] = m.held_out_figures.verdict_accuracy;
        state.counters["mem_res_p50_before"] = m.before_figures.reserved_ok.p50;
        state.counters["mem_res_p50_held_out"] = m.held_out_figures.reserved_ok.p50;
        state.counters["mem_res_p95_before"] = m.before_figures.reserved_ok.p95;
        state.counters["mem_res_p95_held_out"] = m.held_out_figures.reserved_ok.p95;
        std::printf("%s: tokens/s per GPU error P50 %.1f %% -> %.1f %%, P95 %.1f %% -> %.1f %%; fit/OOM verdict %.1f %% -> "
                    "%.1f %%; reserved peak P50 %.1f %% -> %.1f %%, P95 %.1f %% -> %.1f %% (before -> held out)\n",
                    d.name.c_str(), 100 * g.cv.before.p50, 100 * g.cv.held_out.p50, 100 * g.cv.before.p95,
                    100 * g.cv.held_out.p95, 100 * m.before_figures.verdict_accuracy,
                    100 * m.held_out_figures.verdict_accuracy, 100 * m.before_figures.reserved_ok.p50,
                    100 * m.held_out_figures.reserved_ok.p50, 100 * m.before_figures.reserved_ok.p95,
                    100 * m.held_out_figures.reserved_ok.p95);
    }
}
BENCHMARK(BM_HeldOutAccuracy)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace
