#include "preflight/planner/format.hpp"

#include <cmath>
#include <cstdio>

namespace preflight {

std::string format_bytes(std::int64_t bytes) {
    static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = static_cast<double>(bytes);
    int u = 0;
    while (std::abs(v) >= 1024.0 && u < 5) {
        v /= 1024.0;
        ++u;
    }
    char buf[32];
    if (u == 0)
        std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
    else
        std::snprintf(buf, sizeof buf, std::abs(v) >= 100 ? "%.1f %s" : "%.2f %s", v, units[u]);
    return buf;
}

std::string group_digits(std::int64_t v) {
    // Magnitude as unsigned so INT64_MIN does not overflow on negation.
    const std::uint64_t magnitude = v < 0 ? std::uint64_t{0} - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
    const std::string digits = std::to_string(magnitude);
    // Copied forward with a comma before each group of three from the right (building it this way,
    // not by insert, also keeps GCC 12's -Wrestrict false positive on string::insert away).
    std::string s = v < 0 ? "-" : "";
    s.reserve(digits.size() + digits.size() / 3 + 1);
    for (std::size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) s.push_back(',');
        s.push_back(digits[i]);
    }
    return s;
}

std::string format_wait_odds(double wait_probability) {
    const double pct = 100.0 * wait_probability;
    if (pct < 1) return "a wait under 1 % likely";
    if (pct > 99) return "a wait over 99 % likely";
    char buf[48];
    std::snprintf(buf, sizeof buf, "a wait %.0f %% likely", pct);
    return buf;
}

std::string format_real(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

std::string format_count(std::int64_t v) {
    char buf[32];
    const double d = static_cast<double>(v);
    if (d >= 1e9)
        std::snprintf(buf, sizeof buf, "%.2f B", d / 1e9);
    else if (d >= 1e6)
        std::snprintf(buf, sizeof buf, "%.1f M", d / 1e6);
    else
        std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
    return buf;
}

}  // namespace preflight
