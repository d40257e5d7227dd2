// Shared reads of the TOML/YAML importers (import_tree_values.hpp).
#include "import_tree_values.hpp"

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
        for (char c : token) {
            if (c == '~') s += "~0";
            else if (c == '/') s += "~1";
            else s += c;
        }
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

std::int64_t read_integer(const json& v, const ConfigSpot& spot, std::int64_t min, std::int64_t max) {
    const std::string range = "an integer from " + std::to_string(min) + " to " + std::to_string(max);
    if (!v.is_number_integer()) throw InputError(spot.text(), "must be " + range + ", got " + v.dump());
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(max))
        throw InputError(spot.text(), "must be " + range + ", got " + v.dump());
    const auto x = v.get<std::int64_t>();
    if (x < min || x > max) throw InputError(spot.text(), "must be " + range + ", got " + std::to_string(x));
    return x;
}

bool read_bool(const json& v, const ConfigSpot& spot) {
    if (!v.is_boolean()) throw InputError(spot.text(), "must be true or false, got " + v.dump());
    return v.get<bool>();
}

std::string read_string(const json& v, const ConfigSpot& spot) {
    if (!v.is_string()) throw InputError(spot.text(), "must be a string, got " + v.dump());
    return v.get<std::string>();
}

double read_number(const json& v, const ConfigSpot& spot) {
    if (!v.is_number()) throw InputError(spot.text(), "must be a number, got " + v.dump());
    return v.get<double>();
}

Bounds field_bounds(std::string_view key) {
    const PlanField* f = plan_field(key);
    if (f == nullptr || f->type != FieldType::integer) return {1, limits::kMaxGpus};
    if (f->max == 0) return {1, limits::kMaxGpus};  // cp, ep, vpp: checked by validate_plan only
    return {f->min, f->max};
}

std::int64_t read_field_integer(const json& v, const ConfigSpot& spot, std::string_view key) {
    const Bounds b = field_bounds(key);
    return read_integer(v, spot, b.min, b.max);
}

void set_imported(ImportedConfig& out, std::string_view key, FieldValue value, const ConfigSpot& spot) {
    const PlanField* f = plan_field(key);
    if (f == nullptr) throw InputError(spot.text(), "internal: no plan field '" + std::string(key) + "'");
    if (f->type == FieldType::integer) {
        const Bounds b = field_bounds(key);
        const std::int64_t x = std::get<std::int64_t>(value);
        if (x < b.min || x > b.max)
            throw InputError(spot.text(), "gives --" + std::string(key) + " " + std::to_string(x) + ", outside " +
                                              std::to_string(b.min) + ".." + std::to_string(b.max));
    }
    Plan scratch;
    set_field(*f, scratch, value, spot.text());  // names outside the choices, ZeRO stages outside 0..3
    for (ImportedField& existing : out.fields)
        if (existing.key == key) {
            existing.value = std::move(value);
            existing.from = spot;
            return;
        }
    out.fields.push_back(ImportedField{std::string(key), std::move(value), spot});
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
