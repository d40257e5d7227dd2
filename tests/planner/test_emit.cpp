// Exports of a plan and learning-rate advice.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "preflight/planner/catalog.hpp"
#include "preflight/planner/emit.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/lr_advice.hpp"
#include "preflight/planner/memory.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/report.hpp"

using namespace preflight;

namespace {
const std::filesystem::path kData = PREFLIGHT_TEST_DATA_DIR;

Plan sample() {
    Plan p;
    p.seq = 4096;
    p.mbs = 2;
    p.grad_acc = 16;
    p.dp = 4;
    p.tp = 2;
    p.pp = 1;
    p.sp = true;
    p.zero = ZeroStage{1};
    p.recompute = Recompute::full;
    p.precision = Precision::bf16_mixed;
    return p;
}
bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }
}  // namespace

TEST(Emit, DeepSpeedJsonHoldsThePlansNumbers) {
    const ModelConfig m = load_model("llama-3-8b", kData);
    const GpuSpec g = load_gpu("h100-sxm-80gb", kData);
    const Emitted e = emit_plan(EmitFormat::deepspeed, m, g, sample());
    const nlohmann::json j = nlohmann::json::parse(e.text);
    EXPECT_EQ(j.at("train_micro_batch_size_per_gpu"), 2);
    EXPECT_EQ(j.at("gradient_accumulation_steps"), 16);
    // tp 2 without an mpu: DeepSpeed would count all 8 ranks as data-parallel (runtime/config.py), so
    // train_batch_size is left out; at tp 1 it is micro x accumulation x dp.
    EXPECT_FALSE(j.contains("train_batch_size"));
    Plan flat = sample();
    flat.tp = 1, flat.sp = false;
    EXPECT_EQ(deepspeed_config(flat).at("train_batch_size"), 2 * 16 * 4);
    EXPECT_EQ(j.at("zero_optimization").at("stage"), 1);
    EXPECT_EQ(j.at("bf16").at("enabled"), true);
    EXPECT_FALSE(j.contains("fp16"));
    EXPECT_TRUE(j.contains("activation_checkpointing"));
    EXPECT_FALSE(e.warnings.empty());  // TP and checkpointing need code changes: said so

    Plan p = sample();
    p.precision = Precision::fp16_mixed;
    p.zero = ZeroStage{3};
    p.recompute = Recompute::none;
    const nlohmann::json f = deepspeed_config(p);
    EXPECT_EQ(f.at("fp16").at("enabled"), true);
    EXPECT_EQ(f.at("zero_optimization").at("stage"), 3);
    EXPECT_FALSE(f.contains("activation_checkpointing"));

    // engine.py: bf16 with fp32 accumulation needs ZeRO, else NotImplementedError: no data_types at stage 0.
    Plan wide = flat;
    wide.precision = Precision::bf16_mixed_fp32_grads;
    EXPECT_EQ(deepspeed_config(wide).at("data_types").at("grad_accum_dtype"), "fp32");
    wide.zero = ZeroStage{0};
    std::vector<std::string> said;
    EXPECT_FALSE(deepspeed_config(wide, &said).contains("data_types"));
    EXPECT_FALSE(said.empty());
    // Offload at ZeRO-0 under a pipeline: stage 1 (the pipeline engine refuses ZeRO-2/3).
    Plan off = flat;
    off.zero = ZeroStage{0}, off.pp = 2, off.offload = Offload::optimizer;
    EXPECT_EQ(deepspeed_config(off).at("zero_optimization").at("stage"), 1);
}

