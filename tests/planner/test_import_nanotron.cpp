// nanotron YAML config -> plan values (issue #36), the YAML reader's limits, and --emit nanotron
// read back. Expected numbers are worked out by hand from the fixtures in tests/configs/nanotron/.
#include <gtest/gtest.h>

#include "tree_import_helpers.hpp"
#include "preflight/config_readers/config_readers.hpp"
#include "preflight/planner/catalog.hpp"
#include "preflight/planner/emit.hpp"

using namespace preflight;
using namespace preflight::test::tree_import;

namespace {

ImportedConfig import_text(const std::string& text, const std::string& file = "run.yaml") {
    return import_nanotron(yaml_config_tree(text, file), {});
}

ImportedConfig import_fixture(const std::string& name) {
    const auto path = config_dir() / "nanotron" / name;
    return import_nanotron(yaml_config_tree(read_text(path), path.string()), {});
}

// A minimal config whose lines are known: parallelism on line 1, tokens on line 6.
std::string run(const std::string& parallelism_extra = "", const std::string& tokens_extra = "",
                const std::string& tail = "") {
    return "parallelism:\n"                  // 1
           "  dp: 2\n"                       // 2
           "  tp: 2\n"                       // 3
           "  pp: 1\n" +                     // 4
           (parallelism_extra.empty() ? std::string("  recompute_layer: false\n") : parallelism_extra) +  // 5
           "tokens:\n"                       // 6
           "  sequence_length: 2048\n"       // 7
           "  micro_batch_size: 1\n" +       // 8
           (tokens_extra.empty() ? std::string("  batch_accumulation_per_replica: 2\n") : tokens_extra) +  // 9
           tail;
}

}  // namespace

TEST(ImportNanotron, TinyLlamaExample) {
    const ImportedConfig c = import_fixture("tiny_llama.yaml");
    EXPECT_EQ(int_field(c, "dp"), 4);
    EXPECT_EQ(int_field(c, "tp"), 2);
    EXPECT_EQ(int_field(c, "pp"), 1);
    EXPECT_TRUE(bool_field(c, "sp"));  // tp_mode REDUCE_SCATTER
    EXPECT_EQ(int_field(c, "seq"), 2048);
    EXPECT_EQ(int_field(c, "mbs"), 2);
    EXPECT_EQ(int_field(c, "grad_acc"), 4);
    EXPECT_EQ(int_field(c, "zero"), 0);
    EXPECT_EQ(name_field(c, "recompute"), "none");
    EXPECT_EQ(name_field(c, "precision"), "bf16-mixed-fp32-grads");  // bfloat16 + accumulate_grad_in_fp32
    EXPECT_EQ(name_field(c, "optimizer"), "adamw");
    EXPECT_EQ(c.field("pp_schedule"), nullptr);  // no pipeline
    EXPECT_EQ(c.gpus, 8);                         // 4 x 2 x 1
    EXPECT_EQ(c.global_batch_sequences, 32);      // 2 x 4 x 4
    EXPECT_EQ(c.framework, "nanotron");
    EXPECT_EQ(c.field("mbs")->from.line, 93);
    EXPECT_EQ(c.field("sp")->from.line, 82);
    ASSERT_TRUE(c.model_config);
    const ModelConfig m = model_from_hf_config(*c.model_config, "tiny");
    EXPECT_EQ(m.family, ModelFamily::llama);
    EXPECT_EQ(m.hidden, 2048);
    EXPECT_EQ(m.layers, 16);
    EXPECT_EQ(m.heads, 32);
    EXPECT_EQ(m.kv_heads, 8);
    EXPECT_EQ(m.head_dim, 64);  // 2048 / 32
    EXPECT_EQ(m.ffn_hidden, 8192);
    EXPECT_EQ(m.vocab, 128256);
    EXPECT_EQ(m.max_positions, 8192);
    EXPECT_TRUE(m.tied_embeddings);
    EXPECT_DOUBLE_EQ(m.rope_theta, 500000.0);
    EXPECT_TRUE(any_contains(c.ignored, "checkpoints.checkpoint_interval"));
    EXPECT_TRUE(any_contains(c.ignored, "optimizer.learning_rate_scheduler"));
    EXPECT_TRUE(any_contains(c.ignored, "model.model_config.bos_token_id"));
    EXPECT_TRUE(c.warnings.empty()) << c.warnings.front();
    // The same through format detection (import_config_text, what --from runs).
    const auto path = (config_dir() / "nanotron" / "tiny_llama.yaml").string();
    const ImportedConfig d = import_config_text(read_text(path), path, std::nullopt, {});
    EXPECT_EQ(d.format, ConfigFormat::nanotron);
    EXPECT_EQ(int_field(d, "grad_acc"), 4);
}

