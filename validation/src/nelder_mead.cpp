#include "preflight/validation/nelder_mead.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace preflight::validation {

Point nelder_mead(const std::function<double(const Point&)>& f, Point start, double step, int max_evals, int& evals,
                  double relative_tolerance) {
    const std::size_t n = start.size();
    std::vector<Point> s(n + 1, start);
    std::vector<double> fs(n + 1);
    for (std::size_t i = 0; i < n; ++i) s[i + 1][i] += step;
    for (std::size_t i = 0; i <= n; ++i) fs[i] = f(s[i]), ++evals;
    std::vector<std::size_t> idx(n + 1);
    while (evals < max_evals) {
        std::iota(idx.begin(), idx.end(), std::size_t{0});
        std::sort(idx.begin(), idx.end(), [&](std::size_t x, std::size_t y) { return fs[x] < fs[y]; });
        const std::size_t best = idx[0], worst = idx[n], second = idx[n - 1];
        if (std::abs(fs[worst] - fs[best]) <= relative_tolerance * (1 + std::abs(fs[best]))) break;
        Point c(n, 0.0);  // centroid of every vertex but the worst
        for (std::size_t i = 0; i <= n; ++i)
            if (i != worst)
                for (std::size_t k = 0; k < n; ++k) c[k] += s[i][k] / static_cast<double>(n);
        auto along = [&](double t) {
            Point v(n);
            for (std::size_t k = 0; k < n; ++k) v[k] = c[k] + t * (s[worst][k] - c[k]);
            return v;
        };
        auto try_point = [&](const Point& x) {
            ++evals;
            return f(x);
        };
        const Point xr = along(-1.0);  // reflection
        const double fr = try_point(xr);
        if (fr < fs[best]) {
            const Point xe = along(-2.0);  // expansion
            const double fe = try_point(xe);
            if (fe < fr) s[worst] = xe, fs[worst] = fe;
            else s[worst] = xr, fs[worst] = fr;
        } else if (fr < fs[second]) {
            s[worst] = xr, fs[worst] = fr;
        } else {
            const bool outside = fr < fs[worst];
            const Point xc = along(outside ? -0.5 : 0.5);  // outside / inside contraction
            const double fc = try_point(xc);
            if (fc < (outside ? fr : fs[worst])) {
                s[worst] = xc, fs[worst] = fc;
            } else {  // shrink towards the best vertex
                for (std::size_t i = 0; i <= n; ++i) {
                    if (i == best) continue;
                    for (std::size_t k = 0; k < n; ++k) s[i][k] = s[best][k] + 0.5 * (s[i][k] - s[best][k]);
                    fs[i] = try_point(s[i]);
                }
            }
        }
    }
    return s[static_cast<std::size_t>(std::min_element(fs.begin(), fs.end()) - fs.begin())];
}

}  // namespace preflight::validation
