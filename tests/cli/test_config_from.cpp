// --from FILE (issue 36): a torchtitan TOML, a Megatron-LM launch script, a DeepSpeed JSON and a
// nanotron YAML read into memory, plan and run. The fixtures under tests/configs/ are written in
// the shape of each framework's own examples; the expected plans are read off them by hand.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "user_files.hpp"

namespace preflight {
namespace {

using nlohmann::json;
using test::expect_refused;
using test::run_preflight;
using test::Scratch;

std::string config(const std::string& name) { return std::string(PREFLIGHT_TEST_CONFIG_DIR) + "/" + name; }

json memory_json(const std::string& args) {
    const auto r = run_preflight("memory --format json " + args);
    EXPECT_LE(r.exit_code, 1) << args << "\n" << r.err;
    EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
    return json::parse(r.out, nullptr, false);
}

// The first acceptance case: torchtitan's Llama 3 8B job on 64 GPUs.
TEST(ConfigFrom, TorchtitanLlama3On64GpusIsFsdpSelectiveBf16) {
    const json j = memory_json("--from " + config("torchtitan/cli_llama3_8b.toml") + " --gpus 64");
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j["model"]["name"], "llama-3-8b");          // [model] name "llama3", flavor "8B"
    EXPECT_EQ(j["plan"]["seq"], 8192);                    // [training] seq_len
    EXPECT_EQ(j["plan"]["mbs"], 1);                       // [training] local_batch_size
    EXPECT_EQ(j["plan"]["dp"], 64);                       // data_parallel_shard_degree = -1: all 64 GPUs
    EXPECT_EQ(j["plan"]["zero"], 3);                      // FSDP shards the parameters
    EXPECT_EQ(j["plan"]["recompute"], "selective");       // [activation_checkpoint] mode
    EXPECT_EQ(j["plan"]["precision"], "bf16-mixed");      // mixed_precision_param = "bfloat16"
}

TEST(ConfigFrom, PlanAndDryRunTakeTheSamePlanAndTheBatchFromTheConfig) {
    const std::string from = "--from " + config("torchtitan/cli_llama3_8b.toml") + " --gpus 64";
    const auto p = run_preflight("plan --format json " + from);
    ASSERT_LE(p.exit_code, 1) << p.err;
    const json j = json::parse(p.out);
    EXPECT_EQ(j["request"]["gbs_tokens"], 8192 * 1 * 1 * 64);  // seq x mbs x grad_acc x dp
    ASSERT_FALSE(j["candidates"].empty());
    const json& plan = j["candidates"][0]["plan"];
    EXPECT_EQ(plan["dp"], 64);
    EXPECT_EQ(plan["zero"], 3);
    EXPECT_EQ(plan["recompute"], "selective");
    const auto r = run_preflight("run --dry-run --format json " + from);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const json run = json::parse(r.out, nullptr, false);
    ASSERT_TRUE(run.is_object()) << r.out.substr(0, 400);
    EXPECT_EQ(run["plan"]["seq"], 8192);
    EXPECT_EQ(run["plan"]["dp"], 64);
}

// Megatron-LM's Mixtral example names its tokenizer file by the script's second argument: the
// vocabulary is the catalog's Mixtral 8x7B's (32,000, a multiple of 128 already), the layers the
// script's, so the count is Mixtral's: 46,702,792,704 parameters (Mistral AI: 46.7 B).
TEST(ConfigFrom, AMegatronShapeWithoutItsTokenizerTakesTheCatalogVocabulary) {
    const std::string from = "--from " + config("megatron/mixtral_8x7b_tokenizer_arg.sh") + " --gpus 64";
    const auto r = run_preflight("memory --format json " + from);
    ASSERT_LE(r.exit_code, 1) << r.err;
    const json j = json::parse(r.out, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r.out.substr(0, 400);
    EXPECT_EQ(j["model"]["params"], 46702792704LL);
    EXPECT_EQ(j["plan"]["ep"], 8);
    EXPECT_NE(r.err.find("the layers are those of catalog model mixtral-8x7b (vocabulary 32000)"), std::string::npos) << r.err;
    // --model beside it decides the model: no catalog match is said.
    const auto given = run_preflight("memory --format json " + from + " --model mixtral-8x7b");
    ASSERT_LE(given.exit_code, 1) << given.err;
    EXPECT_EQ(given.err.find("catalog model"), std::string::npos) << given.err;
}

// A sweep script launches once per pass of its for loop: the first pass's job (TP=2) is planned,
// as bash would launch it first, and the passes after it are named.
TEST(ConfigFrom, AMegatronSweepPlansItsFirstLaunchAndNamesTheRest) {
    const auto r = run_preflight("memory --format json --from " + config("megatron/llama3_8b_tp_sweep.sh"));
    ASSERT_LE(r.exit_code, 1) << r.err;
    const json j = json::parse(r.out, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r.out.substr(0, 400);
    EXPECT_EQ(j["plan"]["tp"], 2);
    EXPECT_EQ(j["plan"]["dp"], 4);          // 8 GPUs / tp 2
    EXPECT_EQ(j["plan"]["grad_acc"], 16);   // 64 / (mbs 1 x dp 4)
    EXPECT_NE(r.err.find("llama3_8b_tp_sweep.sh:12: the for loop launches on its pass with TP=2, which is read; its "
                         "later passes (TP=4, 8) are not"),
              std::string::npos)
        << r.err;
}

// A launch script that sources its settings (`source ./model.sh`) is read with them: the file
// from the script's folder, whatever the working folder; stdin has no folder and says so.
TEST(ConfigFrom, AMegatronScriptReadsTheFilesItSources) {
    Scratch s;
    s.write_text("job/model.sh", "TP=2\nSHAPE=\"--num-layers 2 --hidden-size 256 --num-attention-heads 4 "
                                 "--max-position-embeddings 512 --seq-length 512\"\n");
    const std::string script = s.write_text("job/run.sh", "#!/bin/bash\nsource ./model.sh\n"
                                                          "torchrun --nproc_per_node 8 pretrain_gpt.py $SHAPE \\\n"
                                                          "  --tensor-model-parallel-size $TP --micro-batch-size 1 "
                                                          "--global-batch-size 64\n");
    const auto r = run_preflight("memory --format json --from " + script);
    ASSERT_LE(r.exit_code, 1) << r.err;
    const json j = json::parse(r.out, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r.out.substr(0, 400);
    EXPECT_EQ(j["plan"]["tp"], 2);
    EXPECT_EQ(j["plan"]["dp"], 4);
    EXPECT_EQ(j["plan"]["seq"], 512);
    expect_refused("memory --from - < " + script, {"$TP", "source ./model.sh", "the script's folder is not known"});
    // The folder found as Megatron-LM's modelopt scripts find it ($0 through readlink -f and
    // dirname), whatever folder preflight runs from.
    s.write_text("job/conf/args.sh", "PP=2\n");
    const std::string finetune =
        s.write_text("job/finetune.sh", "#!/bin/bash\nSCRIPT_DIR=\"$(dirname \"$(readlink -f \"$0\")\")\"\n"
                                        "source \"${SCRIPT_DIR}/model.sh\"\nsource \"$SCRIPT_DIR/conf/args.sh\"\n"
                                        "torchrun --nproc_per_node 8 pretrain_gpt.py $SHAPE --tensor-model-parallel-size $TP "
                                        "--pipeline-model-parallel-size $PP --micro-batch-size 1 --global-batch-size 64\n");
    const json f = json::parse(run_preflight("memory --format json --from " + finetune).out, nullptr, false);
    ASSERT_TRUE(f.is_object());
    EXPECT_EQ(f["plan"]["tp"], 2);
    EXPECT_EQ(f["plan"]["pp"], 2);
    EXPECT_EQ(f["plan"]["dp"], 2);  // 8 / (tp 2 x pp 2)
}

// A script that finds its model file through its own folder
// ($(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd), then `source`), run from another folder.
TEST(ConfigFrom, AMegatronScriptFindsTheFilesBesideItThroughItsFolder) {
    const json j = memory_json("--from " + config("megatron/llama3_8b_script_dir.sh"));
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j["model"]["params"], 8030261248LL);  // Llama-3-8B (Meta's model card: 8.03 B)
    EXPECT_EQ(j["plan"]["tp"], 2);
    EXPECT_EQ(j["plan"]["dp"], 4);        // 8 / tp 2
    EXPECT_EQ(j["plan"]["grad_acc"], 32);  // 128 / (mbs 1 x dp 4)
    EXPECT_EQ(j["plan"]["precision"], "bf16-mixed");
}

// A script's $1 ... from --from-arg, one flag per word; refused where nothing takes them.
TEST(ConfigFrom, FromArgGivesAMegatronScriptItsWords) {
    Scratch s;
    const std::string script = s.write_text("run.sh", "TP=$1\nNODES=${2:-1}\n"
                                                      "torchrun --nnodes $NODES --nproc_per_node 8 pretrain_gpt.py "
                                                      "--tensor-model-parallel-size $TP --micro-batch-size 1 "
                                                      "--global-batch-size 64 --num-layers 2 --hidden-size 256 "
                                                      "--num-attention-heads 4 --max-position-embeddings 512 "
                                                      "--seq-length 512 --vocab-size 1024\n");
    const json one = memory_json("--from " + script + " --from-arg 2");
    ASSERT_TRUE(one.is_object());
    EXPECT_EQ(one["plan"]["tp"], 2);
    EXPECT_EQ(one["plan"]["dp"], 4);  // 8 GPUs / tp 2
    const json two = memory_json("--from " + script + " --from-arg 4 --from-arg 2");
    ASSERT_TRUE(two.is_object());
    EXPECT_EQ(two["plan"]["dp"], 4);  // 2 nodes x 8 / tp 4
    expect_refused("memory --from " + script, {"$1, a command-line word the reader is not given", "--from-arg"});
    expect_refused("memory --from-arg 2 --model gpt2", {"--from-arg", "--from FILE"});
    expect_refused("memory --from " + config("deepspeed/cli_zero3_offload.json") + " --model llama-3.2-1b --from-arg 2",
                   {"--from-arg", "deepspeed config, which takes no arguments"});
}

// The second acceptance case: a Megatron-LM Llama-3-8B script, tp 2 + sp, the
// distributed optimizer, a global batch of 128 on torchrun's 8 x 2 = 16 GPUs.
TEST(ConfigFrom, MegatronScriptGivesDp8Zero1GradAcc16) {
    const json j = memory_json("--from " + config("megatron/cli_llama3_8b_tp2.sh"));
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j["plan"]["tp"], 2);
    EXPECT_EQ(j["plan"]["sp"], true);
    EXPECT_EQ(j["plan"]["dp"], 8);         // 16 GPUs / (tp 2 x pp 1)
    EXPECT_EQ(j["plan"]["zero"], 1);       // --use-distributed-optimizer
    EXPECT_EQ(j["plan"]["grad_acc"], 16);  // 128 / (mbs 1 x dp 8)
    EXPECT_EQ(j["plan"]["seq"], 8192);
    // --bf16 alone: Megatron-LM's validate_args accumulates and all-reduces the gradients in fp32.
    EXPECT_EQ(j["plan"]["precision"], "bf16-mixed-fp32-grads");
    // The shape it spells out is Llama-3-8B's: 8,030,261,248 parameters (Meta's model card: 8.03 B).
    EXPECT_EQ(j["model"]["params"], 8030261248LL);
    const auto p = run_preflight("plan --format json --from " + config("megatron/cli_llama3_8b_tp2.sh"));
    ASSERT_LE(p.exit_code, 1) << p.err;
    EXPECT_EQ(json::parse(p.out)["request"]["gpus"], 16);  // torchrun --nproc_per_node 8 --nnodes 2
}

TEST(ConfigFrom, DeepSpeedNeedsAModelAndDerivesDpFromTheBatch) {
    expect_refused("memory --from " + config("deepspeed/cli_zero3_offload.json"), {"--model", "cli_zero3_offload.json"});
    const json j = memory_json("--from " + config("deepspeed/cli_zero3_offload.json") + " --model llama-3.2-1b");
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j["plan"]["mbs"], 2);
    EXPECT_EQ(j["plan"]["grad_acc"], 4);
    EXPECT_EQ(j["plan"]["dp"], 8);  // train_batch_size 64 / (2 x 4)
    EXPECT_EQ(j["plan"]["zero"], 3);
    EXPECT_EQ(j["plan"]["offload"], "optimizer");
    EXPECT_EQ(j["plan"]["precision"], "bf16-mixed");
}

TEST(ConfigFrom, NanotronYamlSetsLayoutRecipeAndModelShape) {
    const json j = memory_json("--from " + config("nanotron/cli_llama_1b.yaml"));
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j["plan"]["dp"], 2);
    EXPECT_EQ(j["plan"]["tp"], 2);
    EXPECT_EQ(j["plan"]["pp"], 2);
    EXPECT_EQ(j["plan"]["sp"], true);  // tp_mode REDUCE_SCATTER
    EXPECT_EQ(j["plan"]["mbs"], 2);
    EXPECT_EQ(j["plan"]["grad_acc"], 8);
    EXPECT_EQ(j["plan"]["seq"], 4096);
    EXPECT_EQ(j["plan"]["zero"], 1);
    EXPECT_EQ(j["plan"]["precision"], "bf16-mixed-fp32-grads");  // accumulate_grad_in_fp32
    EXPECT_EQ(j["model"]["params"], 1235814400LL);  // Llama-3.2-1B's shape (tied embeddings)
}

