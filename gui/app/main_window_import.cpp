// Plans into the controls (loadPlan: --plan, a run report's plan, a search candidate) and
// File → Import config…: a torchtitan, Megatron-LM, DeepSpeed or nanotron config.
#include <algorithm>

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QSpinBox>
#include <QStatusBar>
#include <QStringList>

#include "explorer.hpp"
#include "item_models.hpp"
#include "main_window.hpp"
#include "shell_words.hpp"
#include "preflight/config_readers/config_readers.hpp"
#include "preflight/planner/catalog.hpp"
#include "preflight/planner/error.hpp"

namespace preflight::gui {

namespace {

// A model shape the config spells out, written where the explorer can open it as a config.json.
QString write_model_config(const ImportedConfig& c) {
    const QString name = QFileInfo(QString::fromStdString(c.file)).completeBaseName();
    const QString path = QDir::temp().filePath(QStringLiteral("preflight-import-%1.json").arg(name));
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) return {};
    const std::string text = c.model_config->dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    f.write(text.data(), static_cast<qint64>(text.size()));
    return f.error() == QFile::NoError ? path : QString();
}

}  // namespace

QString MainWindow::loadPlan(const Plan& p0) {
    Plan p = p0;
    if (p.seq == 0)
        if (auto m = explorer_->inputModel()) p = resolve_defaults(p, *m);
    // What the controls cannot show is said, never clamped, wrapped or dropped in silence: a
    // count outside its control's range, and the settings the explorer has no control for.
    QStringList unshown;
    const auto outside = [](const QSpinBox* box, std::int64_t v) { return v < box->minimum() || v > box->maximum(); };
    auto set_count = [&unshown, &outside](QSpinBox* box, std::int64_t v, const char* key) {
        if (outside(box, v))
            unshown << QStringLiteral("%1 %2 (shown as %3, the control's bound)")
                           .arg(QLatin1String(key), groupDigits(v), groupDigits(std::clamp<std::int64_t>(v, box->minimum(), box->maximum())));
        box->setValue(static_cast<int>(std::clamp<std::int64_t>(v, box->minimum(), box->maximum())));
    };
    // A count beyond its control's bound is first put to the planner as the plan has it: where it
    // refuses the plan, the plan is not loaded and the note quotes the planner's message on its
    // own values (as `preflight memory --plan` does), not on the clamped ones; the controls and
    // their result stay as they were.
    if (outside(seq_, p.seq) || outside(mbs_, p.mbs) || outside(grad_acc_, p.grad_acc) || outside(dp_, p.dp) ||
        outside(tp_, p.tp) || outside(pp_, p.pp) || outside(lora_rank_, p.lora.rank) || outside(vpp_, p.vpp) ||
        outside(cp_, p.cp) || outside(ep_, p.ep))
        if (const QString refused = explorer_->planRefusal(p); !refused.isEmpty()) {
            showNotice(QStringLiteral("plan not loaded: ") + refused);
            return refused;
        }
    const Plan defaults;
    if (p.lora.dropout != defaults.lora.dropout) unshown << QStringLiteral("lora_dropout %1").arg(p.lora.dropout);
    if (p.lora.alpha != defaults.lora.alpha) unshown << QStringLiteral("lora_alpha %1").arg(p.lora.alpha);
    if (lora_targets_->findData(p.lora.targets) < 0) unshown << QStringLiteral("lora_targets (not one of the presets)");
    if (p.moe_capacity_factor != defaults.moe_capacity_factor)
        unshown << QStringLiteral("moe_capacity_factor %1").arg(p.moe_capacity_factor);
    if (p.fp8_param_gather) unshown << QStringLiteral("fp8_param_gather");
    if (p.pp_first_stage_layers > 0) unshown << QStringLiteral("pp_first_stage_layers %1").arg(p.pp_first_stage_layers);
    if (p.pp_last_stage_layers > 0) unshown << QStringLiteral("pp_last_stage_layers %1").arg(p.pp_last_stage_layers);
    syncing_ = true;
    set_count(seq_, p.seq, "seq");
    set_count(mbs_, p.mbs, "mbs");
    set_count(grad_acc_, p.grad_acc, "grad_acc");
    set_count(dp_, p.dp, "dp");
    set_count(tp_, p.tp, "tp");
    set_count(pp_, p.pp, "pp");
    gpu_count_->setValue(static_cast<int>(std::clamp<std::int64_t>(p.gpus(), gpu_count_->minimum(), gpu_count_->maximum())));
    sp_->setChecked(p.sp);
    zero_->setCurrentIndex(zero_->findData(p.zero));
    recompute_->setCurrentIndex(recompute_->findData(static_cast<int>(p.recompute)));
    precision_->setCurrentIndex(precision_->findData(static_cast<int>(p.precision)));
    fp8_scaling_->setCurrentIndex(fp8_scaling_->findData(static_cast<int>(p.fp8_scaling)));
    optimizer_->setCurrentIndex(optimizer_->findData(static_cast<int>(p.optimizer)));
    attention_->setCurrentIndex(attention_->findData(static_cast<int>(p.attention)));
    dropout_->setValue(p.dropout);
    finetune_->setCurrentIndex(finetune_->findData(static_cast<int>(p.finetune)));
    set_count(lora_rank_, p.lora.rank, "lora_rank");
    if (const int i = lora_targets_->findData(p.lora.targets); i >= 0) lora_targets_->setCurrentIndex(i);
    offload_->setCurrentIndex(offload_->findData(static_cast<int>(p.offload)));
    pp_schedule_->setCurrentIndex(pp_schedule_->findData(static_cast<int>(p.pp_schedule)));
    set_count(vpp_, p.vpp, "vpp");
    set_count(cp_, p.cp, "cp");
    set_count(ep_, p.ep, "ep");
    syncing_ = false;
    applyControls();
    if (!unshown.isEmpty())
        showNotice(QStringLiteral("the loaded plan's ") + unshown.join(QStringLiteral(", ")) +
                   QStringLiteral(" cannot be shown here: the result is for the plan the controls show"));
    return {};
}

