// The main window: renders and saves a screenshot, keeps the last valid result
// with the planner's message on invalid input (no modal dialogs), overlays a run
// report, exports PNG/JSON, runs the plan search and loads a candidate on
// double-click, and re-evaluates within a frame.
#include <algorithm>

#include <QApplication>
#include <QComboBox>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QHeaderView>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableView>
#include <QTemporaryDir>
#include <QtTest>

#include "explorer.hpp"
#include "item_models.hpp"
#include "main_window.hpp"
#include "preflight/planner/report.hpp"
#include "units.hpp"

using namespace preflight;
using namespace preflight::gui;

namespace {

template <typename W>
W* child(QWidget& w, const char* name) {
    W* c = w.findChild<W*>(QString::fromLatin1(name));
    if (!c) qFatal("no widget %s", name);
    return c;
}

int distinct_colors(const QImage& img) {
    QSet<QRgb> seen;
    for (int y = 0; y < img.height(); y += 7)
        for (int x = 0; x < img.width(); x += 7) seen.insert(img.pixel(x, y));
    return static_cast<int>(seen.size());
}

bool no_dialogs() {
    if (QApplication::activeModalWidget()) return false;
    for (QWidget* w : QApplication::topLevelWidgets())
        if (w->isVisible() && (qobject_cast<QMessageBox*>(w) || qobject_cast<QDialog*>(w))) return false;
    return true;
}

qint64 shown_peak(Explorer& e) {
    return e.breakdownModel()->index(8, BreakdownModel::Predicted).data(BytesRole).toLongLong();
}

}  // namespace

class TestGuiWindow : public QObject {
    Q_OBJECT

private slots:
    void rendersAndSavesScreenshot() {
        Explorer explorer(PREFLIGHT_TEST_DATA_DIR);
        MainWindow w(&explorer);
        w.resize(1600, 980);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QVERIFY(explorer.current());
        QVERIFY(!child<QLabel>(w, "peakLabel")->text().isEmpty());
        for (int tab = 0; tab < w.tabs()->count(); ++tab) {
            w.tabs()->setCurrentIndex(tab);
            QTest::qWait(50);
            const QImage img = w.grab().toImage();
            QCOMPARE(img.size(), w.size() * img.devicePixelRatio());
            QVERIFY2(distinct_colors(img) > 20, "the window looks blank");
            const QString path = QString(GUI_TEST_OUTPUT) + QString("/gui_window_tab%1.png").arg(tab);
            QVERIFY(img.save(path));
            QVERIFY(QFileInfo(path).size() > 10000);
        }
        QVERIFY(no_dialogs());
    }

