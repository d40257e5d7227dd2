// One layer's kernels as Hugging Face's eager modules run them (eager_kernels.hpp), counted by
// hand from transformers' GPT-2 and Llama modules and PyTorch's derivative formulas, and the
// host-dispatch term the pytorch profile charges for them.
#include <gtest/gtest.h>

#include <algorithm>

#include "catalog_fixture.hpp"
#include "preflight/planner/eager_kernels.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/throughput.hpp"

namespace preflight {
namespace {

Plan one_gpu(std::int64_t seq, std::int64_t mbs, Precision precision) {
    Plan p;
    p.seq = seq;
    p.mbs = mbs;
    p.precision = precision;
    p.attention = AttentionKind::flash;
    return p;
}

// GPT-2 small (h 768, f 3072, biases) in fp32, SDPA, 4,096 tokens; every tensor 4 bytes.
// Forward, bytes per token: ln_1 8h; the attention output's .contiguous() copy 8h; residual
// add 12h; ln_2 8h; gelu_new's eight ops: pow 8f, *0.044715 8f, x + 12f, *sqrt(2/pi) 8f,
// tanh 8f, 1 + 8f, 0.5*x 8f, the product 12f (72f); residual add 12h: 48h + 72f = 336h.
// Kernels: 2 norms, 4 GEMMs, the attention kernel, the copy, 2 adds, 8 GeLU ops = 18.
// Backward: the product 2 x 12f, 0.5*x 8f, tanh 12f, the two scalings 8f each, pow 3 kernels
// 28f, two gradient sums for the GeLU input (read three times) 24f, c_fc's bias 4f (116f);
// each LayerNorm 12h + 8h, the two residual inputs' sums 12h each, the split's concatenation
// 24h, the biases of c_attn 12h, attn c_proj 4h, mlp c_proj 4h (108h): 572h per token, plus
// the bias gradients written once, (3h + h + f + h) x 4 B = 36h. Kernels: 4 x (dgrad, wgrad,
// bias) = 12, the attention's 3, split 1, norms 4, gradient sums 4, GeLU 9 = 33.
TEST(EagerKernels, Gpt2Fp32LayerCountedByHand) {
    const ModelConfig m = test::catalog_model("gpt2");
    ASSERT_EQ(m.hidden, 768);
    ASSERT_EQ(m.ffn_hidden, 3072);
    const eager::LayerKernels k = eager::hf_layer_kernels(m, one_gpu(1024, 4, Precision::fp32), false);
    const double tokens = 4096, h = 768;
    EXPECT_DOUBLE_EQ(k.fwd_bytes, tokens * 336 * h);                 // 1,056,964,608 B
    EXPECT_DOUBLE_EQ(k.bwd_bytes, tokens * 572 * h + 36 * h);        // 1,799,384,064 B
    EXPECT_EQ(k.fwd_kernels, 18);
    EXPECT_EQ(k.bwd_kernels, 33);
    EXPECT_EQ(k.score_fwd_bytes, 0.0);  // SDPA: one kernel over the scores
}

// Llama-3.2-1B (h 2048, q 2048, kv 512, f 8192, head_dim 64) in fp32, SDPA (train.py's causal
// SDPA repeats K/V for fp32), 4,096 tokens. Forward per token: each RMSNorm pow 8h, mean 4h + 4,
// + eps 8, rsqrt 8, x * rsqrt 8h + 4, weight * x 8h (28h + 24); RoPE on q: x*cos 8q + 4d,
// rotate_half 4q + 8q, *sin 8q + 4d, the sum 12q (40q + 8d), on k the same at kv; repeat_kv of
// k and v 4kv + 4q each; the output copy 8q; two residual adds 12h; silu 8f, the product 12f:
// 80h + 48 + 56q + 48kv + 16d + 20f = 468,016 B, plus each norm's weight read once (4h).
// Kernels: 12 norm ops, 7 GEMMs, 10 RoPE ops, 2 repeats, attention, copy, 2 adds, 2 MLP ops = 37.
// Backward per token: the MLP product 24f, silu 12f; each RMSNorm: weight * x 12h + 4h (its
// broadcast sum) + 8h, x * rsqrt 8h + 4 + 12h + 4h + 4, rsqrt 12, mean 4h + 4, pow 28h (80h + 24);
// gradient sums: the MLP input (two GEMMs) 12h, the attention input (three) 24h, each residual
// stream (read three times) 24h; repeats 4kv + 4q each; RoPE per input: *sin 8w + 4d, the
// negation 4w, two slice_backwards 8w each, x*cos 8w + 4d, two gradient sums 24w (60w + 8d):
// 36f + 244h + 48 + 68q + 68kv + 16d = 969,776 B, plus the norm weights' gradients (2 x 8h).
// Kernels: 7 GEMMs x 2, MLP 3, norms 2 x 11, gradient sums 7, attention 3, repeats 2, RoPE 2 x 9 = 69.
TEST(EagerKernels, LlamaFp32LayerCountedByHand) {
    const ModelConfig m = test::catalog_model("llama-3.2-1b");
    ASSERT_EQ(m.q_width(), 2048);
    ASSERT_EQ(m.kv_width(), 512);
    const eager::LayerKernels k = eager::hf_layer_kernels(m, one_gpu(2048, 2, Precision::fp32), false);
    const double tokens = 4096, h = 2048;
    EXPECT_DOUBLE_EQ(k.fwd_bytes, tokens * 468016 + 8 * h);   // 1,917,009,920 B
    EXPECT_DOUBLE_EQ(k.bwd_bytes, tokens * 969776 + 16 * h);  // 3,972,235,264 B
    EXPECT_EQ(k.fwd_kernels, 37);
    EXPECT_EQ(k.bwd_kernels, 69);
}

// Qwen3Attention's q_norm / k_norm: Llama's RMSNorm over each head's head_dim d, on q (E = tokens x
// q elements, r = tokens x heads rows) and on k. fp32, per norm: forward pow 8E, mean 4E + 4r,
// + eps 8r, rsqrt 8r, x * rsqrt 8E + 4r, weight * x 8E + 4d (28E + 24r + 4d, 6 kernels);
// backward weight * x 24E + 8d (product per operand, the weight's broadcast sum), x * rsqrt
// 24E + 8r, rsqrt 12r, mean 4r + 4E, pow 28E, the projection's gradient sum (read by pow and the
// product) 12E (92E + 24r + 8d, 12 kernels: 3 + 3 + 1 + 1 + 3 + 1). RoPE then reads the norm's
// output as it read the projection. Under autocast the projection is bf16: the cast to fp32 and
// back add a kernel each way, the weight product (fp32 weight) casts xn's gradient, and RoPE,
// now fed fp32, no longer casts its two gradients to bf16: 8 + 13 kernels per norm.
TEST(EagerKernels, Qwen3QkNormsCountedByHand) {
    const ModelConfig m = test::catalog_model("qwen3-8b");
    ModelConfig plain = m;
    plain.qk_norm = false;
    const Plan p = one_gpu(1024, 1, Precision::fp32);
    const eager::LayerKernels k = eager::hf_layer_kernels(m, p, false), b = eager::hf_layer_kernels(plain, p, false);
    const double T = 1024, E = T * (4096 + 1024), r = T * (32 + 8), d = 128;
    EXPECT_DOUBLE_EQ(k.fwd_bytes - b.fwd_bytes, 28 * E + 24 * r + 2 * 4 * d);
    EXPECT_DOUBLE_EQ(k.bwd_bytes - b.bwd_bytes, 92 * E + 24 * r + 2 * 8 * d);
    EXPECT_EQ(k.fwd_kernels - b.fwd_kernels, 2 * 6);
    EXPECT_EQ(k.bwd_kernels - b.bwd_kernels, 2 * 12);
    const Plan amp = one_gpu(1024, 1, Precision::bf16_mixed);
    const eager::LayerKernels ka = eager::hf_layer_kernels(m, amp, true), ba = eager::hf_layer_kernels(plain, amp, true);
    EXPECT_EQ(ka.fwd_kernels - ba.fwd_kernels, 2 * 8);
    EXPECT_EQ(ka.bwd_kernels - ba.bwd_kernels, 2 * 13);
}

// Phi-3 against the same layer with q/k/v and gate/up apart, fp32 (4 B), T tokens. Forward: one
// qkv_proj and one gate_up_proj GEMM for five; slices and chunk are views: 3 kernels fewer. Backward,
// per token: the norm outputs feed one GEMM each, not three and two, so three fewer gradient sums
// (-3 x 12h); each of the three slices' slice_backward fills a zero gradient of the whole
// projection and copies its part in (3 x 4(q + 2kv) + 8(q + 2kv)), and the projection's three
// gradients take two sums (2 x 12(q + 2kv)); chunk's backward concatenates (16f). Kernels: six
// GEMMs (three linears' dgrad and wgrad) and three sums fewer, six slice kernels, two sums and one
// cat more: 0.
TEST(EagerKernels, Phi3FusedProjectionsCountedByHand) {
    const ModelConfig m = test::catalog_model("phi-4");
    ModelConfig apart = m;
    apart.fused_qkv = apart.fused_gate_up = false;
    const Plan p = one_gpu(1024, 1, Precision::fp32);
    const eager::LayerKernels k = eager::hf_layer_kernels(m, p, false), b = eager::hf_layer_kernels(apart, p, false);
    const double T = 1024, h = 5120, qkv = 5120 + 2 * 1280, f = 17920;
    EXPECT_DOUBLE_EQ(k.fwd_bytes, b.fwd_bytes);
    EXPECT_DOUBLE_EQ(k.bwd_bytes - b.bwd_bytes, T * (-36 * h + 12 * qkv + 8 * qkv + 24 * qkv + 16 * f));
    EXPECT_EQ(k.fwd_kernels - b.fwd_kernels, -3);
    EXPECT_EQ(k.bwd_kernels, b.bwd_kernels);
}

// Under torch.autocast over fp32 parameters GPT-2 adds: forward, the casts of the LayerNorm
// outputs (fp32) for c_attn and c_fc, of the GeLU output for c_proj, of the GeLU input for pow
// (autocast's fp32 list), and of the 4 weights and 4 biases (12 kernels); backward, the same
// 12 casts back, the bf16 operands' gradient casts at the two residual adds, at x + 0.044715x^3
// and at 0.5x * (1 + tanh) (4 more).
TEST(EagerKernels, Gpt2AutocastAddsItsCasts) {
    const ModelConfig m = test::catalog_model("gpt2");
    const eager::LayerKernels k = eager::hf_layer_kernels(m, one_gpu(1024, 8, Precision::bf16_mixed), true);
    EXPECT_EQ(k.fwd_kernels, 18 + 12);
    EXPECT_EQ(k.bwd_kernels, 33 + 12 + 4);
}

// Eager attention moves the scores through HBM op by op (Llama's eager_attention_forward):
// Q K^T then * scaling (2 x 2 B), + the fp32 causal mask (read 2 + 4/heads, write 4),
// softmax(dtype=float32) (4 + 4), the cast to bf16 for P V (4 + 2) per score under autocast;
// backward the cast back (2 + 4), softmax's (4 + 4 + 4), the fp32 sum's gradient cast to the bf16
// scores (4 + 2) and the scaling's (2 + 2).
TEST(EagerKernels, EagerAttentionScoresUnderAutocast) {
    const ModelConfig m = test::catalog_model("llama-3.2-1b");
    Plan p = one_gpu(1024, 8, Precision::bf16_mixed);
    p.attention = AttentionKind::eager;
    const eager::LayerKernels k = eager::hf_layer_kernels(m, p, true);
    const double scores = 8.0 * 32 * 1024 * 1024;  // b x heads x s x s
    EXPECT_DOUBLE_EQ(k.score_fwd_bytes, scores * (4 + (2 + 4.0 / 32 + 4) + 8 + 6));
    EXPECT_DOUBLE_EQ(k.score_bwd_bytes, scores * (6 + 12 + 6 + 4));
}

// The pytorch profile charges each layer max(0, kernels x host per kernel - the layer's GPU
// time): GPT-2 fp32 launches 18 + 33 kernels a layer, 2 x 18 + 33 under full recompute.
TEST(EagerKernels, PytorchProfileWaitsOnTheHostForSmallLayers) {
    const ModelConfig m = test::catalog_model("gpt2");
    const GpuSpec gpu = test::catalog_gpu("h100-sxm-80gb");
    const FrameworkProfile torch = pytorch_profile();
    for (const Recompute r : {Recompute::none, Recompute::full}) {
        Plan p = one_gpu(128, 1, Precision::fp32);
        p.recompute = r;
        const Throughput t = estimate_throughput(m, gpu, p, throughput_options_for(torch, m, p, {}));
        ASSERT_TRUE(t.host_dispatch.has_value());
        const HostDispatch& d = *t.host_dispatch;
        EXPECT_EQ(d.kernels_per_layer, r == Recompute::full ? 69 : 51);
        EXPECT_EQ(d.layer_slots, 12);
        // 128 tokens: the host's launches outlast the layer's GPU work.
        EXPECT_GT(static_cast<double>(d.kernels_per_layer) * d.per_kernel_s, d.layer_device_s);
        EXPECT_DOUBLE_EQ(t.launch_overhead_s,
                         12.0 * std::max(0.0, static_cast<double>(d.kernels_per_layer) * d.per_kernel_s - d.layer_device_s));
    }
    // The frameworks that fuse these ops keep the spec's per-layer host time.
    Plan p = one_gpu(128, 1, Precision::fp32);
    EXPECT_FALSE(estimate_throughput(m, gpu, p, {}).host_dispatch.has_value());
}

// Hugging Face's loss under autocast moves 14 B per logit forward (logits.float() 2 + 4,
// log_softmax 4 + 4) and 22 B backward (nll_loss's zero-filled gradient 4, log_softmax's 4 + 4 + 4,
// the cast back 4 + 2); a torch.compile'd loss the fused 10 and 6: 20 B less per logit, at the
// memory-bound rate (H100: 3.35 TB/s x 0.75). Llama-3.2-1B, seq 2048 x mbs 4, vocab 128,256.
TEST(EagerKernels, CompiledLossDropsTheEagerLossPasses) {
    const ModelConfig m = test::catalog_model("llama-3.2-1b");
    const GpuSpec gpu = test::catalog_gpu("h100-sxm-80gb");
    const FrameworkProfile torch = pytorch_profile();
    const Plan p = one_gpu(2048, 4, Precision::bf16_mixed);
    ThroughputOptions compiled;
    compiled.compiled_loss = true;
    const double eager_s = estimate_throughput(m, gpu, p, throughput_options_for(torch, m, p, {})).step_time_s;
    const double compiled_s = estimate_throughput(m, gpu, p, throughput_options_for(torch, m, p, compiled)).step_time_s;
    const double logits = 8192.0 * 128256.0;
    EXPECT_NEAR(eager_s - compiled_s, 20.0 * logits / (3.35e12 * 0.75), 1e-9);  // 8.36 ms
}

}  // namespace
}  // namespace preflight
