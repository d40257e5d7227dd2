// libFuzzer target over every input Preflight reads: model configs, GPU specs, plan
// files, run reports and command-line flag vectors. Built by -DPREFLIGHT_FUZZ=ON with
// clang under ASan+UBSan (see .ci/fuzz). Beyond crashes and sanitizer reports it
// aborts on a wrong answer: an accepted input (exit 0, or 1 = "does not fit") whose
// output holds a negative, zero-where-impossible or non-finite figure, and any error
// that does not name its subject ("internal error").
//
// Input: byte 0 picks the mode (see LLVMFuzzerTestOneInput), the rest is the document
// (a config.json, GPU spec, plan, run report or framework config, or the flag vector, one
// argument per line).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "preflight/config_readers/config_readers.hpp"
#include "preflight/planner/catalog.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/gpu.hpp"
#include "preflight/planner/memory.hpp"
#include "preflight/planner/model.hpp"
#include "preflight/planner/report.hpp"
#include "preflight/planner/throughput.hpp"
#include "preflight/validation/check.hpp"
#include "preflight/validation/spec_bounds.hpp"
#include "command_line.hpp"

#ifndef PREFLIGHT_FUZZ_DATA_DIR
#define PREFLIGHT_FUZZ_DATA_DIR "data"
#endif

using nlohmann::json;
using namespace preflight;