    void invalidInputShowsMessageKeepsResult() {
        Explorer explorer(PREFLIGHT_TEST_DATA_DIR);
        MainWindow w(&explorer);
        w.show();
        const qint64 peak = shown_peak(explorer);
        const QString peak_text = child<QLabel>(w, "peakLabel")->text();
        auto* banner = child<QLabel>(w, "errorBanner");
        QVERIFY(banner->isHidden());

        child<QSpinBox>(w, "tp")->setValue(3);  // llama-3-8b has 32 heads
        QVERIFY(!banner->isHidden());
        QVERIFY2(banner->text().contains("--tp: 3 does not divide the model&#x27;s 32 attention heads") ||
                     banner->text().contains("--tp: 3 does not divide the model's 32 attention heads"),
                 qPrintable(banner->text()));
        QCOMPARE(shown_peak(explorer), peak);
        QCOMPARE(child<QLabel>(w, "peakLabel")->text(), peak_text);
        QVERIFY(no_dialogs());

        child<QSpinBox>(w, "tp")->setValue(2);
        QVERIFY(banner->isHidden());
        QVERIFY(shown_peak(explorer) != peak);
        child<QSpinBox>(w, "tp")->setValue(1);
        QCOMPARE(shown_peak(explorer), peak);

        // A refused plan's global batch is not shown beside the last valid result (audit finding,
        // 2026-12: seq 100,000 read "100,000 tokens" beside the result for seq 4096).
        auto* gbs = child<QLabel>(w, "globalBatch");
        const int seq = child<QSpinBox>(w, "seq")->value();
        QCOMPARE(gbs->text(), QStringLiteral("4,096 tokens"));  // seq 4096 x mbs 1 x grad-acc 1 x dp 1
        child<QSpinBox>(w, "seq")->setValue(100000);  // llama-3-8b has 8192 positions
        QVERIFY2(banner->text().contains("100000 exceeds"), qPrintable(banner->text()));
        QVERIFY2(!gbs->text().contains("100,000"), qPrintable(gbs->text()));
        QCOMPARE(shown_peak(explorer), peak);
        child<QSpinBox>(w, "seq")->setValue(seq);
        QCOMPARE(gbs->text(), QStringLiteral("4,096 tokens"));

        // A malformed config.json and a config with a bad field: message names the file / field.
        const QString before = explorer.modelSpec();
        QVERIFY(!w.selectModel(QString(GUI_TEST_INPUTS) + "/malformed_config.json"));
        QVERIFY(!banner->isHidden());
        QVERIFY2(banner->text().contains("malformed_config.json"), qPrintable(banner->text()));
        QCOMPARE(child<QComboBox>(w, "model")->currentData().toString(), before);
        QCOMPARE(shown_peak(explorer), peak);
        QVERIFY(!w.selectModel(QString(GUI_TEST_INPUTS) + "/config_bad_field.json"));
        QVERIFY2(banner->text().contains("hidden_size"), qPrintable(banner->text()));
        QVERIFY(!w.selectGpu(QString(GUI_TEST_INPUTS) + "/run_report_full.json"));  // not a GPU spec
        QCOMPARE(shown_peak(explorer), peak);
        // Many invalid changes in a row: still no dialog, one banner.
        for (int i = 0; i < 20; ++i) child<QSpinBox>(w, "tp")->setValue(3 + 2 * (i % 5));  // 3, 5, 7, 9, 11
        QVERIFY(!banner->isHidden());
        QVERIFY(no_dialogs());
        QCOMPARE(shown_peak(explorer), peak);
        child<QSpinBox>(w, "tp")->setValue(1);
        QVERIFY(banner->isHidden());
        QCOMPARE(shown_peak(explorer), peak);
    }

    // Audit findings (2026-11-29): a loaded value outside its control's range was clamped (or
    // wrapped: grad_acc 2^32 became 1) and settings without a control were dropped, silently;
    // choosing the interleaved schedule left vpp at 1 and was refused first.
    void loadedValuesTheControlsCannotShowAreNamed() {
        Explorer explorer(PREFLIGHT_TEST_DATA_DIR);
        MainWindow w(&explorer);
        w.show();
        auto* banner = child<QLabel>(w, "errorBanner");
        Plan p;
        p.seq = 4096;
        p.grad_acc = 100000;
        w.loadPlan(p);
        QVERIFY(!banner->isHidden());
        QVERIFY2(banner->text().contains("grad_acc 100,000 (shown as 65,536, the control&#x27;s bound)") ||
                     banner->text().contains("grad_acc 100,000 (shown as 65,536, the control's bound)"),
                 qPrintable(banner->text()));
        QVERIFY2(banner->text().startsWith("<b>Note:</b>"), qPrintable(banner->text()));
        QCOMPARE(child<QSpinBox>(w, "gradAcc")->value(), 65536);
        p.grad_acc = 8;
        p.lora.dropout = 0.1;
        w.loadPlan(p);
        QVERIFY2(banner->text().contains("lora_dropout 0.1"), qPrintable(banner->text()));
        // Megatron-LM's settings without a control (a launch script's import gives them).
        Plan split;
        split.seq = 4096, split.pp = 4, split.grad_acc = 8, split.pp_first_stage_layers = 6;
        w.loadPlan(split);
        QVERIFY2(banner->text().contains("pp_first_stage_layers 6"), qPrintable(banner->text()));
        w.loadPlan(Plan{});
        QVERIFY(banner->isHidden());

        child<QSpinBox>(w, "pp")->setValue(2);
        auto* schedule = child<QComboBox>(w, "ppSchedule");
        schedule->setCurrentIndex(schedule->findData(static_cast<int>(PpSchedule::interleaved)));
        QCOMPARE(child<QSpinBox>(w, "vpp")->value(), 2);
    }

