// torchtitan job-config TOML -> plan values (issue #36), and --emit torchtitan read back.
// Expected numbers are worked out by hand from the fixtures in tests/configs/torchtitan/.
#include <gtest/gtest.h>

#include <tuple>

#include "tree_import_helpers.hpp"
#include "preflight/config_readers/config_readers.hpp"
#include "preflight/planner/catalog.hpp"
#include "preflight/planner/emit.hpp"

using namespace preflight;
using namespace preflight::test::tree_import;

namespace {

ImportedConfig import_text(const std::string& text, std::optional<std::int64_t> gpus = std::nullopt,
                           const std::string& file = "job.toml") {
    ImportContext ctx;
    ctx.gpus = gpus;
    return import_torchtitan(toml_config_tree(text, file), ctx);
}

ImportedConfig import_fixture(const std::string& name, std::optional<std::int64_t> gpus) {
    const auto path = config_dir() / "torchtitan" / name;
    ImportContext ctx;
    ctx.gpus = gpus;
    return import_torchtitan(toml_config_tree(read_text(path), path.string()), ctx);
}

// A minimal job on 8 GPUs whose lines are known: [training] on line 1, [parallelism] on line 5.
std::string job(const std::string& training_extra, const std::string& parallelism_extra,
                const std::string& tail = "") {
    return "[training]\n"                                       // 1
           "local_batch_size = 2\n"                             // 2
           "seq_len = 4096\n" +                                 // 3
           (training_extra.empty() ? "steps = 10\n" : training_extra) +  // 4
           "[parallelism]\n"                                    // 5
           "data_parallel_shard_degree = 8\n" +                 // 6
           parallelism_extra + tail;                            // 7
}

}  // namespace

// The acceptance case: torchtitan's Llama 3 8B preset on 64 GPUs.
TEST(ImportTorchtitan, Llama3_8bPresetOn64Gpus) {
    const ImportedConfig c = import_fixture("llama3_8b.toml", 64);
    ASSERT_TRUE(c.model);
    EXPECT_EQ(*c.model, "llama-3-8b");
    ASSERT_TRUE(c.model_from);
    EXPECT_EQ(c.model_from->line, 22);  // flavor = "8B"
    EXPECT_EQ(int_field(c, "seq"), 8192);
    EXPECT_EQ(int_field(c, "dp"), 64);  // shard -1 = 64 / (replicate 1 x tp 1 x pp 1 x cp 1)
    EXPECT_EQ(int_field(c, "tp"), 1);
    EXPECT_EQ(int_field(c, "pp"), 1);
    EXPECT_EQ(int_field(c, "zero"), 3);  // FSDP, resharding after forward (no pipeline)
    EXPECT_EQ(name_field(c, "recompute"), "selective");
    EXPECT_EQ(name_field(c, "precision"), "bf16-mixed");
    EXPECT_EQ(int_field(c, "mbs"), 1);
    EXPECT_EQ(int_field(c, "grad_acc"), 1);  // no global_batch_size: local x dp, no accumulation
    EXPECT_EQ(name_field(c, "optimizer"), "adamw");
    EXPECT_EQ(c.field("sp"), nullptr);
    EXPECT_EQ(c.gpus, 64);
    EXPECT_EQ(c.global_batch_sequences, 64);
    EXPECT_EQ(c.framework, "torchtitan");
    EXPECT_FALSE(c.compiled_loss);  // [compile] enable = false
    EXPECT_EQ(c.field("seq")->from.line, 35);
    EXPECT_EQ(c.field("dp")->from.line, 42);
    EXPECT_EQ(c.field("recompute")->from.line, 60);
    EXPECT_TRUE(any_contains(c.ignored, "[checkpoint] enable"));
    EXPECT_TRUE(any_contains(c.ignored, "[optimizer] lr"));
    EXPECT_TRUE(any_contains(c.ignored, "[quantize.linear.float8] filter_fqns"));
    EXPECT_TRUE(c.warnings.empty()) << c.warnings.front();
    // The same through format detection (import_config_text, what --from runs).
    const auto path = (config_dir() / "torchtitan" / "llama3_8b.toml").string();
    ImportContext ctx;
    ctx.gpus = 64;
    const ImportedConfig d = import_config_text(read_text(path), path, std::nullopt, ctx);
    EXPECT_EQ(d.format, ConfigFormat::torchtitan);
    EXPECT_EQ(int_field(d, "dp"), 64);
}

