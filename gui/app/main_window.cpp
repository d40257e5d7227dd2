#include "main_window.hpp"

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
#include <QLabel>
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
#include "preflight/planner/plan_schema.hpp"
#include "preflight/planner/report.hpp"
#include "units.hpp"

namespace preflight::gui {

namespace {

QString sv(std::string_view s) { return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size())); }

// A combo box of a plan field's names (plan_schema.hpp); each item's data is its position,
// which is the enum's value (the table lists every enum's names in declaration order).
void fillChoices(QComboBox* box, std::string_view key) {
    const auto& choices = plan_field(key)->choices;
    for (std::size_t i = 0; i < choices.size(); ++i)
        box->addItem(QString::fromStdString(choices[i]), static_cast<int>(i));
}

// A combo box of the ZeRO stages the plan field allows ("ZeRO-0" ... "ZeRO-3"), data = the stage.
void fillStages(QComboBox* box, std::string_view key) {
    const PlanField* f = plan_field(key);
    for (auto z = f->min; z <= f->max; ++z) box->addItem(QStringLiteral("ZeRO-%1").arg(z), static_cast<int>(z));
}

QSpinBox* spin(const char* name, int lo, int hi, int value, int step = 1) {
    auto* s = new QSpinBox;
    s->setObjectName(QString::fromLatin1(name));
    s->setRange(lo, hi);
    s->setSingleStep(step);
    s->setValue(value);
    s->setGroupSeparatorShown(true);
    s->setKeyboardTracking(false);  // typing "4096" evaluates once, not for 4, 40, 409
    return s;
}

// Rows of the details table for the extensions in use: adapters and frozen base under
// LoRA/QLoRA, host memory when offloading, the pipeline bubble, cp/ep layouts.
QString extensionRows(const Evaluation& ev) {
    const Plan& p = ev.plan;
    const MemoryReport& r = ev.memory;
    QString rows;
    auto row = [&](const QString& name, const QString& value, const QString& note) {
        rows += QStringLiteral("<tr><td>%1</td><td align='right'><b>%2</b></td><td>%3</td></tr>")
                    .arg(name, value, note.toHtmlEscaped());
    };
    if (p.finetune != Finetune::full) {
        const FrozenBase base = frozen_base(ev.model, p);
        row(QStringLiteral("Trainable adapters"), groupDigits(lora_params(ev.model, p.lora)),
            QStringLiteral("rank %1 on %2 (fp32 weights, gradients, optimizer states)")
                .arg(p.lora.rank)
                .arg(QString::fromStdString(lora_targets_to_string(p.lora.targets))));
        row(QStringLiteral("Frozen base (whole model)"), formatBytes(base.total_bytes()),
            p.finetune == Finetune::qlora ? QStringLiteral("NF4 %1 + other parameters %2")
                                                .arg(formatBytes(base.quantized_bytes), formatBytes(base.other_bytes))
                                          : QStringLiteral("16-bit"));
    }
    if (p.offload != Offload::none)
        row(QStringLiteral("Host memory (offload)"), formatBytes(r.host_bytes_per_gpu),
            QStringLiteral("per GPU; %1 per node").arg(formatBytes(r.host_bytes_per_node)));
    if (p.pp > 1)
        row(QStringLiteral("Pipeline bubble"), QStringLiteral("%1 %").arg(100.0 * pipeline_bubble_fraction(p), 0, 'f', 1),
            QStringLiteral("%1 schedule").arg(sv(to_string(p.pp_schedule))));
    if (p.cp > 1) row(QStringLiteral("Context parallel"), QString::number(p.cp), QStringLiteral("ranks per sequence"));
    if (p.ep > 1) row(QStringLiteral("Expert parallel"), QString::number(p.ep), QStringLiteral("expert shards"));
    return rows;
}

QTableView* table(const char* name, QAbstractItemModel* model) {
    auto* v = new QTableView;
    v->setObjectName(QString::fromLatin1(name));
    v->setModel(model);
    v->setAlternatingRowColors(true);
    v->setSelectionBehavior(QAbstractItemView::SelectRows);
    v->setEditTriggers(QAbstractItemView::NoEditTriggers);
    v->verticalHeader()->setVisible(false);
    v->verticalHeader()->setDefaultSectionSize(22);
    v->horizontalHeader()->setHighlightSections(false);
    return v;
}

bool write_text(const QString& path, const std::string& text) {
    std::ofstream out(path.toStdString());
    out << text;
    return static_cast<bool>(out);
}