namespace {

[[noreturn]] void wrong(const std::string& what) {
    std::fprintf(stderr, "FUZZ WRONG ANSWER: %s\n", what.c_str());
    std::abort();
}

const std::filesystem::path& data_dir() {
    static const std::filesystem::path d = PREFLIGHT_FUZZ_DATA_DIR;
    return d;
}
const ModelConfig& small_model() {
    static const ModelConfig m = load_model("gpt2", data_dir());
    return m;
}
// The catalog a Megatron shape without its vocabulary is matched against (ImportContext::catalog).
const std::vector<ModelConfig>& catalog() {
    static const std::vector<ModelConfig> c = load_catalog_models(data_dir());
    return c;
}
const GpuSpec& h100() {
    static const GpuSpec g = load_gpu("h100-sxm-80gb", data_dir());
    return g;
}

void check_positive(double v, const char* what) {
    if (!(std::isfinite(v) && v > 0)) wrong(std::string(what) + " = " + std::to_string(v));
}

void check_memory(const MemoryReport& r, const Plan& p) {
    const MemoryBreakdown& b = r.at_peak;
    for (auto [name, v] : {std::pair{"weights", b.weights}, std::pair{"master_weights", b.master_weights},
                           std::pair{"gradients", b.gradients}, std::pair{"optimizer_states", b.optimizer_states},
                           std::pair{"activations", b.activations}, std::pair{"logits_and_loss", b.logits_and_loss},
                           std::pair{"buffers", b.buffers}, std::pair{"overhead", b.overhead}})
        if (v < 0) wrong(std::string("negative ") + name + " bytes " + std::to_string(v));
    // (With --offload params the weights live on the host; the layer gathered for compute is a buffer.)
    if (b.weights <= 0 && p.offload != Offload::optimizer_and_params) wrong("zero weights bytes");
    if (r.peak_bytes <= 0) wrong("peak_bytes " + std::to_string(r.peak_bytes));
    if (r.peak_bytes != b.total()) wrong("peak != sum of categories");
    if (r.first_step_peak_bytes <= 0 || r.first_step_peak_bytes > r.peak_bytes) wrong("first-step peak out of range");
    if (r.activations_per_layer_bytes <= 0) wrong("activations per layer <= 0");
    if (r.params.total <= 0 || r.params.active <= 0 || r.params.active > r.params.total) wrong("parameter counts");
    if (r.host_bytes_per_gpu < 0 || r.host_bytes_per_node < r.host_bytes_per_gpu) wrong("host bytes per GPU / per node");
    // The reserved pool is the allocated peak plus its parts by cause, in whole 2 MiB segments.
    const ReservedExtra& x = r.reserved_extra;
    if (x.activation_fragmentation_bytes < 0 || x.loss_stage_bytes < 0 || x.constant_bytes < 0 ||
        x.gradient_fragmentation_bytes < 0)
        wrong("negative reserved_extra part");
    const std::int64_t seg = kTorchRoundLargeBytes;
    if (r.peak_reserved_bytes != (r.peak_allocated_bytes + x.total() + seg - 1) / seg * seg)
        wrong("peak_reserved_bytes != allocated peak + reserved_extra in 2 MiB segments");
}

void check_throughput(const Throughput& t) {
    check_positive(t.step_time_s, "step_time_s");
    check_positive(t.tokens_per_s, "tokens_per_s");
    check_positive(t.mfu, "mfu");
    check_positive(t.hfu, "hfu");
    check_positive(t.model_flops_per_step, "model_flops_per_step");
    check_positive(t.hardware_flops_per_step, "hardware_flops_per_step");
}

// A refusal must name its culprit (the key, field or flag) in its subject.
void named(const InputError& e) {
    if (e.subject().empty()) wrong(std::string("a refusal that names nothing: ") + e.what());
}

// Evaluates memory (with the timeline) and step time; InputError is a correct refusal.
void evaluate(const ModelConfig& m, const GpuSpec& g, const Plan& p) {
    try {
        MemoryOptions mo;
        mo.timeline = true;
        check_memory(evaluate_memory(m, g, p, mo), p);
    } catch (const InputError& e) {
        named(e);
        return;
    }
    try {
        check_throughput(estimate_throughput(m, g, p, {}));
    } catch (const InputError& e) {
        named(e);
    }
}

// A framework config (--from): imported under a forced format, its plan applied and evaluated.
// A refusal must name the file; an accepted config must give a plan whose figures are sane.
void import_and_evaluate(const std::string& text, ConfigFormat format) {
    ImportedConfig c;
    Plan p;
    std::optional<ModelConfig> m;
    try {
        ImportContext context{8};
        context.catalog = catalog;
        context.script_folder = "/fuzz/jobs";  // $PWD, $0, $(dirname ...), cd: read, no file opened
        c = import_config_text(text, "fuzz.cfg", format, context);
        for (const ImportedField& v : c.fields)
            if (!plan_field(v.key)) wrong("imported an unknown plan field '" + v.key + "'");
        p = apply_imported_fields(c, p);
        if (c.model_config) m = model_from_hf_config(*c.model_config, "fuzz");
    } catch (const InputError& e) {
        if (std::string(e.what()).find("fuzz.cfg") == std::string::npos)
            wrong(std::string("config error that does not name the file: ") + e.what());
        return;
    }
    if (!m) m = small_model();
    if (p.seq == 0) p.seq = std::min<std::int64_t>(m->max_positions, 512);
    evaluate(*m, h100(), p);
}

// Keys whose value may legitimately be negative, zero or null in a JSON output.
const std::set<std::string>& signed_keys() {
    static const std::set<std::string> k = {"rounding", "relative_error", "batch_error", "dropout", "zero", "seconds",
                                            "pipeline_stage", "tracked_peak_relative_error", "value", "headroom",
                                            "batch_tolerance", "share", "base_lr", "ratio", "lr", "warmup_steps",
                                            "warmup_tokens", "agreement_relative_error"};
    return k;
}
// Keys that must be a positive number wherever they appear.
const std::set<std::string>& positive_keys() {
    static const std::set<std::string> k = {
        "peak_bytes", "params", "params_active", "memory_bytes", "step_time_s", "tokens_per_s", "tokens_per_s_per_gpu",
        "mfu", "hfu", "model_flops_per_step", "hardware_flops_per_step", "peak_flops_per_s", "global_batch_tokens",
        "gpus", "seq", "mbs", "grad_acc", "dp", "tp", "pp", "tokens_per_step", "weights", "limit_bytes"};
    return k;
}

void check_json(const json& j, const std::string& path, const std::string& key) {
    if (j.is_object()) {
        for (const auto& [k, v] : j.items()) check_json(v, path + "." + k, k);
    } else if (j.is_array()) {
        for (std::size_t i = 0; i < j.size(); ++i) check_json(j[i], path + "[" + std::to_string(i) + "]", key);
    } else if (j.is_number()) {
        const double v = j.get<double>();
        if (!std::isfinite(v)) wrong(path + " is not finite");
        if (signed_keys().count(key)) return;
        if (v < 0) wrong(path + " is negative: " + j.dump());
        // (Timeline samples count sequences and micro-batches from 0.)
        if (positive_keys().count(key) && v == 0 && path.find(".timeline") == std::string::npos)
            wrong(path + " is zero");
    } else if (j.is_null() && positive_keys().count(key) && path.find(".measured") == std::string::npos &&
               path.find(".device") == std::string::npos &&
               !(key == "peak_bytes" && path.rfind(".rejected[", 0) == 0)) {
        // (A family rejected for another reason than memory has no peak: null.)
        // Measured figures of a dry run are N/A (null) by design; a predicted one never is.
        wrong(path + " is null (a NaN or infinity printed as null?)");
    }
}

// Runs the command line in process with stdout and stderr captured; returns its exit code.
int run_captured(const std::vector<const char*>& argv, std::ostringstream& out, std::ostringstream& err) {
    auto* old_out = std::cout.rdbuf(out.rdbuf());
    auto* old_err = std::cerr.rdbuf(err.rdbuf());
    int code = -1;
    try {
        code = cli::run_command_line(static_cast<int>(argv.size()), argv.data());
    } catch (...) {
        std::cout.rdbuf(old_out);
        std::cerr.rdbuf(old_err);
        throw;
    }
    std::cout.rdbuf(old_out);
    std::cerr.rdbuf(old_err);
    return code;
}

// Runs `preflight ARGS --format json` in process and judges the outcome.
void run_cli_vector(const std::string& command, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"preflight"};
    std::istringstream cmd(command);
    for (std::string w; cmd >> w;) argv.push_back(w);
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--format");
    argv.push_back("json");
    // The plan search's default bound (500,000 plans, up to 2 s in a release build) would be
    // minutes under ASan: a fuzzed search judges at most 5,000 (seconds).
    if (command == "plan") {
        argv.push_back("--max-plans");
        argv.push_back("5000");
    }
    std::vector<const char*> cargv;
    for (const auto& a : argv) cargv.push_back(a.c_str());