TEST(ImportTorchtitan, HsdpPipelineFloat8Rowwise) {
    const ImportedConfig c = import_fixture("llama3_70b_hsdp_pp_fp8.toml", std::nullopt);
    EXPECT_EQ(*c.model, "llama-3-70b");
    EXPECT_EQ(int_field(c, "dp"), 8);   // replicate 2 x shard 4
    EXPECT_EQ(int_field(c, "tp"), 8);
    EXPECT_EQ(int_field(c, "pp"), 4);
    EXPECT_EQ(c.gpus, 256);             // 8 x 8 x 4
    EXPECT_EQ(int_field(c, "seq"), 4096);
    // local 8 in pipeline micro-batches of 2: 4 per step; global 256 / (local 8 x dp 8) = 4
    // accumulation steps: 16 micro-batches of 2.
    EXPECT_EQ(int_field(c, "mbs"), 2);
    EXPECT_EQ(int_field(c, "grad_acc"), 16);
    EXPECT_EQ(c.global_batch_sequences, 256);
    EXPECT_EQ(int_field(c, "zero"), 2);  // "default" reshard policy with a pipeline: never reshard
    EXPECT_TRUE(bool_field(c, "sp"));
    EXPECT_EQ(name_field(c, "pp_schedule"), "1f1b");
    EXPECT_EQ(name_field(c, "recompute"), "full");
    EXPECT_EQ(name_field(c, "precision"), "fp8-mixed");
    EXPECT_EQ(name_field(c, "fp8_scaling"), "rowwise");
    EXPECT_TRUE(c.compiled_loss);
    EXPECT_TRUE(any_contains(c.warnings, "HSDP"));
    EXPECT_TRUE(any_contains(c.warnings, "[parallelism] enable_async_tensor_parallel: not modelled"));
}

TEST(ImportTorchtitan, OlderKeysAndSelectiveEveryNthLayer) {
    const ImportedConfig c = import_text(
        "[training]\nbatch_size = 4\nseq_len = 2048\ncompile = true\n"
        "[parallelism]\ndata_parallel_shard_degree = 1\ndata_parallel_replicate_degree = 4\n"
        "[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = \"2\"\n"
        "[float8]\nenable_float8_linear = true\nrecipe_name = \"tensorwise\"\n"
        "[mystery]\nknob = 1\n");
    EXPECT_EQ(int_field(c, "mbs"), 4);
    EXPECT_EQ(int_field(c, "dp"), 4);
    EXPECT_EQ(int_field(c, "zero"), 0);  // replicate only: DDP
    EXPECT_EQ(name_field(c, "recompute"), "selective");
    EXPECT_TRUE(any_contains(c.warnings, "selective_ac_option 2"));
    EXPECT_EQ(name_field(c, "precision"), "fp8-mixed");
    EXPECT_EQ(name_field(c, "fp8_scaling"), "tensorwise");
    EXPECT_TRUE(c.compiled_loss);
    EXPECT_TRUE(any_contains(c.warnings, "[mystery]"));
    // A key before any table (line 1) is named with its line.
    const ImportedConfig top = import_text("seed = 3\n" + job("", ""));
    EXPECT_TRUE(any_contains(top.warnings, "seed: not modelled (line 1)"));
    EXPECT_TRUE(any_contains(c.warnings, "[model] name \"llama3\", flavor \"debugmodel\""));
    EXPECT_FALSE(c.model);
    // Every layer checkpointed in full is full recompute.
    const ImportedConfig f = import_text(job("", "", "[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = 1\n"));
    EXPECT_EQ(name_field(f, "recompute"), "full");
}

