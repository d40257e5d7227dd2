#include "preflight/planner/shown_value.hpp"

#include <cmath>

#include <nlohmann/json.hpp>

#include "preflight/planner/error.hpp"

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
    if (v.is_number_float() && !std::isfinite(v.get<double>())) {  // JSON writes null for them
        const double x = v.get<double>();
        out += std::isnan(x) ? "nan" : x > 0 ? "inf" : "-inf";
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

// True when `s` is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool valid_utf8(std::string_view s) {
    for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        unsigned cp = n == 1 ? c : c & (0x7F >> n);
        for (std::size_t k = 1; k < n; ++k) {
            const auto d = static_cast<unsigned char>(s[i + k]);
            if ((d & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (d & 0x3F);
        }
        const unsigned least[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < least[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += n;
    }
    return true;
}

bool control(char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7F; }

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

void require_printable_name(const std::string& name, const std::string& subject, const std::string& what) {
    if (!valid_utf8(name))
        throw InputError(subject, what + " " + json_text(json(name)) + " is not valid UTF-8; rename it");
    for (char c : name)
        if (control(c))
            throw InputError(subject, what + " " + json_text(json(name)) +
                                          " holds a control character (a newline, tab or escape): it would be "
                                          "echoed into emitted scripts, configs and table headers; rename it");
}

std::string one_line(std::string_view text) {
    std::string s(text);
    for (char& c : s)
        if (control(c)) c = '?';
    return s;
}

}  // namespace preflight
