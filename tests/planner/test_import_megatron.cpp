// Megatron-LM arguments import (#36): launch scripts (arrays, variables, torchrun) and arguments
// files to plan fields and a Hugging Face config of the model, round trips through
// megatron_arguments, and bad input naming file, flag and line. Fixtures in
// tests/configs/megatron/ are in the shape of Megatron-LM's examples (each names its model).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "preflight/config_readers/config_readers.hpp"
#include "tree_import_helpers.hpp"
#include "preflight/planner/catalog.hpp"
#include "preflight/planner/config_import.hpp"
#include "preflight/planner/emit.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/model.hpp"
#include "preflight/planner/plan_schema.hpp"

using namespace preflight;

namespace {

using test::tree_import::read_text;

const std::filesystem::path kConfigs = PREFLIGHT_TEST_CONFIG_DIR;
const std::filesystem::path kData = PREFLIGHT_TEST_DATA_DIR;


ImportedConfig import_fixture(const std::string& name, std::optional<std::int64_t> gpus = std::nullopt) {
    const std::string path = (kConfigs / "megatron" / name).string();
    return import_megatron(read_text(path), path, ImportContext{gpus});
}

using test::tree_import::expect_input_error;
std::int64_t integer(const ImportedConfig& c, std::string_view key) { return test::tree_import::int_field(c, std::string(key)); }
std::string name(const ImportedConfig& c, std::string_view key) { return test::tree_import::name_field(c, std::string(key)); }
bool toggle(const ImportedConfig& c, std::string_view key) { return test::tree_import::bool_field(c, std::string(key)); }
bool contains(const std::vector<std::string>& v, const std::string& needle) { return test::tree_import::any_contains(v, needle); }

ImportedConfig import_text(const std::string& text, std::optional<std::int64_t> gpus = std::nullopt) {
    return import_megatron(text, "bad.sh", ImportContext{gpus});
}

}  // namespace

// The acceptance case: Llama-3-8B, tp 2 with sequence parallelism and the distributed
// optimizer, global batch 128 on 2 nodes x 8 GPUs -> dp 8, ZeRO-1, 16 accumulation steps.
TEST(ImportMegatron, Llama3LaunchScriptAcceptanceCase) {
    const ImportedConfig c = import_fixture("llama3_8b_tp2_2nodes.sh");
    EXPECT_EQ(c.format, ConfigFormat::megatron);
    EXPECT_EQ(c.framework, "megatron");
    EXPECT_EQ(c.gpus, 16);  // torchrun --nproc_per_node 8 --nnodes ${NUM_NODES:-2}
    EXPECT_EQ(integer(c, "tp"), 2);
    EXPECT_EQ(integer(c, "pp"), 1);
    EXPECT_TRUE(toggle(c, "sp"));
    EXPECT_EQ(integer(c, "dp"), 8);
    EXPECT_EQ(integer(c, "zero"), 1);
    EXPECT_EQ(integer(c, "grad_acc"), 16);
    EXPECT_EQ(integer(c, "mbs"), 1);
    EXPECT_EQ(integer(c, "seq"), 8192);
    EXPECT_EQ(c.global_batch_sequences, 128);
    EXPECT_EQ(name(c, "precision"), "bf16-mixed-fp32-grads");  // --bf16 + the appended fp32 accumulation
    EXPECT_EQ(name(c, "recompute"), "none");
    EXPECT_EQ(name(c, "attention"), "flash");  // --attention-backend fused
    EXPECT_EQ(name(c, "optimizer"), "adamw");
    EXPECT_EQ(std::get<double>(c.field("dropout")->value), 0.0);
    // Lines: the flag inside its array.
    EXPECT_EQ(c.field("tp")->from.line, 79);
    EXPECT_EQ(c.field("tp")->from.key, "--tensor-model-parallel-size");
    EXPECT_EQ(c.field("grad_acc")->from.line, 59);
    EXPECT_EQ(c.field("zero")->from.line, 85);
    // The same with --gpus given.
    const ImportedConfig g = import_fixture("llama3_8b_tp2_2nodes.sh", 16);
    EXPECT_EQ(integer(g, "dp"), 8);
    EXPECT_EQ(integer(g, "grad_acc"), 16);
    EXPECT_EQ(integer(g, "zero"), 1);
    EXPECT_TRUE(g.warnings.empty() || !contains(g.warnings, "processes"));
    // --gpus 32 overrides the launch line (dp 16, accumulation 8) with a warning.
    const ImportedConfig w = import_fixture("llama3_8b_tp2_2nodes.sh", 32);
    EXPECT_EQ(integer(w, "dp"), 16);
    EXPECT_EQ(integer(w, "grad_acc"), 8);
    EXPECT_TRUE(contains(w.warnings, "starts 16 processes"));
}

TEST(ImportMegatron, Llama3ModelShapeIsTheCatalogs) {
    const ImportedConfig c = import_fixture("llama3_8b_tp2_2nodes.sh");
    ASSERT_TRUE(c.model_config);
    ASSERT_TRUE(c.model_from);
    EXPECT_EQ(c.model_from->key, "--num-layers");
    EXPECT_EQ(c.model_from->line, 36);
    const nlohmann::json& j = *c.model_config;
    EXPECT_EQ(j["model_type"], "llama");
    EXPECT_EQ(j["num_key_value_heads"], 8);
    EXPECT_EQ(j["intermediate_size"], 14336);
    EXPECT_EQ(j["vocab_size"], 128256);  // Meta-Llama-3 tokenizer, already a multiple of 128 x 2
    EXPECT_EQ(j["tie_word_embeddings"], false);
    EXPECT_EQ(j["attention_bias"], false);
    EXPECT_EQ(j["rope_theta"], 500000.0);
    const ModelConfig m = model_from_hf_config(j, "imported");
    EXPECT_EQ(count_params(m).total, count_params(load_model("llama-3-8b", kData)).total);
    // Known and left out on purpose; nothing unknown.
    EXPECT_TRUE(contains(c.ignored, "--save"));
    EXPECT_TRUE(contains(c.ignored, "--lr"));
    EXPECT_TRUE(contains(c.ignored, "--data-path"));  // $4 is undefined: harmless for an ignored flag
    EXPECT_TRUE(contains(c.ignored, "--overlap-grad-reduce"));
    EXPECT_TRUE(c.warnings.empty()) << c.warnings.front();
}

TEST(ImportMegatron, Gpt3ScriptQuotedArraysAndGpt2Tokenizer) {
    const ImportedConfig c = import_fixture("gpt3_175b.sh");
    EXPECT_EQ(c.gpus, 128);  // --nproc-per-node=8 --nnodes=16
    EXPECT_EQ(integer(c, "tp"), 8);
    EXPECT_EQ(integer(c, "pp"), 16);
    EXPECT_EQ(integer(c, "dp"), 1);
    EXPECT_EQ(integer(c, "grad_acc"), 1536);
    EXPECT_EQ(name(c, "precision"), "fp16-mixed");
    EXPECT_EQ(integer(c, "zero"), 0);
    EXPECT_FALSE(toggle(c, "sp"));
    EXPECT_EQ(std::get<double>(c.field("dropout")->value), 0.1);  // Megatron's default
    ASSERT_TRUE(c.model_config);
    const nlohmann::json& j = *c.model_config;
    EXPECT_EQ(j["model_type"], "gpt2");
    EXPECT_EQ(j["n_embd"], 12288);
    EXPECT_EQ(j["n_inner"], 4 * 12288);
    EXPECT_EQ(j["vocab_size"], 51200);  // 50257 padded to a multiple of 128 x 8
    EXPECT_EQ(j["n_positions"], 2048);
    EXPECT_EQ(j["tie_word_embeddings"], true);
    EXPECT_NO_THROW(model_from_hf_config(j, "gpt3"));
}