// Before the [parallelism] table (torchtitan 785c34c, 2025-03-18) config_manager.py kept the
// data-parallel and tensor degrees in [training] and the pipeline and context degrees in
// [experimental], whose pipeline_parallel_microbatches (default: pp) split the local batch; and
// converters was a comma-separated string until e0d2de6 (2025-04-18). The 2025-02 Llama 3 70B
// shape on 64 GPUs with pp 4: tp 8 x pp 4 leaves shard 64 / 32 = 2; batch 8 in pp = 4
// micro-batches of 2 (was: tp and pp dropped, tp 1 pp 1 planned, 211 GiB; the string refused).
TEST(ImportTorchtitan, DegreesBeforeTheParallelismTableAreReadWhereTheyWereWritten) {
    const ImportedConfig c = import_text(
        "[model]\nname = \"llama3\"\nflavor = \"70B\"\nconverters = \"float8\"\n"         // lines 1-4
        "[training]\nbatch_size = 8\nseq_len = 8192\n"                                   // 5-7
        "data_parallel_shard_degree = -1\ntensor_parallel_degree = 8\n"                  // 8-9
        "[experimental]\npipeline_parallel_degree = 4\ncontext_parallel_degree = 1\n",   // 10-12
        64);
    EXPECT_EQ(int_field(c, "tp"), 8);
    EXPECT_EQ(int_field(c, "pp"), 4);
    EXPECT_EQ(int_field(c, "dp"), 2);
    EXPECT_EQ(int_field(c, "mbs"), 2);
    EXPECT_EQ(int_field(c, "grad_acc"), 4);
    EXPECT_EQ(name_field(c, "precision"), "fp8-mixed");
    ASSERT_NE(c.field("tp"), nullptr);
    EXPECT_EQ(c.field("tp")->from.line, 9);
    EXPECT_NE(c.field("tp")->from.text().find("[training] tensor_parallel_degree"), std::string::npos)
        << c.field("tp")->from.text();
    EXPECT_FALSE(any_contains(c.warnings, "tensor_parallel_degree"));
    // Beside [parallelism]'s own key the older table's is superseded, said (review 2026-11-30);
    // the converters string's entries are stripped, as string_list strips them.
    const ImportedConfig both = import_text("[training]\nbatch_size = 8\nseq_len = 2048\ntensor_parallel_degree = 4\n"
                                            "[parallelism]\ndata_parallel_shard_degree = 4\ntensor_parallel_degree = 2\n"
                                            "[model]\nconverters = \"mx, float8\"\n");
    EXPECT_EQ(int_field(both, "tp"), 2);
    EXPECT_TRUE(any_contains(both.warnings, "[training] tensor_parallel_degree: superseded by [parallelism]"));
    EXPECT_EQ(name_field(both, "precision"), "fp8-mixed");
    // pipeline_parallel_microbatches 8: micro-batches of 1.
    const ImportedConfig m = import_text(
        "[training]\nbatch_size = 8\nseq_len = 2048\ndata_parallel_shard_degree = 2\n"
        "[experimental]\npipeline_parallel_degree = 2\npipeline_parallel_microbatches = 8\n");
    EXPECT_EQ(int_field(m, "mbs"), 1);
    EXPECT_EQ(int_field(m, "grad_acc"), 8);
}

// torchtitan v0.2.x's 8B_flex and 8B_varlen are the 8B shape with FlexAttention or varlen
// attention over a block-causal mask (models/llama3/__init__.py): llama-3-8b, the attention said.
TEST(ImportTorchtitan, FlexAndVarlenFlavorsAreTheirBaseShape) {
    for (const char* flavor : {"8B_flex", "8B_varlen"}) {
        const ImportedConfig c = import_text("[model]\nname = \"llama3\"\nflavor = \"" + std::string(flavor) + "\"\n" +
                                             job("", ""));
        ASSERT_TRUE(c.model) << flavor;
        EXPECT_EQ(*c.model, "llama-3-8b");
        EXPECT_TRUE(any_contains(c.warnings, "block-causal")) << flavor;
    }
}

