// Loopback parity on the device: a multi-GPU plan's ranks (threads of one process on one GPU,
// device.hpp run_ranks_on_device) against one GPU running the same global batch. Shared by the
// data- and tensor-parallel GPU tests.
#pragma once

#include <algorithm>
#include <cmath>

#include "catalog_fixture.hpp"
#include "preflight/runtime/device.hpp"
#include "preflight/runtime/program.hpp"

namespace preflight::runtime::test {

// Small models whose heads split 2 (Llama: 4 query, 2 key/value heads) and 4 ways (GPT-2 style:
// 4 heads); vocabulary 300, so at tp 2 the second rank holds 44 real tokens of its 256 rows.
inline ModelConfig dp_llama(std::int64_t layers = 2) {
    nlohmann::json cfg = {{"model_type", "llama"},         {"hidden_size", 128},       {"num_hidden_layers", layers},
                          {"num_attention_heads", 4},       {"num_key_value_heads", 2}, {"intermediate_size", 160},
                          {"vocab_size", 300},              {"max_position_embeddings", 64},
                          {"tie_word_embeddings", false}};
    return model_from_hf_config(cfg, "dp-llama");
}
inline ModelConfig dp_gpt(std::int64_t layers = 2) { return preflight::test::gpt_model(128, layers, 4, 300, 64); }

// The bf16-mixed bound on the updated parameters' relative L2 difference (derived in
// test_gpu_data_parallel.cpp): 2^-8, one bf16 ulp on every element at the least.
inline constexpr double kBf16ParamL2 = 0x1p-8;

struct Parity {
    double loss = 0, param_l2 = 0, param_max = 0;
};

// Worst relative loss difference over the steps (the mean loss of the ranks on the last pipeline
// stage, the only ones with a loss), and the updated parameters' difference: L2 relative to
// their norm, and the largest element.
inline Parity parity(const ModelConfig& m, const Plan& multi, int steps) {
    RunOptions o;
    o.seed = 21;
    const auto a = run_ranks_on_device(m, single_gpu_plan(multi), o, steps);
    const auto b = run_ranks_on_device(m, multi, o, steps);
    Parity p;
    const std::size_t last_stage = b.size() - static_cast<std::size_t>(multi.dp * multi.tp * multi.cp);  // tp-cp-dp-pp order
    for (int s = 0; s < steps; ++s) {
        double mean = 0;
        for (std::size_t r = last_stage; r < b.size(); ++r)
            mean += b[r].losses[static_cast<std::size_t>(s)] / static_cast<double>(b.size() - last_stage);
        const double want = a[0].losses[static_cast<std::size_t>(s)];
        p.loss = std::max(p.loss, std::abs(mean - want) / std::abs(want));
    }
    const std::vector<double>& got = b[0].updated;  // both in the single-GPU layout
    double d2 = 0, n2 = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        const double e = got[i] - a[0].updated[i];
        d2 += e * e;
        n2 += a[0].updated[i] * a[0].updated[i];
        p.param_max = std::max(p.param_max, std::abs(e));
    }
    p.param_l2 = std::sqrt(d2 / n2);
    return p;
}

}  // namespace preflight::runtime::test