TEST(ImportMegatron, ArgumentsFileMoeInterleavedFp8Offload) {
    const ImportedConfig c = import_fixture("mixtral_8x7b_args.txt", 64);
    EXPECT_EQ(integer(c, "tp"), 2);
    EXPECT_EQ(integer(c, "pp"), 4);
    EXPECT_EQ(integer(c, "cp"), 2);
    EXPECT_EQ(integer(c, "ep"), 4);
    EXPECT_EQ(integer(c, "vpp"), 2);  // 32 layers / (4 per chunk x pp 4)
    EXPECT_EQ(name(c, "pp_schedule"), "interleaved");
    EXPECT_EQ(integer(c, "dp"), 4);         // 64 / (2 x 4 x 2)
    EXPECT_EQ(integer(c, "grad_acc"), 64);  // 256 / (1 x 4)
    EXPECT_FALSE(c.gpus);                   // no launch line
    EXPECT_EQ(name(c, "precision"), "fp8-mixed");
    EXPECT_EQ(name(c, "recompute"), "full");
    EXPECT_EQ(name(c, "offload"), "optimizer");
    EXPECT_TRUE(c.overlap_p2p_comm);
    EXPECT_FALSE(c.tp_comm_overlap);
    EXPECT_TRUE(contains(c.warnings, "mixtral_8x7b_args.txt:46: --no-magic-flag"));
    EXPECT_FALSE(contains(c.warnings, "recompute"));  // uniform, 1 layer: what the plan models
    ASSERT_TRUE(c.model_config);
    EXPECT_EQ((*c.model_config)["model_type"], "mixtral");
    EXPECT_EQ(count_params(model_from_hf_config(*c.model_config, "m")).total,
              count_params(load_model("mixtral-8x7b", kData)).total);
    // Without --gpus and a launch line: no dp or accumulation, the global batch kept.
    const ImportedConfig n = import_fixture("mixtral_8x7b_args.txt");
    EXPECT_EQ(n.field("dp"), nullptr);
    EXPECT_EQ(n.field("grad_acc"), nullptr);
    EXPECT_EQ(n.global_batch_sequences, 256);
    // ... and said (new-user audit: `plan --emit megatron` then `memory --from` ran a global batch
    // of 1,024 as dp 1 x grad_acc 1 without a word; DeepSpeed's train_batch_size was warned about).
    EXPECT_TRUE(contains(n.warnings, "mixtral_8x7b_args.txt:26: --global-batch-size 256: not divided")) << n.warnings.size();
    EXPECT_TRUE(contains(n.warnings, "give --gpus"));
    EXPECT_FALSE(contains(c.warnings, "--global-batch-size 256: not divided"));  // 64 GPUs given: divided
}

// gpt-oss in Megatron-LM's own terms: the clamped quick_gelu gate, learned sinks, biases kept and a
// 127-keys-back window on all but every 2nd layer read back as the catalog's gpt-oss-20b (its vocabulary
// 201,088 = 1,571 x 128 needs no padding), its YaRN positions too.
TEST(ImportMegatron, GptOssFlagsAreTheCatalogModel) {
    const ImportedConfig c = import_fixture("gpt_oss_20b_args.sh");
    ASSERT_TRUE(c.model_config);
    EXPECT_EQ((*c.model_config)["model_type"], "gpt_oss");
    const ModelConfig m = model_from_hf_config(*c.model_config, "m"), catalog = load_model("gpt-oss-20b", kData);
    EXPECT_EQ(count_params(m).total, count_params(catalog).total);
    EXPECT_EQ(m.sliding_window, 128);
    EXPECT_EQ(m.full_attention_layers, 12);
    EXPECT_EQ(integer(c, "ep"), 8);
    // YaRN read as transformers' rope_scaling: factor 32 over 4,096 positions, betas 32 and 1, truncate off.
    EXPECT_EQ(m.rope_scaling.type, "yarn");
    EXPECT_EQ(m.rope_scaling.factor, catalog.rope_scaling.factor);
    EXPECT_EQ(m.rope_scaling.original_max_positions, 4096);
    EXPECT_FALSE(m.rope_scaling.truncate);
    EXPECT_TRUE(c.warnings.empty()) << c.warnings.front();
    // Half of gpt-oss's parts: planned as plain softmax / SwiGLU, and said.
    const ImportedConfig half = import_text(
        "--num-layers 2 --hidden-size 256 --num-attention-heads 8 --swiglu --softmax-type off-by-one "
        "--window-size 63,0 --window-attn-skip-freq 2 --vocab-size 1000 --max-position-embeddings 512\n");
    EXPECT_TRUE(contains(half.warnings, "off-by-one has no parameters"));
    EXPECT_TRUE(contains(half.warnings, "--window-attn-skip-freq: modelled as full attention on every layer"));
    ASSERT_TRUE(half.model_config);
    EXPECT_EQ((*half.model_config)["model_type"], "llama");
    const ImportedConfig window = import_text(
        "--num-layers 2 --hidden-size 256 --num-attention-heads 8 --swiglu --window-size 63,0 --vocab-size 1000 "
        "--max-position-embeddings 512\n");
    ASSERT_TRUE(window.model_config);
    EXPECT_EQ((*window.model_config)["model_type"], "mistral");
    EXPECT_EQ(model_from_hf_config(*window.model_config, "w").sliding_window, 64);
}

// Helper audit against real Megatron-LM scripts (d98e8a6): an array extended by its own expansion
// keeps its elements (examples/megatron_fsdp: ARGS=("${ARGS[@]}" --use-megatron-fsdp ...)); a
// torchrun line without --nproc-per-node starts torch.distributed.run's default of 1 process; with
// no tokenizer named, pretrain_gpt.py's default GPT2BPETokenizer gives 50,257 tokens; the optimizer
// instances Megatron shards over are said, not dropped.
TEST(ImportMegatron, ShellAndLauncherDefaultsAsBashAndMegatronApplyThem) {
    const ImportedConfig self = import_text("A=(\n  --micro-batch-size 2\n  --global-batch-size 64\n)\n"
                                            "A=(\"${A[@]}\" --bf16)\n"
                                            "torchrun --nproc_per_node 8 pretrain_gpt.py ${A[@]} --seq-length 512\n");
    EXPECT_EQ(integer(self, "mbs"), 2);
    EXPECT_EQ(integer(self, "grad_acc"), 4);  // 64 / (2 x dp 8)
    EXPECT_EQ(name(self, "precision"), "bf16-mixed-fp32-grads");
    const ImportedConfig one = import_text("torchrun pretrain_gpt.py --micro-batch-size 4 --global-batch-size 8\n");
    ASSERT_TRUE(one.gpus);
    EXPECT_EQ(*one.gpus, 1);
    EXPECT_EQ(integer(one, "grad_acc"), 2);
    const ImportedConfig gpt = import_text("--num-layers 2\n--hidden-size 256\n--num-attention-heads 4\n"
                                           "--max-position-embeddings 512\n");
    ASSERT_TRUE(gpt.model_config);
    EXPECT_EQ((*gpt.model_config)["vocab_size"], 50304);  // 50,257 padded to a multiple of 128
    const ImportedConfig inst = import_text("--micro-batch-size 1 --num-distributed-optimizer-instances 2\n");
    EXPECT_TRUE(contains(inst.warnings, "--num-distributed-optimizer-instances: the optimizer states sharded"));
}

TEST(ImportMegatron, RecomputeVariantsAndShellForms) {
    const auto recompute = [](const std::string& flags) { return name(import_text("--micro-batch-size 1 " + flags), "recompute"); };
    EXPECT_EQ(recompute("--recompute-activations"), "selective");
    EXPECT_EQ(recompute("--recompute-granularity selective"), "selective");
    EXPECT_EQ(recompute("--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"), "full");
    const ImportedConfig block = import_text("--recompute-granularity full \\\n --recompute-method block --recompute-num-layers 4");
    EXPECT_EQ(name(block, "recompute"), "full");
    EXPECT_TRUE(contains(block.warnings, "partial or grouped recompute is not modelled"));
    // $(( )) arithmetic, ${VAR:-default}, export, python -m torch.distributed.run, --flag=value.
    const ImportedConfig s = import_text(
        "#!/bin/bash\nexport NODES=${NODES:-4}\nPER=$((2 * 4))\nTP=${TP:-4}\n"
        "python -m torch.distributed.run --nproc-per-node $PER --nnodes=$NODES pretrain_gpt.py \\\n"
        "  --tensor-model-parallel-size=$TP --micro-batch-size 2 --global-batch-size 64 # comment\n");
    EXPECT_EQ(s.gpus, 32);
    EXPECT_EQ(integer(s, "tp"), 4);
    EXPECT_EQ(integer(s, "dp"), 8);
    EXPECT_EQ(integer(s, "grad_acc"), 4);
    EXPECT_EQ(integer(s, "mbs"), 2);
}

TEST(ImportMegatron, MegatronsOwnAdjustmentsAndUndefinedArrays) {
    // validate_args turns --sequence-parallel off at tensor parallel 1.
    const ImportedConfig sp = import_text("--tensor-model-parallel-size 1\n--sequence-parallel\n");
    EXPECT_FALSE(toggle(sp, "sp"));
    EXPECT_TRUE(contains(sp.ignored, "--sequence-parallel"));
    // An array the script never defines: its arguments are not read, and the import says so.
    const ImportedConfig arr = import_text("torchrun --nproc_per_node 8 pretrain_gpt.py --micro-batch-size 1 \\\n"
                                           "  ${EXTRA_ARGS[@]} --bf16\n");
    EXPECT_TRUE(contains(arr.warnings, "bad.sh:2: ${EXTRA_ARGS[@]} is not defined"));
    // validate_args: --bf16 accumulates and all-reduces gradients in fp32 unless --grad-reduce-in-bf16.
    EXPECT_EQ(name(arr, "precision"), "bf16-mixed-fp32-grads");
    EXPECT_TRUE(contains(arr.warnings, "bad.sh:2: --bf16: Megatron-LM accumulates and all-reduces bf16 gradients in fp32"));
    EXPECT_EQ(name(import_text("--micro-batch-size 1 --bf16 --grad-reduce-in-bf16\n"), "precision"), "bf16-mixed");
    // --num-query-groups without --group-query-attention is multi-head attention.
    const ImportedConfig mha = import_text("--num-layers 2\n--hidden-size 256\n--num-attention-heads 4\n"
                                           "--num-query-groups 2\n--vocab-size 1000\n--max-position-embeddings 512\n");
    ASSERT_TRUE(mha.model_config);
    EXPECT_EQ((*mha.model_config)["model_type"], "gpt2");
    EXPECT_EQ((*mha.model_config)["vocab_size"], 1024);  // 1000 padded to a multiple of 128
    EXPECT_TRUE(contains(mha.warnings, "bad.sh:4: --num-query-groups"));
}

