#include "item_models.hpp"

#include <algorithm>
#include <cmath>

#include <QBrush>
#include <QColor>
#include <QFont>

#include "explorer.hpp"
#include "preflight/planner/extensions.hpp"
#include "preflight/planner/format.hpp"
#include "units.hpp"

namespace preflight::gui {

QString groupDigits(std::int64_t v) { return QString::fromStdString(group_digits(v)); }

QString planSummary(const Plan& p) {
    QStringList parts;
    parts << QStringLiteral("seq %1").arg(p.seq) << QStringLiteral("mbs %1").arg(p.mbs)
          << QStringLiteral("grad_acc %1").arg(p.grad_acc) << QStringLiteral("dp %1").arg(p.dp)
          << QStringLiteral("tp %1%2").arg(p.tp).arg(p.sp ? QStringLiteral(" +SP") : QString())
          << QStringLiteral("pp %1").arg(p.pp) << QStringLiteral("ZeRO-%1").arg(p.zero)
          << QStringLiteral("recompute %1").arg(QString::fromUtf8(to_string(p.recompute).data()))
          << QString::fromUtf8(to_string(p.precision).data());
    return parts.join(QStringLiteral(" · "));
}

namespace {
QString sv(std::string_view s) { return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size())); }
bool flat(const QModelIndex& parent) { return !parent.isValid(); }
}  // namespace

// ---------------------------------------------------------------- BreakdownModel

void BreakdownModel::setData(const MemoryReport* report, const std::optional<ReportSide>& measured) {
    beginResetModel();
    valid_ = report != nullptr;
    if (report) {
        predicted_ = report->at_peak;
        peak_ = report->peak_bytes;
        capacity_ = report->capacity_bytes;
    }
    measured_ = measured;
    endResetModel();
}

int BreakdownModel::rowCount(const QModelIndex& parent) const { return flat(parent) && valid_ ? 9 : 0; }
int BreakdownModel::columnCount(const QModelIndex& parent) const { return flat(parent) ? ColumnCount : 0; }

std::optional<std::int64_t> BreakdownModel::predictedBytes(int row) const {
    if (!valid_ || row < 0 || row > 8) return std::nullopt;
    if (row == 8) return peak_;
    return predicted_.*(categories()[static_cast<std::size_t>(row)].member);
}

std::optional<std::int64_t> BreakdownModel::measuredBytes(int row) const {
    if (!measured_ || row < 0 || row > 8) return std::nullopt;
    if (row == 8) return measured_->peak_bytes;
    const auto it = measured_->per_gpu_bytes.find(categories()[static_cast<std::size_t>(row)].key);
    if (it == measured_->per_gpu_bytes.end()) return std::nullopt;
    return it->second;
}

QVariant BreakdownModel::data(const QModelIndex& index, int role) const {
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
    const int row = index.row();
    const auto pred = predictedBytes(row);
    const auto meas = measuredBytes(row);
    const bool peak = row == 8;
    switch (role) {
        case Qt::DisplayRole:
            switch (index.column()) {
                case Category: return peak ? QStringLiteral("Peak (total)") : QString::fromLatin1(categories()[row].label);
                case Predicted: return formatBytes(*pred);
                case PredictedBytes: return groupDigits(*pred);
                case OfCapacity:
                    return capacity_ > 0 ? QString::number(100.0 * static_cast<double>(*pred) / static_cast<double>(capacity_), 'f', 1) + " %"
                                         : QStringLiteral("–");
                case Measured: return meas ? formatBytes(*meas) : QStringLiteral("–");
                case Delta: return meas ? formatBytesDelta(*meas - *pred) : QStringLiteral("–");
            }
            break;
        case BytesRole:
            if (index.column() == Measured) return meas ? QVariant::fromValue<qint64>(*meas) : QVariant();
            if (index.column() == Delta) return meas ? QVariant::fromValue<qint64>(*meas - *pred) : QVariant();
            if (index.column() == Category) return {};
            return QVariant::fromValue<qint64>(*pred);
        case ValueRole:
            if (index.column() == Category) return row;
            if (index.column() == OfCapacity)
                return capacity_ > 0 ? static_cast<double>(*pred) / static_cast<double>(capacity_) : 0.0;
            return data(index, BytesRole);
        case KeyRole: return peak ? QStringLiteral("peak") : QString::fromLatin1(categories()[row].key);
        case Qt::ToolTipRole:
            return peak ? QStringLiteral("Largest allocation at any moment of a steady-state step")
                        : QString::fromLatin1(categories()[row].what);
        case Qt::TextAlignmentRole:
            return index.column() == Category ? QVariant(int(Qt::AlignLeft | Qt::AlignVCenter))
                                              : QVariant(int(Qt::AlignRight | Qt::AlignVCenter));
        case Qt::DecorationRole:
            if (index.column() == Category && !peak) return categories()[row].color;
            break;
        case Qt::FontRole:
            if (peak) {
                QFont f;
                f.setBold(true);
                return f;
            }
            break;
        default: break;
    }
    return {};
}