TEST(Emit, MegatronArguments) {
    const ModelConfig m = load_model("llama-3-8b", kData);
    const GpuSpec g = load_gpu("h100-sxm-80gb", kData);
    const std::string a = emit_plan(EmitFormat::megatron, m, g, sample()).text;
    EXPECT_TRUE(has(a, "--micro-batch-size 2 "));
    EXPECT_TRUE(has(a, "--global-batch-size 128 "));  // 2 * 16 * 4 sequences
    EXPECT_TRUE(has(a, "--seq-length 4096 "));
    EXPECT_TRUE(has(a, "--tensor-model-parallel-size 2 "));
    EXPECT_TRUE(has(a, "--pipeline-model-parallel-size 1 "));
    EXPECT_TRUE(has(a, "--sequence-parallel "));
    EXPECT_TRUE(has(a, "--use-distributed-optimizer "));
    EXPECT_TRUE(has(a, "--recompute-granularity full "));
    EXPECT_TRUE(has(a, "--bf16 "));
    EXPECT_TRUE(has(a, "--group-query-attention "));
    EXPECT_TRUE(has(a, "--num-query-groups 8 "));
    EXPECT_TRUE(has(a, "--swiglu "));
}

TEST(Emit, TorchtitanToml) {
    const ModelConfig m = load_model("llama-3-8b", kData);
    const GpuSpec g = load_gpu("h100-sxm-80gb", kData);
    Plan p = sample();
    p.zero = ZeroStage{3};
    p.recompute = Recompute::selective;
    const std::string t = emit_plan(EmitFormat::torchtitan, m, g, p).text;
    EXPECT_TRUE(has(t, "[training]\n"));
    EXPECT_TRUE(has(t, "seq_len = 4096\n"));
    EXPECT_TRUE(has(t, "local_batch_size = 2\n"));
    EXPECT_TRUE(has(t, "global_batch_size = 128"));
    EXPECT_TRUE(has(t, "data_parallel_shard_degree = 4\n"));
    EXPECT_TRUE(has(t, "data_parallel_replicate_degree = 1\n"));
    EXPECT_TRUE(has(t, "tensor_parallel_degree = 2\n"));
    EXPECT_TRUE(has(t, "mode = \"selective\"\n"));
    EXPECT_FALSE(has(t, "[compile]"));
    // A plan judged with a compiled loss turns [compile] on for the loss (v0.2.2 components/loss.py
    // build_cross_entropy_loss: enable and "loss" in components); formats without it warn instead.
    EmitOptions compiled;
    compiled.compiled_loss = true;
    const Emitted c = emit_plan(EmitFormat::torchtitan, m, g, p, compiled);
    EXPECT_TRUE(has(c.text, "\n[compile]\nenable = true\ncomponents = [\"loss\"]"));
    EXPECT_TRUE(c.warnings.empty());
    const Emitted ds = emit_plan(EmitFormat::deepspeed, m, g, p, compiled);
    ASSERT_EQ(ds.warnings.size(), emit_plan(EmitFormat::deepspeed, m, g, p).warnings.size() + 1);
    EXPECT_TRUE(has(ds.warnings.front(), "--compiled-loss"));
    p.zero = ZeroStage{0};
    const std::string ddp = torchtitan_toml(m, p);
    EXPECT_TRUE(has(ddp, "data_parallel_replicate_degree = 4\n"));
    EXPECT_TRUE(has(ddp, "data_parallel_shard_degree = 1\n"));
    // ... which torchtitan refuses beside tp 2 (DDP only as the whole mesh): said, and the
    // torchtitan profile refuses the plan naming --zero.
    std::vector<std::string> said;
    torchtitan_toml(m, p, &said);
    EXPECT_TRUE(std::any_of(said.begin(), said.end(), [](const std::string& s) { return has(s, "whole mesh"); }));
    MemoryOptions tt;
    tt.profile = *profile_by_name("torchtitan");
    try {
        evaluate_memory(m, g, p, tt);
        ADD_FAILURE() << "torchtitan's ZeRO-0 beside tp 2 was judged";
    } catch (const InputError& e) {
        EXPECT_EQ(e.subject(), "--zero") << e.what();
    }
    Plan flat = p;
    flat.tp = 1, flat.sp = false;
    EXPECT_NO_THROW(evaluate_memory(m, g, flat, tt));
    // dp 1 with tp 2 has no FSDP: maybe_enable_amp turns mixed precision off, so only fp32 runs.
    Plan alone = p;
    alone.dp = 1, alone.precision = Precision::bf16_mixed;
    try {
        evaluate_memory(m, g, alone, tt);
        ADD_FAILURE() << "torchtitan's bf16-mixed without FSDP beside tp 2 was judged";
    } catch (const InputError& e) {
        EXPECT_EQ(e.subject(), "--precision") << e.what();
    }
    alone.precision = Precision::fp32;
    EXPECT_NO_THROW(evaluate_memory(m, g, alone, tt));
    // torchao's Float8 recipe follows the plan's scaling, in v0.2.x's [quantize.linear.float8] table
    // with its converter's registered name; Megatron (Transformer Engine) has no rowwise recipe and
    // says so.
    p.precision = Precision::fp8_mixed;
    EXPECT_TRUE(has(torchtitan_toml(m, p), "[quantize.linear.float8]\nrecipe_name = \"tensorwise\"\n"));
    EXPECT_TRUE(has(torchtitan_toml(m, p), "converters = [\"quantize.linear.float8\"]\n"));
    p.fp8_scaling = Fp8Scaling::rowwise;
    EXPECT_TRUE(has(torchtitan_toml(m, p), "[quantize.linear.float8]\nrecipe_name = \"rowwise\"\n"));
    const Emitted mg = emit_plan(EmitFormat::megatron, m, g, p);
    EXPECT_TRUE(has(mg.text, "--fp8-format hybrid"));
    EXPECT_TRUE(has(mg.text, "--fp8-recipe delayed"));  // the recipe whose amax history is counted
    EXPECT_TRUE(std::any_of(mg.warnings.begin(), mg.warnings.end(),
                            [](const std::string& w) { return has(w, "rowwise fp8 scaling"); }));
}

