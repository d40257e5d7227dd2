// Command-line start-up actions of preflight-gui that tests can drive.
#pragma once

#include <QString>
#include <QWidget>

namespace preflight::gui {

class Explorer;

// --search TOKENS: checks the value, shows it in the search tab's global-batch box
// ("gbsTokens") and starts the search for the GPU count box ("gpuCount") with exactly
// the value shown. Returns an error message naming --search (empty when started).
QString startSearchFromCommandLine(QWidget& window, Explorer& explorer, const QString& tokens);

}  // namespace preflight::gui
