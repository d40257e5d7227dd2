// What the four config importers share: format names, spots, detection.
#include "preflight/planner/config_import.hpp"

#include <cctype>

#include "preflight/planner/error.hpp"

namespace preflight {

std::string_view to_string(ConfigFormat f) {
    switch (f) {
        case ConfigFormat::torchtitan: return "torchtitan";
        case ConfigFormat::megatron: return "megatron";
        case ConfigFormat::deepspeed: return "deepspeed";
        case ConfigFormat::nanotron: return "nanotron";
    }
    return "?";
}

std::optional<ConfigFormat> parse_config_format(std::string_view s) {
    for (ConfigFormat f : {ConfigFormat::torchtitan, ConfigFormat::megatron, ConfigFormat::deepspeed,
                           ConfigFormat::nanotron})
        if (s == to_string(f)) return f;
    return std::nullopt;
}

std::string json_pointer_token(std::string_view key) {
    std::string s;
    for (char c : key) {
        if (c == '~') s += "~0";
        else if (c == '/') s += "~1";
        else s += c;
    }
    return s;
}

int ConfigTree::line_of(const std::string& pointer) const {
    const auto it = lines.find(pointer);
    return it == lines.end() ? 0 : it->second;
}

std::string ConfigSpot::text() const {
    std::string s = file;  // appended piecewise: GCC 12 warns (-Wrestrict) on ": " + key
    if (line > 0) {
        s += ':';
        s += std::to_string(line);
    }
    if (!key.empty()) {
        s += ": ";
        s += key;
    }
    return s;
}

const ImportedField* ImportedConfig::field(std::string_view key) const {
    for (const ImportedField& f : fields)
        if (f.key == key) return &f;
    return nullptr;
}

Plan apply_imported_fields(const ImportedConfig& c, Plan plan) {
    for (const ImportedField& v : c.fields) {
        const PlanField* field = plan_field(v.key);
        if (!field) throw InputError(v.from.text(), "imported as '" + v.key + "', which is no plan field (an importer bug)");
        set_field(*field, plan, v.value, v.from.text());
    }
    return plan;
}

namespace {

std::string_view trimmed(std::string_view line) {
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.front()))) line.remove_prefix(1);
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.remove_suffix(1);
    return line;
}

bool is_key_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; }

// "name:" or "name: value" at the start of a line (a YAML mapping key).
bool yaml_key_line(std::string_view line) {
    std::size_t i = 0;
    while (i < line.size() && is_key_char(line[i])) ++i;
    return i > 0 && i < line.size() && line[i] == ':' && (i + 1 == line.size() || line[i + 1] == ' ');
}

// The opening of a JSON array ("[", "[]", "[{", "[[1, 2]]", "[4, 8]"), which no TOML table
// header ("[training]", "[[a.b]]") is: nothing, ']', '{' or a comma after the brackets.
bool json_array_line(std::string_view line) {
    if (line.empty() || line.front() != '[') return false;
    std::string_view rest = line;
    while (!rest.empty() && rest.front() == '[') rest = trimmed(rest.substr(1));
    return rest.empty() || rest.front() == ']' || rest.front() == '{' || rest.find(',') != std::string_view::npos;
}

}  // namespace

std::optional<ConfigFormat> detect_config_format(std::string_view text) {
    // The first line that is neither blank nor a comment decides when it is clear; a shell script
    // (variables, arrays, a torchrun line) is Megatron when any line passes a --flag.
    std::optional<ConfigFormat> first;
    bool decided = false, any_flag = false, any_table = false;
    for (std::size_t start = 0; start < text.size();) {
        std::size_t end = text.find('\n', start);
        if (end == std::string_view::npos) end = text.size();
        const std::string_view line = trimmed(text.substr(start, end - start));
        start = end + 1;
        if (line.empty() || line.front() == '#') continue;
        const bool table = line.front() == '[' && line.back() == ']';
        any_table = any_table || table;
        any_flag = any_flag || line.rfind("--", 0) == 0 || line.find(" --") != std::string_view::npos;
        if (decided) continue;
        decided = true;  // a shell line decides nothing itself: the flags below do
        // A JSON array is DeepSpeed's format too, refused there as no object (was: read as TOML).
        if (line.front() == '{' || json_array_line(line)) first = ConfigFormat::deepspeed;
        else if (line.rfind("---", 0) == 0 || yaml_key_line(line)) first = ConfigFormat::nanotron;
        else if (table) first = ConfigFormat::torchtitan;
        else if (line.rfind("--", 0) == 0) first = ConfigFormat::megatron;
        if (first) return first;
    }
    if (any_flag) return ConfigFormat::megatron;
    if (any_table) return ConfigFormat::torchtitan;
    return std::nullopt;
}

}  // namespace preflight
