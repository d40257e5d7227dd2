// YAML text -> ConfigTree through yaml-cpp (YAML::Load; mappings -> objects, sequences ->
// arrays; quoted scalars stay strings), plain scalars resolved as PyYAML's SafeLoader resolves them
// (YAML 1.1; nanotron loads its config with it): decimal, octal (a leading zero: 010 is 8), hex
// and binary integers with underscores allowed, a float only with a dot and, after an e, a signed
// exponent (1.0e-4; 1e-4 and 1.0e4 are text), true/false and yes/no/on/off in three casings,
// null/~, sexagesimal 1:30 (90) and 1:30.5, else strings. Bounded for hostile
// input: at most kMaxDepth levels of nesting and kMaxValues values, so anchors and aliases
// (which yaml-cpp shares, and a walk expands) cannot blow up a small file.
#include <cerrno>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>

#include <yaml-cpp/yaml.h>

#include "preflight/config_readers/config_readers.hpp"
#include "preflight/planner/error.hpp"

namespace preflight {

namespace {

using nlohmann::json;

constexpr int kMaxDepth = 64;
constexpr std::int64_t kMaxValues = 100'000;  // a training config holds hundreds

bool digits(std::string_view s) {
    if (s.empty()) return false;
    for (char c : s)
        if (c < '0' || c > '9') return false;
    return true;
}

// Non-empty, every character in `set` or an underscore (PyYAML's resolver takes underscores
// between digits, and its constructor drops them: 4_096 is 4096).
bool spelled(std::string_view s, std::string_view set) {
    if (s.empty()) return false;
    for (char c : s)
        if (c != '_' && set.find(c) == std::string_view::npos) return false;
    return true;
}

std::string without_underscores(std::string_view s) {
    std::string out;
    for (char c : s)
        if (c != '_') out += c;
    return out;
}

constexpr std::string_view kDecimal = "0123456789", kOctal = "01234567", kHex = "0123456789abcdefABCDEF";

// PyYAML's sexagesimal (base 60) forms (resolver.py, YAML 1.1): an int [1-9][0-9_]* (: [0-5]?[0-9])+
// and a float [0-9][0-9_]* (: [0-5]?[0-9])+ \. [0-9_]* (its constructor: each part times 60 to the
// power of the parts after it, 1:30 = 90, 1:30.5 = 90.5). The value, or nullopt when `s` (unsigned,
// underscores in the first part allowed) is neither; `fraction` says which form to take.
std::optional<double> sexagesimal(std::string_view s, bool fraction) {
    const std::size_t colon = s.find(':');
    if (colon == std::string_view::npos || colon == 0 || !spelled(s.substr(0, colon), kDecimal)) return std::nullopt;
    if (!fraction && s.front() == '0') return std::nullopt;
    std::string_view rest = s.substr(colon + 1), tail;
    if (fraction) {
        const std::size_t dot = rest.find('.');
        if (dot == std::string_view::npos) return std::nullopt;
        tail = rest.substr(dot + 1);
        rest = rest.substr(0, dot);
        if (!tail.empty() && !spelled(tail, kDecimal)) return std::nullopt;
    }
    double value = std::strtod(without_underscores(s.substr(0, colon)).c_str(), nullptr);
    for (std::size_t at = 0; at <= rest.size();) {  // each ":"-separated part: one or two digits, below 60
        const std::size_t end = std::min(rest.find(':', at), rest.size());
        const std::string_view part = rest.substr(at, end - at);
        if (part.empty() || part.size() > 2 || !digits(part) || (part.size() == 2 && part.front() > '5')) return std::nullopt;
        value = value * 60 + std::stoi(std::string(part));
        at = end + 1;
    }
    if (fraction && !tail.empty()) value += std::strtod(("0." + without_underscores(tail)).c_str(), nullptr);
    return value;
}

// PyYAML's int (resolver.py, YAML 1.1): [-+]? then 0b[01_]+, 0x[0-9a-fA-F_]+, 0[0-7_]+ (octal:
// 010 is 8, where YAML 1.2 reads 10), 0, [1-9][0-9_]*, or sexagesimal (1:30 is 90).
// nanotron loads its config with yaml.load(..., Loader=SafeLoader). A leading 0 followed by an 8
// or 9 ("08") is no int there: text, which no integer read takes. Past int64: a float, which
// integer reads refuse. nullopt for text that is no int.
std::optional<json> pyyaml_int(std::string_view s) {
    const bool negative = !s.empty() && s.front() == '-';
    if (!s.empty() && (s.front() == '-' || s.front() == '+')) s.remove_prefix(1);
    int radix = 10;
    std::string_view body = s;
    if (s.size() > 2 && s.substr(0, 2) == "0b" && spelled(s.substr(2), "01")) {
        radix = 2;
        body = s.substr(2);
    } else if (s.size() > 2 && s.substr(0, 2) == "0x" && spelled(s.substr(2), kHex)) {
        radix = 16;
        body = s.substr(2);
    } else if (s.size() > 1 && s.front() == '0' && spelled(s.substr(1), kOctal)) {
        radix = 8;
        body = s.substr(1);
    } else if (const std::optional<double> base60 = sexagesimal(s, false)) {
        const double v = negative ? -*base60 : *base60;
        if (std::abs(v) < 9.0e18) return json(static_cast<std::int64_t>(v));  // exact below 2^53; bounded past it
        return json(v);
    } else if (s != "0" && !(!s.empty() && s.front() >= '1' && s.front() <= '9' && spelled(s, kDecimal))) {
        return std::nullopt;
    }
    std::int64_t v = 0;
    double approx = 0;
    bool overflow = false;
    for (char c : body) {
        if (c == '_') continue;
        const int digit = c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
        approx = approx * radix + digit;
        overflow = overflow || v > (std::numeric_limits<std::int64_t>::max() - digit) / radix;
        if (!overflow) v = v * radix + digit;
    }
    if (overflow) return json(negative ? -approx : approx);
    return json(negative ? -v : v);
}

// PyYAML's float (resolver.py, YAML 1.1): [-+]? [0-9][0-9_]* \. [0-9_]* ( [eE] [-+] [0-9]+ )?, or
// \. [0-9_]+ ( [eE] [-+] [0-9]+ )? without a sign: a dot is needed, and an exponent's sign (1e-4
// and 1.0e4 are text; sexagesimal floats: plain_scalar).
bool plain_float(std::string_view s) {
    const bool signed_mantissa = !s.empty() && (s.front() == '-' || s.front() == '+');
    if (signed_mantissa) s.remove_prefix(1);
    const std::size_t e = s.find_first_of("eE");
    std::string_view mantissa = s.substr(0, e);
    if (e != std::string_view::npos) {
        std::string_view exponent = s.substr(e + 1);
        if (exponent.empty() || (exponent.front() != '-' && exponent.front() != '+')) return false;
        if (!digits(exponent.substr(1))) return false;
    }
    const std::size_t dot = mantissa.find('.');
    if (dot == std::string_view::npos) return false;
    const std::string_view whole = mantissa.substr(0, dot), frac = mantissa.substr(dot + 1);
    if (whole.empty()) return !signed_mantissa && spelled(frac, kDecimal);
    return whole.front() >= '0' && whole.front() <= '9' && spelled(whole, kDecimal) && (frac.empty() || spelled(frac, kDecimal));
}

// PyYAML's bool (resolver.py, YAML 1.1): true/false, yes/no and on/off, each lower, capitalised or upper.
std::optional<bool> plain_bool(std::string_view s) {
    for (std::string_view t : {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"})
        if (s == t) return true;
    for (std::string_view f : {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"})
        if (s == f) return false;
    return std::nullopt;
}

// A plain scalar's value as PyYAML's SafeLoader resolves it.
json plain_scalar(const std::string& s) {
    if (std::optional<json> i = pyyaml_int(s)) return *i;
    if (plain_float(s)) return std::strtod(without_underscores(s).c_str(), nullptr);
    const std::string_view unsigned_part = !s.empty() && (s.front() == '-' || s.front() == '+')
                                               ? std::string_view(s).substr(1) : std::string_view(s);
    if (const std::optional<double> base60 = sexagesimal(unsigned_part, true)) return s.front() == '-' ? -*base60 : *base60;
    if (unsigned_part == ".inf" || unsigned_part == ".Inf" || unsigned_part == ".INF")
        return s.front() == '-' ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    if (s == ".nan" || s == ".NaN" || s == ".NAN") return std::numeric_limits<double>::quiet_NaN();
    if (const std::optional<bool> b = plain_bool(s)) return *b;
    if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
    return s;
}

struct Walk {
    ConfigTree& tree;
    std::int64_t values = 0;

    std::string at(const YAML::Node& node) const {
        const int line = node.Mark().line;
        return line < 0 ? tree.file : tree.file + ":" + std::to_string(line + 1);
    }
    json convert(const YAML::Node& node, const std::string& pointer, int depth);
    json mapping(const YAML::Node& node, const std::string& pointer, int depth);
};

json Walk::mapping(const YAML::Node& node, const std::string& pointer, int depth) {
    json out = json::object();
    for (const auto& kv : node) {
        if (!kv.first.IsScalar())
            throw InputError(at(kv.first), "a mapping key must be a plain value, not a mapping or a sequence");
        const std::string key = kv.first.Scalar();
        const std::string child = pointer + "/" + json_pointer_token(key);
        if (out.contains(key))  // yaml-cpp keeps both; one would be read, the other ignored without a word
            throw InputError(at(kv.first), "'" + key + "' appears twice in the same mapping (first on line " +
                                               std::to_string(tree.lines.at(child)) + "): keep one");
        out[key] = convert(kv.second, child, depth + 1);
        tree.lines[child] = kv.first.Mark().line + 1;  // the line the key was written on
    }
    return out;
}

json Walk::convert(const YAML::Node& node, const std::string& pointer, int depth) {
    if (depth > kMaxDepth)
        throw InputError(at(node), "nested deeper than " + std::to_string(kMaxDepth) + " levels; not a training config");
    if (++values > kMaxValues)
        throw InputError(tree.file, "more than " + std::to_string(kMaxValues) +
                                        " values (anchors and aliases expanding?); not a training config");
    if (!pointer.empty() && node.Mark().line >= 0 && !tree.lines.contains(pointer))
        tree.lines[pointer] = node.Mark().line + 1;
    switch (node.Type()) {
        case YAML::NodeType::Map: return mapping(node, pointer, depth);
        case YAML::NodeType::Sequence: {
            json out = json::array();
            std::size_t i = 0;
            for (const auto& item : node) out.push_back(convert(item, pointer + "/" + std::to_string(i++), depth + 1));
            return out;
        }
        case YAML::NodeType::Scalar: {
            // yaml-cpp tags a plain scalar "?" and a quoted one "!": quoted text stays text.
            if (node.Tag() != "?") return json(node.Scalar());
            json v = plain_scalar(node.Scalar());
            // A number written past a double's range (1e400) is an error, never infinity or null.
            // (.inf and .nan, spelled with an i or an n, are YAML's infinity and not-a-number, which
            // the readers refuse by key.)
            if (v.is_number_float() && !std::isfinite(v.get<double>()) && node.Scalar().find_first_of("iInN") == std::string::npos)
                throw InputError(at(node), "'" + node.Scalar() + "' is beyond the range of a double");
            return v;
        }
        case YAML::NodeType::Null:
        case YAML::NodeType::Undefined: return nullptr;
    }
    return nullptr;
}

}  // namespace

ConfigTree yaml_config_tree(std::string_view text, const std::string& file) {
    ConfigTree tree;
    tree.file = file;
    YAML::Node root;
    try {
        root = YAML::Load(std::string(text));
    } catch (const YAML::Exception& e) {
        const std::string at = e.mark.is_null() ? file : file + ":" + std::to_string(e.mark.line + 1);
        throw InputError(at, "YAML syntax: " + e.msg);
    }
    Walk walk{tree};
    try {
        tree.root = walk.convert(root, "", 0);
    } catch (const YAML::Exception& e) {
        throw InputError(file, "YAML: " + e.msg);
    }
    if (tree.root.is_null()) tree.root = json::object();  // an empty document
    return tree;
}

}  // namespace preflight
