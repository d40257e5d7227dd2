// Values and names out of user files as messages and outputs show them: bounded and printable.
// A value shown in an error message is never walked deeper than a few levels nor printed longer
// than a line (a file may hold a value nested 64 levels or an array of a million numbers); a
// name echoed into an emitted script, config or table header holds no control character.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace preflight {

// The most characters shown_json writes for an array or object before "..." and its size.
inline constexpr std::size_t kShownValueChars = 60;

// `v` for a message: a number, true, false or null as JSON writes it; a string quoted with its
// control characters escaped (invalid UTF-8 replaced), cut after kShownValueChars characters; an
// array or object as its first values, at most 3 levels deep ([[[...]]]) and kShownValueChars
// characters, then "..." and how many values it holds.
std::string shown_json(const nlohmann::json& v);

// Refuses (InputError(subject, ...)) a name that holds a control character (a newline, a tab,
// an escape sequence, DEL) or is not valid UTF-8: model and GPU names are echoed into emitted
// launch scripts, configs and their comments, table headers and JSON documents. `what` says what
// the name is ("the model's name (its file's name)").
void require_printable_name(const std::string& name, const std::string& subject, const std::string& what);

// `text` with every control character (and DEL) replaced by '?': safe on one comment line.
std::string one_line(std::string_view text);

}  // namespace preflight
