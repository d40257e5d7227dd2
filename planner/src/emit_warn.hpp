// Internal to the emitters (emit.cpp, emit_nanotron.cpp, emit_peft.cpp): what a framework's form
// cannot express is said as a warning line, collected when the caller asks for them.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace preflight::emit_detail {

inline void warn(std::vector<std::string>* w, std::string msg) {
    if (w) w->push_back(std::move(msg));
}

}  // namespace preflight::emit_detail
