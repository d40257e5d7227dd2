// `preflight validate`: run a validation matrix on the GPU, one process per run
// (--matrix M --out DIR), or compare recorded runs with today's planner (--check DIR).
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "commands.hpp"
#include "preflight/planner/catalog.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/report.hpp"
#include "preflight/runtime/run_report.hpp"
#include "preflight/validation/check.hpp"
#include "preflight/validation/external_eval.hpp"
#include "preflight/validation/external_memory.hpp"
#include "preflight/validation/external_runs.hpp"
#include "preflight/validation/throughput_fit.hpp"
#include "preflight/validation/matrix.hpp"
#include "preflight/validation/plot.hpp"
#if defined(PREFLIGHT_HAVE_RUNTIME)
#include "preflight/runtime/runtime.hpp"
#endif

namespace preflight::cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct ValidateState {
    std::string matrix, out, check, gpu, data_dir, tolerances_matrix, report_dir;
    std::string framework = validation::kSourceRuntime;
    std::string python = "python3";
    std::string script;
    std::string format = "table";
    bool no_report_files = false;
};

// Output of a shell command (stdout and stderr), or nullopt when it cannot run / fails.
std::optional<std::string> capture(const std::string& cmd) {
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    if (!p) return std::nullopt;
    std::string out;
    char buf[4096];
    std::size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int status = pclose(p);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
    return out;
}

std::string quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) {
        if (c == '\'')
            q.append("'\\''");
        else
            q.push_back(c);
    }
    q.push_back('\'');
    return q;
}

// Runs argv[0] with argv in a child process, stdout+stderr to `log`; returns the wait status.
int spawn(const std::vector<std::string>& argv, const fs::path& log) {
    const pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            ::close(fd);
        }
        std::vector<char*> args;
        for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        execvp(args[0], args.data());
        std::perror("preflight validate: exec");
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) return -1;
    }
    return status;
}

std::string tail_of(const fs::path& file, std::size_t bytes) {
    std::ifstream in(file, std::ios::binary);
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return s.size() > bytes ? s.substr(s.size() - bytes) : s;
}

std::string clock_text(double s) {
    char b[32];
    const long t = static_cast<long>(s + 0.5);
    std::snprintf(b, sizeof b, "%ldm%02lds", t / 60, t % 60);
    return b;
}

std::string utc_now() {
    const std::time_t t = std::time(nullptr);
    char b[32];
    std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return b;
}