QVariant BreakdownModel::headerData(int section, Qt::Orientation o, int role) const {
    if (o != Qt::Horizontal || role != Qt::DisplayRole || section < 0 || section >= ColumnCount) return {};
    static const char* names[] = {"Category", "Predicted", "Predicted [B]", "Of capacity", "Measured", "Measured − predicted"};
    return QString::fromUtf8(names[section]);
}

// ---------------------------------------------------------------- SweepModel

void SweepModel::setSweep(const Sweep* sweep, std::int64_t capacity) {
    beginResetModel();
    xs_.clear();
    rows_.clear();
    verdicts_.clear();
    capacity_ = capacity;
    device_need_ = false;
    if (sweep) {
        axis_ = sweep->axis;
        xs_ = sweep->xs;
        current_x_ = sweep->current_x;
        device_need_ = sweep->device_need;
        rows_.resize(xs_.size());
        verdicts_.resize(xs_.size());
        for (std::size_t i = 0; i < xs_.size(); ++i)
            for (std::size_t r = 0; r < 3; ++r) {
                rows_[i][r] = sweep->peaks[r][i];
                verdicts_[i][r] = sweep->verdicts[r][i];
            }
    }
    endResetModel();
}

int SweepModel::rowCount(const QModelIndex& parent) const { return flat(parent) ? static_cast<int>(xs_.size()) : 0; }
int SweepModel::columnCount(const QModelIndex& parent) const { return flat(parent) ? ColumnCount : 0; }

QVariant SweepModel::data(const QModelIndex& index, int role) const {
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
    const auto i = static_cast<std::size_t>(index.row());
    const bool is_x = index.column() == X;
    const auto col = static_cast<std::size_t>(std::max(index.column() - 1, 0));
    const auto& cell = is_x ? std::optional<std::int64_t>() : rows_[i][col];
    // The marks follow the point's verdict (memory_verdict), as `preflight memory` gives it.
    const std::string_view verdict = is_x ? std::string_view() : verdicts_[i][col];
    const bool oom = verdict == "does-not-fit", may_not_fit = verdict == "may-not-fit";
    switch (role) {
        case Qt::DisplayRole:
            if (is_x) return QString::number(xs_[i]);
            if (!cell) return QStringLiteral("invalid");
            return formatBytes(*cell) + (oom           ? QStringLiteral("  (OOM)")
                                         : may_not_fit ? QStringLiteral("  (may not fit)")
                                                       : QString());
        case BytesRole:
            if (is_x || !cell) return {};
            return QVariant::fromValue<qint64>(*cell);
        case ValueRole:
            if (is_x) return QVariant::fromValue<qint64>(xs_[i]);
            if (!cell) return {};
            return QVariant::fromValue<qint64>(*cell);
        case VerdictRole:
            if (is_x || !cell) return {};
            return QString::fromLatin1(verdict.data(), static_cast<qsizetype>(verdict.size()));
        case CurrentRole: return xs_[i] == current_x_;
        case Qt::TextAlignmentRole: return int(Qt::AlignRight | Qt::AlignVCenter);
        case Qt::ForegroundRole:
            if (oom) return QBrush(QColor(0xc0, 0x1c, 0x28));
            if (may_not_fit) return QBrush(QColor(0xb3, 0x6b, 0x00));
            if (!is_x && !cell) return QBrush(Qt::gray);
            break;
        case Qt::FontRole:
            if (xs_[i] == current_x_) {
                QFont f;
                f.setBold(true);
                return f;
            }
            break;
        default: break;
    }
    return {};
}

