// Every input that used to give a confident wrong answer, a hang or a message naming
// nothing: each is refused with exit 2 and a message naming the flag, field, file or
// the documented bound (planner/include/preflight/planner/limits.hpp), or now answered
// correctly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "run_cli.hpp"

namespace preflight {
namespace {

using nlohmann::json;
using test::run_preflight;
namespace fs = std::filesystem;

// A scratch folder removed at the end of each test.
class Scratch {
public:
    Scratch() {
        char tmpl[] = "/tmp/preflight-robust-XXXXXX";
        dir_ = mkdtemp(tmpl);
    }
    ~Scratch() {
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }
    std::string write(const std::string& name, const json& j) const {
        const fs::path p = dir_ / name;
        fs::create_directories(p.parent_path());
        std::ofstream(p) << j.dump(2);
        return p.string();
    }
    const fs::path& dir() const { return dir_; }

private:
    fs::path dir_;
};

json catalog(const std::string& kind, const std::string& name) {
    std::ifstream in(std::string(PREFLIGHT_TEST_DATA_DIR) + "/" + kind + "/" + name + ".json");
    return json::parse(in);
}

// Exit 2 with a message that contains every one of `words`, and no internal error.
void expect_refused(const std::string& args, std::initializer_list<const char*> words) {
    const auto r = run_preflight(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\nstdout: " << r.out.substr(0, 400) << "\nstderr: " << r.err;
    for (const char* w : words) EXPECT_NE(r.err.find(w), std::string::npos) << args << ": '" << w << "' not in: " << r.err;
    EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << args << ": printed a result: " << r.out.substr(0, 400);
}

// --- 64-bit overflow: refused with the bound named, never a wrapped number ---------

TEST(Robustness, HugeOverheadBytesIsRefusedNotFits) {
    // Was: every category 0 and FITS (exit 0).
    expect_refused("memory --model gpt2 --overhead-bytes 9223372036854775807", {"--overhead-bytes", "1125899906842624"});
    // The largest accepted overhead still gives an honest DOES NOT FIT.
    const auto r = run_preflight("memory --model gpt2 --overhead-bytes 1125899906842624 --format json");
    ASSERT_EQ(r.exit_code, 1) << r.err;
    const auto j = json::parse(r.out);
    EXPECT_EQ(j.at("memory").at("per_gpu_bytes").at("overhead"), 1125899906842624LL);
    EXPECT_GT(j.at("memory").at("peak_bytes").get<std::int64_t>(), 1125899906842624LL);
}

TEST(Robustness, HugeHiddenSizeIsRefusedNamingTheField) {
    // Was: a negative parameter count and a recommended plan with a 0 B peak (exit 0).
    Scratch s;
    json cfg = catalog("models", "llama-3-8b");
    cfg["hidden_size"] = 4096000000LL;
    cfg["head_dim"] = 128;
    const std::string path = s.write("huge/config.json", cfg);
    expect_refused("memory --model " + path, {"hidden_size", "kMaxWidth"});
    expect_refused("plan --model " + path + " --gpus 8 --gbs-tokens 4194304", {"hidden_size", "kMaxWidth"});
}

TEST(Robustness, SeqBeyondInt64IsRefusedNotClamped) {
    // Was: silently clamped, negative activation bytes.
    expect_refused("memory --model llama-3-8b --seq 9223372036854775808", {"--seq", "64-bit"});
    expect_refused("memory --model llama-3-8b --seq 100000000", {"--seq", "kMaxSeq"});
}

TEST(Robustness, HugeMicroBatchIsRefused) {
    // Was: negative activations.
    expect_refused("memory --model llama-3-8b --mbs 1000000000000", {"--mbs", "kMaxMbs"});
    // Inside the per-flag bounds but beyond 2^60 bytes of activations: the product is named.
    expect_refused("memory --model llama-3-8b --attention eager --seq 8192 --mbs 1048576", {"--seq", "2^60"});
}

TEST(Robustness, DryRunWithHugeMicroBatchIsRefusedNotNaN) {
    // Was: NaN step time with exit 0.
    expect_refused("run --dry-run --model gpt2 --mbs 4611686018427387904", {"--mbs"});
}

TEST(Robustness, LargestAcceptedMemoryFiguresArePositive) {
    // At the bounds the figures stay positive and exact multiples of the hand-derived terms:
    // GPT-2 weights 124,439,808 params x 2 B (bf16-mixed).
    const auto r = run_preflight("memory --model gpt2 --seq 1024 --mbs 1048576 --format json");
    ASSERT_EQ(r.exit_code, 1) << r.err;
    const auto j = json::parse(r.out);
    EXPECT_EQ(j.at("memory").at("per_gpu_bytes").at("weights"), 2 * 124'439'808LL);
    for (const auto& [k, v] : j.at("memory").at("per_gpu_bytes").items()) EXPECT_GE(v.get<std::int64_t>(), 0) << k;
    EXPECT_GT(j.at("memory").at("per_gpu_bytes").at("activations").get<std::int64_t>(), 1LL << 48);
}

// --- Bounded work ---------------------------------------------------------------------

TEST(Robustness, GlobalBatchBeyondTheBoundIsRefused) {
    // Was: ran for minutes.
    expect_refused("plan --model llama-3-8b --gpus 8 --gbs-tokens 1e18", {"--gbs-tokens", "kMaxGlobalBatchTokens"});
}

TEST(Robustness, LargeGlobalBatchSearchIsCappedAndSaysSo) {
    // Was: grew to gigabytes and died with bad_alloc. Now micro-batches above 4096
    // sequences are not enumerated and the output names the limit.
    const auto r = run_preflight("plan --model gpt2 --gpus 1 --gbs-tokens 1e11 --seq 1024");
    EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.err;
    EXPECT_NE(r.out.find("kMaxSearchMbs"), std::string::npos) << r.out.substr(0, 2000);
    EXPECT_EQ(r.err.find("bad_alloc"), std::string::npos) << r.err;
}

TEST(Robustness, GpuCountBeyondTheBoundIsRefused) {
    // Was: minutes of divisor enumeration.
    expect_refused("plan --model llama-3-8b --gpus 2147483648 --gbs-tokens 4194304", {"--gpus", "kMaxGpus"});
}

TEST(Robustness, MillionsOfLayersAreRefused) {
    // Was: 5 GB for the timeline of a 1e7-layer model.
    Scratch s;
    json cfg = catalog("models", "llama-3.2-1b");
    cfg["num_hidden_layers"] = 10000000;
    const std::string path = s.write("deep.json", cfg);
    expect_refused("memory --model " + path + " --timeline", {"num_hidden_layers", "kMaxLayers"});
}

TEST(Robustness, DryRunGradAccIsBounded) {
    // Was: 10 GB for --grad-acc 65536. The step runs a block of its ops again (Program::repeat:
    // one micro-batch without a pipeline, a period of the steady state with one, interleaved too
    // since 2026-12-01), so only the layer-steps bound it: 131,072 (until 2026-12-01 65,536, and
    // 1,024 micro-batches and 4,096 layer-steps under the interleaved schedule). GPT-2's 12
    // layers: 10,922 micro-batches run, 10,923 are refused; at pp 2 (6 layers a stage) 21,845
    // and 21,846, and interleaved, where --grad-acc is a multiple of pp, 21,844 and 21,846. The
    // refusal names the micro-batch count that holds the same peak and runs (2 without a
    // pipeline, pp with one, 2 pp interleaved).
    expect_refused("run --dry-run --model gpt2 --seq 64 --grad-acc 10923", {"--grad-acc", "kMaxRuntimeRepeatedLayerSteps"});
    expect_refused("run --dry-run --model gpt2 --seq 64 --grad-acc 21846 --pp 2 --recompute full",
                   {"--grad-acc", "kMaxRuntimeRepeatedLayerSteps", "--grad-acc 2 holds the same per-GPU peak"});
    expect_refused("run --dry-run --model gpt2 --seq 64 --grad-acc 21846 --pp 2 --pp-schedule interleaved --vpp 2 --recompute full",
                   {"--grad-acc", "kMaxRuntimeRepeatedLayerSteps", "--grad-acc 4 holds the same per-GPU peak"});
    expect_refused("run --dry-run --seq 64 --grad-acc 4097 --recompute full",
                   {"--grad-acc", "kMaxRuntimeRepeatedLayerSteps", "--grad-acc 2 holds the same per-GPU peak"});
    for (const char* ok_plan : {"run --dry-run --model gpt2 --seq 64 --grad-acc 10922 --recompute full",
                                "run --dry-run --model gpt2 --seq 64 --grad-acc 21845 --pp 2 --recompute full",
                                "run --dry-run --model gpt2 --seq 64 --grad-acc 21844 --pp 2 --pp-schedule interleaved --vpp 2 --recompute full",
                                "run --dry-run --seq 64 --grad-acc 4096 --recompute full"}) {
        const auto ok = run_preflight(ok_plan);
        EXPECT_EQ(ok.exit_code, 0) << ok_plan << ": " << ok.err;
    }
}

TEST(Robustness, DryRunOfAVeryDeepModelIsBounded) {
    // A read-only audit (2026-11-30): one micro-batch of an 8,192-layer model passed the
    // layer-step bounds (8,192 x 2 = 16,384 without a pipeline) and its arena placement, which
    // grows about as the cube of the layers, ran past 600 s. The runtime takes 256 layers at most
    // (kMaxRuntimeLayers); 256 runs, 257 is refused naming --model.
    Scratch s;
    json cfg = catalog("models", "gpt2");
    cfg["n_embd"] = 64;
    cfg["n_head"] = 4;
    cfg["vocab_size"] = 256;
    cfg["n_positions"] = 64;
    cfg["n_layer"] = 257;
    expect_refused("run --dry-run --seq 64 --model " + s.write("deep.json", cfg), {"--model", "257 layers", "kMaxRuntimeLayers"});
    cfg["n_layer"] = 256;
    const auto ok = run_preflight("run --dry-run --seq 64 --model " + s.write("deep256.json", cfg));
    EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

// --- Messages that name the field; no silent truncation ---------------------------------

TEST(Robustness, GpuSpecFieldsOfTheWrongTypeAreNamed) {
    // Was: "internal error: type must be string, but is number".
    Scratch s;
    for (const char* key : {"name", "architecture", "display_name"}) {
        json spec = catalog("gpus", "h100-sxm-80gb");
        spec[key] = 42;
        const std::string path = s.write(std::string(key) + ".json", spec);
        expect_refused("memory --model gpt2 --gpu " + path, {key, "string"});
    }
}

TEST(Robustness, GpusPerNodeIsNotTruncated) {
    // Was: 4294967304 became 8.
    Scratch s;
    json spec = catalog("gpus", "h100-sxm-80gb");
    spec["gpus_per_node"] = 4294967304LL;
    const std::string path = s.write("node.json", spec);
    expect_refused("plan --model gpt2 --gpu " + path + " --gpus 8 --gbs-tokens 524288", {"gpus_per_node", "kMaxGpusPerNode"});
    spec["gpus_per_node"] = 0;
    expect_refused("memory --model gpt2 --gpu " + s.write("zero.json", spec), {"gpus_per_node"});
}

TEST(Robustness, PlanFileZeroStageIsNotTruncated) {
    // Was: "zero": 4294967297 became stage 1.
    Scratch s;
    const std::string path = s.write("plan.json", json{{"seq", 512}, {"zero", 4294967297LL}});
    expect_refused("run --dry-run --model gpt2 --plan " + path, {"--plan", "zero", "0, 1, 2 or 3"});
}

// --- Other wrong behaviour ----------------------------------------------------------------

TEST(Robustness, RunPlanFileUsesItsModelAndGpu) {
    // Was: the file's model and GPU were ignored (llama-3-8b on the default GPU ran instead).
    Scratch s;
    const std::string path = s.write(
        "plan.json", json{{"model", "gpt2"}, {"gpu", "a100-sxm-80gb"}, {"seq", 256}, {"mbs", 2}, {"precision", "fp32"}});
    const auto r = run_preflight("run --dry-run --plan " + path + " --format json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = json::parse(r.out);
    EXPECT_EQ(j.at("model").at("name"), "gpt2");
    EXPECT_EQ(j.at("gpu").at("name"), "a100-sxm-80gb");
    EXPECT_EQ(j.at("plan").at("seq"), 256);
    // A memory report as the plan file: "model": {"name": ...} is read too.
    const auto mem = run_preflight("memory --model smollm-360m --gpu a100-sxm-80gb --seq 512 --format json");
    ASSERT_EQ(mem.exit_code, 0) << mem.err;
    const std::string report = s.write("memory.json", json::parse(mem.out));
    const auto r2 = run_preflight("run --dry-run --plan " + report + " --format json");
    ASSERT_EQ(r2.exit_code, 0) << r2.err;
    EXPECT_EQ(json::parse(r2.out).at("model").at("name"), "smollm-360m");
    // Given and different from the file's: refused, naming both.
    expect_refused("run --dry-run --model llama-3.2-1b --plan " + path, {"--model", "llama-3.2-1b", "gpt2"});
}

TEST(Robustness, DeepSpeedEmitNeverCombinesPipelineAndZeroStage2Or3) {
    // DeepSpeed's PipelineEngine asserts ZeRO stage < 2. Pinned pp > 1 with ZeRO-3 is
    // refused for --emit deepspeed, and an open search picks a plan DeepSpeed can run.
    expect_refused("plan --model llama-3-70b --gpus 16 --gbs-tokens 4194304 --pp 2 --zero 3 --emit deepspeed",
                   {"--zero", "pipeline"});
    const auto r = run_preflight("plan --model llama-3-70b --gpus 32 --gbs-tokens 4194304 --pp 2 --emit deepspeed");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(json::parse(r.out).at("zero_optimization").at("stage").get<int>() < 2, true) << r.out;
    // Unpinned: the old search emitted pp 4 with ZeRO-3 here.
    const auto open = run_preflight("plan --model llama-3-70b --gpus 32 --gbs-tokens 4194304 --emit deepspeed");
    ASSERT_EQ(open.exit_code, 0) << open.err;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(open.err, m, std::regex("--pp (\\d+) .*--zero (\\d)"))) << open.err;
    EXPECT_TRUE(std::stoi(m[1]) == 1 || std::stoi(m[2]) < 2) << open.err;
}

TEST(Robustness, SeqBeyondContextIsRefusedForEveryFamily) {
    // Was: accepted for Llama (RoPE), refused for GPT-2 (learned positions).
    expect_refused("memory --model gpt2 --seq 2048", {"--seq", "1024"});
    expect_refused("memory --model llama-3-8b --seq 16384", {"--seq", "8192", "max_position_embeddings"});
    expect_refused("plan --model llama-3-8b --gpus 8 --gbs-tokens 4194304 --seq 16384", {"--seq", "8192"});
}

TEST(Robustness, BatchBelowOneSequenceIsNamed) {
    // Was: "choose a larger GPU".
    expect_refused("plan --model llama-3-8b --gpus 8 --gbs-tokens 1", {"--gbs-tokens", "less than one sequence"});
}

TEST(Robustness, MissingDataDirIsAnError) {
    // Was: exit 0 with an empty table.
    expect_refused("models --data-dir /nonexistent", {"--data-dir", "/nonexistent"});
    expect_refused("gpus --data-dir /nonexistent", {"--data-dir"});
    Scratch s;
    fs::create_directories(s.dir() / "models");
    expect_refused("models --data-dir " + s.dir().string(), {"no model configs"});
}

TEST(Robustness, ReportIntoAFolderIsNamed) {
    // Was: "rename failed: Success".
    expect_refused("run --dry-run --model gpt2 --seq 128 --report /tmp", {"--report", "/tmp", "directory"});
}

TEST(Robustness, NonFiniteLearningRateIsRefused) {
    for (const char* lr : {"nan", "inf", "-1", "0"})
        expect_refused(std::string("run --dry-run --model gpt2 --seq 128 --lr ") + lr, {"--lr"});
}

TEST(Robustness, RejectedLayoutHasNoZeroPeak) {
    // Found by the fuzzer: on 6 GPUs the tp 3 family (3 does not divide Llama-3-8B's 32
    // heads) is refused before any memory evaluation and was printed with "peak_bytes": 0.
    const auto r = test::run_preflight("plan --model llama-3-8b --gpus 6 --gbs-tokens 1e6 --format json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    bool layout_refusal = false;
    for (const auto& rej : j.at("rejected")) {
        const auto& peak = rej.at("peak_bytes");
        EXPECT_TRUE(peak.is_null() || peak.get<std::int64_t>() > 0) << rej.dump();
        if (rej.at("reason").get<std::string>().find("does not divide") != std::string::npos) {
            layout_refusal = true;
            EXPECT_TRUE(peak.is_null()) << rej.dump();
        }
    }
    EXPECT_TRUE(layout_refusal);
}

TEST(Robustness, PinnedExtensionSettingNoLayoutRepairsIsBadInput) {
    // Found by the fuzzer (a hang past 10 s under ASan): every plan of the search threw, and
    // the command answered "choose a larger GPU or a smaller model" (exit 1).
    const std::string plan = "plan --model llama-3-8b --gpus 8 --gbs-tokens 4194304 ";
    expect_refused("plan --gpus 8 --gbs-tokens 5e9 --moe-capacity-factor 2961", {"--moe-capacity-factor", "[1, 64]"});
    expect_refused(plan + "--moe-capacity-factor 0.5", {"--moe-capacity-factor"});
    expect_refused(plan + "--finetune lora --lora-rank 0", {"--lora-rank", "positive"});
    expect_refused(plan + "--finetune lora --lora-rank 100000", {"--lora-rank", "hidden size 4096"});
    expect_refused(plan + "--finetune lora --lora-alpha -1", {"--lora-alpha"});
    expect_refused(plan + "--finetune lora --lora-dropout 2", {"--lora-dropout", "[0, 1)"});
    expect_refused(plan + "--finetune lora --precision fp8-mixed", {"--precision", "fp8-mixed"});
    expect_refused(plan + "--pp-schedule interleaved --vpp 0", {"--vpp", "positive"});
    expect_refused(plan + "--pp-schedule interleaved --vpp 1", {"--vpp", ">= 2"});
    expect_refused(plan + "--pp-schedule interleaved --vpp 1000", {"--vpp", "32 layers"});
    expect_refused(plan + "--ep 0", {"--ep", "positive"});
    expect_refused(plan + "--ep 2", {"--ep", "mixture-of-experts"});
}

TEST(Robustness, SearchWhosePlansAllCannotRunSaysWhy) {
    // pp 2 x vpp 3 = 6 divides neither Llama-3-8B's 32 layers nor 34. Was: "NOTHING FITS ...
    // choose a larger GPU or a smaller model", with no rejected family.
    const auto r = test::run_preflight(
        "plan --model llama-3-8b --gpus 8 --gbs-tokens 4194304 --pp 2 --pp-schedule interleaved --vpp 3");
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.out.find("NO PLAN RUNS"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("the plan cannot run: --vpp: pp * vpp = 6"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("larger GPU"), std::string::npos) << r.out;
}

TEST(Robustness, HugeSearchSpaceIsRefusedNamingTheLimit) {
    // Fuzz finding: 400,000 GPUs took ~10 s under ASan. 720,720 GPUs (240 divisors) on
    // Mixtral-8x7B give thousands of layouts and families: refused once the search has judged
    // --max-plans, naming the pins that narrow it. (Since Megatron-LM's even pipeline split is
    // kept, pp dividing the 32 layers, the search judges ~12,000 plans, under the 50,000 this
    // asked before: 5,000, then 2,000 when the search left pure bf16 and fp16-mixed to a pinned
    // --precision: 5,668 plans judged.)
    expect_refused("plan --model mixtral-8x7b --gpus 720720 --gbs-tokens 1e12 --max-plans 2000",
                   {"--gpus", "need more than --max-plans 2000 plans", "raise --max-plans", "pin --ep, --tp"});
    // The bound is a count from 1 to kMaxSearchPlans = 10,000,000.
    expect_refused("plan --model mixtral-8x7b --gpus 64 --gbs-tokens 4e6 --max-plans 0", {"--max-plans"});
    expect_refused("plan --model mixtral-8x7b --gpus 64 --gbs-tokens 4e6 --max-plans 1e8", {"--max-plans", "kMaxSearchPlans"});
    // Pinning tp and pp narrows it to one layout: answered.
    const auto pinned = run_preflight("plan --model mixtral-8x7b --gpus 720720 --gbs-tokens 1e12 --tp 8 --pp 2");
    EXPECT_EQ(pinned.exit_code, 0) << pinned.err;
    // The fuzz unit itself (31,226 plans judged) is answered under the default bound.
    const auto unit = run_preflight("plan --model llama-3-8b --gpus 4e5 --gbs-tokens 9e9 --format json");
    ASSERT_EQ(unit.exit_code, 0) << unit.err;
    EXPECT_LE(json::parse(unit.out)["search"]["plans_evaluated"].get<std::int64_t>(), 50000);
    // Was: refused under the old bound of 50,000. Mixtral-8x7B on 256 H100s judges 23,573 plans
    // (63,059 while pure bf16 and fp16-mixed were searched unpinned); the default bound of 500,000
    // answers it and says so.
    const auto moe = run_preflight("plan --model mixtral-8x7b --gpus 256 --gbs-tokens 4194304 --seq 4096 --format json");
    ASSERT_EQ(moe.exit_code, 0) << moe.err;
    const json doc = json::parse(moe.out);
    EXPECT_GT(doc["search"]["plans_evaluated"].get<std::int64_t>(), 20000);
    EXPECT_EQ(doc["request"]["max_plans"], 500000);
}

// Audit finding: CLI11 2.1 reads integers with strtoll base 0, so "010" was octal 8 and "0x10"
// hexadecimal 16: `--tp 010` planned tp 8 (tp 10 does not divide 32 heads) and
// `--gbs-tokens 04000000` asked for 1,048,576 tokens. Every integer flag is now decimal.
TEST(Robustness, LeadingZerosAreDecimalNeverOctal) {
    expect_refused("memory --model llama-3-8b --tp 010", {"--tp", "10"});
    const auto plan = run_preflight("plan --model llama-3-8b --gpus 010 --gbs-tokens 0409600 --seq 4096 --top-k 03 --format json");
    ASSERT_EQ(plan.exit_code, 0) << plan.err;
    const json doc = json::parse(plan.out);
    EXPECT_EQ(doc["request"]["gpus"], 10);
    EXPECT_EQ(doc["request"]["gbs_tokens"], 409600);
    EXPECT_EQ(doc["candidates"].size(), 3u);
    const auto mem = run_preflight("memory --model gpt2 --grad-acc 010 --overhead-bytes 0100 --format json");
    ASSERT_EQ(mem.exit_code, 0) << mem.err;
    EXPECT_EQ(json::parse(mem.out)["plan"]["grad_acc"], 10);
    EXPECT_EQ(json::parse(mem.out)["memory"]["per_gpu_bytes"]["overhead"], 100);
    expect_refused("memory --model llama-3-8b --grad-acc 0x10", {"--grad-acc", "'0x10' is not a number"});
    const auto run = run_preflight("run --dry-run --model gpt2 --seq 128 --steps 010 --seed 010 --format json");
    ASSERT_EQ(run.exit_code, 0) << run.err;
    EXPECT_EQ(json::parse(run.out)["steps"], 10);
    EXPECT_EQ(json::parse(run.out)["seed"], 10);
}

TEST(Robustness, TopKIsBounded) {
    // Was: --top-k 100000 on Mixtral-8x7B over 1,024 GPUs printed 122 MB of JSON in 7 s (1.1 GB RSS).
    expect_refused("plan --model mixtral-8x7b --gpus 1024 --gbs-tokens 8e6 --top-k 100000", {"--top-k", "kMaxTopK = 100"});
    expect_refused("plan --model gpt2 --gpus 8 --gbs-tokens 524288 --top-k 101", {"--top-k", "kMaxTopK"});
}

}  // namespace
}  // namespace preflight
