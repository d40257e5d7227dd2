// Benchmarks of the planner's hot paths. The search and the GUI evaluate the
// memory model millions of times: goal < 10 us per full evaluation.
// Run: build/tests/preflight_bench   (prints ns per evaluation and evaluations/s)
#include <benchmark/benchmark.h>

#include "preflight/planner/catalog.hpp"
#include "preflight/planner/memory.hpp"

namespace {

using namespace preflight;

struct Fixture {
    ModelConfig model;
    GpuSpec gpu;
    Plan plan;
};

Fixture issue_plan(const char* model) {
    Fixture f{load_model(model, PREFLIGHT_TEST_DATA_DIR), load_gpu("h100-sxm-80gb", PREFLIGHT_TEST_DATA_DIR), {}};
    f.plan.seq = 4096;
    f.plan.dp = 8;
    f.plan.zero = ZeroStage{1};
    f.plan.recompute = Recompute::selective;
    return f;
}

void report_rate(benchmark::State& state) {
    state.counters["evaluations_per_s"] =
        benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// One full evaluation: parameter inventory, activation inventory, every candidate phase.
void BM_EvaluateMemory(benchmark::State& state, const char* model) {
    const Fixture f = issue_plan(model);
    for (auto _ : state) benchmark::DoNotOptimize(evaluate_memory(f.model, f.gpu, f.plan).peak_bytes);
    report_rate(state);
}
BENCHMARK_CAPTURE(BM_EvaluateMemory, llama_3_8b, "llama-3-8b");
BENCHMARK_CAPTURE(BM_EvaluateMemory, mixtral_8x7b, "mixtral-8x7b");

// Pipeline parallel: every stage is evaluated to find the most loaded one.
void BM_EvaluateMemoryPipeline(benchmark::State& state) {
    Fixture f = issue_plan("llama-3-70b");
    f.plan.pp = 8;
    f.plan.tp = 8;
    f.plan.dp = 1;
    f.plan.grad_acc = 16;
    for (auto _ : state) benchmark::DoNotOptimize(evaluate_memory(f.model, f.gpu, f.plan).peak_bytes);
    report_rate(state);
}
BENCHMARK(BM_EvaluateMemoryPipeline);

// With the per-layer timeline (what `preflight memory` and the GUI display).
void BM_EvaluateMemoryWithTimeline(benchmark::State& state) {
    const Fixture f = issue_plan("llama-3-8b");
    MemoryOptions o;
    o.timeline = true;
    for (auto _ : state) benchmark::DoNotOptimize(evaluate_memory(f.model, f.gpu, f.plan, o).peak_bytes);
    report_rate(state);
}
BENCHMARK(BM_EvaluateMemoryWithTimeline);

}  // namespace

BENCHMARK_MAIN();
