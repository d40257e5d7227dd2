// Arena planning speed (runtime/src/arena.cpp): a step program's allocations placed per second,
// and how far the arena lies over the most bytes alive at once. BENCHMARK_MAIN() lives in
// bench_planner.cpp.
#include <benchmark/benchmark.h>

#include "preflight/planner/catalog.hpp"
#include "preflight/runtime/arena.hpp"
#include "preflight/runtime/program.hpp"

namespace {

void plan(benchmark::State& state, const char* model_name, preflight::Plan p, std::int64_t rank) {
    const preflight::ModelConfig model = preflight::load_model(model_name, std::filesystem::path(PREFLIGHT_TEST_DATA_DIR));
    const preflight::runtime::Program program =
        preflight::runtime::build_program(model, preflight::resolve_defaults(p, model), rank, true);
    preflight::runtime::ArenaPlan a;
    for (auto _ : state) {
        a = preflight::runtime::plan_arena(program);
        benchmark::DoNotOptimize(a.arena_bytes);
    }
    state.counters["allocations"] = static_cast<double>(a.allocations);
    state.counters["allocations_per_s"] =
        benchmark::Counter(static_cast<double>(a.allocations) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
    state.counters["over_live_peak_pct"] = 100.0 * a.fragmentation();
}

// Llama-3-8B, seq 4096, 8 micro-batches, one GPU.
void BM_ArenaLlama3_8B_ga8(benchmark::State& s) {
    preflight::Plan p;
    p.seq = 4096;
    p.grad_acc = 8;
    plan(s, "llama-3-8b", p, 0);
}
// The most allocations the runtime's bounds allow a dry run of this size: Llama-3-70B rank 3 of
// tp 8 + sp x dp 4 under ZeRO-3, 51 micro-batches of 80 layers (4,080 layer-steps of 4,096).
void BM_ArenaLlama3_70B_tp8_z3_ga51(benchmark::State& s) {
    preflight::Plan p;
    p.seq = 4096;
    p.grad_acc = 51;
    p.tp = 8;
    p.sp = true;
    p.dp = 4;
    p.zero = preflight::zero_weights;
    plan(s, "llama-3-70b", p, 3);
}

// An interleaved stage, the heaviest arena plans a dry run makes (README, fuzzing): Llama-3-8B's
// first stage at dp 2 x tp 2 --sp x pp 4 x vpp 2, ZeRO-3, fp8-mixed, selective recompute. At
// 128 micro-batches (1,024 layer-steps) the step is also planned with every run written out; at
// 256 only its repeated steady state's two tied copies are.
void interleaved(benchmark::State& s, std::int64_t micro_batches) {
    preflight::Plan p;
    p.seq = 4096;
    p.grad_acc = micro_batches;
    p.dp = 2;
    p.tp = 2;
    p.sp = true;
    p.pp = 4;
    p.vpp = 2;
    p.pp_schedule = preflight::PpSchedule::interleaved;
    p.zero = preflight::zero_weights;
    p.precision = preflight::Precision::fp8_mixed;
    p.recompute = preflight::Recompute::selective;
    plan(s, "llama-3-8b", p, 0);
}
void BM_ArenaLlama3_8B_interleaved_ga128(benchmark::State& s) { interleaved(s, 128); }
void BM_ArenaLlama3_8B_interleaved_ga256(benchmark::State& s) { interleaved(s, 256); }

}  // namespace

BENCHMARK(BM_ArenaLlama3_8B_interleaved_ga128)->Unit(benchmark::kSecond)->Iterations(1);
BENCHMARK(BM_ArenaLlama3_8B_interleaved_ga256)->Unit(benchmark::kSecond)->Iterations(1);
BENCHMARK(BM_ArenaLlama3_8B_ga8)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ArenaLlama3_70B_tp8_z3_ga51)->Unit(benchmark::kSecond)->Iterations(1);
