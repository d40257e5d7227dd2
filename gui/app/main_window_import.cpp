// File → Import config…: a torchtitan, Megatron-LM, DeepSpeed or nanotron config into the controls.
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QSpinBox>
#include <QStatusBar>
#include <QStringList>

#include "explorer.hpp"
#include "main_window.hpp"
#include "preflight/config_readers/config_readers.hpp"
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

bool MainWindow::importConfig(const QString& path) {
    ImportedConfig c;
    Plan plan = planFromControls();
    try {
        c = import_config_file(path.toStdString(), std::nullopt, ImportContext{gpu_count_->value()});
        plan = apply_imported_fields(c, plan);
        if (plan.pp_schedule == PpSchedule::interleaved && !c.field("vpp")) plan.vpp = 2;
    } catch (const InputError& e) {
        showNotice(QStringLiteral("cannot import: ") + QString::fromUtf8(e.what()));
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
