// Small statistics helpers for the validation summary.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace preflight::validation {

// Percentile q in [0, 1] with linear interpolation between closest ranks
// (Hyndman & Fan 1996, definition 7; numpy's default): rank = q * (n - 1).
// Returns 0 for an empty sample.
double percentile(std::vector<double> values, double q);

// The signed relative error every figure reports: (predicted - measured) / measured.
inline double relative_error(double predicted, double measured) { return (predicted - measured) / measured; }

// A fraction as a percentage with one decimal, the reports' form: 0.1234 -> "12.3 %".
std::string percent_text(double fraction);
// "value % > limit %" (`between` joins them), with the fewest decimals, 1 to 6, that tell the two apart.
std::string exceeds_text(double value, double limit, const char* between = " > ");

// Summary of a sample of |relative errors|.
struct ErrorStats {
    int n = 0;
    double p50 = 0, p95 = 0, max = 0;
};
ErrorStats error_stats(const std::vector<double>& abs_errors);
// {"n", "p50", "p95", "max"}; the three figures null over no sample (unknown, not 0).
nlohmann::json error_stats_json(const ErrorStats& s);

}  // namespace preflight::validation