QLabel* value_label(const char* name, bool big = false) {
    auto* l = new QLabel;
    l->setObjectName(QString::fromLatin1(name));
    l->setTextInteractionFlags(Qt::TextSelectableByMouse);
    if (big) {
        QFont f = l->font();
        f.setPointSizeF(f.pointSizeF() * 1.45);
        f.setBold(true);
        l->setFont(f);
    }
    return l;
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

QWidget* MainWindow::buildControls() {
    auto* panel = new QWidget;
    auto* v = new QVBoxLayout(panel);
    v->setContentsMargins(6, 6, 6, 6);

    auto* what = new QGroupBox(QStringLiteral("Model and hardware"));
    auto* f1 = new QFormLayout(what);
    model_ = new QComboBox;
    model_->setObjectName(QStringLiteral("model"));
    for (const auto& m : explorer_->catalogModels()) model_->addItem(m, m);
    auto* open_model = new QPushButton(QStringLiteral("Open…"));
    open_model->setToolTip(QStringLiteral("Open a Hugging Face config.json"));
    auto* mrow = new QHBoxLayout;
    mrow->addWidget(model_, 1);
    mrow->addWidget(open_model);
    f1->addRow(QStringLiteral("Model"), mrow);
    gpu_ = new QComboBox;
    gpu_->setObjectName(QStringLiteral("gpu"));
    for (const auto& g : explorer_->catalogGpus()) gpu_->addItem(g, g);
    auto* open_gpu = new QPushButton(QStringLiteral("Open…"));
    open_gpu->setToolTip(QStringLiteral("Open a GPU spec JSON (data/gpus format)"));
    auto* grow = new QHBoxLayout;
    grow->addWidget(gpu_, 1);
    grow->addWidget(open_gpu);
    f1->addRow(QStringLiteral("GPU"), grow);
    gpu_count_ = spin("gpuCount", 1, 1 << 20, 1);
    gpu_count_->setToolTip(QStringLiteral("GPUs in the job = dp × tp × pp (changing it rescales dp)"));
    f1->addRow(QStringLiteral("GPU count"), gpu_count_);
    v->addWidget(what);

    auto* batch = new QGroupBox(QStringLiteral("Batch"));
    auto* f2 = new QFormLayout(batch);
    seq_ = spin("seq", 1, 1 << 22, 4096, 256);
    seq_->setSuffix(QStringLiteral(" tokens"));
    mbs_ = spin("mbs", 1, 4096, 1);
    grad_acc_ = spin("gradAcc", 1, 1 << 16, 1);
    f2->addRow(QStringLiteral("Sequence length"), seq_);
    f2->addRow(QStringLiteral("Micro-batch size"), mbs_);
    f2->addRow(QStringLiteral("Grad. accumulation"), grad_acc_);
    gbs_label_ = value_label("globalBatch");
    f2->addRow(QStringLiteral("Global batch"), gbs_label_);
    v->addWidget(batch);

    auto* par = new QGroupBox(QStringLiteral("Parallelism"));
    auto* f3 = new QFormLayout(par);
    dp_ = spin("dp", 1, 1 << 20, 1);
    tp_ = spin("tp", 1, 1024, 1);
    pp_ = spin("pp", 1, 1024, 1);
    sp_ = new QCheckBox(QStringLiteral("sequence parallel"));
    sp_->setObjectName(QStringLiteral("sp"));
    zero_ = new QComboBox;
    zero_->setObjectName(QStringLiteral("zero"));
    fillStages(zero_, "zero");
    f3->addRow(QStringLiteral("Data parallel (dp)"), dp_);
    f3->addRow(QStringLiteral("Tensor parallel (tp)"), tp_);
    f3->addRow(QStringLiteral("Pipeline parallel (pp)"), pp_);
    f3->addRow(QString(), sp_);
    f3->addRow(QStringLiteral("ZeRO stage"), zero_);
    v->addWidget(par);

    auto* recipe = new QGroupBox(QStringLiteral("Recipe"));
    auto* f4 = new QFormLayout(recipe);
    recompute_ = new QComboBox;
    recompute_->setObjectName(QStringLiteral("recompute"));
    fillChoices(recompute_, "recompute");
    precision_ = new QComboBox;
    precision_->setObjectName(QStringLiteral("precision"));
    fillChoices(precision_, "precision");
    optimizer_ = new QComboBox;
    optimizer_->setObjectName(QStringLiteral("optimizer"));
    fillChoices(optimizer_, "optimizer");
    attention_ = new QComboBox;
    attention_->setObjectName(QStringLiteral("attention"));
    fillChoices(attention_, "attention");
    dropout_ = new QDoubleSpinBox;
    dropout_->setObjectName(QStringLiteral("dropout"));
    dropout_->setRange(0.0, 0.99);
    dropout_->setSingleStep(0.05);
    dropout_->setDecimals(2);
    dropout_->setKeyboardTracking(false);
    {  // the CLI's defaults (docs/interface.md)
        const Plan defaults;
        recompute_->setCurrentIndex(recompute_->findData(static_cast<int>(defaults.recompute)));
        precision_->setCurrentIndex(precision_->findData(static_cast<int>(defaults.precision)));
        optimizer_->setCurrentIndex(optimizer_->findData(static_cast<int>(defaults.optimizer)));
        attention_->setCurrentIndex(attention_->findData(static_cast<int>(defaults.attention)));
        zero_->setCurrentIndex(zero_->findData(defaults.zero));
        dropout_->setValue(defaults.dropout);
    }
    f4->addRow(QStringLiteral("Recompute"), recompute_);
    f4->addRow(QStringLiteral("Precision"), precision_);
    f4->addRow(QStringLiteral("Optimizer"), optimizer_);
    f4->addRow(QStringLiteral("Attention"), attention_);
    f4->addRow(QStringLiteral("Dropout"), dropout_);
    v->addWidget(recipe);

    // Fine-tuning, offload, pipeline schedule, context / expert parallelism (plan_extensions.hpp).
    auto* ext = new QGroupBox(QStringLiteral("Fine-tuning, offload, schedules"));
    auto* f5 = new QFormLayout(ext);
    finetune_ = new QComboBox;
    finetune_->setObjectName(QStringLiteral("finetune"));
    fillChoices(finetune_, "finetune");
    finetune_->setToolTip(QStringLiteral("full: every weight trained · lora: frozen 16-bit base + adapters · qlora: "
                                         "frozen NF4 base (double-quantised constants) + adapters"));
    lora_rank_ = spin("loraRank", 1, 4096, static_cast<int>(LoraSettings{}.rank));
    lora_targets_ = new QComboBox;
    lora_targets_->setObjectName(QStringLiteral("loraTargets"));
    lora_targets_->addItem(QStringLiteral("q,v (PEFT default)"), kLoraPeftDefault);
    lora_targets_->addItem(QStringLiteral("attention (q,k,v,o)"), kLoraAttention);
    lora_targets_->addItem(QStringLiteral("all-linear"), kLoraAllLinear);
    offload_ = new QComboBox;
    offload_->setObjectName(QStringLiteral("offload"));
    fillChoices(offload_, "offload");
    offload_->setToolTip(QStringLiteral("optimizer: ZeRO-Offload (master weights, moments, fp32 gradients on the host) · "
                                        "params: ZeRO-Infinity, parameters too (ZeRO-3)"));
    pp_schedule_ = new QComboBox;
    pp_schedule_->setObjectName(QStringLiteral("ppSchedule"));
    fillChoices(pp_schedule_, "pp_schedule");
    vpp_ = spin("vpp", 1, 64, 1);
    vpp_->setToolTip(QStringLiteral("Model chunks per pipeline stage (interleaved schedule)"));
    cp_ = spin("cp", 1, 1024, 1);
    cp_->setToolTip(QStringLiteral("Context parallel: each sequence split over cp GPUs (ring attention); GPUs = dp × tp × pp × cp"));
    ep_ = spin("ep", 1, 1024, 1);
    ep_->setToolTip(QStringLiteral("Expert parallel (MoE): experts split over ep of the dp ranks"));
    f5->addRow(QStringLiteral("Fine-tuning"), finetune_);
    f5->addRow(QStringLiteral("LoRA rank"), lora_rank_);
    f5->addRow(QStringLiteral("LoRA targets"), lora_targets_);
    f5->addRow(QStringLiteral("Offload"), offload_);
    f5->addRow(QStringLiteral("Pipeline schedule"), pp_schedule_);
    f5->addRow(QStringLiteral("Chunks per stage (vpp)"), vpp_);
    f5->addRow(QStringLiteral("Context parallel (cp)"), cp_);
    f5->addRow(QStringLiteral("Expert parallel (ep)"), ep_);
    v->addWidget(ext);
    v->addStretch(1);

    for (QSpinBox* s : {seq_, mbs_, grad_acc_, lora_rank_, vpp_, ep_})
        connect(s, &QSpinBox::valueChanged, this, [this] { applyControls(); });
    connect(cp_, &QSpinBox::valueChanged, this, [this] { onLayoutChanged(); });
    for (QComboBox* c : {finetune_, lora_targets_, offload_, pp_schedule_})
        connect(c, &QComboBox::currentIndexChanged, this, [this] { applyControls(); });
    for (QSpinBox* s : {dp_, tp_, pp_}) connect(s, &QSpinBox::valueChanged, this, [this] { onLayoutChanged(); });
    connect(gpu_count_, &QSpinBox::valueChanged, this, [this] { onGpuCountChanged(); });
    connect(sp_, &QCheckBox::toggled, this, [this] { applyControls(); });
    for (QComboBox* c : {zero_, recompute_, precision_, optimizer_, attention_})
        connect(c, &QComboBox::currentIndexChanged, this, [this] { applyControls(); });
    connect(dropout_, &QDoubleSpinBox::valueChanged, this, [this] { applyControls(); });
    connect(model_, &QComboBox::currentIndexChanged, this, [this] { onModelChosen(); });
    connect(gpu_, &QComboBox::currentIndexChanged, this, [this] { onGpuChosen(); });
    connect(open_model, &QPushButton::clicked, this, [this] {
        const QString p = QFileDialog::getOpenFileName(this, QStringLiteral("Open model config.json"), {},
                                                       QStringLiteral("JSON (*.json);;All files (*)"));
        if (!p.isEmpty()) selectModel(p);
    });
    connect(open_gpu, &QPushButton::clicked, this, [this] {
        const QString p = QFileDialog::getOpenFileName(this, QStringLiteral("Open GPU spec"), {},
                                                       QStringLiteral("JSON (*.json);;All files (*)"));
        if (!p.isEmpty()) selectGpu(p);
    });

    auto* scroll = new QScrollArea;
    scroll->setWidget(panel);
    scroll->setWidgetResizable(true);
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    scroll->setMinimumWidth(330);
    scroll->setFrameShape(QFrame::NoFrame);
    return scroll;
}

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
        "throughput; the recommendation is highlighted. Double-click a row to load it into the controls."));
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
        explorer_->startSearch(gpu_count_->value(), search_gbs_->value());
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
    gbs_label_->setText(QStringLiteral("%1 tokens").arg(groupDigits(p.global_batch_tokens())));
    explorer_->setPlan(p);
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

void MainWindow::loadPlan(const Plan& p0) {
    Plan p = p0;
    if (p.seq == 0)
        if (auto m = explorer_->inputModel()) p = resolve_defaults(p, *m);
    syncing_ = true;
    seq_->setValue(static_cast<int>(p.seq));
    mbs_->setValue(static_cast<int>(p.mbs));
    grad_acc_->setValue(static_cast<int>(p.grad_acc));
    dp_->setValue(static_cast<int>(p.dp));
    tp_->setValue(static_cast<int>(p.tp));
    pp_->setValue(static_cast<int>(p.pp));
    gpu_count_->setValue(static_cast<int>(p.gpus()));
    sp_->setChecked(p.sp);
    zero_->setCurrentIndex(zero_->findData(p.zero));
    recompute_->setCurrentIndex(recompute_->findData(static_cast<int>(p.recompute)));
    precision_->setCurrentIndex(precision_->findData(static_cast<int>(p.precision)));
    optimizer_->setCurrentIndex(optimizer_->findData(static_cast<int>(p.optimizer)));
    attention_->setCurrentIndex(attention_->findData(static_cast<int>(p.attention)));
    dropout_->setValue(p.dropout);
    finetune_->setCurrentIndex(finetune_->findData(static_cast<int>(p.finetune)));
    lora_rank_->setValue(static_cast<int>(p.lora.rank));
    if (const int i = lora_targets_->findData(p.lora.targets); i >= 0) lora_targets_->setCurrentIndex(i);
    offload_->setCurrentIndex(offload_->findData(static_cast<int>(p.offload)));
    pp_schedule_->setCurrentIndex(pp_schedule_->findData(static_cast<int>(p.pp_schedule)));
    vpp_->setValue(static_cast<int>(p.vpp));
    cp_->setValue(static_cast<int>(p.cp));
    ep_->setValue(static_cast<int>(p.ep));
    syncing_ = false;
    applyControls();
}

