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

const std::array<Category, kMemoryCategoryCount>& categories() {
    // Contract order (memory_categories()); one colour each.
    static const std::array<QColor, kMemoryCategoryCount> colors{{
        QColor(0x1f, 0x77, 0xb4), QColor(0x6b, 0xae, 0xd6), QColor(0x2c, 0xa0, 0x2c), QColor(0x98, 0xdf, 0x8a),
        QColor(0xff, 0x7f, 0x0e), QColor(0xd6, 0x27, 0x28), QColor(0x94, 0x67, 0xbd), QColor(0x7f, 0x7f, 0x7f)}};
    static const std::array<Category, kMemoryCategoryCount> list = [] {
        std::array<Category, kMemoryCategoryCount> l{};
        for (std::size_t i = 0; i < kMemoryCategoryCount; ++i) {
            const MemoryCategory& c = memory_categories()[i];
            // The planner's names are string literals, so .data() is NUL-terminated.
            l[i] = {c.key.data(), c.label.data(), c.description.data(), c.member, colors[i]};
        }
        return l;
    }();
    return list;
}

}  // namespace preflight::gui
