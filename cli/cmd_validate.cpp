// `preflight validate`: run a validation matrix on the GPU, one process per run
// (--matrix M --out DIR), or compare recorded runs with today's planner (--check DIR).
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "commands.hpp"
#include "invocation.hpp"
#include "output_paths.hpp"
#include "preflight/planner/catalog.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/report.hpp"
#include "preflight/runtime/run_report.hpp"
#include "preflight/validation/check.hpp"
#include "preflight/validation/external_eval.hpp"
#include "preflight/validation/external_jobs.hpp"
#include "preflight/validation/external_memory.hpp"
#include "preflight/validation/external_runs.hpp"
#include "preflight/validation/throughput_fit.hpp"
#include "preflight/validation/matrix.hpp"
#include "preflight/validation/plot.hpp"
#include "preflight/runtime/device.hpp"
#include "preflight/validation/matrix_runner.hpp"

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
    bool report_dir_given = false;  // --report-dir "" is refused, not taken as absent
    const CLI::App* sub = nullptr;  // the parsed subcommand, recorded in the JSON summary
};

// The matrix runs on the device (validation/matrix_runner.hpp); a device is needed before
// anything is spawned (exit 3 otherwise).
int run_matrix(const ValidateState& st) {
    const fs::path data = data_dir_of(st.data_dir);
    const validation::Matrix matrix = validation::load_matrix(st.matrix, validation::default_matrices_dir());
    validation::MatrixRunnerOptions o;
    o.gpu = st.gpu.empty() ? matrix.gpu : st.gpu;
    load_gpu(o.gpu, data);  // bad --gpu: exit 2 before anything runs
    const bool pytorch = st.framework == validation::kSourcePytorch;
    if (!pytorch) {
        if (const auto why = runtime::device_backend_unavailable_reason(); !why.empty()) {
            std::cerr << "preflight: error: validate: " << why << "; `validate --check DIR` needs none\n";
            return kExitNoDevice;
        }
        if (runtime::device_count() == 0) {
            std::cerr << "preflight: error: validate: no CUDA device is available; `validate --check DIR` needs none\n";
            return kExitNoDevice;
        }
    } else if (!validation::capture_command("nvidia-smi -L")) {
        std::cerr << "preflight: error: validate: no GPU (nvidia-smi -L failed); the PyTorch runs need one\n";
        return kExitNoDevice;
    }
    o.data_dir = data;
    o.out = st.out;
    o.framework = st.framework;
    o.preflight_exe = fs::read_symlink("/proc/self/exe").string();
    o.python = st.python;
    o.script = st.script;
    if (pytorch && o.script.empty())
        o.script = (validation::default_matrices_dir().parent_path() / "pytorch" / "train.py").string();
    validation::run_matrix(matrix, o);
    return kExitOk;
}

struct ExternalOutcome {
    bool passed = true;
    nlohmann::json json = nlohmann::json::array();
    std::string table;
};

// An evaluation-only data set: predicted with the committed constants, gated on its targets.
void check_evaluation_only(const validation::ExternalDataset& d, const fs::path& folder, const ValidateState& st,
                           const fs::path& report_dir, ExternalOutcome& out) {
    std::cerr << "preflight validate: " << d.name << ": " << d.runs.size() << " rows, never fitted on...\n";
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
}

// The markdown of a fitted data set: memory (where modelled) and tokens/s, then the verdict.
std::string fitted_markdown(const validation::ExternalDataset& d, const validation::MemoryCrossValidation* cv,
                            int folds, const validation::ThroughputGate& tg, const std::vector<std::string>& failures) {
    std::ostringstream t;
    t << "\n# external data set " << d.name << " (" << d.runs.size() << " jobs, " << d.framework << " on " << d.gpu
      << ")";
    if (cv)
        t << ", memory, " << folds << "-fold cross-validation grouped by model/tp/pp family\n\n"
          << validation::memory_cv_markdown(d.runs, *cv);
    else
        t << "\n\nNo memory measured or no allocator model for this framework: the step time only.\n";
    t << "\n## tokens/s per GPU, " << tg.cv.folds << "-fold cross-validation grouped by model/tp/pp family\n\n"
      << tg.markdown << "\n";
    if (!tg.refused.empty()) t << tg.refused.size() << " job(s) not scored (first: " << tg.refused.front() << ")\n\n";
    if (failures.empty()) t << (cv ? "memory and tokens/s" : "tokens/s") << ": within the data set's targets\n";
    for (const auto& f : failures) t << "OUT OF TARGET: " << f << "\n";
    return t.str();
}