    // File → Import config: a torchtitan TOML sets the model and the plan; the GPU count fills its -1 degree.
    void importsAFrameworkConfig() {
        Explorer explorer(PREFLIGHT_TEST_DATA_DIR);
        MainWindow w(&explorer);
        w.show();
        child<QSpinBox>(w, "gpuCount")->setValue(64);
        QVERIFY(w.importConfig(QString(GUI_TEST_INPUTS) + "/import_torchtitan.toml"));
        QCOMPARE(explorer.modelSpec(), QString("llama-3-8b"));
        QCOMPARE(child<QSpinBox>(w, "seq")->value(), 8192);   // [training] seq_len
        QCOMPARE(child<QSpinBox>(w, "dp")->value(), 64);      // data_parallel_shard_degree = -1: all 64 GPUs
        QCOMPARE(child<QSpinBox>(w, "mbs")->value(), 1);      // local_batch_size
        QCOMPARE(child<QComboBox>(w, "zero")->currentData().toInt(), 3);  // FSDP shards parameters: ZeRO-3
        QCOMPARE(child<QComboBox>(w, "recompute")->currentData().toInt(), static_cast<int>(Recompute::selective));
        QCOMPARE(child<QComboBox>(w, "precision")->currentData().toInt(), static_cast<int>(Precision::bf16_mixed));
        QVERIFY(child<QLabel>(w, "errorBanner")->isHidden());
        // A Megatron-LM script whose tokenizer file is its $2 takes the catalog's Mixtral 8x7B
        // vocabulary for its shape, as `--from` does, and the notice says so.
        QVERIFY(w.importConfig(QString(PREFLIGHT_TEST_DATA_DIR) + "/../tests/configs/megatron/mixtral_8x7b_tokenizer_arg.sh"));
        QCOMPARE(child<QSpinBox>(w, "ep")->value(), 8);
        QCOMPARE(child<QSpinBox>(w, "pp")->value(), 4);
        QVERIFY(w.errorText().contains("catalog model mixtral-8x7b (vocabulary 32000)"));
        QVERIFY(w.importConfig(QString(GUI_TEST_INPUTS) + "/import_torchtitan.toml"));
        // A file that is not a config: a notice naming it, the controls unchanged.
        QVERIFY(!w.importConfig(QString(GUI_TEST_INPUTS) + "/malformed_config.json"));
        QCOMPARE(child<QSpinBox>(w, "seq")->value(), 8192);
        QVERIFY(no_dialogs());
    }

