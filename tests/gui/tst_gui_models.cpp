// Every item model of the explorer under QAbstractItemModelTester while the
// inputs change (valid, invalid, new model/GPU, overlay, search), plus the
// models' figures against the planner's own report.
#include <memory>

#include <QAbstractItemModelTester>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QtTest>

#include "explorer.hpp"
#include "item_models.hpp"
#include "preflight/planner/catalog.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/extensions.hpp"
#include "preflight/planner/memory.hpp"
#include "preflight/planner/profiles.hpp"
#include "run_report.hpp"
#include "shell_words.hpp"
#include "units.hpp"

using namespace preflight;
using namespace preflight::gui;

class TestGuiModels : public QObject {
    Q_OBJECT

private:
    std::unique_ptr<Explorer> explorer_;
    std::vector<std::unique_ptr<QAbstractItemModelTester>> testers_;
    std::unique_ptr<QSortFilterProxyModel> proxy_;

    void checkAgainstReport() {
        const Evaluation* ev = explorer_->current();
        QVERIFY(ev);
        const MemoryReport& r = ev->memory;
        BreakdownModel* b = explorer_->breakdownModel();
        QCOMPARE(b->rowCount(), 9);
        for (int row = 0; row < 8; ++row) {
            const auto& c = categories()[static_cast<std::size_t>(row)];
            QCOMPARE(b->index(row, BreakdownModel::Predicted).data(BytesRole).toLongLong(), r.at_peak.*(c.member));
            QCOMPARE(b->index(row, 0).data(KeyRole).toString(), QString::fromLatin1(c.key));
        }
        QCOMPARE(b->index(8, BreakdownModel::Predicted).data(BytesRole).toLongLong(), r.peak_bytes);

        TimelineModel* t = explorer_->timelineModel();
        QCOMPARE(t->rowCount(), static_cast<int>(r.timeline_steady.size()));
        qint64 max_steady = 0;
        for (int row = 0; row < t->rowCount(); ++row)
            max_steady = std::max(max_steady, t->index(row, TimelineModel::Steady).data(BytesRole).toLongLong());
        QCOMPARE(max_steady, r.peak_bytes);

        // The sweep passes through the current plan: same peak as the main evaluation.
        SweepModel* s = explorer_->seqSweepModel();
        const int col = 1 + static_cast<int>(ev->plan.recompute);
        bool found = false;
        for (int row = 0; row < s->rowCount(); ++row) {
            if (!s->index(row, 0).data(CurrentRole).toBool()) continue;
            QCOMPARE(s->index(row, SweepModel::X).data(ValueRole).toLongLong(), ev->plan.seq);
            QCOMPARE(s->index(row, col).data(BytesRole).toLongLong(), r.peak_bytes);
            found = true;
        }
        QVERIFY(found);
        QCOMPARE(explorer_->mbsSweepModel()->currentX(), ev->plan.mbs);
    }

private slots:
    void init() {
        explorer_ = std::make_unique<Explorer>(PREFLIGHT_TEST_DATA_DIR);
        proxy_ = std::make_unique<QSortFilterProxyModel>();
        proxy_->setSourceModel(explorer_->candidatesModel());
        proxy_->setSortRole(ValueRole);
        proxy_->sort(CandidatesModel::Peak, Qt::DescendingOrder);
        // Testers attached before any data arrives: they check every reset and query.
        for (QAbstractItemModel* m : std::initializer_list<QAbstractItemModel*>{
                 explorer_->breakdownModel(), explorer_->seqSweepModel(), explorer_->mbsSweepModel(),
                 explorer_->timelineModel(), explorer_->candidatesModel(), explorer_->rejectedModel(), proxy_.get()})
            testers_.push_back(std::make_unique<QAbstractItemModelTester>(
                m, QAbstractItemModelTester::FailureReportingMode::QtTest));
    }

    void cleanup() {
        testers_.clear();
        proxy_.reset();
        explorer_.reset();
    }

    void modelsFollowPlanChanges() {
        QVERIFY(explorer_->setAll("llama-3-8b", "h100-sxm-80gb", Plan{}));
        checkAgainstReport();
        Plan p;
        p.dp = 8;
        p.zero = ZeroStage{1};
        p.recompute = Recompute::selective;
        QVERIFY(explorer_->setPlan(p));
        checkAgainstReport();
        p.tp = 2;
        p.sp = true;
        p.dp = 4;
        p.zero = ZeroStage{2};
        p.recompute = Recompute::full;
        p.mbs = 4;
        QVERIFY(explorer_->setPlan(p));
        checkAgainstReport();
        p.pp = 4;
        p.grad_acc = 8;
        QVERIFY(explorer_->setPlan(p));
        checkAgainstReport();
        explorer_->setModel("gpt2");  // the plan may not suit the new model; either way a valid result stays
        QVERIFY(explorer_->hasError() || explorer_->current()->model.name == "gpt2");
        Plan g;
        g.attention = AttentionKind::eager;
        g.dropout = 0.1;
        QVERIFY(explorer_->setPlan(g));
        QCOMPARE(QString::fromStdString(explorer_->current()->model.name), QString("gpt2"));
        checkAgainstReport();
        QVERIFY(explorer_->setModel("mixtral-8x7b"));
        QVERIFY(explorer_->setGpu("h200-sxm-141gb"));
        checkAgainstReport();
    }

