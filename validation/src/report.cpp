// Summary JSON, the text table and the markdown report of a check.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "preflight/validation/check.hpp"

namespace preflight::validation {

using nlohmann::json;

namespace {


json source_json(const SourceSummary& s) {
    json j = {{"runs", s.runs},
              {"compared", s.compared},
              {"dry_runs", s.dry_runs},
              {"failed", s.failed},
              {"out_of_tolerance", s.out_of_tolerance},
              {"not_compared", s.not_compared},
              {"peak_error_p50", s.peak.p50},
              {"peak_error_p95", s.peak.p95},
              {"peak_error_max", s.peak.max},
              {"step_time_error_p50", s.step_time.n ? json(s.step_time.p50) : json(nullptr)},
              {"step_time_error_p95", s.step_time.n ? json(s.step_time.p95) : json(nullptr)},
              {"mfu_error_p50", s.mfu.n ? json(s.mfu.p50) : json(nullptr)},
              {"overhead_error_p50", s.overhead.n ? json(s.overhead.p50) : json(nullptr)},
              {"peak_error", error_stats_json(s.peak)},
              {"step_time_error", error_stats_json(s.step_time)},
              {"mfu_error", error_stats_json(s.mfu)},
              {"overhead_error", error_stats_json(s.overhead)}};
    json cats = json::object();
    for (const auto& [k, v] : s.categories) cats[k] = error_stats_json(v);
    j["category_errors"] = cats;
    return j;
}

std::string pct(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2f %%", 100 * v);
    return b;
}
std::string pct_or_na(const ErrorStats& s, double v) { return s.n ? pct(v) : std::string("n/a"); }

std::string fmt(const Comparison& c) {
    char b[96];
    if (c.quantity.find("bytes") != std::string::npos)
        std::snprintf(b, sizeof b, "%.3f / %.3f GiB", c.measured / (1u << 30), c.predicted / (1u << 30));
    else if (c.quantity == "mfu")
        std::snprintf(b, sizeof b, "%.1f / %.1f %%", 100 * c.measured, 100 * c.predicted);
    else
        std::snprintf(b, sizeof b, "%.4f / %.4f s", c.measured, c.predicted);
    return b;
}

std::string plan_text(const json& p) {
    std::ostringstream o;
    o << "seq " << p.value("seq", 0) << " mbs " << p.value("mbs", 0) << " ga " << p.value("grad_acc", 0) << " "
      << p.value("precision", std::string("?")) << " " << p.value("recompute", std::string("?")) << " "
      << p.value("attention", std::string("?"));
    return o.str();
}

}  // namespace

json summary_to_json(const CheckResult& r) {
    json j = source_json(r.all);
    j["schema_version"] = 1;
    j["command"] = "validate --check";
    j["dir"] = r.dir.string();
    j["passed"] = r.passed();
    json sources = json::object();
    for (const auto& [k, v] : r.sources) sources[k] = source_json(v);
    j["sources"] = sources;
    json runs = json::array();
    for (const auto& run : r.runs) {
        json cs = json::object();
        for (const auto& c : run.comparisons) {
            // Byte figures are whole bytes in every JSON the tool writes (docs/interface.md).
            const bool bytes = c.quantity.size() > 6 && c.quantity.compare(c.quantity.size() - 6, 6, "_bytes") == 0;
            const auto figure = [bytes](double v) { return bytes ? json(std::llround(v)) : json(v); };
            json cj = {{"measured", figure(c.measured)}, {"predicted", figure(c.predicted)},
                       {"relative_error", c.relative_error}, {"within", c.within}};
            if (c.tolerance) cj["tolerance"] = {{"abs", figure(c.tolerance->abs)}, {"rel", c.tolerance->rel}};
            cs[c.quantity] = cj;
        }
        runs.push_back({{"id", run.id}, {"source", run.source}, {"mode", run.mode}, {"status", run.status},
                        {"model", run.model}, {"gpu", run.gpu}, {"out_of_tolerance", run.out_of_tolerance},
                        {"not_compared", run.not_compared}, {"file", run.path.string()},
                        {"note", run.note}, {"comparisons", cs}});
    }
    j["runs"] = runs;
    json gates = json::array();
    for (const FolderGate& g : r.gates)
        gates.push_back({{"file", g.file.string()},
                         {"source", g.source},
                         {"peak_abs_error_p50_max", g.peak_p50_max ? json(*g.peak_p50_max) : json(nullptr)},
                         {"peak_abs_error_p95_max", g.peak_p95_max ? json(*g.peak_p95_max) : json(nullptr)},
                         {"compared_runs_min", g.compared_runs_min},
                         {"compared", g.compared},
                         {"peak_abs_error", error_stats_json(g.peak)},
                         {"failures", g.failures},
                         {"passed", g.passed()}});
    j["gates"] = gates;
    return j;
}

std::string summary_table(const CheckResult& r) {
    std::ostringstream o;
    o << "# preflight validate --check " << r.dir.string() << ": " << r.all.runs << " runs, " << r.all.compared
      << " compared (" << r.all.dry_runs << " dry runs), " << r.all.failed << " stopped before measuring ("
      << r.all.judged_out_of_memory << " out of memory, judged against the predicted peak), " << r.all.out_of_tolerance
      << " out of tolerance, " << r.all.not_compared << " not compared\n";
    char line[256];
    std::snprintf(line, sizeof line, "%-18s %5s %9s %9s %9s %9s %9s %9s %9s\n", "source", "runs", "peak p50",
                  "peak p95", "peak max", "step p50", "step p95", "mfu p50", "out");
    o << line;
    for (const auto& [k, s] : r.sources) {
        std::snprintf(line, sizeof line, "%-18s %5d %9s %9s %9s %9s %9s %9s %9d\n", k.c_str(), s.runs,
                      pct_or_na(s.peak, s.peak.p50).c_str(), pct_or_na(s.peak, s.peak.p95).c_str(),
                      pct_or_na(s.peak, s.peak.max).c_str(), pct_or_na(s.step_time, s.step_time.p50).c_str(),
                      pct_or_na(s.step_time, s.step_time.p95).c_str(), pct_or_na(s.mfu, s.mfu.p50).c_str(),
                      s.out_of_tolerance);
        o << line;
    }
    for (const auto& run : r.runs)
        if (run.not_compared)
            o << "NOT COMPARED " << (run.path.empty() ? run.id : run.path.string()) << ": " << run.note << "\n";
    for (const auto& run : r.runs) {
        if (!run.out_of_tolerance) continue;
        o << "OUT OF TOLERANCE " << run.id << " (" << run.source << ")";
        if (!run.note.empty()) o << ": " << run.note;
        for (const auto& c : run.comparisons) {
            if (c.within) continue;
            o << "; " << c.quantity << " measured/predicted " << fmt(c) << " (error " << pct(c.relative_error);
            if (c.tolerance) o << ", tolerance " << pct(c.tolerance->rel) << (c.tolerance->abs > 0 ? " + an absolute term" : "");
            o << ")";
        }
        if (!run.tolerances_from.empty()) o << "; tolerances from " << run.tolerances_from;
        o << "\n";
    }
    for (const FolderGate& g : r.gates) {
        o << (g.passed() ? "GATE PASS " : "GATE FAIL ") << g.file.string() << ": " << g.source << ", " << g.compared
          << " device runs (at least " << g.compared_runs_min << "), peak error";
        if (g.compared > 0) o << " P50 " << pct(g.peak.p50) << ", P95 " << pct(g.peak.p95);
        if (g.peak_p50_max) o << " (P50 at most " << pct(*g.peak_p50_max) << ")";
        if (g.peak_p95_max) o << " (P95 at most " << pct(*g.peak_p95_max) << ")";
        for (const std::string& f : g.failures) o << "; " << f;
        o << "\n";
    }
    o << (r.passed()          ? "PASS: every run within its tolerance"
          : !r.compared_any() ? "FAIL: no run was compared"
          : !r.gates_passed() && r.all.out_of_tolerance == 0 && r.all.not_compared == 0
                              ? "FAIL: a folder gate is not met (listed above)"
                              : "FAIL: runs out of tolerance or not compared (listed above)")
      << (r.passed() && !r.gates.empty() ? ", every folder gate met\n" : "\n");
    return o.str();
}

std::string markdown_report(const CheckResult& r, const std::string& plot_file) {
    std::ostringstream o;
    o << "# Validation: predictions against measurements\n\n";
    o << "Generated by `preflight validate --check " << r.dir.string()
      << "` with today's planner. Errors are relative to the prediction, |measured - predicted| / predicted; "
         "`peak` is the tensor memory the framework allocated (own runtime: its tracking allocator; PyTorch: "
         "`torch.cuda.max_memory_allocated`), `overhead` the non-tensor device memory, where measured.\n\n";
    o << (r.passed() ? "**Result: PASS** - every run within its tolerance.\n\n"
                     : "**Result: FAIL** - " + std::to_string(r.all.out_of_tolerance) + " run(s) out of tolerance, " +
                           std::to_string(r.all.not_compared) + " not compared (crashed, failed or nothing measured)" +
                           (r.compared_any() ? "" : "; no run was compared") + ".\n\n");
    if (!plot_file.empty()) o << "![predicted vs measured](" << plot_file << ")\n\n";
    o << "## Summary by source\n\n| source | runs | compared | dry runs | failed | out of tolerance | peak p50 | peak p95 | "
         "peak max | step time p50 | step time p95 | MFU p50 |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& [k, s] : r.sources)
        o << "| " << k << " | " << s.runs << " | " << s.compared << " | " << s.dry_runs << " | " << s.failed << " | "
          << s.out_of_tolerance << " | " << pct_or_na(s.peak, s.peak.p50) << " | " << pct_or_na(s.peak, s.peak.p95)
          << " | " << pct_or_na(s.peak, s.peak.max) << " | " << pct_or_na(s.step_time, s.step_time.p50) << " | "
          << pct_or_na(s.step_time, s.step_time.p95) << " | " << pct_or_na(s.mfu, s.mfu.p50) << " |\n";
    for (const auto& [k, s] : r.sources) {
        if (s.categories.empty()) continue;
        o << "\n## Memory by category at the peak (" << k << ")\n\n| category | runs | p50 | p95 | max |\n|---|---|---|---|---|\n";
        for (const auto& [c, e] : s.categories)
            o << "| " << c << " | " << e.n << " | " << pct(e.p50) << " | " << pct(e.p95) << " | " << pct(e.max) << " |\n";
    }
    o << "\n## Runs\n\n| run | source | mode | model | plan | status | peak measured / predicted | peak error | step time "
         "error | verdict |\n|---|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& run : r.runs) {
        const Comparison* pk = run.find("peak_bytes");
        const Comparison* st = run.find("step_time_s");
        o << "| " << run.id << " | " << run.source << " | " << run.mode << " | " << run.model << " | "
          << plan_text(run.plan) << " | " << run.status << " | " << (pk ? fmt(*pk) : "n/a") << " | "
          << (pk ? pct(pk->relative_error) : "n/a") << " | " << (st ? pct(st->relative_error) : "n/a") << " | "
          << (run.out_of_tolerance ? "**out of tolerance**" : "ok") << (run.note.empty() ? "" : ": " + run.note)
          << " |\n";
    }
    return o.str();
}

}  // namespace preflight::validation
