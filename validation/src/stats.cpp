#include "preflight/validation/stats.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace preflight::validation {

double percentile(std::vector<double> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    q = std::clamp(q, 0.0, 1.0);
    const double rank = q * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<std::size_t>(std::floor(rank));
    const auto hi = std::min(lo + 1, v.size() - 1);
    const double frac = rank - static_cast<double>(lo);
    return v[lo] + frac * (v[hi] - v[lo]);
}

std::string percent_text(double fraction) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f %%", 100.0 * fraction);
    return b;
}

std::string exceeds_text(double value, double limit, const char* between) {
    char v[48], l[48];
    // The fewest decimals (1 to 6) that tell the two apart: a gate of 1e-7 failed by 0.01 % was
    // reported as "0.0 % > 0.0 %".
    for (int decimals = 1; decimals <= 6; ++decimals) {
        std::snprintf(v, sizeof v, "%.*f %%", decimals, 100.0 * value);
        std::snprintf(l, sizeof l, "%.*f %%", decimals, 100.0 * limit);
        if (std::string(v) != l) break;
    }
    return std::string(v) + between + l;
}

ErrorStats error_stats(const std::vector<double>& abs_errors) {
    ErrorStats s;
    s.n = static_cast<int>(abs_errors.size());
    if (s.n == 0) return s;
    s.p50 = percentile(abs_errors, 0.50);
    s.p95 = percentile(abs_errors, 0.95);
    s.max = *std::max_element(abs_errors.begin(), abs_errors.end());
    return s;
}

nlohmann::json error_stats_json(const ErrorStats& s) {
    const auto figure = [&](double v) { return s.n > 0 ? nlohmann::json(v) : nlohmann::json(nullptr); };
    return {{"n", s.n}, {"p50", figure(s.p50)}, {"p95", figure(s.p95)}, {"max", figure(s.max)}};
}

}  // namespace preflight::validation
