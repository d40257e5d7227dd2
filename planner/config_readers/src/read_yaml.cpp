// YAML text -> ConfigTree through yaml-cpp (YAML::Load; mappings -> objects, sequences ->
// arrays; quoted scalars stay strings), plain scalars resolved as PyYAML's SafeLoader resolves them
// (YAML 1.1; nanotron loads its config with it): decimal integers, an integer with a leading zero
// octal (010 is 8), a float only with a dot and, after an e, a signed exponent (1.0e-4; 1e-4 and
// 1.0e4 are text), true/false and yes/no/on/off in three casings, null/~, else strings. Bounded for hostile
// input: at most kMaxDepth levels of nesting and kMaxValues values, so anchors and aliases
// (which yaml-cpp shares, and a walk expands) cannot blow up a small file.
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>

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

// YAML 1.2 core schema int: [-+]? [0-9]+ (hex and octal forms are left as strings).
bool plain_integer(std::string_view s) {
    if (!s.empty() && (s.front() == '-' || s.front() == '+')) s.remove_prefix(1);
    return digits(s);
}

// PyYAML's float (resolver.py, YAML 1.1): [-+]? [0-9]+ \. [0-9]* ( [eE] [-+] [0-9]+ )?, or
// \. [0-9]+ ( [eE] [-+] [0-9]+ )? without a sign; a dot is needed, and an exponent's sign
// (underscores and sexagesimal forms are left as text, which every numeric read refuses).
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
    if (whole.empty()) return !signed_mantissa && digits(frac);
    return digits(whole) && (frac.empty() || digits(frac));
}

// PyYAML's bool (resolver.py, YAML 1.1): true/false, yes/no and on/off, each lower, capitalised or upper.
std::optional<bool> plain_bool(std::string_view s) {
    for (std::string_view t : {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"})
        if (s == t) return true;
    for (std::string_view f : {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"})
        if (s == f) return false;
    return std::nullopt;
}

// An integer written with a leading zero ("010", "-07", "08"), as PyYAML reads it: nanotron loads
// its config with yaml.load(..., Loader=SafeLoader), YAML 1.1, whose int resolver takes
// [-+]?0[0-7_]+ as octal (010 is 8, where YAML 1.2's core schema reads 10) and leaves a leading 0
// followed by an 8 or 9 a string ("08"), which no integer read takes. nullopt for other text.
std::optional<json> leading_zero_integer(std::string_view s) {
    const bool negative = !s.empty() && s.front() == '-';
    if (!s.empty() && (s.front() == '-' || s.front() == '+')) s.remove_prefix(1);
    if (s.size() < 2 || s.front() != '0' || !digits(s)) return std::nullopt;
    if (s.find_first_of("89") != std::string_view::npos) return json(std::string(negative ? "-" : "") + std::string(s));
    std::int64_t v = 0;
    for (char c : s) {
        if (v > (std::numeric_limits<std::int64_t>::max() >> 3)) return json(std::strtod(std::string(s).c_str(), nullptr));
        v = v * 8 + (c - '0');
    }
    return json(negative ? -v : v);
}

// PyYAML's hexadecimal and binary integers, [-+]?0x[0-9a-fA-F]+ and [-+]?0b[01]+ (0x1F is 31);
// nullopt for other text, and for one past int64 (left as text, which integer reads refuse).
std::optional<json> radix_integer(std::string_view s) {
    const bool negative = !s.empty() && s.front() == '-';
    if (!s.empty() && (s.front() == '-' || s.front() == '+')) s.remove_prefix(1);
    if (s.size() < 3 || s[0] != '0' || (s[1] != 'x' && s[1] != 'b')) return std::nullopt;
    const int radix = s[1] == 'x' ? 16 : 2;
    std::int64_t v = 0;
    for (char c : s.substr(2)) {
        const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 99;
        if (digit >= radix || v > (std::numeric_limits<std::int64_t>::max() - digit) / radix) return std::nullopt;
        v = v * radix + digit;
    }
    return json(negative ? -v : v);
}

// A plain scalar's value as PyYAML's SafeLoader resolves it.
json plain_scalar(const std::string& s) {
    if (auto octal = leading_zero_integer(s)) return *octal;
    if (auto other_radix = radix_integer(s)) return *other_radix;
    if (plain_integer(s)) {
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(s.c_str(), &end, 10);
        if (errno != ERANGE) return static_cast<std::int64_t>(v);
        return std::strtod(s.c_str(), nullptr);  // beyond int64: a float, which integer reads refuse
    }
    if (plain_float(s)) return std::strtod(s.c_str(), nullptr);
    if (s == ".inf" || s == ".Inf" || s == ".INF" || s == "+.inf") return std::numeric_limits<double>::infinity();
    if (s == "-.inf" || s == "-.Inf" || s == "-.INF") return -std::numeric_limits<double>::infinity();
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
