// The PyTorch profile's terms, each against a hand derivation.
#include <gtest/gtest.h>

#include "catalog_fixture.hpp"
#include "preflight/planner/profiles.hpp"

using namespace preflight;

namespace {

MemoryReport eval(const std::string& model, const Plan& plan, const FrameworkProfile& prof, bool timeline = true) {
    MemoryOptions o;
    o.profile = prof;
    o.timeline = timeline;
    return evaluate_memory(test::catalog_model(model), test::catalog_gpu("h100-sxm-80gb"), plan, o);
}

using test::timeline_at;

Plan plan(std::int64_t seq, std::int64_t mbs, Precision p, AttentionKind a = AttentionKind::flash,
          Recompute r = Recompute::none) {
    Plan x;
    x.seq = seq;
    x.mbs = mbs;
    x.precision = p;
    x.attention = a;
    x.recompute = r;
    return x;
}

constexpr std::int64_t kGpt2Params = 124'439'808;  // GPT-2 small, tied embeddings

}  // namespace

TEST(PytorchProfile, NamedAndDistinct) {
    const auto p = profile_by_name("pytorch");
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(p->name, "pytorch");
    EXPECT_EQ(p->allocation_granularity_bytes, 512);
    // The default profile keeps every new term off.
    const FrameworkProfile d;
    EXPECT_FALSE(d.amp_fp32_parameters || d.autocast_weight_copies || d.hf_module_inventory ||
                 d.optimizer_moments_param_dtype);
    EXPECT_EQ(d.loss_fp32_logit_buffers, 0);
    EXPECT_EQ(d.optimizer_step_temp_moments, 0);
    EXPECT_EQ(d.allocation_granularity_bytes, 0);
}

TEST(PytorchProfile, AutocastKeepsFp32ParametersAndGradientsWithoutMaster) {
    // bf16-mixed under autocast: fp32 weights (4 B) and gradients (4 B), no master, AdamW 8 B;
    // every GPT-2 tensor is a multiple of 512 B (h = 768), so no rounding.
    const MemoryReport r = eval("gpt2", plan(512, 1, Precision::bf16_mixed), pytorch_profile());
    EXPECT_EQ(count_params(test::catalog_model("gpt2")).total, kGpt2Params);
    const auto& start = timeline_at(r, PhaseKind::step_start).bytes;
    EXPECT_EQ(start.weights, 4 * kGpt2Params);
    EXPECT_EQ(timeline_at(r, PhaseKind::optimizer_step).bytes.gradients, 4 * kGpt2Params);
    EXPECT_EQ(start.master_weights, 0);
    EXPECT_EQ(start.optimizer_states, 8 * kGpt2Params);
}

TEST(PytorchProfile, GradientsLiveFromTheirBackwardToTheStep) {
    // zero_grad(set_to_none=True): no gradient at the step's start, in forward or at the loss;
    // backward allocates the head side first (GPT-2's tied word embedding 50,257 * 768 =
    // 38,597,376 + the final LayerNorm 2 * 768 = 38,598,912), then each layer's 12 h^2 + 13 h =
    // 7,087,872 as its backward runs; the position embedding (1,024 * 768) after layer 1.
    // fp32 gradients under autocast, 4 B each (every tensor a multiple of 512 B).
    const MemoryReport r = eval("gpt2", plan(512, 1, Precision::bf16_mixed), pytorch_profile());
    const std::int64_t head = 38'598'912, layer = 7'087'872;
    EXPECT_EQ(head + 12 * layer + 1024 * 768, kGpt2Params);
    EXPECT_EQ(timeline_at(r, PhaseKind::step_start).bytes.gradients, 0);
    EXPECT_EQ(timeline_at(r, PhaseKind::forward, 12).bytes.gradients, 0);
    EXPECT_EQ(timeline_at(r, PhaseKind::output_loss).bytes.gradients, 0);
    EXPECT_EQ(timeline_at(r, PhaseKind::backward, 12).bytes.gradients, 4 * (head + layer));  // 182,747,136
    EXPECT_EQ(timeline_at(r, PhaseKind::backward, 5).bytes.gradients, 4 * (head + 8 * layer));  // 381,207,552
    EXPECT_EQ(timeline_at(r, PhaseKind::grad_reduce).bytes.gradients, 4 * kGpt2Params);
    // Accumulating over two micro-batches, the second (the peak's) runs beside the first's gradients.
    Plan acc = plan(512, 1, Precision::bf16_mixed);
    acc.grad_acc = 2;
    const MemoryReport a = eval("gpt2", acc, pytorch_profile());
    EXPECT_EQ(timeline_at(a, PhaseKind::step_start).bytes.gradients, 0);
    EXPECT_EQ(timeline_at(a, PhaseKind::output_loss).bytes.gradients, 4 * kGpt2Params);
    EXPECT_EQ(timeline_at(a, PhaseKind::backward, 5).bytes.gradients, 4 * kGpt2Params);
}

