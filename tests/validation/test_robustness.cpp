// validate --check fails on reports it could not compare and names their files;
// calibrate refuses reports with wrongly typed or impossible fields and never writes a
// spec that is out of bounds or does not load.
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <gtest/gtest.h>

#include "catalog_fixture.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/validation/check.hpp"
#include "preflight/runtime/runtime.hpp"
#include "preflight/validation/spec_bounds.hpp"
#include "run_cli.hpp"

using namespace preflight;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
    const fs::path d = fs::temp_directory_path() / ("preflight-robust-" + name + "-" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

void write(const fs::path& f, const json& j) { std::ofstream(f) << j.dump(1); }

// A dry-run report of GPT-2 at seq 512 relabelled as a device run that matches the prediction.
json device_report() {
    Plan p;
    p.seq = 512;
    runtime::RunOptions o;
    o.timeline = false;
    const auto r = runtime::dry_run_report(test::catalog_model("gpt2"), test::catalog_gpu("h100-sxm-80gb"), p, o);
    json j = runtime::run_report_to_json(r);
    j["mode"] = "device";
    j["measured"]["tracked_peak_bytes"] = r.predicted.tracked_peak_bytes;
    j["measured"]["step_time_s"] = *r.predicted.step_time_s;
    j["measured"].erase("per_gpu_bytes");
    return j;
}

json catalog_spec(const std::string& name) {
    std::ifstream in(test::data_dir() / "gpus" / (name + ".json"));
    return json::parse(in);
}

}  // namespace

TEST(CheckRobustness, CrashedRunFailsTheCheckNamingItsFile) {
    // Was: PASS with 0 comparisons.
    const fs::path d = fresh_dir("crashed");
    write(d / "good.json", device_report());
    json crashed = {{"schema_version", 1}, {"command", "run"}, {"mode", "device"}, {"status", "crashed"},
                    {"message", "killed by signal 9"}, {"model", {{"name", "gpt2"}}},
                    {"gpu", {{"name", "h100-sxm-80gb"}}}, {"plan", {{"seq", 512}}}, {"measured", json::object()}};
    write(d / "crashed.json", crashed);
    const auto r = test::run_preflight("validate --check " + d.string() + " --no-report-files");
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_NE(r.err.find((d / "crashed.json").string()), std::string::npos) << r.err;
    EXPECT_NE(r.out.find("1 not compared"), std::string::npos) << r.out;
    fs::remove_all(d);
}

TEST(CheckRobustness, EmptyMeasuredFailsTheCheckNamingItsFile) {
    const fs::path d = fresh_dir("empty");
    json empty = device_report();
    empty["measured"] = json::object();
    write(d / "empty.json", empty);
    const auto r = test::run_preflight("validate --check " + d.string() + " --no-report-files");
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_NE(r.err.find((d / "empty.json").string()), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("nothing to compare"), std::string::npos) << r.err;
    fs::remove_all(d);
}

// Was: an ok device run without its step time passed on memory alone (step time and MFU dropped
// out of the comparison), and a report without "status" was read as ok.
TEST(CheckRobustness, AnOkDeviceRunWithoutItsStepTimeOrAnyStatusIsNoPass) {
    const fs::path d = fresh_dir("nostep");
    json no_step = device_report();
    no_step["measured"].erase("step_time_s");
    write(d / "nostep.json", no_step);
    auto r = test::run_preflight("validate --check " + d.string() + " --no-report-files");
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_NE(r.err.find("no measured step time"), std::string::npos) << r.err;
    json no_status = device_report();
    no_status.erase("status");
    write(d / "nostep.json", no_status);
    r = test::run_preflight("validate --check " + d.string() + " --no-report-files");
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("status is missing"), std::string::npos) << r.err;
    fs::remove_all(d);
}

TEST(CheckRobustness, WronglyTypedReportFieldsNameTheFileAndField) {
    // Was: "internal error: type must be string, but is number".
    for (const auto& [path, value] : {std::pair{"/model/name", json(42)}, std::pair{"/gpu/name", json(7)},
                                      std::pair{"/status", json(1)}, std::pair{"/measured/step_time_s", json("fast")}}) {
        const fs::path d = fresh_dir("typed");
        json j = device_report();
        j[json::json_pointer(path)] = value;
        write(d / "typed.json", j);
        const auto r = test::run_preflight("validate --check " + d.string() + " --no-report-files");
        EXPECT_EQ(r.exit_code, 2) << path << r.err;
        EXPECT_NE(r.err.find((d / "typed.json").string()), std::string::npos) << path << r.err;
        const std::string field = std::string(path).substr(1);
        EXPECT_NE(r.err.find(field.substr(0, field.find('/'))), std::string::npos) << path << r.err;
        EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
        fs::remove_all(d);
    }
}

TEST(CalibrateRobustness, NegativeMeasuredOverheadIsRefusedNamingTheFile) {
    // Was: fitted a negative overhead and wrote a spec Preflight then refuses to load.
    const fs::path d = fresh_dir("calib");
    json j = device_report();
    j["measured"]["overhead_bytes"] = -1000000000LL;
    write(d / "run.json", j);
    const auto r = test::run_preflight("calibrate " + d.string() + " --gpu h100-sxm-80gb --write-spec " +
                                       (d / "out.json").string());
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("run.json"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("overhead_bytes"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(d / "out.json"));
    fs::remove_all(d);
}

TEST(CalibrateRobustness, FittedSpecOutsideItsBoundsIsNotWritten) {
    json ok = catalog_spec("h100-sxm-80gb");
    EXPECT_NO_THROW(validation::check_fitted_spec(ok, "--write-spec x"));
    json wild = ok;
    wild["efficiency"]["gemm_half_efficiency_dim"] = 1e227;
    try {
        validation::check_fitted_spec(wild, "--write-spec x");
        ADD_FAILURE() << "1e227 accepted";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("gemm_half_efficiency_dim"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("65536"), std::string::npos) << e.what();
    }
    json negative = ok;
    negative["overhead_bytes"] = -5;
    EXPECT_THROW(validation::check_fitted_spec(negative, "--write-spec x"), InputError);
    json nan_step = ok;
    nan_step["efficiency"]["step_overhead_s"] = 3601.0;
    EXPECT_THROW(validation::check_fitted_spec(nan_step, "--write-spec x"), InputError);
    // Within every bound but not loadable (the loader is the last word).
    json unloadable = ok;
    unloadable["hbm_bandwidth_bytes_per_s"] = -1;
    try {
        validation::check_fitted_spec(unloadable, "--write-spec x");
        ADD_FAILURE() << "unloadable spec accepted";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("would not load"), std::string::npos) << e.what();
    }
}

