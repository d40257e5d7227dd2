// TOML text -> ConfigTree through toml++ (toml::parse; tables -> objects, arrays -> arrays,
// integers -> int64, floats -> double, booleans, strings; dates and times -> their TOML text).
// Bounded for hostile input like the YAML reader: at most kMaxDepth levels of tables and arrays
// (toml++ itself stops nested values at 256 but not dotted keys, whose tables it builds and
// frees recursively: a 100,000-part key overflows the stack).
#include <sstream>

#include <toml++/toml.h>

#include "preflight/config_readers/config_readers.hpp"
#include "preflight/planner/error.hpp"

namespace preflight {

namespace {

using nlohmann::json;

constexpr int kMaxDepth = 64;

// Refuses a key of more than kMaxDepth dotted parts ([a.b.c] headers, a.b.c = 1) before toml++
// parses it. Dots inside quotes and the lines of multi-line strings do not count.
void check_key_depth(std::string_view text, const std::string& file) {
    bool in_multiline = false;
    int line = 0;
    std::size_t start = 0;
    while (start <= text.size()) {
        std::size_t end = text.find('\n', start);
        if (end == std::string_view::npos) end = text.size();
        const std::string_view l = text.substr(start, end - start);
        ++line;
        start = end + 1;
        int dots = 0;
        char quote = 0;
        for (std::size_t i = 0; i < l.size() && !in_multiline; ++i) {
            const char c = l[i];
            if (quote != 0) quote = c == quote ? 0 : quote;
            else if (c == '"' || c == '\'') quote = c;
            else if (c == '.') ++dots;
            else if (c == '=' || c == '#') break;  // the value (or a comment) follows: only the key counts
        }
        for (const char* triple : {"\"\"\"", "\'\'\'"}) {
            std::size_t n = 0;
            for (std::size_t at = l.find(triple); at != std::string_view::npos; at = l.find(triple, at + 3)) ++n;
            if (n % 2 == 1) in_multiline = !in_multiline;
        }
        if (dots >= kMaxDepth)
            throw InputError(file + ":" + std::to_string(line),
                             "a key nested deeper than " + std::to_string(kMaxDepth) + " levels; not a training config");
        if (end == text.size()) break;
    }
}

std::string pointer_token(std::string_view key) {
    std::string s;
    for (char c : key) {
        if (c == '~') s += "~0";
        else if (c == '/') s += "~1";
        else s += c;
    }
    return s;
}

void note_line(ConfigTree& tree, const std::string& pointer, const toml::node& node) {
    const auto line = node.source().begin.line;
    if (line > 0) tree.lines[pointer] = static_cast<int>(line);
}

// A date, time or date-time as the TOML text that wrote it.
template <typename T>
json as_text(const T& value) {
    std::ostringstream os;
    os << value;
    return os.str();
}

json convert(const toml::node& node, const std::string& pointer, ConfigTree& tree, int depth) {
    note_line(tree, pointer, node);
    if (depth > kMaxDepth)
        throw InputError(tree.file + ":" + std::to_string(node.source().begin.line),
                         "nested deeper than " + std::to_string(kMaxDepth) + " levels; not a training config");
    if (const toml::table* t = node.as_table()) {
        json out = json::object();
        for (const auto& [key, child] : *t) {
            const std::string child_pointer = pointer + "/" + pointer_token(key.str());
            out[std::string(key.str())] = convert(child, child_pointer, tree, depth + 1);
            // A key's line: where the key was written (a [table] header, `key = value`).
            if (key.source().begin.line > 0) tree.lines[child_pointer] = static_cast<int>(key.source().begin.line);
        }
        return out;
    }
    if (const toml::array* a = node.as_array()) {
        json out = json::array();
        for (std::size_t i = 0; i < a->size(); ++i)
            out.push_back(convert((*a)[i], pointer + "/" + std::to_string(i), tree, depth + 1));
        return out;
    }
    if (const auto* v = node.as_integer()) return v->get();
    if (const auto* v = node.as_floating_point()) return v->get();
    if (const auto* v = node.as_boolean()) return v->get();
    if (const auto* v = node.as_string()) return v->get();
    if (const auto* v = node.as_date()) return as_text(*v);
    if (const auto* v = node.as_time()) return as_text(*v);
    if (const auto* v = node.as_date_time()) return as_text(*v);
    return nullptr;
}

}  // namespace

ConfigTree toml_config_tree(std::string_view text, const std::string& file) {
    ConfigTree tree;
    tree.file = file;
    check_key_depth(text, file);
    toml::table root;
    try {
        root = toml::parse(text, std::string_view(file));
    } catch (const toml::parse_error& e) {
        const auto line = e.source().begin.line;
        throw InputError(line > 0 ? file + ":" + std::to_string(line) : file,
                         "TOML syntax: " + std::string(e.description()));
    }
    tree.root = convert(root, "", tree, 0);
    tree.lines.erase("");
    return tree;
}

}  // namespace preflight