TEST(Emit, PreflightPlanReadsBack) {
    const ModelConfig m = load_model("llama-3-8b", kData);
    const GpuSpec g = load_gpu("h100-sxm-80gb", kData);
    Plan p = sample();
    p.dropout = 0.1;
    p.attention = AttentionKind::eager;
    p.optimizer = Optimizer::sgd;
    const nlohmann::json j = nlohmann::json::parse(emit_plan(EmitFormat::preflight, m, g, p).text);
    EXPECT_EQ(j.at("model"), "llama-3-8b");
    EXPECT_EQ(j.at("gpu"), "h100-sxm-80gb");
    const Plan q = plan_from_json(j);
    EXPECT_EQ(q.seq, p.seq);
    EXPECT_EQ(q.mbs, p.mbs);
    EXPECT_EQ(q.grad_acc, p.grad_acc);
    EXPECT_EQ(q.dp, p.dp);
    EXPECT_EQ(q.tp, p.tp);
    EXPECT_EQ(q.pp, p.pp);
    EXPECT_EQ(q.sp, p.sp);
    EXPECT_EQ(q.zero, p.zero);
    EXPECT_EQ(q.recompute, p.recompute);
    EXPECT_EQ(q.precision, p.precision);
    EXPECT_EQ(q.optimizer, p.optimizer);
    EXPECT_EQ(q.attention, p.attention);
    EXPECT_DOUBLE_EQ(q.dropout, p.dropout);
}

TEST(Emit, ParseFormat) {
    EXPECT_EQ(parse_emit_format("deepspeed"), EmitFormat::deepspeed);
    EXPECT_EQ(parse_emit_format("torchtitan"), EmitFormat::torchtitan);
    EXPECT_FALSE(parse_emit_format("jax"));
}