    void invalidInputKeepsLastResult() {
        QVERIFY(explorer_->setAll("llama-3-8b", "h100-sxm-80gb", Plan{}));
        const qint64 peak = explorer_->breakdownModel()->index(8, BreakdownModel::Predicted).data(BytesRole).toLongLong();
        QSignalSpy errors(explorer_.get(), &Explorer::errorChanged);
        Plan bad;
        bad.tp = 3;
        QVERIFY(!explorer_->setPlan(bad));
        QVERIFY(explorer_->errorMessage().contains("--tp"));
        QVERIFY(explorer_->errorMessage().contains("does not divide"));
        QCOMPARE(errors.count(), 1);
        QCOMPARE(explorer_->breakdownModel()->index(8, BreakdownModel::Predicted).data(BytesRole).toLongLong(), peak);
        QCOMPARE(explorer_->current()->plan.tp, 1);
        QVERIFY(!explorer_->setModel(QString(GUI_TEST_INPUTS) + "/malformed_config.json"));
        QVERIFY(explorer_->errorMessage().contains("malformed_config.json"));
        QCOMPARE(explorer_->modelSpec(), QString("llama-3-8b"));
        QVERIFY(explorer_->setPlan(Plan{}));
        QVERIFY(!explorer_->hasError());
        QCOMPARE(errors.count(), 3);  // tp message, file message, cleared
    }

    void overlayModels() {
        QVERIFY(explorer_->setAll("llama-3-8b", "h100-sxm-80gb", Plan{}));
        QVERIFY(explorer_->openRunReport(QString(GUI_TEST_INPUTS) + "/run_report_full.json"));
        BreakdownModel* b = explorer_->breakdownModel();
        QVERIFY(b->hasMeasured());
        QCOMPARE(b->index(4, BreakdownModel::Measured).data(BytesRole).toLongLong(), 19327352832LL);
        QCOMPARE(b->index(8, BreakdownModel::Measured).data(BytesRole).toLongLong(), 68719476736LL);
        QCOMPARE(b->index(4, BreakdownModel::Measured).data().toString(), formatBytes(19327352832LL));
        QVERIFY(explorer_->timelineModel()->hasMeasured());
        int matched = 0;
        for (int row = 0; row < explorer_->timelineModel()->rowCount(); ++row)
            if (explorer_->timelineModel()->index(row, TimelineModel::Measured).data(BytesRole).isValid()) ++matched;
        QCOMPARE(matched, 6);

        QVERIFY(explorer_->openRunReport(QString(GUI_TEST_INPUTS) + "/run_report_partial.json"));
        QVERIFY(!b->index(0, BreakdownModel::Measured).data(BytesRole).isValid());  // weights not measured
        QCOMPARE(b->index(0, BreakdownModel::Measured).data().toString(), QString("–"));
        QCOMPARE(explorer_->timelineModel()->unmatchedMeasured().size(), std::size_t{2});
        QVERIFY(explorer_->runReport()->notes.join(" ").contains("predicted: missing"));
        QVERIFY(explorer_->runReport()->notes.join(" ").contains("plan: missing"));

        QVERIFY(!explorer_->openRunReport(QString(GUI_TEST_INPUTS) + "/run_report_empty.json"));
        QVERIFY(explorer_->errorMessage().contains("neither"));
        QVERIFY(explorer_->runReport().has_value());  // the previous overlay stays
        explorer_->setRunReport(std::nullopt);
        QVERIFY(!b->hasMeasured());
    }

