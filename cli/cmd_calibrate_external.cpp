#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>

#include "calibrate_external.hpp"
#include "commands.hpp"
#include "invocation.hpp"
#include "preflight/planner/catalog.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/runtime/run_report.hpp"
#include "preflight/validation/external_eval.hpp"
#include "preflight/validation/external_memory.hpp"
#include "preflight/validation/external_runs.hpp"
#include "preflight/validation/spec_bounds.hpp"
#include "preflight/validation/throughput_fit.hpp"

namespace preflight::cli {

namespace {

std::string pct(double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f %%", 100 * x);
    return b;
}

// The GPU spec with the step-time constants fitted on every job of `d` and their provenance,
// checked (bounded, and it loads) before anything is printed or written.
nlohmann::json fitted_external_spec(const validation::ExternalDataset& d, const validation::ThroughputGate& g,
                                    const CalibrateExternalOptions& o) {
    std::filesystem::path spec_path = o.gpu.empty() ? d.gpu : o.gpu;
    if (spec_path.extension() != ".json") spec_path = o.data_dir / "gpus" / (spec_path.string() + ".json");
    nlohmann::json spec = read_json_file(spec_path, "--gpu");
    nlohmann::json e = efficiency_to_json(g.cv.full_fit);
    std::string folds;
    for (std::size_t k = 0; k < g.cv.fold_held_out.size(); ++k)
        folds += (k ? ", " : "") + (g.cv.fold_held_out[k].n == 0 ? std::string("no job (no family fell in it)")
                                                                    : pct(g.cv.fold_held_out[k].p50) + "/" +
                                                                          pct(g.cv.fold_held_out[k].p95));
    e["provenance"] = "fitted by `preflight calibrate` on " + utc_now("%Y-%m-%d") + " from data set " + d.name + " (" +
                      std::to_string(g.cv.held_out.n) + " ok jobs with measured tokens/s; " + d.source +
                      "). Tokens/s per GPU |error|, " + std::to_string(g.cv.folds) +
                      "-fold cross-validation grouped by model/tp/pp family (" + std::to_string(g.cv.families) +
                      " families): held out P50 " + pct(g.cv.held_out.p50) + ", P95 " + pct(g.cv.held_out.p95) +
                      " (uncalibrated defaults: P50 " + pct(g.cv.before.p50) + ", P95 " + pct(g.cv.before.p95) +
                      "); per fold P50/P95: " + folds +
                      ". Constants not in the fit keep the built-in defaults; the fitted ones carry a weak "
                      "prior toward them, so a constant these runs cannot show stays at its default.";
    spec["efficiency"] = e;
    drop_superseded_transfer(spec);  // this fit replaces a transferred block
    validation::check_fitted_spec(spec, "--write-spec " + o.write_spec);
    return spec;
}

}  // namespace

void check_fit_quality(const std::string& what, const std::string& error_name, double held_out_before_p50,
                       double held_out_after_p50, const std::string& write_spec) {
    // Half the measured figure off after fitting: the runs do not look like this GPU's training
    // steps (another GPU, times not in seconds, degenerate rows), whatever the fit printed.
    if (held_out_after_p50 <= kPoorFitP50) return;
    const std::string why = what + ": the held-out " + error_name + " is " + pct(held_out_after_p50) +
                            " (P50) after the fit, " + pct(held_out_before_p50) +
                            " before it: check that the runs are training steps of this GPU (--gpu) with times in seconds";
    if (!write_spec.empty()) throw InputError("--write-spec " + write_spec, why + "; not written");
    std::cerr << "preflight: warning: " << why << "\n";
}

int run_calibrate_external(const std::vector<std::filesystem::path>& datasets, const CalibrateExternalOptions& o) {
    std::vector<validation::ExternalDataset> sets;
    std::string fitted;
    int fitted_count = 0;
    for (const auto& folder : datasets) {
        sets.push_back(validation::read_external_dataset(folder, o.data_dir));
        if (!sets.back().evaluation_only) fitted += (fitted_count++ ? ", " : "") + sets.back().name;
    }
    if (!o.write_spec.empty() && fitted_count > 1)
        throw InputError("--write-spec", std::to_string(fitted_count) + " data sets are fitted here (" + fitted +
                                             "), each for its own GPU: give the folder of the one to write");
    // Printed and written once every data set is done: a refusal leaves stdout and the spec untouched.
    nlohmann::json all = nlohmann::json::array();
    std::ostringstream table;
    std::optional<nlohmann::json> spec;
    for (const validation::ExternalDataset& d : sets) {
        if (d.evaluation_only) {  // listed, never fitted on: its errors are held out by data set
            const auto ev = validation::evaluate_external_dataset(d, o.data_dir);
            if (o.format == "table")
                table << "# " << d.name << " (" << d.runs.size() << " rows, " << d.framework
                      << "): never fitted on, not used by the fit (its README lists what was chosen with it in view)\n\n" << ev.markdown << "\n";
            all.push_back({{"name", d.name}, {"evaluation_only", true}, {"evaluation", ev.summary}});
            continue;
        }
        const GpuSpec gpu = load_gpu(o.gpu.empty() ? d.gpu : o.gpu, o.data_dir);
        std::cerr << "preflight calibrate: " << d.name << ": " << d.runs.size()
                  << " jobs; tokens/s cross-validation (fits every fold)...\n";
        const validation::ThroughputGate g = validation::throughput_gate(d, gpu);
        nlohmann::json j = {{"name", d.name}, {"gpu", gpu.name}, {"throughput", g.summary}};
        std::string memory_md;
        const bool fit_memory = o.memory && validation::has_memory_model(d);
        if (fit_memory) {
            std::cerr << "preflight calibrate: " << d.name << ": memory cross-validation...\n";
            const int folds = g.cv.folds;
            const auto mcv = validation::memory_cross_validation(d.runs, gpu, folds, &g.cv.fold_fits);
            j["memory"] = validation::memory_cv_to_json(mcv);
            memory_md = validation::memory_cv_markdown(d.runs, mcv);
        }
        check_fit_quality(d.name, "tokens/s-per-GPU error", g.cv.before.p50, g.cv.held_out.p50, o.write_spec);
        if (!o.write_spec.empty()) spec = fitted_external_spec(d, g, o);
        if (o.format == "table") {
            table << "# " << d.name << " (" << d.runs.size() << " jobs, " << d.framework << " on " << gpu.name
                  << ")\n\n## tokens/s per GPU\n\n"
                  << g.markdown << "\n";
            if (!g.refused.empty())
                table << g.refused.size() << " job(s) the planner refuses as plans are not scored (first: "
                      << g.refused.front() << ")\n\n";
            table << "fitted step-time constants (all jobs):\n";
            const nlohmann::json f = efficiency_to_json(g.cv.full_fit);
            for (const auto& c : validation::fitted_step_constants())
                table << "  " << c.name << " = " << f.at(c.name).get<double>() << "\n";
            if (fit_memory) table << "\n## memory\n\n" << memory_md << "\n";
        }
        all.push_back(j);
    }
    std::cout << table.str();
    if (spec) {
        runtime::write_file_atomic(o.write_spec, spec->dump(2) + "\n");
        std::cerr << "preflight calibrate: wrote " << o.write_spec << "\n";
    }
    if (o.format == "json") std::cout << all.dump(2) << "\n";
    return kExitOk;
}

}  // namespace preflight::cli
