// Internal to the emitters (emit.cpp, emit_deepspeed.cpp, emit_nanotron.cpp, emit_peft.cpp): what a
// framework's form cannot express is said as a warning line, collected when the caller asks for them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "preflight/planner/plan.hpp"

namespace preflight::emit_detail {

// Sequences per optimizer step: micro batch x accumulation x data-parallel size.
inline std::int64_t global_sequences(const Plan& p) { return p.mbs * p.grad_acc * p.dp; }

inline void warn(std::vector<std::string>* w, std::string msg) {
    if (w) w->push_back(std::move(msg));
}

}  // namespace preflight::emit_detail
