// Measured training jobs that no one here ran (data/measurements/external/): each CSV
// row becomes a planner model + plan with its outcome and measured figures, so the
// memory and step-time models can be checked and calibrated against real runs.
//
// A data set is a folder with a `dataset.json` manifest:
//   { "name": str, "csv": "file.csv", "framework": "nanotron", "gpu": "h100-sxm-80gb",
//     "source": str, "schema": "nanotron-sweep" | "published-runs" (default nanotron-sweep),
//     "evaluation_only": bool (default false),
//     "targets": { ... error figures the check gates on ... } }
// and the CSV it names, one job per row with a header line (columns in the folder's README).
//
// Two CSV schemas:
//  - nanotron-sweep: the model shape in columns (llama family), one GPU for the whole set;
//  - published-runs: rows transcribed from a framework's published benchmark tables; the
//    model is a catalog config (column model_config, data/models/), the GPU a catalog name per
//    row (column gpu), and any field the source leaves unstated is an empty cell (unknown).
//    Rows the planner cannot express (a recompute policy it has no mode for, an unstated
//    interleaving depth) are kept with the reason in `not_modelled`. Optional columns (0/1;
//    absent or empty = 0): loss_compiled, the loss ran under torch.compile as well;
//    tp_comm_overlap, Megatron's TP collectives ran pipelined with their GEMMs (TransformerEngine
//    userbuffers); p2p_overlap, the interleaved pipeline's sends ran beside compute.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "preflight/planner/allocator_model.hpp"
#include "preflight/planner/model.hpp"
#include "preflight/planner/plan.hpp"

namespace preflight::validation {

// How the job ended. `failed_other` (hang, NCCL or scheduler failure) says nothing
// about memory; `ok_metrics_but_oom_in_log` logged its metrics (so the step ran) but
// an out-of-memory message appeared in its log afterwards.
enum class RunOutcome { ok, oom, failed_other, ok_metrics_but_oom_in_log };
std::string_view to_string(RunOutcome o);
std::optional<RunOutcome> parse_outcome(std::string_view s);

struct ExternalRun {
    std::string file;             // CSV file name (no folder), for messages
    std::int64_t line = 0;        // 1-based line in the CSV (the header is line 1)
    std::string id;               // "<file>:<line>"
    std::string model_label;      // the data set's model name ("1B", "8B", ...)
    double reported_params_b = 0; // the data set's own rounded parameter count, in billions
    ModelConfig model;            // llama-shaped config built from the row's shape columns
    Plan plan;                    // seq, mbs, grad_acc, dp, tp, pp, sp, zero, recompute, precision
    std::int64_t nodes = 0;
    std::int64_t gpus = 0;
    std::int64_t gpus_per_node = 0;  // gpus / nodes
    RunOutcome outcome = RunOutcome::ok;
    bool oom_in_log = false;
    // torch.cuda.max_memory_reserved() at the measured step (GiB in the CSV -> bytes).
    std::optional<std::int64_t> peak_reserved_bytes;
    // torch.cuda.max_memory_allocated() after a reset that followed forward/backward: covers
    // only gradient sync, clipping and the optimizer step (NOT the step's allocated peak).
    std::optional<std::int64_t> peak_allocated_after_backward_bytes;
    std::optional<double> tokens_per_s_per_gpu;
    std::optional<double> tokens_per_s;
    std::optional<double> mfu;    // the data set's own MFU, as a fraction
    // Whether the job's loop waited for the GPU every micro-batch (allocator_model.hpp), read off
    // its step time by annotate_host_pace (external_memory.hpp); runs_ahead until then.
    HostPace host_pace = HostPace::runs_ahead;
    // The measured step time beyond the planner's prediction without any stall, per micro-batch
    // (seconds; set by annotate_host_pace for ok jobs with a measured tokens/s).
    std::optional<double> stall_per_micro_batch_s;

