#include "startup.hpp"

#include <QSpinBox>

#include "explorer.hpp"
#include "main_window.hpp"
#include "preflight/planner/catalog.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/plan_document.hpp"
#include "preflight/planner/profiles.hpp"

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

QString loadPlanFromCommandLine(MainWindow& window, const QString& path, bool model_given, bool gpu_given,
                                const QString& framework, bool framework_given) {
    try {
        // Read as `preflight memory --plan` reads it (plan_document.hpp): an unknown key, a null
        // model or totals that disagree with the fields are refused, not left at a default.
        PlanDocument doc;
        try {
            Plan defaults;
            if (const auto profile = profile_by_name(framework.toStdString())) defaults.precision = default_precision(*profile);
            doc = read_plan_document(read_json_file(path.toStdString(), "--plan"), defaults);
        } catch (const InputError& e) {
            throw InputError(path.toStdString(), e.what());
        }
        if (!model_given && !doc.model.empty()) window.selectModel(QString::fromStdString(doc.model));
        if (!gpu_given && !doc.gpu.empty()) window.selectGpu(QString::fromStdString(doc.gpu));
        // The profile the plan was ranked under (plan_document.hpp), as `preflight memory --plan` takes it.
        if (!framework_given && !doc.framework.empty()) window.selectFramework(QString::fromStdString(doc.framework));
        if (const QString refused = window.loadPlan(doc.plan); !refused.isEmpty())
            return QStringLiteral("%1: plan not loaded: %2").arg(path, refused);
    } catch (const std::exception& e) {
        const QString error = QString::fromUtf8(e.what());
        window.showNotice(QStringLiteral("--plan: ") + error);
        return error;
    }
    return {};
}

}  // namespace preflight::gui