    std::ostringstream out, err;
    const int code = run_captured(cargv, out, err);

    std::string line;
    for (const auto& a : argv) line += a + " ";
    // The command's own line (not an echo of a fuzzed argument inside a usage error).
    if (err.str().rfind("preflight: internal error:", 0) == 0 ||
        err.str().find("\npreflight: internal error:") != std::string::npos)
        wrong("an error that names no field: " + line + "\n" + err.str());
    if (code < 0 || code > 3) wrong("exit code " + std::to_string(code) + ": " + line);
    const bool accepted = code == 0 || (code == 1 && command != "run --dry-run");
    if (!accepted || out.str().empty() || command == "models" || command == "gpus") return;
    if (code == 0 && out.str().rfind("{", 0) != 0 && out.str().find("Usage:") != std::string::npos)
        return;  // -h / --help (also bundled, as in "-hx"): the help text, exit 0
    const bool emits = std::any_of(args.begin(), args.end(), [](const std::string& a) {
        return a == "--emit" || a.rfind("--emit=", 0) == 0;
    });
    if (emits && out.str().rfind("{", 0) != 0) {
        // --emit megatron / torchtitan print arguments or TOML, not JSON: no token is a
        // negative or non-finite number.
        std::string token;
        std::istringstream words(out.str());
        while (words >> token) {
            token.erase(0, token.find_first_not_of("=\"[(,"));
            token.erase(token.find_last_not_of("\"]),") + 1);
            std::string lower = token;
            for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
            const bool negative = lower.size() > 1 && lower[0] == '-' && std::isdigit(static_cast<unsigned char>(lower[1]));
            if (negative || lower == "nan" || lower == "inf" || lower == "-nan" || lower == "-inf")
                wrong("--emit output holds the number '" + token + "': " + line);
        }
        return;
    }
    const json doc = json::parse(out.str(), nullptr, false);
    if (doc.is_discarded()) wrong("exit " + std::to_string(code) + " without a JSON document: " + line);
    check_json(doc, "", "");
}

// A measured data set (dataset.json, then a line "---csv---", then its CSV rows) written to a
// scratch folder and checked as `validate --check` does: never an internal error, an exit above 3
// or a hang. (Its JSON holds signed errors, so figures are not judged one by one.)
void check_dataset(const std::string& text) {
    static const std::filesystem::path dir = [] {
        char tmpl[] = "/tmp/preflight-fuzz-set-XXXXXX";
        const char* made = mkdtemp(tmpl);
        return std::filesystem::path(made ? made : "/tmp/preflight-fuzz-set");
    }();
    const std::size_t cut = text.find("\n---csv---\n");
    if (cut == std::string::npos) return;
    json manifest = json::parse(text.substr(0, cut), nullptr, false);
    if (manifest.is_discarded() || !manifest.is_object()) return;
    manifest["csv"] = "runs.csv";  // never a path outside the scratch folder
    std::ofstream(dir / "dataset.json") << manifest.dump();
    std::ofstream(dir / "runs.csv") << text.substr(cut + 11);
    std::vector<const char*> argv = {"preflight", "validate", "--check", dir.c_str(), "--no-report-files", "--format", "json"};
    std::ostringstream out, err;
    const int code = run_captured(argv, out, err);
    if (err.str().find("internal error") != std::string::npos) wrong("data set: an error that names nothing: " + err.str());
    if (code < 0 || code > 3) wrong("data set: exit code " + std::to_string(code));
}

