// Step-time calibration on measured external runs: fit a handful of bounded, physical
// constants of the step-time model (GEMM efficiency, attention efficiency, link
// efficiencies and latency, host dispatch, per-micro-batch synchronisation, per-step
// overhead) and judge them by k-fold cross-validation grouped by layout family, so no
// family is both fitted and scored.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "preflight/planner/gpu.hpp"
#include "preflight/planner/model.hpp"
#include "preflight/planner/plan.hpp"
#include "preflight/planner/throughput.hpp"
#include "preflight/validation/external_runs.hpp"
#include "preflight/validation/stats.hpp"

namespace preflight::validation {

// One measured job the step-time model is scored on.
struct ThroughputSample {
    std::string id;
    std::string family;  // cross-validation group: model / tp / pp
    ModelConfig model;
    Plan plan;
    ThroughputOptions options;  // the framework's stage split, no breakdown
    double measured_tokens_per_s_per_gpu = 0;
};

// Samples from the runs that finished with a measured tokens/s (outcome ok).
// `framework` "nanotron" applies nanotron's pipeline split (the output layer counts as
// vocab*h in the stage cost); anything else keeps the planner's split.
// Runs the planner refuses as a plan are left out and listed in `refused` ("id: reason").
std::vector<ThroughputSample> throughput_samples(const std::vector<ExternalRun>& runs, const std::string& framework,
                                                std::vector<std::string>* refused = nullptr);

// nanotron's split of `layers` decoder layers (+ the output layer last) over `pp` stages:
// each block costs 4*h*h + 3*f*h (a decoder layer) or V*h (the output layer), and block
// i goes to stage floor(pp * cost before i / total cost) (nanotron
// models/llama.py get_block_compute_costs, trainer.py init_model's cost-based split).
std::vector<std::int64_t> nanotron_stage_layers(const ModelConfig& model, std::int64_t pp);

double predicted_tokens_per_s_per_gpu(const ThroughputSample& s, const GpuSpec& gpu);
// |predicted - measured| / measured tokens/s per GPU for every sample in `idx` (all when empty).
std::vector<double> tokens_errors(const std::vector<ThroughputSample>& samples, const std::vector<std::size_t>& idx,
                                  const GpuSpec& gpu);

// A fitted constant: its Efficiency field and bounds (the fit moves it in log space
// inside [lo, hi]).
struct StepConstant {
    const char* name;
    double Efficiency::*field;
    double lo, hi;
    int stage;  // 1: fitted on jobs of one or two nodes; 2: then on every job
    // Fitted only when the training jobs run more than one sequence length: at one length
    // the attention time is a fixed share of the GEMM time and the two cannot be told apart.
    bool needs_several_seq = false;
};
std::span<const StepConstant> fitted_step_constants();

// Minimises the mean Huber loss of log(predicted / measured) tokens/s over `train`, plus a
// weak prior that holds each constant near the spec's (where the fit starts), from the
// spec's constants, in two stages (see StepConstant::stage), each by coordinate
// descent then Nelder-Mead (Nelder & Mead 1965).
Efficiency fit_step_constants(const std::vector<ThroughputSample>& samples, const std::vector<std::size_t>& train,
                              const GpuSpec& gpu, int* evaluations = nullptr);

// One sample's held-out prediction: the constants were fitted on the other folds.
struct HeldOutTokens {
    std::string id;
    int fold = 0;  // family_fold(family, folds)
    double measured_tokens_per_s_per_gpu = 0;
    double predicted_tokens_per_s_per_gpu = 0;
};

struct ThroughputCv {
    int folds = 0;
    int families = 0;
    ErrorStats before;               // every sample, the built-in uncalibrated defaults (no fit)
    ErrorStats committed;            // every sample, the spec's own constants (in sample if fitted on them)
    ErrorStats held_out;             // every sample scored by the fit that did not see its family
    std::vector<ErrorStats> fold_held_out;
    std::vector<Efficiency> fold_fits;
    std::vector<HeldOutTokens> per_sample;  // every sample whose fold had training jobs, fold by fold
    Efficiency full_fit;             // fitted on every sample (the constants to commit)
    ErrorStats full_fit_in_sample;
    int evaluations = 0;
};
// Every fit starts from the built-in defaults (Efficiency{}), never from constants already
// fitted on these runs; `before` scores those defaults.
ThroughputCv cross_validate_throughput(const std::vector<ThroughputSample>& samples, const GpuSpec& gpu, int folds);

// The tokens/s side of `validate --check` on one external data set: the cross-validation,
// a markdown table, and the targets it misses (dataset.json "targets":
// tokens_per_s_per_gpu_error_p50_max, tokens_per_s_per_gpu_error_p95_max, folds).
struct ThroughputGate {
    ThroughputCv cv;
    std::vector<std::string> refused;  // runs the planner refuses as plans ("id: reason")
    nlohmann::json summary;
    std::string markdown;
    std::vector<std::string> failures;
};
ThroughputGate throughput_gate(const ExternalDataset& dataset, const GpuSpec& gpu);
std::string throughput_cv_markdown(const ThroughputCv& cv);

nlohmann::json throughput_cv_to_json(const ThroughputCv& cv);

}  // namespace preflight::validation
