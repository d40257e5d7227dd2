// What the explorer shows for an evaluated plan: the verdict, the summary lines, the
// details table, the step time and the run-report overlay.
#include <cmath>

#include <QFileInfo>
#include <QLabel>
#include <QStatusBar>
#include <QStringList>

#include "charts.hpp"
#include "explorer.hpp"
#include "item_models.hpp"
#include "main_window.hpp"
#include "preflight/planner/extensions.hpp"
#include "preflight/planner/format.hpp"
#include "units.hpp"
#include "widgets.hpp"

namespace preflight::gui {

namespace {

// Rows of the details table for the extensions in use: adapters and frozen base under
// LoRA/QLoRA, host memory when offloading, the pipeline bubble, cp/ep layouts.
QString extensionRows(const Evaluation& ev) {
    const Plan& p = ev.plan;
    const MemoryReport& r = ev.memory;
    QString rows;
    auto row = [&](const QString& name, const QString& value, const QString& note) {
        rows += QStringLiteral("<tr><td>%1</td><td align='right'><b>%2</b></td><td>%3</td></tr>")
                    .arg(name, value, note.toHtmlEscaped());
    };
    if (p.finetune != Finetune::full) {
        const FrozenBase base = frozen_base(ev.model, p);
        row(QStringLiteral("Trainable adapters"), groupDigits(lora_params(ev.model, p.lora)),
            QStringLiteral("rank %1 on %2 (fp32 weights, gradients, optimizer states)")
                .arg(p.lora.rank)
                .arg(QString::fromStdString(lora_targets_to_string(p.lora.targets))));
        row(QStringLiteral("Frozen base (whole model)"), formatBytes(base.total_bytes()),
            p.finetune == Finetune::qlora ? QStringLiteral("NF4 %1 + other parameters %2")
                                                .arg(formatBytes(base.quantized_bytes), formatBytes(base.other_bytes))
                                          : QStringLiteral("16-bit"));
    }
    if (p.offload != Offload::none)
        row(QStringLiteral("Host memory (offload)"), formatBytes(r.host_bytes_per_gpu),
            QStringLiteral("per GPU; %1 per node").arg(formatBytes(r.host_bytes_per_node)));
    if (p.pp > 1)
        row(QStringLiteral("Pipeline bubble"), QStringLiteral("%1 %").arg(100.0 * pipeline_bubble_fraction(p), 0, 'f', 1),
            QStringLiteral("%1 schedule").arg(sv(to_string(p.pp_schedule))));
    if (p.cp > 1) row(QStringLiteral("Context parallel"), QString::number(p.cp), QStringLiteral("ranks per sequence"));
    if (p.ep > 1) row(QStringLiteral("Expert parallel"), QString::number(p.ep), QStringLiteral("expert shards"));
    return rows;
}

// The device need's range in the headline's tooltip (host waiting, every block reused ... running
// ahead, fragmentation at its 95th percentile), with the pace this view takes; empty without one.
QString range_tooltip(const MemoryReport& r) {
    if (!r.device_peak_low_bytes || !r.device_peak_high_bytes || *r.device_peak_low_bytes == *r.device_peak_high_bytes)
        return {};
    QString pace = QString::fromStdString(std::string(to_string(r.host_pace)));
    if (r.host_wait_probability) pace += " (" + QString::fromStdString(format_wait_odds(*r.host_wait_probability)) + ")";
    if (r.unsure_pace_mix) pace += QStringLiteral(" (unsure: the point pool weighs both paces' pools by those odds)");
    if (r.allocator_flush)
        pace += QStringLiteral(" (running ahead, the pool would outgrow the device: the allocator frees its cache and "
                               "the host waits)");
    if (r.need_at_range_top) pace += QStringLiteral("; a host that runs ahead is judged at the top of the range");
    return QStringLiteral("Device need %1 (host waits, every freed block reused) to %2 (host runs ahead, "
                          "fragmentation at its 95th percentile); this view's pace: %3")
        .arg(formatBytes(*r.device_peak_low_bytes), formatBytes(*r.device_peak_high_bytes), pace);
}

}  // namespace

void MainWindow::onEvaluated() {
    const Evaluation* ev = explorer_->current();
    if (!ev) return;
    const MemoryReport& r = ev->memory;
    gbs_label_->setText(QStringLiteral("%1 tokens").arg(groupDigits(ev->plan.global_batch_tokens())));
    showVerdict(r);
    showSummaryLines(*ev);
    showDetails(*ev);
    showThroughput(*ev);
    breakdown_chart_->setSubtitle(QString::fromStdString(describe(r.peak_phase)));
    showRunReportOverlay(r);
    statusBar()->showMessage(QStringLiteral("Evaluated in %1 ms (memory model + %2 sweep points × 3 recompute modes)")
                                 .arg(ev->eval_ms, 0, 'f', 2)
                                 .arg(ev->seq_sweep.xs.size() + ev->mbs_sweep.xs.size()));
}

// The headline figure: what the fit is judged on against the capacity. Under a profile that
// models the caching allocator (nanotron, torchtitan) that is the device need (reserved pool +
// memory outside PyTorch), with the range the pool can take where the profile has one; the
// tensors' peak (allocated + overhead) follows it. Elsewhere the peak.
void MainWindow::showHeadline(const MemoryReport& r, const FrameworkProfile& profile) {
    const std::int64_t fit = fit_bytes(r, profile);
    const double frac = r.capacity_bytes > 0 ? static_cast<double>(fit) / static_cast<double>(r.capacity_bytes) : 0;
    if (!profile.verdict_on_reserved) {
        peak_label_->setText(QStringLiteral("Peak %1 of %2 (%3 %)")
                                 .arg(formatBytes(r.peak_bytes), formatBytes(r.capacity_bytes))
                                 .arg(100.0 * frac, 0, 'f', 1));
        return;
    }
    const bool range =
        r.device_peak_low_bytes && r.device_peak_high_bytes && *r.device_peak_low_bytes != *r.device_peak_high_bytes;
    peak_label_->setText(
        (range ? QStringLiteral("Device need %1 of %2, range %3 … %4 (%5 % at the top)")
                     .arg(formatBytes(r.device_peak_bytes), formatBytes(r.capacity_bytes),
                          formatBytes(*r.device_peak_low_bytes), formatBytes(*r.device_peak_high_bytes))
               : QStringLiteral("Device need %1 of %2 (%5 %)")
                     .arg(formatBytes(r.device_peak_bytes), formatBytes(r.capacity_bytes)))
            .arg(100.0 * frac, 0, 'f', 1) +
        QStringLiteral("\nPeak %1 (tensors + overhead)").arg(formatBytes(r.peak_bytes)));
}

// The verdict as `preflight memory` gives it (cli/cmd_memory.cpp): memory_verdict, the free memory
// of a plan that fits from the same planner call (free_bytes: the device need at the top of its
// range under nanotron), the excess of one that does not from judged_bytes.
void MainWindow::showVerdict(const MemoryReport& r) {
    const Evaluation* ev = explorer_->current();
    const FrameworkProfile profile = ev ? ev->profile : FrameworkProfile{};
    showHeadline(r, profile);
    peak_label_->setToolTip(range_tooltip(r));
    const std::string_view verdict = memory_verdict(r);
    if (verdict == "may-not-fit") {
        verdict_label_->setText(QStringLiteral("May not fit — %1 lies inside the range %2 … %3; it fits only if "
                                               "the host waits for the GPU or the pool fragments less")
                                    .arg(formatBytes(r.capacity_bytes), formatBytes(r.device_peak_low_bytes.value_or(0)),
                                         formatBytes(r.device_peak_high_bytes.value_or(0))));
        verdict_label_->setStyleSheet(QStringLiteral("color: #b36b00;"));
    } else if (verdict != "fits") {
        verdict_label_->setText(QStringLiteral("Does not fit — over by %1")
                                    .arg(formatBytes(judged_bytes(r, profile) - r.capacity_bytes)));
        verdict_label_->setStyleSheet(QStringLiteral("color: #c01c28;"));
    } else if (const double headroom_line = (1.0 - Explorer::kHeadroom) * static_cast<double>(r.capacity_bytes);
               static_cast<double>(fit_bytes(r, profile)) > headroom_line) {
        verdict_label_->setText(QStringLiteral("Fits, inside the %1 % headroom — %2 free")
                                    .arg(100.0 * Explorer::kHeadroom, 0, 'f', 0)
                                    .arg(formatBytes(free_bytes(r, profile))));
        verdict_label_->setStyleSheet(QStringLiteral("color: #b36b00;"));
    } else {
        verdict_label_->setText(QStringLiteral("Fits — %1 free").arg(formatBytes(free_bytes(r, profile))));
        verdict_label_->setStyleSheet(QStringLiteral("color: #1a7f37;"));
    }
}

void MainWindow::showSummaryLines(const Evaluation& ev) {
    const MemoryReport& r = ev.memory;
    const QString phase = QString::fromStdString(describe(r.peak_phase));
    phase_label_->setText(QStringLiteral("Peak phase: <b>%1</b>").arg(phase.toHtmlEscaped()) +
                          (ev.plan.pp > 1 ? QStringLiteral(" (stage %1, %2 layers, %3 micro-batches in flight)")
                                                 .arg(r.pipeline_stage)
                                                 .arg(r.layers_on_stage)
                                                 .arg(r.micro_batches_in_flight)
                                           : QString()));
    first_label_->setText(QStringLiteral("First step: %1 (optimizer moments not yet allocated)")
                              .arg(formatBytes(r.first_step_peak_bytes)));
    first_label_->setToolTip(QStringLiteral("First-step peak at %1")
                                 .arg(QString::fromStdString(describe(r.first_step_peak_phase))));
    model_label_->setText(QStringLiteral("%1 · %2 params%3 · %4, %5 per GPU · %6")
                              .arg(QString::fromStdString(ev.model.name), formatCount(r.params.total),
                                   r.params.active != r.params.total
                                       ? QStringLiteral(" (%1 active)").arg(formatCount(r.params.active))
                                       : QString(),
                                   QString::fromStdString(ev.gpu.display_name.empty() ? ev.gpu.name : ev.gpu.display_name),
                                   formatBytes(ev.gpu.memory_bytes),
                                   ev.plan.gpus() == 1 ? QStringLiteral("1 GPU")
                                                        : QStringLiteral("%1 GPUs").arg(ev.plan.gpus())));
}

void MainWindow::showDetails(const Evaluation& ev) {
    const MemoryReport& r = ev.memory;
    details_label_->setText(
        QStringLiteral("<table cellspacing='0' cellpadding='2'>"
                       "<tr><td>Parameters</td><td align='right'><b>%1</b></td><td>(%2 exactly%3)</td></tr>"
                       "<tr><td>Owned by this GPU before ZeRO</td><td align='right'><b>%4</b></td><td></td></tr>"
                       "<tr><td>Activations per layer</td><td align='right'><b>%5</b></td><td>one micro-batch, recompute %6</td></tr>"
                       "<tr><td>Layers on the peak stage</td><td align='right'><b>%7</b></td><td>stage %8 of %9</td></tr>")
            .arg(formatCount(r.params.total), groupDigits(r.params.total),
                 r.params.active != r.params.total ? QStringLiteral(", %1 active").arg(formatCount(r.params.active)) : QString(),
                 formatCount(r.params_on_gpu), formatBytes(r.activations_per_layer_bytes), sv(to_string(ev.plan.recompute)),
                 QString::number(r.layers_on_stage), QString::number(r.pipeline_stage), QString::number(ev.plan.pp)) +
        QStringLiteral("<tr><td>Micro-batches in flight</td><td align='right'><b>%1</b></td><td>%2</td></tr>"
                       "<tr><td>First-step peak</td><td align='right'><b>%3</b></td><td>%4</td></tr>"
                       "<tr><td>Headroom line</td><td align='right'><b>%5</b></td><td>%6 % of capacity, what the plan search keeps under</td></tr>"
                       "<tr><td>Global batch</td><td align='right'><b>%7</b></td><td>tokens = seq × mbs × grad_acc × dp</td></tr>%8</table>")
            .arg(QString::number(r.micro_batches_in_flight),
                 ev.plan.pp > 1 ? QStringLiteral("pipeline schedule") : QStringLiteral("no pipeline"),
                 formatBytes(r.first_step_peak_bytes),
                 QStringLiteral("at %1, before the optimizer moments exist").arg(QString::fromStdString(describe(r.first_step_peak_phase))),
                 formatBytes(static_cast<std::int64_t>((1.0 - Explorer::kHeadroom) * static_cast<double>(r.capacity_bytes))),
                 QString::number(100.0 * (1.0 - Explorer::kHeadroom), 'f', 0), groupDigits(ev.plan.global_batch_tokens()),
                 extensionRows(ev)));
}

void MainWindow::showThroughput(const Evaluation& ev) {
    const MemoryReport& r = ev.memory;
    if (ev.has_throughput) {
        const Throughput& t = ev.throughput;
        throughput_label_->setText(QStringLiteral("Step %1 · %2 tokens/s · MFU %3 % · HFU %4 %")
                                       .arg(formatSeconds(t.step_time_s))
                                       .arg(groupDigits(std::llround(t.tokens_per_s)))  // as the CLI rounds it
                                       .arg(100.0 * t.mfu, 0, 'f', 1)
                                       .arg(100.0 * t.hfu, 0, 'f', 1));
        QStringList slices;
        for (const auto& s : t.breakdown)
            slices << QStringLiteral("%1 %2").arg(QString::fromStdString(s.name), formatSeconds(s.seconds));
        timeline_note_->setText(QStringLiteral("Predicted step time %1 (%2). Activations per layer: %3.")
                                    .arg(formatSeconds(t.step_time_s), slices.join(QStringLiteral(", ")),
                                         formatBytes(r.activations_per_layer_bytes)));
    } else
    {
        throughput_label_->setText(QStringLiteral("Throughput: n/a (%1)").arg(ev.throughput_note));
        timeline_note_->setText(QStringLiteral("Activations per layer: %1 (one micro-batch, recompute %2).")
                                    .arg(formatBytes(r.activations_per_layer_bytes), sv(to_string(ev.plan.recompute))));
    }
}

void MainWindow::showRunReportOverlay(const MemoryReport& r) {
    const auto& report = explorer_->runReport();
    if (report) {
        QString text = QStringLiteral("<b>Run report</b> %1").arg(QFileInfo(report->path).fileName().toHtmlEscaped());
        if (report->measured && report->measured->peak_bytes)
            text += QStringLiteral(": measured peak %1 vs predicted %2 (%3)")
                        .arg(formatBytes(*report->measured->peak_bytes), formatBytes(r.peak_bytes),
                             formatBytesDelta(*report->measured->peak_bytes - r.peak_bytes));
        if (report->predicted && report->predicted->peak_bytes && *report->predicted->peak_bytes != r.peak_bytes)
            text += QStringLiteral("; the report's own prediction was %1").arg(formatBytes(*report->predicted->peak_bytes));
        if (!report->notes.isEmpty())
            text += QStringLiteral("<br><span style='color:#666'>Missing or skipped: %1</span>")
                        .arg(report->notes.join(QStringLiteral("; ")).toHtmlEscaped());
        overlay_label_->setText(text);
    } else {
        overlay_label_->setText(QStringLiteral(
            "<span style='color:#666'>File → Open run report… overlays measured memory on the bar and timeline.</span>"));
    }
}

}  // namespace preflight::gui