    void runReportParsing() {
        const auto full = load_run_report(QString(GUI_TEST_INPUTS) + "/run_report_full.json");
        QVERIFY(full.measured && full.predicted && full.plan);
        QCOMPARE(full.model, QString("llama-3-8b"));
        QCOMPARE(full.gpu, QString("h100-sxm-80gb"));
        QCOMPARE(full.measured->per_gpu_bytes.size(), std::size_t{8});
        QCOMPARE(full.measured->timeline.size(), std::size_t{6});
        QVERIFY(full.predicted->per_gpu_bytes.empty());
        const auto partial = load_run_report(QString(GUI_TEST_INPUTS) + "/run_report_partial.json");
        QCOMPARE(partial.measured->per_gpu_bytes.size(), std::size_t{1});
        QCOMPARE(partial.measured->timeline.size(), std::size_t{2});
        QVERIFY(partial.notes.join(" ").contains("1 entries without total_bytes skipped"));
        QVERIFY_THROWS_EXCEPTION(InputError, load_run_report(QString(GUI_TEST_INPUTS) + "/run_report_empty.json"));
        QVERIFY_THROWS_EXCEPTION(InputError, load_run_report(QString(GUI_TEST_INPUTS) + "/malformed_config.json"));
        QVERIFY_THROWS_EXCEPTION(InputError, parse_run_report(nlohmann::json::array()));
        // Audit finding: impossible byte figures were kept ("-8192.0 PiB"; a double past int64
        // was cast, undefined). A figure outside [0, 2^60] is no figure, and the note says so.
        const nlohmann::json bad = {
            {"measured",
             {{"peak_bytes", -5},
              {"per_gpu_bytes", {{"weights", 1e300}, {"gradients", 2.5}, {"optimizer_states", 1e+18}}},
              {"timeline", nlohmann::json::array({{{"total_bytes", 18446744073709551615ULL}}})}}}};
        const auto r = parse_run_report(bad);
        QVERIFY(r.measured.has_value());
        QVERIFY(!r.measured->peak_bytes.has_value());
        QCOMPARE(r.measured->per_gpu_bytes.count("weights"), std::size_t{0});
        QCOMPARE(r.measured->per_gpu_bytes.count("gradients"), std::size_t{0});
        QCOMPARE(r.measured->per_gpu_bytes.at("optimizer_states"), std::int64_t{1000000000000000000});
        QVERIFY(r.measured->timeline.empty());
        QVERIFY(r.notes.join(" ").contains("measured.peak_bytes: not a byte count from 0 to 2^60, ignored"));
    }