TEST(ImportMegatron, BadInputNamesFileFlagAndLine) {
    expect_input_error([] { import_text("#!/bin/bash\ntorchrun pretrain_gpt.py \\\n  --micro-batch-size x\n"); },
                       {"bad.sh:3", "--micro-batch-size", "'x'"});
    expect_input_error([] { import_text("ARGS=(\n  --num-layers 2\n  --tensor-model-parallel-size -2\n)\npython pretrain_gpt.py ${ARGS[@]}\n"); },
                       {"bad.sh:3", "--tensor-model-parallel-size", "-2"});
    expect_input_error([] { import_text("--micro-batch-size 3\n--global-batch-size 100\n", 8); },
                       {"bad.sh:2", "--global-batch-size", "not a multiple"});
    expect_input_error([] { import_text("#!/bin/bash\nARGS=(\n  --num-layers $LAYERS\n  --hidden-size 64\n)\n"
                                        "torchrun --nproc_per_node 8 pretrain_gpt.py ${ARGS[@]}\n"); },
                       {"bad.sh:3", "--num-layers", "LAYERS", "does not define"});
    expect_input_error([] { import_text("--seq-length 99999999999999999999\n"); }, {"bad.sh:1", "--seq-length", "64-bit"});
    expect_input_error([] { import_text("\n--seq-length 33554432\n"); }, {"bad.sh:2", "--seq-length", "kMaxSeq"});
    expect_input_error([] { import_text("--micro-batch-size 1\n--bf16\n--fp16\n"); }, {"bad.sh:3", "--fp16", "both"});
    expect_input_error([] { import_text("torchrun --nproc_per_node $GPUS pretrain_gpt.py --micro-batch-size 1\n"); },
                       {"bad.sh:1", "--nproc_per_node", "GPUS"});
    // A launch count that is not a number, without --gpus: refused (was a warning, then a plan on
    // the layout's own world size); with --gpus it is the count.
    expect_input_error([] { import_text("torchrun --nproc_per_node abc pretrain_gpt.py --micro-batch-size 1\n"); },
                       {"bad.sh:1", "--nproc_per_node", "'abc'", "give the GPU count with --gpus"});
    EXPECT_TRUE(contains(import_text("torchrun --nproc_per_node abc pretrain_gpt.py --micro-batch-size 1\n", 8).warnings,
                         "the GPU count comes from --gpus"));
    expect_input_error([] { import_text("--tensor-model-parallel-size 3\n--micro-batch-size 1\n", 8); },
                       {"bad.sh", "--gpus 8", "not a multiple"});
    expect_input_error([] { import_text("--num-layers 30\n--pipeline-model-parallel-size 4\n"
                                        "--num-layers-per-virtual-pipeline-stage 4\n"); },
                       {"bad.sh:3", "--num-layers-per-virtual-pipeline-stage", "not a multiple"});
    expect_input_error([] { import_text("# nothing here\necho hello\n"); }, {"bad.sh", "no Megatron arguments"});
}

namespace {
// megatron_arguments(model, plan) -> import: every plan field the arguments carry comes back,
// and the model's parameter count.
void round_trip(const std::string& model_name, const Plan& plan) {
    const ModelConfig m = load_model(model_name, kData);
    const std::string text = megatron_arguments(m, plan);
    // The launch line starts the plan's world size: read back with --gpus and without it.
    const ImportedConfig c = import_megatron(text, "emitted.args", ImportContext{plan.gpus()});
    const ImportedConfig alone = import_megatron(text, "emitted.args", ImportContext{});
    ASSERT_TRUE(alone.gpus) << text;
    EXPECT_EQ(*alone.gpus, plan.gpus()) << text;
    EXPECT_EQ(alone.fields.size(), c.fields.size()) << text;
    for (const char* key : {"seq", "mbs", "grad_acc", "dp", "tp", "pp", "sp", "zero", "recompute", "precision",
                            "optimizer", "dropout", "attention"})
        EXPECT_NE(c.field(key), nullptr) << key << " in\n" << text;
    for (const ImportedField& f : c.fields)
        EXPECT_EQ(f.value, plan_field(f.key)->get(plan)) << model_name << ": " << f.key << " in\n" << text;
    if (plan.pp_schedule == PpSchedule::interleaved) EXPECT_NE(c.field("vpp"), nullptr) << text;
    if (plan.cp > 1) EXPECT_NE(c.field("cp"), nullptr) << text;
    if (plan.offload != Offload::none) EXPECT_NE(c.field("offload"), nullptr) << text;
    EXPECT_EQ(c.global_batch_sequences, plan.mbs * plan.grad_acc * plan.dp);
    EXPECT_TRUE(c.warnings.empty()) << c.warnings.front() << " in\n" << text;
    ASSERT_TRUE(c.model_config) << text;
    const ModelConfig back = model_from_hf_config(*c.model_config, "imported");
    EXPECT_EQ(count_params(back).total, count_params(m).total) << model_name << "\n" << c.model_config->dump();
    EXPECT_EQ(back.family == ModelFamily::gpt2, m.family == ModelFamily::gpt2) << model_name;
    EXPECT_EQ(back.qk_norm, m.qk_norm) << model_name;  // --qk-layernorm
    EXPECT_EQ(back.norm_eps, m.norm_eps) << model_name;  // --norm-epsilon where it is not Megatron-LM's 1e-5
    EXPECT_EQ(back.experts, m.experts) << model_name;
    // --window-size / --window-attn-skip-freq, --softmax-type learnable, the clamped --quick-geglu
    EXPECT_EQ(back.sliding_window, m.sliding_window) << model_name;
    EXPECT_EQ(back.full_attention_layers, m.full_attention_layers) << model_name;
    EXPECT_EQ(back.attention_sinks, m.attention_sinks) << model_name;
    EXPECT_EQ(back.glu_clamp, m.glu_clamp) << model_name;
    EXPECT_EQ(back.family == ModelFamily::gpt_oss, m.family == ModelFamily::gpt_oss) << model_name;
    // RoPE scaling: llama3's factor, YaRN's whole (--position-embedding-type yarn and its flags)
    const RopeScaling &a = back.rope_scaling, &b = m.rope_scaling;
    EXPECT_EQ(a.type, b.type) << model_name;
    EXPECT_EQ(a.factor, b.factor) << model_name;
    EXPECT_EQ(a.original_max_positions, b.original_max_positions) << model_name;
    EXPECT_EQ(a.beta_fast, b.beta_fast) << model_name;
    EXPECT_EQ(a.beta_slow, b.beta_slow) << model_name;
    EXPECT_EQ(a.truncate, b.truncate) << model_name;
}
}  // namespace

// Fuzz finding: a line that starts with the script itself ("pretrain_gpt.py --flags", no
// launcher) built its launcher from a reversed range (std::length_error, an internal error).
TEST(ImportMegatron, ScriptAsTheFirstWordHasNoLauncher) {
    const ImportedConfig c = import_text("x=1\npretrain_gpt.py --micro-batch-size 2 --seq-length 1024\n", 8);
    EXPECT_EQ(integer(c, "mbs"), 2);
    EXPECT_EQ(integer(c, "seq"), 1024);
}

