#include "startup.hpp"

#include <QSpinBox>

#include "explorer.hpp"

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

}  // namespace preflight::gui
