// The step program, executed op by op on the host in double (HostRunner, host_runner.hpp:
// runtime/cuda/executor.cpp's reading of each op's views, with the CPU reference kernels),
// gives the whole-model reference's loss and gradients for every recompute mode, attention
// kind, precision recipe and family (GPT-2, Llama, and Mixtral's mixture of experts). Buffers are
// NaN-poisoned when allocated and again when freed, so a program that reads a buffer before
// writing it or after freeing it yields NaN gradients. This is what the GPU gradient test relies on (the device runs the same program),
// checked without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>

#include <nlohmann/json.hpp>

#include "catalog_fixture.hpp"
#include "host_parity.hpp"
#include "preflight/runtime/host_runner.hpp"
#include "preflight/runtime/reference.hpp"
#include "preflight/runtime/reference_model.hpp"

namespace preflight::runtime {
namespace {

using Vec = std::vector<double>;

ModelConfig micro_llama() { return preflight::test::llama_model(16, 2, 4, 2, 24, 13, 16); }
ModelConfig micro_gpt() { return preflight::test::gpt_model(16, 2, 2, 13, 16); }
// Mixtral-shaped: 4 SwiGLU experts of width 24, top-2 (the reference computes its sparse MLP as HF
// transformers' MixtralSparseMoeBlock does, without the runtime's routing table).
ModelConfig micro_mixtral() {
    const nlohmann::json cfg = {{"model_type", "mixtral"},      {"hidden_size", 16},         {"num_hidden_layers", 2},
                                {"num_attention_heads", 4},     {"num_key_value_heads", 2},  {"intermediate_size", 24},
                                {"vocab_size", 13},             {"max_position_embeddings", 16},
                                {"num_local_experts", 4},       {"num_experts_per_tok", 2}};
    return model_from_hf_config(cfg, "mixtral-test");
}

TEST(ProgramReference, HostExecutionOfTheProgramGivesTheReferenceGradients) {
    int cases = 0;
    for (const ModelConfig& m : {micro_llama(), micro_gpt(), micro_mixtral()})
        for (auto rc : all_recomputes())
            for (auto at : {AttentionKind::flash, AttentionKind::eager})
                for (auto pr : {Precision::fp32, Precision::bf16_mixed, Precision::bf16_mixed_fp32_grads, Precision::bf16}) {
                    Plan p = test_support::micro_plan(1, 1, 0, pr);
                    p.recompute = rc;
                    p.attention = at;
                    const std::string what = m.name + " " + std::string(to_string(rc)) + " " + std::string(to_string(at)) +
                                             " " + std::string(to_string(pr));
                    test_support::expect_host_matches_reference(build_program(m, p), what);
                    ++cases;
                }
    EXPECT_EQ(cases, 3 * 3 * 2 * 4);
}

}  // namespace
}  // namespace preflight::runtime