TEST(LrAdvice, LinearAndSquareRootRules) {
    // 4x the batch: linear rule 4x the LR (Goyal et al. 2017), square root 2x.
    const LrAdvice a = lr_advice(3e-4, 1 << 20, 1 << 22, Optimizer::adamw);
    EXPECT_DOUBLE_EQ(a.ratio, 4.0);
    EXPECT_DOUBLE_EQ(a.linear.lr, 1.2e-3);
    EXPECT_DOUBLE_EQ(a.square_root.lr, 6e-4);
    EXPECT_EQ(a.preferred, "square-root");
    EXPECT_EQ(a.warmup_steps, static_cast<std::int64_t>(std::ceil(375e6 / 4194304.0)));  // GPT-3's 375M tokens
    EXPECT_EQ(lr_advice(0.1, 256, 8192, Optimizer::sgd).preferred, "linear");
    EXPECT_THROW(lr_advice(0, 1, 1, Optimizer::adamw), InputError);
    EXPECT_THROW(lr_advice(1e-3, -1, 1, Optimizer::adamw), InputError);
    // Issue 37, item 5: a base batch beyond the global-batch bound printed as an int64 wrapped to
    // -9,223,372,036,854,775,808, one below a token gave an infinite rate; both are refused, naming
    // --base-batch, and so is a fraction of a token.
    for (double bad : {1e308, 1e-320, 0.5, 1.5, std::pow(2.0, 40) + 1}) {
        try {
            (void)lr_advice(3e-4, bad, 1 << 22, Optimizer::adamw);
            ADD_FAILURE() << bad << " accepted";
        } catch (const InputError& e) {
            EXPECT_NE(std::string(e.what()).find("--base-batch"), std::string::npos) << e.what();
        }
    }
    EXPECT_NO_THROW((void)lr_advice(3e-4, std::pow(2.0, 40), 1 << 22, Optimizer::adamw));
}

TEST(LrAdvice, WarnsBeyondWhereTheRulesWereChecked) {
    // 4x the batch from 3e-4 (AdamW): square root 6e-4, nothing to warn about.
    EXPECT_TRUE(lr_advice(3e-4, 1 << 20, 1 << 22, Optimizer::adamw).warnings.empty());
    // 32x is Goyal et al.'s own range (256 to 8,192 images): 0.1 -> 3.2 under SGD, no warning.
    EXPECT_TRUE(lr_advice(0.1, 256, 8192, Optimizer::sgd).warnings.empty());
    // 64x the batch: beyond 32x; square root 8 x 3e-4 = 2.4e-3 stays under 0.01.
    const LrAdvice wide = lr_advice(3e-4, 1 << 16, 1 << 22, Optimizer::adamw);
    ASSERT_EQ(wide.warnings.size(), 1u);
    EXPECT_NE(wide.warnings[0].find("64 x the base batch"), std::string::npos) << wide.warnings[0];
    // The audit's case: 1,000 at one token to 4,194,304 tokens, square root 2,048,000.
    const LrAdvice absurd = lr_advice(1000, 1, 1 << 22, Optimizer::adamw);
    ASSERT_EQ(absurd.warnings.size(), 2u);
    EXPECT_NE(absurd.warnings[1].find("2.048e+06"), std::string::npos) << absurd.warnings[1];
    // 2e-3 at 4x: square root 4e-3 < 0.01; 4e-3 at 16x: 1.6e-2 > 0.01.
    EXPECT_TRUE(lr_advice(2e-3, 1 << 20, 1 << 22, Optimizer::adamw).warnings.empty());
    EXPECT_EQ(lr_advice(4e-3, 1 << 20, 1 << 24, Optimizer::adamw).warnings.size(), 1u);
}

bool has_text(const std::vector<std::string>& lines, const std::string& text) {
    return std::any_of(lines.begin(), lines.end(), [&](const std::string& s) { return s.find(text) != std::string::npos; });
}

// The Megatron-LM arguments of the plan, and the warnings of its Megatron-LM, torchtitan and nanotron forms.
struct Forms {
    std::string megatron;
    std::vector<std::string> mw, tw, nw;
};
Forms every_form(const ModelConfig& m, const Plan& p) {
    Forms f;
    f.megatron = megatron_arguments(m, p, &f.mw);
    torchtitan_toml(m, p, &f.tw);
    nanotron_yaml(m, p, &f.nw);
    return f;
}

// Whether each of the Megatron-LM, torchtitan and nanotron forms of the plan warns with `text`.
bool every_form_warns(const ModelConfig& m, const Plan& p, const std::string& text) {
    const Forms f = every_form(m, p);
    return has_text(f.mw, text) && has_text(f.tw, text) && has_text(f.nw, text);
}

