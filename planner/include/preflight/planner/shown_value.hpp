// Values out of user files as messages show them: bounded. A value shown in an error message is
// never walked deeper than a few levels nor printed longer than a line (a file may hold a value
// nested 64 levels or an array of a million numbers).
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace preflight {

// The most characters shown_json writes for an array or object before "..." and its size.
inline constexpr std::size_t kShownValueChars = 60;

// `v` for a message: a number, true, false or null as JSON writes it; a string quoted with its
// control characters escaped (invalid UTF-8 replaced), cut after kShownValueChars characters; an
// array or object as its first values, at most 3 levels deep ([[[...]]]) and kShownValueChars
// characters, then "..." and how many values it holds.
std::string shown_json(const nlohmann::json& v);

}  // namespace preflight
