// Shared reads of the TOML/YAML importers (import_tree_values.hpp).
#include "import_tree_values.hpp"

#include <algorithm>

#include "import_flag_values.hpp"

#include "preflight/planner/error.hpp"
#include "preflight/planner/limits.hpp"
#include "preflight/planner/plan_schema.hpp"

namespace preflight::tree_values {

using nlohmann::json;

Path split_dotted(std::string_view dotted) {
    Path out;
    if (dotted.empty()) return out;  // the top level
    std::size_t start = 0;
    while (start <= dotted.size()) {
        const std::size_t dot = dotted.find('.', start);
        const std::size_t end = dot == std::string_view::npos ? dotted.size() : dot;
        out.emplace_back(dotted.substr(start, end - start));
        if (dot == std::string_view::npos) break;
        start = dot + 1;
    }
    return out;
}

std::string pointer_of(const Path& path) {
    std::string s;
    for (const std::string& token : path) {
        s += '/';
        s += json_pointer_token(token);
    }
    return s;
}

const json* find_value(const json& root, const Path& path) {
    const json* at = &root;
    for (const std::string& token : path) {
        if (!at->is_object()) return nullptr;
        const auto it = at->find(token);
        if (it == at->end()) return nullptr;
        at = &*it;
    }
    return at;
}

ConfigSpot spot_of(const ConfigTree& tree, const Path& path, std::string key) {
    return ConfigSpot{tree.file, std::move(key), tree.line_of(pointer_of(path))};
}

// The typed reads and the field record are the ones every importer uses (import_flag_values.hpp).
std::int64_t read_integer(const json& v, const ConfigSpot& spot, std::int64_t min, std::int64_t max) {
    return import_values::integer_json(v, spot, min, max);
}

bool read_bool(const json& v, const ConfigSpot& spot) { return import_values::boolean_json(v, spot); }

std::string read_string(const json& v, const ConfigSpot& spot) { return import_values::string_json(v, spot); }

double read_number(const json& v, const ConfigSpot& spot) {
    if (!v.is_number())
        throw InputError(spot.text(), "must be a number, got " + import_values::shown(v) + import_values::numeric_text_note(v));
    return v.get<double>();
}

std::int64_t read_field_integer(const json& v, const ConfigSpot& spot, std::string_view key) {
    const import_values::Bounds b = import_values::field_bounds(key);
    return import_values::integer_json(v, spot, b.min, b.max, b.what);
}

void set_imported(ImportedConfig& out, std::string_view key, FieldValue value, const ConfigSpot& spot) {
    import_values::set_field(out, key, value, spot);
}

const SectionRule* find_rule(const std::vector<SectionRule>& rules, std::string_view section) {
    for (const SectionRule& r : rules)
        if (r.section == section) return &r;
    return nullptr;
}

bool listed(const std::vector<std::string_view>& keys, std::string_view key) {
    return std::find(keys.begin(), keys.end(), key) != keys.end();
}

std::int64_t gpu_product(const std::vector<std::int64_t>& factors, const ConfigSpot& spot, std::string_view what) {
    std::int64_t product = 1;
    for (std::int64_t f : factors) {
        // Each factor is at most kMaxGpus (2^20) and the running product stays at most kMaxGpus,
        // so the multiplication below cannot overflow.
        product *= f;
        if (product > limits::kMaxGpus)
            throw InputError(spot.text(), std::string(what) + " passes " + std::to_string(limits::kMaxGpus) +
                                              " GPUs (limits::kMaxGpus)");
    }
    return product;
}

}  // namespace preflight::tree_values
