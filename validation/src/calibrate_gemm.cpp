// The step model's GEMM curve fitted to GEMMs timed one by one (`preflight run --op-times`):
// calibrate.hpp fit_gemm_curves.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

#include "preflight/planner/error.hpp"
#include "preflight/planner/throughput.hpp"
#include "preflight/validation/calibrate.hpp"
#include "preflight/validation/nelder_mead.hpp"
#include "preflight/planner/shown_value.hpp"
#include "calibrate_gemm.hpp"

namespace preflight::validation {

using nlohmann::json;

namespace {

// A shape with what predicts it: the recipe whose GEMM constants apply and the model family.
struct Sample {
    GemmSample g;
    Precision precision;
    std::string family;
};

// Distinct (m, n, k, batch) shapes among the samples: a two-constant curve needs three, and the
// same product timed in many runs is still one point of it.
int distinct_shapes(const std::vector<Sample>& samples) {
    std::set<std::tuple<double, double, double, double>> shapes;
    for (const Sample& s : samples) shapes.emplace(s.g.m, s.g.n, s.g.k, s.g.batch);
    return static_cast<int>(shapes.size());
}

// The class's two constants in `e`: the 16-bit GEMM figures, or the fp32 recipe's.
void set_curve(Efficiency& e, bool fp32, double max_fraction, double half_dim) {
    (fp32 ? e.fp32_gemm_max_fraction_of_peak : e.gemm_max_fraction_of_peak) = max_fraction;
    (fp32 ? e.fp32_gemm_half_efficiency_dim : e.gemm_half_efficiency_dim) = half_dim;
}

// One product's predicted time under `gpu`'s constants.
double predicted_s(const Sample& s, const GpuSpec& gpu) {
    return gemm_time_s(gpu, s.precision, s.g.m, s.g.n, s.g.k, s.g.batch);
}
double measured_s(const Sample& s) { return s.g.time_s / static_cast<double>(s.g.count); }

ErrorStats curve_errors(const std::vector<Sample>& samples, const GpuSpec& gpu) {
    std::vector<double> e;
    for (const Sample& s : samples) {
        const double p = predicted_s(s, gpu);
        e.push_back(std::abs(measured_s(s) - p) / p);
    }
    return error_stats(e);
}

// The two constants fitted to `samples` from `gpu`'s: minimises the time-weighted mean squared
// log ratio of predicted to measured time per product.
GpuSpec fit_curve(const std::vector<Sample>& samples, const GpuSpec& gpu, bool fp32) {
    const KernelEfficiency k0 = kernel_efficiency(gpu.efficiency, fp32 ? Precision::fp32 : Precision::bf16_mixed);
    GpuSpec g = gpu;
    double weight = 0;
    for (const Sample& s : samples) weight += s.g.time_s;
    auto objective = [&](const Point& v) {
        set_curve(g.efficiency, fp32, sigmoid(v[0]), std::exp(v[1]));
        double sum = 0;
        for (const Sample& s : samples) {
            const double lr = std::log(predicted_s(s, g) / measured_s(s));
            sum += s.g.time_s * lr * lr;
        }
        return sum / weight;
    };
    Point x = {logit(std::clamp(k0.gemm_max_fraction_of_peak, 1e-4, 1 - 1e-4)),
               std::log(std::max(k0.gemm_half_efficiency_dim, 1e-3))};
    int evals = 0;
    for (int round = 0; round < 3; ++round) x = nelder_mead(objective, x, round == 0 ? 0.5 : 0.1, 2000, evals, 1e-14);
    set_curve(g.efficiency, fp32, sigmoid(x[0]), std::exp(x[1]));
    return g;
}

constexpr std::size_t kMaxGemmShapes = 100000;  // per report: a step of the largest runnable plan has far fewer

}  // namespace


std::vector<GemmSample> gemm_samples(const json& m) {
    std::vector<GemmSample> out;
    const auto ot = m.find("op_times");
    if (ot == m.end() || ot->is_null()) return out;
    if (!ot->is_object() || !ot->contains("gemms") || !ot->at("gemms").is_array())
        throw InputError("measured.op_times", "must be null or an object with a \"gemms\" array, got " + shown_json(*ot));
    const json& gs = ot->at("gemms");
    if (gs.size() > kMaxGemmShapes)
        throw InputError("measured.op_times.gemms", "lists " + std::to_string(gs.size()) + " shapes, more than " +
                                                        std::to_string(kMaxGemmShapes));
    for (std::size_t i = 0; i < gs.size(); ++i) {
        const std::string at = "measured.op_times.gemms[" + std::to_string(i) + "]";
        const json& g = gs[i];
        if (!g.is_object()) throw InputError(at, "must be an object, got " + shown_json(g));
        // A dimension, batch or count: a whole number in [1, 2^40]; the time: finite and > 0.
        auto whole = [&](const char* key) {
            const auto it = g.find(key);
            if (it == g.end() || !it->is_number_integer() || it->get<std::int64_t>() < 1 || it->get<std::int64_t>() > (std::int64_t{1} << 40))
                throw InputError(at + "." + key, "must be a whole number in [1, 2^40], got " + (it == g.end() ? "nothing" : shown_json(*it)));
            return it->get<std::int64_t>();
        };
        GemmSample s;
        const auto kind = g.find("kind");
        if (kind == g.end() || !kind->is_string()) throw InputError(at + ".kind", "must be a string");
        s.fp8 = kind->get<std::string>().rfind("fp8 ", 0) == 0;
        // A weight gradient that also ran its bias's column sum: the op's time is not the GEMM's alone.
        s.with_other_kernel = kind->get<std::string>().find("+bias_grad") != std::string::npos;
        s.m = static_cast<double>(whole("m"));
        s.n = static_cast<double>(whole("n"));
        s.k = static_cast<double>(whole("k"));
        s.batch = static_cast<double>(whole("batch"));
        s.count = whole("count");
        const auto t = g.find("time_s");
        if (t == g.end() || !t->is_number() || !std::isfinite(t->get<double>()) || t->get<double>() <= 0)
            throw InputError(at + ".time_s", "must be a finite number of seconds > 0, got " + (t == g.end() ? "nothing" : shown_json(*t)));
        s.time_s = t->get<double>();
        out.push_back(s);
    }
    return out;
}

json gemm_curves_json(const std::vector<GemmCurveFit>& fits) {
    json out = json::array();
    for (const GemmCurveFit& f : fits)
        out.push_back({{"kernels", f.kernels},
                       {"runs", f.runs},
                       {"shapes", f.shapes},
                       {"before", {{"gemm_max_fraction_of_peak", f.max_fraction_before},
                                   {"gemm_half_efficiency_dim", f.half_dim_before},
                                   {"error", error_stats_json(f.before)}}},
                       {"after", {{"gemm_max_fraction_of_peak", f.max_fraction_after},
                                  {"gemm_half_efficiency_dim", f.half_dim_after},
                                  {"error", error_stats_json(f.after)}}},
                       {"error_leave_one_family_out", error_stats_json(f.by_family)}});
    return out;
}

std::string gemm_curves_text(const CalibrationResult& r) {
    std::ostringstream o;
    if (r.runs_with_op_times == 0) {
        o << "GEMMs timed one by one: no run here has measured.op_times (record them with `preflight run --op-times`; "
             "the GPU session's optimes stage adds them to runs recorded before)\n";
        return o.str();
    }
    char b[512];
    for (const GemmCurveFit& f : r.gemm_curves) {
        std::snprintf(b, sizeof b,
                      "GEMM curve, %s kernels, %d shapes from %d runs (error of one product's time, p50/p95): the spec's "
                      "(max %.3f of peak, half at d = %.0f) %.2f%%/%.2f%%; fitted on these shapes (max %.3f, half at d = %.0f) "
                      "%.2f%%/%.2f%% in sample; each model family's shapes by a fit on the others' %.2f%%/%.2f%% (n=%d)\n",
                      f.kernels.c_str(), f.shapes, f.runs, f.max_fraction_before, f.half_dim_before, 100 * f.before.p50,
                      100 * f.before.p95, f.max_fraction_after, f.half_dim_after, 100 * f.after.p50, 100 * f.after.p95,
                      100 * f.by_family.p50, 100 * f.by_family.p95, f.by_family.n);
        o << b;
    }
    if (r.gemm_curves.empty())
        o << "GEMMs timed one by one: " << r.runs_with_op_times << " runs with op times, fewer than 3 shapes of a kernel class\n";
    return o.str();
}

std::vector<GemmCurveFit> fit_gemm_curves(const std::vector<CalibrationRun>& runs, const GpuSpec& gpu) {
    // fp8 products follow the fp8 figure, not this curve's maximum: not fitted here.
    std::map<bool, std::vector<Sample>> by_class;  // fp32 recipe?
    std::map<bool, int> class_runs;
    for (const CalibrationRun& r : runs) {
        const bool fp32 = r.plan.precision == Precision::fp32;
        bool any = false;
        for (const GemmSample& g : r.gemms) {
            if (g.fp8 || g.with_other_kernel || g.count <= 0 || g.time_s <= 0) continue;
            by_class[fp32].push_back({g, fp32 ? Precision::fp32 : Precision::bf16_mixed,
                                      std::string(to_string(r.model.family))});
            any = true;
        }
        class_runs[fp32] += any;
    }
    std::vector<GemmCurveFit> out;
    for (const auto& [fp32, samples] : by_class) {
        const int shapes = distinct_shapes(samples);
        if (shapes < 3) continue;
        GemmCurveFit f;
        f.kernels = fp32 ? "fp32" : "16-bit";
        f.runs = class_runs[fp32];
        f.shapes = shapes;
        const KernelEfficiency k0 = kernel_efficiency(gpu.efficiency, fp32 ? Precision::fp32 : Precision::bf16_mixed);
        f.max_fraction_before = k0.gemm_max_fraction_of_peak;
        f.half_dim_before = k0.gemm_half_efficiency_dim;
        f.before = curve_errors(samples, gpu);
        const GpuSpec fitted = fit_curve(samples, gpu, fp32);
        const KernelEfficiency k1 = kernel_efficiency(fitted.efficiency, fp32 ? Precision::fp32 : Precision::bf16_mixed);
        f.max_fraction_after = k1.gemm_max_fraction_of_peak;
        f.half_dim_after = k1.gemm_half_efficiency_dim;
        f.after = curve_errors(samples, fitted);
        // Leave one model family out: its shapes predicted by a fit on the others' (at least 3 distinct).
        std::vector<double> lofo;
        std::map<std::string, int> families;
        for (const Sample& s : samples) ++families[s.family];
        for (const auto& [family, n] : families) {
            std::vector<Sample> train, held;
            for (const Sample& s : samples) (s.family == family ? held : train).push_back(s);
            if (distinct_shapes(train) < 3) continue;
            const GpuSpec other = fit_curve(train, gpu, fp32);
            for (const Sample& s : held) {
                const double p = predicted_s(s, other);
                lofo.push_back(std::abs(measured_s(s) - p) / p);
            }
        }
        f.by_family = error_stats(lofo);
        out.push_back(f);
    }
    return out;
}

}  // namespace preflight::validation
