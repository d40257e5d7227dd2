// The files users hand us (issue 37): a number beyond double range, a value of the wrong
// type, a FIFO. Each is exit 2 with a message naming the file and key, never an internal
// error, a hang or a result.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "preflight/planner/user_file.hpp"
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

// --- 1. Numbers beyond the range of a double --------------------------------------------------

TEST(UserFiles, NumberBeyondDoubleInAModelConfigNamesTheFileAndKey) {
    // Was: exit 4 "number overflow parsing '1e400'" naming no file.
    Scratch s;
    json cfg = catalog("models", "llama-3-8b");
    cfg["rope_theta"] = 123456.5;
    const std::string path = s.write("m/config.json", cfg, "1e400");
    expect_refused("memory --model " + path, {"--model", path, "rope_theta", "1e400"}, {"[json.exception"});
}

TEST(UserFiles, NumberBeyondDoubleInAGpuSpecNamesTheFileAndKey) {
    Scratch s;
    json spec = catalog("gpus", "h100-sxm-80gb");
    spec["efficiency"]["gemm_max_fraction_of_peak"] = 123456.5;
    const std::string path = s.write("gpu.json", spec, "-1e400");
    expect_refused("memory --model gpt2 --gpu " + path, {"--gpu", path, "efficiency.gemm_max_fraction_of_peak"});
}

TEST(UserFiles, NumberBeyondDoubleInAPlanFileNamesTheFileAndKey) {
    Scratch s;
    const std::string path = s.write("plan.json", json{{"seq", 256}, {"dropout", 123456.5}}, "1e400");
    // "dropout" is on the file's second line (json::dump(2) sorts the keys).
    expect_refused("run --dry-run --model gpt2 --plan " + path, {"--plan", path, "line 2", "dropout"});
}

// A plan file's typo, a null model, or totals that disagree with its fields would run another
// plan than the file says without a word (was: zero_stage 3 and micro_batch_size 4 ran --zero 0
// --mbs 1; "model": null ran llama-3-8b): each is refused naming the file and the key.
TEST(UserFiles, APlanFileKeyThatWouldBeIgnoredIsRefused) {
    Scratch s;
    const json ok = {{"schema_version", 1}, {"model", "gpt2"}, {"gpu", "h100-sxm-80gb"}, {"seq", 256}, {"mbs", 2},
                     {"grad_acc", 1}, {"dp", 2}, {"tp", 1}, {"pp", 1}, {"zero", 1}, {"gpus", 2},
                     {"global_batch_tokens", 1024}};  // 256 x 2 x 1 x 2
    const auto run = run_preflight("run --dry-run --plan " + s.write("ok.json", ok));
    EXPECT_EQ(run.exit_code, 0) << run.err;
    const std::pair<json, std::vector<std::string>> bad[] = {
        {{{"zero_stage", 3}}, {"zero_stage", "unknown key"}},
        {{{"model", nullptr}}, {"model: null"}},
        {{{"gpus", 3}}, {"gpus", "3 differs from the plan's 2"}},
        {{{"global_batch_tokens", 4096}}, {"global_batch_tokens", "4096 differs from the plan's 1024"}},
        {{{"schema_version", 2}}, {"schema_version", "2"}},
        // LoRA settings without a fine-tune: dropped unseen before (audit of 2026-11-30).
        {{{"lora_rank", 4}}, {"lora_rank", "\"finetune\": \"lora\" or \"qlora\""}}};
    for (const auto& [change, words] : bad) {
        json doc = ok;
        doc.update(change);
        const std::string path = s.write("bad.json", doc);
        // `memory --plan` reads the file as `run --plan` does (one reader, plan_document.hpp).
        for (const std::string cmd : {"run --dry-run --plan ", "memory --plan "}) {
            const auto r = run_preflight(cmd + path);
            EXPECT_EQ(r.exit_code, 2) << cmd << change.dump() << "\n" << r.out;
            EXPECT_NE(r.err.find("--plan " + path), std::string::npos) << r.err;
            for (const auto& w : words) EXPECT_NE(r.err.find(w), std::string::npos) << w << " not in: " << r.err;
        }
    }
    // The file's plan is what memory judges: dp 2, ZeRO-1, gpt2 (the flags' default is llama-3-8b).
    const auto mem = run_preflight("memory --format json --plan " + s.write("ok.json", ok));
    ASSERT_EQ(mem.exit_code, 0) << mem.err;
    const json m = json::parse(mem.out);
    EXPECT_EQ(m["model"]["name"], "gpt2");
    EXPECT_EQ(m["plan"]["dp"], 2);
    EXPECT_EQ(m["plan"]["zero"], 1);
    EXPECT_EQ(m["plan"]["mbs"], 2);
    // --plan with --from: two sources of one plan.
    const auto both = run_preflight("memory --plan " + s.path("ok.json") + " --from " + s.path("ok.json"));
    EXPECT_EQ(both.exit_code, 2);
    EXPECT_NE(both.err.find("excludes"), std::string::npos) << both.err;
}