// Mistral-7B's sliding window (4,096 keys) has no flag in the torchtitan or nanotron forms written
// here: a plan whose sequence outruns it says so; one within it says nothing. Megatron-LM carries it
// as FlashAttention's (left, right) window: 4,095 keys before the query, none after.
TEST(Emit, SlidingWindowNotCarriedIsSaid) {
    const ModelConfig m = load_model("mistral-7b", kData);
    Plan p;
    p.seq = 8192, p.dp = 8;
    const Forms f = every_form(m, p);
    EXPECT_NE(f.megatron.find("--window-size 4095,0"), std::string::npos);
    EXPECT_EQ(f.megatron.find("--window-attn-skip-freq"), std::string::npos);
    EXPECT_FALSE(has_text(f.mw, "sliding window"));
    EXPECT_TRUE(has_text(f.tw, "sliding window of 4096 keys"));
    EXPECT_TRUE(has_text(f.nw, "sliding window of 4096 keys"));
    p.seq = 4096;
    EXPECT_FALSE(has_text(every_form(m, p).tw, "sliding window"));
}

// gpt-oss in Megatron-LM's own terms (its gpt-oss recipes): the clamped quick_gelu gate with the up
// offset, learned sinks, biases kept, 127 keys before the query on all but every 2nd layer, YaRN. The
// torchtitan's registry builds gpt-oss whole (name gpt_oss, flavor 20b); nanotron's Llama-shaped form, and
// torchtitan's for a gpt-oss no registry entry names, say what they drop.
TEST(Emit, GptOssPartsAreCarriedOrSaid) {
    const ModelConfig m = load_model("gpt-oss-20b", kData);
    Plan p;
    p.seq = 4096, p.dp = 8;
    const Forms f = every_form(m, p);
    for (const char* flag : {"--quick-geglu", "--glu-linear-offset 1.0", "--activation-func-clamp-value 7",
                             "--softmax-type learnable", "--window-size 127,0", "--window-attn-skip-freq 2",
                             "--num-experts 32", "--moe-router-topk 4", "--kv-channels 64",
                             // YaRN: factor 32 over 4,096 positions, betas 32 and 1, unrounded correction range
                             "--position-embedding-type yarn", "--rotary-scaling-factor 32",
                             "--yarn-original-max-position-embeddings 4096", "--yarn-beta-fast 32", "--yarn-beta-slow 1",
                             "--mscale 1", "--mscale-all-dim 0", "--no-yarn-correction-range-round-to-int"})
        EXPECT_NE(f.megatron.find(flag), std::string::npos) << flag;
    EXPECT_EQ(f.megatron.find("--swiglu"), std::string::npos);
    EXPECT_EQ(f.megatron.find("--disable-bias-linear"), std::string::npos);  // every bias kept, the router's too
    EXPECT_FALSE(has_text(f.mw, "sinks") || has_text(f.mw, "quick_gelu") || has_text(f.mw, "sliding window"));
    EXPECT_TRUE(f.mw.empty()) << f.mw.front();
    EXPECT_NE(torchtitan_toml(m, p).find("name = \"gpt_oss\"\nflavor = \"20b\"\n"), std::string::npos);
    EXPECT_TRUE(f.tw.empty()) << f.tw.front();
    ModelConfig own = m;
    own.name = "my-gpt-oss";
    own.glu_clamp = 7.123456789;  // written whole, not as %g's 7.12346
    EXPECT_NE(megatron_arguments(own, p).find("--activation-func-clamp-value 7.123456789 "), std::string::npos);
    const Forms mine = every_form(own, p);
    for (const auto* w : {&f.nw, &mine.tw}) {
        EXPECT_TRUE(has_text(*w, "attention sinks"));
        EXPECT_TRUE(has_text(*w, "applies quick_gelu to its gate (clamped, times up + 1)"));
        EXPECT_TRUE(has_text(*w, "sliding window of 128 keys"));
    }
}

