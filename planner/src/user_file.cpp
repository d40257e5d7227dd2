#include "preflight/planner/user_file.hpp"

#include <algorithm>
#include <fstream>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "preflight/planner/limits.hpp"

namespace preflight {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {
// 'path' (built piecewise: GCC 12 warns, -Wrestrict, on "'" + string + "'").
std::string quoted(const fs::path& path) {
    std::string s = "'";
    s += path.string();
    s += '\'';
    return s;
}
}  // namespace

void require_regular_file(const fs::path& path, const std::string& subject) {
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (st.type() == fs::file_type::regular) return;
    const std::string name = quoted(path);
    if (st.type() == fs::file_type::not_found || st.type() == fs::file_type::none)
        throw InputError(subject, "cannot open " + name + ": no such file");
    if (st.type() == fs::file_type::directory) throw InputError(subject, "cannot open " + name + ": it is a folder");
    throw InputError(subject, "cannot open " + name + ": not a regular file (a FIFO, socket or device is refused)");
}

namespace {

// Where the parser is: the key path of the value being read ("efficiency.gemm_max_fraction_of_peak",
// "runs[2].plan.seq"), kept by a parser callback so an overflowing number can be named.
class KeyPath {
public:
    bool on_event(json::parse_event_t event, const json& parsed) {
        switch (event) {
            case json::parse_event_t::object_start: frames_.push_back({false, "", 0}); break;
            case json::parse_event_t::array_start: frames_.push_back({true, "", 0}); break;
            case json::parse_event_t::key: frames_.back().key = parsed.get<std::string>(); break;
            case json::parse_event_t::object_end:
            case json::parse_event_t::array_end:
                frames_.pop_back();
                value_done();
                break;
            case json::parse_event_t::value: value_done(); break;
        }
        return true;
    }
    std::string text() const {
        std::string s;
        for (const Frame& f : frames_) {
            if (f.array)
                s += "[" + std::to_string(f.index) + "]";
            else if (!f.key.empty())
                s += (s.empty() ? "" : ".") + f.key;
        }
        return s;
    }

private:
    struct Frame {
        bool array;
        std::string key;
        std::size_t index;
    };
    void value_done() {
        if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
    }
    std::vector<Frame> frames_;
};

// nlohmann's message without its "[json.exception.type_error.302] " prefix.
std::string bare_message(const std::exception& e) {
    const std::string s = e.what();
    const auto close = s.find("] ");
    return s.rfind("[json.exception.", 0) == 0 && close != std::string::npos ? s.substr(close + 2) : s;
}

// The line of the number `token` nlohmann could not hold: its first occurrence after ':', ','
// or '[' (an earlier number token alike would have stopped the parser first); 0 if not found.
std::size_t line_of_number(const std::string& text, const std::string& token) {
    for (std::size_t at = text.find(token); !token.empty() && at != std::string::npos; at = text.find(token, at + 1)) {
        const std::size_t before = text.find_last_not_of(" \t\r\n", at == 0 ? 0 : at - 1);
        if (at == 0 || before == std::string::npos || std::string_view(":,[").find(text[before]) != std::string_view::npos)
            return 1 + static_cast<std::size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
    }
    return 0;
}

// "number overflow parsing '1e400'" -> "1e400".
std::string overflowing_token(const std::string& message) {
    const auto open = message.find('\'');
    const auto close = message.rfind('\'');
    return open != std::string::npos && close > open ? message.substr(open + 1, close - open - 1) : "";
}

// The 1-based line where `text` opens its (limit + 1)-th nested array or object, strings skipped.
std::size_t line_past_depth(const std::string& text, int limit) {
    std::size_t line = 1;
    int depth = 0;
    bool in_string = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (c == '\n') ++line;
        if (in_string) {
            if (c == '\\') ++i;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > limit) return line;
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
    return 0;
}

// The refusal of a value nested deeper than limits::kMaxJsonDepth, naming where and the key
// holding it (its first 60 characters: the path itself is up to 64 levels long).
InputError too_deep(const std::string& text, const std::string& subject, const std::string& where, std::string key) {
    if (key.size() > 60) key = key.substr(0, 60) + "...";
    const std::size_t line = line_past_depth(text, limits::kMaxJsonDepth);
    return InputError(subject, where + (line ? " line " + std::to_string(line) : "") +
                                   " nests arrays and objects deeper than " + std::to_string(limits::kMaxJsonDepth) +
                                   " levels (limits::kMaxJsonDepth)" + (key.empty() ? "" : " in \"" + key + "\"") +
                                   "; no file Preflight reads nests more than a few");
}

}  // namespace

json parse_json_text(const std::string& text, const std::string& subject, const std::string& where) {
    KeyPath path;
    try {
        return json::parse(text, [&](int depth, json::parse_event_t event, json& parsed) {
            // depth: the arrays and objects open around this one (0 for the top-level value).
            const bool opens = event == json::parse_event_t::object_start || event == json::parse_event_t::array_start;
            if (opens && depth >= limits::kMaxJsonDepth) throw too_deep(text, subject, where, path.text());
            return path.on_event(event, parsed);
        });
    } catch (const json::out_of_range& e) {
        // Number overflow (406): nlohmann gives no position, the key path names the value.
        const std::string key = path.text(), message = bare_message(e);
        const std::size_t line = line_of_number(text, overflowing_token(message));
        throw InputError(subject, where + (line ? " line " + std::to_string(line) : "") + " is not valid JSON: " +
                                      (key.empty() ? "" : "\"" + key + "\": ") + message + " (beyond the range of a double)");
    } catch (const json::exception& e) {
        throw InputError(subject, where + " is not valid JSON (" + bare_message(e) + ")");
    }
}

std::string read_user_text_file(const fs::path& path, const std::string& subject, std::int64_t max_bytes,
                                const std::string& what, const std::string& limit_name) {
    require_regular_file(path, subject);
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError(subject, "cannot open '" + path.string() + "': permission denied or unreadable");
    return read_user_text_stream(in, quoted(path), subject, max_bytes, what, limit_name);
}

std::string read_user_text_stream(std::istream& in, const std::string& shown, const std::string& subject,
                                  std::int64_t max_bytes, const std::string& what, const std::string& limit_name) {
    std::string text;
    char buf[65536];
    while (in.read(buf, sizeof buf) || in.gcount() > 0) {
        text.append(buf, static_cast<std::size_t>(in.gcount()));
        if (static_cast<std::int64_t>(text.size()) > max_bytes)
            throw InputError(subject, shown + " is over " + std::to_string(max_bytes) + " bytes (" + limit_name +
                                          "); is it really " + what + "?");
    }
    if (in.bad()) throw InputError(subject, "cannot read " + shown + ": read error");
    return text;
}

json read_json_file(const fs::path& path, const std::string& subject) {
    const std::string text =
        read_user_text_file(path, subject, limits::kMaxJsonFileBytes, "a JSON file for Preflight", "limits::kMaxJsonFileBytes");
    return parse_json_text(text, subject, quoted(path));
}

bool is_json_exception(const std::exception& e) noexcept { return dynamic_cast<const json::exception*>(&e) != nullptr; }

InputError json_input_error(const std::string& file, const std::exception& e) {
    return InputError(file, bare_message(e));
}

InputError naming_file(const std::string& file, const InputError& e) {
    if (e.subject().find(file) != std::string::npos) return e;
    return InputError(file, e.what());
}

}  // namespace preflight