    // published-runs schema only.
    std::string source_ref;       // where in the source the row stands ("file.md:27")
    std::string gpu;              // GPU catalog name of this row (empty: the data set's)
    std::string recompute_source; // the source's own words for the recompute policy
    std::string precision_source; // the source's own precision name
    bool compiled = false;        // torch.compile on (not modelled by the planner, but for the loss)
    // The run's cross-entropy was compiled too (optional column loss_compiled; MemoryOptions::compiled_loss).
    bool loss_compiled = false;
    // Megatron's communication overlaps (optional columns; ThroughputOptions::tp_comm_overlap, p2p_overlap).
    bool tp_comm_overlap = false;
    bool p2p_overlap = false;
    std::optional<double> hfu;    // the source's own HFU, as a fraction
    std::optional<std::int64_t> reported_params;  // the source's exact parameter count
    std::string not_modelled;     // why the planner cannot express the row (empty: it can)

    // Model shape + layout + batch + ZeRO stage: rows repeating one configuration share it.
    std::string configuration_key() const;
    // Grouping key for cross-validation, "<model>/tp<tp>/pp<pp>": jobs that differ only in
    // micro-batch, accumulation, data parallelism or ZeRO stage share it, so a fold never
    // holds a look-alike of a held-out job.
    std::string family_key() const;
    // Jobs whose outcome is a memory verdict: ok (fits) or oom (does not).
    bool has_memory_verdict() const { return outcome == RunOutcome::ok || outcome == RunOutcome::oom; }
};

struct ExternalDataset {
    std::filesystem::path folder;
    std::string name;
    std::string framework;        // planner framework profile name (profiles.hpp)
    std::string gpu;              // GPU catalog name
    std::string source;           // provenance sentence
    std::string schema = "nanotron-sweep";  // CSV schema (see the top of this file)
    // Checked with the GPU specs' committed constants only: no constant is fitted on it
    // (a data set held out as a whole, or too small to fit).
    bool evaluation_only = false;
    nlohmann::json targets;       // the figures the check gates on (see external_check.hpp)
    std::vector<ExternalRun> runs;
};

// Parses one CSV (the nanotron sweep's columns). Throws InputError naming the file, the
// line and the column for a missing column, a malformed number, an unknown outcome or an
// inconsistent row (gpus != dp*tp*pp, gpus not a multiple of nodes, global batch tokens
// != seq*mbs*grad_acc*dp, a model shape the planner rejects).
std::vector<ExternalRun> read_external_csv(const std::filesystem::path& csv);

// Parses a published-runs CSV; model configs come from `data_dir`/models. Throws InputError
// naming the file, the line and the column for a missing column, a malformed number, an
// unknown model config, GPU, precision or recompute mode, an inconsistent row (gpus !=
// dp*tp*pp*cp, global batch tokens != seq*mbs*grad_acc*dp), or a stated parameter count
// the model config does not reproduce.
std::vector<ExternalRun> read_published_runs_csv(const std::filesystem::path& csv,
                                                 const std::filesystem::path& data_dir);

// Reads `folder`/dataset.json and the CSV it names (model configs and GPU names of the
// published-runs schema resolved in `data_dir`). "csv" is a file in the folder or in a sibling
// data set's folder ("../<folder>/<file>"); "rows": {"gpu": [...]} keeps only the rows on those
// GPUs and "exclude_rows": {"gpu": [...]} drops them, so one table can feed a fitted data set
// and an evaluation-only one without a row in both. Throws InputError naming the file.
ExternalDataset read_external_dataset(const std::filesystem::path& folder);
ExternalDataset read_external_dataset(const std::filesystem::path& folder, const std::filesystem::path& data_dir);

// Every data set folder (one holding dataset.json) under `dir`, recursively, sorted by
// path. Empty when there is none.
std::vector<std::filesystem::path> find_external_datasets(const std::filesystem::path& dir);

// FNV-1a(key), bit-mixed, mod k (0 for k <= 1).
int family_fold(const std::string& key, int k);
// Deterministic fold of a run for k-fold cross-validation grouped by model/tp/pp family:
// family_fold(family_key(), k), the folds of the tokens/s cross-validation too.
int fold_of(const ExternalRun& run, int k);

}  // namespace preflight::validation