std::vector<std::string> split_args(const std::string& s) {
    std::vector<std::string> v;
    std::string cur;
    for (char c : s) {
        if (c == '\n') {
            v.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    if (!cur.empty()) v.push_back(cur);
    // Keep the harness in its sandbox: no file writes, no paths, no other --format or
    // --max-plans, at most 24 arguments.
    std::vector<std::string> keep;
    for (std::size_t i = 0; i < v.size() && keep.size() < 24; ++i) {
        const std::string& a = v[i];
        if (a.find('/') != std::string::npos || a.find('\0') != std::string::npos) continue;
        if (a.rfind("--report", 0) == 0 || a.rfind("--write-spec", 0) == 0 || a.rfind("--out", 0) == 0 ||
            a.rfind("--format", 0) == 0 || a.rfind("--plan", 0) == 0 || a.rfind("--data-dir", 0) == 0 ||
            a.rfind("--save-init", 0) == 0 || a.rfind("--init-from", 0) == 0 || a.rfind("--max-plans", 0) == 0) {
            ++i;  // drop the flag and its value
            continue;
        }
        keep.push_back(a);
    }
    return keep;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    setenv("PREFLIGHT_DATA_DIR", PREFLIGHT_FUZZ_DATA_DIR, 1);
    (void)small_model();
    (void)h100();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    // Byte 0: documents (modes 0-3) get 12/16 of the inputs (they are cheap), framework configs
    // (low nibble 12-14; format = high nibble % 4: torchtitan, megatron, deepspeed, nanotron)
    // 3/16, flag vectors (low nibble 15) 1/16, split over the commands by the high nibble.
    const int selector = data[0] % 16;
    const int mode = selector % 4;
    const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
    if (selector >= 12 && selector < 15) {
        constexpr ConfigFormat formats[] = {ConfigFormat::torchtitan, ConfigFormat::megatron, ConfigFormat::deepspeed,
                                            ConfigFormat::nanotron};
        import_and_evaluate(text, formats[(data[0] / 16) % 4]);
        return 0;
    }
    if (selector < 12) {
        const json j = json::parse(text, nullptr, false);
        if (j.is_discarded()) return 0;
        switch (mode) {
            case 0: {  // model config.json
                ModelConfig m;
                try {
                    m = model_from_hf_config(j, "fuzz");
                } catch (const InputError& e) {
                    named(e);
                    return 0;
                }
                // Optional extras in the same document pair the fuzzed model with a fuzzed
                // plan (extension keys included) and node size, which catalog models and
                // flag vectors cannot reach: "preflight_plan": {...}, "preflight_gpus_per_node": N.
                Plan p;
                p.seq = std::min<std::int64_t>(m.max_positions, 512);
                GpuSpec g = h100();
                try {
                    if (j.contains("preflight_plan")) p = plan_from_json(j.at("preflight_plan"));
                    if (j.contains("preflight_gpus_per_node") && j.at("preflight_gpus_per_node").is_number_integer())
                        g.gpus_per_node = static_cast<int>(
                            std::clamp<std::int64_t>(j.at("preflight_gpus_per_node").get<std::int64_t>(), 1, 1024));
                } catch (const InputError& e) {
                    named(e);
                    return 0;
                }
                evaluate(m, g, p);
                break;
            }
            case 1: {  // GPU spec
                GpuSpec g;
                try {
                    g = gpu_from_json(j, "fuzz");
                } catch (const InputError& e) {
                    named(e);
                    return 0;
                }
                Plan p;
                p.seq = 512;
                evaluate(small_model(), g, p);
                break;
            }
            case 2: {  // plan file
                Plan p;
                try {
                    p = plan_from_json(j.contains("plan") && j.is_object() ? j["plan"] : j);
                } catch (const InputError& e) {
                    named(e);
                    return 0;
                }
                evaluate(small_model(), h100(), p);
                break;
            }
            case 3: {  // run report, as validate --check reads it
                try {
                    validation::check_run_report_fields(j, "fuzz.json");
                    if (!validation::is_run_report(j)) return 0;
                    validation::CheckOptions o;
                    o.data_dir = data_dir();
                    // Re-predicting a runtime report walks the whole step program (~170 ms
                    // under ASan): one report in 16 takes that path (byte 0 below 16, as the
                    // seeds), the rest are compared under the pytorch profile.
                    json r = j;
                    if (data[0] >= 16 && r.is_object()) r["source"] = "pytorch";
                    const auto rc = validation::check_report(r, "fuzz", {}, o);
                    for (const auto& c : rc.comparisons)
                        if (!std::isfinite(c.relative_error) && c.predicted != 0) wrong("non-finite comparison");
                } catch (const InputError& e) {
                    named(e);
                }
                break;
            }
        }
        return 0;
    }
    // Flag vectors for the commands that take them.
    // The plan search and the dry run cost ~100x a memory evaluation under ASan: they get
    // one flag vector in 16 each (byte 0 = 79 and 95 in the seeds), the memory command most.
    const int k = data[0] / 16;  // 0..15
    if (k == 8) {  // byte 0 = 143: a measured data set
        check_dataset(text);
        return 0;
    }
    const std::string command = k == 4 ? "plan" : k == 5 ? "run --dry-run" : k == 6 ? "models" : k == 7 ? "gpus" : "memory";
    run_cli_vector(command, split_args(text));
    return 0;
}
