// The what-if explorer's main window: controls on the left, a summary strip and
// four views (memory breakdown, seq/mbs sweeps, step timeline, plan search) on
// the right. Every control change re-evaluates synchronously through Explorer;
// planner errors show in a banner while the last valid result stays on screen.
#pragma once

#include <optional>

#include <QMainWindow>
#include <QStringList>

#include "preflight/planner/plan.hpp"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QGroupBox;
class QLabel;
class QPushButton;
class QSortFilterProxyModel;
class QSpinBox;
class QTabWidget;
class QTableView;
class QWidget;

namespace preflight {
struct MemoryReport;
struct FrameworkProfile;
}

namespace preflight::gui {

class Explorer;
struct Evaluation;
class BreakdownChart;
class SweepChart;
class TimelineChart;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    enum Tab { BreakdownTab, SweepTab, TimelineTab, SearchTab };

    explicit MainWindow(Explorer* explorer, QWidget* parent = nullptr);

    // Select a model / GPU by catalog name or file path (adds paths to the combo).
    bool selectModel(const QString& spec);
    bool selectGpu(const QString& spec);
    // Select the framework profile (--framework); false with the banner for an unknown name.
    bool selectFramework(const QString& name);
    // Puts a plan into the controls and evaluates it once. A count beyond its control's bound
    // that the planner refuses leaves the controls as they were: the plan is not loaded, the note
    // says why with the plan's own values, and that reason is returned (empty when loaded).
    QString loadPlan(const Plan& plan);
    bool openRunReport(const QString& path);
    // A torchtitan TOML, Megatron-LM script, DeepSpeed JSON or nanotron YAML into the controls
    // (model, plan; the GPU count feeds torchtitan's -1 degrees); false with a notice on bad input.
    // scriptWords: a launch script's $1 ... as `bash run.sh WORDS` gives them (the CLI's --from-arg);
    // unset, a value read from them is refused, and the notice names the menu entry that gives them.
    bool importConfig(const QString& path, const std::optional<QStringList>& scriptWords = std::nullopt);  // main_window_import.cpp
    // File → Import launch script with its arguments…: the words typed as after the script's name.
    bool importScriptWithWords(const QString& path, const QString& line);
    void clearRunReport();

    bool exportChartPng(const QString& path);
    bool exportPlanJson(const QString& path);
    bool exportMemoryJson(const QString& path);

    QTabWidget* tabs() const { return tabs_; }
    QString errorText() const;
    // A message in the window's banner ("Note: ..."), until the next change of the inputs.
    void showNotice(const QString& msg);

private:
    QWidget* buildControls();  // main_window_controls.cpp
    QGroupBox* buildModelGroup();
    QGroupBox* buildBatchGroup();
    QGroupBox* buildParallelGroup();
    QGroupBox* buildRecipeGroup();
    QGroupBox* buildExtensionGroup();
    void connectControls();
    QWidget* buildSummary();
    QWidget* buildBreakdownTab();
    QWidget* buildSweepTab();
    QWidget* buildTimelineTab();
    QWidget* buildSearchTab();
    void buildMenus();

    Plan planFromControls() const;
    void applyControls();
    void onGpuCountChanged();
    void onLayoutChanged();
    void onModelChosen();
    void onGpuChosen();
    void onEvaluated();  // main_window_results.cpp
    void showHeadline(const MemoryReport& r, const FrameworkProfile& profile);
    void showVerdict(const MemoryReport& r);
    void showSummaryLines(const Evaluation& ev);
    void showDetails(const Evaluation& ev);
    void showThroughput(const Evaluation& ev);
    void showRunReportOverlay(const MemoryReport& r);
    void onError(const QString& msg);
    void onSearchFinished(const QString& error);
    void onCandidateActivated(const QModelIndex& index);

    Explorer* explorer_;
    bool syncing_ = false;
    QString notice_;

    QComboBox* model_ = nullptr;
    QComboBox* gpu_ = nullptr;
    QSpinBox* gpu_count_ = nullptr;
    QComboBox* framework_ = nullptr;  // --framework
    QSpinBox* seq_ = nullptr;
    QSpinBox* mbs_ = nullptr;
    QSpinBox* grad_acc_ = nullptr;
    QSpinBox* dp_ = nullptr;
    QSpinBox* tp_ = nullptr;
    QSpinBox* pp_ = nullptr;
    QCheckBox* sp_ = nullptr;
    QComboBox* zero_ = nullptr;
    QComboBox* recompute_ = nullptr;
    QComboBox* precision_ = nullptr;
    QComboBox* fp8_scaling_ = nullptr;  // enabled under fp8-mixed only
    QComboBox* optimizer_ = nullptr;
    QComboBox* attention_ = nullptr;
    // Fine-tuning, offload, pipeline schedule, context / expert parallelism.
    QComboBox* finetune_ = nullptr;
    QSpinBox* lora_rank_ = nullptr;
    QComboBox* lora_targets_ = nullptr;
    QComboBox* offload_ = nullptr;
    QComboBox* pp_schedule_ = nullptr;
    QSpinBox* vpp_ = nullptr;
    QSpinBox* cp_ = nullptr;
    QSpinBox* ep_ = nullptr;
    QDoubleSpinBox* dropout_ = nullptr;
    QLabel* gbs_label_ = nullptr;

    QLabel* error_banner_ = nullptr;
    QLabel* peak_label_ = nullptr;
    QLabel* verdict_label_ = nullptr;
    QLabel* phase_label_ = nullptr;
    QLabel* first_label_ = nullptr;
    QLabel* model_label_ = nullptr;
    QLabel* throughput_label_ = nullptr;
    QLabel* overlay_label_ = nullptr;
    QLabel* details_label_ = nullptr;
    QLabel* timeline_note_ = nullptr;

    QTabWidget* tabs_ = nullptr;
    BreakdownChart* breakdown_chart_ = nullptr;
    SweepChart* seq_chart_ = nullptr;
    SweepChart* mbs_chart_ = nullptr;
    TimelineChart* timeline_chart_ = nullptr;
    QWidget* sweep_charts_ = nullptr;
    QTableView* candidates_view_ = nullptr;
    QSortFilterProxyModel* candidates_proxy_ = nullptr;
    QWidget* search_page_ = nullptr;
    QSpinBox* search_gbs_ = nullptr;
    QPushButton* search_button_ = nullptr;
    QLabel* search_status_ = nullptr;
    QLabel* search_suggestions_ = nullptr;
};

}  // namespace preflight::gui