// A --from config that spells out its model's shape (a Megatron-LM script, a nanotron YAML) has no
// model file to name: `plan --emit preflight` carries the shape as "model_config" (config.json form)
// and `run --plan` / `memory --plan` build the model from it. Was: the plan file named the script
// ("cli_llama3_8b_tp2.sh"), which no catalog or file holds, and --plan refused it (exit 2).
TEST(UserFiles, APlanFileFromAFrameworkConfigCarriesItsModel) {
    Scratch s;
    const std::string script = std::string(PREFLIGHT_TEST_CONFIG_DIR) + "/megatron/cli_llama3_8b_tp2.sh";
    const auto emitted = run_preflight("plan --from " + script + " --gpu h100-sxm-80gb --emit preflight");
    ASSERT_EQ(emitted.exit_code, 0) << emitted.err;
    const json doc = json::parse(emitted.out);
    ASSERT_TRUE(doc.contains("model_config")) << emitted.out;
    EXPECT_EQ(doc["model"], "cli_llama3_8b_tp2.sh");
    // The script's shape (its --num-layers 32, --hidden-size 4096, 8 query groups, ffn 14336).
    EXPECT_EQ(doc["model_config"]["num_hidden_layers"], 32);
    EXPECT_EQ(doc["model_config"]["hidden_size"], 4096);
    EXPECT_EQ(doc["model_config"]["num_key_value_heads"], 8);
    EXPECT_EQ(doc["model_config"]["intermediate_size"], 14336);
    const std::string path = s.write("from.json", doc);
    for (const std::string cmd : {"run --dry-run --plan ", "memory --plan "}) {
        const auto r = run_preflight(cmd + path);
        EXPECT_EQ(r.exit_code, 0) << cmd << r.err;
        EXPECT_NE(r.out.find("cli_llama3_8b_tp2.sh"), std::string::npos) << cmd << r.out;
    }
    // A shape the config reader refuses names the file and the key.
    json bad = doc;
    bad["model_config"]["hidden_size"] = -1;
    expect_refused("run --dry-run --plan " + s.write("bad.json", bad), {"--plan", "model_config.hidden_size"});
    bad = doc;
    bad["model_config"] = "llama";
    expect_refused("memory --plan " + s.write("bad2.json", bad), {"--plan", "model_config", "config.json object"});
}