TEST(ImportMegatron, EmitImportRoundTrip) {
    Plan p;
    p.seq = 4096, p.mbs = 2, p.grad_acc = 16, p.dp = 4, p.tp = 2, p.sp = true, p.zero = ZeroStage{1};
    p.recompute = Recompute::full, p.precision = Precision::bf16_mixed;
    round_trip("llama-3-8b", p);
    Plan q = p;
    q.tp = 1, q.sp = false, q.dp = 8, q.zero = ZeroStage{0}, q.recompute = Recompute::none, q.precision = Precision::fp32;
    q.optimizer = Optimizer::sgd, q.dropout = 0.1, q.mbs = 1, q.grad_acc = 4;
    round_trip("llama-3-8b", q);
    round_trip("gpt2", q);
    Plan r = p;
    r.pp = 4, r.dp = 2, r.zero = ZeroStage{3}, r.recompute = Recompute::selective, r.precision = Precision::fp16_mixed;
    round_trip("llama-3-8b", r);
    Plan v = p;
    v.tp = 1, v.sp = false, v.pp = 4, v.pp_schedule = PpSchedule::interleaved, v.vpp = 2, v.dp = 2;
    v.precision = Precision::fp8_mixed, v.grad_acc = 8;
    round_trip("llama-3-8b", v);
    Plan o = p;
    o.offload = Offload::optimizer, o.precision = Precision::bf16_mixed_fp32_grads, o.cp = 2, o.dp = 2;
    round_trip("llama-3-8b", o);
    round_trip("qwen2.5-7b", o);
    round_trip("llama-3.2-1b", o);
    Plan e = p;
    e.ep = 2, e.moe_capacity_factor = 1.25;
    round_trip("mixtral-8x7b", e);
    round_trip("qwen3-8b", o);  // Qwen3's q/k norms: --qk-layernorm, read back as qwen3 / qwen3_moe
    round_trip("qwen3-30b-a3b", e);
    round_trip("mistral-7b", p);    // its 4,096-key window: --window-size 4095,0, read back as mistral
    round_trip("gpt-oss-20b", e);   // sinks, clamped quick_gelu gate, every 2nd layer full: read back as gpt_oss
    round_trip("gpt-oss-120b", o);
    Plan f = v;  // Transformer Engine fp8 parameters: --fp8-param-gather beside the distributed optimizer
    f.fp8_param_gather = true;
    round_trip("llama-3-8b", f);
    Plan u = p;  // Megatron-LM's uneven split: --decoder-first/last-pipeline-num-layers, 6 / 10 / 10 / 6
    u.pp = 4, u.dp = 2, u.pp_first_stage_layers = 6, u.pp_last_stage_layers = 6;
    round_trip("llama-3-8b", u);
    // Megatron-core's p2p overlap is on by default: a plan judged with it emits no flag and reads
    // it back on; one judged without it emits --no-overlap-p2p-communication and reads it back off.
    EmitOptions with;
    with.overlap_p2p_comm = true;
    const ModelConfig m8 = load_model("llama-3-8b", kData);
    EXPECT_TRUE(import_megatron(megatron_arguments(m8, v, nullptr, with), "a", ImportContext{v.gpus()}).overlap_p2p_comm);
    EXPECT_FALSE(import_megatron(megatron_arguments(m8, v), "b", ImportContext{v.gpus()}).overlap_p2p_comm);
    Plan z2 = q;  // ZeRO-2: Megatron-FSDP's optim_grads, read back as ZeRO-2 (not the distributed optimizer's 1)
    z2.zero = ZeroStage{2};
    round_trip("llama-3-8b", z2);
    for (const Precision recipe : {Precision::bf16_mixed, Precision::bf16_mixed_fp32_grads, Precision::bf16, Precision::fp32}) {
        Plan z3 = p;  // ZeRO-3: optim_grads_params, the main gradients' dtype spelled out where fp32
        z3.zero = ZeroStage{3}, z3.precision = recipe;
        round_trip("llama-3-8b", z3);
    }
}

// Megatron-FSDP keeps its main gradients in --megatron-fsdp-main-grads-dtype, default auto (the
// parameters' bf16), and reads neither --grad-reduce-in-bf16 nor
// --accumulate-allreduce-grads-in-fp32 (mcore_fsdp_adapter.py MixedPrecisionPolicy, d98e8a6).
TEST(ImportMegatron, MegatronFsdpGradientsTakeTheirOwnDtypeFlag) {
    const std::string fsdp = "--micro-batch-size 1 --bf16 --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params ";
    EXPECT_EQ(name(import_text(fsdp), "precision"), "bf16-mixed");
    EXPECT_EQ(name(import_text(fsdp + "--megatron-fsdp-main-grads-dtype fp32"), "precision"), "bf16-mixed-fp32-grads");
    const ImportedConfig ignored = import_text(fsdp + "--accumulate-allreduce-grads-in-fp32");
    EXPECT_EQ(name(ignored, "precision"), "bf16-mixed");
    EXPECT_TRUE(contains(ignored.warnings, "--accumulate-allreduce-grads-in-fp32: Megatron-FSDP keeps its main gradients in "
                                           "--megatron-fsdp-main-grads-dtype (auto: bf16)"));
    expect_input_error([&] { import_text(fsdp + "--megatron-fsdp-main-grads-dtype fp16"); },
                       {"--megatron-fsdp-main-grads-dtype", "'fp16'"});
    // Main weights: an fp32 copy by default, none with auto (the bf16 parameters are optimized
    // themselves: pure bf16), and beside fp32 parameters an fp32 copy the fp32 recipe does not hold.
    EXPECT_EQ(name(import_text(fsdp + "--megatron-fsdp-main-params-dtype auto"), "precision"), "bf16");
    const ImportedConfig fp32 = import_text("--micro-batch-size 1 --use-megatron-fsdp\n");
    EXPECT_EQ(name(fp32, "precision"), "fp32");
    EXPECT_TRUE(contains(fp32.warnings, "fp32 main-weight copy beside fp32 parameters"));
    EXPECT_FALSE(contains(import_text("--micro-batch-size 1 --use-megatron-fsdp --megatron-fsdp-main-params-dtype auto\n").warnings,
                          "main-weight copy"));
    // Without Megatron-FSDP, --bf16 alone keeps fp32 main gradients (validate_args).
    EXPECT_EQ(name(import_text("--micro-batch-size 1 --bf16 --use-distributed-optimizer"), "precision"), "bf16-mixed-fp32-grads");
}

// The launch line: torchrun starts the same count on every node, so 12 GPUs on 8-GPU nodes are
// 2 nodes of 6; tensor parallelism needs CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron-LM validate_args,
// before Blackwell) except under FSDP (ZeRO-2/3), which refuses 1.
TEST(ImportMegatron, EmittedLaunchLineStartsThePlansWorldSize) {
    const ModelConfig m = load_model("llama-3-8b", kData);
    EmitOptions eight;
    eight.gpus_per_node = 8;
    Plan p;
    p.dp = 8, p.tp = 2, p.zero = ZeroStage{1};
    const auto first_lines = [&](const Plan& plan, const EmitOptions& o) {
        const std::string t = megatron_arguments(m, plan, nullptr, o);
        return t.substr(0, t.find("--num-layers"));
    };
    std::string head = first_lines(p, eight);
    EXPECT_NE(head.find("\nCUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py \\\n"),
              std::string::npos) << head;
    EXPECT_NE(head.find("--node-rank"), std::string::npos) << head;
    p.dp = 6, p.tp = 2;
    head = first_lines(p, eight);
    EXPECT_NE(head.find("torchrun --nnodes 2 --nproc-per-node 6 pretrain_gpt.py"), std::string::npos) << head;
    p.zero = ZeroStage{2};
    EXPECT_EQ(first_lines(p, eight).find("CUDA_DEVICE_MAX_CONNECTIONS"), std::string::npos);
    p.dp = 4, p.tp = 1, p.zero = ZeroStage{1};
    head = first_lines(p, eight);
    EXPECT_NE(head.find("\ntorchrun --standalone --nproc-per-node 4 pretrain_gpt.py \\\n"), std::string::npos) << head;
    EXPECT_EQ(head.find("--node-rank"), std::string::npos) << head;
}

TEST(ImportMegatron, ConfigFileIsDetectedAsMegatron) {
    for (const char* f : {"llama3_8b_tp2_2nodes.sh", "gpt3_175b.sh", "mixtral_8x7b_args.txt"}) {
        const std::string path = (kConfigs / "megatron" / f).string();
        EXPECT_EQ(import_config_file(path, std::nullopt, ImportContext{}).format, ConfigFormat::megatron) << f;
    }
}

// Helper audit D1 (Megatron-DeepSpeed@4efb479 examples_deepspeed/pretrain_llama2_distributed.sh):
// activation_checkpoint="false", then an if adding the recompute flags, which bash does not run;
// every branch's assignments were applied, so the job was planned with full recompute, silently.
// A here-document (its JSON braces) sits between, as in that script.
TEST(ImportMegatron, AnIfWhoseTestFailsIsNotRead) {
    const std::string script =
        "activation_checkpoint=\"false\"\n"                                                   // 1
        "LOG_TO_WANDB=0\n"                                                                    // 2
        "WANDB_ARGS=\n"                                                                       // 3
        "if [ $LOG_TO_WANDB -eq 1 ]\n"                                                        // 4
        "then\n"                                                                              // 5
        "WANDB_ARGS=\"--wandb-project x\"\n"                                                  // 6
        "fi\n"                                                                                // 7
        "cat <<EOT > ds.json\n"                                                               // 8
        "{\n"                                                                                 // 9
        "  \"train_batch_size\" : 32\n"                                                       // 10
        "}\n"                                                                                 // 11
        "EOT\n"                                                                               // 12
        "ds_args=\" --deepspeed\"\n"                                                          // 13
        "if [ \"${activation_checkpoint}\" = \"true\" ]; then\n"                              // 14
        "  ds_args=\"--recompute-granularity full --recompute-method uniform ${ds_args}\"\n"  // 15
        "fi\n"                                                                                // 16
        "torchrun --nproc_per_node 8 pretrain_gpt.py --micro-batch-size 4 \\\n"               // 17
        "  $WANDB_ARGS $ds_args\n";                                                           // 18
    const ImportedConfig off = import_text(script);
    EXPECT_EQ(name(off, "recompute"), "none");
    EXPECT_EQ(off.field("mbs")->from.line, 17);  // the here-document's lines are counted, not read
    EXPECT_FALSE(contains(off.ignored, "--wandb-project"));  // LOG_TO_WANDB=0: not passed
    EXPECT_FALSE(contains(off.warnings, "not evaluated"));
    std::string on = script;
    on.replace(on.find("\"false\""), 7, "\"true\"");
    const ImportedConfig full = import_text(on);
    EXPECT_EQ(name(full, "recompute"), "full");
    EXPECT_EQ(full.field("recompute")->from.line, 15);  // where the string holding the flag is written
}