// A fitted data set: k-fold cross-validation of the memory model (before: the default profile;
// after: the nanotron profile with constants fitted on the other folds; nanotron data sets
// only, the profile with an allocator model) and of the step-time constants, gated on the
// figures in its dataset.json "targets".
void check_fitted(const validation::ExternalDataset& d, const fs::path& folder, const ValidateState& st,
                  const fs::path& report_dir, ExternalOutcome& out) {
    const GpuSpec gpu = load_gpu(d.gpu, data_dir_of(st.data_dir));
    int folds = 5;
    if (d.targets.contains("folds")) {
        if (!d.targets.at("folds").is_number_integer())
            throw InputError((folder / "dataset.json").string(), "targets.folds must be an integer");
        folds = d.targets.at("folds").get<int>();
    }
    std::cerr << "preflight validate: " << d.name << ": tokens/s " << folds
              << "-fold cross-validation by model/tp/pp family...\n";
    const validation::ThroughputGate tg = validation::throughput_gate(d, gpu);
    std::optional<validation::MemoryCrossValidation> cv;
    std::vector<std::string> failures;
    if (validation::has_memory_model(d)) {
        std::cerr << "preflight validate: " << d.name << ": " << d.runs.size() << " jobs, memory " << folds
                  << "-fold cross-validation by model/tp/pp family...\n";
        // The tokens/s folds' step-time constants: a held-out job's expected pace never rests on its own speed.
        cv = validation::memory_cross_validation(d.runs, gpu, folds, &tg.cv.fold_fits);
        failures = validation::memory_gate_failures(cv->held_out_figures, d.targets);
        const auto range = validation::range_gate_failures(cv->held_out_range, d.targets);
        failures.insert(failures.end(), range.begin(), range.end());
    }
    failures.insert(failures.end(), tg.failures.begin(), tg.failures.end());
    if (!failures.empty()) out.passed = false;
    nlohmann::json j = {{"name", d.name},           {"folder", folder.string()}, {"jobs", d.runs.size()},
                        {"framework", d.framework}, {"gpu", d.gpu},              {"throughput", tg.summary},
                        {"targets", d.targets},     {"failures", failures},      {"passed", failures.empty()}};
    if (cv) j["memory"] = validation::memory_cv_to_json(*cv);
    out.json.push_back(j);
    const std::string t = fitted_markdown(d, cv ? &*cv : nullptr, folds, tg, failures);
    out.table += t;
    if (st.no_report_files) return;
    fs::create_directories(report_dir);
    if (cv)
        runtime::write_file_atomic(report_dir / ("external-" + d.name + "-memory.svg"), validation::memory_cv_svg(d.runs, *cv));
    runtime::write_file_atomic(report_dir / ("external-" + d.name + (cv ? "-memory.md" : ".md")), t);
    runtime::write_file_atomic(report_dir / ("external-" + d.name + "-jobs.csv"),
                               validation::external_jobs_csv(d.runs, cv ? &*cv : nullptr, tg.cv));
}

ExternalOutcome check_external(const std::vector<fs::path>& datasets, const ValidateState& st, const fs::path& report_dir) {
    ExternalOutcome out;
    for (const fs::path& folder : datasets) {
        const validation::ExternalDataset d = validation::read_external_dataset(folder, data_dir_of(st.data_dir));
        if (d.evaluation_only)
            check_evaluation_only(d, folder, st, report_dir, out);
        else
            check_fitted(d, folder, st, report_dir, out);
    }
    return out;
}

// --report-dir is never the checked folder or inside it: the reports would land among the data
// (and a later check would read them back).
void check_report_dir_outside(const ValidateState& st) {
    const fs::path out = fs::weakly_canonical(fs::absolute(st.report_dir));
    const fs::path checked = fs::weakly_canonical(fs::absolute(st.check));
    const auto [c, o] = std::mismatch(checked.begin(), checked.end(), out.begin(), out.end());
    if (c == checked.end())
        throw InputError("--report-dir", "'" + st.report_dir + "' is inside the checked folder '" + st.check +
                                             "': give a folder outside it (the default is the build folder's validation-report/)");
}

int run_check(const ValidateState& st) {
    if (st.report_dir_given) {  // before any work
        check_output_dir(st.report_dir, "--report-dir");
        check_report_dir_outside(st);
    }
    validation::CheckOptions o;
    o.data_dir = data_dir_of(st.data_dir);
    if (!st.gpu.empty()) o.gpu = st.gpu;
    if (!st.tolerances_matrix.empty())
        o.tolerances = validation::load_tolerances(st.tolerances_matrix, validation::default_matrices_dir());
    // External measured data sets (folders with a dataset.json) are checked beside the run reports.
    const auto datasets = validation::find_external_datasets(st.check);
    std::optional<validation::CheckResult> r;
    try {
        r = validation::check_directory(st.check, o);
    } catch (const InputError& e) {
        if (datasets.empty() || std::string(e.what()).find("holds no run reports") == std::string::npos) throw;
    }
    // Generated files go to --report-dir, by default the build folder's validation-report/:
    // never into the checked (data) folder.
    const fs::path report_dir = st.report_dir.empty() ? fs::path(PREFLIGHT_DEFAULT_REPORT_DIR) : fs::path(st.report_dir);
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
        if (st.sub) j["invocation"] = invocation_json(*st.sub, o.data_dir);
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
                    "Take tolerances from this file's \"tolerances\" block (a matrix, or a file with that block "
                    "alone) instead of the matrix.json files found (with --check)");
    sub->add_option("--report-dir", st->report_dir,
                    "Where --check writes validation-report.md, validation-plot.svg and the external data sets' "
                    "reports, with external-<name>-jobs.csv: each job's held-out predictions beside its "
                    "measurements (default: validation-report/ in the build folder; never the checked folder; made if "
                    "missing, but its parent folder must exist)")
        ->each([st](const std::string&) { st->report_dir_given = true; });
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
        "predicted, per quantity and source, from the nearest matrix.json between a report's folder and DIR\n"
        "(else --tolerances or the defaults).\n"
        "Exit codes: 0 ok / every run compared and within tolerance; 1 a run out of tolerance, a run that could not\n"
        "be compared (crashed, failed, nothing to compare), or no run compared at all; 2 bad input (also a DIR\n"
        "with no run report and no data set); 3 no GPU or no CUDA build.");
    st->sub = sub;
    return {sub, [st] {
                if (st->check.empty() && st->matrix.empty())
                    throw InputError("validate", "give --check DIR, or --matrix M with --out DIR");
                if (!st->matrix.empty() && st->out.empty()) throw InputError("--out", "required with --matrix");
                return st->check.empty() ? run_matrix(*st) : run_check(*st);
            }};
}

}  // namespace preflight::cli
