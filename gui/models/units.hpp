// Display helpers shared by the models and the widgets: binary byte units and
// the memory categories in contract order. Pure presentation, no formulas.
#pragma once

#include <array>
#include <cstdint>

#include <QColor>
#include <QString>

#include "preflight/planner/memory.hpp"
#include "preflight/planner/memory_categories.hpp"

namespace preflight::gui {

// "14.96 GiB", "512.0 MiB", "12.0 KiB", "0 B" (binary units).
QString formatBytes(std::int64_t bytes);
// "14.96 GiB" with a sign: "+1.20 GiB", "-512.0 MiB".
QString formatBytesDelta(std::int64_t bytes);
// Bytes as GiB for chart axes.
inline double toGiB(std::int64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(kGiB); }
// "8.03 B", "124.4 M" parameters.
QString formatCount(std::int64_t n);
// "1.234 s", "85.2 ms".
QString formatSeconds(double s);

// One memory category of the contract's per_gpu_bytes (memory_categories()) with its colour.
struct Category {
    const char* key = nullptr;    // contract key, e.g. "optimizer_states"
    const char* label = nullptr;  // "Optimizer states"
    const char* what = nullptr;   // tooltip
    std::int64_t MemoryBreakdown::*member = nullptr;
    QColor color;
};
const std::array<Category, kMemoryCategoryCount>& categories();

}  // namespace preflight::gui
