// The memory cross-validation as markdown and SVG (external_memory.hpp memory_cv_markdown, memory_cv_svg).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "preflight/validation/external_memory.hpp"
#include "preflight/validation/plot.hpp"

namespace preflight::validation {

namespace {
constexpr double kGiBd = 1073741824.0;

std::string gib(double bytes) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2f GiB", bytes / kGiBd);
    return b;
}

// The held-out errors by tensor-parallel reach: a tp group inside one node, or across nodes.
std::string tp_reach_line(const MemoryFigures& f) {
    const ErrorStats& in = f.reserved_ok_tp_inside_node;
    const ErrorStats& across = f.reserved_ok_tp_across_nodes;
    std::ostringstream o;
    o << "Held out, user inputs, by tensor-parallel reach: tp inside a node " << in.n << " ok jobs, P50 " << percent_text(in.p50)
      << ", P95 " << percent_text(in.p95) << "; tp across nodes " << across.n << " ok jobs, P50 " << percent_text(across.p50) << ", P95 "
      << percent_text(across.p95) << ".\n\n";
    return o.str();
}

// The constants fitted on every job, as one sentence of the markdown report.
std::string fitted_constants_sentence(const MemoryCrossValidation& cv) {
    std::ostringstream o;
    o << "Constants fitted on every job (" << cv.folds << "-fold CV refits them on each training split): "
      << "activation fragmentation " << cv.fitted_on_all.activation_fragmentation
      << ", loss-stage fragmentation " << cv.fitted_on_all.loss_stage_fragmentation
      << " (per byte of the micro-batch's s*b*h), pipeline run-ahead fragmentation "
      << cv.fitted_on_all.pipeline_runahead_fragmentation
      << " (per byte of s*b*h x layers x in-flight micro-batches beyond two; both only while the host runs ahead), "
         "reserved constant "
      << gib(cv.fitted_on_all.reserved_constant_bytes)
      << ", verdict margin " << gib(cv.fitted_on_all.verdict_margin_bytes)
      << " (on top of the GPU spec's overhead_bytes for the CUDA context and NCCL; a plan expected to run ahead must "
         "also fit at the top of its range); at the top of the range "
      << cv.fitted_on_all.upper_activation_fragmentation << ", " << cv.fitted_on_all.upper_loss_stage_fragmentation
      << ", " << cv.fitted_on_all.upper_pipeline_runahead_fragmentation << " and "
      << gib(cv.fitted_on_all.upper_reserved_constant_bytes) << "; host-pace model: waits when "
      << cv.fitted_on_all.pace.intercept << " + " << cv.fitted_on_all.pace.per_log2_nodes << " log2(nodes) + "
      << cv.fitted_on_all.pace.per_log2_tp_nodes_in_pipeline << " log2(nodes a tp group spans, with pp > 1) "
      << (cv.fitted_on_all.pace.per_log2_tp_nodes_single_stage < 0 ? "- " : "+ ")
      << std::fabs(cv.fitted_on_all.pace.per_log2_tp_nodes_single_stage) << " log2(the same, with pp = 1) > 0";
    if (cv.fitted_on_all.unsure_pace_band < 0.5)
        o << "; unsure where it gives a wait " << 100 * cv.fitted_on_all.unsure_pace_band << "-"
          << 100 * (1 - cv.fitted_on_all.unsure_pace_band)
          << " % likely: there the point pool is both paces' weighted by those odds";
    o << ".";
    return o.str();
}
}  // namespace