// `run --dry-run --from` for the other three formats: the runtime walks rank 0 of the plan read.
TEST(ConfigFrom, DryRunWalksTheConfigOfEachFormat) {
    const struct {
        std::string args;
        int dp, tp, pp;
    } cases[] = {{"--from " + config("megatron/cli_llama3_8b_tp2.sh"), 8, 2, 1},
                 // The runtime has no offload: the flag beside the file overrides the config's.
                 {"--from " + config("deepspeed/cli_zero3_offload.json") + " --model llama-3.2-1b --offload none", 8, 1, 1},
                 {"--from " + config("nanotron/cli_llama_1b.yaml"), 2, 2, 2}};
    for (const auto& c : cases) {
        const auto r = run_preflight("run --dry-run --format json " + c.args);
        EXPECT_EQ(r.exit_code, 0) << c.args << "\n" << r.err;
        const json j = json::parse(r.out, nullptr, false);
        ASSERT_TRUE(j.is_object()) << c.args << ": " << r.out.substr(0, 300);
        EXPECT_EQ(j["plan"]["dp"], c.dp) << c.args;
        EXPECT_EQ(j["plan"]["tp"], c.tp) << c.args;
        EXPECT_EQ(j["plan"]["pp"], c.pp) << c.args;
    }
    // Without the override the runtime refuses the config's offload, naming the setting.
    expect_refused("run --dry-run --from " + config("deepspeed/cli_zero3_offload.json") + " --model llama-3.2-1b",
                   {"--offload"});
}

