// Held-out accuracy on the external measured runs, next to the uncalibrated defaults, so
// the calibration's gain is visible (BENCHMARK_MAIN() lives in bench_planner.cpp).
// Figures are counters (fractions: 0.29 = 29 %), prefixed with the data set's name: tok_* = tokens/s per GPU abs. relative
// error; mem_* = fit/OOM verdict accuracy and reserved-peak error. "before" = uncalibrated
// defaults (default profile for memory), "held_out" = k-fold CV by family/configuration.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "preflight/planner/catalog.hpp"
#include "preflight/validation/external_memory.hpp"
#include "preflight/validation/external_runs.hpp"
#include "preflight/validation/throughput_fit.hpp"

namespace {

using namespace preflight;

const std::filesystem::path kExternal = std::filesystem::path(PREFLIGHT_TEST_DATA_DIR) / "measurements" / "external";

// One fitted data set's held-out figures (memory only where the framework profile models the
// allocator: nanotron).
struct HeldOut {
    validation::ExternalDataset set;
    validation::ThroughputGate tokens;
    std::optional<validation::MemoryCrossValidation> memory;
};

void print_and_count(benchmark::State& state, const HeldOut& h) {
    const auto& t = h.tokens.cv;
    const std::string tag = h.set.name + "_";
    state.counters[tag + "tok_p50_before"] = t.before.p50;
    state.counters[tag + "tok_p50_held_out"] = t.held_out.p50;
    state.counters[tag + "tok_p95_before"] = t.before.p95;
    state.counters[tag + "tok_p95_held_out"] = t.held_out.p95;
    std::printf("%s: tokens/s per GPU error P50 %.1f %% -> %.1f %%, P95 %.1f %% -> %.1f %%", h.set.name.c_str(),
                100 * t.before.p50, 100 * t.held_out.p50, 100 * t.before.p95, 100 * t.held_out.p95);
    if (!h.memory) {
        std::printf(" (before -> held out; no memory measured)\n");
        return;
    }
    const auto& b = h.memory->before_figures;
    const auto& a = h.memory->held_out_figures;
    state.counters[tag + "mem_verdict_before"] = b.verdict_accuracy;
    state.counters[tag + "mem_verdict_held_out"] = a.verdict_accuracy;
    state.counters[tag + "mem_res_p50_before"] = b.reserved_ok.p50;
    state.counters[tag + "mem_res_p50_held_out"] = a.reserved_ok.p50;
    state.counters[tag + "mem_res_p95_before"] = b.reserved_ok.p95;
    state.counters[tag + "mem_res_p95_held_out"] = a.reserved_ok.p95;
    std::printf("; fit/OOM verdict %.1f %% -> %.1f %%; reserved peak P50 %.1f %% -> %.1f %%, P95 %.1f %% -> %.1f %% "
                "(before -> held out)\n",
                100 * b.verdict_accuracy, 100 * a.verdict_accuracy, 100 * b.reserved_ok.p50, 100 * a.reserved_ok.p50,
                100 * b.reserved_ok.p95, 100 * a.reserved_ok.p95);
}

void BM_HeldOutAccuracy(benchmark::State& state) {
    std::vector<HeldOut> results;
    for (auto _ : state) {
        results.clear();
        for (const auto& folder : validation::find_external_datasets(kExternal)) {
            HeldOut h{validation::read_external_dataset(folder), {}, std::nullopt};
            if (h.set.evaluation_only) continue;  // never fitted on (validate --check reports its errors)
            const GpuSpec gpu = load_gpu(h.set.gpu, PREFLIGHT_TEST_DATA_DIR);
            h.tokens = validation::throughput_gate(h.set, gpu);
            if (validation::has_memory_model(h.set))
                h.memory = validation::memory_cross_validation(h.set.runs, gpu, h.tokens.cv.folds, &h.tokens.cv.fold_fits);
            results.push_back(std::move(h));
        }
    }
    for (const HeldOut& h : results) print_and_count(state, h);
}
BENCHMARK(BM_HeldOutAccuracy)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace
