#include "startup.hpp"

#include <QSpinBox>

#include "explorer.hpp"
#include "main_window.hpp"
#include "preflight/planner/catalog.hpp"
#include "preflight/planner/report.hpp"

namespace preflight::gui {

QString startSearchFromCommandLine(QWidget& window, Explorer& explorer, const QString& tokens) {
    auto* gbs = window.findChild<QSpinBox*>(QStringLiteral("gbsTokens"));
    auto* gpus = window.findChild<QSpinBox*>(QStringLiteral("gpuCount"));
    if (!gbs || !gpus) return QStringLiteral("--search: this window has no plan search");
    bool ok = false;
    const qint64 value = tokens.toLongLong(&ok);
    if (!ok || value < 1)
        return QStringLiteral("--search: '%1' is not a positive whole number of tokens").arg(tokens);
    if (value < gbs->minimum() || value > gbs->maximum())
        return QStringLiteral("--search: %1 tokens is outside the global-batch box's range %2..%3")
            .arg(value)
            .arg(gbs->minimum())
            .arg(gbs->maximum());
    // The box shows what is searched: the search reads the box, not the raw option.
    gbs->setValue(static_cast<int>(value));
    if (!explorer.startSearch(gpus->value(), gbs->value()))
        return QStringLiteral("--search: no plan has been evaluated yet to search from (see the window's message)");
    return {};
}

QString loadPlanFromCommandLine(MainWindow& window, const QString& path, bool model_given, bool gpu_given) {
    try {
        const nlohmann::json doc = read_json_file(path.toStdString(), "--plan");
        if (doc.is_object()) {
            if (!model_given && doc.contains("model") && doc.at("model").is_string())
                window.selectModel(QString::fromStdString(doc.at("model").get<std::string>()));
            if (!gpu_given && doc.contains("gpu") && doc.at("gpu").is_string())
                window.selectGpu(QString::fromStdString(doc.at("gpu").get<std::string>()));
        }
        window.loadPlan(plan_from_json(doc));
    } catch (const std::exception& e) {
        const QString error = QString::fromUtf8(e.what());
        window.showNotice(QStringLiteral("--plan: ") + error);
        return error;
    }
    return {};
}

}  // namespace preflight::gui
