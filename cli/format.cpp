#include "format.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <string_view>
#include <utility>

namespace preflight::cli {

std::string format_rate(std::optional<double> v, const char* unit) {
    if (!v) return "N/A";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f %s", *v, unit);
    return buf;
}

std::string fixed(double v, int digits) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.*f", digits, v);
    return buf;
}

std::string format_figure(double v) {
    if (!std::isfinite(v)) return "N/A";
    if (std::fabs(v) >= 1 && std::fabs(v) < 1e15) return group_digits(std::llround(v));
    if (v == 0) return "0";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", v);
    return buf;
}

std::string format_flops(double flops) {
    if (!std::isfinite(flops)) return "N/A";
    static constexpr std::pair<double, const char*> kUnits[] = {{1e18, "EFLOP"}, {1e15, "PFLOP"}, {1e12, "TFLOP"}, {1e9, "GFLOP"}};
    for (const auto& [scale, unit] : kUnits)
        if (std::fabs(flops) >= scale) return fixed(flops / scale, 1) + " " + unit;
    return format_figure(flops) + " FLOP";
}

std::string bar(double fraction, int width) {
    fraction = std::clamp(fraction, 0.0, 1.0);
    const int filled = static_cast<int>(std::lround(fraction * width));
    std::string s;
    for (int i = 0; i < width; ++i) s += i < filled ? "\u2588" : "\u00b7";
    return s;
}

namespace {
// Display width: UTF-8 code points (the bar glyphs are one column each).
std::size_t columns(const std::string& s) {
    std::size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
}
}  // namespace

std::string Table::render() const {
    std::vector<std::size_t> w(header.size(), 0);
    auto widen = [&](const std::vector<std::string>& r) {
        for (std::size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], columns(r[i]));
    };
    widen(header);
    widen(units);
    for (const auto& r : rows) widen(r);
    auto line = [&](const std::vector<std::string>& r) {
        std::string out;
        for (std::size_t i = 0; i < w.size(); ++i) {
            const std::string cell = i < r.size() ? r[i] : "";
            const std::string pad(w[i] - std::min(w[i], columns(cell)), ' ');
            // First column and a trailing untitled column (bars) align left, numbers right.
            const bool left = i == 0 || (i + 1 == w.size() && (header[i].empty() || text_last));
            out += left ? (i == 0 ? "" : "  ") + cell + pad : "  " + pad + cell;
        }
        while (!out.empty() && out.back() == ' ') out.pop_back();
        return out + "\n";
    };
    std::string out = line(header);
    if (!units.empty()) out += line(units);
    for (const auto& r : rows) out += line(r);
    return out;
}

std::string mfu_above_peak_note(double max_utilisation, bool attention_counted_full) {
    if (!(max_utilisation > 1.0) || !attention_counted_full) return "";
    return "# MFU/HFU above 100 % (up to " + fixed(100.0 * max_utilisation, 1) +
           " %): attention FLOPs are counted in full (the PaLM/Megatron convention), twice the work a causal kernel "
           "runs; `preflight plan --attention-flops causal` counts what runs. The step time is the same either way.\n";
}

std::string signed_batch_error(double e) {
    const bool tiny = std::abs(e) < 5e-5;
    std::string s = e > 0 ? "+" : tiny ? "-" : "";  // appended to, not `"+" + s` (GCC 12's -Wrestrict)
    if (tiny) return s.append("<0.01 %");
    return s.append(fixed(100.0 * e, 2)).append(" %");
}

std::string count_of(std::int64_t n, const char* singular, const char* plural) {
    return group_digits(n) + " " + (n == 1 ? singular : plural);
}

std::string format_seconds(double s) {
    char buf[32];
    if (s >= 1.0)
        std::snprintf(buf, sizeof buf, "%.3f s", s);
    else
        std::snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
    return buf;
}

std::string format_duration(double s) {
    char buf[64];
    if (s >= 86400 * 1e6)  // beyond a million days: three significant digits, never 19 of them
        std::snprintf(buf, sizeof buf, "%.3g days", s / 86400);
    else if (s >= 86400)
        std::snprintf(buf, sizeof buf, "%.1f days", s / 86400);
    else if (s >= 3600)
        std::snprintf(buf, sizeof buf, "%.1f h", s / 3600);
    else
        std::snprintf(buf, sizeof buf, "%.0f s", s);
    return buf;
}

std::string shell_word(const std::string& word) {
    const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("_./:=@%+,-").find(c) != std::string_view::npos;
    });
    if (plain) return word;
    std::string out = "'";
    for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

}  // namespace preflight::cli