    // A launch script that reads its command-line words: refused without them, with the menu entry
    // that gives them named; with them, read as `--from-arg` reads them (the CLI's
    // ConfigFrom.FromArgGivesAMegatronScriptItsWords): tp 4 from $1, so dp 4 of the 16 GPUs.
    void importsAScriptWithItsWords() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const QString script = dir.filePath("run.sh");
        QFile f(script);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("TP=$1\nNODES=${2:-1}\n"
                "torchrun --nnodes $NODES --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size $TP "
                "--micro-batch-size 1 --global-batch-size 64 --num-layers 2 --hidden-size 256 --num-attention-heads 4 "
                "--max-position-embeddings 512 --seq-length 512 --vocab-size 1024\n");
        f.close();
        Explorer explorer(PREFLIGHT_TEST_DATA_DIR);
        MainWindow w(&explorer);
        w.show();
        child<QSpinBox>(w, "gpuCount")->setValue(16);  // the GPUs the explorer plans for
        QVERIFY(!w.importConfig(script));
        QVERIFY(w.errorText().contains("$1, a command-line word the reader is not given"));
        QVERIFY(w.errorText().contains("File → Import launch script with its arguments… gives the script its words"));
        QVERIFY2(w.importScriptWithWords(script, QStringLiteral(" 4 '2' ")), qPrintable(w.errorText()));
        QCOMPARE(child<QSpinBox>(w, "tp")->value(), 4);
        QCOMPARE(child<QSpinBox>(w, "dp")->value(), 4);  // 16 GPUs / tp 4
        QVERIFY(!w.importScriptWithWords(script, QStringLiteral("4 '2")));
        QVERIFY(w.errorText().contains("its arguments: a single quote is not closed"));
        QCOMPARE(child<QSpinBox>(w, "tp")->value(), 4);  // unchanged
        QVERIFY(no_dialogs());
    }

    // A ds_config's bucket settings reach the deepspeed profile as `--from` hands them over:
    // reduce_bucket_size "auto" (hidden_size^2), overlap_comm absent (DeepSpeed's default).
    void importsADeepSpeedConfigsBuckets() {
        Explorer explorer(PREFLIGHT_TEST_DATA_DIR);
        MainWindow w(&explorer);
        w.show();
        child<QSpinBox>(w, "gpuCount")->setValue(8);
        QVERIFY(w.importConfig(QString(GUI_TEST_INPUTS) + "/import_deepspeed.json"));
        QCOMPARE(explorer.framework(), QString("deepspeed"));
        QVERIFY(explorer.deepSpeedBuckets().has_value());
        QVERIFY(explorer.current() != nullptr);
        const DeepSpeedZeroSettings& z = explorer.current()->profile.deepspeed_zero;
        QVERIFY(z.reduce_bucket_hidden_squared);
        QVERIFY(!z.overlap_comm.has_value());
        // Another format's config puts the profile's defaults back.
        QVERIFY(w.importConfig(QString(GUI_TEST_INPUTS) + "/import_torchtitan.toml"));
        QVERIFY(!explorer.deepSpeedBuckets().has_value());
        QVERIFY(no_dialogs());
    }

    void measuredOverlay() {
        Explorer explorer(PREFLIGHT_TEST_DATA_DIR);
        MainWindow w(&explorer);
        w.show();
        QVERIFY(w.openRunReport(QString(GUI_TEST_INPUTS) + "/run_report_full.json"));
        // The report's plan is loaded into the controls.
        QCOMPARE(child<QSpinBox>(w, "dp")->value(), 8);
        QCOMPARE(child<QSpinBox>(w, "gradAcc")->value(), 8);
        QCOMPARE(child<QComboBox>(w, "zero")->currentData().toInt(), 1);
        QCOMPARE(child<QComboBox>(w, "recompute")->currentText(), QString("selective"));
        auto* table = child<QTableView>(w, "breakdownTable")->model();
        QCOMPARE(table->index(8, BreakdownModel::Measured).data().toString(), formatBytes(68719476736LL));
        QCOMPARE(table->index(8, BreakdownModel::Delta).data(BytesRole).toLongLong(),
                 68719476736LL - table->index(8, BreakdownModel::Predicted).data(BytesRole).toLongLong());
        QVERIFY(child<QLabel>(w, "overlayLabel")->text().contains("measured peak"));
        w.tabs()->setCurrentIndex(MainWindow::TimelineTab);
        QVERIFY(w.grab().toImage().save(QString(GUI_TEST_OUTPUT) + "/gui_overlay_timeline.png"));
        w.tabs()->setCurrentIndex(MainWindow::BreakdownTab);
        QVERIFY(w.grab().toImage().save(QString(GUI_TEST_OUTPUT) + "/gui_overlay_breakdown.png"));

        // Missing keys degrade: no plan, partial categories.
        QVERIFY(w.openRunReport(QString(GUI_TEST_INPUTS) + "/run_report_partial.json"));
        QCOMPARE(table->index(0, BreakdownModel::Measured).data().toString(), QString("–"));
        QVERIFY(child<QLabel>(w, "overlayLabel")->text().contains("plan: missing"));
        QCOMPARE(child<QSpinBox>(w, "dp")->value(), 8);  // controls untouched
        QVERIFY(!w.openRunReport(QString(GUI_TEST_INPUTS) + "/run_report_empty.json"));
        QVERIFY(!child<QLabel>(w, "errorBanner")->isHidden());
        QVERIFY(no_dialogs());
        w.clearRunReport();
        QCOMPARE(table->index(8, BreakdownModel::Measured).data().toString(), QString("–"));
    }

    void exports() {
        Explorer explorer(PREFLIGHT_TEST_DATA_DIR);
        MainWindow w(&explorer);
        w.resize(1400, 900);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QTemporaryDir dir;
        for (int tab = 0; tab < w.tabs()->count(); ++tab) {
            w.tabs()->setCurrentIndex(tab);
            const QString path = dir.filePath(QString("chart%1.png").arg(tab));
            QVERIFY(w.exportChartPng(path));
            QImage img(path);
            QVERIFY(!img.isNull());
            QVERIFY(distinct_colors(img) > 5);
        }
        QVERIFY(!w.exportPlanJson("/nonexistent-dir/plan.json"));
        QVERIFY(no_dialogs());
    }

    void searchAndLoadCandidate() {
        Explorer explorer(PREFLIGHT_TEST_DATA_DIR);
        MainWindow w(&explorer);
        w.resize(1600, 980);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        child<QSpinBox>(w, "gpuCount")->setValue(8);
        QCOMPARE(child<QSpinBox>(w, "dp")->value(), 8);
        w.tabs()->setCurrentIndex(MainWindow::SearchTab);
        QSignalSpy done(&explorer, &Explorer::searchFinished);
        QTest::mouseClick(child<QPushButton>(w, "searchButton"), Qt::LeftButton);
        QVERIFY(done.wait(120000));
        auto* view = child<QTableView>(w, "candidatesTable");
        QVERIFY(view->model()->rowCount() > 1);
        QVERIFY(child<QLabel>(w, "searchStatus")->text().contains("plans evaluated"));
        QVERIFY(w.grab().toImage().save(QString(GUI_TEST_OUTPUT) + "/gui_search.png"));

        // Sort by peak memory, descending; the recommendation keeps its highlight.
        view->sortByColumn(CandidatesModel::Peak, Qt::DescendingOrder);
        QAbstractItemModel* m = view->model();
        for (int r = 1; r < m->rowCount(); ++r)
            QVERIFY(m->index(r - 1, CandidatesModel::Peak).data(ValueRole).toLongLong() >=
                    m->index(r, CandidatesModel::Peak).data(ValueRole).toLongLong());
        int highlighted = 0;
        for (int r = 0; r < m->rowCount(); ++r)
            if (m->index(r, 0).data(CurrentRole).toBool()) {
                ++highlighted;
                QVERIFY(m->index(r, 0).data(Qt::BackgroundRole).isValid());
            }
        QCOMPARE(highlighted, 1);

        // Double-click the top row (largest peak): its plan lands in the controls.
        const QModelIndex top = m->index(0, CandidatesModel::Peak);
        const qint64 expected_peak = top.data(ValueRole).toLongLong();
        const int expected_dp = m->index(0, CandidatesModel::Dp).data(ValueRole).toInt();
        const int expected_tp = m->index(0, CandidatesModel::Tp).data(ValueRole).toInt();
        const int expected_mbs = m->index(0, CandidatesModel::Mbs).data(ValueRole).toInt();
        view->scrollTo(top);
        const QPoint at = view->visualRect(top).center();
        QTest::mouseClick(view->viewport(), Qt::LeftButton, {}, at);  // item views want a press on the row first
        QTest::mouseDClick(view->viewport(), Qt::LeftButton, {}, at);
        QCOMPARE(w.tabs()->currentIndex(), int(MainWindow::BreakdownTab));
        QCOMPARE(child<QSpinBox>(w, "dp")->value(), expected_dp);
        QCOMPARE(child<QSpinBox>(w, "tp")->value(), expected_tp);
        QCOMPARE(child<QSpinBox>(w, "mbs")->value(), expected_mbs);
        QCOMPARE(shown_peak(explorer), expected_peak);
        QVERIFY(no_dialogs());
    }

    void updatesWithinAFrame() {
        Explorer explorer(PREFLIGHT_TEST_DATA_DIR);
        MainWindow w(&explorer);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        auto* recompute = child<QComboBox>(w, "recompute");
        auto* mbs = child<QSpinBox>(w, "mbs");
        std::vector<double> update_ms, frame_ms;
        for (int i = 0; i < 30; ++i) {
            QElapsedTimer t;
            t.start();
            // One control change: evaluation, sweeps, model resets, chart series and labels updated.
            if (i % 2) recompute->setCurrentIndex((recompute->currentIndex() + 1) % 3);
            else mbs->setValue(1 + (i / 2) % 4);
            update_ms.push_back(static_cast<double>(t.nsecsElapsed()) / 1e6);
            w.repaint();  // and the window painted with the new numbers
            frame_ms.push_back(static_cast<double>(t.nsecsElapsed()) / 1e6);
        }
        std::sort(update_ms.begin(), update_ms.end());
        std::sort(frame_ms.begin(), frame_ms.end());
        const double median = update_ms[update_ms.size() / 2];
        qInfo("control change -> all views updated: median %.2f ms, max %.2f ms; with repaint: median %.2f ms, max %.2f ms",
              median, update_ms.back(), frame_ms[frame_ms.size() / 2], frame_ms.back());
        QVERIFY2(median < 16.7, qPrintable(QString("median %1 ms exceeds one 60 Hz frame").arg(median)));
    }
};

QTEST_MAIN(TestGuiWindow)
#include "tst_gui_window.moc"