// torchtitan v0.2.2's registry beyond Llama 3 (models/qwen3 qwen3_configs, models/gpt_oss
// gptoss_configs): the flavors whose shapes are catalog models read as those; an unknown one is said.
TEST(ImportTorchtitan, Qwen3AndGptOssFlavorsAreCatalogModels) {
    for (const auto& [name, flavor, catalog] : {std::tuple{"qwen3", "8B", "qwen3-8b"}, std::tuple{"qwen3", "30B-A3B", "qwen3-30b-a3b"},
                                                std::tuple{"gpt_oss", "20b", "gpt-oss-20b"}, std::tuple{"gpt_oss", "120b", "gpt-oss-120b"}}) {
        const ImportedConfig c = import_text("[model]\nname = \"" + std::string(name) + "\"\nflavor = \"" + flavor + "\"\n" +
                                             job("", ""));
        ASSERT_TRUE(c.model) << flavor;
        EXPECT_EQ(*c.model, catalog);
        EXPECT_TRUE(c.context_follows_seq);
    }
    const ImportedConfig other = import_text("[model]\nname = \"gpt_oss\"\nflavor = \"debugmodel\"\n" + job("", ""));
    EXPECT_FALSE(other.model);
    EXPECT_TRUE(any_contains(other.warnings, "no catalog model matches"));
}

// v0.2.2: without FSDP (shard degree 1, no cp) tp or pp turns mixed precision off
// (distributed/utils.py maybe_enable_amp), so bf16 is planned as fp32 and a Float8 job too, each
// said; with data-parallel sharding the same job stays bf16-mixed. A pipeline whose global batch
// adds accumulation steps runs each as its own schedule: said.
TEST(ImportTorchtitan, NoFsdpBesideTpOrPpTrainsInFp32) {
    const std::string tp_only = "[model]\nname = \"llama3\"\nflavor = \"8B\"\n[parallelism]\n"
                                "data_parallel_shard_degree = 1\ntensor_parallel_degree = 8\n";
    const ImportedConfig alone = import_text(tp_only, 8);
    EXPECT_EQ(name_field(alone, "precision"), "fp32");
    EXPECT_TRUE(any_contains(alone.warnings, "maybe_enable_amp"));
    const ImportedConfig f8 = import_text("[model]\nname = \"llama3\"\nflavor = \"8B\"\nconverters = [\"float8\"]\n"
                                          "[parallelism]\ndata_parallel_shard_degree = 1\ntensor_parallel_degree = 8\n", 8);
    EXPECT_EQ(name_field(f8, "precision"), "fp32");
    EXPECT_TRUE(any_contains(f8.warnings, "Float8 without FSDP"));
    const ImportedConfig sharded = import_text("[model]\nname = \"llama3\"\nflavor = \"8B\"\n[parallelism]\n"
                                               "tensor_parallel_degree = 2\n", 8);
    EXPECT_EQ(name_field(sharded, "precision"), "bf16-mixed");
    const ImportedConfig acc = import_text("[model]\nname = \"llama3\"\nflavor = \"8B\"\n[training]\n"
                                           "local_batch_size = 8\nglobal_batch_size = 64\n[parallelism]\n"
                                           "pipeline_parallel_degree = 4\npipeline_parallel_microbatch_size = 1\n", 8);
    EXPECT_EQ(int_field(acc, "grad_acc"), 32);  // 64 / (8 x dp 2) = 4 steps of 8 micro-batches
    EXPECT_TRUE(any_contains(acc.warnings, "its own schedule with its own bubble"));
}

TEST(ImportTorchtitan, BadInputNamesFileKeyAndLine) {
    // TOML syntax.
    expect_input_error([] { toml_config_tree("[training]\nseq_len = = 3\n", "bad.toml"); },
                       {"bad.toml:2", "TOML syntax"});
    // A string where a number is needed.
    expect_input_error([] { import_text(job("", "tensor_parallel_degree = \"8\"\n")); },
                       {"job.toml:7", "[parallelism] tensor_parallel_degree", "must be a whole number"});
    // A zero or negative degree.
    expect_input_error([] { import_text(job("", "pipeline_parallel_degree = 0\n")); },
                       {"job.toml:7", "[parallelism] pipeline_parallel_degree"});
    expect_input_error([] { import_text(job("", "context_parallel_degree = -2\n")); },
                       {"job.toml:7", "[parallelism] context_parallel_degree"});
    // global_batch_size not a multiple of local (2) x dp (8).
    expect_input_error([] { import_text(job("global_batch_size = 40\n", "")); },
                       {"job.toml:4", "[training] global_batch_size", "40"});
    // An unknown activation-checkpoint mode.
    expect_input_error([] { import_text(job("", "", "[activation_checkpoint]\nmode = \"sometimes\"\n")); },
                       {"job.toml:8", "[activation_checkpoint] mode", "sometimes"});
    // -1 shard degree without --gpus.
    const auto fixture = (config_dir() / "torchtitan" / "llama3_8b.toml").string();
    expect_input_error([] { import_fixture("llama3_8b.toml", std::nullopt); },
                       {fixture + ":42", "[parallelism] data_parallel_shard_degree", "--gpus"});
    // -1 that --gpus does not divide.
    expect_input_error([] { import_text("[parallelism]\ntensor_parallel_degree = 8\n", 12); },
                       {"job.toml", "[parallelism] data_parallel_shard_degree", "12"});
}