// ParallelismArgs.tp_recompute_allgather: false makes a REDUCE_SCATTER column-parallel linear save
// its all-gathered input (functional.py save_for_backward(gathered_tensor, ...)): not modelled,
// so warned with its line (was: ignored on purpose whatever its value). true (the default), or
// ALL_REDUCE mode where nothing is gathered, says nothing.
TEST(ImportNanotron, TpRecomputeAllgatherOffIsWarned) {
    const ImportedConfig off = import_text(run("  tp_mode: REDUCE_SCATTER\n  tp_recompute_allgather: false\n"));
    EXPECT_TRUE(any_contains(off.warnings, "tp_recompute_allgather")) << "no warning";
    EXPECT_TRUE(any_contains(off.warnings, ":6")) << "the line (6) is named";
    const ImportedConfig on = import_text(run("  tp_mode: REDUCE_SCATTER\n  tp_recompute_allgather: true\n"));
    EXPECT_FALSE(any_contains(on.warnings, "tp_recompute_allgather"));
    const ImportedConfig all_reduce = import_text(run("  tp_mode: ALL_REDUCE\n  tp_recompute_allgather: false\n"));
    EXPECT_FALSE(any_contains(all_reduce.warnings, "tp_recompute_allgather"));
}

TEST(ImportNanotron, QwenPipelineZero1) {
    const ImportedConfig c = import_fixture("qwen_pp_zero1.yaml");
    EXPECT_EQ(int_field(c, "dp"), 8);
    EXPECT_EQ(int_field(c, "tp"), 1);
    EXPECT_EQ(int_field(c, "pp"), 2);
    EXPECT_EQ(c.field("sp"), nullptr);  // tp 1
    EXPECT_EQ(name_field(c, "pp_schedule"), "gpipe");  // afab: all forward, all backward
    EXPECT_EQ(name_field(c, "recompute"), "full");     // recompute_layer
    EXPECT_EQ(int_field(c, "zero"), 1);
    EXPECT_EQ(name_field(c, "precision"), "bf16");     // no fp32 accumulation: pure bf16
    EXPECT_EQ(int_field(c, "mbs"), 1);
    EXPECT_EQ(int_field(c, "grad_acc"), 16);
    EXPECT_EQ(int_field(c, "seq"), 4096);
    EXPECT_EQ(c.gpus, 16);                     // 8 x 1 x 2 x 1
    EXPECT_EQ(c.global_batch_sequences, 128);  // 1 x 16 x 8
    ASSERT_TRUE(c.model_config);
    EXPECT_EQ(c.model_config->at("model_type"), "qwen2");  // q/k/v biases
    const ModelConfig m = model_from_hf_config(*c.model_config, "qwen");
    EXPECT_TRUE(m.qkv_bias);
    EXPECT_FALSE(m.out_bias);
    EXPECT_EQ(m.head_dim, 128);  // 1536 / 12
    EXPECT_TRUE(any_contains(c.warnings, "parallelism.fancy_overlap: not modelled (line 82)"));
}

TEST(ImportNanotron, BadInputNamesFileKeyAndLine) {
    expect_input_error([] { yaml_config_tree("parallelism:\n  dp: [1, 2\n  tp: 1\n", "bad.yaml"); },
                       {"bad.yaml:3", "YAML syntax"});
    expect_input_error([] { import_text(run("", "  batch_accumulation_per_replica: four\n")); },
                       {"run.yaml:9", "tokens.batch_accumulation_per_replica", "must be a whole number"});
    expect_input_error([] { import_text(run("  context_parallel_size: -2\n")); },
                       {"run.yaml:5", "parallelism.context_parallel_size"});
    expect_input_error([] { import_text(run("  expert_parallel_size: 0\n")); },
                       {"run.yaml:5", "parallelism.expert_parallel_size"});
    expect_input_error([] { import_text(run("  tp_mode: SOMETIMES\n")); },
                       {"run.yaml:5", "parallelism.tp_mode", "SOMETIMES"});
    expect_input_error([] { import_text(run("  pp_engine: zigzag\n")); },
                       {"run.yaml:5", "parallelism.pp_engine", "zigzag"});
    expect_input_error([] { import_text(run("", "", "optimizer:\n  zero_stage: 4\n")); },
                       {"run.yaml:11", "optimizer.zero_stage"});
    expect_input_error([] { import_text("parallelism:\n  tp: 1\n  pp: 1\n"); },
                       {"run.yaml", "parallelism.dp", "missing"});
    // A key written twice: one copy would be read and the other ignored (was: "parallelism.dp: missing",
    // pointing at a line that held dp).
    expect_input_error([] { import_text("parallelism:\n  dp: 2\n  tp: 1\n  pp: 1\nparallelism:\n  dp: 4\n"); },
                       {"run.yaml:5", "'parallelism' appears twice", "first on line 1"});
    // A number past a double's range is named as such (was: "must be a whole number, got null").
    expect_input_error([] { import_text(run("", "", "model:\n  model_config:\n    vocab_size: 1.0e+400\n")); },
                       {"run.yaml:12", "'1.0e+400' is beyond the range of a double"});
}

