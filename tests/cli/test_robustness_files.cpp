// The files users hand us (issue 37): a number beyond double range, a value of the wrong
// type, a FIFO. Each is exit 2 with a message naming the file and key, never an internal
// error, a hang or a result.
#include <gtest/gtest.h>

#include <filesystem>
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

}  // namespace
}  // namespace preflight
