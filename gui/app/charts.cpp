#include "charts.hpp"

#include <algorithm>
#include <cmath>

#include <QAreaSeries>
#include <QBarCategoryAxis>
#include <QBarSet>
#include <QCategoryAxis>
#include <QLegendMarker>
#include <QLineSeries>
#include <QPen>
#include <QScatterSeries>
#include <QStackedBarSeries>
#include <QValueAxis>

#include "item_models.hpp"
#include "units.hpp"

namespace preflight::gui {

namespace {

const QColor kOom(0xc0, 0x1c, 0x28);
const QColor kHeadroom(0xe6, 0x9a, 0x00);

QChart* new_chart() {
    auto* chart = new QChart;
    chart->setAnimationOptions(QChart::NoAnimation);  // every change redraws at once
    chart->legend()->setAlignment(Qt::AlignBottom);
    chart->setMargins(QMargins(6, 6, 6, 6));
    QFont f = chart->titleFont();
    f.setPointSizeF(f.pointSizeF() * 1.15);
    f.setBold(true);
    chart->setTitleFont(f);
    return chart;
}

QLineSeries* threshold_line(const QString& name, const QColor& color, Qt::PenStyle style) {
    auto* s = new QLineSeries;
    s->setName(name);
    QPen pen(color);
    pen.setWidthF(2.0);
    pen.setStyle(style);
    s->setPen(pen);
    return s;
}

// A "nice" upper bound for a GiB axis.
double nice_max(double v) {
    if (v <= 0) return 1;
    const double mag = std::pow(10.0, std::floor(std::log10(v)));
    for (double m : {1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0})
        if (m * mag >= v) return m * mag;
    return 10 * mag;
}

// Round tick spacing (1, 2, 2.5, 5 x 10^k) giving about five intervals up to `top`.
void set_gib_ticks(QValueAxis* axis, double top) {
    const double raw = top / 5.0;
    const double mag = std::pow(10.0, std::floor(std::log10(raw)));
    double step = 10 * mag;
    for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
        if (m * mag >= raw) { step = m * mag; break; }
    axis->setTickType(QValueAxis::TicksDynamic);
    axis->setTickAnchor(0);
    axis->setTickInterval(step);
    axis->setLabelFormat(step < 1 ? QStringLiteral("%.1f") : QStringLiteral("%.0f"));
}

qint64 bytes_at(const QAbstractItemModel* m, int row, int col) {
    const QVariant v = m->index(row, col).data(BytesRole);
    return v.isValid() ? v.toLongLong() : -1;
}

}  // namespace

// ---------------------------------------------------------------- BreakdownChart

BreakdownChart::BreakdownChart(BreakdownModel* model, double headroom, QWidget* parent)
    : QChartView(new_chart(), parent), model_(model), headroom_(headroom) {
    setRenderHint(QPainter::Antialiasing);
    bars_ = new QStackedBarSeries;
    bars_->setBarWidth(0.55);
    for (const auto& c : categories()) {
        auto* set = new QBarSet(QString::fromLatin1(c.label));
        set->setColor(c.color);
        set->setBorderColor(c.color.darker(130));
        sets_ << set;
    }
    auto* rest = new QBarSet(QStringLiteral("Measured, unattributed"));
    rest->setBrush(QBrush(QColor(0x9a, 0x9a, 0x9a), Qt::BDiagPattern));
    rest->setBorderColor(QColor(0x60, 0x60, 0x60));
    sets_ << rest;
    bars_->append(sets_);

    capacity_ = threshold_line(QStringLiteral("GPU capacity (OOM line)"), kOom, Qt::SolidLine);
    headroom_line_ = threshold_line(QStringLiteral("Headroom (%1 % of capacity)").arg(100.0 * (1 - headroom), 0, 'f', 0),
                                    kHeadroom, Qt::DashLine);

    QChart* c = chart();
    c->addSeries(bars_);
    c->addSeries(capacity_);
    c->addSeries(headroom_line_);
    x_ = new QBarCategoryAxis;
    x_lines_ = new QValueAxis;
    x_lines_->setVisible(false);
    y_ = new QValueAxis;
    y_->setTitleText(QStringLiteral("Memory per GPU [GiB]"));
    y_->setLabelFormat(QStringLiteral("%.0f"));
    c->addAxis(x_, Qt::AlignBottom);
    c->addAxis(x_lines_, Qt::AlignBottom);
    c->addAxis(y_, Qt::AlignLeft);
    bars_->attachAxis(x_);
    bars_->attachAxis(y_);
    for (auto* s : {capacity_, headroom_line_}) {
        s->attachAxis(x_lines_);
        s->attachAxis(y_);
    }
    connect(model_, &QAbstractItemModel::modelReset, this, &BreakdownChart::refresh);
    refresh();
}

void BreakdownChart::setSubtitle(const QString& peak_phase) {
    phase_ = peak_phase;
    refresh();
}

void BreakdownChart::refresh() {
    const int rows = model_->rowCount();
    const bool measured = model_->hasMeasured();
    const int ncat = measured ? 2 : 1;
    const int peak_row = model_->peakRow();
    const qint64 pred_peak = rows ? bytes_at(model_, peak_row, BreakdownModel::Predicted) : 0;
    const qint64 meas_peak = rows && measured ? bytes_at(model_, peak_row, BreakdownModel::Measured) : -1;

    QStringList cats;
    cats << QStringLiteral("Predicted: %1").arg(formatBytes(pred_peak));
    qint64 meas_sum = 0;
    for (int r = 0; r < 8 && rows; ++r) meas_sum += std::max<qint64>(0, bytes_at(model_, r, BreakdownModel::Measured));
    if (measured)
        cats << QStringLiteral("Measured: %1").arg(meas_peak >= 0 ? formatBytes(meas_peak) : formatBytes(meas_sum) + " (sum)");

    for (int i = 0; i < sets_.size(); ++i) {
        QBarSet* set = sets_[i];
        QList<qreal> values;
        if (i < 8) {
            values << (rows ? toGiB(std::max<qint64>(0, bytes_at(model_, i, BreakdownModel::Predicted))) : 0.0);
            if (measured) values << toGiB(std::max<qint64>(0, bytes_at(model_, i, BreakdownModel::Measured)));
        } else {
            values << 0.0;
            if (measured) values << toGiB(std::max<qint64>(0, meas_peak - meas_sum));
        }
        if (set->count() != values.size()) {
            set->remove(0, set->count());
            set->append(values);
        } else {
            for (int k = 0; k < values.size(); ++k) set->replace(k, values[k]);
        }
    }
    // The table beside the chart is the colour key of the categories: the legend
    // keeps the threshold lines (and the unattributed part when there is one).
    const auto markers = chart()->legend()->markers(bars_);
    for (int i = 0; i < markers.size(); ++i)
        markers[i]->setVisible(i == 8 && measured && meas_peak > meas_sum);

    x_->setCategories(cats);
    x_lines_->setRange(-0.5, ncat - 0.5);
    const double cap = toGiB(model_->capacityBytes());
    capacity_->replace({QPointF(-0.5, cap), QPointF(ncat - 0.5, cap)});
    headroom_line_->replace({QPointF(-0.5, cap * (1 - headroom_)), QPointF(ncat - 0.5, cap * (1 - headroom_))});
    capacity_->setName(QStringLiteral("OOM line %1").arg(formatBytes(model_->capacityBytes())));
    headroom_line_->setName(QStringLiteral("Headroom %1 %").arg(100.0 * (1 - headroom_), 0, 'f', 0));
    const double top = std::max({cap, toGiB(pred_peak), toGiB(std::max(meas_peak, meas_sum))});
    y_->setRange(0, nice_max(top * 1.05));
    set_gib_ticks(y_, nice_max(top * 1.05));
    QString title = measured ? QStringLiteral("Per-GPU memory at the peak, predicted and measured")
                             : QStringLiteral("Per-GPU memory at the peak");
    if (!phase_.isEmpty())
        title += QStringLiteral("<br><span style='font-weight:normal'>peak phase: %1</span>").arg(phase_.toHtmlEscaped());
    chart()->setTitle(title);
}

// ---------------------------------------------------------------- SweepChart

SweepChart::SweepChart(SweepModel* model, double headroom, QWidget* parent)
    : QChartView(new_chart(), parent), model_(model), headroom_(headroom) {
    setRenderHint(QPainter::Antialiasing);
    const QColor colors[3] = {QColor(0x1f, 0x77, 0xb4), QColor(0x2c, 0xa0, 0x2c), QColor(0x94, 0x67, 0xbd)};
    const auto names = all_recomputes();  // the series follow the recompute modes in order
    const qreal widths[3] = {6.0, 2.5, 2.5};  // none underneath: it often coincides with selective
    QChart* c = chart();
    x_ = new QValueAxis;
    y_ = new QValueAxis;
    y_->setTitleText(QStringLiteral("Peak memory per GPU [GiB]"));
    y_->setLabelFormat(QStringLiteral("%.0f"));
    x_->setLabelFormat(QStringLiteral("%d"));
    c->addAxis(x_, Qt::AlignBottom);
    c->addAxis(y_, Qt::AlignLeft);
    for (int i = 0; i < 3; ++i) {
        auto* s = new QLineSeries;
        s->setName(QString::fromUtf8(to_string(names[i]).data(), static_cast<qsizetype>(to_string(names[i]).size())));
        QPen pen(colors[i]);
        pen.setWidthF(widths[i]);
        s->setPen(pen);
        s->setPointsVisible(i > 0);
        lines_ << s;
        c->addSeries(s);
    }
    capacity_ = threshold_line(QStringLiteral("OOM line"), kOom, Qt::SolidLine);
    headroom_line_ = threshold_line(QStringLiteral("headroom"), kHeadroom, Qt::DashLine);
    current_ = new QScatterSeries;
    current_->setName(QStringLiteral("current"));
    current_->setMarkerSize(13);
    current_->setColor(Qt::black);
    current_->setBorderColor(Qt::white);
    c->addSeries(capacity_);
    c->addSeries(headroom_line_);
    c->addSeries(current_);
    for (auto* s : c->series()) {
        s->attachAxis(x_);
        s->attachAxis(y_);
    }
    connect(model_, &QAbstractItemModel::modelReset, this, &SweepChart::refresh);
    refresh();
}

void SweepChart::refresh() {
    const int rows = model_->rowCount();
    const bool seq = model_->axis() == QLatin1String("seq");
    double max_y = toGiB(model_->capacityBytes());
    QList<QPointF> current;
    for (int k = 0; k < 3; ++k) {
        QList<QPointF> pts;
        for (int r = 0; r < rows; ++r) {
            const qint64 b = bytes_at(model_, r, k + 1);
            if (b < 0) continue;  // the planner rejects this point
            const double x = static_cast<double>(model_->index(r, SweepModel::X).data(ValueRole).toLongLong());
            pts << QPointF(x, toGiB(b));
            if (model_->index(r, 0).data(CurrentRole).toBool()) current << pts.back();
        }
        lines_[k]->replace(pts);
        for (const auto& p : pts) max_y = std::max(max_y, p.y());
    }
    current_->replace(current);
    const double last_x = rows > 0 ? static_cast<double>(model_->index(rows - 1, 0).data(ValueRole).toLongLong()) : 1.0;
    const double x0 = seq ? 0.0 : 0.5;
    const double x1 = seq ? last_x : last_x + 0.5;
    const double cap = toGiB(model_->capacityBytes());
    capacity_->replace({QPointF(x0, cap), QPointF(x1, cap)});
    headroom_line_->replace({QPointF(x0, cap * (1 - headroom_)), QPointF(x1, cap * (1 - headroom_))});
    capacity_->setName(QStringLiteral("OOM %1").arg(formatBytes(model_->capacityBytes())));
    headroom_line_->setName(QStringLiteral("%1 % headroom").arg(100.0 * (1 - headroom_), 0, 'f', 0));
    x_->setRange(x0, x1);
    if (seq) {
        x_->setTickType(QValueAxis::TicksDynamic);
        const double span = x1 - x0;
        double interval = 1024;
        for (double cand : {128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0})
            if (span / cand <= 8) { interval = cand; break; }
        x_->setTickAnchor(0);
        x_->setTickInterval(interval);
    } else {
        x_->setTickType(QValueAxis::TicksDynamic);
        x_->setTickAnchor(1);
        x_->setTickInterval(x1 > 24 ? 4 : (x1 > 10 ? 2 : 1));
    }
    x_->setTitleText(seq ? QStringLiteral("Sequence length [tokens]") : QStringLiteral("Micro-batch size [sequences]"));
    // Clip runaway curves so the OOM line stays readable: at most 3x capacity.
    y_->setRange(0, nice_max(std::min(max_y, 3 * cap) * 1.05));
    set_gib_ticks(y_, nice_max(std::min(max_y, 3 * cap) * 1.05));
    // Under a profile that judges the device need (nanotron, torchtitan) the curves are that need,
    // at the top of its range where it has one: the figure the verdict weighs (fit_bytes).
    const QString what = model_->deviceNeed() ? QStringLiteral("Device need") : QStringLiteral("Peak memory");
    y_->setTitleText(what + QStringLiteral(" per GPU [GiB]"));
    chart()->setTitle(what + (seq ? QStringLiteral(" vs sequence length, by recompute mode")
                                  : QStringLiteral(" vs micro-batch size, by recompute mode")));
}

// ---------------------------------------------------------------- TimelineChart

TimelineChart::TimelineChart(TimelineModel* model, QWidget* parent)
    : QChartView(new_chart(), parent), model_(model) {
    setRenderHint(QPainter::Antialiasing);
    QChart* c = chart();
    x_ = new QCategoryAxis;
    x_->setLabelsPosition(QCategoryAxis::AxisLabelsPositionCenter);
    y_ = new QValueAxis;
    y_->setTitleText(QStringLiteral("Memory per GPU [GiB]"));
    y_->setLabelFormat(QStringLiteral("%.0f"));
    c->addAxis(x_, Qt::AlignBottom);
    c->addAxis(y_, Qt::AlignLeft);

    struct Layer {
        const char* name;
        QColor color;
    };
    const Layer layers[] = {{"Model states (weights, master, grads, optimizer)", QColor(0x1f, 0x77, 0xb4)},
                            {"Buffers + overhead", QColor(0x7f, 0x7f, 0x7f)},
                            {"Activations", QColor(0xff, 0x7f, 0x0e)},
                            {"Logits & loss", QColor(0xd6, 0x27, 0x28)}};
    bounds_ << new QLineSeries(this);  // zero line
    for (const auto& l : layers) {
        auto* upper = new QLineSeries(this);
        auto* area = new QAreaSeries(upper, bounds_.back());
        area->setName(QString::fromLatin1(l.name));
        QColor fill = l.color;
        fill.setAlpha(190);
        area->setBrush(fill);
        area->setPen(QPen(l.color.darker(120), 1.0));
        bounds_ << upper;
        areas_ << area;
        c->addSeries(area);
    }
    first_ = threshold_line(QStringLiteral("First step total (optimizer moments not yet allocated)"), QColor(0x20, 0x20, 0x20),
                            Qt::DashLine);
    capacity_ = threshold_line(QStringLiteral("OOM line"), kOom, Qt::SolidLine);
    measured_ = threshold_line(QStringLiteral("Measured total"), QColor(0x00, 0x9e, 0x9e), Qt::SolidLine);
    measured_points_ = new QScatterSeries;
    measured_points_->setName(QStringLiteral("Measured phases"));
    measured_points_->setMarkerSize(8);
    measured_points_->setColor(QColor(0x00, 0x9e, 0x9e));
    c->addSeries(first_);
    c->addSeries(capacity_);
    c->addSeries(measured_);
    c->addSeries(measured_points_);
    for (auto* s : c->series()) {
        s->attachAxis(x_);
        s->attachAxis(y_);
    }
    connect(model_, &QAbstractItemModel::modelReset, this, &TimelineChart::refresh);
    refresh();
}

void TimelineChart::refresh() {
    const int rows = model_->rowCount();
    const int cols[] = {TimelineModel::ModelStates, TimelineModel::BuffersOverhead, TimelineModel::Activations,
                        TimelineModel::Logits};
    QList<QList<QPointF>> cum(5);
    QList<QPointF> first, measured;
    double max_y = toGiB(model_->capacityBytes());
    for (int r = 0; r < rows; ++r) {
        double acc = 0;
        cum[0] << QPointF(r, 0);
        for (int k = 0; k < 4; ++k) {
            acc += toGiB(std::max<qint64>(0, bytes_at(model_, r, cols[k])));
            cum[k + 1] << QPointF(r, acc);
        }
        max_y = std::max(max_y, acc);
        const qint64 f = bytes_at(model_, r, TimelineModel::FirstStep);
        if (f >= 0) first << QPointF(r, toGiB(f));
        const qint64 m = bytes_at(model_, r, TimelineModel::Measured);
        if (m >= 0) {
            measured << QPointF(r, toGiB(m));
            max_y = std::max(max_y, toGiB(m));
        }
    }
    // Measured phases that name no predicted phase: spread evenly over the step.
    const auto& extra = model_->unmatchedMeasured();
    for (std::size_t i = 0; i < extra.size(); ++i) {
        const double x = extra.size() == 1 ? 0.0 : static_cast<double>(i) * std::max(rows - 1, 0) / static_cast<double>(extra.size() - 1);
        measured << QPointF(x, toGiB(extra[i].total_bytes));
        max_y = std::max(max_y, toGiB(extra[i].total_bytes));
    }
    std::sort(measured.begin(), measured.end(), [](const QPointF& a, const QPointF& b) { return a.x() < b.x(); });
    for (int k = 0; k < 5; ++k) bounds_[k]->replace(cum[k]);
    first_->replace(first);
    measured_->replace(measured);
    measured_points_->replace(measured);
    measured_->setVisible(model_->hasMeasured());
    measured_points_->setVisible(model_->hasMeasured());
    const double cap = toGiB(model_->capacityBytes());
    capacity_->replace({QPointF(-0.5, cap), QPointF(std::max(rows, 1) - 0.5, cap)});
    capacity_->setName(QStringLiteral("OOM line %1").arg(formatBytes(model_->capacityBytes())));

    // Label runs of the same phase kind: forward, output+loss, backward, ...
    for (const QString& l : x_->categoriesLabels()) x_->remove(l);
    x_->setStartValue(-0.5);
    int start = 0;
    QStringList used;
    for (int r = 0; r < rows; ++r) {
        const int kind = model_->index(r, 0).data(KeyRole).toInt();
        const bool last = r + 1 == rows || model_->index(r + 1, 0).data(KeyRole).toInt() != kind;
        if (!last) continue;
        // Short names: single-phase runs get one x unit of axis width.
        static const char* short_names[] = {"start", "forward", "loss", "backward", "reduce", "optim."};
        QString label = QString::fromLatin1(short_names[std::clamp(kind, 0, 5)]);
        if (r > start) label += QStringLiteral(" ×%1").arg(r - start + 1);
        while (used.contains(label)) label += QLatin1Char(' ');
        used << label;
        x_->append(label, r + 0.5);
        start = r + 1;
    }
    x_->setRange(-0.5, std::max(rows, 1) - 0.5);
    y_->setRange(0, nice_max(max_y * 1.05));
    set_gib_ticks(y_, nice_max(max_y * 1.05));
    chart()->setTitle(QStringLiteral("Memory over one step (steady state, the micro-batch that reaches the peak)"));
}

}  // namespace preflight::gui
