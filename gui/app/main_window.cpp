#include "main_window.hpp"

#include <algorithm>
#include <fstream>

#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QFrame>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QTableView>
#include <QToolBar>
#include <QVBoxLayout>

#include "charts.hpp"
#include "explorer.hpp"
#include "item_models.hpp"
#include "preflight/planner/extensions.hpp"
#include "preflight/planner/report.hpp"
#include "units.hpp"
#include "widgets.hpp"

namespace preflight::gui {

namespace {

bool write_text(const QString& path, const std::string& text) {
    std::ofstream out(path.toStdString());
    out << text;
    return static_cast<bool>(out);
}

}  // namespace

MainWindow::MainWindow(Explorer* explorer, QWidget* parent) : QMainWindow(parent), explorer_(explorer) {
    setWindowTitle(QStringLiteral("Preflight — what-if explorer"));

    auto* right = new QWidget;
    auto* rl = new QVBoxLayout(right);
    rl->setContentsMargins(4, 4, 4, 4);
    error_banner_ = new QLabel;
    error_banner_->setObjectName(QStringLiteral("errorBanner"));
    error_banner_->setWordWrap(true);
    error_banner_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    error_banner_->setStyleSheet(QStringLiteral(
        "QLabel { background: #fde2e1; color: #8a1010; border: 1px solid #e0a0a0; border-radius: 4px; padding: 6px; }"));
    error_banner_->hide();
    rl->addWidget(error_banner_);
    rl->addWidget(buildSummary());
    tabs_ = new QTabWidget;
    tabs_->setObjectName(QStringLiteral("views"));
    tabs_->addTab(buildBreakdownTab(), QStringLiteral("Memory breakdown"));
    tabs_->addTab(buildSweepTab(), QStringLiteral("Memory vs seq / mbs"));
    tabs_->addTab(buildTimelineTab(), QStringLiteral("Step timeline"));
    tabs_->addTab(buildSearchTab(), QStringLiteral("Plan search"));
    rl->addWidget(tabs_, 1);

    auto* split = new QSplitter(Qt::Horizontal);
    split->addWidget(buildControls());
    split->addWidget(right);
    split->setStretchFactor(1, 1);
    split->setChildrenCollapsible(false);
    setCentralWidget(split);
    buildMenus();

    connect(explorer_, &Explorer::evaluated, this, &MainWindow::onEvaluated);
    connect(explorer_, &Explorer::errorChanged, this, &MainWindow::onError);
    connect(explorer_, &Explorer::searchFinished, this, &MainWindow::onSearchFinished);
    connect(explorer_, &Explorer::searchCleared, this, [this] { onSearchFinished({}); });

    // First evaluation: the default model and GPU of the CLI.
    const QStringList models = explorer_->catalogModels();
    const QStringList gpus = explorer_->catalogGpus();
    syncing_ = true;
    if (const int i = model_->findData(QStringLiteral("llama-3-8b")); i >= 0) model_->setCurrentIndex(i);
    if (const int i = gpu_->findData(QStringLiteral("h100-sxm-80gb")); i >= 0) gpu_->setCurrentIndex(i);
    syncing_ = false;
    if (model_->count() > 0 && gpu_->count() > 0) {
        explorer_->setAll(model_->currentData().toString(), gpu_->currentData().toString(), planFromControls());
        if (auto m = explorer_->inputModel()) {
            syncing_ = true;
            seq_->setValue(static_cast<int>(resolve_defaults(Plan{}, *m).seq));
            syncing_ = false;
        }
        applyControls();
    } else {
        onError(QStringLiteral("no catalog found under %1 (set PREFLIGHT_DATA_DIR)")
                    .arg(QString::fromStdString(explorer_->dataDir().string())));
    }
    resize(1600, 980);
}

// ------------------------------------------------------------------ building

QWidget* MainWindow::buildSummary() {
    auto* box = new QFrame;
    box->setObjectName(QStringLiteral("summary"));
    box->setFrameShape(QFrame::StyledPanel);
    auto* g = new QGridLayout(box);
    g->setContentsMargins(10, 6, 10, 6);
    g->setHorizontalSpacing(24);
    peak_label_ = value_label("peakLabel", true);
    verdict_label_ = value_label("verdictLabel", true);
    phase_label_ = value_label("phaseLabel");
    first_label_ = value_label("firstStepLabel");
    model_label_ = value_label("modelLabel");
    throughput_label_ = value_label("throughputLabel");
    g->addWidget(peak_label_, 0, 0);
    g->addWidget(verdict_label_, 0, 1);
    g->addWidget(model_label_, 0, 2);
    g->addWidget(phase_label_, 1, 0);
    g->addWidget(first_label_, 1, 1);
    g->addWidget(throughput_label_, 1, 2);
    g->setColumnStretch(2, 1);
    return box;
}

QWidget* MainWindow::buildBreakdownTab() {
    auto* page = new QSplitter(Qt::Horizontal);
    breakdown_chart_ = new BreakdownChart(explorer_->breakdownModel(), Explorer::kHeadroom);
    breakdown_chart_->setObjectName(QStringLiteral("breakdownChart"));
    breakdown_chart_->setMinimumWidth(420);
    auto* side = new QWidget;
    auto* v = new QVBoxLayout(side);
    v->setContentsMargins(0, 0, 0, 0);
    auto* t = table("breakdownTable", explorer_->breakdownModel());
    t->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    t->setSizeAdjustPolicy(QAbstractScrollArea::AdjustToContents);
    t->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    v->addWidget(t);
    details_label_ = new QLabel;
    details_label_->setObjectName(QStringLiteral("detailsLabel"));
    details_label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    v->addWidget(details_label_);
    v->addStretch(1);
    overlay_label_ = new QLabel;
    overlay_label_->setObjectName(QStringLiteral("overlayLabel"));
    overlay_label_->setWordWrap(true);
    overlay_label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    v->addWidget(overlay_label_);
    page->addWidget(breakdown_chart_);
    page->addWidget(side);
    page->setStretchFactor(0, 1);
    page->setStretchFactor(1, 1);
    page->setSizes({640, 600});
    return page;
}

QWidget* MainWindow::buildSweepTab() {
    auto* page = new QSplitter(Qt::Vertical);
    sweep_charts_ = new QWidget;
    auto* h = new QHBoxLayout(sweep_charts_);
    h->setContentsMargins(0, 0, 0, 0);
    seq_chart_ = new SweepChart(explorer_->seqSweepModel(), Explorer::kHeadroom);
    seq_chart_->setObjectName(QStringLiteral("seqChart"));
    seq_chart_->setMinimumHeight(380);
    mbs_chart_ = new SweepChart(explorer_->mbsSweepModel(), Explorer::kHeadroom);
    mbs_chart_->setObjectName(QStringLiteral("mbsChart"));
    h->addWidget(seq_chart_);
    h->addWidget(mbs_chart_);
    auto* tables = new QWidget;
    auto* th = new QHBoxLayout(tables);
    th->setContentsMargins(0, 0, 0, 0);
    for (auto [name, m] : {std::pair{"seqSweepTable", explorer_->seqSweepModel()},
                           std::pair{"mbsSweepTable", explorer_->mbsSweepModel()}}) {
        auto* t = table(name, m);
        t->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
        th->addWidget(t);
    }
    page->addWidget(sweep_charts_);
    page->addWidget(tables);
    page->setStretchFactor(0, 3);
    page->setStretchFactor(1, 1);
    return page;
}

QWidget* MainWindow::buildTimelineTab() {
    auto* page = new QSplitter(Qt::Vertical);
    timeline_chart_ = new TimelineChart(explorer_->timelineModel());
    timeline_chart_->setObjectName(QStringLiteral("timelineChart"));
    timeline_chart_->setMinimumHeight(400);
    auto* bottom = new QWidget;
    auto* v = new QVBoxLayout(bottom);
    v->setContentsMargins(0, 0, 0, 0);
    timeline_note_ = new QLabel;
    timeline_note_->setObjectName(QStringLiteral("timelineNote"));
    timeline_note_->setWordWrap(true);
    v->addWidget(timeline_note_);
    auto* t = table("timelineTable", explorer_->timelineModel());
    t->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    t->horizontalHeader()->setStretchLastSection(true);
    v->addWidget(t, 1);
    page->addWidget(timeline_chart_);
    page->addWidget(bottom);
    page->setStretchFactor(0, 3);
    page->setStretchFactor(1, 2);
    return page;
}

QWidget* MainWindow::buildSearchTab() {
    search_page_ = new QWidget;
    auto* v = new QVBoxLayout(search_page_);
    auto* row = new QHBoxLayout;
    row->addWidget(new QLabel(QStringLiteral("Global batch")));
    search_gbs_ = spin("gbsTokens", 1, 2147483647, 1 << 20, 1 << 16);
    search_gbs_->setSuffix(QStringLiteral(" tokens"));
    row->addWidget(search_gbs_);
    search_button_ = new QPushButton(QStringLiteral("Search plans for the GPU count"));
    search_button_->setObjectName(QStringLiteral("searchButton"));
    row->addWidget(search_button_);
    search_status_ = new QLabel;
    search_status_->setObjectName(QStringLiteral("searchStatus"));
    row->addWidget(search_status_, 1);
    v->addLayout(row);
    auto* hint = new QLabel(QStringLiteral(
        "Searches dp × tp × pp = GPU count, mbs, grad_acc, ZeRO and recompute with the recipe (precision, optimizer, "
        "attention, dropout) and seq pinned as set on the left. Keeps plans under the headroom line, ranked by "
        "throughput less up to 1 % for memory (near-ties go to more headroom), as preflight plan ranks them; the "
        "recommendation is highlighted. Double-click a row to load it into the controls."));
    hint->setWordWrap(true);
    v->addWidget(hint);

    candidates_proxy_ = new QSortFilterProxyModel(this);
    candidates_proxy_->setSourceModel(explorer_->candidatesModel());
    candidates_proxy_->setSortRole(ValueRole);
    candidates_view_ = table("candidatesTable", candidates_proxy_);
    candidates_view_->setSortingEnabled(true);
    candidates_view_->sortByColumn(CandidatesModel::Rank, Qt::AscendingOrder);
    candidates_view_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    candidates_view_->horizontalHeader()->setStretchLastSection(true);
    connect(candidates_view_, &QTableView::doubleClicked, this, &MainWindow::onCandidateActivated);
    search_suggestions_ = new QLabel;
    search_suggestions_->setWordWrap(true);
    search_suggestions_->setObjectName(QStringLiteral("searchSuggestions"));
    auto* rejected = table("rejectedTable", explorer_->rejectedModel());
    rejected->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    rejected->horizontalHeader()->setStretchLastSection(true);
    auto* split = new QSplitter(Qt::Vertical);
    split->addWidget(candidates_view_);
    auto* lower = new QWidget;
    auto* lv = new QVBoxLayout(lower);
    lv->setContentsMargins(0, 0, 0, 0);
    lv->addWidget(search_suggestions_);
    lv->addWidget(rejected, 1);
    split->addWidget(lower);
    split->setStretchFactor(0, 3);
    split->setStretchFactor(1, 2);
    v->addWidget(split, 1);

    connect(search_button_, &QPushButton::clicked, this, [this] {
        search_button_->setEnabled(false);
        search_status_->setText(QStringLiteral("Searching…"));
        // Was: with no valid plan yet the search did not start and the button stayed disabled.
        if (!explorer_->startSearch(gpu_count_->value(), search_gbs_->value())) {
            search_button_->setEnabled(true);
            search_status_->setText(QStringLiteral("Not searched: no valid plan yet to take the recipe from"));
        }
    });
    return search_page_;
}

void MainWindow::buildMenus() {
    QMenu* file = menuBar()->addMenu(QStringLiteral("&File"));
    auto add = [this, file](const QString& text, auto fn, QKeySequence key = {}) {
        QAction* a = file->addAction(text);
        if (!key.isEmpty()) a->setShortcut(key);
        connect(a, &QAction::triggered, this, fn);
        return a;
    };
    add(QStringLiteral("Open model config.json…"), [this] {
        const QString p = QFileDialog::getOpenFileName(this, QStringLiteral("Open model config.json"), {},
                                                       QStringLiteral("JSON (*.json);;All files (*)"));
        if (!p.isEmpty()) selectModel(p);
    });
    add(QStringLiteral("Open GPU spec…"), [this] {
        const QString p = QFileDialog::getOpenFileName(this, QStringLiteral("Open GPU spec"), {},
                                                       QStringLiteral("JSON (*.json);;All files (*)"));
        if (!p.isEmpty()) selectGpu(p);
    });
    add(QStringLiteral("Import config (torchtitan, Megatron-LM, DeepSpeed, nanotron)…"), [this] {
        const QString p = QFileDialog::getOpenFileName(
            this, QStringLiteral("Import training config"), {},
            QStringLiteral("Configs (*.toml *.sh *.txt *.json *.yaml *.yml);;All files (*)"));
        if (!p.isEmpty()) importConfig(p);
    });
    add(QStringLiteral("Import launch script with its arguments…"), [this] {
        const QString p = QFileDialog::getOpenFileName(this, QStringLiteral("Import Megatron-LM launch script"), {},
                                                       QStringLiteral("Shell scripts (*.sh);;All files (*)"));
        if (p.isEmpty()) return;
        bool ok = false;
        const QString line = QInputDialog::getText(
            this, QStringLiteral("Launch script arguments"),
            QStringLiteral("The words after the script's name, as in `bash %1 WORDS` ($1, $2 ..., \"$@\"):")
                .arg(QFileInfo(p).fileName()),
            QLineEdit::Normal, {}, &ok);
        if (ok) importScriptWithWords(p, line);
    });
    add(QStringLiteral("Open run report (measured overlay)…"), [this] {
        const QString p = QFileDialog::getOpenFileName(this, QStringLiteral("Open run report"), {},
                                                       QStringLiteral("JSON (*.json);;All files (*)"));
        if (!p.isEmpty()) openRunReport(p);
    }, QKeySequence::Open);
    add(QStringLiteral("Clear run report"), [this] { clearRunReport(); });
    file->addSeparator();
    add(QStringLiteral("Export current chart as PNG…"), [this] {
        const QString p = QFileDialog::getSaveFileName(this, QStringLiteral("Export chart"), QStringLiteral("preflight-chart.png"),
                                                       QStringLiteral("PNG (*.png)"));
        if (!p.isEmpty()) exportChartPng(p);
    });
    add(QStringLiteral("Export plan JSON…"), [this] {
        const QString p = QFileDialog::getSaveFileName(this, QStringLiteral("Export plan"), QStringLiteral("plan.json"),
                                                       QStringLiteral("JSON (*.json)"));
        if (!p.isEmpty()) exportPlanJson(p);
    });
    add(QStringLiteral("Export memory report JSON…"), [this] {
        const QString p = QFileDialog::getSaveFileName(this, QStringLiteral("Export memory report"),
                                                       QStringLiteral("memory.json"), QStringLiteral("JSON (*.json)"));
        if (!p.isEmpty()) exportMemoryJson(p);
    }, QKeySequence::Save);
    file->addSeparator();
    add(QStringLiteral("Quit"), [this] { close(); }, QKeySequence::Quit);
}

// ------------------------------------------------------------------ controls

Plan MainWindow::planFromControls() const {
    Plan p;
    p.seq = seq_->value();
    p.mbs = mbs_->value();
    p.grad_acc = grad_acc_->value();
    p.dp = dp_->value();
    p.tp = tp_->value();
    p.pp = pp_->value();
    p.sp = sp_->isChecked();
    p.zero = static_cast<ZeroStage>(zero_->currentData().toInt());
    p.recompute = static_cast<Recompute>(recompute_->currentData().toInt());
    p.precision = static_cast<Precision>(precision_->currentData().toInt());
    // The scaling applies to fp8-mixed only (validate_plan refuses it elsewhere).
    p.fp8_scaling = p.precision == Precision::fp8_mixed ? static_cast<Fp8Scaling>(fp8_scaling_->currentData().toInt())
                                                        : Fp8Scaling::tensorwise;
    p.optimizer = static_cast<Optimizer>(optimizer_->currentData().toInt());
    p.attention = static_cast<AttentionKind>(attention_->currentData().toInt());
    p.dropout = dropout_->value();
    p.finetune = static_cast<Finetune>(finetune_->currentData().toInt());
    p.lora.rank = lora_rank_->value();
    p.lora.targets = lora_targets_->currentData().toUInt();
    p.offload = static_cast<Offload>(offload_->currentData().toInt());
    p.pp_schedule = static_cast<PpSchedule>(pp_schedule_->currentData().toInt());
    p.vpp = vpp_->value();
    p.cp = cp_->value();
    p.ep = ep_->value();
    return p;
}

void MainWindow::applyControls() {
    if (syncing_) return;
    notice_.clear();
    const Plan p = planFromControls();
    fp8_scaling_->setEnabled(p.precision == Precision::fp8_mixed);
    explorer_->setPlan(p);  // the global batch shown is the evaluated plan's (onEvaluated, onError)
    if (!explorer_->hasError()) onError({});
}

void MainWindow::onLayoutChanged() {
    if (syncing_) return;
    syncing_ = true;
    gpu_count_->setValue(dp_->value() * tp_->value() * pp_->value() * cp_->value());
    syncing_ = false;
    applyControls();
}

void MainWindow::onGpuCountChanged() {
    if (syncing_) return;
    const int n = gpu_count_->value();
    const int tp_pp = tp_->value() * pp_->value() * cp_->value();
    if (n % tp_pp != 0) {
        showNotice(QStringLiteral("GPU count: %1 is not a multiple of tp × pp × cp = %2; dp unchanged").arg(n).arg(tp_pp));
        return;
    }
    syncing_ = true;
    dp_->setValue(n / tp_pp);
    syncing_ = false;
    applyControls();
}

void MainWindow::onModelChosen() {
    if (syncing_) return;
    const QString spec = model_->currentData().toString();
    explorer_->setModel(spec);
    if (explorer_->modelSpec() == spec) {
        // A new model: start from its default sequence length.
        if (auto m = explorer_->inputModel()) {
            syncing_ = true;
            seq_->setValue(static_cast<int>(resolve_defaults(Plan{}, *m).seq));
            syncing_ = false;
        }
        applyControls();
    }
}

void MainWindow::onGpuChosen() {
    if (syncing_) return;
    explorer_->setGpu(gpu_->currentData().toString());
}

bool MainWindow::selectModel(const QString& spec) {
    int i = model_->findData(spec);
    if (i < 0) {
        QFileInfo fi(spec);
        model_->addItem(fi.exists() ? fi.dir().dirName() + "/" + fi.fileName() : spec, spec);
        i = model_->count() - 1;
    }
    if (model_->currentIndex() == i) onModelChosen();
    else model_->setCurrentIndex(i);
    const bool ok = explorer_->modelSpec() == spec;
    if (!ok) {  // keep the combo on the model in use
        syncing_ = true;
        if (const int j = model_->findData(explorer_->modelSpec()); j >= 0) model_->setCurrentIndex(j);
        if (QFileInfo(spec).exists()) model_->removeItem(i);
        syncing_ = false;
    }
    return ok;
}

bool MainWindow::selectGpu(const QString& spec) {
    int i = gpu_->findData(spec);
    if (i < 0) {
        QFileInfo fi(spec);
        gpu_->addItem(fi.exists() ? fi.fileName() : spec, spec);
        i = gpu_->count() - 1;
    }
    if (gpu_->currentIndex() == i) onGpuChosen();
    else gpu_->setCurrentIndex(i);
    const bool ok = explorer_->gpuSpec() == spec;
    if (!ok) {
        syncing_ = true;
        if (const int j = gpu_->findData(explorer_->gpuSpec()); j >= 0) gpu_->setCurrentIndex(j);
        if (QFileInfo(spec).exists()) gpu_->removeItem(i);
        syncing_ = false;
    }
    return ok;
}

// ------------------------------------------------------------------ results

void MainWindow::onError(const QString& msg) {
    const QString shown = msg.isEmpty() ? notice_ : msg;
    if (shown.isEmpty()) {
        error_banner_->hide();
        error_banner_->clear();
        return;
    }
    // An evaluation error leaves the last valid result on screen; a notice is information. The
    // global batch beside that result stays its own: a refused plan's is not shown.
    const Evaluation* ev = explorer_->current();
    if (!msg.isEmpty() && (!ev || ev->plan.global_batch_tokens() != planFromControls().global_batch_tokens()))
        gbs_label_->setText(QStringLiteral("— (plan not applied)"));
    error_banner_->setText(msg.isEmpty() ? QStringLiteral("<b>Note:</b> %1").arg(shown.toHtmlEscaped())
                                         : QStringLiteral("<b>Not applied:</b> %1 — showing the last valid result.")
                                               .arg(shown.toHtmlEscaped()));
    error_banner_->show();
}

void MainWindow::showNotice(const QString& msg) {
    notice_ = msg;
    onError(explorer_->errorMessage());
}

QString MainWindow::errorText() const { return error_banner_->isVisible() || !error_banner_->isHidden() ? error_banner_->text() : QString(); }

void MainWindow::onSearchFinished(const QString& error) {
    search_button_->setEnabled(true);
    search_status_->setText(explorer_->searchSummary());
    if (!error.isEmpty()) search_status_->setText(QStringLiteral("Search failed: ") + error);
    const QStringList s = explorer_->searchSuggestions();
    search_suggestions_->setText(s.isEmpty() ? QString()
                                             : QStringLiteral("<b>Nothing fits.</b> Smallest changes that would: ") +
                                                   s.join(QStringLiteral("; ")).toHtmlEscaped());
    candidates_view_->sortByColumn(CandidatesModel::Rank, Qt::AscendingOrder);
}

void MainWindow::onCandidateActivated(const QModelIndex& index) {
    const QModelIndex src = candidates_proxy_->mapToSource(index);
    if (!src.isValid()) return;
    const auto& rows = explorer_->candidatesModel()->rows();
    if (src.row() < 0 || src.row() >= static_cast<int>(rows.size())) return;
    loadPlan(rows[static_cast<std::size_t>(src.row())].plan);
    tabs_->setCurrentIndex(BreakdownTab);
}

// ------------------------------------------------------------------ overlay and exports

bool MainWindow::openRunReport(const QString& path) {
    if (!explorer_->openRunReport(path)) return false;
    const auto& report = explorer_->runReport();
    // Compare against the same set-up: adopt the report's model, GPU and plan when given.
    if (report->model.size() && explorer_->catalogModels().contains(report->model)) selectModel(report->model);
    if (report->gpu.size() && explorer_->catalogGpus().contains(report->gpu)) selectGpu(report->gpu);
    if (report->plan) {
        try {
            loadPlan(plan_from_json(*report->plan, planFromControls()));
        } catch (const std::exception& e) {
            showNotice(QStringLiteral("run report plan ignored: ") + QString::fromUtf8(e.what()));
        }
    }
    onEvaluated();
    return true;
}

void MainWindow::clearRunReport() { explorer_->setRunReport(std::nullopt); }

bool MainWindow::exportChartPng(const QString& path) {
    QWidget* w = nullptr;
    switch (tabs_->currentIndex()) {
        case BreakdownTab: w = breakdown_chart_; break;
        case SweepTab: w = sweep_charts_; break;
        case TimelineTab: w = timeline_chart_; break;
        default: w = search_page_; break;
    }
    const bool ok = w->grab().save(path, "PNG");
    statusBar()->showMessage(ok ? QStringLiteral("Saved %1").arg(path) : QStringLiteral("Could not write %1").arg(path));
    if (!ok) showNotice(QStringLiteral("could not write %1").arg(path));
    return ok;
}

bool MainWindow::exportPlanJson(const QString& path) {
    if (!explorer_->current()) return false;
    const bool ok = write_text(path, explorer_->planJson().dump(2) + "\n");
    statusBar()->showMessage(ok ? QStringLiteral("Saved %1").arg(path) : QStringLiteral("Could not write %1").arg(path));
    if (!ok) showNotice(QStringLiteral("could not write %1").arg(path));
    return ok;
}

bool MainWindow::exportMemoryJson(const QString& path) {
    if (!explorer_->current()) return false;
    const bool ok = write_text(path, explorer_->memoryDocument().dump(2) + "\n");
    statusBar()->showMessage(ok ? QStringLiteral("Saved %1").arg(path) : QStringLiteral("Could not write %1").arg(path));
    if (!ok) showNotice(QStringLiteral("could not write %1").arg(path));
    return ok;
}

}  // namespace preflight::gui