TEST(ImportTorchtitan, IntegersAreRangeChecked) {
    expect_input_error([] { import_text("[training]\nlocal_batch_size = 1\nseq_len = 33554432\n"
                                        "[parallelism]\ndata_parallel_shard_degree = 8\n"); },
                       {"job.toml:3", "[training] seq_len", "16777216"});  // kMaxSeq = 2^24
    expect_input_error([] { import_text("[training]\nlocal_batch_size = 1\nseq_len = 4096.0\n"
                                        "[parallelism]\ndata_parallel_shard_degree = 8\n"); },
                       {"job.toml:3", "[training] seq_len", "must be a whole number"});  // never a float as an integer
    expect_input_error([] { import_text(job("", "tensor_parallel_degree = 9223372036854775807\n")); },
                       {"job.toml:7", "[parallelism] tensor_parallel_degree"});
    expect_input_error([] { import_text("[training]\nlocal_batch_size = true\n[parallelism]\ndata_parallel_shard_degree = 8\n"); },
                       {"job.toml:2", "[training] local_batch_size"});
    expect_input_error([] { import_text(job("", "data_parallel_replicate_degree = 1048576\ntensor_parallel_degree = 1048576\n")); },
                       {"job.toml", "passes"});  // dp x tp beyond kMaxGpus
}

namespace {

struct RoundTrip {
    const char* what;
    Plan plan;
    bool compiled_loss = false;
};

Plan base_plan(std::int64_t dp, int zero) {
    Plan p;
    p.seq = 8192;
    p.mbs = 2;
    p.grad_acc = 4;
    p.dp = dp;
    p.zero = ZeroStage{zero};
    p.recompute = Recompute::selective;
    return p;
}

std::vector<RoundTrip> torchtitan_plans() {
    std::vector<RoundTrip> v;
    v.push_back({"FSDP ZeRO-3, selective", base_plan(8, 3)});
    Plan pure = base_plan(8, 3);
    pure.precision = Precision::bf16;  // training.dtype "bfloat16" (v0.2.0+)
    v.push_back({"FSDP ZeRO-3, pure bf16", pure});
    Plan ddp = base_plan(4, 0);
    ddp.tp = 2, ddp.sp = true, ddp.recompute = Recompute::full, ddp.precision = Precision::fp32;
    v.push_back({"DDP, tp + sp, full, fp32", ddp});
    Plan pp = base_plan(2, 2);
    pp.pp = 4, pp.mbs = 1, pp.grad_acc = 8, pp.recompute = Recompute::none, pp.precision = Precision::fp8_mixed;
    v.push_back({"ZeRO-2, pp 4 1f1b, none, fp8 tensorwise", pp});
    Plan rowwise = base_plan(16, 3);
    rowwise.tp = 4, rowwise.sp = true, rowwise.precision = Precision::fp8_mixed, rowwise.fp8_scaling = Fp8Scaling::rowwise;
    v.push_back({"tp 4 + sp, fp8 rowwise, compiled loss", rowwise, true});
    Plan gpipe = base_plan(1, 0);
    // dp 1: no FSDP, so with pp torchtitan trains in fp32 (maybe_enable_amp) and the import says so.
    gpipe.pp = 2, gpipe.pp_schedule = PpSchedule::gpipe, gpipe.precision = Precision::fp32;
    v.push_back({"gpipe", gpipe});
    Plan interleaved = base_plan(2, 2);
    interleaved.pp = 4, interleaved.grad_acc = 8, interleaved.pp_schedule = PpSchedule::interleaved;
    interleaved.vpp = 2, interleaved.cp = 2;
    v.push_back({"interleaved vpp 2, cp 2", interleaved});
    // dp 1 with cp 2: torchtitan's FSDP shards over the shard x cp ranks (parallel_dims.py
    // fsdp_enabled), as the plan's ZeRO-2 shards over dp x cp: read back as ZeRO-2, not DDP's 0.
    Plan cp_only = base_plan(1, 2);
    cp_only.tp = 2, cp_only.sp = true, cp_only.pp = 4, cp_only.cp = 2, cp_only.grad_acc = 8;
    v.push_back({"dp 1, cp 2, ZeRO-2", cp_only});
    Plan offload = base_plan(8, 3);
    offload.offload = Offload::optimizer_and_params;  // (no SGD: torchtitan builds Adam and AdamW only)
    v.push_back({"offload params", offload});
    return v;
}

}  // namespace