// ------------------------------------------------------------------ results

void MainWindow::onEvaluated() {
    const Evaluation* ev = explorer_->current();
    if (!ev) return;
    const MemoryReport& r = ev->memory;
    const double frac = r.capacity_bytes > 0 ? static_cast<double>(r.peak_bytes) / static_cast<double>(r.capacity_bytes) : 0;
    peak_label_->setText(QStringLiteral("Peak %1 of %2 (%3 %)")
                             .arg(formatBytes(r.peak_bytes), formatBytes(r.capacity_bytes))
                             .arg(100.0 * frac, 0, 'f', 1));
    const double headroom_line = (1.0 - Explorer::kHeadroom) * static_cast<double>(r.capacity_bytes);
    if (!r.fits) {
        verdict_label_->setText(QStringLiteral("OOM — over by %1").arg(formatBytes(r.peak_bytes - r.capacity_bytes)));
        verdict_label_->setStyleSheet(QStringLiteral("color: #c01c28;"));
    } else if (static_cast<double>(r.peak_bytes) > headroom_line) {
        verdict_label_->setText(QStringLiteral("Fits, inside the %1 % headroom — %2 free")
                                    .arg(100.0 * Explorer::kHeadroom, 0, 'f', 0)
                                    .arg(formatBytes(r.capacity_bytes - r.peak_bytes)));
        verdict_label_->setStyleSheet(QStringLiteral("color: #b36b00;"));
    } else {
        verdict_label_->setText(QStringLiteral("Fits — %1 free").arg(formatBytes(r.capacity_bytes - r.peak_bytes)));
        verdict_label_->setStyleSheet(QStringLiteral("color: #1a7f37;"));
    }
    const QString phase = QString::fromStdString(describe(r.peak_phase));
    phase_label_->setText(QStringLiteral("Peak phase: <b>%1</b>").arg(phase.toHtmlEscaped()) +
                          (ev->plan.pp > 1 ? QStringLiteral(" (stage %1, %2 layers, %3 micro-batches in flight)")
                                                 .arg(r.pipeline_stage)
                                                 .arg(r.layers_on_stage)
                                                 .arg(r.micro_batches_in_flight)
                                           : QString()));
    first_label_->setText(QStringLiteral("First step: %1 (optimizer moments not yet allocated)")
                              .arg(formatBytes(r.first_step_peak_bytes)));
    first_label_->setToolTip(QStringLiteral("First-step peak at %1")
                                 .arg(QString::fromStdString(describe(r.first_step_peak_phase))));
    model_label_->setText(QStringLiteral("%1 · %2 params%3 · %4, %5 per GPU · %6")
                              .arg(QString::fromStdString(ev->model.name), formatCount(r.params.total),
                                   r.params.active != r.params.total
                                       ? QStringLiteral(" (%1 active)").arg(formatCount(r.params.active))
                                       : QString(),
                                   QString::fromStdString(ev->gpu.display_name.empty() ? ev->gpu.name : ev->gpu.display_name),
                                   formatBytes(ev->gpu.memory_bytes),
                                   ev->plan.gpus() == 1 ? QStringLiteral("1 GPU")
                                                        : QStringLiteral("%1 GPUs").arg(ev->plan.gpus())));
    details_label_->setText(
        QStringLiteral("<table cellspacing='0' cellpadding='2'>"
                       "<tr><td>Parameters</td><td align='right'><b>%1</b></td><td>(%2 exactly%3)</td></tr>"
                       "<tr><td>Owned by this GPU before ZeRO</td><td align='right'><b>%4</b></td><td></td></tr>"
                       "<tr><td>Activations per layer</td><td align='right'><b>%5</b></td><td>one micro-batch, recompute %6</td></tr>"
                       "<tr><td>Layers on the peak stage</td><td align='right'><b>%7</b></td><td>stage %8 of %9</td></tr>")
            .arg(formatCount(r.params.total), groupDigits(r.params.total),
                 r.params.active != r.params.total ? QStringLiteral(", %1 active").arg(formatCount(r.params.active)) : QString(),
                 formatCount(r.params_on_gpu), formatBytes(r.activations_per_layer_bytes), sv(to_string(ev->plan.recompute)),
                 QString::number(r.layers_on_stage), QString::number(r.pipeline_stage), QString::number(ev->plan.pp)) +
        QStringLiteral("<tr><td>Micro-batches in flight</td><td align='right'><b>%1</b></td><td>%2</td></tr>"
                       "<tr><td>First-step peak</td><td align='right'><b>%3</b></td><td>%4</td></tr>"
                       "<tr><td>Headroom line</td><td align='right'><b>%5</b></td><td>%6 % of capacity, what the plan search keeps under</td></tr>"
                       "<tr><td>Global batch</td><td align='right'><b>%7</b></td><td>tokens = seq × mbs × grad_acc × dp</td></tr>%8</table>")
            .arg(QString::number(r.micro_batches_in_flight),
                 ev->plan.pp > 1 ? QStringLiteral("pipeline schedule") : QStringLiteral("no pipeline"),
                 formatBytes(r.first_step_peak_bytes),
                 QStringLiteral("at %1, before the optimizer moments exist").arg(QString::fromStdString(describe(r.first_step_peak_phase))),
                 formatBytes(static_cast<std::int64_t>((1.0 - Explorer::kHeadroom) * static_cast<double>(r.capacity_bytes))),
                 QString::number(100.0 * (1.0 - Explorer::kHeadroom), 'f', 0), groupDigits(ev->plan.global_batch_tokens()),
                 extensionRows(*ev)));
    if (ev->has_throughput) {
        const Throughput& t = ev->throughput;
        throughput_label_->setText(QStringLiteral("Step %1 · %2 tokens/s · MFU %3 % · HFU %4 %")
                                       .arg(formatSeconds(t.step_time_s))
                                       .arg(groupDigits(static_cast<std::int64_t>(t.tokens_per_s)))
                                       .arg(100.0 * t.mfu, 0, 'f', 1)
                                       .arg(100.0 * t.hfu, 0, 'f', 1));
        QStringList slices;
        for (const auto& s : t.breakdown)
            slices << QStringLiteral("%1 %2").arg(QString::fromStdString(s.name), formatSeconds(s.seconds));
        timeline_note_->setText(QStringLiteral("Predicted step time %1 (%2). Activations per layer: %3.")
                                    .arg(formatSeconds(t.step_time_s), slices.join(QStringLiteral(", ")),
                                         formatBytes(r.activations_per_layer_bytes)));
    } else
    {
        throughput_label_->setText(QStringLiteral("Throughput: n/a (%1)").arg(ev->throughput_note));
        timeline_note_->setText(QStringLiteral("Activations per layer: %1 (one micro-batch, recompute %2).")
                                    .arg(formatBytes(r.activations_per_layer_bytes), sv(to_string(ev->plan.recompute))));
    }
    breakdown_chart_->setSubtitle(phase);

    const auto& report = explorer_->runReport();
    if (report) {
        QString text = QStringLiteral("<b>Run report</b> %1").arg(QFileInfo(report->path).fileName().toHtmlEscaped());
        if (report->measured && report->measured->peak_bytes)
            text += QStringLiteral(": measured peak %1 vs predicted %2 (%3)")
                        .arg(formatBytes(*report->measured->peak_bytes), formatBytes(r.peak_bytes),
                             formatBytesDelta(*report->measured->peak_bytes - r.peak_bytes));
        if (report->predicted && report->predicted->peak_bytes && *report->predicted->peak_bytes != r.peak_bytes)
            text += QStringLiteral("; the report's own prediction was %1").arg(formatBytes(*report->predicted->peak_bytes));
        if (!report->notes.isEmpty())
            text += QStringLiteral("<br><span style='color:#666'>Missing or skipped: %1</span>")
                        .arg(report->notes.join(QStringLiteral("; ")).toHtmlEscaped());
        overlay_label_->setText(text);
    } else {
        overlay_label_->setText(QStringLiteral(
            "<span style='color:#666'>File → Open run report… overlays measured memory on the bar and timeline.</span>"));
    }
    statusBar()->showMessage(QStringLiteral("Evaluated in %1 ms (memory model + %2 sweep points × 3 recompute modes)")
                                 .arg(ev->eval_ms, 0, 'f', 2)
                                 .arg(ev->seq_sweep.xs.size() + ev->mbs_sweep.xs.size()));
}

void MainWindow::onError(const QString& msg) {
    const QString shown = msg.isEmpty() ? notice_ : msg;
    if (shown.isEmpty()) {
        error_banner_->hide();
        error_banner_->clear();
        return;
    }
    error_banner_->setText(QStringLiteral("<b>Not applied:</b> %1 — showing the last valid result.").arg(shown.toHtmlEscaped()));
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