QVariant SweepModel::headerData(int section, Qt::Orientation o, int role) const {
    if (o != Qt::Horizontal || role != Qt::DisplayRole || section < 0 || section >= ColumnCount) return {};
    // Under a profile that judges the device need, the figure is that need at the top of its
    // range (fit_bytes), not the tensors' peak.
    const QString what = device_need_ ? QStringLiteral("Device need") : QStringLiteral("Peak");
    switch (section) {
        case X: return axis_ == QLatin1String("seq") ? QStringLiteral("seq [tokens]") : QStringLiteral("mbs [sequences]");
        case None: return what + QStringLiteral(", recompute none");
        case Selective: return what + QStringLiteral(", selective");
        case Full: return what + QStringLiteral(", full");
    }
    return {};
}

// ---------------------------------------------------------------- TimelineModel

void TimelineModel::setData(const MemoryReport* report, const std::optional<ReportSide>& measured) {
    beginResetModel();
    rows_.clear();
    unmatched_.clear();
    has_measured_ = false;
    if (report) {
        capacity_ = report->capacity_bytes;
        for (const auto& e : report->timeline_steady) {
            Row r;
            r.phase = QString::fromStdString(describe(e.phase));
            r.kind = e.phase.kind;
            r.steady = e.bytes;
            rows_.push_back(r);
        }
        // First step: same phase sequence; align by description.
        const bool same_shape = report->timeline_first.size() == report->timeline_steady.size();
        for (std::size_t i = 0; i < report->timeline_first.size(); ++i) {
            const QString label = QString::fromStdString(describe(report->timeline_first[i].phase));
            if (same_shape && rows_[i].phase == label) {
                rows_[i].first = report->timeline_first[i].bytes.total();
                continue;
            }
            for (auto& r : rows_)
                if (r.phase == label && !r.first) { r.first = report->timeline_first[i].bytes.total(); break; }
        }
    }
    if (measured && !measured->timeline.empty()) {
        has_measured_ = true;
        const auto& mt = measured->timeline;
        bool any_match = false;
        for (const auto& m : mt) {
            bool matched = false;
            for (auto& r : rows_)
                if (!m.phase.isEmpty() && r.phase == m.phase && !r.measured) {
                    r.measured = m.total_bytes;
                    matched = any_match = true;
                    break;
                }
            if (!matched) unmatched_.push_back(m);
        }
        if (!any_match && mt.size() == rows_.size()) {  // unnamed but same shape: by position
            for (std::size_t i = 0; i < rows_.size(); ++i) rows_[i].measured = mt[i].total_bytes;
            unmatched_.clear();
        }
    }
    endResetModel();
}

int TimelineModel::rowCount(const QModelIndex& parent) const { return flat(parent) ? static_cast<int>(rows_.size()) : 0; }
int TimelineModel::columnCount(const QModelIndex& parent) const { return flat(parent) ? ColumnCount : 0; }

