// Private to the validation library: what calibrate.cpp takes from calibrate_gemm.cpp (GEMMs
// timed one by one with `preflight run --op-times`).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "preflight/validation/calibrate.hpp"

namespace preflight::validation {

// measured.op_times.gemms of a run report (none when it has no op times); an entry that is not
// what the runtime writes is an InputError naming its key.
std::vector<GemmSample> gemm_samples(const nlohmann::json& measured);

nlohmann::json gemm_curves_json(const std::vector<GemmCurveFit>& fits);
// calibrate's lines on the GEMM curve (or why there are none).
std::string gemm_curves_text(const CalibrationResult& r);

}  // namespace preflight::validation
