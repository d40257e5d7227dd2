// Plan-search speed: candidate plans evaluated per second on one core.
// BENCHMARK_MAIN() lives in bench_planner.cpp.
#include <benchmark/benchmark.h>

#include "preflight/planner/catalog.hpp"
#include "preflight/planner/search.hpp"

namespace {

void run_search(benchmark::State& state, const char* model_name, const char* gpu_name, std::int64_t gpus,
                std::int64_t gbs_tokens, std::int64_t seq) {
    const auto dir = std::filesystem::path(PREFLIGHT_TEST_DATA_DIR);
    const preflight::ModelConfig model = preflight::load_model(model_name, dir);
    const preflight::GpuSpec gpu = preflight::load_gpu(gpu_name, dir);
    preflight::SearchRequest req;
    req.gpus = gpus;
    req.gbs_tokens = gbs_tokens;
    req.seq = seq;
    std::int64_t plans = 0;
    for (auto _ : state) {
        const preflight::SearchResult r = preflight::search_plans(model, gpu, req);
        plans += r.plans_evaluated;
        benchmark::DoNotOptimize(r.candidates.data());
    }
    state.counters["plans_per_s"] = benchmark::Counter(static_cast<double>(plans), benchmark::Counter::kIsRate);
    state.counters["plans_per_search"] =
        benchmark::Counter(static_cast<double>(plans) / static_cast<double>(state.iterations()));
}

void BM_SearchLlama3_8B_8xH100(benchmark::State& s) { run_search(s, "llama-3-8b", "h100-sxm-80gb", 8, 4194304, 4096); }
void BM_SearchLlama3_70B_64xH100(benchmark::State& s) {
    run_search(s, "llama-3-70b", "h100-sxm-80gb", 64, 16777216, 8192);
}
void BM_SearchMixtral_16xA100(benchmark::State& s) { run_search(s, "mixtral-8x7b", "a100-sxm-80gb", 16, 4194304, 4096); }

}  // namespace

BENCHMARK(BM_SearchLlama3_8B_8xH100)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SearchLlama3_70B_64xH100)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SearchMixtral_16xA100)->Unit(benchmark::kMillisecond);