TEST(ConfigFrom, FlagsBesideTheFileOverrideItsValues) {
    const json j = memory_json("--from " + config("torchtitan/cli_llama3_8b.toml") +
                               " --gpus 64 --seq 4096 --recompute full --model llama-3.2-1b");
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j["model"]["name"], "llama-3.2-1b");
    EXPECT_EQ(j["plan"]["seq"], 4096);
    EXPECT_EQ(j["plan"]["recompute"], "full");
    EXPECT_EQ(j["plan"]["dp"], 64);  // still from the file
}

// What the file turns on beyond the plan is said on stderr too (was: --compiled-loss silently).
TEST(ConfigFrom, TheCompiledLossTheConfigTurnsOnIsSaid) {
    const auto r = run_preflight("memory --format json --gpus 256 --from " + config("torchtitan/llama3_70b_hsdp_pp_fp8.toml"));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("# --from: --compiled-loss"), std::string::npos) << r.err;
    EXPECT_EQ(json::parse(r.out).at("memory").at("compiled_loss"), true);
}

// Audit 62 item 3: the echo wrote a switch the file turns off as `--sp off`, which the command
// line refuses ("not an option: off"); it leaves it out now, so the echoed flags paste as they are
// and give the plan the file gives.
TEST(ConfigFrom, TheEchoedFlagsPasteIntoTheCommandLine) {
    Scratch s;
    const auto emit = run_preflight("plan --model llama-3-8b --gpus 8 --gbs-tokens 4Mi --emit megatron");
    ASSERT_EQ(emit.exit_code, 0) << emit.err;
    const std::string script = s.write_text("launch.sh", emit.out);
    const auto from = run_preflight("memory --format json --from " + script);
    ASSERT_EQ(from.exit_code, 0) << from.err;
    const std::string head = "# --from " + script + " (megatron): ";
    ASSERT_EQ(from.err.rfind(head, 0), 0u) << from.err;
    const std::string flags = from.err.substr(head.size(), from.err.find('\n') - head.size());
    EXPECT_EQ(flags, "--dp 8 --seq 4096 --mbs 1 --grad-acc 128 --tp 1 --pp 1 --zero 2 --precision fp8-mixed "
                     "--attention flash --dropout 0 --optimizer adamw --recompute none");
    const auto pasted = run_preflight("memory --format json --model llama-3-8b " + flags);
    ASSERT_EQ(pasted.exit_code, 0) << pasted.err;
    EXPECT_EQ(json::parse(pasted.out).at("plan"), json::parse(from.out).at("plan"));
    const auto verbose = run_preflight("memory --verbose --from " + script);
    EXPECT_NE(verbose.err.find(" -> no --sp\n"), std::string::npos) << verbose.err;
}

