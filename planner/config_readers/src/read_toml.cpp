// TOML text -> ConfigTree through toml++ (toml::parse; tables -> objects, arrays -> arrays,
// integers -> int64, floats -> double, booleans, strings; dates and times -> their TOML text).
#include <sstream>

#include <toml++/toml.h>

#include "preflight/config_readers/config_readers.hpp"
#include "preflight/planner/error.hpp"

namespace preflight {

namespace {

using nlohmann::json;

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

json convert(const toml::node& node, const std::string& pointer, ConfigTree& tree) {
    note_line(tree, pointer, node);
    if (const toml::table* t = node.as_table()) {
        json out = json::object();
        for (const auto& [key, child] : *t) {
            const std::string child_pointer = pointer + "/" + pointer_token(key.str());
            out[std::string(key.str())] = convert(child, child_pointer, tree);
            // A key's line: where the key was written (a [table] header, `key = value`).
            if (key.source().begin.line > 0) tree.lines[child_pointer] = static_cast<int>(key.source().begin.line);
        }
        return out;
    }
    if (const toml::array* a = node.as_array()) {
        json out = json::array();
        for (std::size_t i = 0; i < a->size(); ++i)
            out.push_back(convert((*a)[i], pointer + "/" + std::to_string(i), tree));
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
    toml::table root;
    try {
        root = toml::parse(text, std::string_view(file));
    } catch (const toml::parse_error& e) {
        const auto line = e.source().begin.line;
        throw InputError(line > 0 ? file + ":" + std::to_string(line) : file,
                         "TOML syntax: " + std::string(e.description()));
    }
    tree.root = convert(root, "", tree);
    tree.lines.erase("");
    return tree;
}

}  // namespace preflight
