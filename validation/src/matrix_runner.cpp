// The validation matrix runner (matrix_runner.hpp): one child process per run.
#include "preflight/validation/matrix_runner.hpp"

#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>

#include "preflight/planner/catalog.hpp"
#include "preflight/planner/report.hpp"
#include "preflight/runtime/run_report.hpp"

namespace preflight::validation {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

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

// The last `bytes` of a run's log, read from there (a long log is not read whole).
std::string tail_of(const fs::path& file, std::size_t bytes) {
    std::ifstream in(file, std::ios::binary | std::ios::ate);
    const std::streamoff size = in ? static_cast<std::streamoff>(in.tellg()) : -1;
    if (size <= 0) return "";
    const std::streamoff start = std::max<std::streamoff>(0, size - static_cast<std::streamoff>(bytes));
    in.seekg(start);
    std::string s(static_cast<std::size_t>(size - start), '\0');
    in.read(s.data(), static_cast<std::streamsize>(s.size()));
    s.resize(static_cast<std::size_t>(in.gcount()));
    return s;
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

// Evidence: the device as nvidia-smi shows it and every command line, appended per session.
json open_evidence_session(const Matrix& matrix, const MatrixRunnerOptions& o, bool pytorch) {
    json evidence = json::object();
    if (fs::exists(o.out / "evidence.json")) evidence = read_json_file(o.out / "evidence.json", "evidence.json");
    json session = {{"started_utc", utc_now()},
                    {"framework", o.framework},
                    {"matrix", matrix.name},
                    {"gpu_spec", o.gpu},
                    {"preflight_exe", o.preflight_exe},
                    {"nvidia_smi", capture("nvidia-smi").value_or("unavailable")},
                    {"nvidia_smi_query", capture("nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm "
                                                 "--format=csv").value_or("unavailable")},
                    {"command_lines", json::array()}};
    if (pytorch)
        session["torch"] = capture(o.python + " -c \"import torch, transformers; print(torch.__version__, "
                                              "torch.version.cuda, transformers.__version__)\"")
                               .value_or("unavailable");
    if (!evidence.contains("sessions")) evidence["sessions"] = json::array();
    evidence["sessions"].push_back(session);
    return evidence;
}

// The command line of one run: `preflight run ... --format json` or the PyTorch script.
std::vector<std::string> run_command_line(const MatrixRun& run, const MatrixRunnerOptions& o, bool pytorch,
                                          const fs::path& report) {
    std::vector<std::string> argv;
    if (pytorch) {
        std::string config = run.model;
        if (const fs::path cat = o.data_dir / "models" / (run.model + ".json"); fs::exists(cat)) config = cat.string();
        argv = {o.python, o.script, "--config", config, "--model-name", run.model};
        auto a = run_arguments(run, o.gpu);
        for (std::size_t i = 2; i < a.size(); ++i) argv.push_back(a[i]);  // drop --model
    } else {
        argv = {o.preflight_exe, "run"};
        for (auto& a : run_arguments(run, o.gpu)) argv.push_back(a);
        argv.push_back("--format");
        argv.push_back("json");
    }
    argv.push_back("--report");
    argv.push_back(report.string());
    return argv;
}

// A crash (signal, abort, exit without a report) loses only this run; it is recorded as a stub report.
std::string record_crash(const MatrixRun& run, const MatrixRunnerOptions& o, int status, const fs::path& report,
                         const fs::path& log) {
    const bool signalled = status >= 0 && WIFSIGNALED(status);
    const int code = status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    const std::string why = signalled ? "killed by signal " + std::to_string(WTERMSIG(status))
                                      : "exited with code " + std::to_string(code) + " without a report";
    json stub = {{"schema_version", kSchemaVersion},
                 {"command", "run"},
                 {"source", o.framework},
                 {"mode", "device"},
                 {"status", "crashed"},
                 {"message", why},
                 {"exit_code", code},
                 {"model", {{"name", run.model}}},
                 {"gpu", {{"name", o.gpu}}},
                 {"plan", plan_to_json(run.plan)},
                 {"steps", run.steps},
                 {"measured", json::object()},
                 {"log_tail", tail_of(log, 4000)}};
    runtime::write_file_atomic(report, stub.dump(2) + "\n");
    return "crashed (" + why + ")";
}

}  // namespace

std::optional<std::string> capture_command(const std::string& command) { return capture(command); }

void run_matrix(const Matrix& matrix, const MatrixRunnerOptions& o) {
    const bool pytorch = o.framework == kSourcePytorch;
    const fs::path runs_dir = o.out / o.framework;
    const fs::path logs_dir = o.out / "logs" / o.framework;
    fs::create_directories(runs_dir);
    fs::create_directories(logs_dir);
    runtime::write_file_atomic(o.out / "matrix.json", matrix.raw.dump(2) + "\n");
    json evidence = open_evidence_session(matrix, o, pytorch);
    json& lines = evidence["sessions"].back()["command_lines"];
    auto save_evidence = [&] { runtime::write_file_atomic(o.out / "evidence.json", evidence.dump(2) + "\n"); };
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
        const std::vector<std::string> argv = run_command_line(run, o, pytorch, report);
        std::string line;
        for (const auto& a : argv) {  // appended piecewise: GCC 12 warns (-Wrestrict) on "" + string
            if (!line.empty()) line += ' ';
            line += quote(a);
        }
        lines.push_back(line);
        save_evidence();

        const fs::path log = logs_dir / (run.id + ".log");
        const auto t0 = std::chrono::steady_clock::now();
        const int status = spawn(argv, log);
        const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        executed_s += took;
        ++executed;
        const std::string outcome = fs::exists(report) ? read_json_file(report, "report").value("status", "ok")
                                                       : record_crash(run, o, status, report, log);
        if (outcome != "ok") ++failed;
        const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const double eta = executed_s / executed * (total - done);
        std::fprintf(stderr, "[%d/%d] %s: %s in %.1f s; elapsed %s, ETA %s\n", done, total, run.id.c_str(),
                     outcome.c_str(), took, clock_text(elapsed).c_str(), clock_text(eta).c_str());
    }
    std::cerr << "preflight validate: " << executed << " run(s) executed, " << skipped << " already recorded, " << failed
              << " failed (recorded as such) in " << o.out.string() << "\nnext: preflight validate --check "
              << o.out.string() << "\n";
}

}  // namespace preflight::validation
