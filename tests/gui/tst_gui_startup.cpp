// preflight-gui's command-line start-up: --search TOKENS shows the searched batch in
// the search tab's global-batch box and searches exactly that batch; bad values are
// refused with a message naming --search.
#include <QSignalSpy>
#include <QSpinBox>
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
};

QTEST_MAIN(TestGuiStartup)
#include "tst_gui_startup.moc"