int run_matrix(const ValidateState& st) {
    const fs::path data = data_dir_of(st.data_dir);
    const validation::Matrix matrix = validation::load_matrix(st.matrix, validation::default_matrices_dir());
    const std::string gpu = st.gpu.empty() ? matrix.gpu : st.gpu;
    load_gpu(gpu, data);  // bad --gpu: exit 2 before anything runs
    const bool pytorch = st.framework == validation::kSourcePytorch;

    // A GPU is needed before anything is spawned (exit 3 otherwise).
    if (!pytorch) {
#if defined(PREFLIGHT_HAVE_RUNTIME)
        if (runtime::device_count() == 0) {
            std::cerr << "preflight validate: no CUDA device is available; `validate --check DIR` needs none\n";
            return kExitNoDevice;
        }
#else
        std::cerr << "preflight validate: this build has no CUDA runtime (configure with PREFLIGHT_CUDA=ON on a machine "
                     "with nvcc); `validate --check DIR` needs none\n";
        return kExitNoDevice;
#endif
    } else if (!capture("nvidia-smi -L")) {
        std::cerr << "preflight validate: no GPU (nvidia-smi -L failed); the PyTorch runs need one\n";
        return kExitNoDevice;
    }
    std::string script = st.script;
    if (pytorch && script.empty()) script = (validation::default_matrices_dir().parent_path() / "pytorch" / "train.py").string();

    const fs::path out = st.out;
    const fs::path runs_dir = out / st.framework;
    const fs::path logs_dir = out / "logs" / st.framework;
    fs::create_directories(runs_dir);
    fs::create_directories(logs_dir);
    runtime::write_file_atomic(out / "matrix.json", matrix.raw.dump(2) + "\n");
    const std::string exe = fs::read_symlink("/proc/self/exe").string();

    // Evidence: the device as nvidia-smi shows it and every command line, appended per session.
    json evidence = json::object();
    if (fs::exists(out / "evidence.json")) evidence = read_json_file(out / "evidence.json", "evidence.json");
    json session = {{"started_utc", utc_now()},
                    {"framework", st.framework},
                    {"matrix", matrix.name},
                    {"gpu_spec", gpu},
                    {"preflight_exe", exe},
                    {"nvidia_smi", capture("nvidia-smi").value_or("unavailable")},
                    {"nvidia_smi_query", capture("nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm "
                                                 "--format=csv").value_or("unavailable")},
                    {"command_lines", json::array()}};
    if (pytorch)
        session["torch"] = capture(st.python + " -c \"import torch, transformers; print(torch.__version__, "
                                               "torch.version.cuda, transformers.__version__)\"")
                               .value_or("unavailable");
    if (!evidence.contains("sessions")) evidence["sessions"] = json::array();
    evidence["sessions"].push_back(session);
    json& lines = evidence["sessions"].back()["command_lines"];
    auto save_evidence = [&] { runtime::write_file_atomic(out / "evidence.json", evidence.dump(2) + "\n"); };
    save_evidence();

    const auto start = std::chrono::steady_clock::now();
    int done = 0, skipped = 0, executed = 0, failed = 0;
    double executed_s = 0;
    const int total = static_cast<int>(matrix.runs.size());
    for (const auto& run : matrix.runs) {
        ++done;
        const fs::path report = runs_dir / (run.id + ".json");
        if (pytorch && run.plan.recompute == Recompute::selective) {
            // HF transformers checkpoints whole layers only (train.py exits 2 for selective).
            std::cerr << "[" << done << "/" << total << "] " << run.id << ": skipped (no selective recompute in PyTorch/HF)\n";
            continue;
        }
        if (fs::exists(report)) {  // resume: a recorded run (any status) is not repeated
            ++skipped;
            std::cerr << "[" << done << "/" << total << "] " << run.id << ": already recorded, skipped\n";
            continue;
        }
        std::vector<std::string> argv;
        if (pytorch) {
            std::string config = run.model;
            if (const fs::path cat = data / "models" / (run.model + ".json"); fs::exists(cat)) config = cat.string();
            argv = {st.python, script, "--config", config, "--model-name", run.model};
            auto a = validation::run_arguments(run, gpu);
            for (std::size_t i = 2; i < a.size(); ++i) argv.push_back(a[i]);  // drop --model
        } else {
            argv = {exe, "run"};
            for (auto& a : validation::run_arguments(run, gpu)) argv.push_back(a);
            argv.push_back("--format");
            argv.push_back("json");
        }
        argv.push_back("--report");
        argv.push_back(report.string());
        std::string line;
        for (const auto& a : argv) line += (line.empty() ? "" : " ") + quote(a);
        lines.push_back(line);
        save_evidence();

        const fs::path log = logs_dir / (run.id + ".log");
        const auto t0 = std::chrono::steady_clock::now();
        const int status = spawn(argv, log);
        const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        executed_s += took;
        ++executed;
        std::string outcome;
        if (fs::exists(report)) {
            const json r = read_json_file(report, "report");
            outcome = r.value("status", "ok");
        } else {
            // A crash (signal, abort, exit without a report) loses only this run; record it.
            const bool signalled = status >= 0 && WIFSIGNALED(status);
            const int code = status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
            const std::string why = signalled ? "killed by signal " + std::to_string(WTERMSIG(status))
                                              : "exited with code " + std::to_string(code) + " without a report";
            json stub = {{"schema_version", kSchemaVersion},
                         {"command", "run"},
                         {"source", st.framework},
                         {"mode", "device"},
                         {"status", "crashed"},
                         {"message", why},
                         {"exit_code", code},
                         {"model", {{"name", run.model}}},
                         {"gpu", {{"name", gpu}}},
                         {"plan", plan_to_json(run.plan)},
                         {"steps", run.steps},
                         {"measured", json::object()},
                         {"log_tail", tail_of(log, 4000)}};
            runtime::write_file_atomic(report, stub.dump(2) + "\n");
            outcome = "crashed (" + why + ")";
        }
        if (outcome != "ok") ++failed;
        const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const double eta = executed_s / executed * (total - done);
        std::fprintf(stderr, "[%d/%d] %s: %s in %.1f s; elapsed %s, ETA %s\n", done, total, run.id.c_str(),
                     outcome.c_str(), took, clock_text(elapsed).c_str(), clock_text(eta).c_str());
    }
    std::cerr << "preflight validate: " << executed << " run(s) executed, " << skipped << " already recorded, " << failed
              << " failed (recorded as such) in " << out.string() << "\nnext: preflight validate --check "
              << out.string() << "\n";
    return kExitOk;
}

struct ExternalOutcome {
    bool passed = true;
    nlohmann::json json = nlohmann::json::array();
    std::string table;
};

