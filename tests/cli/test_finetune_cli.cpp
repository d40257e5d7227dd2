// Fine-tuning and offload through the built binary: the QLoRA plan on one RTX 4090 fits and
// prints its memory and step time; the full fine-tune explains why nothing fits and what would.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "run_cli.hpp"

namespace {

using preflight::test::run_preflight;

const std::string kQlora =
    "plan --model llama-3-8b --gpu rtx-4090 --gpus 1 --finetune qlora --gbs-tokens 65536 --seq 2048";
const std::string kFull =
    "plan --model llama-3-8b --gpu rtx-4090 --gpus 1 --finetune full --gbs-tokens 65536 --seq 2048";

bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

TEST(FinetuneCli, QloraOnOneRtx4090Fits) {
    const auto r = run_preflight(kQlora);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_TRUE(has(r.out, "# recommendation (rank 1)"));
    EXPECT_TRUE(has(r.out, "--finetune qlora"));
    EXPECT_TRUE(has(r.out, "step time:"));
    EXPECT_TRUE(has(r.out, "memory:      peak"));
    EXPECT_TRUE(has(r.out, "NF4"));
    EXPECT_TRUE(has(r.out, "QLoRA dequantisation"));
}

TEST(FinetuneCli, QloraJsonPeakUnderTheLimit) {
    const auto r = run_preflight(kQlora + " --format json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    const auto& c = j["candidates"][0];
    EXPECT_EQ(c["plan"]["finetune"], "qlora");
    EXPECT_LE(c["memory"]["peak_bytes"].get<std::int64_t>(), j["request"]["limit_bytes"].get<std::int64_t>());
    EXPECT_GT(c["throughput"]["step_time_s"].get<double>(), 0.0);
    // PEFT's QLoRA recipe is searched once (bf16 autocast), with and without checkpointing only.
    for (const auto& cand : j["candidates"]) {
        EXPECT_EQ(cand["plan"]["precision"], "bf16-mixed");
        EXPECT_NE(cand["plan"]["recompute"], "selective");
    }
}

TEST(FinetuneCli, FullFineTuneExplainsWhyNothingFitsAndWhatWould) {
    const auto r = run_preflight(kFull);
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_TRUE(has(r.out, "NOTHING FITS"));
    EXPECT_TRUE(has(r.out, "even at its smallest"));
    EXPECT_TRUE(has(r.out, "# the smallest change that would fit"));
    EXPECT_TRUE(has(r.out, "--finetune lora"));
    // ZeRO-Infinity is DeepSpeed's: the megatron profile (the default) refuses parameter offload.
    EXPECT_FALSE(has(r.out, "--offload params"));
    EXPECT_TRUE(has(run_preflight(kFull + " --framework deepspeed").out, "--offload params"));
}

TEST(FinetuneCli, MemoryShowsHostBytesWhenOffloading) {
    const auto r = run_preflight(
        "memory --model llama-3-8b --gpu h100-sxm-80gb --seq 2048 --zero 2 --recompute full --offload optimizer "
        "--framework deepspeed");
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_TRUE(has(r.out, "host memory:")) << r.out;
    const auto j = nlohmann::json::parse(
        run_preflight("memory --model llama-3-8b --gpu h100-sxm-80gb --seq 2048 --zero 2 --offload optimizer "
                      "--framework deepspeed --format json")
            .out);
    // fp32 master, fp32 gradient partition and two moments (16 B x 8,030,261,248 at dp 1), and
    // DeepSpeed's host staging buffers (stage_1_and_2.py): the bit16 partition copy (2 B each) and
    // temp_grad_buffer_for_cpu_offload of the largest parameter (2 B x 525,336,576).
    EXPECT_EQ(j["memory"]["host_bytes_per_gpu"], 8'030'261'248LL * 18 + 525'336'576LL * 2);
    EXPECT_EQ(j["plan"]["offload"], "optimizer");
}

TEST(FinetuneCli, EmitPeftConfig) {
    const auto r = run_preflight(kQlora + " --lora-rank 16 --lora-targets all-linear --emit peft");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["lora_config"]["r"], 16);
    EXPECT_EQ(j["lora_config"]["target_modules"].size(), 7u);
    EXPECT_EQ(j["bnb_config"]["load_in_4bit"], true);
}

TEST(FinetuneCli, BadExtensionFlagsNameTheFlag) {
    auto r = run_preflight("memory --model llama-3-8b --lora-rank 8");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_TRUE(has(r.err, "--lora-rank")) << r.err;
    r = run_preflight("memory --model llama-3-8b --finetune lora --lora-targets q,x");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_TRUE(has(r.err, "--lora-targets")) << r.err;
    r = run_preflight("memory --model llama-3-8b --ep 2");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_TRUE(has(r.err, "--ep")) << r.err;
    r = run_preflight("memory --model llama-3-8b --pp 4 --pp-schedule interleaved --vpp 3 --grad-acc 8");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_TRUE(has(r.err, "--vpp")) << r.err;
    r = run_preflight("memory --model llama-3-8b --offload params --zero 1");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_TRUE(has(r.err, "--offload")) << r.err;
}

}  // namespace
