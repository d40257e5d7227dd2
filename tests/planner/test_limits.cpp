// Checked arithmetic and the documented input bounds (limits.hpp): overflow is an
// InputError naming its input, never a wrapped number.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "catalog_fixture.hpp"
#include "preflight/planner/checked.hpp"
#include "preflight/planner/extensions.hpp"
#include "preflight/planner/limits.hpp"
#include "preflight/planner/memory.hpp"
#include "preflight/planner/plan_extensions.hpp"
#include "preflight/planner/search.hpp"

namespace preflight {
namespace {

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

std::string error_of(auto&& f) {
    try {
        f();
    } catch (const InputError& e) {
        return e.what();
    }
    return "";
}

TEST(Checked, MulAndAddThrowNamingTheSubject) {
    EXPECT_EQ(checked_mul(3'037'000'499LL, 3'037'000'499LL, "x"), 9'223'372'030'926'249'001LL);
    EXPECT_EQ(checked_add(kMax - 1, 1, "x"), kMax);
    EXPECT_NE(error_of([] { checked_mul(3'037'000'500LL, 3'037'000'500LL, "hidden_size"); }).find("hidden_size"), std::string::npos);
    EXPECT_NE(error_of([] { checked_add(kMax, 1, "--overhead-bytes"); }).find("--overhead-bytes"), std::string::npos);
    EXPECT_THROW(checked_mul(-kMax, 2, "x"), InputError);
    EXPECT_THROW(require_finite(std::numeric_limits<double>::quiet_NaN(), "step_time_s"), InputError);
    EXPECT_EQ(require_finite(1.5, "x"), 1.5);
}

TEST(Limits, ModelFieldsBeyondTheirBoundsAreNamed) {
    // 4,096,000,000 wide: was a negative parameter count.
    EXPECT_NE(error_of([] { test::llama_model(4'096'000'000LL, 32, 32, 8, 14336, 128256, 8192); }).find("hidden_size"),
              std::string::npos);
    EXPECT_NE(error_of([] { test::llama_model(4096, 10'000'000, 32, 8, 14336, 128256, 8192); }).find("kMaxLayers"),
              std::string::npos);
    EXPECT_NE(error_of([] { test::llama_model(4096, 32, 32, 8, 14336, 1LL << 40, 8192); }).find("vocab_size"),
              std::string::npos);
    EXPECT_NE(error_of([] { test::gpt_model(1LL << 21, 12, 16, 50257, 1024); }).find("n_embd"), std::string::npos);
    // Each field within its bound, the whole beyond kMaxParams = 2^50.
    const std::string whole = error_of([] { test::llama_model(1 << 20, 16384, 8192, 8192, 1 << 20, 1 << 20, 8192); });
    EXPECT_NE(whole.find("kMaxParams"), std::string::npos) << whole;
}

TEST(Limits, ParameterCountsAtTheBoundsAreExact) {
    // Llama-3-8B (published 8,030,261,248) still counts exactly through the checked path.
    EXPECT_EQ(count_params(test::catalog_model("llama-3-8b")).total, 8'030'261'248LL);
}

TEST(Limits, PlanFlagsBeyondTheirBoundsAreNamed) {
    const ModelConfig m = test::catalog_model("llama-3-8b");
    auto plan_error = [&](auto set) {
        Plan p;
        p.seq = 4096;
        set(p);
        return error_of([&] { validate_plan(p, m); });
    };
    EXPECT_NE(plan_error([](Plan& p) { p.mbs = 1'000'000'000'000LL; }).find("kMaxMbs"), std::string::npos);
    EXPECT_NE(plan_error([](Plan& p) { p.dp = 1LL << 21; }).find("--dp"), std::string::npos);
    EXPECT_NE(plan_error([](Plan& p) { p.grad_acc = 1LL << 39; p.mbs = 4; }).find("global batch"), std::string::npos);
    // Eager attention at seq 8192 x mbs 2^20: each flag in bounds, the score matrices are not.
    EXPECT_NE(plan_error([](Plan& p) { p.seq = 8192; p.mbs = 1 << 20; p.attention = AttentionKind::eager; }).find("2^60"),
              std::string::npos);
    EXPECT_EQ(plan_error([](Plan& p) { p.mbs = 8; }), "");
}

TEST(Limits, OverheadBytesBeyondOnePebibyteIsNamed) {
    const ModelConfig m = test::catalog_model("gpt2");
    const GpuSpec g = test::catalog_gpu("h100-sxm-80gb");
    MemoryOptions o;
    o.overhead_bytes = kMax;
    Plan p;
    EXPECT_NE(error_of([&] { evaluate_memory(m, g, p, o); }).find("--overhead-bytes"), std::string::npos);
    o.overhead_bytes = limits::kMaxDeviceBytes;
    const MemoryReport r = evaluate_memory(m, g, p, o);
    EXPECT_EQ(r.at_peak.overhead, 1LL << 50);
    EXPECT_FALSE(r.fits);
}

TEST(Limits, SearchRequestsBeyondTheirBoundsAreNamed) {
    const ModelConfig m = test::catalog_model("llama-3-8b");
    const GpuSpec g = test::catalog_gpu("h100-sxm-80gb");
    SearchRequest r;
    r.gpus = 8;
    r.gbs_tokens = 4'194'304;
    r.gpus = 1LL << 31;
    EXPECT_NE(error_of([&] { validate_request(m, g, r); }).find("kMaxGpus"), std::string::npos);
    r.gpus = 8;
    r.gbs_tokens = 1'000'000'000'000'000'000LL;
    EXPECT_NE(error_of([&] { validate_request(m, g, r); }).find("kMaxGlobalBatchTokens"), std::string::npos);
    r.gbs_tokens = 1;
    EXPECT_NE(error_of([&] { validate_request(m, g, r); }).find("less than one sequence"), std::string::npos);
}

TEST(Limits, SearchOverAMillionGpusEnumeratesDivisorsNotTheRange) {
    // 2^20 GPUs: 21 divisors; the search answers (the old O(N) loop ran 2^20 times per layout).
    const ModelConfig m = test::catalog_model("llama-3-8b");
    const GpuSpec g = test::catalog_gpu("h100-sxm-80gb");
    SearchRequest r;
    r.gpus = 1 << 20;
    r.gbs_tokens = 1LL << 32;  // 4096 tokens per GPU
    r.seq = 4096;
    r.pins.precision = Precision::bf16_mixed;
    r.pins.recompute = Recompute::none;
    r.suggest = false;
    std::int64_t calls = 0, total = 0;
    r.progress = [&](std::int64_t, std::int64_t t, std::int64_t) {
        ++calls;
        total = t;
    };
    const SearchResult s = search_plans(m, g, r);
    EXPECT_FALSE(s.candidates.empty());
    EXPECT_EQ(s.candidates.front().plan.global_batch_tokens(), 1LL << 32);
    EXPECT_EQ(calls, 21);  // once per tensor-parallel degree
    EXPECT_EQ(total, 231);  // sum over the 21 divisors d of 2^20 of the divisors of 2^20/d = 21*22/2
}

TEST(Limits, LoraAdaptersBeyondTheParameterBoundAreNamed) {
    // A Mixtral-shaped model, 16,384 layers of 4,096 thin experts (ffn 1) at width 16,384:
    // the model itself has ~2.1e13 parameters (within kMaxParams), but rank 16,384 on every
    // linear gives per layer 4,096 x 3 x 16,384 x (16,384 + 1) expert adapters alone, times
    // 16,384 layers = 5.4e19 > 2^63. The count used to wrap to a plausible 7.2e16.
    ModelConfig m = test::catalog_model("mixtral-8x7b");
    m.hidden = 16384;
    m.heads = 128;
    m.kv_heads = 8;
    m.head_dim = 128;
    m.ffn_hidden = 1;
    m.layers = 16384;
    m.experts = 4096;
    Plan p;
    p.seq = 16;
    p.finetune = Finetune::lora;
    p.lora.rank = 16384;
    p.lora.targets = kLoraAllLinear;
    const std::string e = error_of([&] { validate_plan(p, m); });
    EXPECT_NE(e.find("--lora-rank"), std::string::npos) << e;
    EXPECT_NE(e.find("kMaxParams"), std::string::npos) << e;
    // Rank 8 on q,v of the real Mixtral stays accepted.
    const ModelConfig mixtral = test::catalog_model("mixtral-8x7b");
    p.lora.rank = 8;
    p.lora.targets = lora_q | lora_v;
    EXPECT_EQ(error_of([&] { validate_plan(p, mixtral); }), "");
}

TEST(Limits, TheByteBoundCountsTheLayersAndMicroBatchesOneStageHolds) {
    // A 405B-shaped model (hidden 16,384, 126 layers, ffn 53,248). Under GPipe over 2 stages at
    // seq 4,096 and 2^28 micro-batches (2^40 tokens), stage 0 holds 2^28 x 63 layers x about
    // 34 x 16,384 B per token (Korthikanti et al. 2022, eq. 1) x 4,096 tokens ~ 2^65 B: the
    // int64 sum wrapped to a plausible 901 TiB-sized figure. Now it is refused naming --grad-acc.
    const ModelConfig big = test::llama_model(16384, 126, 128, 8, 53248, 128256, 131072);
    Plan p;
    p.seq = 4096;
    p.pp = 2;
    p.grad_acc = std::int64_t{1} << 28;
    p.pp_schedule = PpSchedule::gpipe;
    const std::string e = error_of([&] { validate_plan(p, big); });
    EXPECT_EQ(e.rfind("--grad-acc", 0), 0u) << e;
    EXPECT_NE(e.find("2^60"), std::string::npos) << e;
    // 1F1B holds at most pp = 2 micro-batches: about 2 x 63 x 34 x 16,384 x 4,096 B ~ 0.3 TB.
    p.pp_schedule = PpSchedule::one_f_one_b;
    EXPECT_EQ(error_of([&] { validate_plan(p, big); }), "");

    // 9.9e14 parameters over 4,096 stages of one layer each: a stage holds at most 4,096 micro-batches
    // of one layer however many there are. The bound counted every layer of the model per
    // micro-batch in flight and refused grad_acc >= 373 as over 1 EiB.
    const ModelConfig near = test::llama_model(131072, 4096, 1024, 8, 524288, 1 << 24, 1 << 27);
    Plan q;
    q.seq = 4096;
    q.tp = 8;
    q.pp = 4096;
    q.sp = true;
    q.recompute = Recompute::full;
    q.grad_acc = 100000;
    EXPECT_EQ(error_of([&] { validate_plan(q, near); }), "");
}

TEST(Limits, TheByteBoundCountsRoutedTokensAndAHeadHeavyStage) {
    // Overflow audit of 2026-11-29, each an accepted plan whose int64 activation sum wrapped to a
    // small figure and a false FITS on a 1 PiB GPU spec.
    auto moe = [](std::int64_t hidden, std::int64_t ffn, std::int64_t layers, std::int64_t experts) {
        ModelConfig m = test::catalog_model("mixtral-8x7b");
        m.hidden = hidden;
        m.ffn_hidden = ffn;
        m.layers = layers;
        m.heads = 1;
        m.kv_heads = 1;
        m.head_dim = 128;
        m.experts = experts;
        m.experts_per_token = experts;
        m.vocab = 32000;
        return m;
    };
    // Top-4,096 routing at hidden 16,384: dispatched tokens and expert outputs are 4,096 x 16,384
    // x 2 B each per token per layer, ~2^28 B; x 16,384 layers x 2^21 tokens ~ 2^63 B (the bound
    // counted hidden once per token).
    Plan p;
    p.seq = 2048;
    p.mbs = 1536;
    EXPECT_NE(error_of([&] { validate_plan(p, moe(16384, 16, 16384, 4096)); }).find("2^60"), std::string::npos);
    // Capacity factor 64 on 64 routed experts of width 262,144 in fp32: 64 x 64 x 262,144 x 12 B
    // per token per layer, x 64 layers x 2^23.6 tokens ~ 2^63 B (the bound left the factor out).
    Plan q;
    q.seq = 1024;
    q.mbs = 12288;
    q.precision = Precision::fp32;
    q.moe_capacity_factor = 64;
    EXPECT_NE(error_of([&] { validate_plan(q, moe(256, 262144, 64, 64)); }).find("2^60"), std::string::npos);
    // An LM head (2^21 x 2^20) costlier than 383 x the 384 layers (4 x 2 x 2^20 + 3 x 2 x 2^20
    // each): nanotron's cost split keeps every layer on stage 0, which holds 384 micro-batches of
    // 384 layers x 2^23 tokens x about 8 x 2^20 B ~ 2^63 B.
    ModelConfig head = test::catalog_model("llama-3-8b");
    head.hidden = 1 << 20;
    head.layers = 384;
    head.heads = 1;
    head.kv_heads = 1;
    head.head_dim = 2;
    head.ffn_hidden = 2;
    head.vocab = 1 << 21;
    Plan r;
    r.seq = 1024;
    r.mbs = 8192;
    r.pp = 384;
    r.grad_acc = 384;
    r.precision = Precision::bf16;
    EXPECT_NE(error_of([&] { validate_plan(r, head); }).find("2^60"), std::string::npos);
}

TEST(Limits, ExpertAllToAllBuffersBeyondTheByteBoundAreNamed) {
    // One layer of 4,096 experts, top-4,096 routing, width 2^20, at seq 2^24: the routed tokens
    // 2^24 x 4,096 x capacity 64 = 2^42, times 2^20 x 2 bytes x 2 (sent + received) = 2^64 B,
    // which wrapped to "all-to-all buffers 0 B".
    ModelConfig m = test::catalog_model("mixtral-8x7b");
    m.hidden = 1 << 20;
    m.heads = 1;
    m.kv_heads = 1;
    m.head_dim = 1;
    m.ffn_hidden = 1;
    m.layers = 1;
    m.vocab = 16;
    m.experts = 4096;
    m.experts_per_token = 4096;
    m.max_positions = 1 << 24;
    Plan p;
    p.seq = 1 << 24;
    p.dp = 8;
    p.ep = 8;
    p.moe_capacity_factor = 64;
    const std::string e = error_of([&] { validate_plan(p, m); });
    EXPECT_NE(e.find("2^60"), std::string::npos) << e;
    // At seq 4,096 the buffers are 2^12 x 2^12 x 64 x 2^20 x 4 B = 4 PiB: reported, not wrapped.
    p.seq = 4096;
    EXPECT_EQ(ep_all_to_all_buffer_bytes(m, p), std::int64_t{1} << 52);
}

TEST(Limits, HostBytesPerNodeOverflowIsNamed) {
    // 400 layers at width 2^19 (MLP 2^20): ~1.1e15 parameters, within kMaxParams. ZeRO-0 with
    // the optimizer offloaded keeps 16 B per parameter in host memory on every rank
    // (1.76e16 B); 1,024 GPUs per node made the per-node figure wrap to a negative number.
    ModelConfig m = test::catalog_model("llama-3-8b");
    m.hidden = 1 << 19;
    m.ffn_hidden = 1 << 20;
    m.layers = 400;
    m.heads = 4096;
    m.kv_heads = 4096;
    m.head_dim = 128;
    GpuSpec g = test::catalog_gpu("h100-sxm-80gb");
    g.gpus_per_node = 1024;
    Plan p;
    p.seq = 16;
    p.dp = 1024;
    p.offload = Offload::optimizer;
    const std::string e = error_of([&] { evaluate_memory(m, g, p, MemoryOptions{}); });
    EXPECT_NE(e.find("--offload"), std::string::npos) << e;
}

}  // namespace
}  // namespace preflight
