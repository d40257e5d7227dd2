// Small statistics helpers for the validation summary.
#pragma once

#include <vector>

namespace preflight::validation {

// Percentile q in [0, 1] with linear interpolation between closest ranks
// (Hyndman & Fan 1996, definition 7; numpy's default): rank = q * (n - 1).
// Returns 0 for an empty sample.
double percentile(std::vector<double> values, double q);

}  // namespace preflight::validation