// Helper audit D1, derived from Megatron-LM@d98e8a6 examples/llama/train_llama3_8b_h100_fp8.sh with
// its documented knob DTYPE="bf16": the fp8 array extension must not apply.
TEST(ImportMegatron, DoubleBracketTestPicksTheDtypeBranch) {
    const auto script = [](const std::string& dtype) {
        return "DTYPE=\"" + dtype + "\"\n"
               "DTYPE_ARGS=()\n"
               "if [[ \"$DTYPE\" == \"fp8\" ]]; then\n"
               "    DTYPE_ARGS+=(\n"
               "        \"--fp8-format hybrid\"\n"
               "        \"--fp8-param-gather\"\n"
               "    )\n"
               "fi\n"
               "torchrun --nproc_per_node 8 pretrain_gpt.py --micro-batch-size 1 --bf16 --grad-reduce-in-bf16 ${DTYPE_ARGS[@]}\n";
    };
    const ImportedConfig bf16 = import_text(script("bf16"));
    EXPECT_EQ(name(bf16, "precision"), "bf16-mixed");
    EXPECT_TRUE(bf16.warnings.empty()) << bf16.warnings.front();  // DTYPE_ARGS=() is an empty array, defined
    EXPECT_EQ(name(import_text(script("fp8")), "precision"), "fp8-mixed");
}

// --decoder-first/last-pipeline-num-layers are the plan's uneven split (pipeline_uneven.cpp), read
// from their lines; what Megatron-LM refuses beside them (validate_args, TransformerConfig) and the
// interleaved schedule (not modelled) are exit 2 naming the script's flag.
TEST(ImportMegatron, UnevenPipelineSplitFlags) {
    const std::string launch = "torchrun --nproc_per_node 8 pretrain_gpt.py \\\n"                // 1
                               "  --pipeline-model-parallel-size 4 \\\n"                            // 2
                               "  --decoder-first-pipeline-num-layers 6 \\\n"                       // 3
                               "  --decoder-last-pipeline-num-layers 6";                                // 4
    const ImportedConfig c = import_text(launch + "\n");
    EXPECT_EQ(integer(c, "pp_first_stage_layers"), 6);
    EXPECT_EQ(integer(c, "pp_last_stage_layers"), 6);
    EXPECT_EQ(c.field("pp_first_stage_layers")->from.line, 3);
    EXPECT_EQ(c.field("pp_last_stage_layers")->from.line, 4);
    EXPECT_FALSE(contains(c.warnings, "pipeline-num-layers")) << c.warnings.front();
    const ImportedConfig last = import_text("torchrun pretrain_gpt.py --decoder-last-pipeline-num-layers 5\n");
    EXPECT_EQ(last.field("pp_first_stage_layers"), nullptr);
    EXPECT_EQ(integer(last, "pp_last_stage_layers"), 5);
    expect_input_error([&] { import_text(launch + " --num-layers-per-virtual-pipeline-stage 2\n"); },
                       {"bad.sh:3", "--decoder-first-pipeline-num-layers", "--num-virtual-stages-per-pipeline-rank"});
    expect_input_error([&] { import_text(launch + " --account-for-embedding-in-pipeline-split\n"); },
                       {"bad.sh:3", "--account-for-embedding-in-pipeline-split"});
    // With --num-virtual-stages-per-pipeline-rank Megatron-LM runs it interleaved.
    const ImportedConfig v = import_text(launch + " --num-virtual-stages-per-pipeline-rank 2\n");
    EXPECT_EQ(integer(v, "vpp"), 2);
    EXPECT_EQ(name(v, "pp_schedule"), "interleaved");
    EXPECT_EQ(integer(v, "pp_first_stage_layers"), 6);
    expect_input_error([] { import_text("torchrun pretrain_gpt.py --decoder-first-pipeline-num-layers 0\n"); },
                       {"bad.sh:1", "--decoder-first-pipeline-num-layers", "0"});
}

// Megatron-LM d98e8a6 examples/llama/train_llama3_8b_h100_fp8.sh passes --fp8-param-gather with
// --fp8-format hybrid and the distributed optimizer: the plan flag of that name, read from its line.
// Megatron-LM refuses it without fp8 or without a sharded optimizer, and FSDP's fp8 parameters are
// not modelled: warned, planned without it.
TEST(ImportMegatron, Fp8ParamGatherBesideFp8AndTheDistributedOptimizer) {
    const auto script = [](const std::string& extra) {
        return "DTYPE_ARGS=(\n"                              // 1
               "    \"--fp8-format hybrid\"\n"                // 2
               "    \"--fp8-param-gather\"\n"                 // 3
               ")\n"                                         // 4
               "torchrun --nproc_per_node 8 pretrain_gpt.py --micro-batch-size 1 --global-batch-size 128 --bf16 "
               "--grad-reduce-in-bf16 ${DTYPE_ARGS[@]} " + extra + "\n";
    };
    const ImportedConfig c = import_text(script("--use-distributed-optimizer"));
    EXPECT_EQ(name(c, "precision"), "fp8-mixed");
    EXPECT_EQ(integer(c, "zero"), 1);
    ASSERT_NE(c.field("fp8_param_gather"), nullptr);
    EXPECT_TRUE(toggle(c, "fp8_param_gather"));
    EXPECT_EQ(c.field("fp8_param_gather")->from.line, 3);
    EXPECT_FALSE(contains(c.warnings, "fp8-param-gather")) << c.warnings.front();
    const ImportedConfig z0 = import_text(script(""));
    EXPECT_EQ(z0.field("fp8_param_gather"), nullptr);
    EXPECT_TRUE(contains(z0.warnings, "without --use-distributed-optimizer"));
    const ImportedConfig fsdp = import_text(script("--use-distributed-optimizer --use-megatron-fsdp"));
    EXPECT_EQ(fsdp.field("fp8_param_gather"), nullptr);
    EXPECT_TRUE(contains(fsdp.warnings, "under FSDP are not modelled"));
    const ImportedConfig bf16 = import_text(
        "torchrun --nproc_per_node 8 pretrain_gpt.py --bf16 --use-distributed-optimizer --fp8-param-gather\n");
    EXPECT_EQ(bf16.field("fp8_param_gather"), nullptr);
    EXPECT_TRUE(contains(bf16.warnings, "without --fp8-format"));
}

// The tests a launch script decides: [ ] with = == != -n -z -eq -gt, [[ ]] with && and !=, test,
// !, elif / else, nested ifs, && / || lists, case with a|b) and *).
TEST(ImportMegatron, DecidedTestsAndCaseArmsRunTheirBranchOnly) {
    const auto script = [](const std::string& size, const std::string& a) {
        return "SIZE=" + size + "\nA=" + a + "\n"
               "case $SIZE in\n"
               "  1B) TP=1 ;;\n"
               "  7B|8B) TP=4 ;;\n"
               "  *) TP=8 ;;\n"
               "esac\n"
               "if [ -z \"$A\" ]; then MBS=8\n"
               "elif [ \"$A\" == \"y\" ]; then MBS=4\n"
               "elif [ -n \"$A\" ]; then\n"
               "  if [[ $A != x ]]; then MBS=3; else MBS=2; fi\n"
               "else MBS=1\n"
               "fi\n"
               "ZERO=1\n"
               "[ \"$A\" = x ] && SEQ=1024 || SEQ=2048\n"
               "if ! test \"$A\" = x; then SEQ=$((SEQ * 2)); fi\n"
               "OPT=\n"
               "if [[ $ZERO -gt 0 && -n $A ]]; then OPT=--use-distributed-optimizer; fi\n"
               "cd /workspace && torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size $TP \\\n"
               "  --micro-batch-size $MBS --seq-length $SEQ $OPT\n";  // cd is taken to succeed
    };
    const ImportedConfig x = import_text(script("8B", "x"));
    EXPECT_EQ(integer(x, "tp"), 4);      // 7B|8B)
    EXPECT_EQ(integer(x, "mbs"), 2);     // -n "x", then [[ x != x ]] false: else
    EXPECT_EQ(integer(x, "seq"), 1024);  // [ x = x ] && SEQ=1024; ! test x = x fails
    EXPECT_EQ(integer(x, "zero"), 1);    // 1 -gt 0 && -n x
    EXPECT_FALSE(contains(x.warnings, "not evaluated"));
    const ImportedConfig y = import_text(script("1B", "y"));
    EXPECT_EQ(integer(y, "tp"), 1);
    EXPECT_EQ(integer(y, "mbs"), 4);     // "y" == "y"
    EXPECT_EQ(integer(y, "seq"), 4096);  // [ y = x ] fails: || SEQ=2048; ! test y = x: 2048 x 2
    EXPECT_EQ(integer(y, "zero"), 1);
    const ImportedConfig empty = import_text(script("70B", ""));
    EXPECT_EQ(integer(empty, "tp"), 8);  // *)
    EXPECT_EQ(integer(empty, "mbs"), 8);  // -z ""
    EXPECT_EQ(integer(empty, "zero"), 0);  // -n "" fails: no distributed optimizer
    EXPECT_FALSE(contains(empty.warnings, "not evaluated"));
}