std::string memory_cv_markdown(const std::vector<ExternalRun>& runs, const MemoryCrossValidation& cv) {
    std::ostringstream o;
    auto row = [&](const char* name, const MemoryFigures& f) {
        o << "| " << name << " | " << f.modelled << " / " << (f.modelled + f.not_modelled) << " | "
          << percent_text(f.verdict_accuracy) << " (" << f.verdict_right << "/" << f.verdict_jobs << ") | "
          << percent_text(f.fit_but_oom_fraction) << " (" << f.predicted_fit_but_oom << "/" << f.predicted_fit << ") | "
          << percent_text(f.reserved_ok.p50) << " | " << percent_text(f.reserved_ok.p95) << " | " << percent_text(f.reserved_ok_median_signed)
          << " |\n";
    };
    o << "| prediction | jobs modelled | fit/OOM verdict right (ok+oom) | predicted fit but died OOM | "
         "reserved-peak abs. error P50 (ok) | P95 | median signed error |\n|---|---|---|---|---|---|---|\n";
    row("before: default (Megatron-like) profile, `peak_bytes`", cv.before_figures);
    row("after: nanotron profile, held-out folds, user inputs (the expected host pace)", cv.held_out_figures);
    row("nanotron profile, committed constants (in-sample), user inputs", cv.committed_figures);
    row("diagnostic, not held out: held-out folds with the host pace read off the job's measured step time",
        cv.held_out_measured_pace_figures);
    const RangeFigures& rg = cv.held_out_range;
    o << "\nThe expected host pace of a held-out job comes from the host-pace model fitted on the other folds' "
         "jobs, whose pace was read off their step time with "
      << (cv.step_constants_per_fold ? "step-time constants fitted without the held-out fold (the tokens/s folds)"
                                     : "the GPU spec's committed step-time constants")
      << ".\n";
    o << "\nRange (held out, user inputs: from the host waiting with every freed block reused, the tensors alone, "
         "to the host running ahead with the reserve terms at their 95th percentile): the measured peak lies inside it for "
      << percent_text(rg.inside_fraction) << " of " << rg.jobs << " ok jobs (" << rg.below << " below, " << rg.above
      << " above; 0.05 GiB either side for the sweep's 0.1 GiB rounding), median width " << percent_text(rg.median_width)
      << " of the measured peak. Verdict by range over the ok and oom jobs: fits " << rg.fits << " ("
      << rg.fits_but_oom << " died OOM), may not fit " << rg.may_not_fit << " (" << rg.may_not_fit_oom
      << " died OOM), does not fit " << rg.does_not_fit << " (" << rg.does_not_fit_ok << " ran).\n";
    o << "\n" << fitted_constants_sentence(cv) << "\n\n";
    const ErrorStats& oa = cv.committed_figures.optimizer_allocated;
    o << "Model states without a fitted term: stage 0's tensors during the optimizer step against the measured "
         "allocated peak after the backward (`peak_mem_alloc_gib`), "
      << oa.n << " jobs: abs. error P50 " << percent_text(oa.p50) << ", P95 " << percent_text(oa.p95) << ", max " << percent_text(oa.max)
      << ".\n\n";
    // Residuals of the held-out reserved peak (ok jobs) by model and layout family.
    struct Acc {
        std::vector<double> e;
    };
    // The same absolute errors by host pace (annotate_host_pace), and how many jobs each pace holds.
    std::map<std::string, Acc> groups, paces;
    for (std::size_t i = 0; i < runs.size(); ++i) {
        const auto& r = runs[i];
        const auto& p = cv.held_out[i];
        if (r.outcome != RunOutcome::ok || !p.modelled || !r.peak_reserved_bytes) continue;
        const std::string key = r.model_label + " | " + (r.plan.tp == 1 ? "tp 1" : r.plan.tp <= 8 ? "tp 2-8" : "tp 16-32") +
                                " | " + (r.plan.pp == 1 ? "pp 1" : "pp > 1");
        const double e =
            relative_error(static_cast<double>(p.measured_rank_reserved_bytes), static_cast<double>(*r.peak_reserved_bytes));
        groups[key].e.push_back(e);
        if (i < cv.host_pace.size()) paces[std::string(to_string(cv.host_pace[i]))].e.push_back(std::fabs(e));
    }
    o << tp_reach_line(cv.held_out_figures);
    o << "| host pace (diagnostic: read off the measured step time), held out with user inputs | ok jobs | P50 abs. | "
         "P95 abs. |\n|---|---|---|---|\n";
    for (auto& [pace, acc] : paces) {
        const ErrorStats s = error_stats(acc.e);
        o << "| " << pace << " | " << s.n << " | " << percent_text(s.p50) << " | " << percent_text(s.p95) << " |\n";
    }
    o << "\n| model | tp | pp | ok jobs | median signed error | P50 abs. | P95 abs. |\n|---|---|---|---|---|---|---|\n";
    for (auto& [key, acc] : groups) {
        std::vector<double> a;
        for (double v : acc.e) a.push_back(std::fabs(v));
        const ErrorStats s = error_stats(a);
        o << "| " << key << " | " << s.n << " | " << percent_text(percentile(acc.e, 0.5)) << " | " << percent_text(s.p50) << " | "
          << percent_text(s.p95) << " |\n";
    }
    return o.str();
}

std::string memory_cv_svg(const std::vector<ExternalRun>& runs, const MemoryCrossValidation& cv) {
    CheckResult result;
    for (std::size_t i = 0; i < runs.size(); ++i) {
        const auto& r = runs[i];
        const auto& p = cv.held_out[i];
        if (r.outcome != RunOutcome::ok || !p.modelled || !r.peak_reserved_bytes) continue;
        RunCheck rc;
        rc.id = r.id;
        rc.source = "nanotron";
        rc.status = "ok";
        Comparison c;
        c.quantity = "peak_bytes";
        c.measured = static_cast<double>(*r.peak_reserved_bytes);
        c.predicted = static_cast<double>(p.measured_rank_reserved_bytes);
        c.relative_error = (c.measured - c.predicted) / c.predicted;
        rc.comparisons.push_back(c);
        result.runs.push_back(rc);
    }
    return residual_plot_svg(result);
}

}  // namespace preflight::validation