bool MainWindow::importScriptWithWords(const QString& path, const QString& line) {
    QStringList words;
    QString why;
    if (!splitShellWords(line, words, why)) {
        showNotice(QStringLiteral("cannot import %1: its arguments: %2").arg(path, why));
        return false;
    }
    return importConfig(path, words);
}

bool MainWindow::importConfig(const QString& path, const std::optional<QStringList>& scriptWords) {
    ImportedConfig c;
    Plan plan = planFromControls();
    try {
        // A Megatron-LM shape without a known vocabulary takes the catalog model's with its layers.
        ImportContext context{gpu_count_->value()};
        context.catalog = [dir = explorer_->dataDir()] { return load_catalog_models(dir); };
        if (scriptWords) {
            context.script_args.emplace();
            for (const QString& w : *scriptWords) context.script_args->push_back(w.toStdString());
        }
        c = import_config_file(path.toStdString(), std::nullopt, context);
        plan = apply_imported_fields(c, plan);
        if (plan.pp_schedule == PpSchedule::interleaved && !c.field("vpp")) plan.vpp = 2;
    } catch (const InputError& e) {
        QString msg = QStringLiteral("cannot import: ") + QString::fromUtf8(e.what());
        // The reader names the CLI's flag for a script's own words; here the menu gives them.
        if (!scriptWords && msg.contains(QStringLiteral("--from-arg")))
            msg += QStringLiteral("\nFile → Import launch script with its arguments… gives the script its words.");
        showNotice(msg);
        return false;
    }
    if (c.model) {
        if (!selectModel(QString::fromStdString(*c.model))) return false;
    } else if (c.model_config) {
        const QString model_path = write_model_config(c);
        if (model_path.isEmpty() || !selectModel(model_path)) return false;
    }
    // The profile the config implies, as --from sets it when --framework is not given, and a
    // ds_config's buckets (cli/config_from.cpp take_deepspeed_buckets).
    explorer_->setDeepSpeedBuckets(c.deepspeed_zero);
    if (c.framework) selectFramework(QString::fromStdString(*c.framework));
    loadPlan(plan);
    QStringList notes;
    if (!c.model && !c.model_config)  // `preflight ... --from` asks for --model here
        notes << QStringLiteral("the config names no model: the model chosen here, %1, is used").arg(model_->currentText());
    for (const std::string& w : c.warnings) notes << QString::fromStdString(w);
    if (!notes.isEmpty()) showNotice(notes.join(QStringLiteral("\n")));
    statusBar()->showMessage(QStringLiteral("Imported %1 (%2): %3 settings, %4 warnings, %5 keys ignored on purpose")
                                 .arg(path, QString::fromUtf8(std::string(to_string(c.format)).c_str()))
                                 .arg(c.fields.size())
                                 .arg(c.warnings.size())
                                 .arg(c.ignored.size()));
    return true;
}

}  // namespace preflight::gui
