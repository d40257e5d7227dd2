// The explorer's controller: holds the user's inputs (model, GPU, plan, GPU count),
// evaluates them with the planner on every change, keeps the last valid result
// and reports the planner's error message when a change is invalid. It owns the
// item models the views read. No formula lives here: every number comes from
// preflight::evaluate_memory / estimate_throughput / search_plans.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include <QObject>
#include <QString>
#include <QStringList>
#include <nlohmann/json.hpp>

#include "preflight/planner/gpu.hpp"
#include "preflight/planner/memory.hpp"
#include "preflight/planner/model.hpp"
#include "preflight/planner/plan.hpp"
#include "preflight/planner/throughput.hpp"
#include "preflight/planner/search.hpp"
#include "run_report.hpp"

class QThread;

namespace preflight::gui {

class BreakdownModel;
class SweepModel;
class TimelineModel;
class CandidatesModel;
class RejectedModel;

// The memory a fit is judged on against one plan field, for none / selective / full recompute:
// the figure `preflight memory` weighs against the capacity (fit_bytes: the peak, or under a
// profile that models the caching allocator the device need at the top of its range) and the
// verdict it gives for each point.
struct Sweep {
    QString axis;                      // "seq" or "mbs"
    bool device_need = false;          // the profile judges the device need (verdict_on_reserved)
    std::vector<std::int64_t> xs;
    // peaks[recompute][i]: fit_bytes of the point; nullopt where the planner rejects the plan.
    std::array<std::vector<std::optional<std::int64_t>>, 3> peaks;
    // verdicts[recompute][i]: memory_verdict of the point (fits | may-not-fit | does-not-fit),
    // empty where the planner rejects the plan.
    std::array<std::vector<std::string_view>, 3> verdicts;
    std::int64_t current_x = 0;
};

// Everything the views show for one valid input combination.
struct Evaluation {
    ModelConfig model;
    GpuSpec gpu;  // as the framework profile sees it (gpu_for_profile), as `preflight memory` does
    FrameworkProfile profile;  // --framework
    Plan plan;  // resolved (seq filled)
    MemoryReport memory;
    Sweep seq_sweep;
    Sweep mbs_sweep;
    bool has_throughput = false;
    Throughput throughput;
    QString throughput_note;  // why there is no throughput figure
    double eval_ms = 0;       // wall time of the whole evaluation
};

class Explorer : public QObject {
    Q_OBJECT
public:
    explicit Explorer(std::filesystem::path data_dir, QObject* parent = nullptr);
    ~Explorer() override;

    QStringList catalogModels() const;
    QStringList catalogGpus() const;
    const std::filesystem::path& dataDir() const { return data_dir_; }

    // Each setter re-evaluates. On invalid input it records the planner's message
    // (errorMessage()), keeps the last valid evaluation and returns false.
    bool setModel(const QString& spec);  // catalog name or path to a config.json
    bool setGpu(const QString& spec);    // catalog name or path to a GPU spec JSON
    bool setPlan(const Plan& plan);      // seq 0 = the model's default
    bool setAll(const QString& model_spec, const QString& gpu_spec, const Plan& plan);
    // Why the planner refuses `plan` with the current model, GPU and framework, its fields named
    // by their plan-file keys as `preflight memory --plan` names them ("seq: 100000000000 exceeds
    // ..."); empty when it takes it. Changes nothing (no evaluation is kept, no error recorded).
    QString planRefusal(const Plan& plan) const;
    // --framework: whose memory and step time are modelled (megatron by default); an unknown
    // name is refused (false, errorMessage()) and the last one kept.
    bool setFramework(const QString& name);
    QString framework() const { return framework_; }
    static QStringList frameworks();  // the names --framework takes, megatron first
    // An imported ds_config's bucket settings, as `--from` hands them to the deepspeed profile
    // (FrameworkProfile::deepspeed_zero); nullopt: the profile's defaults. Taken at the next evaluation.
    void setDeepSpeedBuckets(std::optional<DeepSpeedZeroSettings> buckets) { deepspeed_zero_ = buckets; }
    std::optional<DeepSpeedZeroSettings> deepSpeedBuckets() const { return deepspeed_zero_; }

