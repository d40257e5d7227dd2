// Values that once stood in silently for something else (a CLI sweep of odd inputs, 2026-11-28):
// an empty argument read as "not given", a seed that wrapped, a count clamped before its
// message, a report's impossible figure compared or dropped, a plan file's 0 read as the default.
// Each is now exit 2 naming the flag, file or key, with what was typed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "user_files.hpp"

namespace preflight {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::catalog;
using test::expect_refused;
using test::run_preflight;
using test::Scratch;

TEST(Values, AnEmptyArgumentIsRefusedNotTakenAsTheDefault) {
    // Was: --dropout '' ran with dropout 0, --report '' wrote nothing and exit 0, --plan '' ran
    // the flags' plan.
    expect_refused("memory --model gpt2 --dropout ''", {"empty argument", "--dropout"});
    expect_refused("run --dry-run --model gpt2 --report ''", {"empty argument", "--report"});
    expect_refused("run --dry-run --plan ''", {"empty argument", "--plan"});
    expect_refused("plan --model gpt2 --gpus 8 --headroom ''", {"empty argument", "--headroom"});
}

// Audit 62 items 9 and 10: --overhead-bytes 1e9 was "not a whole number" and 1Gi got no hint; it
// reads a byte count as --host-memory does now, 0 too. A step count over its bound says why a token
// limit bounds it. A 100 kB --model or --framework was echoed whole; it is cut to about a line.
TEST(Values, ByteCountsStepCountsAndLongValuesInMessages) {
    const auto overhead = [](const std::string& v) {
        const auto r = run_preflight("memory --model gpt2 --format json --overhead-bytes " + v);
        EXPECT_EQ(r.exit_code, 0) << v << ": " << r.err;
        return json::parse(r.out).at("memory").at("per_gpu_bytes").at("overhead").get<std::int64_t>();
    };
    EXPECT_EQ(overhead("1e9"), 1'000'000'000);
    EXPECT_EQ(overhead("1Gi"), 1'073'741'824);
    EXPECT_EQ(overhead("1.5G"), 1'500'000'000);
    EXPECT_EQ(overhead("0"), 0);
    expect_refused("memory --model gpt2 --overhead-bytes 1.5", {"--overhead-bytes", "'1.5' is not a whole number"});
    expect_refused("memory --model gpt2 --overhead-bytes 2Pi",
                   {"--overhead-bytes", "'2Pi' is not a number (a count is 4194304, 4.194304e6, or a number with one"});
    expect_refused("memory --model gpt2 --overhead-bytes 2e15",
                   {"--overhead-bytes: 2000000000000000 exceeds the limit kMaxDeviceBytes = 1125899906842624"});
    expect_refused("memory --model gpt2 --grad-acc 1099511627777",
                   {"--grad-acc: 1099511627777 exceeds the limit kMaxGlobalBatchTokens = 1099511627776 (each "
                    "accumulation step adds at least one token to the global batch, which that limit bounds)"});
    const std::string a(100000, 'a');
    for (const std::string& flag : {std::string("--model"), std::string("--framework"), std::string("--gpu")}) {
        const auto r = run_preflight("memory " + flag + " " + a, "timeout 60 env");
        EXPECT_EQ(r.exit_code, 2) << flag;
        EXPECT_LT(r.err.size(), 600u) << flag << ": " << r.err.substr(0, 600);
        EXPECT_NE(r.err.find(flag), std::string::npos) << r.err.substr(0, 600);
        EXPECT_NE(r.err.find(std::string(60, 'a') + "... (100000 characters)"), std::string::npos) << r.err.substr(0, 600);
    }
}

TEST(Values, NumbersAreReadExactlyAndMessagesShowWhatWasTyped) {
    // Was: --seed -1 and --seed 2^64 both ran with seed 2^64 - 1.
    expect_refused("run --dry-run --model gpt2 --seed -1", {"--seed", "'-1'"});
    expect_refused("run --dry-run --model gpt2 --seed 18446744073709551616", {"--seed", "18446744073709551616"});
    EXPECT_EQ(run_preflight("run --dry-run --model gpt2 --seq 128 --seed 18446744073709551615").exit_code, 0);
    // Was: "--cp: 9223372036854775807 exceeds ...", the clamped value.
    expect_refused("memory --model llama-3-8b --cp 18446744073709551616", {"--cp", "'18446744073709551616'", "64-bit"});
    // Was: "'nan' is beyond the 64-bit integer range".
    expect_refused("memory --model gpt2 --gpus nan", {"--gpus", "'nan' is not a number"});
    expect_refused("memory --model gpt2 --zero abc", {"--zero", "'abc' is not a whole number"});
    expect_refused("memory --model gpt2 --overhead-bytes 1e-3", {"--overhead-bytes", "'1e-3' is not a whole number"});
    // Was: "Could not convert", no range.
    expect_refused("run --dry-run --model gpt2 --warmup 99999999999", {"--warmup", "0 to 100000"});
    expect_refused("run --dry-run --model gpt2 --steps 0", {"--steps", "1 to 100000"});
    // Was: "must be in [0, 1), got nan" / "got inf" / "got 1.500000".
    expect_refused("memory --model gpt2 --dropout nan", {"--dropout", "'nan' is not a finite number"});
    expect_refused("plan --model gpt2 --gpus 8 --gbs-tokens 524288 --headroom 1e400", {"--headroom", "'1e400' is beyond"});
    expect_refused("memory --model gpt2 --dropout 1.5", {"--dropout", "got 1.5"}, {"1.500000"});
    // Was: "linear rule: inf".
    expect_refused("plan --model gpt2 --gpus 8 --gbs-tokens 524288 --base-lr 1e308 --base-batch 1", {"--base-lr", "1,000"});
}

TEST(Values, TokenAndByteCountsTakeSiAndIecSuffixesExactly) {
    // "4M tokens" is how batches are quoted; the suffixes are read exactly: 4Mi = 4 x 2^20 =
    // 4,194,304, 1.5M = 1,500,000, 15T = 15 x 10^12, 2Ti = 2 x 2^40 = 2,199,023,255,552 bytes,
    // 0.5Mi = 524,288.
    const auto r = run_preflight("plan --model gpt2 --gpus 8 --gbs-tokens 4Mi --train-tokens 15T --host-memory 2Ti "
                                 "--base-lr 3e-4 --base-batch 0.5Mi --top-k 1 --format json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json doc = json::parse(r.out);
    EXPECT_EQ(doc["request"]["gbs_tokens"], 4194304);
    EXPECT_EQ(doc["request"]["host_memory_bytes"], 2199023255552LL);
    EXPECT_EQ(doc["candidates"][0]["training"]["train_tokens"], 15000000000000LL);
    EXPECT_EQ(doc["lr_advice"]["base_batch_tokens"], 524288);
    const auto m = run_preflight("plan --model gpt2 --gpus 8 --gbs-tokens 1.5M --top-k 1 --format json");
    ASSERT_EQ(m.exit_code, 0) << m.err;
    EXPECT_EQ(json::parse(m.out)["request"]["gbs_tokens"], 1500000);
    EXPECT_TRUE(json::parse(m.out)["request"]["host_memory_bytes"].is_null());
    // 4.2 x 2^20 = 4,404,019.2 is no whole token count; "MB" is no suffix of a count.
    expect_refused("plan --model gpt2 --gpus 8 --gbs-tokens 4.2Mi", {"--gbs-tokens", "'4.2Mi' is not a whole number"});
    expect_refused("plan --model gpt2 --gpus 8 --gbs-tokens 4MB", {"--gbs-tokens", "'4MB' is not a number", "Mi"});
    // A sequence of "8K" is 8,000 to some and 8,192 to others: plan fields refuse a suffix, saying so.
    expect_refused("plan --model gpt2 --gpus 8 --gbs-tokens 4Mi --seq 8K", {"--seq", "'8K'", "8,192"});
    expect_refused("memory --model gpt2 --mbs 1K", {"--mbs", "'1K'"});
}

TEST(Values, APlanFileCountOfZeroIsRefusedNotReadAsTheDefault) {
    // Was: "seq": 0 ran at the model's default 1024.
    Scratch s;
    const std::string zero = s.write("seq0.json", json{{"seq", 0}, {"mbs", 1}});
    expect_refused("run --dry-run --model gpt2 --plan " + zero, {"--plan", zero, "seq", "got 0"});
    const std::string mbs = s.write("mbs0.json", json{{"seq", 128}, {"mbs", 0}});
    expect_refused("run --dry-run --model gpt2 --plan " + mbs, {"--plan", mbs, "mbs", "got 0"});
}

// A committed runtime report with one measured figure replaced.
std::string report_with(const Scratch& s, const std::string& key, const json& value) {
    json r = json::parse(std::ifstream(std::string(PREFLIGHT_TEST_DATA_DIR) +
                                       "/measurements/h100-sxm-80gb/gpt2-medium_s512_b8_none_bf16_eager.json"));
    r["measured"][key] = value;
    return s.write("reports/r.json", r);
}

TEST(Values, AReportsImpossibleFigureIsRefusedByCheckAndCalibrate) {
    // Was: a step time of -1 or 0 was dropped (PASS), 1e308 printed "-nan %", a device peak "x"
    // passed and -1 was compared as "-0.000 GiB".
    for (const auto& [key, value] : {std::pair<std::string, json>{"step_time_s", -1}, {"step_time_s", 0},
                                     {"step_time_s", 1e308}, {"step_time_s", 1e-300}, {"device_used_peak_bytes", "x"},
                                     {"device_used_peak_bytes", -1}, {"tracked_peak_bytes", 1.5}}) {
        SCOPED_TRACE(key + " = " + value.dump());
        Scratch s;
        const std::string file = report_with(s, key, value);
        const std::string dir = (s.dir() / "reports").string();
        expect_refused("validate --check " + dir + " --no-report-files", {file, "measured." + key});
        expect_refused("calibrate " + dir + " --gpu h100-sxm-80gb", {file, "measured." + key});
    }
}

// The committed H100 runtime reports copied to `s`/runs with every measured step time set to `step_s`.
std::string runs_with_step_time(const Scratch& s, double step_s) {
    const fs::path from = fs::path(PREFLIGHT_TEST_DATA_DIR) / "measurements" / "h100-sxm-80gb";
    for (const auto& e : fs::directory_iterator(from)) {
        const std::string name = e.path().filename().string();
        if (e.path().extension() != ".json" || name.find(".pytorch.") != std::string::npos) continue;
        json r = json::parse(std::ifstream(e.path()));
        if (!r.contains("measured") || !r["measured"].contains("step_time_s")) continue;
        r["measured"]["step_time_s"] = step_s;
        s.write("runs/" + name, r);
    }
    return (s.dir() / "runs").string();
}

TEST(Values, CalibrateOnRunsItCannotFitWritesNoSpecAndPrintsNothing) {
    // Was (audit of 2026-11-29): every step time 1e-6 s fitted a spec with a 3.7e-14 GEMM
    // half-efficiency width, exit 0, no word although the held-out error was 100 % before and
    // after; at 1e7 s the fitted table was printed and then the spec refused (exit 2).
    for (const double step_s : {1e-6, 1e7}) {
        SCOPED_TRACE(step_s);
        Scratch s;
        const std::string dir = runs_with_step_time(s, step_s), spec = (s.dir() / "spec.json").string();
        expect_refused("calibrate " + dir + " --write-spec " + spec, {"--write-spec", spec, "not written"});
        EXPECT_FALSE(fs::exists(spec));
    }
    // Without --write-spec the fit is printed, with a warning on stderr.
    Scratch s;
    const auto r = run_preflight("calibrate " + runs_with_step_time(s, 1e-6));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("preflight: warning:"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("100.0 % (P50) after the fit"), std::string::npos) << r.err;
}

TEST(Values, ARunReportWithoutItsMeasuredOrPlanIsRefusedNotSkipped) {
    // Was: skipped as "another kind of document"; alone in its folder, "holds no run reports".
    for (const char* key : {"measured", "plan"}) {
        SCOPED_TRACE(key);
        Scratch s;
        const std::string kept = report_with(s, "step_time_s", 0.1);
        json r = json::parse(std::ifstream(kept));
        r.erase(key);
        const std::string file = s.write("reports/broken.json", r);
        expect_refused("validate --check " + (s.dir() / "reports").string() + " --no-report-files",
                       {file, std::string(key) + " must be an object"});
    }
}

TEST(Values, AReportsUnknownModelOrGpuNamesItsKeyNotAFlag) {
    // Was: "--model: 'no-such-model' ...", a flag validate never took.
    for (const char* key : {"model", "gpu"}) {
        SCOPED_TRACE(key);
        Scratch s;
        json r = json::parse(std::ifstream(report_with(s, "step_time_s", 0.1)));
        r[key]["name"] = "no-such-thing";
        const std::string file = s.write("reports/r.json", r);
        expect_refused("validate --check " + (s.dir() / "reports").string() + " --no-report-files",
                       {file, std::string(key) + ".name", "no-such-thing"}, {"--model", "--gpu"});
    }
}

TEST(Values, AGateWithAnUnknownSourceIsRefused) {
    // Was: exit 1, a gate over 0 runs of source "bogus".
    Scratch s;
    report_with(s, "step_time_s", 0.1);
    const std::string gate = s.write("reports/gate.json", json{{"source", "bogus"}, {"peak_abs_error_p50_max", 0.01}});
    expect_refused("validate --check " + (s.dir() / "reports").string() + " --no-report-files", {gate, "source", "bogus"});
}

TEST(Values, ACatalogEntryThatDoesNotLoadBlamesTheDataDir) {
    // Was: "--model: 'dd/models/broken.json' is not valid JSON" from `models`, which takes no --model.
    Scratch s;
    s.write("dd/models/gpt2.json", catalog("models", "gpt2"));
    const std::string broken = s.write_text("dd/models/broken.json", "{\n");
    const std::string dd = (s.dir() / "dd").string();
    expect_refused("models --data-dir " + dd, {"--data-dir", broken}, {"--model"});
    // A value out of range is named with its file too (was: "--data-dir: vocab_size: must be positive, got 0").
    json zero_vocab = catalog("models", "gpt2");
    zero_vocab["vocab_size"] = 0;
    const std::string bad = s.write("dd2/models/tiny.json", zero_vocab);
    expect_refused("models --data-dir " + (s.dir() / "dd2").string(), {"--data-dir", bad, "vocab_size"});
    json no_memory = catalog("gpus", "h100-sxm-80gb");
    no_memory["memory_bytes"] = 0;
    const std::string gpu = s.write("dd3/gpus/empty.json", no_memory);
    expect_refused("gpus --data-dir " + (s.dir() / "dd3").string(), {"--data-dir", gpu, "memory_bytes"});
}

TEST(Values, ATimelineTheFormatCannotShowIsRefused) {
    // Was: --timeline silently left out of the CSV.
    expect_refused("memory --model gpt2 --timeline --format csv", {"--timeline", "CSV"});
}

TEST(Values, ARopeScalingTheRuntimeCannotComputeIsRefusedBeforeTheDevice) {
    // Was: accepted by the dry run and exit 3 (no GPU) from `run`, the config never named.
    Scratch s;
    json cfg = catalog("models", "llama-3.2-1b");
    cfg["rope_scaling"]["rope_type"] = "weird";
    const std::string file = s.write("weird.json", cfg);
    expect_refused("run --dry-run --seq 128 --model " + file, {"--model", file, "rope_scaling.rope_type", "'weird'"});
    expect_refused("run --seq 128 --model " + file, {"--model", file, "rope_scaling.rope_type"});
    EXPECT_EQ(run_preflight("memory --seq 128 --model " + file).exit_code, 0);  // memory does not depend on it
}

TEST(Values, Phi3RunsWithItsLongRopeAndPartialRotary) {
    // Phi-3's layer is the runtime's own (fused qkv_proj and gate_up_proj): Phi-4 runs. Phi-3.5's
    // longrope has no "factor" yet rescales every frequency (short_factor) and cos/sin at any length:
    // refused by run until 2026-12-03 (before that, run as plain RoPE); now run with its factors, one
    // per rotary frequency (Phi-4's head_dim 128: 64), which every command checks.
    Scratch s;
    EXPECT_EQ(run_preflight("run --dry-run --seq 1024 --model phi-4").exit_code, 0);
    json cfg = catalog("models", "phi-4");
    cfg["rope_scaling"] = {{"type", "longrope"}, {"short_factor", json(std::vector<double>(64, 1.0))},
                           {"long_factor", json(std::vector<double>(64, 4.0))}};
    cfg["original_max_position_embeddings"] = 4096;
    const std::string file = s.write("longrope.json", cfg);
    const auto longrope = run_preflight("run --dry-run --seq 8192 --model " + file);
    EXPECT_EQ(longrope.exit_code, 0);
    // factor = 16,384 / 4,096 = 4: sqrt(1 + ln 4 / ln 4096) = sqrt(7 / 6) = 1.0801.
    EXPECT_NE(longrope.out.find("# RoPE: longrope with its long factors (seq 8192 > original_max_position_embeddings "
                                "4096), cos and sin x 1.0801"),
              std::string::npos)
        << longrope.out;
    // Phi-4-mini's layout: 0.75 of each head rotated (96 of 128), so 48 factors each.
    json mini = cfg;
    mini["partial_rotary_factor"] = 0.75;
    mini["rope_scaling"]["short_factor"] = json(std::vector<double>(48, 1.0));
    mini["rope_scaling"]["long_factor"] = json(std::vector<double>(48, 4.0));
    EXPECT_EQ(run_preflight("run --dry-run --seq 8192 --model " + s.write("mini.json", mini)).exit_code, 0);
    cfg["rope_scaling"]["short_factor"] = json::array();
    const std::string bad = s.write("longrope-empty.json", cfg);
    expect_refused("run --dry-run --seq 1024 --model " + bad, {"--model", bad, "rope_scaling.short_factor", "64 numbers"});
    expect_refused("memory --seq 1024 --dp 8 --zero 3 --model " + bad, {"rope_scaling.short_factor"});
    cfg["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
    const std::string dynamic = s.write("dynamic.json", cfg);
    expect_refused("run --dry-run --seq 1024 --model " + dynamic, {"--model", dynamic, "rope_scaling.rope_type", "'dynamic'"});
    EXPECT_EQ(run_preflight("memory --seq 1024 --dp 8 --zero 3 --model " + dynamic).exit_code, 0);  // memory does not depend on it
    // Phi-3-mini-4k attends through 2,047 keys on every layer: the runtime's attention has that window
    // (was: refused past 2,047 tokens).
    const auto phi3 = run_preflight("run --dry-run --seq 4096 --model phi-3-mini-4k");
    EXPECT_EQ(phi3.exit_code, 0);
    EXPECT_NE(phi3.out.find("# attention: through the model's sliding window on every layer, each query sees itself "
                            "and the 2046 tokens before it"),
              std::string::npos)
        << phi3.out;
    // OLMo 3 (Olmo3Config: every fourth layer full, the others through 4,096 keys) past its window
    // (was: refused, naming --seq): the header says which layers see what.
    const json olmo3 = {{"model_type", "olmo3"},     {"hidden_size", 256}, {"num_hidden_layers", 8},
                        {"num_attention_heads", 4},  {"intermediate_size", 512}, {"vocab_size", 1000},
                        {"max_position_embeddings", 16384}};
    const auto o3 = run_preflight("run --dry-run --seq 8192 --model " + s.write("olmo3.json", olmo3));
    EXPECT_EQ(o3.exit_code, 0) << o3.err;
    EXPECT_NE(o3.out.find("# attention: one layer in 4 (layers 4, 8, ...) to the whole sequence, the 6 others "
                          "through the model's sliding window, each query seeing itself and the 4095 tokens before it"),
              std::string::npos)
        << o3.out;
}

TEST(Values, AnActivationTheRuntimeDoesNotComputeIsRefusedByRunOnly) {
    // Was: any hidden_act accepted, and `run` computed silu in its place.
    Scratch s;
    json llama = catalog("models", "llama-3.2-1b");
    llama["hidden_act"] = "gelu";
    const std::string file = s.write("geglu.json", llama);
    expect_refused("run --dry-run --seq 128 --model " + file, {"--model", file, "hidden_act", "'gelu'"});
    EXPECT_EQ(run_preflight("memory --seq 128 --model " + file).exit_code, 0);  // same shapes, same memory
    json gpt2 = catalog("models", "gpt2");
    gpt2["activation_function"] = "relu";
    const std::string relu = s.write("relu.json", gpt2);
    expect_refused("run --dry-run --seq 128 --model " + relu, {"--model", relu, "activation_function", "'relu'"});
    // GeLU's exact form runs as the tanh approximation (MPT's configs name "gelu").
    EXPECT_EQ(run_preflight("run --dry-run --seq 128 --model mpt-125m").exit_code, 0);
    llama["hidden_act"] = 7;
    expect_refused("memory --model " + s.write("seven.json", llama), {"hidden_act", "must be a string"});
}

TEST(Values, TheDryRunSaysWhetherThePlanFitsTheGpu) {
    // Was: exit 0 and no verdict for a 1.5 TiB plan. GPT-2's logits alone at mbs 4096, seq 1024:
    // 4096 x 1024 x 50,257 x 2 B = 393 GiB, far over an 80 GB H100.
    const auto big = run_preflight("run --dry-run --model gpt2 --mbs 4096");
    EXPECT_EQ(big.exit_code, 0) << big.err;
    EXPECT_NE(big.out.find("fit: DOES NOT FIT on h100-sxm-80gb (79.18 GiB)"), std::string::npos) << big.out;
    const auto small = run_preflight("run --dry-run --model gpt2");
    EXPECT_NE(small.out.find("fit: fits on h100-sxm-80gb (79.18 GiB)"), std::string::npos) << small.out;
}

}  // namespace
}  // namespace preflight
