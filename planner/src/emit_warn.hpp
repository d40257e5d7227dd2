// Internal to the emitters (emit.cpp, emit_deepspeed.cpp, emit_nanotron.cpp, emit_peft.cpp): what a
// framework's form cannot express is said as a warning line, collected when the caller asks for them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "preflight/planner/model.hpp"
#include "preflight/planner/plan.hpp"

namespace preflight::emit_detail {

// Sequences per optimizer step: micro batch x accumulation x data-parallel size.
inline std::int64_t global_sequences(const Plan& p) { return p.mbs * p.grad_acc * p.dp; }

inline void warn(std::vector<std::string>* w, std::string msg) {
    if (w) w->push_back(std::move(msg));
}

// A sliding window the framework's form does not carry, said where the sequence outruns it.
inline void warn_sliding_window(const ModelConfig& m, const Plan& p, std::vector<std::string>* w,
                                const std::string& framework) {
    if (m.sliding_window > 0 && p.seq > m.sliding_window)
        warn(w, m.name + " attends through a sliding window of " + std::to_string(m.sliding_window) +
                    " keys, which this " + framework + " config does not carry: at seq " + std::to_string(p.seq) +
                    " its attention would see the whole sequence (the plan counts the window)");
}

}  // namespace preflight::emit_detail
