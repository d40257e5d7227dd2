// `preflight calibrate DIR`: fit the GPU spec's step-time efficiency constants and its
// per-GPU memory overhead to recorded device runs; report held-out errors before/after.
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include "calibrate_external.hpp"
#include "commands.hpp"
#include "output_paths.hpp"
#include "preflight/planner/catalog.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/runtime/run_report.hpp"
#include "preflight/validation/calibrate.hpp"
#include "preflight/validation/external_runs.hpp"
#include "preflight/validation/spec_bounds.hpp"
#include "preflight/validation/matrix.hpp"

namespace preflight::cli {

namespace {

struct CalibrateState {
    std::string dir, gpu = "h100-sxm-80gb", source = validation::kSourceRuntime, write_spec, data_dir;
    std::string format = "table";
    bool gpu_given = false, no_memory = false;
};

// The GPU spec with the fitted constants and their provenance, checked (bounded, and it loads).
nlohmann::json fitted_runtime_spec(const CalibrateState& st, const std::filesystem::path& data,
                                   const validation::CalibrationResult& r) {
    std::filesystem::path spec_path = st.gpu;
    if (spec_path.extension() != ".json") spec_path = data / "gpus" / (st.gpu + ".json");
    char b[512];
    std::snprintf(b, sizeof b,
                  "fitted by `preflight calibrate %s --gpu %s --source %s` from %d training runs (%d held out: "
                  "FNV-1a(id) mod 4 == 0); held-out step-time error p50 %.2f %% -> %.2f %%, max %.2f %% -> %.2f %%",
                  st.dir.c_str(), st.gpu.c_str(), st.source.c_str(), r.train_runs, r.held_out_runs,
                  100 * r.step_held_before.p50, 100 * r.step_held_after.p50, 100 * r.step_held_before.max,
                  100 * r.step_held_after.max);
    std::string provenance = b;
    if (r.target == validation::CalibrationTarget::runtime) {
        std::snprintf(b, sizeof b,
                      "; held-out driver-measured device peak error p50 %.2f %% -> %.2f %%, max %.2f %% -> %.2f %%; "
                      "overhead_bytes: median non-tensor device memory of %d training runs; pool slack: median of %d "
                      "training runs with full recompute",
                      100 * r.device_peak_held_before.p50, 100 * r.device_peak_held_after.p50,
                      100 * r.device_peak_held_before.max, 100 * r.device_peak_held_after.max, r.overhead_runs,
                      r.pool_slack_runs);
        provenance += b;
    }
    const auto spec = validation::calibrated_spec(read_json_file(spec_path, "--gpu"), r, provenance);
    validation::check_fitted_spec(spec, "--write-spec " + st.write_spec);  // bounded, and it loads
    return spec;
}

int run_calibrate(const CalibrateState& st) {
    if (!st.write_spec.empty()) check_output_file(st.write_spec, "--write-spec");  // before any work
    const auto data = data_dir_of(st.data_dir);
    // A folder of external measured data sets (dataset.json): cross-validated fit.
    if (const auto sets = validation::find_external_datasets(st.dir); !sets.empty())
        return run_calibrate_external(sets, {st.gpu_given ? st.gpu : "", st.write_spec, st.format, data, !st.no_memory});
    const GpuSpec gpu = load_gpu(st.gpu, data);
    const auto runs = validation::load_calibration_runs(st.dir, gpu.name, st.source, data);
    // The runtime's reports fit the spec's "runtime" block (its own constants), not the GPU's
    // generic ones that the framework profiles share.
    const validation::CalibrationResult r = validation::calibrate(
        runs, gpu, st.source == validation::kSourceRuntime ? validation::CalibrationTarget::runtime
                                                           : validation::CalibrationTarget::generic);
    // Refused before anything is printed.
    check_fit_quality(st.dir, "step-time error", r.step_held_before.p50, r.step_held_after.p50, st.write_spec);
    std::optional<nlohmann::json> spec;
    if (!st.write_spec.empty()) spec = fitted_runtime_spec(st, data, r);
    if (st.format == "json")
        std::cout << validation::calibration_to_json(r).dump(2) << "\n";
    else
        std::cout << validation::calibration_table(r);
    if (spec) {
        runtime::write_file_atomic(st.write_spec, spec->dump(2) + "\n");
        std::cerr << "preflight calibrate: wrote " << st.write_spec << "\n";
    }
    return kExitOk;
}

}  // namespace

Command add_calibrate_command(CLI::App& app) {
    auto st = std::make_shared<CalibrateState>();
    auto* sub = app.add_subcommand(
        "calibrate", "Fit the step-time efficiency constants and the memory overhead of a GPU spec to recorded runs");
    sub->add_option("DIR", st->dir, "Folder of recorded run reports (searched recursively)")->required();
    sub->add_option("--gpu", st->gpu, "GPU spec the runs were recorded on (catalog name or path; default h100-sxm-80gb)")
        ->each([st](const std::string&) { st->gpu_given = true; });
    sub->add_flag("--no-memory", st->no_memory, "External data sets: fit and print the tokens/s side only");
    sub->add_option("--source", st->source, "Reports to fit: preflight-runtime (default) | pytorch")
        ->check(CLI::IsMember({validation::kSourceRuntime, validation::kSourcePytorch}));
    sub->add_option("--write-spec", st->write_spec,
                    "Write a copy of the GPU spec with the fitted constants and their provenance (preflight-runtime: its \"runtime\" "
                    "block; pytorch: \"efficiency\" and \"overhead_bytes\")");
    sub->add_option("--data-dir", st->data_dir, "Catalog folder (default: $PREFLIGHT_DATA_DIR or the built-in data/)");
    sub->add_option("--format", st->format, "table (default) | json")->check(CLI::IsMember({"table", "json"}));
    sub->footer(
        "DIR holding external data sets (folders with a dataset.json, e.g. data/measurements/external): every\n"
        "figure is held out by k-fold cross-validation grouped by model/tp/pp family, each held-out job predicted\n"
        "from what a user knows before it runs (memory: the host pace the layout predicts), printed before\n"
        "(uncalibrated defaults) and after; --write-spec writes the GPU spec\n"
        "with the constants fitted on all jobs and their provenance (data set, date, fold errors).\n"
        "Otherwise only device runs with a measured step time are used (dry runs have none). The split is deterministic: a run\n"
        "is held out when FNV-1a(its id) mod 4 == 0; the fit sees the training runs only.\n"
        "Example:\n  preflight calibrate data/measurements/h100-sxm-80gb               # runtime runs: held-out errors\n"
        "  preflight calibrate data/measurements/external/nanotron-h100 --write-spec /tmp/h100.json\n"
        "Exit codes: 0 ok; 2 bad input, fewer than 2 usable runs, or with --write-spec a fit that would not load or\n"
        "leaves the held-out step-time error's P50 over 50 % (nothing written; without --write-spec a warning).");
    return {sub, [st] { return run_calibrate(*st); }};
}

}  // namespace preflight::cli