// A test the reader cannot decide ($1, a file test, a case on a variable the script leaves open,
// a loop over a command's output): every branch is read in order, as before, and said where it reaches a value read.
TEST(ImportMegatron, UndecidedTestsReadEveryBranchAndSayWhere) {
    const ImportedConfig c = import_text(
        "if [ \"$1\" = \"big\" ]; then\n"                   // 1
        "  MBS=4\n"                                          // 2
        "else\n"                                             // 3
        "  MBS=2\n"                                          // 4
        "fi\n"                                               // 5
        "if [ ! -f \"$CKPT\" ]; then\n"                     // 6
        "  echo \"no checkpoint\"\n"                         // 7
        "fi\n"                                               // 8
        "case $RUN in\n"                                     // 9
        "  a) EXTRA=\"--wandb-project a\" ;;\n"              // 10
        "  *) EXTRA=\"--wandb-project b\" ;;\n"              // 11
        "esac\n"                                             // 12
        "case \"$MODEL\" in\n"                               // 13
        "  small) TP=1 ;;\n"                                 // 14
        "  *) TP=2 ;;\n"                                     // 15
        "esac\n"                                             // 16
        "ARGS=; for i in $(seq 1 2); do ARGS=\"$ARGS --sequence-parallel\"; done\n"  // 17: a command's output
        "if nvidia-smi -L > /dev/null; then PP=2; else PP=1; fi\n"  // 18: a command's status
        "torchrun --nproc_per_node 8 pretrain_gpt.py --micro-batch-size $MBS $EXTRA \\\n"
        "  --tensor-model-parallel-size $TP $ARGS --pipeline-model-parallel-size $PP\n");
    EXPECT_EQ(integer(c, "mbs"), 2);  // both branches read, in order: the last assignment stands
    EXPECT_EQ(integer(c, "tp"), 2);
    EXPECT_TRUE(toggle(c, "sp"));
    EXPECT_TRUE(contains(c.warnings, "bad.sh:1: if-condition not evaluated: both branches are read (--micro-batch-size)"));
    EXPECT_TRUE(contains(c.warnings, "bad.sh:13: case not evaluated: every branch is read (--tensor-model-parallel-size)"));
    EXPECT_TRUE(contains(c.warnings, "bad.sh:17: loop not evaluated: its body is read once (--sequence-parallel)"));
    EXPECT_EQ(integer(c, "pp"), 1);
    EXPECT_TRUE(contains(c.warnings, "bad.sh:18: if-condition not evaluated: both branches are read (--pipeline-model-parallel-size)"));
    EXPECT_FALSE(contains(c.warnings, "bad.sh:6:"));  // nothing read passes through the file test
    EXPECT_FALSE(contains(c.warnings, "bad.sh:9:"));  // only a flag left out on purpose (--wandb-project)
}

// Helper audit D5 (configs/derived/min_bleed.sh; the options="..." style of Megatron-DeepSpeed's
// and older Megatron-LM's scripts): one unresolved reference in a string made each of its words
// unresolved. Only the word holding it is now; each flag keeps the line it is written on.
TEST(ImportMegatron, AnUnresolvedReferenceMarksOnlyItsOwnWord) {
    const ImportedConfig c = import_text(
        "DATA=$1\n"
        "ARGS=\"--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 --micro-batch-size 2 --data-path $DATA\"\n"
        "torchrun --nproc_per_node 1 pretrain_gpt.py $ARGS\n");
    EXPECT_EQ(integer(c, "seq"), 128);
    EXPECT_EQ(integer(c, "mbs"), 2);
    EXPECT_EQ(c.field("seq")->from.line, 2);
    ASSERT_TRUE(c.model_config);
    EXPECT_EQ((*c.model_config)["n_embd"], 256);
    EXPECT_EQ((*c.model_config)["n_layer"], 2);
    EXPECT_TRUE(contains(c.ignored, "--data-path"));
    // A string over several lines (backslash-newlines inside the quotes, which bash removes): each
    // flag on its own line, the $(...) only in --tensorboard-dir's value.
    const ImportedConfig m = import_text(
        "HOST=$(hostname)\n"                   // 1
        "OPTS=\" \\\n"                         // 2
        "  --micro-batch-size 2 \\\n"          // 3
        "  --tensorboard-dir ${HOST} \\\n"     // 4
        "  --seq-length 256\"\n"               // 5
        "torchrun --nproc_per_node 1 pretrain_gpt.py ${OPTS}\n");
    EXPECT_EQ(integer(m, "mbs"), 2);
    EXPECT_EQ(m.field("mbs")->from.line, 3);
    EXPECT_EQ(integer(m, "seq"), 256);
    EXPECT_EQ(m.field("seq")->from.line, 5);
    EXPECT_FALSE(contains(m.warnings, "is not a --flag"));  // the backslashes are gone
    // The word that holds the reference is still refused where it is read.
    expect_input_error([] { import_text("ARGS=\"--micro-batch-size $1 --seq-length 128\"\ntorchrun pretrain_gpt.py $ARGS\n"); },
                       {"bad.sh:1", "--micro-batch-size", "'$1'", "uses $1,"});
}

// Helper audit D6: a launcher count the script leaves open is the count --gpus gives, as the
// message asked; without --gpus it is refused, the reference written once ($NAME, not $$NAME).
TEST(ImportMegatron, AnOpenLauncherCountTakesGpusFromTheFlag) {
    const std::string slurm = "torchrun --nproc_per_node $SLURM_GPUS_ON_NODE --nnodes $SLURM_NNODES pretrain_gpt.py "
                              "--micro-batch-size 2 --global-batch-size 64\n";
    const ImportedConfig c = import_text(slurm, 16);
    EXPECT_FALSE(c.gpus);
    EXPECT_EQ(integer(c, "dp"), 16);
    EXPECT_EQ(integer(c, "grad_acc"), 2);  // 64 / (2 x 16)
    EXPECT_TRUE(contains(c.warnings, "bad.sh:1: torchrun --nproc_per_node: '$SLURM_GPUS_ON_NODE' uses "
                                     "$SLURM_GPUS_ON_NODE, which the script does not define: the GPU count comes from --gpus"));
    expect_input_error([&] { import_text(slurm); },
                       {"bad.sh:1", "--nproc_per_node", "uses $SLURM_GPUS_ON_NODE,", "give the GPU count with --gpus"});
    // Megatron-LM's detxoify_lm script: $RANDOM in the same string as the count (D5 then D6).
    const ImportedConfig d = import_text(
        "GPUS_PER_NODE=16\nMASTER_PORT=$(($RANDOM + 1024))\n"
        "DISTRIBUTED_ARGS=\"--nproc_per_node $GPUS_PER_NODE --nnodes 1 --master_port $MASTER_PORT\"\n"
        "python -m torch.distributed.run $DISTRIBUTED_ARGS finetune_gpt.py --micro-batch-size 4 --global-batch-size 64\n");
    EXPECT_EQ(d.gpus, 16);
    EXPECT_EQ(integer(d, "dp"), 16);
    EXPECT_EQ(integer(d, "grad_acc"), 1);  // 64 / (4 x 16)
}

// Helper audit D7 (Megatron-LM's detxoify_lm script: bs=$4 ... --global-batch-size $bs): with the
// batch given beside --from (--grad-acc, plan's --gbs-tokens) the open global batch is not read.
TEST(ImportMegatron, AnOpenGlobalBatchIsNotNeededWhenTheBatchIsGiven) {
    const std::string script = "bs=$4\ntorchrun --nproc_per_node 16 pretrain_gpt.py --micro-batch-size 4 --global-batch-size $bs\n";
    const ImportedConfig c = import_megatron(script, "bad.sh", ImportContext{std::nullopt, false, true});
    EXPECT_EQ(integer(c, "dp"), 16);
    EXPECT_EQ(integer(c, "mbs"), 4);
    EXPECT_EQ(c.field("grad_acc"), nullptr);  // the flag gives it
    EXPECT_FALSE(c.global_batch_sequences);
    EXPECT_TRUE(contains(c.warnings, "bad.sh:2: --global-batch-size: its value '$4' (line 1) uses $4, a command-line "
                                     "word the reader is not given (a script's own: --from-arg): not read"));
    expect_input_error([&] { import_text(script); }, {"bad.sh:2", "--global-batch-size", "$4", "give --grad-acc"});
}

