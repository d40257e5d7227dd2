#include "preflight/planner/shown_value.hpp"

#include <nlohmann/json.hpp>

namespace preflight {

using nlohmann::json;

namespace {

constexpr int kShownDepth = 3;

std::string json_text(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); }

// A string value quoted, its first kShownValueChars bytes only (a cut UTF-8 sequence is replaced).
std::string shown_string(const std::string& s) {
    if (s.size() <= kShownValueChars) return json_text(json(s));
    std::string head = json_text(json(s.substr(0, kShownValueChars)));
    head.insert(head.size() - 1, "...");
    return head;
}

// Appends `v` to `out`, an array's or object's values only while `out` is at most
// kShownValueChars long; `cut` is set where values were left out.
void append_shown(const json& v, int depth, std::string& out, bool& cut) {
    if (v.is_string()) {
        out += shown_string(v.get_ref<const std::string&>());
        return;
    }
    if (!v.is_array() && !v.is_object()) {
        out += json_text(v);
        return;
    }
    const bool array = v.is_array();
    if (v.empty() || depth >= kShownDepth) {
        out += v.empty() ? (array ? "[]" : "{}") : (array ? "[...]" : "{...}");
        return;
    }
    out += array ? '[' : '{';
    for (auto it = v.begin(); it != v.end(); ++it) {
        if (it != v.begin()) out += ", ";
        if (out.size() > kShownValueChars) {
            out += "...";
            cut = true;
            break;
        }
        if (!array) out += shown_string(it.key()) + ": ";
        append_shown(*it, depth + 1, out, cut);
    }
    out += array ? ']' : '}';
}

// Drops a trailing partial UTF-8 sequence of `s`.
void trim_to_code_point(std::string& s) {
    std::size_t back = 0;
    while (back < 4 && back < s.size() && (static_cast<unsigned char>(s[s.size() - 1 - back]) & 0xC0) == 0x80) ++back;
    if (back < s.size() && static_cast<unsigned char>(s[s.size() - 1 - back]) >= 0xC0) s.resize(s.size() - 1 - back);
}

}  // namespace

std::string shown_json(const json& v) {
    std::string out;
    bool cut = false;
    append_shown(v, 0, out, cut);
    if (out.size() > 2 * kShownValueChars) {  // one long value inside: cut where it passes the bound
        out.resize(kShownValueChars);
        trim_to_code_point(out);
        out += "...";
        cut = true;
    }
    if (cut && v.is_array()) out += " (an array of " + std::to_string(v.size()) + " values)";
    if (cut && v.is_object()) out += " (an object of " + std::to_string(v.size()) + " keys)";
    return out;
}

}  // namespace preflight
