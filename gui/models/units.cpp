#include "units.hpp"

#include "preflight/planner/format.hpp"

namespace preflight::gui {

QString formatBytes(std::int64_t bytes) { return QString::fromStdString(format_bytes(bytes)); }

QString formatBytesDelta(std::int64_t bytes) {
    return (bytes > 0 ? QStringLiteral("+") : QString()) + formatBytes(bytes);
}

QString formatCount(std::int64_t n) { return QString::fromStdString(format_count(n)); }

QString formatSeconds(double s) {
    if (s >= 1.0) return QString::number(s, 'f', 3) + " s";
    return QString::number(s * 1e3, 'f', 1) + " ms";
}

const std::array<Category, 8>& categories() {
    static const std::array<Category, 8> list{{
        {"weights", "Weights", "Compute copy of the parameters this GPU holds", &MemoryBreakdown::weights,
         QColor(0x1f, 0x77, 0xb4)},
        {"master_weights", "Master weights", "fp32 copy the optimizer updates", &MemoryBreakdown::master_weights,
         QColor(0x6b, 0xae, 0xd6)},
        {"gradients", "Gradients", "Gradient buffers", &MemoryBreakdown::gradients, QColor(0x2c, 0xa0, 0x2c)},
        {"optimizer_states", "Optimizer states", "AdamW moments / SGD momentum",
         &MemoryBreakdown::optimizer_states, QColor(0x98, 0xdf, 0x8a)},
        {"activations", "Activations", "Saved for backward, at the peak phase", &MemoryBreakdown::activations,
         QColor(0xff, 0x7f, 0x0e)},
        {"logits_and_loss", "Logits & loss", "Output logits and cross-entropy buffers at the peak",
         &MemoryBreakdown::logits_and_loss, QColor(0xd6, 0x27, 0x28)},
        {"buffers", "Buffers", "Communication buckets, gathers, tables", &MemoryBreakdown::buffers,
         QColor(0x94, 0x67, 0xbd)},
        {"overhead", "Overhead", "CUDA context and library workspaces", &MemoryBreakdown::overhead,
         QColor(0x7f, 0x7f, 0x7f)},
    }};
    return list;
}

}  // namespace preflight::gui
