// Chart views fed from the explorer's item models: each listens to its model's
// reset and redraws from BytesRole/ValueRole data. No planner calls here.
#pragma once

#include <QChartView>
#include <QString>

class QAbstractItemModel;
class QAreaSeries;
class QBarCategoryAxis;
class QBarSet;
class QCategoryAxis;
class QLineSeries;
class QScatterSeries;
class QStackedBarSeries;
class QValueAxis;

namespace preflight::gui {

class BreakdownModel;
class SweepModel;
class TimelineModel;

// (a) Stacked bar of per-GPU memory by category (predicted, and measured when a
// run report is loaded) against the capacity (OOM line) and the headroom line.
class BreakdownChart : public QChartView {
    Q_OBJECT
public:
    BreakdownChart(BreakdownModel* model, double headroom, QWidget* parent = nullptr);
    void setSubtitle(const QString& peak_phase);
    void refresh();

private:
    BreakdownModel* model_;
    double headroom_;
    QString phase_;
    QStackedBarSeries* bars_;
    QList<QBarSet*> sets_;  // 8 categories + measured, unattributed
    QBarCategoryAxis* x_;
    QValueAxis* x_lines_;
    QValueAxis* y_;
    QLineSeries* capacity_;
    QLineSeries* headroom_line_;
};

// (b) Peak memory against seq or mbs for none / selective / full recompute.
class SweepChart : public QChartView {
    Q_OBJECT
public:
    SweepChart(SweepModel* model, double headroom, QWidget* parent = nullptr);
    void refresh();

private:
    SweepModel* model_;
    double headroom_;
    QList<QLineSeries*> lines_;
    QScatterSeries* current_;
    QLineSeries* capacity_;
    QLineSeries* headroom_line_;
    QValueAxis* x_;
    QValueAxis* y_;
};

// (c) Memory over the phases of one step: stacked categories of the steady state,
// the first step's total, the capacity and (when loaded) the measured totals.
class TimelineChart : public QChartView {
    Q_OBJECT
public:
    TimelineChart(TimelineModel* model, QWidget* parent = nullptr);
    void refresh();

private:
    TimelineModel* model_;
    QList<QLineSeries*> bounds_;  // cumulative upper bounds, one per stacked layer (+ zero line)
    QList<QAreaSeries*> areas_;
    QLineSeries* first_;
    QLineSeries* measured_;
    QScatterSeries* measured_points_;
    QLineSeries* capacity_;
    QCategoryAxis* x_;
    QValueAxis* y_;
};

}  // namespace preflight::gui
