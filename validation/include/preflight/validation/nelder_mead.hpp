// Derivative-free minimisation shared by the calibration fits (step-time constants of device
// runs, step-time constants of external measured runs).
#pragma once

#include <functional>
#include <vector>

namespace preflight::validation {

using Point = std::vector<double>;

// Nelder-Mead simplex (Nelder & Mead 1965) with the standard coefficients: reflection 1,
// expansion 2, contraction 0.5, shrink 0.5. The start simplex is `start` plus `step` along
// each axis. Stops when the simplex's worst and best values agree to `relative_tolerance`
// (relative to 1 + |best|) or after `max_evals` evaluations counted in `evals` (which the
// caller may have started above 0). Returns the best vertex.
Point nelder_mead(const std::function<double(const Point&)>& f, Point start, double step, int max_evals, int& evals,
                  double relative_tolerance = 1e-10);

}  // namespace preflight::validation
