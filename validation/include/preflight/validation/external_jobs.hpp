// One row per measured job of an external data set: its layout, what was measured and what
// the cross-validation predicted for it while its fold was held out. `validate --check`
// writes it beside the markdown reports so residuals can be studied job by job
// (tools/predictability_ceiling.py reads it).
#pragma once

#include <string>
#include <vector>

#include "preflight/validation/external_memory.hpp"
#include "preflight/validation/external_runs.hpp"
#include "preflight/validation/throughput_fit.hpp"

namespace preflight::validation {

// CSV with a header row. Columns: id, model, hidden_size, num_layers, nodes, gpus, dp, tp, pp, mbs, grad_acc,
// zero_stage, outcome; memory_fold, measured_reserved_bytes, predicted_reserved_bytes (the
// measured rank), predicted_device_need_bytes (the most loaded stage + memory outside
// PyTorch), predicted_fits; tokens_fold, measured_tokens_per_s_per_gpu,
// predicted_tokens_per_s_per_gpu. A field is empty where nothing was measured or the job
// was not modelled. `memory` (null for a data set fitted on tokens/s only) must hold one
// prediction per run (memory_cross_validation).
std::string external_jobs_csv(const std::vector<ExternalRun>& runs, const MemoryCrossValidation* memory,
                              const ThroughputCv& tokens);

}  // namespace preflight::validation
