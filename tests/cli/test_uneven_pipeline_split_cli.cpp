// --pp-first-stage-layers / --pp-last-stage-layers on the command line (docs/interface.md):
// Megatron-LM's --decoder-first/last-pipeline-num-layers read from a launch script, the refusals
// (exit 2 naming the flag), and plan --emit megatron read back with --from.
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

// A 30-layer Llama-like model at tp 2, pp 4, first 6 and last 6: Megatron-LM builds 6 / 9 / 9 / 6.
const std::string kScript =
    "torchrun pretrain_gpt.py --num-layers 30 --hidden-size 4096 --num-attention-heads 32 --ffn-hidden-size 14336 "
    "--seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64 "
    "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 6 "
    "--decoder-last-pipeline-num-layers 6 --bf16 --use-distributed-optimizer --swiglu --normalization RMSNorm "
    "--group-query-attention --num-query-groups 8 --vocab-size 128256 --untie-embeddings-and-output-weights "
    "--position-embedding-type rope\n";

const std::string kLayout = "memory --model llama-3-8b --gpu h100-sxm-80gb --seq 4096 --grad-acc 8 --pp 4";

// 1F1B at 8 micro-batches: stage s holds min(4 - s, 8) = 4, 3, 2, 1 of them. Layer units 6 x 4 = 24,
// 9 x 3 = 27, 9 x 2 = 18, 6 x 1 = 6 (the even 8 / 8 / 7 / 7 would be 32, 24, 14, 7): stage 1, which
// also holds more weights than stage 0's 6 layers and embedding, is the most loaded.
TEST(CliUnevenPipelineSplit, LaunchScriptSplitIsPlanned) {
    Scratch s;
    const auto r = run_preflight("memory --from " + s.write_text("t.sh", kScript) + " --gpus 64 --format json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err.find("not modelled"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("does not divide"), std::string::npos) << r.err;
    const json j = json::parse(r.out);
    EXPECT_EQ(j.at("plan").at("pp_first_stage_layers"), 6);
    EXPECT_EQ(j.at("plan").at("pp_last_stage_layers"), 6);
    EXPECT_EQ(j.at("memory").at("pipeline_stage"), 1);
    EXPECT_EQ(j.at("memory").at("layers_on_stage"), 9);
    EXPECT_EQ(j.at("memory").at("micro_batches_in_flight"), 3);
}

TEST(CliUnevenPipelineSplit, RefusedNamingTheFlag) {
    expect_refused(kLayout + " --pp-first-stage-layers 20 --pp-last-stage-layers 20",
                   {"--pp-first-stage-layers", "places 40 layers; the model has 32"});
    expect_refused(kLayout + " --pp-first-stage-layers 5 --pp-last-stage-layers 6",
                   {"--pp-first-stage-layers", "2 does not divide 21"});
    expect_refused(kLayout + " --pp-last-stage-layers 5 --framework torchtitan",
                   {"--pp-last-stage-layers", "--framework megatron"});
    expect_refused(kLayout + " --pp-first-stage-layers 6 --pp-last-stage-layers 6 --pp-schedule interleaved --vpp 4",
                   {"--pp-first-stage-layers", "do not split into --vpp 4"});
    expect_refused("plan --model llama-3-8b --gpu h100-sxm-80gb --gpus 24 --gbs-tokens 393216 --seq 4096 "
                   "--pp-first-stage-layers 10 --pp-last-stage-layers 10",
                   {"--pp-first-stage-layers", "--pp pinned"});
}

// 32 layers over pp 3: 10 / 12 / 10. plan --emit megatron prints Megatron's flags; --from reads them back.
TEST(CliUnevenPipelineSplit, EmitMegatronRoundTrip) {
    const auto emitted = run_preflight(
        "plan --model llama-3-8b --gpu h100-sxm-80gb --gpus 24 --gbs-tokens 393216 --seq 4096 --pp 3 "
        "--pp-first-stage-layers 10 --pp-last-stage-layers 10 --emit megatron");
    ASSERT_EQ(emitted.exit_code, 0) << emitted.err;
    EXPECT_NE(emitted.out.find("--decoder-first-pipeline-num-layers 10"), std::string::npos) << emitted.out;
    EXPECT_NE(emitted.out.find("--decoder-last-pipeline-num-layers 10"), std::string::npos) << emitted.out;
    Scratch s;
    const auto back = run_preflight("memory --from " + s.write_text("emitted.sh", emitted.out) + " --format json");
    ASSERT_EQ(back.exit_code, 0) << back.err;
    const json j = json::parse(back.out);
    EXPECT_EQ(j.at("plan").at("pp"), 3);
    EXPECT_EQ(j.at("plan").at("pp_first_stage_layers"), 10);
    EXPECT_EQ(j.at("plan").at("pp_last_stage_layers"), 10);
}

}  // namespace
}  // namespace preflight
