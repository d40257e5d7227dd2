// The residual plot as SVG, drawn by hand: three panels (peak memory and step time,
// predicted vs measured on log-log axes with the y = x line; histogram of the signed
// relative errors). Deterministic output: same input, same bytes.
#include "preflight/validation/plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace preflight::validation {

namespace {

struct Point {
    double x = 0, y = 0;  // predicted, measured
    std::string source;
};

std::string esc(const std::string& s) {
    std::string o;
    for (char c : s) {
        switch (c) {
            case '&': o += "&amp;"; break;
            case '<': o += "&lt;"; break;
            case '>': o += "&gt;"; break;
            case '"': o += "&quot;"; break;
            default: o += c;
        }
    }
    return o;
}

std::string num(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2f", v);
    return b;
}

std::string colour(const std::string& source) { return source == "pytorch" ? "#e8710a" : "#1a66b5"; }

std::string tick_label(double v) {
    char b[32];
    if (v >= 100 || v == std::floor(v)) std::snprintf(b, sizeof b, "%g", v);
    else std::snprintf(b, sizeof b, "%.3g", v);
    return b;
}

constexpr double kPanelW = 380, kPanelH = 360, kMarginL = 62, kMarginB = 48, kMarginT = 34, kMarginR = 14;

// A log-log scatter panel at x offset `ox`.
void scatter(std::ostringstream& o, double ox, const std::string& title, const std::string& unit,
             const std::vector<Point>& pts) {
    const double x0 = ox + kMarginL, x1 = ox + kPanelW - kMarginR, y0 = kMarginT, y1 = kPanelH - kMarginB;
    o << "<text x=\"" << num((x0 + x1) / 2) << "\" y=\"20\" text-anchor=\"middle\" font-weight=\"bold\">" << esc(title)
      << "</text>\n";
    o << "<rect x=\"" << num(x0) << "\" y=\"" << num(y0) << "\" width=\"" << num(x1 - x0) << "\" height=\""
      << num(y1 - y0) << "\" fill=\"none\" stroke=\"#444\"/>\n";
    if (pts.empty()) {
        o << "<text x=\"" << num((x0 + x1) / 2) << "\" y=\"" << num((y0 + y1) / 2)
          << "\" text-anchor=\"middle\" fill=\"#777\">no measured values</text>\n";
        return;
    }
    double lo = 1e300, hi = 0;
    for (const auto& p : pts)
        for (double v : {p.x, p.y})
            if (v > 0) lo = std::min(lo, v), hi = std::max(hi, v);
    if (hi <= 0) return;
    double llo = std::log10(lo), lhi = std::log10(hi);
    const double pad = std::max(0.05, 0.08 * (lhi - llo));
    llo -= pad;
    lhi += pad;
    auto sx = [&](double v) { return x0 + (std::log10(v) - llo) / (lhi - llo) * (x1 - x0); };
    auto sy = [&](double v) { return y1 - (std::log10(v) - llo) / (lhi - llo) * (y1 - y0); };
    // Ticks at 1, 2, 5 x 10^k inside the range.
    for (int k = static_cast<int>(std::floor(llo)); k <= static_cast<int>(std::ceil(lhi)); ++k)
        for (double m : {1.0, 2.0, 5.0}) {
            const double v = m * std::pow(10.0, k);
            const double lv = std::log10(v);
            if (lv < llo || lv > lhi) continue;
            o << "<line x1=\"" << num(sx(v)) << "\" y1=\"" << num(y0) << "\" x2=\"" << num(sx(v)) << "\" y2=\"" << num(y1)
              << "\" stroke=\"#e4e4e4\"/>\n";
            o << "<line x1=\"" << num(x0) << "\" y1=\"" << num(sy(v)) << "\" x2=\"" << num(x1) << "\" y2=\"" << num(sy(v))
              << "\" stroke=\"#e4e4e4\"/>\n";
            o << "<text x=\"" << num(sx(v)) << "\" y=\"" << num(y1 + 14) << "\" text-anchor=\"middle\" font-size=\"10\">"
              << tick_label(v) << "</text>\n";
            o << "<text x=\"" << num(x0 - 4) << "\" y=\"" << num(sy(v) + 3) << "\" text-anchor=\"end\" font-size=\"10\">"
              << tick_label(v) << "</text>\n";
        }
    const double a = std::pow(10.0, llo), b = std::pow(10.0, lhi);
    o << "<line x1=\"" << num(sx(a)) << "\" y1=\"" << num(sy(a)) << "\" x2=\"" << num(sx(b)) << "\" y2=\"" << num(sy(b))
      << "\" stroke=\"#888\" stroke-dasharray=\"4 3\"/>\n";
    for (const auto& p : pts) {
        if (p.x <= 0 || p.y <= 0) continue;
        o << "<circle cx=\"" << num(sx(p.x)) << "\" cy=\"" << num(sy(p.y)) << "\" r=\"3.5\" fill=\"" << colour(p.source)
          << "\" fill-opacity=\"0.75\"/>\n";
    }
    o << "<text x=\"" << num((x0 + x1) / 2) << "\" y=\"" << num(kPanelH - 12) << "\" text-anchor=\"middle\">predicted ["
      << esc(unit) << "]</text>\n";
    o << "<text transform=\"translate(" << num(ox + 16) << " " << num((y0 + y1) / 2)
      << ") rotate(-90)\" text-anchor=\"middle\">measured [" << esc(unit) << "]</text>\n";
}

void histogram(std::ostringstream& o, double ox, const std::vector<double>& peak, const std::vector<double>& step) {
    const double x0 = ox + kMarginL, x1 = ox + kPanelW - kMarginR, y0 = kMarginT, y1 = kPanelH - kMarginB;
    o << "<text x=\"" << num((x0 + x1) / 2)
      << "\" y=\"20\" text-anchor=\"middle\" font-weight=\"bold\">Relative error vs the prediction</text>\n";
    o << "<rect x=\"" << num(x0) << "\" y=\"" << num(y0) << "\" width=\"" << num(x1 - x0) << "\" height=\""
      << num(y1 - y0) << "\" fill=\"none\" stroke=\"#444\"/>\n";
    double span = 0.02;  // at least +-2 %
    for (double v : peak) span = std::max(span, std::abs(v));
    for (double v : step) span = std::max(span, std::abs(v));
    span *= 1.05;
    constexpr int kBins = 20;
    auto bins = [&](const std::vector<double>& v) {
        std::vector<int> c(kBins, 0);
        for (double e : v) c[std::clamp(static_cast<int>((e + span) / (2 * span) * kBins), 0, kBins - 1)]++;
        return c;
    };
    const auto cp = bins(peak), cs = bins(step);
    int top = 1;
    for (int i = 0; i < kBins; ++i) top = std::max({top, cp[i], cs[i]});
    const double bw = (x1 - x0) / kBins;
    auto bar = [&](int i, int count, double offset, const char* fill) {
        if (count == 0) return;
        const double h = (y1 - y0) * count / top;
        o << "<rect x=\"" << num(x0 + i * bw + offset) << "\" y=\"" << num(y1 - h) << "\" width=\"" << num(bw / 2 - 1)
          << "\" height=\"" << num(h) << "\" fill=\"" << fill << "\"/>\n";
    };
    for (int i = 0; i < kBins; ++i) {
        bar(i, cp[i], 0.5, "#1a66b5");
        bar(i, cs[i], bw / 2, "#3a9a4a");
    }
    for (int k = -2; k <= 2; ++k) {
        const double v = span * k / 2;
        const double x = x0 + (v + span) / (2 * span) * (x1 - x0);
        char b[32];
        std::snprintf(b, sizeof b, "%+.1f%%", 100 * v);
        o << "<line x1=\"" << num(x) << "\" y1=\"" << num(y1) << "\" x2=\"" << num(x) << "\" y2=\"" << num(y1 + 4)
          << "\" stroke=\"#444\"/>\n<text x=\"" << num(x) << "\" y=\"" << num(y1 + 15)
          << "\" text-anchor=\"middle\" font-size=\"10\">" << b << "</text>\n";
    }
    o << "<text x=\"" << num(x0 - 4) << "\" y=\"" << num(y0 + 8) << "\" text-anchor=\"end\" font-size=\"10\">" << top
      << "</text>\n<text x=\"" << num(x0 - 4) << "\" y=\"" << num(y1) << "\" text-anchor=\"end\" font-size=\"10\">0</text>\n";
    o << "<rect x=\"" << num(x0 + 8) << "\" y=\"" << num(y0 + 8) << "\" width=\"10\" height=\"10\" fill=\"#1a66b5\"/>"
      << "<text x=\"" << num(x0 + 22) << "\" y=\"" << num(y0 + 17) << "\" font-size=\"11\">peak memory (" << peak.size()
      << ")</text>\n";
    o << "<rect x=\"" << num(x0 + 8) << "\" y=\"" << num(y0 + 24) << "\" width=\"10\" height=\"10\" fill=\"#3a9a4a\"/>"
      << "<text x=\"" << num(x0 + 22) << "\" y=\"" << num(y0 + 33) << "\" font-size=\"11\">step time (" << step.size()
      << ")</text>\n";
    o << "<text x=\"" << num((x0 + x1) / 2) << "\" y=\"" << num(kPanelH - 12)
      << "\" text-anchor=\"middle\">relative error [%] (runs per bin)</text>\n";
}

}  // namespace