TEST(PytorchProfile, PoolBeyondTheTensorsFollowsTheStepsGradients) {
    // The fitted 0.8731 B per gradient byte: 0.8731 * 4 * 124,439,808 = 434,593,585.46 -> 434,593,585 B;
    // the pool in whole 2 MiB segments; the device need adds the GPU spec's overhead (1 GiB) and
    // judges the fit.
    const MemoryReport r = eval("gpt2", plan(512, 1, Precision::bf16_mixed), pytorch_profile(), false);
    EXPECT_EQ(r.reserved_extra.gradient_fragmentation_bytes, 434'593'585);
    EXPECT_EQ(r.reserved_extra.total(), 434'593'585);
    const std::int64_t segment = 2 << 20;
    const std::int64_t pool = (r.peak_allocated_bytes + 434'593'585 + segment - 1) / segment * segment;
    EXPECT_EQ(r.peak_reserved_bytes, pool);
    EXPECT_EQ(r.device_peak_bytes, pool + (1LL << 30));
    EXPECT_TRUE(r.fits);
    EXPECT_TRUE(pytorch_profile().verdict_on_reserved);
}

TEST(PytorchProfile, AutocastWeightCopiesLiveFromForwardToBackward) {
    // 16-bit copies of the GEMM weights: per GPT-2 layer q,k,v,o (4 h^2) + fc1, fc2 (8 h^2) =
    // 12 h^2 = 7,077,888 elements; the tied LM head 50257 * 768 = 38,597,376. 2 bytes each.
    const std::int64_t layer = 12 * 768 * 768, head = 50257 * 768;
    const MemoryReport r = eval("gpt2", plan(512, 1, Precision::bf16_mixed), pytorch_profile());
    const std::int64_t base = 4 * kGpt2Params;
    EXPECT_EQ(timeline_at(r, PhaseKind::forward, 3).bytes.weights - base, 3 * layer * 2);
    EXPECT_EQ(timeline_at(r, PhaseKind::output_loss).bytes.weights - base, (12 * layer + head) * 2);  // 247,064,064 B
    EXPECT_EQ((12 * layer + head) * 2, 247'064'064);
    EXPECT_EQ(timeline_at(r, PhaseKind::backward, 5).bytes.weights - base, 5 * layer * 2);
    EXPECT_EQ(timeline_at(r, PhaseKind::optimizer_step).bytes.weights - base, 0);
    // Full recompute: the autocast cache is cleared after forward; backward holds only the
    // recomputed layer's copies.
    const MemoryReport f = eval("gpt2", plan(512, 1, Precision::bf16_mixed, AttentionKind::flash, Recompute::full),
                                pytorch_profile());
    EXPECT_EQ(timeline_at(f, PhaseKind::backward, 5).bytes.weights - base, layer * 2);
    // No autocast, no copies.
    const MemoryReport p = eval("gpt2", plan(512, 1, Precision::bf16), pytorch_profile());
    EXPECT_EQ(timeline_at(p, PhaseKind::output_loss).bytes.weights, 2 * kGpt2Params);
}

TEST(PytorchProfile, LossHoldsThreeFp32LogitBuffers) {
    // s*b*V*(2 + 3*4): bf16 logits + log_softmax output + two fp32 gradients = 14 B per logit.
    const MemoryReport r = eval("gpt2", plan(1024, 1, Precision::bf16_mixed), pytorch_profile());
    EXPECT_EQ(timeline_at(r, PhaseKind::output_loss).bytes.logits_and_loss, 1024LL * 50257 * 14);  // 720,484,352
    const MemoryReport f = eval("gpt2", plan(1024, 1, Precision::fp32), pytorch_profile());
    EXPECT_EQ(timeline_at(f, PhaseKind::output_loss).bytes.logits_and_loss, 1024LL * 50257 * 16);
}

TEST(PytorchProfile, PureBf16MomentsInParameterDtypeAndForeachTemporary) {
    // torch.optim.AdamW: exp_avg, exp_avg_sq = zeros_like(param) -> 2 + 2 B per bf16 parameter;
    // the foreach step allocates sqrt(exp_avg_sq): one more moment (2 B) at the optimizer step.
    const MemoryReport r = eval("gpt2", plan(512, 1, Precision::bf16), pytorch_profile());
    EXPECT_EQ(timeline_at(r, PhaseKind::step_start).bytes.optimizer_states, 4 * kGpt2Params);
    EXPECT_EQ(timeline_at(r, PhaseKind::optimizer_step).bytes.buffers -
                  timeline_at(r, PhaseKind::step_start).bytes.buffers,
              2 * kGpt2Params);
    // Under autocast the moments are fp32 and so is the temporary.
    const MemoryReport a = eval("gpt2", plan(512, 1, Precision::bf16_mixed), pytorch_profile());
    EXPECT_EQ(timeline_at(a, PhaseKind::optimizer_step).bytes.buffers -
                  timeline_at(a, PhaseKind::step_start).bytes.buffers,
              4 * kGpt2Params);
}