    void searchModels() {
        Plan p;
        p.dp = 8;
        QVERIFY(explorer_->setAll("llama-3-8b", "h100-sxm-80gb", p));
        QSignalSpy done(explorer_.get(), &Explorer::searchFinished);
        explorer_->startSearch(8, 1 << 20);
        QVERIFY(done.wait(120000));
        QCOMPARE(done.takeFirst().at(0).toString(), QString());
        CandidatesModel* c = explorer_->candidatesModel();
        QVERIFY(c->rowCount() > 0);
        QVERIFY(c->index(0, 0).data(CurrentRole).toBool());
        QVERIFY(c->index(0, 0).data(Qt::BackgroundRole).isValid());
        for (int row = 0; row < c->rowCount(); ++row) {
            const Plan& cp = c->rows()[static_cast<std::size_t>(row)].plan;
            QCOMPARE(cp.gpus(), 8);
            QCOMPARE(cp.global_batch_tokens(), 1 << 20);
            QVERIFY(c->index(row, CandidatesModel::Peak).data(BytesRole).toLongLong() <=
                    static_cast<qint64>(0.95 * static_cast<double>(c->rows()[0].capacity_bytes)) + 1);
        }
        QCOMPARE(proxy_->rowCount(), c->rowCount());
        QVERIFY(explorer_->rejectedModel()->rowCount() >= 0);
        // The CLI table's columns: batch vs target, verdict, extension flags.
        for (int row = 0; row < c->rowCount(); ++row) {
            QCOMPARE(c->index(row, CandidatesModel::Batch).data().toString(), QString("exact"));  // 2^20 reached
            QCOMPARE(c->index(row, CandidatesModel::Verdict).data().toString(), QString("fits"));
            const std::string ext = extension_flags(c->rows()[static_cast<std::size_t>(row)].plan);
            QCOMPARE(c->index(row, CandidatesModel::Also).data().toString(),
                     ext.empty() ? QString("-") : QString::fromStdString(ext).trimmed());
        }
        QCOMPARE(c->headerData(CandidatesModel::Also, Qt::Horizontal).toString(), QString("Also"));
        // A second search replaces the rows (reset under the tester).
        explorer_->startSearch(16, 1 << 21);
        QVERIFY(done.wait(120000));
        QVERIFY(c->rowCount() > 0);
        QCOMPARE(c->rows()[0].plan.gpus(), 16);
        // Audit finding: the search dropped fp8 scaling, so a rowwise plan's candidates were
        // tensorwise ones (their tokens/s the tensorwise figure). They keep the chosen scaling.
        p.precision = Precision::fp8_mixed;
        p.fp8_scaling = Fp8Scaling::rowwise;
        QVERIFY(explorer_->setAll("llama-3-8b", "h100-sxm-80gb", p));
        explorer_->startSearch(8, 1 << 20);
        QVERIFY(done.wait(120000));
        QVERIFY(c->rowCount() > 0);
        for (const auto& row : c->rows()) QCOMPARE(row.plan.fp8_scaling, Fp8Scaling::rowwise);
        // Audit finding: rows stayed after the model changed, so a double-click loaded a plan
        // searched for another model. A new model, GPU or framework clears them, and says so.
        QSignalSpy cleared(explorer_.get(), &Explorer::searchCleared);
        QVERIFY(explorer_->setPlan(p));  // same set-up: kept
        QVERIFY(c->rowCount() > 0);
        QCOMPARE(cleared.count(), 0);
        QVERIFY(explorer_->setModel("llama-3.2-1b"));
        QCOMPARE(cleared.count(), 1);
        QCOMPARE(c->rowCount(), 0);
        QVERIFY2(explorer_->searchSummary().contains("llama-3-8b | h100-sxm-80gb | megatron"),
                 qPrintable(explorer_->searchSummary()));
        QCOMPARE(c->headerData(CandidatesModel::Peak, Qt::Horizontal).toString(), QString("Peak"));
        // New-user audit: nanotron judges the device need (reserved pool + outside PyTorch +
        // margin), so the column shows that figure, as the CLI's `plan` table does, not the
        // tensor peak 10 GiB under it.
        Plan n;
        n.precision = Precision::bf16_mixed_fp32_grads;  // runs under megatron (current) and nanotron
        QVERIFY(explorer_->setAll("llama-3-8b", "h100-sxm-80gb", n));
        QVERIFY(explorer_->setFramework("nanotron"));
        explorer_->startSearch(8, 1 << 20);
        QVERIFY(done.wait(120000));
        QVERIFY(c->rowCount() > 0);
        QCOMPARE(c->headerData(CandidatesModel::Peak, Qt::Horizontal).toString(), QString("Device need"));
        MemoryOptions opt;
        opt.profile = *profile_by_name("nanotron");
        const ModelConfig model = load_model("llama-3-8b", PREFLIGHT_TEST_DATA_DIR);
        const GpuSpec gpu = gpu_for_profile(load_gpu("h100-sxm-80gb", PREFLIGHT_TEST_DATA_DIR), opt.profile);
        for (const auto& row : c->rows()) {
            const MemoryReport r = evaluate_memory(model, gpu, row.plan, opt);
            QCOMPARE(row.peak_bytes, r.device_peak_bytes);
            QVERIFY(r.device_peak_bytes > r.peak_bytes);
        }
        QVERIFY(explorer_->setFramework("megatron"));
    }

    // A launch script's words as bash hands them over (bash manual, "Quoting"), each case by hand.
    void splitsShellWordsAsBash() {
        auto split = [](const QString& line) {
            QStringList words{QStringLiteral("unchanged")};
            QString why;
            return splitShellWords(line, words, why) ? words : QStringList{QStringLiteral("error: ") + why};
        };
        QCOMPARE(split(QStringLiteral("  4\t2 \n x ")), (QStringList{"4", "2", "x"}));
        QCOMPARE(split(QString()), QStringList{});
        // '...' literal; "..." drops the backslash only before $ ` " \ ; outside, a backslash keeps the next character.
        QCOMPARE(split(QStringLiteral("'a b' \"p \\\"q\\\" \\$r \\n\" z\\ w")),
                 (QStringList{"a b", "p \"q\" $r \\n", "z w"}));
        QCOMPARE(split(QStringLiteral("\"\" ''")), (QStringList{"", ""}));      // empty words
        QCOMPARE(split(QStringLiteral("a\"b\"'c'd")), QStringList{"abcd"});    // one word of three parts
        QCOMPARE(split(QStringLiteral("a\\\nb")), QStringList{"ab"});         // backslash-newline joins
        QCOMPARE(split(QStringLiteral("'x")), QStringList{"error: a single quote is not closed"});
        QCOMPARE(split(QStringLiteral("\"x")), QStringList{"error: a double quote is not closed"});
        QCOMPARE(split(QStringLiteral("x\\")),
                 QStringList{"error: a backslash ends the line: nothing follows it to escape"});
        // As many words as the CLI's --from-arg takes (limits::kMaxScriptArgs, 4,096), not one more.
        QCOMPARE(split(QStringLiteral("w ").repeated(4096)).size(), 4096);
        QVERIFY(split(QStringLiteral("w ").repeated(4097)).front().startsWith("error: 4097 words: at most 4096"));
    }
};

QTEST_MAIN(TestGuiModels)
#include "tst_gui_models.moc"