// Helper audit D11: Megatron-DeepSpeed's spellings of what Megatron-LM models
// (Megatron-DeepSpeed@4efb479 megatron/arguments.py): --checkpoint-activations (full recompute),
// --normalization rmsnorm / layernorm, --num-key-value-heads (GQA without --group-query-attention).
TEST(ImportMegatron, MegatronDeepSpeedFlagsMeanWhatMegatronLmsDo) {
    const ImportedConfig ckpt = import_text("--micro-batch-size 1\n--checkpoint-activations\n");
    EXPECT_EQ(name(ckpt, "recompute"), "full");
    EXPECT_EQ(ckpt.field("recompute")->from.line, 2);
    EXPECT_FALSE(contains(ckpt.warnings, "--checkpoint-activations"));
    EXPECT_TRUE(contains(import_text("--micro-batch-size 1 --checkpoint-activations --checkpoint-num-layers 2\n").warnings,
                         "--checkpoint-num-layers 2: grouped recompute is not modelled"));
    const std::string shape = "--num-layers 2\n--hidden-size 256\n--num-attention-heads 16\n--vocab-size 1000\n"
                              "--max-position-embeddings 512\n";
    const ImportedConfig llama = import_text(shape + "--num-key-value-heads 4\n--swiglu\n--normalization rmsnorm\n"
                                                     "--use-rotary-position-embeddings\n");
    ASSERT_TRUE(llama.model_config);
    const nlohmann::json& j = *llama.model_config;
    EXPECT_EQ(j["model_type"], "llama");
    EXPECT_EQ(j["num_attention_heads"], 16);
    EXPECT_EQ(j["num_key_value_heads"], 4);
    EXPECT_EQ(j["head_dim"], 16);             // 256 / 16
    EXPECT_EQ(j["intermediate_size"], 640);   // 8 x 256 / 3 rounded down to a multiple of 64
    EXPECT_TRUE(llama.warnings.empty()) << llama.warnings.front();
    const ImportedConfig ln = import_text(shape + "--normalization layernorm\n");
    EXPECT_EQ((*ln.model_config)["model_type"], "gpt2");
    EXPECT_FALSE(contains(ln.warnings, "modelled as LayerNorm"));
    // Megatron-LM's --num-query-groups (with --group-query-attention) stands beside it.
    const ImportedConfig both = import_text(shape + "--swiglu\n--group-query-attention\n--num-query-groups 2\n"
                                                    "--num-key-value-heads 4\n");
    EXPECT_EQ((*both.model_config)["num_key_value_heads"], 2);
    EXPECT_TRUE(contains(both.warnings, "bad.sh:9: --num-key-value-heads: differs from --num-query-groups 2"));
    expect_input_error([&] { import_text(shape + "--num-key-value-heads 3\n"); },
                       {"bad.sh:6", "--num-key-value-heads", "3 does not divide --num-attention-heads 16"});
}

// Review of 2026-11-30 (helper-40): what a value depends on carries its undecided branch through
// ${NAME:+word}, ${NAME:-word} and $(( )) (was: the warning lost, the branch's value planned
// silently); (( ... )) is one arithmetic word, its << no here-document (was: the rest of the
// script swallowed); a value built line by line stays cheap to extend, and one that doubles
// itself is refused at kMaxValueChars naming its line (was: minutes, or gigabytes).
TEST(ImportMegatron, BranchesReachThroughExpansionsAndValuesStayBounded) {
    const ImportedConfig c = import_text(
        "if [ \"$1\" = sp ]; then SP=1; TPV=2; fi\n"                                    // 1
        "N=${TPV:-1}\nTP=$((N))\n(( x = 1 << 3 ))\n"                                     // 2-4
        "torchrun --nproc_per_node 4 pretrain_gpt.py --micro-batch-size 1 --global-batch-size 4 "
        "--tensor-model-parallel-size $TP ${SP:+--sequence-parallel}\n");                // 5
    EXPECT_EQ(integer(c, "tp"), 2);
    EXPECT_TRUE(toggle(c, "sp"));
    EXPECT_TRUE(contains(c.warnings, "bad.sh:1: if-condition not evaluated: both branches are read "
                                     "(--tensor-model-parallel-size, --sequence-parallel)"));
    std::string grown = "A=\"--micro-batch-size 2 --global-batch-size 8\"\n";
    for (int i = 0; i < 10000; ++i) grown += "A+=\" --seq-length 128\"\n";  // 170,042 characters
    const ImportedConfig g = import_text(grown + "torchrun --nproc_per_node 4 pretrain_gpt.py $A\n");
    EXPECT_EQ(integer(g, "mbs"), 2);
    EXPECT_EQ(integer(g, "seq"), 128);
    std::string doubled = "A=x\n";
    for (int i = 0; i < 40; ++i) doubled += "A=\"$A$A\"\n";
    // 2^24 characters (kMaxValueChars) are passed on the 25th doubling: line 26.
    expect_input_error([&] { import_text(doubled + "torchrun pretrain_gpt.py $A\n"); }, {"bad.sh:26", "kMaxValueChars"});
    // Past kMaxPieces, pieces merge only with pieces of the same marks: an unresolved reference
    // among 70 extensions (review 2026-11-30: it spread over the later flags, tp 4 and pp 2 lost).
    std::string many = "ARGS=\"--micro-batch-size 1 --global-batch-size 8\"\n";
    for (int i = 0; i < 70; ++i) many += "ARGS+=\" --log-interval 1\"\n";
    many += "ARGS+=\" --load $CHECKPOINT_PATH\"\nARGS+=\" --tensor-model-parallel-size 4\"\n"
            "ARGS+=\" --pipeline-model-parallel-size 2\"\ntorchrun --nproc_per_node 8 pretrain_gpt.py $ARGS\n";
    const ImportedConfig m = import_text(many);
    EXPECT_EQ(integer(m, "tp"), 4);
    EXPECT_EQ(integer(m, "pp"), 2);
    // A="$A rest" extends A in place (bash's result, read linearly): 5,000 extensions of a data blend.
    std::string blend = "B=\"\"\n";
    for (int i = 0; i < 5000; ++i) blend += "B=\"$B 0.0002 /data/shard_" + std::to_string(i) + "\"\n";
    const ImportedConfig b = import_text(blend + "torchrun --nproc_per_node 8 pretrain_gpt.py --data-path $B "
                                                 "--micro-batch-size 2 --global-batch-size 16\n");
    EXPECT_EQ(integer(b, "mbs"), 2);
    // An array that doubles: 2^12 = 4,096 elements after line 13 (kMaxArrayElements), refused on line 14.
    std::string array = "A=(x)\n";
    for (int i = 0; i < 40; ++i) array += "A=(\"${A[@]}\" \"${A[@]}\")\n";
    expect_input_error([&] { import_text(array + "torchrun pretrain_gpt.py ${A[@]}\n"); }, {"bad.sh:14", "kMaxArrayElements"});
}