// A plan flag beside --plan overrides the file's value, as beside --from (was: ignored, the
// file's seq 256 run with no word).
TEST(UserFiles, APlanFlagBesideThePlanFileOverridesIt) {
    Scratch s;
    const std::string path = s.write("plan.json", json{{"model", "gpt2"}, {"seq", 256}, {"mbs", 2}});
    const auto r = run_preflight("run --dry-run --plan " + path + " --seq 512 --report " + s.path("r.json"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("--seq 512 --mbs 2"), std::string::npos) << r.out;
}

// A layout flag beside --plan divides the file's GPUs anew, as beside --from (new-user audit,
// 2026-11-29: a dp 8 plan file with --tp 2 became 16 GPUs, silently). dp 8 x mbs 2 x grad_acc 3
// is 48 sequences on 8 GPUs: at tp 2, dp 4 and grad_acc 48 / (2 x 4) = 6 keep both.
TEST(UserFiles, ALayoutFlagBesideThePlanFileKeepsItsGpusAndBatch) {
    Scratch s;
    const std::string path = s.write("plan.json", json{{"model", "gpt2"}, {"seq", 256}, {"mbs", 2}, {"grad_acc", 3}, {"dp", 8}});
    const auto r = run_preflight("memory --plan " + path + " --tp 2 --format json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json plan = json::parse(r.out).at("plan");
    EXPECT_EQ(plan.at("dp"), 4);
    EXPECT_EQ(plan.at("tp"), 2);
    EXPECT_EQ(plan.at("grad_acc"), 6);
    EXPECT_NE(r.err.find("# --plan: --dp 4 --grad-acc 6 ("), std::string::npos) << r.err;
    // --dp given as well: the flags stand as given; --grad-acc given: the batch changes with them.
    EXPECT_EQ(json::parse(run_preflight("memory --plan " + path + " --tp 2 --dp 8 --format json").out).at("plan").at("dp"), 8);
    const json own = json::parse(run_preflight("memory --plan " + path + " --tp 2 --grad-acc 5 --format json").out).at("plan");
    EXPECT_EQ(own.at("dp"), 4);
    EXPECT_EQ(own.at("grad_acc"), 5);
    // A layout that does not divide the file's GPUs, or its batch, is refused naming the flag.
    expect_refused("memory --plan " + path + " --tp 3", {"--tp", "8 GPUs are not a multiple of tp x pp x cp = 3"});
    expect_refused("memory --plan " + path + " --pp 2 --mbs 5", {"--pp", "48 sequences is not a multiple of mbs x dp = 20"});
}

TEST(UserFiles, NumberBeyondDoubleInATolerancesFileNamesTheFileAndKey) {
    Scratch s;
    const json matrix = {{"name", "t"},
                         {"tolerances", {{"preflight-runtime", {{"peak_bytes", {{"abs", 0}, {"rel", 123456.5}}}}}}},
                         {"runs", {{{"id", "a"}, {"model", "gpt2"}, {"plan", {{"seq", 128}}}}}}};
    const std::string path = s.write("tol.json", matrix, "1e400");
    const std::string reports = (s.dir() / "reports").string();
    fs::create_directories(reports);
    expect_refused("validate --check " + reports + " --tolerances " + path + " --no-report-files",
                   {"--tolerances", path, "tolerances.preflight-runtime.peak_bytes.rel"}, {"--matrix"});
}

// A --tolerances file with no "tolerances" block would judge every run by the defaults: refused.
TEST(UserFiles, ATolerancesFileWithoutTolerancesIsRefused) {
    Scratch s;
    const json matrix = {{"name", "t"}, {"runs", {{{"id", "a"}, {"model", "gpt2"}, {"plan", {{"seq", 128}}}}}}};
    const std::string path = s.write("tol.json", matrix);
    const std::string reports = (s.dir() / "reports").string();
    fs::create_directories(reports);
    expect_refused("validate --check " + reports + " --tolerances " + path + " --no-report-files",
                   {"--tolerances", path, "no \"tolerances\" block"});
}

// Audit 62 item 7: a --tolerances file had to be a whole matrix ("tol.json.name: must be a
// string", then "runs: must be a non-empty array") though only its tolerances are read.
TEST(UserFiles, ATolerancesFileNeedsOnlyItsTolerances) {
    Scratch s;
    // No tolerance at all on the peak: the check reads it (exit 1, the runs judged by it).
    const std::string path = s.write("tol.json", {{"tolerances", {{"preflight-runtime", {{"peak_bytes", {{"abs", 0}, {"rel", 0}}}}}}}});
    const std::string runs = (test::data_dir() / "measurements" / "h100-sxm-80gb").string();
    const auto r = run_preflight("validate --check " + runs + " --tolerances " + path + " --no-report-files");
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(r.err, "");
    EXPECT_NE(r.out.find("(error 0.05 %, tolerance 0.00 %); tolerances from --tolerances\n"), std::string::npos) << r.out;
    const std::string bad = s.write("bad.json", {{"tolerances", {{"preflight-runtime", {{"peak", {{"rel", 0.5}}}}}}}});
    expect_refused("validate --check " + runs + " --tolerances " + bad + " --no-report-files",
                   {"--tolerances " + bad + ": tolerances.preflight-runtime.peak: unknown quantity"});
    const std::string none = s.write("none.json", {{"name", "t"}});
    expect_refused("validate --check " + runs + " --tolerances " + none + " --no-report-files",
                   {"--tolerances " + none + ": tolerances: the file has no \"tolerances\" block"});
}

// --- 5. Spec figures that would make nonsense products are refused at load ---------------------

// A misspelt key of a GPU spec would leave the default or "unknown" in its place without a word;
// an empty name or an overhead that leaves no memory would give figures for no GPU. Each is refused.
TEST(UserFiles, GpuSpecTyposAndImpossibleFiguresAreRefused) {
    Scratch s;
    const json spec = catalog("gpus", "h100-sxm-80gb");
    const std::pair<std::function<void(json&)>, std::vector<std::string>> cases[] = {
        {[](json& j) { j["efficiency"]["gemm_max_fraction_of_peek"] = 0.7; },
         {"efficiency.gemm_max_fraction_of_peek", "unknown key", "gemm_max_fraction_of_peak"}},
        {[](json& j) { j["pcie_bandwith_bytes_per_s"] = 64e9; }, {"pcie_bandwith_bytes_per_s", "unknown key"}},
        {[](json& j) { j["runtime"]["overhead_byte"] = 1; }, {"runtime.overhead_byte", "unknown key"}},
        {[](json& j) { j["name"] = ""; }, {"name", "non-empty"}},
        {[](json& j) { j["overhead_bytes"] = std::int64_t{1} << 45; }, {"overhead_bytes", "not less than memory_bytes"}},
        {[](json& j) { j["overhead_bytes"] = -1; }, {"overhead_bytes", "0 or more, got -1"}},
        // Audit finding: 1e-300 loaded, and `plan` then failed on a step time naming neither the file
        // nor the key. A fraction of a peak is at least 1 % (calibrate's bound on fitted fractions).
        {[](json& j) { j["efficiency"]["gemm_max_fraction_of_peak"] = 1e-300; },
         {"efficiency.gemm_max_fraction_of_peak", "must be in [0.01, 1], got 1e-300"}},
        {[](json& j) { j["efficiency"]["fused_attention_fraction_of_peak"] = 0.001; },
         {"efficiency.fused_attention_fraction_of_peak", "must be 0 or in [0.01, 1], got 0.001"}}};
    for (const auto& [change, words] : cases) {
        json j = spec;
        change(j);
        const std::string path = s.write("gpu.json", j);
        std::vector<std::string> all = {"--gpu", path};
        all.insert(all.end(), words.begin(), words.end());
        const auto r = run_preflight("memory --model gpt2 --gpu " + path);
        EXPECT_EQ(r.exit_code, 2) << j.dump().substr(0, 200);
        for (const auto& w : all) EXPECT_NE(r.err.find(w), std::string::npos) << w << " not in: " << r.err;
    }
}

TEST(UserFiles, GpuSpecRatesOutsideTheirRangeNameTheKey) {
    // Was: peak_bf16_flops_per_s = 1e-300 loaded; plan printed "seq 0 (inf sequences) ... NOTHING FITS
    // under 0 B" and run --dry-run exited 0 with null step time, MFU and tokens/s.
    Scratch s;
    json spec = catalog("gpus", "h100-sxm-80gb");
    spec["peak_bf16_flops_per_s"] = 1e-300;
    const std::string path = s.write("tiny.json", spec);
    expect_refused("plan --model gpt2 --gpus 8 --gbs-tokens 1e6 --host-memory 1e12 --gpu " + path,
                   {"--gpu", path, "peak_bf16_flops_per_s", "1e+06"}, {"inf", "NOTHING FITS"});
    expect_refused("run --dry-run --model gpt2 --gpu " + path, {"--gpu", path, "peak_bf16_flops_per_s"});
    spec = catalog("gpus", "h100-sxm-80gb");
    spec["hbm_bandwidth_bytes_per_s"] = 1e30;
    expect_refused("memory --model gpt2 --gpu " + s.write("fast.json", spec), {"hbm_bandwidth_bytes_per_s", "1e+16"});
}

TEST(UserFiles, AMeasuredZeroInADataSetNamesTheColumnNotAnotherCommand) {
    // Was: validate --check on tokens_per_s_per_gpu = 0 said "calibrate: cross-validation needs at least 2
    // measured runs"; a 0 GiB reserved peak printed -nan % rows at exit 0.
    Scratch s;
    const fs::path src = fs::path(PREFLIGHT_TEST_DATA_DIR) / "measurements/external/nanotron-h100";
    fs::create_directories(s.dir() / "set");
    fs::copy_file(src / "dataset.json", s.dir() / "set/dataset.json");
    std::ifstream in(src / "nanotron-h100-runs.csv");
    std::string header, first, rest, line;
    std::getline(in, header);
    std::getline(in, first);
    while (std::getline(in, line)) rest += line + "\n";
    // peak_mem_reserved_gib and tokens_per_s_per_gpu are the 26th and 29th columns of the sweep's CSV.
    for (const auto& [column, name] : {std::pair{25u, "peak_mem_reserved_gib"}, std::pair{28u, "tokens_per_s_per_gpu"}}) {
        std::vector<std::string> cells;
        std::stringstream row(first);
        for (std::string c; std::getline(row, c, ',');) cells.push_back(c);
        ASSERT_GT(cells.size(), column);
        cells[column] = "0";
        std::string zeroed;
        for (std::size_t i = 0; i < cells.size(); ++i) zeroed += (i ? "," : "") + cells[i];
        std::ofstream(s.dir() / "set/nanotron-h100-runs.csv") << header << "\n" << zeroed << "\n" << rest;
        expect_refused("validate --check " + (s.dir() / "set").string() + " --no-report-files",
                       {"nanotron-h100-runs.csv:2", name, "positive"}, {"-nan", "PASS", "calibrate:"});
    }
}

TEST(UserFiles, AFolderNamedLikeAConfigIsNoCatalogEntry) {
    // Was: models/d.json (a folder) was listed, and --model d failed with "'d' is neither a catalog name ...
    // (catalog: d, gpt2)".
    Scratch s;
    fs::create_directories(s.dir() / "models/d.json");
    fs::create_directories(s.dir() / "gpus");
    fs::copy_file(fs::path(PREFLIGHT_TEST_DATA_DIR) / "models/gpt2.json", s.dir() / "models/gpt2.json");
    fs::copy_file(fs::path(PREFLIGHT_TEST_DATA_DIR) / "gpus/h100-sxm-80gb.json", s.dir() / "gpus/h100-sxm-80gb.json");
    const auto r = run_preflight("models --data-dir " + s.dir().string());
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("gpt2"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find(" d "), std::string::npos) << r.out;
    expect_refused("memory --data-dir " + s.dir().string() + " --model d", {"--model", "'d'", "catalog: gpt2)"});
}

// --- 2. Values of the wrong type ----------------------------------------------------------------

TEST(UserFiles, RopeTypeOfTheWrongTypeNamesTheFileAndKey) {
    // Was: exit 4 "type must be string, but is number".
    Scratch s;
    json cfg = catalog("models", "llama-3-8b");
    cfg["rope_scaling"]["rope_type"] = 5;
    const std::string path = s.write("m/config.json", cfg);
    expect_refused("memory --model " + path, {"--model", path, "rope_scaling.rope_type", "string"});
    cfg["rope_scaling"].erase("rope_type");
    cfg["rope_scaling"]["type"] = json::array();
    expect_refused("memory --model " + s.write("n/config.json", cfg), {"rope_scaling.type"});
}

// --- 6. Non-regular files ------------------------------------------------------------------------------

TEST(UserFiles, FifosAreRefusedNotReadForever) {
    // Was: a data set whose CSV is a FIFO blocked forever.
    Scratch s;
    const fs::path set = s.dir() / "set";
    s.write("set/dataset.json", json{{"name", "x"}, {"framework", "nanotron"}, {"gpu", "h100-sxm-80gb"},
                                     {"source", "test"}, {"csv", "runs.csv"}});
    const std::string csv = s.fifo("set/runs.csv");
    expect_refused("validate --check " + set.string() + " --no-report-files", {csv, "regular file"});
    const std::string plan = s.fifo("plan.json");
    expect_refused("run --dry-run --model gpt2 --plan " + plan, {"--plan", plan, "regular file"});
    const std::string tol = s.fifo("tol.json");
    expect_refused("validate --check " + set.string() + " --tolerances " + tol, {"--tolerances", tol});
}

// A user file is read in chunks and refused once it passes its limit, so a huge file (a log
// named by mistake) costs bounded memory: exit 2 naming the file and the limit, never a result.
TEST(UserFiles, AFileOverItsSizeLimitIsRefusedNamingTheLimit) {
    Scratch s;
    const std::string path = s.write_text("big.json", std::string(100, ' ') + "{}");
    try {
        (void)read_user_text_file(path, "--plan", 64, "a plan", "limits::kTest");
        ADD_FAILURE() << "a 102-byte file passed a 64-byte limit";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("is over 64 bytes (limits::kTest); is it really a plan?"),
                  std::string::npos)
            << e.what();
        EXPECT_EQ(e.subject(), "--plan");
    }
    EXPECT_EQ(read_user_text_file(path, "--plan", 102, "a plan", "limits::kTest").size(), 102u);  // at the limit
    EXPECT_EQ(read_json_file(path, "--plan"), json::object());  // far below limits::kMaxJsonFileBytes
}

}  // namespace
}  // namespace preflight