// Found by the fuzzer: an rms_norm_eps of 0 (cli_llama_1b.yaml's 1.0e-05 mutated to 0.0e-05) passed the
// import and was refused by the model reader without the file's name. The epsilon is checked where it
// is read, and whatever else the model reader refuses (here a longrope with too few factors) names the
// file and model.model_config.
TEST(ImportNanotron, ModelValuesTheReaderRefusesNameTheFile) {
    const auto path = config_dir() / "nanotron" / "cli_llama_1b.yaml";
    const std::string text = read_text(path);
    ASSERT_NE(text.find("    rms_norm_eps: 1.0e-05\n"), std::string::npos);
    std::string zero = text;
    zero.replace(zero.find("rms_norm_eps: 1.0e-05"), 21, "rms_norm_eps: 0.0e-05");
    expect_input_error([&] { import_text(zero, "eps.yaml"); },
                       {"eps.yaml:17", "model.model_config.rms_norm_eps", "above 0 and below 1"});
    std::string longrope = text;
    longrope.replace(longrope.find("    rms_norm_eps: 1.0e-05\n"), 26,
                     "    rms_norm_eps: 1.0e-05\n    rope_scaling:\n      type: longrope\n      short_factor: [1.0]\n"
                     "      long_factor: [1.0]\n");
    expect_input_error([&] { import_text(longrope, "rope.yaml"); },
                       {"rope.yaml", "model.model_config", "rope_scaling.short_factor"});
}

TEST(ImportNanotron, IntegersAreRangeChecked) {
    expect_input_error([] { import_text(run("", "  batch_accumulation_per_replica: 2.5\n")); },
                       {"run.yaml:9", "tokens.batch_accumulation_per_replica", "must be a whole number"});
    expect_input_error([] { import_text(run("", "  batch_accumulation_per_replica: 99999999999999999999\n")); },
                       {"run.yaml:9", "tokens.batch_accumulation_per_replica"});
    expect_input_error([] { import_text(run("", "  batch_accumulation_per_replica: \"2\"\n")); },
                       {"run.yaml:9", "tokens.batch_accumulation_per_replica"});  // quoted: text, not a number
    expect_input_error([] { import_text("parallelism:\n  dp: 1\n  tp: 1\n  pp: 1\ntokens:\n  sequence_length: 33554432\n"); },
                       {"run.yaml:6", "tokens.sequence_length", "16777216"});  // kMaxSeq
    expect_input_error([] { import_text(run("", "", "model:\n  model_config:\n    hidden_size: 4194304\n")); },
                       {"run.yaml:12", "model.model_config.hidden_size"});  // kMaxWidth = 2^20
    expect_input_error([] { import_text(run("", "", "model:\n  model_config:\n    num_attention_heads: 5\n")); },
                       {"run.yaml:12", "model.model_config.num_attention_heads", "does not divide"});
}

// Fuzz finding: a string that is not UTF-8 where a number belongs made the message's JSON dump
// throw type_error.316 (an internal error); the message shows the bytes replaced instead.
TEST(ImportNanotron, NonUtf8ValueIsBadInputNotAnInternalError) {
    expect_input_error([] { import_text(run("", "  batch_accumulation_per_replica: a\xb6" "b\n")); },
                       {"run.yaml:9", "tokens.batch_accumulation_per_replica", "must be a whole number"});
}

