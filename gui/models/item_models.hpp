// Item models the explorer's views and charts read. Each exposes formatted text
// (Qt::DisplayRole, binary units) and the exact figure (BytesRole / ValueRole) so
// charts and tests never parse display strings.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include <QAbstractTableModel>
#include <QString>

#include "preflight/planner/memory.hpp"
#include "preflight/planner/plan.hpp"
#include "run_report.hpp"

namespace preflight::gui {

struct Evaluation;
struct Sweep;

enum Roles {
    BytesRole = Qt::UserRole + 1,  // qint64 bytes (invalid QVariant when none)
    ValueRole,                     // numeric value for sorting / charts (double or qint64)
    KeyRole,                       // contract key of a category row, phase kind of a timeline row
    CurrentRole,                   // bool: row of the current plan (sweeps) / the recommendation
    VerdictRole,                   // memory_verdict of a sweep point: fits | may-not-fit | does-not-fit
};

// "8,030,261,248" (the exact integer, digit-grouped).
QString groupDigits(std::int64_t v);
// "dp 8 · tp 1 · pp 1 · ZeRO-1 · recompute selective · ..." one-line plan summary.
QString planSummary(const Plan& p);

// Per-GPU memory by category at the peak phase (+ a peak row), predicted and measured.
class BreakdownModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { Category, Predicted, PredictedBytes, OfCapacity, Measured, Delta, ColumnCount };
    using QAbstractTableModel::QAbstractTableModel;

    void setData(const MemoryReport* report, const std::optional<ReportSide>& measured);
    int peakRow() const { return 8; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

    std::optional<std::int64_t> predictedBytes(int row) const;
    std::optional<std::int64_t> measuredBytes(int row) const;
    std::int64_t capacityBytes() const { return capacity_; }
    bool hasMeasured() const { return measured_.has_value(); }

private:
    bool valid_ = false;
    MemoryBreakdown predicted_;
    std::int64_t peak_ = 0;
    std::int64_t capacity_ = 0;
    std::optional<ReportSide> measured_;
};

// The memory a fit is judged on (Sweep: the peak, or the device need at the top of its range)
// against seq or mbs for none / selective / full recompute, marked by each point's verdict.
class SweepModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { X, None, Selective, Full, ColumnCount };
    using QAbstractTableModel::QAbstractTableModel;

    void setSweep(const Sweep* sweep, std::int64_t capacity);
    QString axis() const { return axis_; }
    std::int64_t capacityBytes() const { return capacity_; }
    std::int64_t currentX() const { return current_x_; }
    bool deviceNeed() const { return device_need_; }  // the figures are device needs, not peaks

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

private:
    QString axis_ = QStringLiteral("seq");
    std::vector<std::int64_t> xs_;
    std::vector<std::array<std::optional<std::int64_t>, 3>> rows_;
    std::vector<std::array<std::string_view, 3>> verdicts_;
    std::int64_t capacity_ = 0;
    std::int64_t current_x_ = 0;
    bool device_need_ = false;
};

// The phases of one step: steady state, first step, measured (when loaded).
class TimelineModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { Index, Phase, Steady, FirstStep, ModelStates, Activations, Logits, BuffersOverhead, Measured,
                  ColumnCount };
    using QAbstractTableModel::QAbstractTableModel;

    void setData(const MemoryReport* report, const std::optional<ReportSide>& measured);
    std::int64_t capacityBytes() const { return capacity_; }
    // Measured phases that matched no predicted phase (drawn spread over the step).
    const std::vector<MeasuredPhase>& unmatchedMeasured() const { return unmatched_; }
    bool hasMeasured() const { return has_measured_; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

private:
    struct Row {
        QString phase;
        PhaseKind kind = PhaseKind::step_start;
        MemoryBreakdown steady;
        std::optional<std::int64_t> first;
        std::optional<std::int64_t> measured;
    };
    std::vector<Row> rows_;
    std::vector<MeasuredPhase> unmatched_;
    std::int64_t capacity_ = 0;
    bool has_measured_ = false;
};

// One ranked plan from the search, flattened for display.
struct CandidateRow {
    Plan plan;
    std::int64_t peak_bytes = 0;
    std::int64_t capacity_bytes = 0;
    double step_time_s = 0;
    double tokens_per_s = 0;
    double mfu = 0;
    double batch_error = 0;  // (tokens per step - target) / target
    QString verdict;         // memory_verdict: fits | may-not-fit | does-not-fit
    // The free memory as `preflight memory` counts it (free_bytes: under nanotron from the top of
    // the device need's range, so not always capacity - peak_bytes).
    std::int64_t free_bytes = 0;
};

class CandidatesModel : public QAbstractTableModel {
    Q_OBJECT
public:
    // Batch, Verdict and Also as the CLI's table has them (batch vs target, the verdict, the
    // extension flags: a row with --ep 2 no longer looks the same as one without).
    enum Column { Rank, Dp, Tp, Pp, Sp, Zero, Recompute, Precision, Mbs, GradAcc, Batch, Peak, Free, Verdict, StepTime,
                  TokensPerS, Mfu, Also, ColumnCount };
    using QAbstractTableModel::QAbstractTableModel;

    // `device_need`: the rows' peak_bytes are the device need (the framework profile judges the
    // fit on it, as the CLI's `plan` then shows), and the Peak column is headed so.
    void setRows(std::vector<CandidateRow> rows, bool device_need = false);
    const std::vector<CandidateRow>& rows() const { return rows_; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

private:
    std::vector<CandidateRow> rows_;
    bool device_need_ = false;
};

struct RejectedRow {
    QString family;
    QString reason;
    Plan plan;
};

class RejectedModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { Family, Reason, Example, ColumnCount };
    using QAbstractTableModel::QAbstractTableModel;

    void setRows(std::vector<RejectedRow> rows);

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

private:
    std::vector<RejectedRow> rows_;
};

}  // namespace preflight::gui