std::string residual_plot_svg(const CheckResult& r) {
    std::vector<Point> peak, step;
    std::vector<double> peak_err, step_err;
    for (const auto& run : r.runs) {
        if (run.status != "ok") continue;
        if (const Comparison* c = run.find("peak_bytes")) {
            peak.push_back({c->predicted / (1u << 30), c->measured / (1u << 30), run.source});
            peak_err.push_back(c->relative_error);
        }
        if (const Comparison* c = run.find("step_time_s")) {
            step.push_back({c->predicted, c->measured, run.source});
            step_err.push_back(c->relative_error);
        }
    }
    const double width = 3 * kPanelW, height = kPanelH + 26;
    std::ostringstream o;
    o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
    o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(width) << "\" height=\"" << num(height)
      << "\" viewBox=\"0 0 " << num(width) << " " << num(height)
      << "\" font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"12\">\n";
    o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    scatter(o, 0, "Peak memory (tensor memory the framework allocated)", "GiB", peak);
    scatter(o, kPanelW, "Step time", "s", step);
    histogram(o, 2 * kPanelW, peak_err, step_err);
    // Legend for the scatter colours and what the reports were.
    o << "<circle cx=\"20\" cy=\"" << num(kPanelH + 12) << "\" r=\"4\" fill=\"" << colour("preflight-runtime")
      << "\"/><text x=\"28\" y=\"" << num(kPanelH + 16) << "\">Preflight runtime</text>\n";
    o << "<circle cx=\"170\" cy=\"" << num(kPanelH + 12) << "\" r=\"4\" fill=\"" << colour("pytorch") << "\"/><text x=\"178\" y=\""
      << num(kPanelH + 16) << "\">PyTorch</text>\n";
    o << "<text x=\"290\" y=\"" << num(kPanelH + 16) << "\" fill=\"#555\">" << r.all.compared << " runs compared ("
      << r.all.dry_runs << " dry runs, not GPU measurements); dashed line: measured = predicted</text>\n";
    o << "</svg>\n";
    return o.str();
}

}  // namespace preflight::validation
