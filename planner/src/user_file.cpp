#include "preflight/planner/user_file.hpp"

#include <fstream>
#include <iterator>
#include <vector>

#include <nlohmann/json.hpp>

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

}  // namespace

json parse_json_text(const std::string& text, const std::string& subject, const std::string& where) {
    KeyPath path;
    try {
        return json::parse(text, [&path](int, json::parse_event_t event, json& parsed) {
            return path.on_event(event, parsed);
        });
    } catch (const json::out_of_range& e) {
        // Number overflow (406): nlohmann gives no position, the key path names the value.
        const std::string key = path.text();
        throw InputError(subject, where + " is not valid JSON: " + (key.empty() ? "" : "\"" + key + "\": ") +
                                      bare_message(e) + " (beyond the range of a double)");
    } catch (const json::exception& e) {
        throw InputError(subject, where + " is not valid JSON (" + bare_message(e) + ")");
    }
}

json read_json_file(const fs::path& path, const std::string& subject) {
    require_regular_file(path, subject);
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError(subject, "cannot open '" + path.string() + "': permission denied or unreadable");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) throw InputError(subject, "cannot read '" + path.string() + "': read error");
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
