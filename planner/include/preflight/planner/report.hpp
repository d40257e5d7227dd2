// JSON forms of plans and memory reports (docs/interface.md, schema_version 1).
#pragma once

#include <nlohmann/json.hpp>

#include "preflight/planner/memory.hpp"

namespace preflight {

inline constexpr int kSchemaVersion = 1;

// Every plan flag, resolved, under its contract key (seq, mbs, grad_acc, dp, tp,
// pp, sp, zero, recompute, precision, optimizer, attention, dropout).
nlohmann::json plan_to_json(const Plan& plan);
// Reads a plan object (as written by plan_to_json); absent keys keep `defaults`.
// Throws InputError naming the key on a bad value.
Plan plan_from_json(const nlohmann::json& j, Plan defaults = {});

nlohmann::json breakdown_to_json(const MemoryBreakdown& b);
// The contract's "memory" object plus extra detail (stage, inventory, first step, timeline).
nlohmann::json memory_to_json(const MemoryReport& r);
// The whole `preflight memory --format json` document; `framework` is the profile it was judged
// under (--framework), so a plan read back from it is judged the same way.
nlohmann::json memory_document(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan,
                               const MemoryReport& r, const std::string& framework);

}  // namespace preflight
