// Command-line start-up actions of preflight-gui that tests can drive.
#pragma once

#include <QString>
#include <QWidget>

namespace preflight::gui {

class Explorer;
class MainWindow;

// --search TOKENS: checks the value, shows it in the search tab's global-batch box
// ("gbsTokens") and starts the search for the GPU count box ("gpuCount") with exactly
// the value shown. Returns an error message naming --search (empty when started).
QString startSearchFromCommandLine(QWidget& window, Explorer& explorer, const QString& tokens);
// --plan FILE: loads the plan into the controls. The model and GPU the file names (plan --emit
// preflight) are used unless --model / --gpu were given, as `preflight run --plan` does (was:
// ignored, so a Mixtral plan was shown on the default Llama-3-8B without a word). Returns the
// error ("" on success), which the window's banner shows too. A recipe the file leaves out is the
// framework's default (default_precision), as `preflight memory --plan --framework F` takes it; the
// framework the file records is selected unless --framework was given.
QString loadPlanFromCommandLine(MainWindow& window, const QString& path, bool model_given, bool gpu_given,
                                const QString& framework = QStringLiteral("megatron"), bool framework_given = false);

}  // namespace preflight::gui