TEST(PytorchProfile, CachingAllocatorRoundsEachStateTensorTo512Bytes) {
    // SmolLM-360M: h = 960, so each norm weight is 960 * 4 = 3,840 B in fp32, rounded to 4,096
    // (256 B of padding); 2 norms per layer * 32 layers + the final norm = 65 tensors. Every
    // other tensor is a multiple of 512 B (960 * 4 * n with n even... checked below by the total).
    const ModelConfig m = test::catalog_model("smollm-360m");
    ASSERT_EQ(m.hidden, 960);
    ASSERT_EQ(m.layers, 32);
    const std::int64_t P = count_params(m).total;
    const MemoryReport r = eval("smollm-360m", plan(512, 1, Precision::fp32), pytorch_profile());
    const auto& start = timeline_at(r, PhaseKind::step_start).bytes;
    EXPECT_EQ(start.weights, 4 * P + 65 * 256);
    EXPECT_EQ(timeline_at(r, PhaseKind::optimizer_step).bytes.gradients, 4 * P + 65 * 256);
    EXPECT_EQ(start.optimizer_states, 8 * P + 2 * 65 * 256);  // two moments, each rounded
}

TEST(PytorchProfile, HfLlamaLayerInventoryUnderAutocast) {
    // SmolLM-360M, bf16-mixed (autocast, fp32 residual), SDPA flash, per token of one layer:
    //   two RMSNorm+GEMM pairs: fp32 input 4h + normalized (fp32) 4h + rsqrt 4 + bf16 GEMM input 2h
    //   q 2*960, k 2*320, v 2*320, log-sum-exp 4*15, o_proj input 2*960
    //   SwiGLU: gate, up, silu(gate) 2f each + down input 2f
    // = 2*(10*960 + 4) + 1920 + 640 + 640 + 60 + 1920 + 8*2560 = 44,868 B per token.
    const MemoryReport r = eval("smollm-360m", plan(2048, 1, Precision::bf16_mixed), pytorch_profile(), false);
    EXPECT_EQ(r.activations_per_layer_bytes, 2048LL * 44'868);
    // Full recompute keeps the fp32 residual-stream input: s*b*h*4.
    const MemoryReport f = eval("smollm-360m", plan(2048, 1, Precision::bf16_mixed, AttentionKind::flash, Recompute::full),
                                pytorch_profile(), false);
    EXPECT_EQ(f.activations_per_layer_bytes, 2048LL * 960 * 4);
}

TEST(PytorchProfile, HfGpt2EagerFp32Inventory) {
    // GPT-2, fp32, eager, per token of one layer (h 768, f 3072, a 12, s 512):
    //   two LayerNorm+GEMM pairs: input 4h + mean/rstd 8 + GEMM input 4h
    //   q, k, v 4h each; softmax output 4*a*s (fp32, no cast); c_proj input 4h
    //   gelu_new: fc1 out, 0.5x, tanh, 1+tanh, fc2 input: 5 * 4f
    // = 2*(8h + 8) + 12h + 4as + 4h + 20f = 110,608 B per token.
    const MemoryReport r = eval("gpt2", plan(512, 8, Precision::fp32, AttentionKind::eager), pytorch_profile(), false);
    EXPECT_EQ(2 * (8 * 768 + 8) + 12 * 768 + 4 * 12 * 512 + 4 * 768 + 20 * 3072, 110'608);
    EXPECT_EQ(r.activations_per_layer_bytes, 512LL * 8 * 110'608);
}

TEST(PytorchProfile, EagerGqaRepeatsKvAndCastsTheFp32Softmax) {
    // SmolLM-360M, pure bf16, eager: K and V repeated to q width (2*960 each), softmax in fp32
    // (4*a*s) plus its bf16 cast (2*a*s); RMSNorm pairs: fp32 upcast 4h + bf16 normalized 2h +
    // rsqrt 4 + GEMM input 2h.
    const std::int64_t s = 1024, h = 960, a = 15, f = 2560;
    const std::int64_t per_token = 2 * (8 * h + 4) + 2 * 960 + 2 * 960 + 2 * 960 + 6 * a * s + 2 * 960 + 8 * f;
    const MemoryReport r = eval("smollm-360m", plan(s, 1, Precision::bf16, AttentionKind::eager), pytorch_profile(), false);
    EXPECT_EQ(r.activations_per_layer_bytes, s * per_token);
}