// --- Issue 37: the run reports users hand us --------------------------------------------------------

namespace {

// Exit 2 naming every one of `words`, none of `absent` in stdout or stderr, no internal error.
void expect_refused(const std::string& args, std::initializer_list<std::string> words,
                    std::initializer_list<std::string> absent = {}) {
    const auto r = test::run_preflight(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\nstdout: " << r.out.substr(0, 400) << "\nstderr: " << r.err;
    for (const auto& w : words) EXPECT_NE(r.err.find(w), std::string::npos) << args << ": '" << w << "' not in: " << r.err;
    for (const auto& w : absent) EXPECT_EQ((r.out + r.err).find(w), std::string::npos) << args << ": '" << w << "' in: " << r.out << r.err;
    EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
}

// `j` written to `f` with the number 123456.5 in it replaced by `literal`.
void write_with(const fs::path& f, const json& j, const std::string& literal) {
    std::string text = j.dump(1);
    text.replace(text.find("123456.5"), 8, literal);
    std::ofstream(f) << text;
}

}  // namespace

TEST(CheckRobustness, NumberBeyondDoubleInAReportNamesTheFileAndKey) {
    // Was: exit 4 "number overflow parsing '1e400'" naming no file (validate --check and calibrate).
    const fs::path d = fresh_dir("overflow");
    json j = device_report();
    j["measured"]["step_time_s"] = 123456.5;
    write_with(d / "big.json", j, "1e400");
    const std::string file = (d / "big.json").string();
    expect_refused("validate --check " + d.string() + " --no-report-files", {file, "measured.step_time_s"}, {"PASS"});
    expect_refused("calibrate " + d.string() + " --gpu h100-sxm-80gb", {file, "measured.step_time_s"});
    fs::remove_all(d);
}

TEST(CalibrateRobustness, NullModeStatusOrSourceNamesTheFileAndKey) {
    // Was: exit 4 "type must be string, but is null".
    for (const char* key : {"mode", "status", "source"}) {
        const fs::path d = fresh_dir(std::string("null-") + key);
        json j = device_report();
        j[key] = nullptr;
        write(d / "run.json", j);
        const std::string file = (d / "run.json").string();
        expect_refused("calibrate " + d.string() + " --gpu h100-sxm-80gb", {file, key});
        expect_refused("validate --check " + d.string() + " --no-report-files", {file, key}, {"PASS"});
        fs::remove_all(d);
    }
}

TEST(CheckRobustness, ReportWithoutItsModelNamesTheFileAndKey) {
    // Was: calibrate exit 4 "key 'model' not found".
    const fs::path d = fresh_dir("nomodel");
    json j = device_report();
    j.erase("model");
    write(d / "run.json", j);
    const std::string file = (d / "run.json").string();
    expect_refused("calibrate " + d.string() + " --gpu h100-sxm-80gb", {file, "model"});
    expect_refused("validate --check " + d.string() + " --no-report-files", {file, "model"}, {"PASS"});
    fs::remove_all(d);
}

TEST(CalibrateRobustness, MeasuredBytesBeyondRangeAreRefusedNotWrapped) {
    // Was: an overhead_bytes of 2^64 - 1 became "overhead_bytes_after": -1 at exit 0.
    const fs::path d = fresh_dir("wrap");
    json j = device_report();
    j["measured"]["overhead_bytes"] = 18446744073709551615ULL;
    write(d / "run.json", j);
    const std::string file = (d / "run.json").string();
    expect_refused("calibrate " + d.string() + " --gpu h100-sxm-80gb", {file, "measured.overhead_bytes"});
    fs::remove_all(d);
}

TEST(CheckRobustness, UnknownStatusIsBadInputNotPass) {
    // Was: "PASS" with 0 compared, exit 0.
    const fs::path d = fresh_dir("weird");
    json j = device_report();
    j["status"] = "weird";
    write(d / "weird.json", j);
    expect_refused("validate --check " + d.string() + " --no-report-files", {(d / "weird.json").string(), "status", "weird"},
                   {"PASS"});
    fs::remove_all(d);
}

TEST(CheckRobustness, NothingComparedIsNeverPass) {
    validation::CheckResult r;
    validation::RunCheck run;
    run.id = "odd";
    run.source = "preflight-runtime";
    run.status = "unknown";  // neither compared nor judged, nor marked not compared
    r.runs.push_back(run);
    validation::summarize(r);
    EXPECT_EQ(r.all.compared, 0);
    EXPECT_FALSE(r.passed());
    const std::string table = validation::summary_table(r);
    EXPECT_EQ(table.find("PASS"), std::string::npos) << table;
    EXPECT_NE(table.find("no run was compared"), std::string::npos) << table;
    EXPECT_FALSE(validation::summary_to_json(r).at("passed").get<bool>());
}
