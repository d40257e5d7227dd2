// The memory gates of a fitted data set (dataset.json "targets") and the range figures they read.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "preflight/planner/error.hpp"
#include "preflight/validation/external_memory.hpp"

namespace preflight::validation {

namespace {
constexpr double kGiBd = 1073741824.0;
}  // namespace

MemoryPrediction range_end(const MemoryPrediction& point, MemoryPrediction end, bool high) {
    if (!point.modelled || !end.modelled) return end;
    auto pick = [high](std::int64_t a, std::int64_t b) { return high ? std::max(a, b) : std::min(a, b); };
    end.measured_rank_reserved_bytes = pick(end.measured_rank_reserved_bytes, point.measured_rank_reserved_bytes);
    end.reserved_peak_bytes = pick(end.reserved_peak_bytes, point.reserved_peak_bytes);
    end.device_need_bytes = pick(end.device_need_bytes, point.device_need_bytes);
    end.fits = high ? end.fits && point.fits : end.fits || point.fits;
    return end;
}

RangeFigures range_figures(const std::vector<ExternalRun>& runs, const std::vector<MemoryPrediction>& low,
                           const std::vector<MemoryPrediction>& high) {
    RangeFigures f;
    constexpr double kResolutionBytes = 0.05 * kGiBd;  // half the sweep's 0.1 GiB rounding
    std::vector<double> widths;
    for (std::size_t i = 0; i < runs.size() && i < low.size() && i < high.size(); ++i) {
        const ExternalRun& r = runs[i];
        if (!low[i].modelled || !high[i].modelled) continue;
        if (r.has_memory_verdict()) {
            const bool oom = r.outcome == RunOutcome::oom;
            if (high[i].fits) {
                ++f.fits;
                f.fits_but_oom += oom;
            } else if (low[i].fits) {
                ++f.may_not_fit;
                f.may_not_fit_oom += oom;
            } else {
                ++f.does_not_fit;
                f.does_not_fit_ok += !oom;
            }
        }
        if (r.outcome != RunOutcome::ok || !r.peak_reserved_bytes || *r.peak_reserved_bytes <= 0) continue;
        const double m = static_cast<double>(*r.peak_reserved_bytes);
        const double lo = static_cast<double>(low[i].measured_rank_reserved_bytes);
        const double hi = static_cast<double>(high[i].measured_rank_reserved_bytes);
        ++f.jobs;
        if (m < lo - kResolutionBytes)
            ++f.below;
        else if (m > hi + kResolutionBytes)
            ++f.above;
        else
            ++f.inside;
        widths.push_back((hi - lo) / m);
    }
    f.inside_fraction = f.jobs ? static_cast<double>(f.inside) / f.jobs : 0;
    f.median_width = percentile(widths, 0.5);
    return f;
}

std::vector<std::string> range_gate_failures(const RangeFigures& r, const nlohmann::json& t) {
    std::vector<std::string> out;
    const char* keys[] = {"reserved_range_inside_fraction_min", "reserved_range_median_width_max"};
    const bool gated = t.is_object() && (t.contains(keys[0]) || t.contains(keys[1]));
    if (!gated) return out;
    const int min_jobs = t.contains("compared_rows_min") ? t.at("compared_rows_min").get<int>() : 1;
    if (r.jobs < min_jobs) {
        out.push_back("reserved-peak range: " + std::to_string(r.jobs) + " jobs compared, fewer than " +
                      std::to_string(min_jobs) + " (the range figures are unknown)");
        return out;
    }
    if (t.contains(keys[0]) && r.inside_fraction < t.at(keys[0]).get<double>())
        out.push_back("measured reserved peak inside the predicted range for " +
                      exceeds_text(r.inside_fraction, t.at(keys[0]).get<double>(), " < "));
    if (t.contains(keys[1]) && r.median_width > t.at(keys[1]).get<double>())
        out.push_back("predicted range median width " + exceeds_text(r.median_width, t.at(keys[1]).get<double>()));
    return out;
}

std::vector<std::string> memory_gate_failures(const MemoryFigures& f, const nlohmann::json& t) {
    std::vector<std::string> out;
    auto num = [&](const char* key) -> std::optional<double> {
        if (!t.is_object() || !t.contains(key)) return std::nullopt;
        if (!t.at(key).is_number()) throw InputError(std::string("targets.") + key, "must be a number");
        return t.at(key).get<double>();
    };
    // A gate that compared nothing fails (a figure over no job would read as 0 % error): each needs
    // at least compared_rows_min jobs (default 1).
    const int min_jobs = t.is_object() && t.contains("compared_rows_min") && t.at("compared_rows_min").is_number_integer()
                             ? t.at("compared_rows_min").get<int>()
                             : 1;
    auto too_few = [&](const char* key, int n, const char* what) {
        if (!t.is_object() || !t.contains(key) || n >= min_jobs) return false;
        out.push_back(std::string(what) + ": " + std::to_string(n) + " jobs compared, fewer than " +
                      std::to_string(min_jobs) + " (" + key + " is unknown)");
        return true;
    };
    if (too_few("memory_verdict_accuracy_min", f.verdict_jobs, "fit/OOM verdict") |
        too_few("fit_but_oom_fraction_max", f.predicted_fit, "predicted-fit jobs") |
        too_few("reserved_peak_abs_error_p50_max", f.reserved_ok.n, "reserved-peak error") |
        too_few("reserved_peak_abs_error_p95_max", f.reserved_ok.n, "reserved-peak error") |
        too_few("reserved_peak_abs_error_p95_tp_inside_node_max", f.reserved_ok_tp_inside_node.n,
                "reserved-peak error, tp inside a node") |
        too_few("optimizer_allocated_abs_error_p95_max", f.optimizer_allocated.n, "optimizer-step allocated error"))
        return out;
    if (auto v = num("memory_verdict_accuracy_min"); v && f.verdict_accuracy < *v)
        out.push_back("fit/OOM verdict right on " + exceeds_text(f.verdict_accuracy, *v, " < "));
    if (auto v = num("fit_but_oom_fraction_max"); v && f.fit_but_oom_fraction > *v)
        out.push_back("predicted-fit jobs that died OOM " + exceeds_text(f.fit_but_oom_fraction, *v));
    if (auto v = num("reserved_peak_abs_error_p50_max"); v && f.reserved_ok.p50 > *v)
        out.push_back("reserved-peak error P50 " + exceeds_text(f.reserved_ok.p50, *v));
    if (auto v = num("reserved_peak_abs_error_p95_max"); v && f.reserved_ok.p95 > *v)
        out.push_back("reserved-peak error P95 " + exceeds_text(f.reserved_ok.p95, *v));
    if (auto v = num("reserved_peak_abs_error_p95_tp_inside_node_max"); v && f.reserved_ok_tp_inside_node.p95 > *v)
        out.push_back("reserved-peak error P95, tp inside a node, " + exceeds_text(f.reserved_ok_tp_inside_node.p95, *v));
    if (auto v = num("optimizer_allocated_abs_error_p95_max"); v && f.optimizer_allocated.p95 > *v)
        out.push_back("optimizer-step allocated error P95 " + exceeds_text(f.optimizer_allocated.p95, *v));
    return out;
}

}  // namespace preflight::validation
