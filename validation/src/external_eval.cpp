#include "preflight/validation/external_eval.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>

#include "preflight/planner/catalog.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/memory.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/throughput.hpp"

namespace preflight::validation {

using nlohmann::json;
namespace fs = std::filesystem;

std::optional<double> EvaluatedRun::tokens_error() const {
    if (!measured_tokens_per_s_per_gpu || !predicted_tokens_per_s_per_gpu || *measured_tokens_per_s_per_gpu <= 0)
        return std::nullopt;
    return (*predicted_tokens_per_s_per_gpu - *measured_tokens_per_s_per_gpu) / *measured_tokens_per_s_per_gpu;
}

std::optional<double> EvaluatedRun::memory_error() const {
    if (!measured_peak_bytes || !predicted_peak_bytes || *measured_peak_bytes <= 0) return std::nullopt;
    return (*predicted_peak_bytes - *measured_peak_bytes) / *measured_peak_bytes;
}

namespace {

// One row: the planner's prediction under the data set's framework profile and the row's
// GPU spec (its committed, already fitted constants).
EvaluatedRun evaluate_row(const ExternalRun& r, const ExternalDataset& d, const FrameworkProfile& profile,
                          std::map<std::string, GpuSpec>& gpus, const fs::path& data_dir) {
    EvaluatedRun e;
    e.run = &r;
    e.gpu = r.gpu.empty() ? d.gpu : r.gpu;
    if (r.outcome != RunOutcome::ok) {
        e.skipped = "outcome " + std::string(to_string(r.outcome));
        return e;
    }
    if (!r.not_modelled.empty()) {
        e.skipped = r.not_modelled;
        return e;
    }
    auto it = gpus.find(e.gpu);
    if (it == gpus.end()) it = gpus.emplace(e.gpu, load_gpu(e.gpu, data_dir)).first;
    const GpuSpec& gpu = it->second;
    try {
        validate_plan(r.plan, r.model);
        // A profile may refuse a plan its framework does not run: the memory is not evaluated then.
        if (r.peak_reserved_bytes && profile.check_plan) profile.check_plan(r.model, r.plan);
    } catch (const InputError& x) {
        e.skipped = std::string("the planner refuses the plan: ") + x.what();
        return e;
    }
    if (r.tokens_per_s_per_gpu) {
        e.measured_tokens_per_s_per_gpu = r.tokens_per_s_per_gpu;
        ThroughputOptions o;
        o.breakdown = false;
        o.tp_comm_overlap = r.tp_comm_overlap;
        o.p2p_overlap = r.p2p_overlap;
        o = throughput_options_for(profile, r.model, r.plan, o);  // the framework's own step-time settings
        e.predicted_tokens_per_s_per_gpu = estimate_throughput(r.model, gpu, r.plan, o).tokens_per_s_per_gpu;
    }
    if (r.peak_reserved_bytes) {
        e.measured_peak_bytes = static_cast<double>(*r.peak_reserved_bytes);
        MemoryOptions mo;
        mo.profile = profile;
        mo.compiled_loss = r.loss_compiled;
        const MemoryReport m = evaluate_memory(r.model, gpu, r.plan, mo);
        // The pool PyTorch reserves (CUDA context and NCCL outside it, as in the measurement).
        e.predicted_peak_bytes = static_cast<double>(m.peak_reserved_bytes > 0 ? m.peak_reserved_bytes
                                                                                : m.peak_bytes - m.at_peak.overhead);
    }
    return e;
}

double median(std::vector<double> v) { return percentile(std::move(v), 0.5); }
// A median signed error over no row is unknown: null, as error_stats_json's figures.
json signed_json(const ErrorStats& e, double v) { return e.n > 0 ? json(v) : json(nullptr); }

// The quantities the data set's rows measure: a row states the figure, compared or not.
struct Measured {
    bool tokens = false, memory = false;
};
Measured measured_quantities(const ExternalDataset& d) {
    Measured m;
    for (const ExternalRun& r : d.runs) {
        m.tokens = m.tokens || r.tokens_per_s_per_gpu.has_value();
        m.memory = m.memory || r.peak_reserved_bytes.has_value();
    }
    return m;
}

// The data set's "targets" (external_eval.hpp) against today's figures. Every quantity the rows
// measure, or a target names, rests on at least compared_rows_min compared rows (default 1),
// whether or not a figure target names it: a check that compared nothing never passes
// (docs/interface.md, exit status 1).
void apply_targets(ExternalEvaluation& ev, const ExternalDataset& d) {
    const std::string manifest = (d.folder / "dataset.json").string();
    int min_rows = 1;
    if (d.targets.contains("compared_rows_min")) {
        const json& t = d.targets.at("compared_rows_min");
        if (!t.is_number_integer()) throw InputError(manifest, "targets.compared_rows_min must be an integer");
        min_rows = t.get<int>();
    }
    const Measured measured = measured_quantities(d);
    auto gated = [&](const char* prefix) {
        for (const auto& [key, value] : d.targets.items())
            if (key.rfind(prefix, 0) == 0) return true;
        return false;
    };
    auto enough_rows = [&](bool in_view, const ErrorStats& e, const char* what) {
        if (!in_view) return false;
        if (e.n == 0)
            ev.failures.push_back(std::string(what) + ": no row compared, the figures are unknown");
        else if (e.n < min_rows)
            ev.failures.push_back(std::string(what) + ": only " + std::to_string(e.n) + " rows compared, target " +
                                  std::to_string(min_rows) + " (compared_rows_min)");
        return e.n >= min_rows && e.n > 0;
    };
    const bool tokens_in_view = measured.tokens || gated("tokens_per_s_per_gpu_error_");
    const bool memory_in_view = measured.memory || gated("peak_memory_error_");
    if (!tokens_in_view && !memory_in_view)
        ev.failures.push_back("no row states a measured tokens/s per GPU or peak memory: nothing was compared");
    const bool tokens = enough_rows(tokens_in_view, ev.tokens, "tokens/s per GPU");
    const bool memory = enough_rows(memory_in_view, ev.memory, "reserved peak");
    // A figure is judged against its target only when it rests on enough rows.
    auto gate = [&](bool judged, const char* key, double value, const char* what) {
        if (!d.targets.contains(key)) return;
        const json& t = d.targets.at(key);
        if (!t.is_number()) throw InputError(manifest, std::string("targets.") + key + " must be a number");
        if (judged && value > t.get<double>())
            ev.failures.push_back(std::string(what) + " " + exceeds_text(value, t.get<double>(), " > target ") + " (" +
                                  key + ")");
    };
    gate(tokens, "tokens_per_s_per_gpu_error_p50_max", ev.tokens.p50, "tokens/s per GPU |error| P50");
    gate(tokens, "tokens_per_s_per_gpu_error_p95_max", ev.tokens.p95, "tokens/s per GPU |error| P95");
    gate(memory, "peak_memory_error_p50_max", ev.memory.p50, "reserved-peak |error| P50");
    gate(memory, "peak_memory_error_p95_max", ev.memory.p95, "reserved-peak |error| P95");
}

json per_row_json(const std::vector<EvaluatedRun>& rows) {
    json out = json::array();
    for (const EvaluatedRun& e : rows) {
        const ExternalRun& r = *e.run;
        json j = {{"id", r.id}, {"source_ref", r.source_ref}, {"gpu", e.gpu}, {"model", r.model_label},
                  {"plan", to_flags(r.plan)}};
        if (!e.skipped.empty()) j["skipped"] = e.skipped;
        if (e.measured_tokens_per_s_per_gpu) j["measured_tokens_per_s_per_gpu"] = *e.measured_tokens_per_s_per_gpu;
        if (e.predicted_tokens_per_s_per_gpu) j["predicted_tokens_per_s_per_gpu"] = *e.predicted_tokens_per_s_per_gpu;
        if (e.measured_peak_bytes) j["measured_peak_reserved_bytes"] = std::llround(*e.measured_peak_bytes);
        if (e.predicted_peak_bytes) j["predicted_peak_reserved_bytes"] = std::llround(*e.predicted_peak_bytes);
        out.push_back(j);
    }
    return out;
}

// Summary, per GPU, then per GPU / model / precision / compile: the features the planner
// does not see (compile, the FP8 recipe) show up as groups.
std::string evaluation_markdown(const ExternalEvaluation& ev, std::size_t rows) {
    std::ostringstream o;
    char b[512];
    o << "Never fitted on: predictions with the GPU specs' committed constants (nothing fitted on this data set; "
         "its README lists the choices made with its errors in view). Errors are (predicted - measured) / measured.\n\n"
         "| quantity | rows compared | P50 abs. | P95 abs. | max abs. | median signed |\n|---|---|---|---|---|---|\n";
    // A figure over no row is unknown: N/A, never 0.0 %.
    auto stat = [](const ErrorStats& e, double v) { return e.n > 0 ? percent_text(v) : std::string("N/A"); };
    std::snprintf(b, sizeof b, "| tokens/s per GPU | %d | %s | %s | %s | %s |\n", ev.tokens.n,
                  stat(ev.tokens, ev.tokens.p50).c_str(), stat(ev.tokens, ev.tokens.p95).c_str(),
                  stat(ev.tokens, ev.tokens.max).c_str(), stat(ev.tokens, ev.tokens_median_signed).c_str());
    o << b;
    // The memory row wherever a row states a measured peak, compared or not.
    const bool memory = std::any_of(ev.rows.begin(), ev.rows.end(),
                                    [](const EvaluatedRun& e) { return e.run->peak_reserved_bytes.has_value(); });
    if (memory) {
        std::snprintf(b, sizeof b, "| peak reserved memory | %d | %s | %s | %s | %s |\n", ev.memory.n,
                      stat(ev.memory, ev.memory.p50).c_str(), stat(ev.memory, ev.memory.p95).c_str(),
                      stat(ev.memory, ev.memory.max).c_str(), stat(ev.memory, ev.memory_median_signed).c_str());
        o << b;
    }
    o << "\n" << ev.skipped << " of " << rows << " rows not compared";
    for (const EvaluatedRun& e : ev.rows)
        if (!e.skipped.empty()) {
            o << " (first: " << e.run->id << ": " << e.skipped << ")";
            break;
        }
    o << ".\n\n";

    std::map<std::string, std::vector<double>> gpu_abs, gpu_signed;
    struct Group { std::vector<double> tok, tok_signed, mem; int skipped = 0; };
    std::map<std::tuple<std::string, std::string, std::string, bool>, Group> groups;
    for (const EvaluatedRun& e : ev.rows) {
        const ExternalRun& r = *e.run;
        Group& g = groups[{e.gpu, r.model_label, std::string(to_string(r.plan.precision)), r.compiled}];
        if (!e.skipped.empty()) ++g.skipped;
        if (auto t = e.tokens_error()) {
            g.tok.push_back(std::abs(*t));
            g.tok_signed.push_back(*t);
            gpu_abs[e.gpu].push_back(std::abs(*t));
            gpu_signed[e.gpu].push_back(*t);
        }
        if (auto m = e.memory_error()) g.mem.push_back(std::abs(*m));
    }
    o << "| GPU | tokens/s rows | P50 abs. | P95 abs. | median signed |\n|---|---|---|---|---|\n";
    for (const auto& [gpu, v] : gpu_abs) {
        const ErrorStats t = error_stats(v);
        std::snprintf(b, sizeof b, "| %s | %d | %s | %s | %s |\n", gpu.c_str(), t.n, percent_text(t.p50).c_str(),
                      percent_text(t.p95).c_str(), percent_text(median(gpu_signed[gpu])).c_str());
        o << b;
    }
    o << "\n| GPU | model | precision | compiled | tokens/s rows | P50 abs. | median signed |"
      << (memory ? " memory rows | memory P50 abs. |" : "") << " not compared |\n|---|---|---|---|---|---|---|"
      << (memory ? "---|---|" : "") << "---|\n";
    for (const auto& [key, g] : groups) {
        const auto& [gpu, model, precision, compiled] = key;
        const ErrorStats t = error_stats(g.tok), m = error_stats(g.mem);
        o << "| " << gpu << " | " << model << " | " << precision << " | " << (compiled ? "yes" : "no") << " | " << t.n
          << " | " << (t.n ? percent_text(t.p50) : "N/A") << " | " << (t.n ? percent_text(median(g.tok_signed)) : "N/A") << " |";
        if (memory) o << " " << m.n << " | " << (m.n ? percent_text(m.p50) : "N/A") << " |";
        o << " " << g.skipped << " |\n";
    }
    return o.str();
}

}  // namespace

ExternalEvaluation evaluate_external_dataset(const ExternalDataset& d, const fs::path& data_dir) {
    ExternalEvaluation ev;
    const auto profile = profile_by_name(d.framework);
    if (!profile)
        throw InputError((d.folder / "dataset.json").string(), "\"framework\" '" + d.framework + "' is no planner profile");
    std::map<std::string, GpuSpec> gpus;
    std::vector<double> tok_abs, tok_signed, mem_abs, mem_signed;
    for (const ExternalRun& r : d.runs) {
        ev.rows.push_back(evaluate_row(r, d, *profile, gpus, data_dir));
        const EvaluatedRun& e = ev.rows.back();
        if (!e.skipped.empty()) ++ev.skipped;
        if (auto t = e.tokens_error()) tok_abs.push_back(std::abs(*t)), tok_signed.push_back(*t);
        if (auto m = e.memory_error()) mem_abs.push_back(std::abs(*m)), mem_signed.push_back(*m);
    }
    ev.tokens = error_stats(tok_abs);
    ev.memory = error_stats(mem_abs);
    ev.tokens_median_signed = median(tok_signed);
    ev.memory_median_signed = median(mem_signed);
    apply_targets(ev, d);
    ev.summary = {{"evaluation_only", true},
                  {"rows", d.runs.size()},
                  {"skipped", ev.skipped},
                  {"tokens_per_s_per_gpu_error", error_stats_json(ev.tokens)},
                  {"tokens_per_s_per_gpu_median_signed_error", signed_json(ev.tokens, ev.tokens_median_signed)},
                  {"peak_reserved_error", error_stats_json(ev.memory)},
                  {"peak_reserved_median_signed_error", signed_json(ev.memory, ev.memory_median_signed)},
                  {"failures", ev.failures},
                  {"per_row", per_row_json(ev.rows)}};
    ev.markdown = evaluation_markdown(ev, d.runs.size());
    return ev;
}

}  // namespace preflight::validation
