// Internal to the step-time model (throughput.cpp): the parameters a pipeline stage holds, which
// set its optimizer step's memory traffic and its data-parallel reduction.
#pragma once

#include <cstdint>
#include <vector>

#include "preflight/planner/model.hpp"
#include "preflight/planner/plan.hpp"
#include "preflight/planner/throughput.hpp"

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

// Layers on the first, last and most loaded middle stage.
struct StageLayers {
    std::int64_t first = 0, last = 0, middle_max = 0;
    bool custom = false;
    std::vector<std::int64_t> split;  // every stage's layers when custom
};

// Extra layers go to the first stages (as memory.cpp assigns them), unless the caller passes a
// framework's own split (ThroughputOptions::stage_layers) or the plan gives Megatron-LM's uneven
// one (pipeline_uneven.cpp); the first stage holds the embedding, the last the head.
StageLayers stage_layers(const ModelConfig& model, const Plan& p, const ThroughputOptions& opt);

// The stage holding the most TP-local parameters, which sets the optimizer step and the
// data-parallel reduction: the first, the last or, under a custom split, a middle one.
struct BusiestStage {
    double params = 0;
    std::int64_t layers = 0;
};
BusiestStage busiest_stage(const StageParams& sp, const StageLayers& layers, const Plan& p);

}  // namespace preflight::throughput_detail