TEST(Emit, Gemma3PartsNotCarriedAreSaid) {
    // Megatron-LM's, torchtitan's and nanotron's Llama-shaped models have no norms on the sublayer
    // outputs and gate with silu: Gemma 3's post-sublayer norms and GeLU gate are said, not dropped.
    const ModelConfig m = load_model("gemma-3-1b", kData);
    Plan p;
    p.seq = 512, p.dp = 8;
    EXPECT_TRUE(every_form_warns(m, p, "post_feedforward_layernorm"));
    EXPECT_TRUE(every_form_warns(m, p, "gelu_pytorch_tanh"));
    // Its window (512 keys) on all but every 6th layer is Megatron-LM's to carry.
    p.seq = 4096;
    const Forms f = every_form(m, p);
    EXPECT_NE(f.megatron.find("--window-size 511,0"), std::string::npos);
    EXPECT_NE(f.megatron.find("--window-attn-skip-freq 6"), std::string::npos);
    EXPECT_FALSE(has_text(f.mw, "sliding window"));
}

TEST(Emit, OlmoPartsNotCarriedAreSaid) {
    // OLMo 2's layer normalizes its sublayer outputs in place of their inputs and its q/k norms span the
    // whole projections: Megatron-LM's, torchtitan's and nanotron's Llama-shaped layers have neither, so
    // each form says so. Megatron-LM's nearest is its per-head --qk-layernorm, written and said.
    const ModelConfig m = load_model("olmo-2-7b", kData);
    Plan p;
    p.seq = 4096, p.dp = 8;
    EXPECT_TRUE(every_form_warns(m, p, "in place of their inputs"));
    EXPECT_TRUE(every_form_warns(m, p, "whole q and k projections (4096 and 4096 weights)"));
    const Forms f = every_form(m, p);
    EXPECT_NE(f.megatron.find("--qk-layernorm"), std::string::npos);
    EXPECT_FALSE(has_text(f.mw, "are not carried by this Megatron-LM config: it would train the layer without them"));
    // OLMo 3 scales its full layers' RoPE alone: Megatron-LM's YaRN would scale the windowed ones too.
    ModelConfig olmo3 = m;
    olmo3.family = ModelFamily::olmo3;
    olmo3.sliding_window = 4096, olmo3.full_attention_layers = 8, olmo3.full_attention_period = 4;
    olmo3.rope_scaling.type = "yarn", olmo3.rope_scaling.factor = 8, olmo3.rope_scaling.original_max_positions = 8192;
    p.seq = 8192;
    const Forms f3 = every_form(olmo3, p);
    EXPECT_NE(f3.megatron.find("--position-embedding-type yarn"), std::string::npos);
    EXPECT_NE(f3.megatron.find("--window-attn-skip-freq 4"), std::string::npos);
    EXPECT_TRUE(has_text(f3.mw, "applies its YaRN scaling to its full-attention layers only"));
    EXPECT_FALSE(has_text(f.mw, "YaRN"));
    // OLMoE keeps Llama's pre-norms: only its whole-projection q/k norms are said, beside its 64 experts.
    const ModelConfig olmoe = load_model("olmoe-1b-7b", kData);
    p.seq = 4096;
    EXPECT_TRUE(every_form_warns(olmoe, p, "whole q and k projections (2048 and 2048 weights)"));
    const Forms fe = every_form(olmoe, p);
    EXPECT_NE(fe.megatron.find("--num-experts 64"), std::string::npos);
    EXPECT_NE(fe.megatron.find("--qk-layernorm"), std::string::npos);
    EXPECT_FALSE(has_text(fe.mw, "in place of their inputs"));
    // Its gate weights are the softmax over all 64 experts as they are (norm_topk_prob false): Megatron-LM's
    // softmax before the top k. Qwen3-30B-A3B's are renormalised (norm_topk_prob true), Megatron-LM's default.
    EXPECT_NE(fe.megatron.find("--moe-router-pre-softmax"), std::string::npos);
    EXPECT_EQ(every_form(load_model("qwen3-30b-a3b", kData), p).megatron.find("--moe-router-pre-softmax"),
              std::string::npos);
}