TEST(ImportTorchtitan, EmitRoundTrip) {
    const ModelConfig m = load_model("llama-3-8b", PREFLIGHT_TEST_DATA_DIR);
    const GpuSpec g = load_gpu("h100-sxm-80gb", PREFLIGHT_TEST_DATA_DIR);
    for (const RoundTrip& r : torchtitan_plans()) {
        SCOPED_TRACE(r.what);
        const Plan& p = r.plan;
        EmitOptions options;
        options.compiled_loss = r.compiled_loss;
        const Emitted e = emit_plan(EmitFormat::torchtitan, m, g, p, options);
        ImportedConfig c;
        ASSERT_NO_THROW(c = import_torchtitan(toml_config_tree(e.text, "emitted.toml"), {})) << e.text;
        EXPECT_EQ(c.model, "llama-3-8b");
        expect_same_fields(plan_of(c), p, {"seq", "mbs", "grad_acc", "dp", "tp", "pp", "cp", "sp", "zero", "recompute",
                                           "precision", "fp8_scaling", "pp_schedule", "vpp", "offload", "optimizer"});
        EXPECT_EQ(c.compiled_loss, r.compiled_loss);
        EXPECT_EQ(c.gpus, p.gpus());
        EXPECT_EQ(c.global_batch_sequences, p.mbs * p.grad_acc * p.dp);
    }
}

// The shared step that writes imported fields onto a plan (the explorer's import, the fuzz
// harness): each value lands in its field, a bad value names its file and line, and a key outside
// the plan schema is refused by name, never skipped.
TEST(ImportTorchtitan, ImportedFieldsApplyToAPlanOrNameTheirSpot) {
    ImportedConfig c;
    c.fields.push_back({"tp", FieldValue{std::int64_t{4}}, ConfigSpot{"train.toml", "parallelism.tp", 7}});
    c.fields.push_back({"seq", FieldValue{std::int64_t{8192}}, ConfigSpot{"train.toml", "[training] seq_len", 3}});
    const Plan p = apply_imported_fields(c, Plan{});
    EXPECT_EQ(p.tp, 4);
    EXPECT_EQ(p.seq, 8192);
    EXPECT_EQ(p.mbs, Plan{}.mbs);  // untouched
    c.fields.push_back({"no_such_field", FieldValue{std::int64_t{1}}, ConfigSpot{"train.toml", "[x] y", 9}});
    try {
        (void)apply_imported_fields(c, Plan{});
        ADD_FAILURE() << "an unknown field was accepted";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("train.toml:9"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("no_such_field"), std::string::npos) << e.what();
    }
}

// The emitted TOML has one table per section (a repeated [parallelism] header is invalid TOML).
TEST(ImportTorchtitan, EmitOneTablePerSection) {
    const ModelConfig m = load_model("llama-3-8b", PREFLIGHT_TEST_DATA_DIR);
    Plan p = base_plan(2, 3);
    p.pp = 4, p.cp = 2, p.ep = 2, p.pp_schedule = PpSchedule::interleaved, p.vpp = 2, p.offload = Offload::optimizer;
    p.precision = Precision::fp8_mixed;
    const std::string t = torchtitan_toml(m, p);
    for (const char* table : {"[parallelism]", "[training]", "[model]"}) {
        const std::size_t first = t.find(table);
        ASSERT_NE(first, std::string::npos) << table;
        EXPECT_EQ(t.find(table, first + 1), std::string::npos) << table << " twice in:\n" << t;
    }
    EXPECT_NO_THROW(toml_config_tree(t, "emitted.toml")) << t;
}

