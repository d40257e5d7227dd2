// The memory categories of the contract's per_gpu_bytes, in contract order: one table
// that the JSON report, the CLI tables, the explorer and the runtime's report all read.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "preflight/planner/memory.hpp"

namespace preflight {

struct MemoryCategory {
    std::string_view key;          // contract key, e.g. "optimizer_states"
    std::string_view label;        // for people: "Optimizer states"
    std::string_view description;  // one line: what the category holds
    std::int64_t MemoryBreakdown::*member;
};

inline constexpr std::size_t kMemoryCategoryCount = 8;
const std::array<MemoryCategory, kMemoryCategoryCount>& memory_categories();

}  // namespace preflight