TEST(ConfigFrom, VerboseListsWhatWasReadAndIgnored) {
    const auto r = run_preflight("memory --from " + config("torchtitan/cli_llama3_8b.toml") + " --gpus 64 --verbose");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("seq_len"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--seq 8192"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("ignored on purpose"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("[checkpoint] enable"), std::string::npos) << r.err;
}

TEST(ConfigFrom, BadValuesNameFileKeyAndLine) {
    Scratch s;
    // Line 4 holds the bad value.
    const std::string toml = s.write_text("bad.toml", "[model]\nname = \"llama3\"\n[training]\nseq_len = \"long\"\n");
    expect_refused("memory --from " + toml + " --gpus 8", {"--from", "bad.toml", ":4", "seq_len"});
    const std::string syntax = s.write_text("syntax.toml", "[training]\nseq_len = = 3\n");
    expect_refused("memory --from " + syntax + " --gpus 8", {"syntax.toml", ":2"});
    const std::string ds = s.write_text("ds.json", "{\n  \"train_micro_batch_size_per_gpu\": 1,\n  \"zero_optimization\": {\"stage\": 7}\n}\n");
    expect_refused("memory --model gpt2 --from " + ds, {"ds.json", ":3", "stage"});
    const std::string mg = s.write_text("args.txt", "--num-layers 2\n--micro-batch-size x\n");
    expect_refused("memory --from " + mg, {"args.txt", ":2", "--micro-batch-size"});
    // A layout beside the config whose GPU count would pass 2^63 (2^20 x 2^20 here): refused, never wrapped.
    const std::string micro = s.write_text("micro.json", "{\"train_micro_batch_size_per_gpu\": 1}\n");
    expect_refused("plan --model gpt2 --from " + micro + " --dp 1048576 --tp 1048576", {"--gpus", "kMaxGpus"});
    const std::string yaml = s.write_text("n.yaml", "parallelism:\n  dp: -2\n");
    expect_refused("memory --model gpt2 --from " + yaml, {"n.yaml", ":2", "dp"});
}

// A value the config set that the plan then refuses (llama-3-8b: 32 heads, 8,192 positions) names
// the config's file, line and key, on all three commands; the same value given as a flag names the flag.
TEST(ConfigFrom, ARefusedValueOfTheConfigNamesItsLine) {
    Scratch s;
    const std::string tp3 = s.write_text("tp3.toml", "[model]\nname = \"llama3\"\nflavor = \"8B\"\n[parallelism]\n"
                                                     "tensor_parallel_degree = 3\n");
    for (const char* cmd : {"memory", "plan", "run --dry-run"})
        expect_refused(std::string(cmd) + " --gpus 3 --from " + tp3, {"tp3.toml:5", "tensor_parallel_degree", "32", "(read as --tp)"});
    const std::string seq = s.write_text("seq.toml", "[model]\nname = \"llama3\"\nflavor = \"8B\"\n[training]\n"
                                                     "seq_len = 20000000\n");
    expect_refused("memory --gpus 8 --from " + seq, {"seq.toml:5", "seq_len", "kMaxSeq"});
    // torchtitan sizes the context from seq_len (models/llama3/model/args.py update_from_config):
    // a sequence past the catalog model's 8,192 positions is planned, not refused.
    const std::string longer = s.write_text("long.toml", "[model]\nname = \"llama3\"\nflavor = \"8B\"\n[training]\n"
                                                         "seq_len = 32768\n");
    const auto planned = run_preflight("memory --format json --gpus 8 --from " + longer);
    EXPECT_LE(planned.exit_code, 1) << planned.err;
    EXPECT_EQ(json::parse(planned.out)["plan"]["seq"], 32768);
    // A refusal by the framework profile names the setting at fault, so the config's line is named.
    expect_refused("memory --from " + config("nanotron/qwen_pp_zero1.yaml"),
                   {"qwen_pp_zero1.yaml:76", "parallelism.pp_engine", "1F1B"});
    const auto flag = run_preflight("memory --gpus 3 --from " + tp3 + " --tp 5 --dp 1");
    EXPECT_EQ(flag.exit_code, 2);
    EXPECT_NE(flag.err.find("error: --tp: 5 does not divide"), std::string::npos) << flag.err;
}

// A layout flag beside a config divides the config's GPUs anew (was: dp kept, the job silently
// grown to 32 GPUs). Megatron's script launches 8 x 2 = 16 processes with --global-batch-size 128
// and mbs 1: at tp 4, dp = 16 / 4 = 4 and grad_acc = 128 / (1 x 4) = 32. torchtitan's job on
// --gpus 8 at tp 2: dp 4; it names no global batch, so its accumulation stays 1.
TEST(ConfigFrom, ALayoutFlagBesideTheConfigKeepsItsGpus) {
    const json mg = memory_json("--from " + config("megatron/cli_llama3_8b_tp2.sh") + " --tp 4");
    EXPECT_EQ(mg["plan"]["tp"], 4);
    EXPECT_EQ(mg["plan"]["dp"], 4);
    EXPECT_EQ(mg["plan"]["grad_acc"], 32);
    EXPECT_EQ(mg["plan"]["gpus"], 16);
    const json tt = memory_json("--from " + config("torchtitan/cli_llama3_8b.toml") + " --gpus 8 --tp 2");
    EXPECT_EQ(tt["plan"]["dp"], 4);
    EXPECT_EQ(tt["plan"]["gpus"], 8);
    EXPECT_EQ(tt["plan"]["grad_acc"], 1);
    // --dp beside it as well: the user's layout stands.
    EXPECT_EQ(memory_json("--from " + config("megatron/cli_llama3_8b_tp2.sh") + " --tp 4 --dp 2")["plan"]["dp"], 2);
    expect_refused("memory --from " + config("megatron/cli_llama3_8b_tp2.sh") + " --tp 3", {"--tp", "16 GPUs", "3"});
    const auto plan = run_preflight("plan --from " + config("megatron/cli_llama3_8b_tp2.sh") + " --tp 4");
    EXPECT_LE(plan.exit_code, 1) << plan.err;
}

// A --tp beside the config runs the config's sequence parallelism at the new degree, as the
// framework would (was: the file's own tp decided it, so --tp 2 planned no SP where the framework
// runs it, and --tp 1 was refused blaming the file's SP line). Megatron's script sets
// --sequence-parallel at tp 2: on at tp 4, off at tp 1 (16 GPUs: dp 16). torchtitan shards the
// norms by sequence whenever tp > 1 (apply_tp): its tp-1 TOML at --tp 2 runs SP. nanotron's
// REDUCE_SCATTER at tp 2: off at --tp 1.
TEST(ConfigFrom, ALayoutFlagBesideTheConfigRunsItsSequenceParallelismAtTheNewDegree) {
    const std::string mg = "--from " + config("megatron/cli_llama3_8b_tp2.sh");
    EXPECT_EQ(memory_json(mg + " --tp 4")["plan"]["sp"], true);
    const json mg1 = memory_json(mg + " --tp 1");
    EXPECT_EQ(mg1["plan"]["sp"], false);
    EXPECT_EQ(mg1["plan"]["dp"], 16);
    EXPECT_EQ(memory_json("--from " + config("torchtitan/cli_llama3_8b.toml") + " --gpus 8 --tp 2")["plan"]["sp"], true);
    EXPECT_EQ(memory_json("--from " + config("nanotron/cli_llama_1b.yaml") + " --tp 1")["plan"]["sp"], false);
}

// Helper audit D6 / D7: a launch count and a global batch the script leaves open
// ($SLURM_GPUS_ON_NODE, bs=$4) come from --gpus and --grad-acc beside --from, as the messages ask:
// dp = 16 GPUs / (tp 1 x pp 1) = 16, mbs 2 from the file, accumulation 3 from the flag.
TEST(ConfigFrom, FlagsBesideAScriptStandInForWhatItLeavesOpen) {
    Scratch s;
    const std::string script = s.write_text(
        "open.sh", "bs=$4\ntorchrun --nproc_per_node $SLURM_GPUS_ON_NODE pretrain_gpt.py --num-layers 2 --hidden-size 256 "
                   "--num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 --micro-batch-size 2 "
                   "--global-batch-size $bs\n");
    const json j = memory_json("--from " + script + " --gpus 16 --grad-acc 3");
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j["plan"]["dp"], 16);
    EXPECT_EQ(j["plan"]["mbs"], 2);
    EXPECT_EQ(j["plan"]["grad_acc"], 3);
    expect_refused("memory --from " + script + " --gpus 16", {"open.sh:2", "--global-batch-size", "$4", "give --grad-acc"});
    expect_refused("memory --from " + script + " --grad-acc 3", {"open.sh:2", "--nproc_per_node", "give the GPU count with --gpus"});
}

