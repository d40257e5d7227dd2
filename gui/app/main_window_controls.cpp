// The explorer's control panel: one group box per part of the plan, and the
// connections that re-evaluate on every change.
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QFrame>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QScrollArea>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QVBoxLayout>

#include "explorer.hpp"
#include "main_window.hpp"
#include "preflight/planner/plan_extensions.hpp"
#include "preflight/planner/profiles.hpp"
#include "widgets.hpp"

namespace preflight::gui {

QWidget* MainWindow::buildControls() {
    auto* panel = new QWidget;
    auto* v = new QVBoxLayout(panel);
    v->setContentsMargins(6, 6, 6, 6);
    v->addWidget(buildModelGroup());
    v->addWidget(buildBatchGroup());
    v->addWidget(buildParallelGroup());
    v->addWidget(buildRecipeGroup());
    v->addWidget(buildExtensionGroup());
    v->addStretch(1);
    connectControls();

    auto* scroll = new QScrollArea;
    scroll->setWidget(panel);
    scroll->setWidgetResizable(true);
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    scroll->setMinimumWidth(330);
    scroll->setFrameShape(QFrame::NoFrame);
    return scroll;
}


QGroupBox* MainWindow::buildModelGroup() {
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
    framework_ = new QComboBox;
    framework_->setObjectName(QStringLiteral("framework"));
    for (const QString& f : Explorer::frameworks()) framework_->addItem(f, f);
    framework_->setToolTip(QStringLiteral(
        "Whose memory and step time are modelled, as `preflight memory --framework`: megatron (default), nanotron "
        "(its caching-allocator pool: the verdict may read \"may not fit\" with the range the pool can take), "
        "torchtitan, deepspeed, preflight-runtime (the plans `preflight run` executes), pytorch"));
    f1->addRow(QStringLiteral("Framework"), framework_);
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
    return what;
}

QGroupBox* MainWindow::buildBatchGroup() {
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
    return batch;
}

QGroupBox* MainWindow::buildParallelGroup() {
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
    return par;
}

QGroupBox* MainWindow::buildRecipeGroup() {
    auto* recipe = new QGroupBox(QStringLiteral("Recipe"));
    auto* f4 = new QFormLayout(recipe);
    recompute_ = new QComboBox;
    recompute_->setObjectName(QStringLiteral("recompute"));
    fillChoices(recompute_, "recompute");
    precision_ = new QComboBox;
    precision_->setObjectName(QStringLiteral("precision"));
    fillChoices(precision_, "precision");
    fp8_scaling_ = new QComboBox;
    fp8_scaling_->setObjectName(QStringLiteral("fp8_scaling"));
    fillChoices(fp8_scaling_, "fp8_scaling");
    fp8_scaling_->setToolTip(QStringLiteral(
        "fp8-mixed only: tensorwise (one scale per tensor) or torchao's rowwise recipe (slower GEMMs and casts)"));
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
        fp8_scaling_->setCurrentIndex(fp8_scaling_->findData(static_cast<int>(defaults.fp8_scaling)));
        fp8_scaling_->setEnabled(defaults.precision == Precision::fp8_mixed);
        optimizer_->setCurrentIndex(optimizer_->findData(static_cast<int>(defaults.optimizer)));
        attention_->setCurrentIndex(attention_->findData(static_cast<int>(defaults.attention)));
        zero_->setCurrentIndex(zero_->findData(defaults.zero));
        dropout_->setValue(defaults.dropout);
    }
    f4->addRow(QStringLiteral("Recompute"), recompute_);
    f4->addRow(QStringLiteral("Precision"), precision_);
    f4->addRow(QStringLiteral("FP8 scaling"), fp8_scaling_);
    f4->addRow(QStringLiteral("Optimizer"), optimizer_);
    f4->addRow(QStringLiteral("Attention"), attention_);
    f4->addRow(QStringLiteral("Dropout"), dropout_);
    return recipe;
}

// Fine-tuning, offload, pipeline schedule, context / expert parallelism (plan_extensions.hpp).
QGroupBox* MainWindow::buildExtensionGroup() {
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
    cp_->setToolTip(QStringLiteral("Context parallel: each sequence split over cp GPUs (ring attention; the Preflight runtime all-gathers K/V); GPUs = dp × tp × pp × cp"));
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
    return ext;
}

void MainWindow::connectControls() {
    for (QSpinBox* s : {seq_, mbs_, grad_acc_, lora_rank_, vpp_, ep_})
        connect(s, &QSpinBox::valueChanged, this, [this] { applyControls(); });
    connect(cp_, &QSpinBox::valueChanged, this, [this] { onLayoutChanged(); });
    for (QComboBox* c : {finetune_, lora_targets_, offload_})
        connect(c, &QComboBox::currentIndexChanged, this, [this] { applyControls(); });
    connect(pp_schedule_, &QComboBox::currentIndexChanged, this, [this] {
        // Two chunks per stage by default for the interleaved schedule, as the CLI's
        // --pp-schedule interleaved (was: vpp stayed 1 and the plan was refused first).
        if (!syncing_ && static_cast<PpSchedule>(pp_schedule_->currentData().toInt()) == PpSchedule::interleaved &&
            vpp_->value() == 1) {
            const QSignalBlocker quiet(vpp_);
            vpp_->setValue(2);
        }
        applyControls();
    });
    for (QSpinBox* s : {dp_, tp_, pp_}) connect(s, &QSpinBox::valueChanged, this, [this] { onLayoutChanged(); });
    connect(gpu_count_, &QSpinBox::valueChanged, this, [this] { onGpuCountChanged(); });
    connect(sp_, &QCheckBox::toggled, this, [this] { applyControls(); });
    for (QComboBox* c : {zero_, recompute_, precision_, fp8_scaling_, optimizer_, attention_})
        connect(c, &QComboBox::currentIndexChanged, this, [this] { applyControls(); });
    connect(dropout_, &QDoubleSpinBox::valueChanged, this, [this] { applyControls(); });
    connect(model_, &QComboBox::currentIndexChanged, this, [this] { onModelChosen(); });
    connect(gpu_, &QComboBox::currentIndexChanged, this, [this] { onGpuChosen(); });
    connect(framework_, &QComboBox::currentIndexChanged, this, [this] {
        if (syncing_) return;
        const QString name = framework_->currentData().toString();
        // As the CLI's --framework without --precision: a framework that does not run the chosen
        // recipe (nanotron: no bf16-mixed) starts from its first one.
        if (const auto profile = profile_by_name(name.toStdString());
            profile && !runs_precision(*profile, static_cast<Precision>(precision_->currentData().toInt()))) {
            syncing_ = true;
            precision_->setCurrentIndex(precision_->findData(static_cast<int>(default_precision(*profile))));
            syncing_ = false;
            applyControls();
        }
        explorer_->setFramework(name);
        if (!explorer_->hasError()) onError({});
    });
}

bool MainWindow::selectFramework(const QString& name) {
    const int i = framework_->findData(name);
    if (i < 0) return explorer_->setFramework(name);  // refused: the explorer's message, in the banner
    framework_->setCurrentIndex(i);  // evaluates through the combo's signal
    return explorer_->framework() == name;
}

}  // namespace preflight::gui
