// preflight-gui's command-line start-up: --search TOKENS shows the searched batch in
// the search tab's global-batch box and searches exactly that batch; bad values are
// refused with a message naming --search.
#include <QFile>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QtTest>

#include "explorer.hpp"
#include "main_window.hpp"
#include "startup.hpp"

using namespace preflight;
using namespace preflight::gui;

class TestGuiStartup : public QObject {
    Q_OBJECT
private slots:
    void searchOptionFillsTheGlobalBatchBox() {
        Explorer explorer(PREFLIGHT_TEST_DATA_DIR);
        MainWindow w(&explorer);
        auto* gbs = w.findChild<QSpinBox*>(QStringLiteral("gbsTokens"));
        QVERIFY(gbs);
        w.findChild<QSpinBox*>(QStringLiteral("gpuCount"))->setValue(8);
        QSignalSpy done(&explorer, &Explorer::searchFinished);
        QCOMPARE(startSearchFromCommandLine(w, explorer, QStringLiteral("4194304")), QString());
        // 4,194,304 tokens (not the box's default 1,048,576) is shown and searched.
        QCOMPARE(gbs->value(), 4194304);
        QVERIFY(done.wait(120000));
        const auto plan = explorer.candidatePlan(0);
        QVERIFY(plan.has_value());
        // Llama-3-8B at seq 4096: 4,194,304 tokens = 1024 sequences per step.
        QCOMPARE(plan->global_batch_tokens(), std::int64_t{4194304});
    }

    void badSearchValuesAreRefused() {
        Explorer explorer(PREFLIGHT_TEST_DATA_DIR);
        MainWindow w(&explorer);
        for (const char* bad : {"0", "-5", "abc", "1e400", "9999999999999"})
            QVERIFY2(startSearchFromCommandLine(w, explorer, QString::fromLatin1(bad)).startsWith("--search"), bad);
        QVERIFY(!explorer.searchRunning());
    }

    void aPlanFileIsReadAsTheCliReadsIt() {
        // Was: a typo'd key (zero_stage) loaded the plan with ZeRO at its default without a word,
        // and a memory report's plan (under "plan") was read from the top level.
        QTemporaryDir dir;
        auto write = [&](const char* name, const QByteArray& text) {
            QFile f(dir.filePath(QString::fromLatin1(name)));
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write(text);
            return;
        };
        write("typo.json", R"({"model": "gpt2", "seq": 256, "zero_stage": 3})");
        write("report.json", R"({"model": {"name": "gpt2"}, "plan": {"seq": 512, "mbs": 2, "dp": 2, "zero": 1}})");
        Explorer explorer(PREFLIGHT_TEST_DATA_DIR);
        MainWindow w(&explorer);
        const QString typo = loadPlanFromCommandLine(w, dir.filePath("typo.json"), false, false);
        QVERIFY2(typo.contains("zero_stage") && typo.contains("unknown key"), qPrintable(typo));
        QCOMPARE(loadPlanFromCommandLine(w, dir.filePath("report.json"), false, false), QString());
        QVERIFY(explorer.current());
        QCOMPARE(QString::fromStdString(explorer.current()->model.name), QString("gpt2"));
        QCOMPARE(explorer.current()->plan.seq, 512);
        QCOMPARE(explorer.current()->plan.mbs, 2);
        QCOMPARE(explorer.current()->plan.zero, ZeroStage{1});
        // A file that names no recipe, under nanotron: nanotron's, as `memory --plan --framework nanotron` reads it.
        write("norecipe.json", R"({"model": "llama-3.2-1b", "seq": 1024})");
        QVERIFY(w.selectFramework("nanotron"));
        QCOMPARE(loadPlanFromCommandLine(w, dir.filePath("norecipe.json"), false, false, "nanotron"), QString());
        QCOMPARE(explorer.current()->plan.precision, Precision::bf16_mixed_fp32_grads);
        QVERIFY2(!explorer.hasError(), qPrintable(explorer.errorMessage()));
        // The framework a file records (plan --emit preflight) is selected, unless --framework was given.
        write("torchtitan.json", R"({"model": "llama-3.2-1b", "seq": 1024, "dp": 2, "zero": 3, "framework": "torchtitan"})");
        QCOMPARE(loadPlanFromCommandLine(w, dir.filePath("torchtitan.json"), false, false, "nanotron"), QString());
        QCOMPARE(explorer.framework(), QString("torchtitan"));
        QVERIFY(w.selectFramework("megatron"));
        QCOMPARE(loadPlanFromCommandLine(w, dir.filePath("torchtitan.json"), false, false, "megatron", true), QString());
        QCOMPARE(explorer.framework(), QString("megatron"));
    }
};

QTEST_MAIN(TestGuiStartup)
#include "tst_gui_startup.moc"
