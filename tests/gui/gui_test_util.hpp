// Helpers shared by the explorer's QtTest suites.
#pragma once

#include <QCoreApplication>
#include <QProcess>
#include <QStringList>
#include <nlohmann/json.hpp>

#include "preflight/planner/plan.hpp"

namespace preflight::gui::test {

// CLI flags (docs/interface.md) that spell `plan` out in full.
inline QStringList plan_flags(const Plan& p) {
    auto s = [](std::string_view v) { return QString::fromUtf8(v.data(), static_cast<qsizetype>(v.size())); };
    QStringList a{"--seq", QString::number(p.seq), "--mbs", QString::number(p.mbs), "--grad-acc", QString::number(p.grad_acc),
                  "--dp", QString::number(p.dp), "--tp", QString::number(p.tp), "--pp", QString::number(p.pp),
                  "--zero", QString::number(p.zero), "--recompute", s(to_string(p.recompute)),
                  "--precision", s(to_string(p.precision)), "--optimizer", s(to_string(p.optimizer)),
                  "--attention", s(to_string(p.attention)), "--dropout", QString::number(p.dropout, 'g', 17)};
    if (p.sp) a << "--sp";
    if (p.fp8_scaling != Fp8Scaling::tensorwise) a << "--fp8-scaling" << s(to_string(p.fp8_scaling));
    return a;
}

// One run of the CLI binary: its exit code and what it printed.
struct CliRun {
    int code = -1;
    QString out, err;
};

// Runs `preflight memory --model M --gpu G --framework F <plan flags> <extra>`.
inline CliRun run_cli_memory(const QString& model, const QString& gpu, const Plan& p, const QString& framework,
                             const QStringList& extra = {}) {
    QProcess proc;
    QStringList args{"memory", "--model", model, "--gpu", gpu, "--data-dir", PREFLIGHT_TEST_DATA_DIR, "--framework", framework};
    args << plan_flags(p) << extra;
    proc.start(PREFLIGHT_EXE, args);
    CliRun run;
    if (!proc.waitForFinished(60000)) return run;
    run.code = proc.exitStatus() == QProcess::NormalExit ? proc.exitCode() : -1;
    run.out = QString::fromUtf8(proc.readAllStandardOutput());
    run.err = QString::fromUtf8(proc.readAllStandardError());
    return run;
}

// Runs `preflight memory ... --format json` and parses its stdout. Exit code 0
// (fits) or 1 (does not fit) are both a result; anything else is a failure.
inline nlohmann::json cli_memory(const QString& model, const QString& gpu, const Plan& p, QString* error,
                                 const QString& framework = QStringLiteral("megatron")) {
    QProcess proc;
    QStringList args{"memory", "--model", model, "--gpu", gpu, "--data-dir", PREFLIGHT_TEST_DATA_DIR, "--format", "json",
                     "--framework", framework};
    args << plan_flags(p);
    proc.start(PREFLIGHT_EXE, args);
    if (!proc.waitForFinished(60000)) {
        *error = "preflight did not finish";
        return {};
    }
    if (proc.exitCode() != 0 && proc.exitCode() != 1) {
        *error = QString("preflight exited %1: %2").arg(proc.exitCode()).arg(QString::fromUtf8(proc.readAllStandardError()));
        return {};
    }
    return nlohmann::json::parse(proc.readAllStandardOutput().toStdString());
}

}  // namespace preflight::gui::test