// `--from -` reads the config from standard input: the same plan as from the file, and a
// refusal that names standard input.
TEST(ConfigFrom, DashReadsTheConfigFromStandardInput) {
    const json file = memory_json("--from " + config("megatron/cli_llama3_8b_tp2.sh"));
    const json piped = memory_json("--from - < " + config("megatron/cli_llama3_8b_tp2.sh"));
    ASSERT_TRUE(piped.is_object());
    EXPECT_EQ(piped["plan"], file["plan"]);
    EXPECT_EQ(piped["memory"]["peak_bytes"], file["memory"]["peak_bytes"]);
    expect_refused("memory --from - < /dev/null", {"--from", "-", "--from-format"});
}

TEST(ConfigFrom, UnreadableOrUnknownFilesAreExitTwo) {
    Scratch s;
    expect_refused("memory --from " + s.path("missing.toml"), {"--from", "missing.toml"});
    expect_refused("memory --from " + s.dir().string(), {"--from", "folder"});
    const std::string text = s.write_text("notes.txt", "just some notes\n");
    expect_refused("memory --from " + text, {"--from", "notes.txt", "--from-format"});
    expect_refused("memory --from-format torchtitan", {"--from-format", "--from"});
    expect_refused("memory --model gpt2 --gpus 8", {"--gpus", "--from", "--dp"});
    expect_refused("memory --from " + text + " --from-format yaml", {"--from-format"});
    // torchtitan's configurations in Python (config_registry.py, torchtitan_recipes): said as
    // such, with the flags that give the plan, detected or forced.
    const std::string py = s.write_text("config_registry.py",
                                        "def llama3_8b() -> Trainer.Config:\n"
                                        "    return Trainer.Config(parallelism=ParallelismConfig(tensor_parallel_degree=2))\n");
    expect_refused("memory --from " + py, {"--from", "config_registry.py", "Trainer.Config", "--framework torchtitan"});
    expect_refused("memory --from " + py + " --from-format torchtitan", {"config_registry.py", "Trainer.Config"});
}

}  // namespace
}  // namespace preflight