TEST(ImportTorchtitan, TomlReaderLinesAndLimits) {
    const ConfigTree t = toml_config_tree("[job]\n\"a/b~c\" = 1\nwhen = 2026-02-23\n[training]\nseq_len = 2048\n", "t.toml");
    EXPECT_EQ(t.line_of("/job/a~1b~0c"), 2);  // RFC 6901 escaping of '/' and '~'
    EXPECT_EQ(t.root.at("job").at("when"), "2026-02-23");  // a date stays its text
    EXPECT_EQ(t.line_of("/training/seq_len"), 5);
    EXPECT_EQ(t.line_of("/training"), 4);
    // A 100,000-part dotted key would overflow toml++'s recursive tables: refused before parsing.
    std::string key = "a";
    for (int i = 0; i < 100000; ++i) key += ".a";
    expect_input_error([&] { toml_config_tree("[job]\nx = 1\n" + key + " = 1\n", "deep.toml"); },
                       {"deep.toml:3", "deeper than 64"});
    expect_input_error([] { toml_config_tree("x = " + std::string(100, '[') + std::string(100, ']') + "\n", "deep.toml"); },
                       {"deep.toml:1", "deeper than 64"});
    // Dots in values and in multi-line strings are no keys.
    EXPECT_NO_THROW(toml_config_tree("[job]\ndescription = \"\"\"\n" + key + "\n\"\"\"\npath = \"" + key + "\"\n", "ok.toml"));
}

// Fuzz finding: toml++ 3.3.0 reached __builtin_unreachable on U+00A1..U+0499 between tokens. The
// reader hands it ASCII only: non-ASCII in strings and comments is read (as '?'), elsewhere it is
// a syntax error at its line, and invalid UTF-8 is refused naming the line.
TEST(ImportTorchtitan, NonAsciiTextNeverReachesTomlppsUnicodeTables) {
    const ConfigTree t = toml_config_tree("# r\u00e9sum\u00e9 \u00b6\n[job]\ndescription = \"8B \u2013 \u00b6\"\n[training]\nseq_len = 2048\n",
                                          "u.toml");
    EXPECT_EQ(t.root.at("training").at("seq_len"), 2048);
    EXPECT_EQ(t.line_of("/training/seq_len"), 5);
    expect_input_error([] { toml_config_tree("[training]\nseq_len\u00b6= 2048\n", "stray.toml"); }, {"stray.toml:2", "TOML syntax"});
    expect_input_error([] { toml_config_tree("[training]\n# \xff\xfe\nseq_len = 1\n", "bytes.toml"); },
                       {"bytes.toml:2", "not valid UTF-8"});
}


// The virtual stages per rank follow the model's layer count: --model beside --from gives it where
// the config names no catalog model (audit of 2026-11-30: `plan --emit torchtitan` of Llama-3.2-1B,
// 16 layers, read back with --model warned "give --model" and planned vpp 2 instead of 4).
// 16 layers at 2 per stage (the first and last stage no lighter) over pp 2: 8 stages, 4 per rank.
TEST(ImportTorchtitan, ModelFlagGivesTheLayersTheVirtualStagesNeed) {
    const std::string text = "[model]\nname = \"llama3\"\nflavor = \"1B_custom\"\n[parallelism]\n"
                             "data_parallel_shard_degree = 4\npipeline_parallel_degree = 2\n"
                             "pipeline_parallel_schedule = \"Interleaved1F1B\"\npipeline_parallel_layers_per_stage = 2\n"
                             "pipeline_parallel_first_stage_less_layers = 0\npipeline_parallel_last_stage_less_layers = 0\n";
    const ImportedConfig alone = import_text(text, 8);
    EXPECT_EQ(alone.field("vpp"), nullptr);
    EXPECT_TRUE(any_contains(alone.warnings, "give --model"));
    ImportContext ctx;
    ctx.gpus = 8;
    ctx.model_layers = 16;
    const ImportedConfig given = import_torchtitan(toml_config_tree(text, "job.toml"), ctx);
    EXPECT_EQ(int_field(given, "vpp"), 4);
    EXPECT_FALSE(any_contains(given.warnings, "give --model"));
    EXPECT_FALSE(any_contains(given.warnings, "give --vpp"));
}
