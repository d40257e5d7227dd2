// Files users hand us (model configs, GPU specs, plan files, run reports, matrices and
// tolerances, data set manifests and CSVs): the one place they are opened and parsed. Every
// failure reading or interpreting one is an InputError naming the file, and the key or line
// where known (exit 2, docs/interface.md), never an internal error or a blocked read.
#pragma once

#include <cstdint>
#include <exception>
#include <filesystem>
#include <iosfwd>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "preflight/planner/error.hpp"

namespace preflight {

// Throws InputError(subject, ...) naming `path` unless it is a regular file: missing, a
// folder, or a FIFO, socket or device (a reader would block on it or read forever).
void require_regular_file(const std::filesystem::path& path, const std::string& subject);

// The whole text of a user file, read in chunks so that a file over max_bytes is refused
// (InputError(subject, ...) naming the path, `what` and the limit) once that much is read,
// never held whole. `limit_name` names the constant (limits::kMax...).
std::string read_user_text_file(const std::filesystem::path& path, const std::string& subject, std::int64_t max_bytes,
                                const std::string& what, const std::string& limit_name);
// The same for an open stream (standard input), `shown` naming it in the messages.
std::string read_user_text_stream(std::istream& in, const std::string& shown, const std::string& subject,
                                  std::int64_t max_bytes, const std::string& what, const std::string& limit_name);

// Reads and parses a JSON file (at most limits::kMaxJsonFileBytes). A missing, non-regular,
// oversized or unreadable file, malformed JSON (with nlohmann's line and column) and a number
// beyond the range of a double (1e400, with the key holding it) are InputErrors with subject
// `subject` whose message names the path.
nlohmann::json read_json_file(const std::filesystem::path& path, const std::string& subject);

// The same for JSON text already read (standard input); `where` names it in messages.
nlohmann::json parse_json_text(const std::string& text, const std::string& subject, const std::string& where);

// True for nlohmann::json's exceptions (type_error, out_of_range, parse_error, ...).
bool is_json_exception(const std::exception& e) noexcept;

// The InputError for a nlohmann::json exception raised while interpreting the user file `file`
// (a value of the wrong type, a missing key read with at()): subject `file`, nlohmann's text
// without its "[json.exception...]" prefix.
InputError json_input_error(const std::string& file, const std::exception& e);

// `e` with `file` (a path, or a flag and a path) as its subject in front, unless it names it already.
InputError naming_file(const std::string& file, const InputError& e);

// Runs `read` on a parsed user file: an InputError comes out naming_file(file, ...), a
// nlohmann::json exception as json_input_error(file, ...); anything else stays an internal error.
template <class Read>
auto interpret_user_json(const std::string& file, Read&& read) -> decltype(read()) {
    try {
        return read();
    } catch (const InputError& e) {
        throw naming_file(file, e);
    } catch (const std::exception& e) {
        if (!is_json_exception(e)) throw;
        throw json_input_error(file, e);
    }
}

}  // namespace preflight