QVariant TimelineModel::data(const QModelIndex& index, int role) const {
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
    const Row& r = rows_[static_cast<std::size_t>(index.row())];
    std::optional<std::int64_t> bytes;
    switch (index.column()) {
        case Steady: bytes = r.steady.total(); break;
        case FirstStep: bytes = r.first; break;
        case ModelStates:
            bytes = r.steady.weights + r.steady.master_weights + r.steady.gradients + r.steady.optimizer_states;
            break;
        case Activations: bytes = r.steady.activations; break;
        case Logits: bytes = r.steady.logits_and_loss; break;
        case BuffersOverhead: bytes = r.steady.buffers + r.steady.overhead; break;
        case Measured: bytes = r.measured; break;
        default: break;
    }
    switch (role) {
        case Qt::DisplayRole:
            if (index.column() == Index) return index.row() + 1;
            if (index.column() == Phase) return r.phase;
            return bytes ? formatBytes(*bytes) : QStringLiteral("–");
        case BytesRole:
            if (bytes) return QVariant::fromValue<qint64>(*bytes);
            return {};
        case ValueRole:
            if (index.column() == Index) return index.row() + 1;
            if (index.column() == Phase) return r.phase;
            if (bytes) return QVariant::fromValue<qint64>(*bytes);
            return {};
        case KeyRole: return static_cast<int>(r.kind);
        case Qt::TextAlignmentRole:
            return index.column() == Phase ? QVariant(int(Qt::AlignLeft | Qt::AlignVCenter))
                                           : QVariant(int(Qt::AlignRight | Qt::AlignVCenter));
        case Qt::ForegroundRole:
            if (bytes && *bytes > capacity_ && (index.column() == Steady || index.column() == FirstStep ||
                                                index.column() == Measured))
                return QBrush(QColor(0xc0, 0x1c, 0x28));
            break;
        default: break;
    }
    return {};
}

QVariant TimelineModel::headerData(int section, Qt::Orientation o, int role) const {
    if (o != Qt::Horizontal || role != Qt::DisplayRole || section < 0 || section >= ColumnCount) return {};
    static const char* names[] = {"#", "Phase", "Steady state", "First step", "Model states", "Activations",
                                  "Logits & loss", "Buffers + overhead", "Measured"};
    return QString::fromUtf8(names[section]);
}

// ---------------------------------------------------------------- CandidatesModel

void CandidatesModel::setRows(std::vector<CandidateRow> rows, bool device_need) {
    beginResetModel();
    rows_ = std::move(rows);
    device_need_ = device_need;
    endResetModel();  // views re-read the headers too
}

int CandidatesModel::rowCount(const QModelIndex& parent) const { return flat(parent) ? static_cast<int>(rows_.size()) : 0; }
int CandidatesModel::columnCount(const QModelIndex& parent) const { return flat(parent) ? ColumnCount : 0; }

