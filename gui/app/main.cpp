// preflight-gui: the Qt what-if explorer for Preflight's planner.
#include <cstdio>

#include <QApplication>
#include <QCommandLineParser>
#include <QSpinBox>
#include <QTabWidget>
#include <QTimer>

#include "explorer.hpp"
#include "main_window.hpp"
#include "startup.hpp"
#include "preflight/planner/catalog.hpp"
#include "preflight/planner/report.hpp"

int main(int argc, char** argv) {
    QApplication app(argc, argv);
    QApplication::setApplicationName(QStringLiteral("preflight-gui"));
    QApplication::setApplicationVersion(QStringLiteral("0.1.0"));

    QCommandLineParser cli;
    cli.setApplicationDescription(QStringLiteral("Preflight what-if explorer: memory, recompute/ZeRO trade-offs, plan search"));
    cli.addHelpOption();
    cli.addVersionOption();
    const QCommandLineOption model({"m", "model"}, "Model: catalog name or path to a config.json.", "M");
    const QCommandLineOption gpu({"g", "gpu"}, "GPU: catalog name or path to a GPU spec JSON.", "G");
    const QCommandLineOption plan("plan", "Load a plan JSON (as exported, or plan --emit preflight).", "FILE");
    const QCommandLineOption report("report", "Open a run report for the measured overlay.", "FILE");
    const QCommandLineOption tab("tab", "View to show: 0 breakdown, 1 sweeps, 2 timeline, 3 search.", "N", "0");
    const QCommandLineOption size("size", "Window size WxH.", "WxH", "1600x980");
    const QCommandLineOption shot("screenshot", "Render the window, save it to FILE (PNG) and exit.", "FILE");
    const QCommandLineOption search("search", "Run the plan search for this many tokens per step at start.", "TOKENS");
    const QCommandLineOption data("data-dir", "Catalog folder (default: $PREFLIGHT_DATA_DIR, else the compiled-in data/).",
                                  "DIR");
    const QCommandLineOption framework("framework",
                                       "Framework whose memory and step time to model (as `preflight memory --framework`): "
                                       "megatron (default), nanotron, torchtitan, deepspeed, preflight-runtime, pytorch.",
                                       "F");
    cli.addOptions({model, gpu, plan, report, tab, size, shot, search, data, framework});
    cli.process(app);

    const std::filesystem::path data_dir =
        cli.isSet(data) ? std::filesystem::path(cli.value(data).toStdString()) : preflight::default_data_dir();
    preflight::gui::Explorer explorer(data_dir);
    preflight::gui::MainWindow window(&explorer);
    if (const QStringList wh = cli.value(size).split('x'); wh.size() == 2) window.resize(wh[0].toInt(), wh[1].toInt());

    if (cli.isSet(framework) && !window.selectFramework(cli.value(framework))) {
        std::fprintf(stderr, "preflight-gui: --framework: unknown framework '%s'\n", qPrintable(cli.value(framework)));
        return 2;
    }
    if (cli.isSet(model)) window.selectModel(cli.value(model));
    if (cli.isSet(gpu)) window.selectGpu(cli.value(gpu));
    if (cli.isSet(plan))
        if (const QString error = preflight::gui::loadPlanFromCommandLine(window, cli.value(plan), cli.isSet(model),
                                                                          cli.isSet(gpu), explorer.framework(), cli.isSet(framework));
            !error.isEmpty())
            std::fprintf(stderr, "preflight-gui: %s\n", qPrintable(error));
    if (cli.isSet(report)) window.openRunReport(cli.value(report));
    window.tabs()->setCurrentIndex(cli.value(tab).toInt());
    window.show();

    if (cli.isSet(search)) {
        QMetaObject::invokeMethod(&window, [&] {
            window.tabs()->setCurrentIndex(preflight::gui::MainWindow::SearchTab);
            const QString error = preflight::gui::startSearchFromCommandLine(window, explorer, cli.value(search));
            if (!error.isEmpty()) {
                std::fprintf(stderr, "preflight-gui: %s\n", qPrintable(error));
                QApplication::exit(2);
            }
        }, Qt::QueuedConnection);
    }

    if (cli.isSet(shot)) {
        const QString file = cli.value(shot);
        auto take = [&] {
            const bool ok = window.grab().save(file, "PNG");
            std::fprintf(ok ? stdout : stderr, ok ? "saved %s\n" : "could not write %s\n", qPrintable(file));
            QApplication::exit(ok ? 0 : 1);
        };
        // Give the window time to lay out (and a started search time to finish).
        QTimer::singleShot(cli.isSet(search) ? 0 : 400, &window, [&] {
            if (explorer.searchRunning())
                QObject::connect(&explorer, &preflight::gui::Explorer::searchFinished, &window,
                                 [&] { QTimer::singleShot(200, &window, take); });
            else
                take();
        });
    }
    return QApplication::exec();
}
