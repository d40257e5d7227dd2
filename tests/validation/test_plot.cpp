#include <regex>
#include <vector>

#include <gtest/gtest.h>

#include "preflight/validation/plot.hpp"

using namespace preflight::validation;

namespace {

// Minimal XML well-formedness: tags nest and close in order, attributes are quoted,
// text holds no raw '<' or '&' outside entities.
bool well_formed(const std::string& s, std::string& why) {
    std::vector<std::string> stack;
    std::size_t i = 0;
    bool root_seen = false;
    while (i < s.size()) {
        if (s[i] == '&') {
            const auto semi = s.find(';', i);
            const std::string ent = s.substr(i, semi == std::string::npos ? 8 : semi - i + 1);
            if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;") return why = "bad entity " + ent, false;
            i = semi + 1;
            continue;
        }
        if (s[i] != '<') {
            ++i;
            continue;
        }
        const auto close = s.find('>', i);
        if (close == std::string::npos) return why = "unclosed tag", false;
        std::string tag = s.substr(i + 1, close - i - 1);
        i = close + 1;
        if (tag.rfind("?xml", 0) == 0) continue;
        if (!tag.empty() && tag[0] == '/') {
            if (stack.empty() || stack.back() != tag.substr(1)) return why = "mismatched </" + tag.substr(1) + ">", false;
            stack.pop_back();
            continue;
        }
        const bool self = !tag.empty() && tag.back() == '/';
        const std::string name = tag.substr(0, tag.find_first_of(" /"));
        // Attributes: name="value" pairs only.
        static const std::regex attrs(R"(^[A-Za-z][\w:-]*(\s+[\w:-]+="[^"<]*")*\s*/?$)");
        if (!std::regex_match(tag, attrs)) return why = "bad tag <" + tag + ">", false;
        if (stack.empty()) {
            if (root_seen) return why = "two roots", false;
            root_seen = true;
        }
        if (!self) stack.push_back(name);
    }
    if (!stack.empty()) return why = "unclosed <" + stack.back() + ">", false;
    return root_seen;
}

RunCheck run(const std::string& id, const std::string& source, double peak_p, double peak_m, double step_p, double step_m) {
    RunCheck r;
    r.id = id;
    r.source = source;
    r.status = "ok";
    r.mode = "device";
    r.comparisons.push_back({"peak_bytes", peak_m, peak_p, (peak_m - peak_p) / peak_p, std::nullopt, true});
    if (step_p > 0) r.comparisons.push_back({"step_time_s", step_m, step_p, (step_m - step_p) / step_p, std::nullopt, true});
    return r;
}

std::size_t count(const std::string& s, const std::string& what) {
    std::size_t n = 0;
    for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
    return n;
}

}  // namespace

TEST(Plot, SvgIsWellFormedWithOnePointPerMeasurement) {
    CheckResult r;
    r.runs.push_back(run("a", "preflight-runtime", 4e9, 4.04e9, 0.20, 0.22));
    r.runs.push_back(run("b", "preflight-runtime", 12e9, 11.9e9, 0.80, 0.70));
    r.runs.push_back(run("c", "pytorch", 20e9, 21e9, 1.5, 1.9));
    r.runs.push_back(run("d<&>", "pytorch", 30e9, 29e9, 0, 0));  // no step time
    summarize(r);
    const std::string svg = residual_plot_svg(r);
    std::string why;
    EXPECT_TRUE(well_formed(svg, why)) << why;
    EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
    EXPECT_NE(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
    // 4 peak points + 3 step-time points, plus the two legend dots.
    EXPECT_EQ(count(svg, "<circle"), 4u + 3u + 2u);
    EXPECT_NE(svg.find("peak memory (4)"), std::string::npos);
    EXPECT_NE(svg.find("step time (3)"), std::string::npos);
    EXPECT_EQ(svg, residual_plot_svg(r));  // deterministic
}

TEST(Plot, EmptyResultStillDrawsAWellFormedImage) {
    CheckResult r;
    summarize(r);
    const std::string svg = residual_plot_svg(r);
    std::string why;
    EXPECT_TRUE(well_formed(svg, why)) << why;
    EXPECT_NE(svg.find("no measured values"), std::string::npos);
}
