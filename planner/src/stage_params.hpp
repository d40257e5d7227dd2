// Internal to the step-time model (throughput.cpp): the parameters a pipeline stage holds, which
// set its optimizer step's memory traffic and its data-parallel reduction.
#pragma once

#include <cstdint>

#include "preflight/planner/model.hpp"
#include "preflight/planner/plan.hpp"

namespace preflight::throughput_detail {

struct StageParams {
    double first = 0, last = 0;  // TP-local parameters held by the first / last stage
    double per_layer = 0;        // TP-local parameters of one decoder layer
    double gemm_per_layer = 0;   // of which GEMM weights (ParamTensor::gemm_weight)
};

// TP-local parameters of the first stage (its layers and the embedding) and of the last (its
// layers, the final norm and the output layer; a tied word embedding too, as Megatron-LM keeps
// one there). At pp 1 both are the whole model's.
StageParams stage_params(const ModelConfig& m, const Plan& p, std::int64_t layers_first, std::int64_t layers_last);

}  // namespace preflight::throughput_detail
