// Input robustness through the binary (audit of fix60): a value nested 100,000 levels deep in
// any JSON file a user hands us (was: a segfault, exit 139, or minutes and gigabytes for a
// ds_config), names that would inject lines into an emitted script, a rope_theta cast past
// int64, and counts with more digits than a double holds.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "user_files.hpp"

namespace preflight {
namespace {

using nlohmann::json;
using test::catalog;
using test::expect_refused;
using test::run_preflight;
using test::Scratch;

std::string deep() { return std::string(100000, '[') + std::string(100000, ']'); }

// `j` written with the number 123456.5 replaced by 100,000 nested arrays.
std::string write_deep(const Scratch& s, const std::string& name, const json& j) { return s.write(name, j, deep()); }

// Single-quoted for the shell the tests run the binary through.
std::string quoted(const std::string& text) {
    std::string q = "'";
    for (char c : text) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

void expect_short_refusal(const std::string& args, const std::string& file) {
    expect_refused(args, {file, "deeper than 64 levels (limits::kMaxJsonDepth)"});
    const auto r = run_preflight(args, "timeout 60 env");
    EXPECT_LT(r.err.size(), 1000u) << r.err.substr(0, 2000);
}

TEST(Nesting, DeepValueInEveryUserJsonFileIsExit2WithAShortMessage) {
    Scratch s;
    json model = catalog("models", "llama-3-8b");
    model["hidden_size"] = 123456.5;
    const std::string m = write_deep(s, "deep-model.json", model);
    expect_short_refusal("memory --model " + m, m);
    json gpu = catalog("gpus", "h100-sxm-80gb");
    gpu["memory_bytes"] = 123456.5;
    const std::string g = write_deep(s, "deep-gpu.json", gpu);
    expect_short_refusal("memory --model gpt2 --gpu " + g, g);
    const std::string p = write_deep(s, "deep-plan.json", json{{"seq", 123456.5}});
    expect_short_refusal("memory --model gpt2 --plan " + p, p);
    const std::string r = write_deep(s, "runs/run.json", json{{"mode", "dry-run"}, {"status", 123456.5}});
    expect_short_refusal("validate --check " + s.path("runs") + " --no-report-files", r);
    const std::string c = write_deep(s, "data/models/deep.json", model);
    expect_short_refusal("models --data-dir " + s.path("data"), c);
    const std::string d = s.write_text("ds.json", "{\"train_micro_batch_size_per_gpu\": " + deep() + "}");
    expect_short_refusal("memory --from " + d + " --model llama-3-8b --gpus 8", d);
}

TEST(Nesting, AWrongValueIsShownInAFewCharacters) {
    Scratch s;
    json model = catalog("models", "llama-3-8b");
    model["hidden_size"] = json::array();
    for (int i = 0; i < 100000; ++i) model["hidden_size"].push_back(i);
    const std::string m = s.write("wide.json", model);
    expect_refused("memory --model " + m, {m, "hidden_size: must be an integer, got [0, 1, 2", "(an array of 100000 values)"});
    const auto r = run_preflight("memory --model " + m);
    EXPECT_LT(r.err.size(), 600u) << r.err.substr(0, 2000);
}

TEST(Nesting, RopeThetaBeyondItsBoundIsRefusedNotCast) {
    Scratch s;
    json model = catalog("models", "llama-3-8b");
    model["rope_theta"] = 1e20;  // was --rotary-base -9223372036854775808
    const std::string m = s.write("big-theta.json", model);
    expect_refused("plan --model " + m + " --gpus 8 --gbs-tokens 1Mi --emit megatron", {m, "rope_theta", "1e12"});
}

TEST(Nesting, ModelAndGpuNamesCannotInjectLines) {
    Scratch s;
    const json model = catalog("models", "llama-3-8b");
    const std::string evil = s.write("a\ntouch pwned; #.json", model);
    expect_refused("plan --model " + quoted(evil) + " --gpus 8 --gbs-tokens 1Mi --emit megatron",
                   {"name", "control character"});
    json gpu = catalog("gpus", "h100-sxm-80gb");
    gpu["display_name"] = "H100\n# fits: yes";
    const std::string g = s.write("g.json", gpu);
    expect_refused("memory --model gpt2 --gpu " + g, {g, "display_name", "control character"});
    // Quotes are no control characters: the name stays on the script's comment line.
    const std::string quotes = s.write("a\"b'c $(touch pwned).json", model);
    const auto r = run_preflight("plan --model " + quoted(quotes) + " --gpus 8 --gbs-tokens 1Mi --emit megatron");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("# Megatron-LM launch (pretrain_gpt.py) from preflight plan: a\"b'c $(touch pwned) on 8 GPUs", 0), 0u)
        << r.out.substr(0, 300);
    EXPECT_EQ(r.out.find("\ntouch"), std::string::npos);
    EXPECT_EQ(r.out.find('#', 1), std::string::npos) << r.out;  // the one comment is the first line
}

TEST(Nesting, CountsAreReadExactlyFromTheirDigits) {
    // A double rounds these to whole numbers: 1048575.99999999999 was planned as 1,048,576.
    for (const char* v : {"1048575.99999999999", "4194304.0000000001", "4.1943040000000001e6", "1e-1"})
        expect_refused(std::string("plan --model llama-3-8b --gpus 8 --gbs-tokens ") + v, {"--gbs-tokens", v, "whole"});
    expect_refused("memory --model gpt2 --seq 1024.00000000000001", {"--seq", "1024.00000000000001", "whole"});
    expect_refused("memory --model gpt2 --seq 1e999999999999", {"--seq", "64-bit"});
    const auto ok = run_preflight("memory --model gpt2 --seq 1.024e3 --mbs 2.0 --format json");
    ASSERT_EQ(ok.exit_code, 0) << ok.err;
    const json j = json::parse(ok.out);
    EXPECT_EQ(j["plan"]["seq"], 1024);
    EXPECT_EQ(j["plan"]["mbs"], 2);
    const auto gbs = run_preflight("plan --model llama-3-8b --gpus 8 --gbs-tokens 0.4194304e7 --format json");
    ASSERT_EQ(gbs.exit_code, 0) << gbs.err;
    EXPECT_EQ(json::parse(gbs.out)["request"]["gbs_tokens"], 4194304);
}

}  // namespace
}  // namespace preflight
