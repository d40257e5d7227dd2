// --fp8-param-gather on the command line (docs/interface.md): memory with and without it on
// NVIDIA's fp8 Llama-3-8B example layout (Megatron-LM d98e8a6 examples/llama/
// train_llama3_8b_h100_fp8.sh: tp 1, seq 8192, micro-batch 1, global batch 128 on 8 H100s, the
// distributed optimizer), the refusals (exit 2 naming the flag), and plan --emit megatron read back
// with --from.
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

const std::string kLayout = "memory --model llama-3-8b --gpu h100-sxm-80gb --seq 8192 --mbs 1 --grad-acc 16 --dp 8";
const std::string kExample = kLayout + " --zero 1 --precision fp8-mixed";

json memory(const std::string& args) {
    const auto r = run_preflight(args + " --format json");
    EXPECT_LE(r.exit_code, 1) << args << "\n" << r.err;
    return json::parse(r.out, nullptr, false);
}

// 2 B less per decoder-layer GEMM weight: 2 x 32 x 218,103,808 B = 13 GiB (the planner test
// derives it); the example fits with the flag, as it runs.
TEST(CliFp8ParamGather, NvidiaExampleFitsWithTheFlag) {
    const json off = memory(kExample), on = memory(kExample + " --fp8-param-gather");
    ASSERT_FALSE(off.is_discarded());
    ASSERT_FALSE(on.is_discarded());
    EXPECT_FALSE(off.at("plan").contains("fp8_param_gather"));
    EXPECT_EQ(on.at("plan").at("fp8_param_gather"), true);
    const auto weights = [](const json& j) { return j.at("memory").at("per_gpu_bytes").at("weights").get<std::int64_t>(); };
    EXPECT_EQ(weights(off) - weights(on), 13LL << 30);
    EXPECT_EQ(off.at("memory").at("peak_bytes").get<std::int64_t>() - on.at("memory").at("peak_bytes").get<std::int64_t>(),
              13LL << 30);
    EXPECT_EQ(off.at("memory").at("fits"), false);
    EXPECT_EQ(on.at("memory").at("fits"), true);
}

TEST(CliFp8ParamGather, RefusedNamingTheFlag) {
    const std::string on = kExample + " --fp8-param-gather";
    expect_refused(kLayout + " --zero 1 --precision bf16-mixed --fp8-param-gather", {"--fp8-param-gather", "fp8-mixed"});
    expect_refused(kLayout + " --zero 0 --precision fp8-mixed --fp8-param-gather",
                   {"--fp8-param-gather", "distributed optimizer"});
    expect_refused(kLayout + " --zero 2 --precision fp8-mixed --fp8-param-gather", {"--fp8-param-gather", "Megatron-FSDP"});
    expect_refused(on + " --framework torchtitan", {"--fp8-param-gather", "--framework megatron"});
    expect_refused(on + " --framework preflight-runtime", {"--fp8-param-gather", "--framework megatron"});
    expect_refused("plan --model llama-3-8b --gpu h100-sxm-80gb --gpus 8 --gbs-tokens 1Mi --seq 8192 --fp8-param-gather",
                   {"--fp8-param-gather", "--zero 1"});
}

// plan --emit megatron prints Megatron's flag; --from reads it back into the plan.
TEST(CliFp8ParamGather, EmitMegatronRoundTrip) {
    const auto emitted = run_preflight(
        "plan --model llama-3-8b --gpu h100-sxm-80gb --gpus 8 --gbs-tokens 1Mi --seq 8192 --tp 1 --pp 1 "
        "--precision fp8-mixed --zero 1 --fp8-param-gather --emit megatron");
    ASSERT_EQ(emitted.exit_code, 0) << emitted.err;
    EXPECT_NE(emitted.out.find("--fp8-param-gather"), std::string::npos) << emitted.out;
    Scratch s;
    const json back = memory("memory --from " + s.write_text("emitted.sh", emitted.out));
    ASSERT_FALSE(back.is_discarded());
    EXPECT_EQ(back.at("plan").at("fp8_param_gather"), true);
    EXPECT_EQ(back.at("plan").at("zero"), 1);
    EXPECT_EQ(back.at("plan").at("precision"), "fp8-mixed");
}

}  // namespace
}  // namespace preflight
