// `preflight memory`, `models`, `gpus` as scripts use them: the JSON keys of the
// contract (docs/interface.md), exit codes, and error messages that name the flag.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>
#include <vector>

#include <unistd.h>


#include <nlohmann/json.hpp>

#include "preflight/planner/frameworks.hpp"
#include "run_cli.hpp"
#include "user_files.hpp"

namespace preflight {
namespace {

using test::run_preflight;

const char* kIssueCommand =
    "memory --model llama-3-8b --gpu h100-sxm-80gb --zero 1 --dp 8 --seq 4096 --recompute selective";

TEST(CliMemory, JsonCarriesEveryContractKey) {
    const auto r = run_preflight(std::string(kIssueCommand) + " --format json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j.at("schema_version"), 1);
    EXPECT_EQ(j.at("model").at("name"), "llama-3-8b");
    EXPECT_EQ(j.at("model").at("params"), 8'030'261'248LL);
    EXPECT_EQ(j.at("model").at("params_active"), 8'030'261'248LL);
    EXPECT_EQ(j.at("gpu").at("name"), "h100-sxm-80gb");
    EXPECT_TRUE(j.at("gpu").at("memory_bytes").is_number_integer());
    const auto& plan = j.at("plan");
    for (const char* k : {"seq", "mbs", "grad_acc", "dp", "tp", "pp", "sp", "zero", "recompute", "precision",
                          "optimizer", "attention", "dropout"})
        EXPECT_TRUE(plan.contains(k)) << k;
    EXPECT_EQ(plan.at("seq"), 4096);
    EXPECT_EQ(plan.at("dp"), 8);
    EXPECT_EQ(plan.at("zero"), 1);
    EXPECT_EQ(plan.at("recompute"), "selective");
    EXPECT_EQ(plan.at("precision"), "bf16-mixed");
    const auto& mem = j.at("memory");
    const auto& cats = mem.at("per_gpu_bytes");
    std::int64_t sum = 0;
    for (const char* k : {"weights", "master_weights", "gradients", "optimizer_states", "activations",
                          "logits_and_loss", "buffers", "overhead"}) {
        ASSERT_TRUE(cats.at(k).is_number_integer()) << k;
        sum += cats.at(k).get<std::int64_t>();
    }
    EXPECT_EQ(mem.at("peak_bytes").get<std::int64_t>(), sum);
    EXPECT_TRUE(mem.at("activations_per_layer_bytes").is_number_integer());
    EXPECT_TRUE(mem.at("peak_phase").is_string());
    EXPECT_EQ(mem.at("fits"), true);
    // ZeRO-1 over 8: weights and grads whole (2 B/param), master + moments sharded (12 B/param / 8).
    EXPECT_EQ(cats.at("weights"), 2 * 8'030'261'248LL);
    EXPECT_EQ(cats.at("gradients"), 2 * 8'030'261'248LL);
    EXPECT_EQ(cats.at("master_weights"), 4 * (8'030'261'248LL / 8));
    EXPECT_EQ(cats.at("optimizer_states"), 8 * (8'030'261'248LL / 8));
}

// Audit 62 item 8: "plan" holds every plan flag, resolved; the extension keys were left out at
// their defaults (KeyError in scripts). The adapters' settings without adapters are null. The
// report reads back as a --plan file to the same plan, and so does a LoRA plan's.
TEST(CliMemory, JsonPlanHoldsEveryPlanFlagAtItsDefaultToo) {
    test::Scratch s;
    const auto r = run_preflight(std::string(kIssueCommand) + " --format json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto plan = nlohmann::json::parse(r.out).at("plan");
    EXPECT_EQ(plan.at("pp_schedule"), "1f1b");
    EXPECT_EQ(plan.at("vpp"), 1);
    EXPECT_EQ(plan.at("cp"), 1);
    EXPECT_EQ(plan.at("ep"), 1);
    EXPECT_EQ(plan.at("moe_capacity_factor"), 1.0);
    EXPECT_EQ(plan.at("offload"), "none");
    EXPECT_EQ(plan.at("finetune"), "full");
    for (const char* k : {"lora_rank", "lora_alpha", "lora_targets", "lora_dropout"}) EXPECT_TRUE(plan.at(k).is_null()) << k;
    for (const std::string& extra : {std::string(), std::string(" --finetune lora --lora-rank 16")}) {
        const auto first = run_preflight(std::string(kIssueCommand) + extra + " --format json");
        ASSERT_EQ(first.exit_code, 0) << first.err;
        const std::string file = s.write_text("report.json", first.out);
        const auto again = run_preflight("memory --plan " + file + " --format json");
        ASSERT_EQ(again.exit_code, 0) << again.err;
        EXPECT_EQ(nlohmann::json::parse(again.out).at("plan"), nlohmann::json::parse(first.out).at("plan")) << extra;
    }
    // run --plan reads the report as well (its runtime refuses LoRA, so the plan without it).
    const auto first = run_preflight(std::string(kIssueCommand) + " --format json");
    const std::string file = s.write_text("report.json", first.out);
    const auto run = run_preflight("run --dry-run --plan " + file + " --format json");
    ASSERT_EQ(run.exit_code, 0) << run.err;
    EXPECT_EQ(nlohmann::json::parse(run.out).at("plan"), nlohmann::json::parse(first.out).at("plan"));
}

TEST(CliMemory, TableShowsEveryCategoryAndTheVerdict) {
    const auto r = run_preflight(kIssueCommand);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const char* k : {"weights", "master_weights", "gradients", "optimizer_states", "activations",
                          "logits_and_loss", "buffers", "overhead", "peak", "GiB", "peak phase", "FITS"})
        EXPECT_NE(r.out.find(k), std::string::npos) << k;
}

TEST(CliMemory, CsvHasHeaderAndCategories) {
    const auto r = run_preflight("memory --model gpt2 --format csv");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("category,bytes,fraction_of_capacity\n", 0), 0u);
    EXPECT_NE(r.out.find("\npeak,"), std::string::npos);
    // The verdict's rows follow the figures (audit 62 item 1); no range under the default profile.
    EXPECT_NE(r.out.find("\nactivations_per_layer,"), std::string::npos);
    const std::string tail = r.out.substr(r.out.find("\ndevice_peak,") + 1);
    EXPECT_EQ(tail, "device_peak,3680501760,0.0432911\ndevice_peak_range_low,,\ndevice_peak_range_high,,\n"
                    "fits,1,\nverdict,fits,\n");
}

// Audit 62 item 1: under nanotron the CSV said peak 88 % of the GPU while memory exited 1 (the
// verdict rests on the device need and its range, which the CSV left out).
TEST(CliMemory, CsvCarriesTheDeviceNeedItsRangeAndTheVerdict) {
    const auto r = run_preflight("memory --framework nanotron --model llama-3.2-3b --dp 8 --zero 1 --mbs 8 --seq 4096 "
                                 "--recompute full --format csv");
    EXPECT_EQ(r.exit_code, 1) << r.err;
    const std::size_t at = r.out.find("\nactivations_per_layer,");
    ASSERT_NE(at, std::string::npos) << r.out;
    EXPECT_EQ(r.out.substr(r.out.find('\n', at + 1) + 1),
              "device_peak,88363499520,1.03936\n"
              "device_peak_range_low,74956406784,0.881659\n"
              "device_peak_range_high,88430608384,1.04015\n"
              "fits,0,\n"
              "verdict,may-not-fit,\n");
}

// The reserved pool beyond the tensors, by cause: the parts and the allocated peak make the
// reserved peak up to 2 MiB segment rounding; the loss-stage part follows s*b*h, so doubling
// the micro-batch doubles it; profiles without an allocator model report zeros and no line.
TEST(CliMemory, ReservedExtraExplainsTheReservedPeak) {
    const std::string nanotron =
        "memory --framework nanotron --model llama-3-8b --tp 8 --sp --seq 4096 --precision bf16-mixed-fp32-grads";
    const auto table = run_preflight(nanotron + " --mbs 4");
    ASSERT_EQ(table.exit_code, 0) << table.err;
    EXPECT_NE(table.out.find("beyond the tensors:"), std::string::npos);
    EXPECT_NE(table.out.find("around the loss"), std::string::npos);
    auto extra_of = [&](int mbs) {
        const auto r = run_preflight(nanotron + " --mbs " + std::to_string(mbs) + " --format json");
        EXPECT_EQ(r.exit_code, 0) << r.err;
        return nlohmann::json::parse(r.out).at("memory");
    };
    const auto m4 = extra_of(4), m8 = extra_of(8);
    const auto& x = m4.at("reserved_extra");
    const std::int64_t parts = x.at("activation_fragmentation_bytes").get<std::int64_t>() +
                               x.at("loss_stage_bytes").get<std::int64_t>() + x.at("constant_bytes").get<std::int64_t>();
    const std::int64_t seg = 2 << 20;
    const std::int64_t expected = (m4.at("peak_allocated_bytes").get<std::int64_t>() + parts + seg - 1) / seg * seg;
    EXPECT_EQ(m4.at("peak_reserved_bytes").get<std::int64_t>(), expected);
    EXPECT_GT(x.at("loss_stage_bytes").get<std::int64_t>(), 0);  // pp 1: the only stage runs the loss
    EXPECT_NEAR(m8.at("reserved_extra").at("loss_stage_bytes").get<double>(),
                2.0 * x.at("loss_stage_bytes").get<double>(), 1.0);
    const auto plain = run_preflight(std::string(kIssueCommand) + " --format json");
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    for (const char* k : {"activation_fragmentation_bytes", "loss_stage_bytes", "constant_bytes"})
        EXPECT_EQ(nlohmann::json::parse(plain.out).at("memory").at("reserved_extra").at(k), 0) << k;
    EXPECT_EQ(run_preflight(kIssueCommand).out.find("beyond the tensors:"), std::string::npos);
}

// --host-pace: a pipeline whose host runs ahead is charged the run-ahead reserve, per byte of
// s*b*h (4096 x 4096 x 2 B = 32 MiB for llama-3-8b at mbs 1) x the stage's layers x its in-flight
// micro-batches beyond two. nanotron's split of llama-3-8b at pp 4 (models/base.py build_model):
// layer cost 4*32*128*4096 + 3*14336*4096 = 243,269,632, LM head 128256*4096 = 525,336,576, total
// 8,309,964,800; stage 0 passes a quarter (2,077,491,200) with its 9th layer -> 9 layers and,
// at grad-acc 8, 4 micro-batches in flight (engine.py 1F1B): 32 MiB x 9 x 2 = 603,979,776 B.
// A loop that waits for the GPU every micro-batch is charged neither that nor the loss term.
TEST(CliMemory, HostPaceChargesTheRunaheadReserveOnlyWhenTheHostRunsAhead) {
    const std::string cmd = "memory --framework nanotron --model llama-3-8b --tp 8 --sp --pp 4 --grad-acc 8 --seq 4096 "
                            "--precision bf16-mixed-fp32-grads --format json";
    const auto ahead = run_preflight(cmd);
    ASSERT_EQ(ahead.exit_code, 0) << ahead.err;
    const auto a = nlohmann::json::parse(ahead.out).at("memory");
    EXPECT_EQ(a.at("host_pace"), "runs-ahead");
    ASSERT_EQ(a.at("pipeline_stage"), 0);
    EXPECT_EQ(a.at("layers_on_stage"), 9);
    EXPECT_EQ(a.at("micro_batches_in_flight"), 4);
    const double fr = preflight::nanotron_allocator_constants().pipeline_runahead_fragmentation;
    EXPECT_GT(fr, 0);
    EXPECT_NEAR(a.at("reserved_extra").at("pipeline_runahead_bytes").get<double>(), fr * 603'979'776.0, 0.5);
    const auto waits = run_preflight(cmd + " --host-pace waits");
    ASSERT_EQ(waits.exit_code, 0) << waits.err;
    const auto w = nlohmann::json::parse(waits.out).at("memory");
    EXPECT_EQ(w.at("host_pace"), "waits");
    EXPECT_EQ(w.at("reserved_extra").at("pipeline_runahead_bytes"), 0);
    EXPECT_EQ(w.at("reserved_extra").at("loss_stage_bytes"), 0);
    EXPECT_LT(w.at("peak_reserved_bytes").get<std::int64_t>(), a.at("peak_reserved_bytes").get<std::int64_t>());
    const auto bad = run_preflight(cmd + " --host-pace sometimes");
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_NE((bad.out + bad.err).find("--host-pace"), std::string::npos) << bad.err;
}

// --compiled-loss: torchtitan's Table 1 layout for llama-3-8b (FSDP 8, local batch 2, seq 8192) peaks
// at its loss, whose eager working set (bf16 logits + 3 fp32 buffers, 14 B a logit) becomes the logits
// and their bf16 gradient (4 B): 16,384 x 128,256 x 10 B = 21,013,463,040 B less. Profiles whose loss
// is not PyTorch's eager cross-entropy refuse the flag (exit 2, naming it).
TEST(CliMemory, CompiledLossKeepsTheLogitsAndTheirGradientOnly) {
    const std::string cmd = "memory --framework torchtitan --model llama-3-8b --dp 8 --zero 3 --mbs 2 --seq 8192 "
                            "--recompute selective --format json";
    const auto eager = run_preflight(cmd);
    const auto compiled = run_preflight(cmd + " --compiled-loss");
    ASSERT_EQ(eager.exit_code, 0) << eager.err;
    ASSERT_EQ(compiled.exit_code, 0) << compiled.err;
    const auto e = nlohmann::json::parse(eager.out).at("memory"), c = nlohmann::json::parse(compiled.out).at("memory");
    EXPECT_EQ(e.at("compiled_loss"), false);
    EXPECT_EQ(c.at("compiled_loss"), true);
    ASSERT_EQ(e.at("peak_phase"), "output+loss (micro-batch 1)");
    EXPECT_EQ(e.at("per_gpu_bytes").at("logits_and_loss").get<std::int64_t>(), 16'384LL * 128'256 * 14);
    EXPECT_LE(c.at("peak_bytes").get<std::int64_t>(), e.at("peak_bytes").get<std::int64_t>() - 21'013'463'040LL);
    for (const char* refused : {"memory --model llama-3-8b --compiled-loss",
                                "plan --model llama-3-8b --gpus 8 --gbs-tokens 1048576 --compiled-loss"}) {
        const auto bad = run_preflight(refused);
        EXPECT_EQ(bad.exit_code, 2) << refused;
        EXPECT_NE(bad.err.find("--compiled-loss"), std::string::npos) << bad.err;
    }
}

TEST(CliMemory, DoesNotFitExitsOne) {
    const auto r = run_preflight("memory --model llama-3-70b --gpu h100-sxm-80gb --format json");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(nlohmann::json::parse(r.out).at("memory").at("fits"), false);
}

TEST(CliMemory, DoesNotFitNamesTheSearchThatFindsAFit) {
    // New-user audit: "DOES NOT FIT, over by 43.01 GiB" and nothing on what to do next.
    const auto r = run_preflight("memory --model llama-3-8b --dp 8 --zero 1 --mbs 4");
    ASSERT_EQ(r.exit_code, 1) << r.err;
    const std::string head = "# next: preflight ";
    const std::size_t at = r.out.find(head);
    ASSERT_NE(at, std::string::npos) << r.out;
    const std::size_t end = r.out.find("   # ", at);  // a shell comment: the line pastes as it is
    const std::string next = r.out.substr(at + head.size(), end - at - head.size());
    // 8 GPUs x 4 x 4096 tokens = 131,072, the recipe kept; the command it names runs and finds a fit.
    EXPECT_EQ(next, "plan --model llama-3-8b --gpu h100-sxm-80gb --gpus 8 --gbs-tokens 131072 --seq 4096 --precision bf16-mixed");
    EXPECT_EQ(run_preflight(next).exit_code, 0);
    // A fitting plan, and machine formats, carry no such line.
    EXPECT_EQ(run_preflight("memory --model llama-3-8b --dp 8 --zero 3").out.find(head), std::string::npos);
    EXPECT_EQ(run_preflight("memory --model llama-3-8b --dp 8 --zero 1 --mbs 4 --format csv").out.find(head), std::string::npos);
}

// The # next: line searches the same job: the adapters, optimizer and memory settings too (audit of
// 2026-11-30: a rank-256 all-linear LoRA's line said only --finetune lora, and its search
// recommended rank 8 on q,v).
TEST(CliMemory, TheNextCommandKeepsTheJobsOwnSettings) {
    const auto r = run_preflight("memory --model llama-3-8b --gpu rtx-4090 --seq 2048 --finetune lora --lora-rank 256 "
                                 "--lora-targets all-linear --recompute full --optimizer sgd --dropout 0.1 "
                                 "--overhead-bytes 2000000000");
    ASSERT_EQ(r.exit_code, 1) << r.err;
    const std::string head = "# next: preflight ";
    const std::size_t at = r.out.find(head);
    ASSERT_NE(at, std::string::npos) << r.out;
    const std::string next = r.out.substr(at + head.size(), r.out.find("   # ", at) - at - head.size());
    for (const char* kept : {" --lora-rank 256", " --lora-targets q,k,v,o,gate,up,down", " --finetune lora", " --optimizer sgd",
                             " --dropout 0.1", " --overhead-bytes 2000000000"})
        EXPECT_NE(next.find(kept), std::string::npos) << kept << " not in: " << next;
    EXPECT_EQ(next.find(" --recompute"), std::string::npos) << next;  // the layout is the search's
    const auto searched = run_preflight(next + " --format json");
    ASSERT_LE(searched.exit_code, 1) << searched.err;
    for (const auto& c : nlohmann::json::parse(searched.out)["candidates"]) EXPECT_EQ(c["plan"]["lora_rank"], 256);
}

// The # next: line is a command to paste: a model path with a space (or a quote) is one shell
// word there (was: `--model my 8b.json`, which `plan` refused: "not an option: 8b.json").
TEST(CliMemory, TheNextCommandQuotesAPathWithASpace) {
    const test::Scratch dir;
    std::ifstream in(std::string(PREFLIGHT_TEST_DATA_DIR) + "/models/llama-3-8b.json");
    const std::string path = dir.write_text("my 8b's.json", std::string(std::istreambuf_iterator<char>(in), {}));
    const std::string quoted = "'" + path.substr(0, path.rfind('/') + 1) + "my 8b'\\''s.json'";
    const auto r = run_preflight("memory --model " + quoted + " --dp 8 --zero 1 --mbs 4");
    ASSERT_EQ(r.exit_code, 1) << r.err;
    const std::string head = "# next: preflight ";
    const std::size_t at = r.out.find(head);
    ASSERT_NE(at, std::string::npos) << r.out;
    const std::string next = r.out.substr(at + head.size(), r.out.find("   # ", at) - at - head.size());
    EXPECT_NE(next.find("--model " + quoted + " --gpu"), std::string::npos) << next;
    EXPECT_EQ(run_preflight(next).exit_code, 0) << next;
}

TEST(CliMemory, ConfigPathWorksLikeACatalogName) {
    const auto by_name = run_preflight("memory --model gpt2 --format json");
    const auto by_path = run_preflight(std::string("memory --model ") + PREFLIGHT_TEST_DATA_DIR +
                                       "/models/gpt2.json --format json");
    ASSERT_EQ(by_path.exit_code, 0) << by_path.err;
    EXPECT_EQ(nlohmann::json::parse(by_name.out).at("memory"), nlohmann::json::parse(by_path.out).at("memory"));
}

struct BadCase {
    const char* args;
    const char* must_mention;
};
class CliBadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(CliBadInput, ExitsTwoNamingTheCulprit) {
    const auto r = run_preflight(GetParam().args);
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find(GetParam().must_mention), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CliBadInput,
    ::testing::Values(BadCase{"memory --mbs 0", "--mbs"}, BadCase{"memory --mbs abc", "--mbs"},
                      BadCase{"memory --precision fp7", "--precision"}, BadCase{"memory --zero 5", "--zero"},
                      BadCase{"memory --recompute some", "--recompute"}, BadCase{"memory --tp 3", "--tp"},
                      BadCase{"memory --model gpt2 --seq 4096", "--seq"},
                      BadCase{"memory --model no-such-model", "--model"},
                      BadCase{"memory --model /nonexistent/config.json", "--model"},
                      BadCase{"memory --gpu tpu-v9", "--gpu"}, BadCase{"memory --no-such-flag", "--no-such-flag"},
                      BadCase{"memory --dropout 2", "--dropout"}, BadCase{"memory --sp", "--sp"},
                      BadCase{"frobnicate", "frobnicate"}));

TEST(CliCatalog, ModelsJsonListsThirtySixWithExactCounts) {
    const auto r = run_preflight("models --format json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    // 17 + two Qwen3 + two Phi-3 + Gemma 3 + two gpt-oss + two OLMo 2 + OLMoE + the nine MPT builds of
    // llm-foundry's benchmarks
    ASSERT_EQ(j.at("models").size(), 36u);
    for (const auto& m : j.at("models")) {
        if (m.at("name") == "gpt2") EXPECT_EQ(m.at("params"), 124'439'808);
        if (m.at("name") == "qwen3-30b-a3b") EXPECT_EQ(m.at("family"), "qwen3_moe");
        if (m.at("name") == "gpt-oss-120b") EXPECT_EQ(m.at("family"), "gpt_oss");
        if (m.at("name") == "gpt-oss-120b") EXPECT_EQ(m.at("sliding_window"), 128);  // every second layer
        // The window a query attends through (Mistral-7B: 4,096 keys, Phi-3-mini-4k: 2,047), null for none.
        if (m.at("name") == "mistral-7b") EXPECT_EQ(m.at("sliding_window"), 4096);
        if (m.at("name") == "phi-3-mini-4k") EXPECT_EQ(m.at("sliding_window"), 2047);
        if (m.at("name") == "llama-3-8b") EXPECT_TRUE(m.at("sliding_window").is_null());
    }
    const auto table = run_preflight("models");
    const auto row = table.out.find("mistral-7b");
    ASSERT_NE(row, std::string::npos);
    const auto line = table.out.substr(row, table.out.find('\n', row) - row);
    const auto context = line.find(" 32768 ");  // context, then window
    ASSERT_NE(context, std::string::npos) << line;
    EXPECT_EQ(line.substr(line.find_last_of(' ') + 1), "4096") << line;
}

TEST(CliCatalog, GpusShowUnknownFp8AsNA) {
    const auto r = run_preflight("gpus");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto line_start = r.out.find("a100-sxm-80gb");
    ASSERT_NE(line_start, std::string::npos);
    const auto line = r.out.substr(line_start, r.out.find('\n', line_start) - line_start);
    EXPECT_NE(line.find("N/A"), std::string::npos) << line;
    const auto j = nlohmann::json::parse(run_preflight("gpus --format json").out);
    EXPECT_EQ(j.at("gpus").size(), 8u);
}

// The catalog says where each GPU's step-time constants come from: its own fit, another GPU's
// (calibration_from in the spec), or the uncalibrated defaults.
TEST(CliCatalog, GpusSayWhereTheStepTimeConstantsComeFrom) {
    const auto r = run_preflight("gpus");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto row = [&](const std::string& name) {
        const auto at = r.out.find("\n" + name + " ");
        return at == std::string::npos ? std::string() : r.out.substr(at + 1, r.out.find('\n', at + 1) - at - 1);
    };
    EXPECT_TRUE(row("h100-sxm-80gb").ends_with(" fitted")) << row("h100-sxm-80gb");
    EXPECT_TRUE(row("h200-sxm-141gb").ends_with(" from h100-sxm-80gb")) << row("h200-sxm-141gb");
    EXPECT_TRUE(row("b200").ends_with(" defaults")) << row("b200");
    const auto j = nlohmann::json::parse(run_preflight("gpus --format json").out);
    for (const auto& g : j.at("gpus"))
        if (g.at("name") == "a100-sxm-80gb") {
            EXPECT_EQ(g.at("step_time_constants"), "from a100-sxm-40gb");
            EXPECT_EQ(g.at("step_time_constants_provenance").get<std::string>().rfind("transferred from a100-sxm-40gb", 0), 0u);
        }
}

TEST(CliCatalog, RunDryRunNamesTheGpuATransferredRuntimeBlockWasMeasuredOn) {
    const auto h200 = run_preflight("run --dry-run --model gpt2 --seq 256 --gpu h200-sxm-141gb");
    ASSERT_EQ(h200.exit_code, 0) << h200.err;
    EXPECT_NE(h200.out.find("--allocator pool), transferred from h100-sxm-80gb\n"), std::string::npos) << h200.out;
    const auto h100 = run_preflight("run --dry-run --model gpt2 --seq 256 --gpu h100-sxm-80gb");
    EXPECT_EQ(h100.out.find("transferred from"), std::string::npos) << h100.out;
}

// The H100 SXM spec's dense peaks: 66.9 TFLOP/s fp32, 989.4 bf16, 1,978.9 fp8 (data/gpus).
TEST(CliCatalog, RunTableNamesThePeakItsMfuDividesBy) {
    const std::pair<const char*, const char*> cases[] = {
        {"fp32", "# MFU/HFU: of the dense fp32 peak, 66.9 TFLOP/s per GPU"},
        {"bf16-mixed", "# MFU/HFU: of the dense bf16 peak, 989.4 TFLOP/s per GPU"},
        {"fp8-mixed", "# MFU/HFU: of the dense fp8 peak, 1978.9 TFLOP/s per GPU"}};
    for (const auto& [precision, line] : cases) {
        const auto r = run_preflight(std::string("run --dry-run --model llama-3.2-1b --seq 256 --gpu h100-sxm-80gb --precision ") +
                                     precision);
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_NE(r.out.find(line), std::string::npos) << r.out;
    }
}

// A spec without a dense peak for the recipe (fp8 on an A100) is warned on stderr in every format
// (contract audit, 2026-11-30: --format json said nothing while its MFU and HFU were null).
TEST(CliCatalog, RunWarnsOfAMissingDensePeakInEveryFormat) {
    for (const char* format : {"table", "json"}) {
        const auto r = run_preflight(std::string("run --dry-run --model llama-3.2-1b --seq 256 --gpu a100-sxm-80gb "
                                                 "--precision fp8-mixed --format ") +
                                     format);
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_NE(r.err.find("preflight: warning: a100-sxm-80gb publishes no dense fp8-mixed peak"), std::string::npos)
            << format << ": " << r.err;
    }
}

// A run report records the call that made it, as validate's JSON summary does.
TEST(CliCatalog, RunReportRecordsItsInvocation) {
    const auto path = std::filesystem::temp_directory_path() / ("preflight-invocation-" + std::to_string(::getpid()) + ".json");
    const auto r = run_preflight("run --dry-run --model gpt2 --seq 256 --report " + path.string());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    nlohmann::json j;
    std::ifstream(path) >> j;
    const auto& args = j.at("invocation").at("arguments");
    EXPECT_EQ(args.front(), "run");
    EXPECT_NE(std::find(args.begin(), args.end(), "--dry-run"), args.end()) << args.dump();
    EXPECT_NE(std::find(args.begin(), args.end(), "256"), args.end()) << args.dump();
    EXPECT_FALSE(j.at("invocation").at("preflight_version").get<std::string>().empty());
    std::filesystem::remove(path);
}

TEST(CliHelp, TeachesTheFlags) {
    const auto r = run_preflight("memory --help");
    EXPECT_EQ(r.exit_code, 0);
    for (const char* k : {"--recompute", "selective", "--zero", "--precision", "bf16-mixed-fp32-grads", "Example"})
        EXPECT_NE(r.out.find(k), std::string::npos) << k;
}

// Audit 62 item 13: the bounds the planner enforces and each command's exit codes are in --help.
TEST(CliHelp, SaysTheBoundsAndTheExitCodes) {
    const std::pair<const char*, std::vector<const char*>> expected[] = {
        {"memory --help",
         {"Dropout probability in [0, 1)", "balanced load, 1 to 64", "1 to the model's hidden size",
          "LoRA alpha, a positive number", "2 * cp must divide --seq", "2 on bad input", "4 on an internal error"}},
        {"plan --help", {"dp * tp * pp * cp = N", "judged memory (the peak; under nanotron and torchtitan the device need)",
                         "a fraction in [0, 1)"}},
        {"validate --help", {"or no run compared at all", "made if missing, but its parent folder must exist"}},
        {"calibrate --help", {"held-out step-time error's P50 over 50 %"}},
    };
    for (const auto& [command, words] : expected) {
        const auto r = run_preflight(command);
        EXPECT_EQ(r.exit_code, 0) << command;
        for (const char* w : words) EXPECT_NE(r.out.find(w), std::string::npos) << command << ": " << w << "\n" << r.out;
    }
}

}  // namespace
}  // namespace preflight