    // The inputs as last set (may be invalid); the current model's default seq.
    const Plan& inputPlan() const { return plan_; }
    QString modelSpec() const { return model_spec_; }
    QString gpuSpec() const { return gpu_spec_; }
    std::optional<ModelConfig> inputModel() const { return model_; }

    // Last valid evaluation (null before the first one succeeds).
    const Evaluation* current() const { return current_.get(); }
    QString errorMessage() const { return error_; }
    bool hasError() const { return !error_.isEmpty(); }
    static constexpr double kHeadroom = 0.05;  // the plan search's default headroom

    // Exports of the last valid evaluation, byte-identical in content to the CLI.
    nlohmann::json planJson() const;        // preflight plan --emit preflight (plan_to_json)
    nlohmann::json memoryDocument() const;  // preflight memory --format json

    // Measured overlay.
    bool openRunReport(const QString& path);  // false + errorMessage() on failure
    void setRunReport(std::optional<RunReport> report);
    const std::optional<RunReport>& runReport() const { return report_; }

    // Plan search (runs on a worker thread; searchFinished() when done). False, and nothing
    // started, while a search runs or before any plan has been evaluated (the search starts
    // from its recipe).
    bool startSearch(std::int64_t gpus, std::int64_t gbs_tokens);
    bool searchRunning() const { return search_thread_ != nullptr; }
    QStringList searchSuggestions() const { return search_suggestions_; }
    QString searchSummary() const { return search_summary_; }
    // The plan of candidate `row` (model order), for loading into the controls.
    std::optional<Plan> candidatePlan(int row) const;

    BreakdownModel* breakdownModel() const { return breakdown_; }
    SweepModel* seqSweepModel() const { return seq_sweep_; }
    SweepModel* mbsSweepModel() const { return mbs_sweep_; }
    TimelineModel* timelineModel() const { return timeline_; }
    CandidatesModel* candidatesModel() const { return candidates_; }
    RejectedModel* rejectedModel() const { return rejected_; }

signals:
    void evaluated();                      // a new valid evaluation is current
    void errorChanged(const QString& msg); // empty when the inputs are valid again
    void runReportChanged();
    void searchStarted();
    void searchFinished(const QString& error);  // empty on success
    // The rows of the last search were cleared: the model, GPU or framework changed since, so a
    // candidate would load a plan searched for another set-up (searchSummary() says so).
    void searchCleared();

private:
    bool evaluate();
    // The memory report of `plan` under the current inputs, into `ev`; throws the planner's error.
    void evaluateMemory(Evaluation& ev, const Plan& plan) const;
    QString setUpKey() const;  // model | GPU | framework of the current evaluation
    void setError(const QString& msg);
    void pushToModels();

    std::filesystem::path data_dir_;
    QString model_spec_, gpu_spec_;
    std::optional<ModelConfig> model_;
    std::optional<GpuSpec> gpu_;
    Plan plan_;
    QString framework_ = QStringLiteral("megatron");
    std::optional<DeepSpeedZeroSettings> deepspeed_zero_;
    std::unique_ptr<Evaluation> current_;
    QString error_;
    std::optional<RunReport> report_;

    QThread* search_thread_ = nullptr;
    QString searched_for_;  // "model | GPU | framework" of the rows shown; empty when none
    QStringList search_suggestions_;
    QString search_summary_;

    BreakdownModel* breakdown_;
    SweepModel* seq_sweep_;
    SweepModel* mbs_sweep_;
    TimelineModel* timeline_;
    CandidatesModel* candidates_;
    RejectedModel* rejected_;
};

}  // namespace preflight::gui