TEST(ImportNanotron, YamlReaderRefusesBombs) {
    // 70 nested sequences: deeper than the reader's 64 levels.
    expect_input_error([] { yaml_config_tree(std::string(70, '[') + std::string(70, ']'), "deep.yaml"); },
                       {"deep.yaml", "nested deeper"});
    // Aliases expanding to 10^9 values ("billion laughs").
    std::string bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
    for (char c = 'b'; c <= 'i'; ++c) {
        const char prev = static_cast<char>(c - 1);
        bomb += std::string(1, c) + ": &" + c + " [";
        for (int i = 0; i < 10; ++i) bomb += std::string(i ? ", *" : "*") + prev;
        bomb += "]\n";
    }
    expect_input_error([&] { yaml_config_tree(bomb, "bomb.yaml"); }, {"bomb.yaml", "values"});
    // Plain scalars as PyYAML resolves them (YAML 1.1: a float's exponent is signed, 0x1F is 31);
    // quoted ones stay text.
    const ConfigTree t = yaml_config_tree("a: 12\nb: 1.5e+3\nc: True\nd: ~\ne: '7'\nf: 0x1F\ng: -3\n", "s.yaml");
    EXPECT_EQ(t.root.at("a"), 12);
    EXPECT_DOUBLE_EQ(t.root.at("b").get<double>(), 1500.0);
    EXPECT_EQ(t.root.at("c"), true);
    EXPECT_TRUE(t.root.at("d").is_null());
    EXPECT_EQ(t.root.at("e"), "7");
    EXPECT_EQ(t.root.at("f"), 31);
    EXPECT_EQ(t.root.at("g"), -3);
    EXPECT_EQ(t.line_of("/g"), 7);
}

namespace {

struct RoundTrip {
    const char* what;
    const char* model;
    Plan plan;
};

std::vector<RoundTrip> nanotron_plans() {
    Plan a;
    a.seq = 4096, a.mbs = 2, a.grad_acc = 8, a.dp = 4, a.tp = 2, a.sp = true;
    a.zero = ZeroStage{1}, a.recompute = Recompute::full, a.precision = Precision::bf16_mixed_fp32_grads;
    Plan b = a;
    b.tp = 1, b.sp = false, b.dp = 8, b.zero = ZeroStage{0}, b.recompute = Recompute::none, b.precision = Precision::bf16;
    Plan c = b;
    c.pp = 4, c.grad_acc = 16, c.precision = Precision::fp32;  // 1f1b by default
    Plan d = a;
    d.tp = 4, d.sp = false, d.pp = 2, d.pp_schedule = PpSchedule::gpipe, d.optimizer = Optimizer::sgd;
    return {{"dp 4 x tp 2 + sp, ZeRO-1, full, fp32 grads", "llama-3-8b", a},
            {"dp 8, none, pure bf16", "smollm-360m", b},
            {"pp 4 1f1b, fp32", "llama-3.1-405b", c},
            {"tp 4 without sp, pp 2 afab, sgd", "qwen2.5-7b", d}};
}

}  // namespace

TEST(ImportNanotron, EmitRoundTrip) {
    const GpuSpec g = load_gpu("h100-sxm-80gb", PREFLIGHT_TEST_DATA_DIR);
    for (const RoundTrip& r : nanotron_plans()) {
        SCOPED_TRACE(r.what);
        const ModelConfig m = load_model(r.model, PREFLIGHT_TEST_DATA_DIR);
        const Plan& p = r.plan;
        const Emitted e = emit_plan(EmitFormat::nanotron, m, g, p);
        ImportedConfig c;
        ASSERT_NO_THROW(c = import_config_text(e.text, "emitted.yaml", std::nullopt, {})) << e.text;
        EXPECT_EQ(c.format, ConfigFormat::nanotron);
        expect_same_fields(plan_of(c), p, {"seq", "mbs", "grad_acc", "dp", "tp", "pp", "sp", "zero", "recompute",
                                           "precision", "pp_schedule", "optimizer"});
        EXPECT_EQ(c.gpus, p.gpus());
        ASSERT_TRUE(c.model_config);
        const ModelConfig back = model_from_hf_config(*c.model_config, m.name);
        EXPECT_EQ(back.family, m.family);
        EXPECT_EQ(back.hidden, m.hidden);
        EXPECT_EQ(back.layers, m.layers);
        EXPECT_EQ(back.heads, m.heads);
        EXPECT_EQ(back.kv_heads, m.kv_heads);
        EXPECT_EQ(back.head_dim, m.head_dim);
        EXPECT_EQ(back.ffn_hidden, m.ffn_hidden);
        EXPECT_EQ(back.vocab, m.vocab);
        // nanotron trains at the sequence length whatever max_position_embeddings says (trainer.py).
        EXPECT_EQ(back.max_positions, std::max(m.max_positions, p.seq));
        EXPECT_EQ(back.tied_embeddings, m.tied_embeddings);
        EXPECT_EQ(back.qkv_bias, m.qkv_bias);
        EXPECT_DOUBLE_EQ(back.rope_theta, m.rope_theta);
        EXPECT_EQ(back.norm_eps, m.norm_eps);  // rms_norm_eps written: LlamaConfig's 1e-6 is not every model's
        EXPECT_EQ(back.rope_scaling.type, m.rope_scaling.type);
        EXPECT_DOUBLE_EQ(back.rope_scaling.factor, m.rope_scaling.factor);
    }
}