// A shape whose tokenizer's size the script leaves open (Megatron-LM's own Mixtral example takes
// --tokenizer-model from $2) takes the vocabulary of the catalog model with the same layers, padded
// as Megatron pads it; where layers match models of different vocabularies, the RoPE base decides
// or the import asks.
TEST(ImportMegatron, AShapeWithoutAVocabularyTakesTheCatalogModelsWithItsLayers) {
    const auto model = [](const std::string& name, std::int64_t ffn, std::int64_t vocab, double theta) {
        return model_from_hf_config({{"model_type", "llama"}, {"hidden_size", 256}, {"num_hidden_layers", 2},
                                     {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"intermediate_size", ffn},
                                     {"vocab_size", vocab}, {"max_position_embeddings", 512}, {"rope_theta", theta},
                                     {"tie_word_embeddings", false}},
                                    name);
    };
    const std::string shape =
        "--num-layers 2 --hidden-size 256 --num-attention-heads 4 --group-query-attention --num-query-groups 2 "
        "--ffn-hidden-size 512 --swiglu --normalization RMSNorm --position-embedding-type rope "
        "--untie-embeddings-and-output-weights --disable-bias-linear --max-position-embeddings 512 "
        "--tokenizer-type HuggingFaceTokenizer --tokenizer-model $TOKENIZER --micro-batch-size 1 ";
    const auto import_with = [&](const std::vector<ModelConfig>& catalog, const std::string& more) {
        ImportContext context;
        context.catalog = [catalog] { return catalog; };
        return import_megatron(shape + more + "\n", "shape.sh", context);
    };
    const ModelConfig a = model("model-a", 512, 1100, 10000), b = model("model-b", 512, 3000, 500000);
    const ModelConfig wider = model("wider", 1024, 5000, 10000);
    // One model with these layers: its 1,100 tokens padded to a multiple of 128 (1,152), of
    // 128 x tp 4 = 512 (1,536) at tensor parallel 4.
    const ImportedConfig one = import_with({a, wider}, "");
    ASSERT_TRUE(one.model_config);
    EXPECT_EQ((*one.model_config)["vocab_size"], 1152);
    EXPECT_EQ((*one.model_config)["intermediate_size"], 512);
    EXPECT_TRUE(contains(one.warnings, "the layers are those of catalog model model-a (vocabulary 1100): planned with "
                                       "that vocabulary, padded to 1152"));
    const ImportedConfig tp4 = import_with({a, wider}, "--tensor-model-parallel-size 4");
    ASSERT_TRUE(tp4.model_config);
    EXPECT_EQ((*tp4.model_config)["vocab_size"], 1536);
    // Two with these layers and different vocabularies: the script's RoPE base (Megatron's default
    // 10,000 here) picks model-a, --rotary-base 500000 model-b, another base neither.
    const ImportedConfig by_base = import_with({b, a}, "");
    ASSERT_TRUE(by_base.model_config);
    EXPECT_EQ((*by_base.model_config)["vocab_size"], 1152);
    const ImportedConfig other_base = import_with({b, a}, "--rotary-base 500000");
    ASSERT_TRUE(other_base.model_config);
    EXPECT_EQ((*other_base.model_config)["vocab_size"], 3072);  // 3,000 padded to a multiple of 128
    const ImportedConfig neither = import_with({a, b}, "--rotary-base 1000000");
    EXPECT_FALSE(neither.model_config);
    EXPECT_TRUE(contains(neither.warnings, "catalog models model-a (vocabulary 1100), model-b (vocabulary 3000), which "
                                           "differ in vocabulary: give --vocab-size, or --model"));
    // No model with these layers, or no catalog (--model given beside the script): --model decides.
    const ImportedConfig none = import_with({wider}, "");
    EXPECT_FALSE(none.model_config);
    EXPECT_TRUE(contains(none.warnings, "no catalog model has these layers: the model comes from --model"));
    const ImportedConfig empty = import_with({}, "");
    EXPECT_FALSE(empty.model_config);
    EXPECT_TRUE(contains(empty.warnings, "neither --vocab-size nor a tokenizer of known size: the model comes from --model"));
    ImportContext given;
    given.catalog = [a] { return std::vector<ModelConfig>{a}; };
    given.model_layers = 2;
    EXPECT_FALSE(import_megatron(shape + "\n", "shape.sh", given).model_config);
    // A vocabulary the script names is its own, whatever the catalog holds.
    const ImportedConfig named = import_with({a}, "--vocab-size 2000");
    ASSERT_TRUE(named.model_config);
    EXPECT_EQ((*named.model_config)["vocab_size"], 2048);
    // The catalog is read only for a shape whose vocabulary is open, once.
    int reads = 0;
    ImportContext counted;
    counted.catalog = [&] {
        ++reads;
        return std::vector<ModelConfig>{a};
    };
    import_megatron(shape + "--vocab-size 2000\n", "shape.sh", counted);
    EXPECT_EQ(reads, 0);
    import_megatron(shape + "\n", "shape.sh", counted);
    EXPECT_EQ(reads, 1);
}

// Megatron-LM's own Qwen3-30B-A3B shape (examples/post_training/modelopt/conf/qwen/Qwen3-30B-A3B.sh:
// --qk-layernorm, 128 experts of --moe-ffn-hidden-size 768, top 8, a HuggingFaceTokenizer whose
// size the script leaves open, --make-vocab-size-divisible-by 1187) is Qwen3-MoE: the catalog's
// qwen3-30b-a3b, its 151,936 tokens (1187 x 128) and its parameters; the q/k norms are counted,
// not warned about.
TEST(ImportMegatron, QkLayernormWithExpertsIsQwen3Moe) {
    ImportContext context;
    context.catalog = [] { return load_catalog_models(kData); };
    const ImportedConfig c = import_megatron(
        "--micro-batch-size 1 --bf16 --disable-bias-linear --untie-embeddings-and-output-weights "
        "--position-embedding-type rope --normalization RMSNorm --swiglu --num-layers 48 --hidden-size 2048 "
        "--ffn-hidden-size 6144 --num-attention-heads 32 --group-query-attention --num-query-groups 4 "
        "--kv-channels 128 --qk-layernorm --num-experts 128 --moe-ffn-hidden-size 768 --moe-router-topk 8 "
        "--seq-length 4096 --max-position-embeddings 40960 --tokenizer-type HuggingFaceTokenizer "
        "--tokenizer-model Qwen/Qwen3-30B-A3B --make-vocab-size-divisible-by 1187 --rotary-base 1000000\n",
        "qwen3.sh", context);
    ASSERT_TRUE(c.model_config);
    EXPECT_EQ((*c.model_config)["model_type"], "qwen3_moe");
    EXPECT_EQ((*c.model_config)["vocab_size"], 151936);
    const ModelConfig m = model_from_hf_config(*c.model_config, "imported");
    EXPECT_TRUE(m.qk_norm);
    EXPECT_TRUE(m.moe_renormalize);  // Megatron-LM's softmax after the top k: norm_topk_prob true, as the catalog's
    EXPECT_EQ(count_params(m).total, count_params(load_model("qwen3-30b-a3b", kData)).total);
    EXPECT_FALSE(contains(c.warnings, "--qk-layernorm"));
}

// --moe-router-pre-softmax (Megatron-LM's softmax over all experts before the top k, the gate weights not
// renormalised): Qwen3-MoE's norm_topk_prob false; Mixtral's router has no such switch, so it is said.
TEST(ImportMegatron, PreSoftmaxRoutingIsNormTopkProbFalse) {
    const std::string moe =
        "--micro-batch-size 1 --bf16 --disable-bias-linear --position-embedding-type rope --normalization RMSNorm "
        "--swiglu --num-layers 4 --hidden-size 256 --ffn-hidden-size 512 --num-attention-heads 8 --seq-length 1024 "
        "--max-position-embeddings 1024 --vocab-size 1024 --num-experts 8 --moe-router-topk 2 --moe-router-pre-softmax ";
    const ImportedConfig q = import_text(moe + "--qk-layernorm\n", 8);
    ASSERT_TRUE(q.model_config);
    EXPECT_EQ((*q.model_config)["model_type"], "qwen3_moe");
    EXPECT_EQ((*q.model_config)["norm_topk_prob"], false);
    EXPECT_FALSE(model_from_hf_config(*q.model_config, "q").moe_renormalize);
    const ImportedConfig x = import_text(moe + "\n", 8);
    ASSERT_TRUE(x.model_config);
    EXPECT_EQ((*x.model_config)["model_type"], "mixtral");
    EXPECT_TRUE(contains(x.warnings, "--moe-router-pre-softmax: the gate weights are not renormalised"));
}

// The norms' epsilon: Megatron-LM's --norm-epsilon (TransformerConfig.layernorm_epsilon, default 1e-5,
// read at d98e8a6), Megatron-DeepSpeed's --layernorm-epsilon. Absent, the model trains with 1e-5, not
// with the 1e-6 LlamaConfig defaults to, so the config records it; --emit megatron writes Qwen's 1e-6.
TEST(ImportMegatron, NormEpsilonIsMegatronsDefaultUnlessGiven) {
    const std::string llama =
        "--micro-batch-size 1 --bf16 --disable-bias-linear --position-embedding-type rope --normalization RMSNorm "
        "--swiglu --num-layers 4 --hidden-size 256 --ffn-hidden-size 512 --num-attention-heads 8 --seq-length 1024 "
        "--max-position-embeddings 1024 --vocab-size 1024 ";
    const auto eps_of = [](const ImportedConfig& c) { return model_from_hf_config(*c.model_config, "x").norm_eps; };
    EXPECT_EQ(eps_of(import_text(llama + "\n", 8)), 1e-5);
    EXPECT_EQ(eps_of(import_text(llama + "--norm-epsilon 1e-6\n", 8)), 1e-6);
    EXPECT_EQ(eps_of(import_text(llama + "--layernorm-epsilon 1e-6\n", 8)), 1e-6);
    EXPECT_EQ(eps_of(import_text(llama + "--layernorm-epsilon 1e-6 --norm-epsilon 2e-6\n", 8)), 2e-6);
    const ImportedConfig gpt2 = import_text(
        "--micro-batch-size 1 --num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 1024 "
        "--max-position-embeddings 1024 --vocab-size 1024 --norm-epsilon 1e-6\n", 8);
    EXPECT_EQ((*gpt2.model_config)["model_type"], "gpt2");
    EXPECT_EQ(eps_of(gpt2), 1e-6);
    expect_input_error([&] { import_text(llama + "--norm-epsilon 0\n", 8); }, {"--norm-epsilon"});
    expect_input_error([&] { import_text(llama + "--norm-epsilon x\n", 8); }, {"--norm-epsilon"});
    Plan p;
    p.seq = 4096, p.mbs = 1, p.dp = 8;
    EXPECT_NE(megatron_arguments(load_model("qwen2.5-7b", kData), p).find("--norm-epsilon 1e-06"), std::string::npos);
    EXPECT_EQ(megatron_arguments(load_model("llama-3-8b", kData), p).find("--norm-epsilon"), std::string::npos);
}
