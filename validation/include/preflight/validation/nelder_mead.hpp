// Derivative-free minimisation shared by the calibration fits (step-time constants of device
// runs, step-time constants of external measured runs).
#pragma once

#include <cmath>
#include <functional>
#include <vector>

namespace preflight::validation {

using Point = std::vector<double>;

// The fits' unconstrained coordinate of a fraction in (0, 1) (its logit), and back.
inline double logit(double p) { return std::log(p / (1 - p)); }
inline double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// Nelder-Mead simplex (Nelder & Mead 1965) with the standard coefficients: reflection 1,
// expansion 2, contraction 0.5, shrink 0.5. The start simplex is `start` plus `step` along
// each axis. Stops when the simplex's worst and best values agree to `relative_tolerance`
// (relative to 1 + |best|) or after `max_evals` evaluations counted in `evals` (which the
// caller may have started above 0). Returns the best vertex.
Point nelder_mead(const std::function<double(const Point&)>& f, Point start, double step, int max_evals, int& evals,
                  double relative_tolerance = 1e-10);

}  // namespace preflight::validation