QVariant CandidatesModel::data(const QModelIndex& index, int role) const {
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
    const CandidateRow& c = rows_[static_cast<std::size_t>(index.row())];
    const Plan& p = c.plan;
    const bool recommended = index.row() == 0;
    QVariant value;
    QString text;
    switch (index.column()) {
        case Rank: value = index.row() + 1; text = recommended ? QStringLiteral("1 ★") : QString::number(index.row() + 1); break;
        case Dp: value = QVariant::fromValue<qint64>(p.dp); break;
        case Tp: value = QVariant::fromValue<qint64>(p.tp); break;
        case Pp: value = QVariant::fromValue<qint64>(p.pp); break;
        case Sp: value = p.sp ? 1 : 0; text = p.sp ? QStringLiteral("on") : QStringLiteral("off"); break;
        case Zero: value = p.zero; break;
        case Recompute: value = static_cast<int>(p.recompute); text = sv(to_string(p.recompute)); break;
        case Precision: value = static_cast<int>(p.precision); text = sv(to_string(p.precision)); break;
        case Mbs: value = QVariant::fromValue<qint64>(p.mbs); break;
        case GradAcc: value = QVariant::fromValue<qint64>(p.grad_acc); break;
        case Batch:
            value = c.batch_error;
            text = std::abs(c.batch_error) < 5e-5 ? QStringLiteral("exact")
                                                  : QString::asprintf("%+.2f %%", 100.0 * c.batch_error);
            break;
        case Verdict: value = c.verdict; break;
        case Also: {
            const QString ext = QString::fromStdString(extension_flags(p)).trimmed();
            value = ext;
            text = ext.isEmpty() ? QStringLiteral("-") : ext;
            break;
        }
        case Peak: value = QVariant::fromValue<qint64>(c.peak_bytes); text = formatBytes(c.peak_bytes); break;
        case Free:
            value = QVariant::fromValue<qint64>(c.free_bytes);
            text = formatBytes(c.free_bytes);
            break;
        case StepTime: value = c.step_time_s; text = formatSeconds(c.step_time_s); break;
        case TokensPerS: value = c.tokens_per_s; text = groupDigits(std::llround(c.tokens_per_s)) + " tok/s"; break;
        case Mfu: value = c.mfu; text = QString::number(100.0 * c.mfu, 'f', 1) + " %"; break;
    }
    switch (role) {
        case Qt::DisplayRole: return text.isEmpty() ? value.toString() : text;
        case ValueRole: return value;
        case BytesRole:
            if (index.column() == Peak || index.column() == Free) return value;
            return {};
        case CurrentRole: return recommended;
        case Qt::TextAlignmentRole: return int(Qt::AlignRight | Qt::AlignVCenter);
        case Qt::BackgroundRole:
            if (recommended) return QBrush(QColor(0xd7, 0xf5, 0xdd));
            break;
        case Qt::FontRole:
            if (recommended) {
                QFont f;
                f.setBold(true);
                return f;
            }
            break;
        case Qt::ToolTipRole:
            return (recommended ? QStringLiteral("Recommended: ") : QString()) + planSummary(p) +
                   QStringLiteral("\nDouble-click to load this plan into the controls.");
        default: break;
    }
    return {};
}

QVariant CandidatesModel::headerData(int section, Qt::Orientation o, int role) const {
    if (o != Qt::Horizontal || role != Qt::DisplayRole || section < 0 || section >= ColumnCount) return {};
    static const char* names[] = {"Rank", "dp", "tp", "pp", "SP", "ZeRO", "Recompute", "Precision", "mbs", "grad_acc",
                                  "Batch vs target", "Peak", "Free", "Verdict", "Step time", "Throughput", "MFU", "Also"};
    if (section == Peak && device_need_) return QStringLiteral("Device need");
    return QString::fromUtf8(names[section]);
}

// ---------------------------------------------------------------- RejectedModel

void RejectedModel::setRows(std::vector<RejectedRow> rows) {
    beginResetModel();
    rows_ = std::move(rows);
    endResetModel();
}

int RejectedModel::rowCount(const QModelIndex& parent) const { return flat(parent) ? static_cast<int>(rows_.size()) : 0; }
int RejectedModel::columnCount(const QModelIndex& parent) const { return flat(parent) ? ColumnCount : 0; }

QVariant RejectedModel::data(const QModelIndex& index, int role) const {
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
    const RejectedRow& r = rows_[static_cast<std::size_t>(index.row())];
    if (role == Qt::DisplayRole || role == ValueRole || role == Qt::ToolTipRole) {
        switch (index.column()) {
            case Family: return r.family;
            case Reason: return r.reason;
            case Example: return planSummary(r.plan);
        }
    }
    return {};
}

QVariant RejectedModel::headerData(int section, Qt::Orientation o, int role) const {
    if (o != Qt::Horizontal || role != Qt::DisplayRole || section < 0 || section >= ColumnCount) return {};
    static const char* names[] = {"Rejected family", "Reason", "Representative plan"};
    return QString::fromUtf8(names[section]);
}

}  // namespace preflight::gui
