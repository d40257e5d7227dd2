// Weights, gradients, master weights and optimizer states per GPU, against the
// Ultra-Scale Playbook ("Memory for weights/grads/optimizer states") and the ZeRO
// paper (Rajbhandari et al. 2020, Figure 1 / sec. 5).
#include <gtest/gtest.h>

#include "catalog_fixture.hpp"
#include "preflight/planner/memory.hpp"

namespace preflight {
namespace {

constexpr std::int64_t kBillion = 1'000'000'000;

TEST(ModelStates, PlaybookSixteenBytesPerParamFp32) {
    // fp32: 4 (weights) + 4 (grads) + 8 (Adam moments).
    const auto b = model_state_bytes(kBillion, Precision::fp32, Optimizer::adamw, 0, 1);
    EXPECT_EQ(b.weights, 4 * kBillion);
    EXPECT_EQ(b.gradients, 4 * kBillion);
    EXPECT_EQ(b.master_weights, 0);
    EXPECT_EQ(b.optimizer_states, 8 * kBillion);
    EXPECT_EQ(b.total(), 16 * kBillion);
}

TEST(ModelStates, PlaybookSixteenBytesPerParamBf16Mixed) {
    // bf16 mixed: 2 + 2 + 4 (fp32 master) + 8 = 16 ("1B: 16 GB" in the Playbook's table).
    const auto b = model_state_bytes(kBillion, Precision::bf16_mixed, Optimizer::adamw, 0, 1);
    EXPECT_EQ(b.weights, 2 * kBillion);
    EXPECT_EQ(b.gradients, 2 * kBillion);
    EXPECT_EQ(b.master_weights, 4 * kBillion);
    EXPECT_EQ(b.optimizer_states, 8 * kBillion);
    EXPECT_EQ(b.total(), 16 * kBillion);
}

TEST(ModelStates, PlaybookTwentyBytesPerParamWithFp32Grads) {
    // "BF16 w/ FP32 grad acc": 20 bytes per parameter ("7B: 140 GB").
    const auto b = model_state_bytes(7 * kBillion, Precision::bf16_mixed_fp32_grads, Optimizer::adamw, 0, 1);
    EXPECT_EQ(b.gradients, 6 * 7 * kBillion);
    EXPECT_EQ(b.total(), 140 * kBillion);
}

TEST(ModelStates, PureBf16AndSgd) {
    // Pure bf16 with fp32 moments: 2 + 2 + 8 = 12; bf16-mixed SGD: 2 + 2 + 4 + 4 = 12.
    EXPECT_EQ(model_state_bytes(kBillion, Precision::bf16, Optimizer::adamw, 0, 1).total(), 12 * kBillion);
    EXPECT_EQ(model_state_bytes(kBillion, Precision::bf16_mixed, Optimizer::sgd, 0, 1).total(), 12 * kBillion);
}

// ZeRO paper, Figure 1: Psi = 7.5B, Nd = 64, K = 12 (mixed-precision Adam).
struct ZeroCase {
    int stage;
    std::int64_t bytes;
};
class ZeroPaper : public ::testing::TestWithParam<ZeroCase> {};

TEST_P(ZeroPaper, SevenPointFiveBillionOnSixtyFourGpus) {
    const std::int64_t psi = 7'500'000'000;
    const auto b = model_state_bytes(psi, Precision::bf16_mixed, Optimizer::adamw, GetParam().stage, 64);
    EXPECT_EQ(b.total(), GetParam().bytes);
}

INSTANTIATE_TEST_SUITE_P(
    Figure1, ZeroPaper,
    ::testing::Values(ZeroCase{0, 120'000'000'000},   // (2 + 2 + K) Psi = 120 GB
                      ZeroCase{1, 31'406'250'000},    // 2Psi + 2Psi + K Psi / Nd = 31.4 GB
                      ZeroCase{2, 16'640'625'000},    // 2Psi + (2 + K) Psi / Nd = 16.6 GB
                      ZeroCase{3, 1'875'000'000}));   // (2 + 2 + K) Psi / Nd = 1.9 GB

TEST(ModelStates, ShardingPadsToWholeElements) {
    // 10 parameters over 4 ranks: each rank holds ceil(10/4) = 3 elements of the padded buffer.
    const auto b = model_state_bytes(10, Precision::bf16_mixed, Optimizer::adamw, 2, 4);
    EXPECT_EQ(b.weights, 10 * 2);
    EXPECT_EQ(b.gradients, 3 * 2);
    EXPECT_EQ(b.master_weights, 3 * 4);
    EXPECT_EQ(b.optimizer_states, 3 * 8);
}

TEST(ModelStates, Zero3ShardsEachTensorWithItsOwnPadding) {
    // gpt2 under ZeRO-3 over dp = 7: every tensor is split on its own (ceil per tensor),
    // so the weights exceed the flat ceil(N / 7) share.
    const ModelConfig m = test::catalog_model("gpt2");
    const GpuSpec gpu = test::catalog_gpu("h100-sxm-80gb");
    Plan p;
    p.seq = 1024;
    p.dp = 7;
    p.zero = ZeroStage{3};
    MemoryOptions o;
    o.profile.megatron_fsdp = false;  // a plain FSDP: no module kept gathered beside its shards
    const MemoryReport r = evaluate_memory(m, gpu, p, o);
    std::int64_t per_tensor = 0;
    for (const auto& t : param_tensors(m)) {
        const std::int64_t count = t.place == TensorPlace::layer ? m.layers : 1;
        per_tensor += count * ((t.numel() + 6) / 7);
    }
    EXPECT_EQ(r.at_peak.weights, per_tensor * 2);
    EXPECT_GT(per_tensor, (124'439'808 + 6) / 7);
}

TEST(ModelStates, TensorParallelSplitsMatricesNotNorms) {
    // llama-3-8b, tp = 2: the 65 RMSNorm weights (2 per layer + final, 4096 each) stay whole,
    // everything else (projections, embedding, head) is halved.
    const ModelConfig m = test::catalog_model("llama-3-8b");
    const GpuSpec gpu = test::catalog_gpu("h100-sxm-80gb");
    Plan p;
    p.seq = 4096;
    p.tp = 2;
    const MemoryReport r = evaluate_memory(m, gpu, p);
    const std::int64_t norms = 65 * 4096;
    EXPECT_EQ(r.params_on_gpu, (8'030'261'248 - norms) / 2 + norms);
    EXPECT_EQ(r.at_peak.weights, 2 * r.params_on_gpu);
}

TEST(ModelStates, Gpt2RowParallelBiasesAreReplicated) {
    // GPT-2 under tp = 2: column-parallel biases (qkv 3h, fc 4h) split, row-parallel biases
    // (attention out h, fc2 h) and LayerNorms (4h) replicated, learned positions replicated,
    // vocab 50257 padded to 50258 for an even split.
    const ModelConfig m = test::catalog_model("gpt2");
    const GpuSpec gpu = test::catalog_gpu("h100-sxm-80gb");
    Plan p;
    p.seq = 1024;
    p.tp = 2;
    const std::int64_t h = 768;
    const std::int64_t layer = (h * 3 * h + 3 * h) / 2 + h * h / 2 + h + (h * 4 * h + 4 * h) / 2 + 4 * h * h / 2 + h +
                               4 * h;
    const std::int64_t expected = 50258 / 2 * h + 1024 * h + 12 * layer + 2 * h;
    EXPECT_EQ(evaluate_memory(m, gpu, p).params_on_gpu, expected);
}

TEST(ModelStates, PipelineStageHoldsItsLayersAndEnds) {
    // llama-3-8b, pp = 4 -> 8 layers per stage; the first adds the embedding, the last the
    // final norm and LM head. Per layer: (8,030,261,248 - 2*128256*4096 - 4096) / 32.
    const ModelConfig m = test::catalog_model("llama-3-8b");
    const std::int64_t per_layer = 218'112'000;
    ASSERT_EQ(count_params(m).per_layer, per_layer);
    Plan p;
    p.seq = 4096;
    p.pp = 4;
    p.grad_acc = 1;  // one micro-batch: the last stage (logits) is the most loaded
    const MemoryReport r = evaluate_memory(m, test::catalog_gpu("h100-sxm-80gb"), p);
    EXPECT_EQ(r.pipeline_stage, 3);
    EXPECT_EQ(r.layers_on_stage, 8);
    EXPECT_EQ(r.params_on_gpu, 8 * per_layer + 128256LL * 4096 + 4096);
}

}  // namespace
}  // namespace preflight
