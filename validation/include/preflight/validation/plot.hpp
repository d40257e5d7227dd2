// SVG plots drawn by hand (no plotting library): predicted vs measured scatter for the
// peak and the step time, and a histogram of the signed relative errors.
#pragma once

#include <string>

#include "preflight/validation/check.hpp"

namespace preflight::validation {

std::string residual_plot_svg(const CheckResult& result);

}  // namespace preflight::validation
