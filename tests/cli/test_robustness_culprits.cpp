// The culprit named (issue 37): the flag or file at fault, not another; output paths checked
// before any work. Each refusal is exit 2 naming it, never an internal error or a result.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "catalog_fixture.hpp"
#include "user_files.hpp"

namespace preflight {
namespace {

using nlohmann::json;
using test::catalog;
using test::expect_refused;
using test::run_preflight;
using test::Scratch;
namespace fs = std::filesystem;

// --- 4. The culprit is named ------------------------------------------------------------------------

TEST(Culprits, TolerancesFileErrorsNameTolerancesNotMatrix) {
    Scratch s;
    fs::create_directories(s.dir() / "reports");
    expect_refused("validate --check " + (s.dir() / "reports").string() + " --tolerances zzz --no-report-files",
                   {"--tolerances", "zzz"}, {"--matrix"});
}

// A flag that would change nothing is refused, as its close relatives are (--ep on a dense model,
// --gpus without --from), rather than accepted and ignored.
TEST(Culprits, AFlagThatWouldChangeNothingIsRefused) {
    expect_refused("memory --model llama-3-8b --moe-capacity-factor 2", {"--moe-capacity-factor", "llama-3-8b", "no experts"});
    expect_refused("memory --model llama-3-8b --moe-capacity-factor 100", {"--moe-capacity-factor", "[1, 64]", "100"});
    expect_refused("memory --model gpt2 --verbose", {"--verbose", "--from"});
    expect_refused("memory --model gpt2 --host-pace waits", {"--host-pace", "--framework megatron", "nanotron"});
    expect_refused("plan --model gpt2 --gpus 8 --gbs-tokens 1048576 --framework torchtitan --host-pace runs-ahead",
                   {"--host-pace", "--framework torchtitan"});
    const auto nanotron = run_preflight("memory --model llama-3.2-1b --framework nanotron --precision bf16-mixed-fp32-grads --host-pace waits --dp 8 --zero 1");
    EXPECT_LE(nanotron.exit_code, 1) << nanotron.err;
    const auto moe = run_preflight("memory --model mixtral-8x7b --moe-capacity-factor 1.25 --dp 8 --ep 8 --zero 1");
    EXPECT_LE(moe.exit_code, 1) << moe.err;
}

// The command-line library's own wording ("Could not convert: --sp = banana", "At Most 1
// required but received 2") is said plainly: the flag, what is wrong, how to write it.
TEST(Culprits, ParseErrorsSayWhatIsWrongWithWhichFlag) {
    expect_refused("memory --model gpt2 --sp=banana", {"--sp: a switch is on or off, got 'banana'", "--sp=false"});
    expect_refused("memory --model gpt2 --seq 10 --seq 20", {"--seq: given more than once"});
}

TEST(Culprits, VersionPrintsTheVersion) {
    // Was: "A subcommand is required", exit 2.
    const auto r = run_preflight("--version");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("preflight ", 0), 0u) << r.out;
    EXPECT_EQ(r.err.find("subcommand"), std::string::npos) << r.err;
}

TEST(Culprits, LoraFlagWithoutFinetuneNamesThatFlag) {
    // Was: blamed --lora-rank, which was not given.
    expect_refused("memory --model llama-3-8b --lora-targets q", {"--lora-targets", "--finetune"}, {"--lora-rank"});
    expect_refused("memory --model llama-3-8b --lora-alpha 16", {"--lora-alpha"}, {"--lora-rank"});
}

TEST(Culprits, PlanFileScheduleTheRunCannotExecuteNamesTheFileAndKey) {
    // Was: "--finetune: preflight run executes full pre-training plans only", the file unnamed.
    Scratch s;
    const std::string gpipe = s.write("gpipe.json", json{{"seq", 256}, {"pp_schedule", "gpipe"}});
    expect_refused("run --dry-run --model gpt2 --plan " + gpipe, {"--plan", gpipe, "pp_schedule"}, {"--finetune"});
    const std::string interleaved = s.write("inter.json", json{{"seq", 256}, {"pp_schedule", "interleaved"}});
    expect_refused("run --dry-run --model gpt2 --plan " + interleaved, {"--plan", interleaved, "pp_schedule"},
                   {"--finetune"});
    // A model or GPU name the file records that is not in the catalog names the file too.
    const std::string model = s.write("model.json", json{{"seq", 256}, {"model", "no-such-model"}});
    expect_refused("run --dry-run --plan " + model, {"--plan", model, "model", "no-such-model"});
    // The same setting given as a flag is blamed on the flag.
    expect_refused("run --dry-run --model gpt2 --seq 256 --pp-schedule gpipe", {"--pp-schedule"}, {"--finetune"});
}

// --- 5. Output paths, checked before any work ---------------------------------------------------------

TEST(Culprits, ReportIntoAMissingFolderIsRefusedBeforeTheRun) {
    // Was: exit 4 after the run.
    Scratch s;
    const std::string report = (s.dir() / "missing" / "r.json").string();
    expect_refused("run --dry-run --model gpt2 --seq 128 --report " + report, {"--report", report});
    EXPECT_FALSE(fs::exists(s.dir() / "missing"));
}

TEST(Culprits, WriteSpecIntoAMissingFolderIsRefusedBeforeTheFit) {
    Scratch s;
    fs::create_directories(s.dir() / "runs");
    const std::string spec = (s.dir() / "missing" / "spec.json").string();
    expect_refused("calibrate " + (s.dir() / "runs").string() + " --write-spec " + spec, {"--write-spec", spec});
    EXPECT_FALSE(fs::exists(s.dir() / "missing"));
}

TEST(Culprits, ReportDirThatIsAFileOrEmptyIsRefused) {
    // Was: exit 4 (a regular file), and "" taken as not given (reports in the build folder).
    Scratch s;
    const std::string file = s.write("file.txt", json::object());
    const std::string reports = (s.dir() / "reports").string();
    fs::create_directories(reports);
    expect_refused("validate --check " + reports + " --report-dir " + file, {"--report-dir", file});
    expect_refused("validate --check " + reports + " --report-dir " + file + "/sub", {"--report-dir", file});
    expect_refused("validate --check " + reports + " --report-dir ''", {"--report-dir", "empty"});
}

// Audit 62 item 6: --report-dir made any missing path (a typo in a parent made a stray tree),
// while --report and --write-spec refuse a missing folder. Only the last part is made now.
TEST(Culprits, ReportDirWhoseParentIsMissingIsRefused) {
    Scratch s;
    const std::string reports = (s.dir() / "reports").string();
    fs::create_directories(reports);
    const std::string stray = (s.dir() / "typo" / "a" / "b").string();
    expect_refused("validate --check " + reports + " --report-dir " + stray,
                   {"--report-dir", "cannot make the folder '" + stray + "': its parent '" + (s.dir() / "typo" / "a").string() +
                                        "' does not exist"});
    EXPECT_FALSE(fs::exists(s.dir() / "typo"));
    // The last part alone is made, written "out/" too.
    const std::string runs = (test::data_dir() / "measurements" / "h100-sxm-80gb").string();
    const auto made = run_preflight("validate --check " + runs + " --report-dir " + (s.dir() / "out/").string());
    EXPECT_EQ(made.exit_code, 0) << made.err;
    EXPECT_TRUE(fs::exists(s.dir() / "out" / "validation-report.md"));
}

}  // namespace
}  // namespace preflight