// A float in exponent form carries a point ("1.0e-05"): PyYAML's YAML 1.1 resolver reads "1e-05" as a
// string, which nanotron's float field would refuse.
TEST(ImportNanotron, EmittedEpsilonIsAYamlFloat) {
    const GpuSpec g = load_gpu("h100-sxm-80gb", PREFLIGHT_TEST_DATA_DIR);
    Plan p;
    p.seq = 2048, p.mbs = 1, p.dp = 8;
    const std::string llama = emit_plan(EmitFormat::nanotron, load_model("llama-3-8b", PREFLIGHT_TEST_DATA_DIR), g, p).text;
    EXPECT_NE(llama.find("    rms_norm_eps: 1.0e-05\n"), std::string::npos) << llama;
    const std::string qwen = emit_plan(EmitFormat::nanotron, load_model("qwen2.5-7b", PREFLIGHT_TEST_DATA_DIR), g, p).text;
    EXPECT_NE(qwen.find("    rms_norm_eps: 1.0e-06\n"), std::string::npos) << qwen;
    EXPECT_NE(qwen.find("    rope_theta: 1000000\n"), std::string::npos) << qwen;  // plain digits stay as they were
}

TEST(ImportNanotron, EmitWarnsWhatNanotronCannotRun) {
    const ModelConfig m = load_model("llama-3-8b", PREFLIGHT_TEST_DATA_DIR);
    Plan p;
    p.seq = 4096, p.dp = 8, p.zero = ZeroStage{3}, p.precision = Precision::fp8_mixed;
    p.offload = Offload::optimizer, p.recompute = Recompute::selective;
    std::vector<std::string> w;
    const std::string y = nanotron_yaml(m, p, &w);
    EXPECT_TRUE(contains(y, "  zero_stage: 1\n"));
    EXPECT_TRUE(contains(y, "  recompute_layer: true\n"));
    EXPECT_TRUE(any_contains(w, "ZeRO-3"));
    EXPECT_TRUE(any_contains(w, "fp8"));
    EXPECT_TRUE(any_contains(w, "offload"));
    EXPECT_TRUE(any_contains(w, "selective"));
    EXPECT_EQ(parse_emit_format("nanotron"), EmitFormat::nanotron);
    EXPECT_EQ(to_string(EmitFormat::nanotron), "nanotron");

    // Context parallelism runs only in nanotron's Qwen2 model, with its llama3 ring attention
    // (Qwen2Config.__post_init__ needs ring_attn_heads_k_stride with it): a Llama shape is emitted
    // as a Qwen2 config without attention bias, and the import reads the same plan back.
    Plan cp;
    cp.seq = 8192, cp.dp = 2, cp.tp = 2, cp.sp = true, cp.cp = 2, cp.zero = ZeroStage{1};
    cp.precision = Precision::bf16_mixed_fp32_grads;
    std::vector<std::string> said;
    const std::string ring = nanotron_yaml(m, cp, &said);
    EXPECT_TRUE(contains(ring, "    is_qwen2_config: true\n    attention_bias: false\n")) << ring;
    EXPECT_TRUE(contains(ring, "    _attn_implementation: llama3_ring_attention\n    ring_attn_heads_k_stride: 1\n"));
    EXPECT_TRUE(contains(ring, "  context_parallel_size: 2\n"));
    EXPECT_TRUE(any_contains(said, "Qwen2 config without attention bias"));
    const ImportedConfig back = import_nanotron(yaml_config_tree(ring, "ring.yaml"), {});
    ASSERT_NE(back.field("cp"), nullptr);
    EXPECT_EQ(std::get<std::int64_t>(back.field("cp")->value), 2);
}
