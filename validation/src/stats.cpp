#include "preflight/validation/stats.hpp"

#include <algorithm>
#include <cmath>

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

}  // namespace preflight::validation