// Each external data set: the memory model's k-fold cross-validation (before: the default
// profile; after: the data set's framework profile with constants fitted on the other folds),
// gated on the figures in its dataset.json "targets".
ExternalOutcome check_external(const std::vector<fs::path>& datasets, const ValidateState& st, const fs::path& report_dir) {
    ExternalOutcome out;
    for (const fs::path& folder : datasets) {
        const validation::ExternalDataset d = validation::read_external_dataset(folder, data_dir_of(st.data_dir));
        if (d.evaluation_only) {  // committed constants only: nothing is fitted on it
            std::cerr << "preflight validate: " << d.name << ": " << d.runs.size() << " rows, evaluation only...\n";
            const auto ev = validation::evaluate_external_dataset(d, data_dir_of(st.data_dir));
            if (!ev.failures.empty()) out.passed = false;
            out.json.push_back({{"name", d.name}, {"folder", folder.string()}, {"jobs", d.runs.size()},
                                {"framework", d.framework}, {"gpu", d.gpu}, {"evaluation", ev.summary},
                                {"targets", d.targets}, {"failures", ev.failures}, {"passed", ev.failures.empty()}});
            std::string t = "\n# external data set " + d.name + " (" + std::to_string(d.runs.size()) + " rows, " +
                            d.framework + ")\n\n" + ev.markdown + "\n";
            t += ev.failures.empty() ? "within the data set's targets\n" : "";
            for (const auto& f : ev.failures) t += "OUT OF TARGET: " + f + "\n";
            out.table += t;
            if (!st.no_report_files) {
                fs::create_directories(report_dir);
                runtime::write_file_atomic(report_dir / ("external-" + d.name + ".md"), t);
            }
            continue;
        }
        if (d.framework != "nanotron")
            throw InputError((folder / "dataset.json").string(),
                             "framework '" + d.framework + "': only nanotron data sets have a fitted memory model");
        const GpuSpec gpu = load_gpu(d.gpu, data_dir_of(st.data_dir));
        int folds = 5;
        if (d.targets.contains("folds")) {
            if (!d.targets.at("folds").is_number_integer())
                throw InputError((folder / "dataset.json").string(), "targets.folds must be an integer");
            folds = d.targets.at("folds").get<int>();
        }
        std::cerr << "preflight validate: " << d.name << ": " << d.runs.size() << " jobs, memory " << folds
                  << "-fold cross-validation by configuration...\n";
        const auto cv = validation::memory_cross_validation(d.runs, gpu, folds);
        auto failures = validation::memory_gate_failures(cv.held_out_figures, d.targets);
        std::cerr << "preflight validate: " << d.name << ": tokens/s " << folds
                  << "-fold cross-validation by model/tp/pp family...\n";
        const validation::ThroughputGate tg = validation::throughput_gate(d, gpu);
        failures.insert(failures.end(), tg.failures.begin(), tg.failures.end());
        if (!failures.empty()) out.passed = false;
        nlohmann::json j = {{"name", d.name},
                            {"folder", folder.string()},
                            {"jobs", d.runs.size()},
                            {"framework", d.framework},
                            {"gpu", d.gpu},
                            {"memory", validation::memory_cv_to_json(cv)},
                            {"throughput", tg.summary},
                            {"targets", d.targets},
                            {"failures", failures},
                            {"passed", failures.empty()}};
        out.json.push_back(j);
        std::ostringstream t;
        t << "\n# external data set " << d.name << " (" << d.runs.size() << " jobs, " << d.framework << " on " << d.gpu
          << "), memory, " << folds << "-fold cross-validation grouped by configuration\n\n"
          << validation::memory_cv_markdown(d.runs, cv) << "\n"
          << "## tokens/s per GPU, " << tg.cv.folds << "-fold cross-validation grouped by model/tp/pp family\n\n"
          << tg.markdown << "\n";
        if (failures.empty())
            t << "memory and tokens/s: within the data set's targets\n";
        for (const auto& f : failures) t << "OUT OF TARGET: " << f << "\n";
        out.table += t.str();
        if (!st.no_report_files) {
            fs::create_directories(report_dir);
            runtime::write_file_atomic(report_dir / ("external-" + d.name + "-memory.svg"),
                                       validation::memory_cv_svg(d.runs, cv));
            runtime::write_file_atomic(report_dir / ("external-" + d.name + "-memory.md"), t.str());
        }
    }
    return out;
}

int run_check(const ValidateState& st) {
    validation::CheckOptions o;
    o.data_dir = data_dir_of(st.data_dir);
    if (!st.gpu.empty()) o.gpu = st.gpu;
    if (!st.tolerances_matrix.empty())
        o.tolerances = validation::load_matrix(st.tolerances_matrix, validation::default_matrices_dir()).tolerances;
    // External measured data sets (folders with a dataset.json) are checked beside the run reports.
    const auto datasets = validation::find_external_datasets(st.check);
    std::optional<validation::CheckResult> r;
    try {
        r = validation::check_directory(st.check, o);
    } catch (const InputError& e) {
        if (datasets.empty() || std::string(e.what()).find("holds no run reports") == std::string::npos) throw;
    }
    const fs::path report_dir = st.report_dir.empty() ? fs::path(st.check) : fs::path(st.report_dir);
    if (r && !st.no_report_files) {
        fs::create_directories(report_dir);
        runtime::write_file_atomic(report_dir / "validation-plot.svg", validation::residual_plot_svg(*r));
        runtime::write_file_atomic(report_dir / "validation-report.md",
                                   validation::markdown_report(*r, "validation-plot.svg"));
    }
    const ExternalOutcome ext = check_external(datasets, st, report_dir);
    if (st.format == "json") {
        nlohmann::json j = r ? validation::summary_to_json(*r) : nlohmann::json::object();
        if (!datasets.empty()) j["external"] = ext.json;
        std::cout << j.dump(2) << "\n";
    } else {
        if (r) std::cout << validation::summary_table(*r);
        std::cout << ext.table;
    }
    if (r)
        for (const auto& run : r->runs)
            if (run.not_compared)
                std::cerr << "preflight validate: " << run.path.string() << ": could not be compared (" << run.note
                          << "); the check fails\n";
    return (!r || r->passed()) && ext.passed ? kExitOk : kExitDoesNotFit;
}

}  // namespace

Command add_validate_command(CLI::App& app) {
    auto st = std::make_shared<ValidateState>();
    auto* sub = app.add_subcommand(
        "validate", "Run a validation matrix on the GPU (--matrix M --out DIR), or compare recorded runs with today's "
                    "planner (--check DIR, no GPU needed)");
    auto* m = sub->add_option("--matrix", st->matrix, "Matrix name (smoke, full) or path to a matrix JSON");
    sub->add_option("--out", st->out, "Folder for the reports, logs and device evidence (with --matrix)");
    auto* c = sub->add_option("--check", st->check, "Folder of recorded run reports (searched recursively)");
    m->excludes(c);
    sub->add_option("--framework", st->framework, "Who runs the plans: preflight-runtime (default) | pytorch")
        ->check(CLI::IsMember({validation::kSourceRuntime, validation::kSourcePytorch}));
    sub->add_option("--gpu", st->gpu, "GPU spec for the predictions (default: the matrix's / each report's)");
    sub->add_option("--tolerances", st->tolerances_matrix,
                    "Take tolerances from this matrix instead of the matrix.json files found (with --check)");
    sub->add_option("--report-dir", st->report_dir,
                    "Where --check writes validation-report.md and validation-plot.svg (default: the checked folder)");
    sub->add_flag("--no-report-files", st->no_report_files, "--check writes no markdown or SVG");
    sub->add_option("--python", st->python, "Python interpreter for --framework pytorch (default python3)");
    sub->add_option("--script", st->script, "PyTorch script (default: validation/pytorch/train.py)");
    sub->add_option("--data-dir", st->data_dir, "Catalog folder (default: $PREFLIGHT_DATA_DIR or the built-in data/)");
    sub->add_option("--format", st->format, "table (default) | json (--check: the summary object)")
        ->check(CLI::IsMember({"table", "json"}));
    sub->footer(
        "Examples:\n  preflight validate --matrix smoke --out runs/h100-smoke          (GPU)\n"
        "  preflight validate --matrix full --out runs/h100 --framework pytorch\n"
        "  preflight validate --check data/measurements --format json         (CPU)\n"
        "Each run executes in its own process; an OOM or a crash loses only that run and is recorded as such.\n"
        "Runs already recorded under --out are skipped (resume). Tolerances: |measured - predicted| <= abs + rel *\n"
        "predicted, per quantity and source, from the matrix.json next to the reports.\n"
        "Exit codes: 0 ok / every run within tolerance; 1 a run out of tolerance; 2 bad input; 3 no GPU or no CUDA build.");
    return {sub, [st, sub] {
                if (st->check.empty() && st->matrix.empty())
                    throw InputError("validate", "give --check DIR, or --matrix M with --out DIR");
                if (!st->matrix.empty() && st->out.empty()) throw InputError("--out", "required with --matrix");
                (void)sub;
                return st->check.empty() ? run_matrix(*st) : run_check(*st);
            }};
}

}  // namespace preflight::cli
