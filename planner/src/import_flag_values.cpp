// Numbers out of config text and JSON with their bounds checked, and plan fields with their spot.
#include "import_flag_values.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "preflight/planner/error.hpp"
#include "preflight/planner/limits.hpp"
#include "preflight/planner/plan_schema.hpp"
#include "preflight/planner/shown_value.hpp"

namespace preflight::import_values {

namespace {

std::string bound_text(std::int64_t min, std::int64_t max, std::string_view what) {
    std::string s = "between " + std::to_string(min) + " and " + std::to_string(max);
    if (!what.empty()) s += " (" + std::string(what) + ")";
    return s;
}

std::int64_t in_bounds(std::int64_t v, const ConfigSpot& spot, std::int64_t min, std::int64_t max,
                       std::string_view what) {
    if (v < min || v > max)
        throw InputError(spot.text(), "must be " + bound_text(min, max, what) + ", got " + std::to_string(v));
    return v;
}

}  // namespace

std::string shown(const nlohmann::json& v) { return shown_json(v); }

std::string numeric_text_note(const nlohmann::json& v) {
    if (!v.is_string() || v.get<std::string>().empty()) return "";
    const std::string& s = v.get_ref<const std::string&>();
    char* end = nullptr;
    std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size()) return "";
    return " (text, not a number: quoted, or in a nanotron YAML a form PyYAML keeps as text: a float needs a dot and "
           "a signed exponent, 1.0e-4 for 1e-4, and 08 is no octal number)";
}

std::int64_t integer_text(std::string_view text, const ConfigSpot& spot, std::int64_t min, std::int64_t max,
                          std::string_view what) {
    std::size_t i = 0;
    const bool negative = !text.empty() && (text[0] == '-' || text[0] == '+') && text[i++] == '-';
    if (i == text.size()) throw InputError(spot.text(), "must be a whole number, got '" + std::string(text) + "'");
    std::uint64_t v = 0;
    for (; i < text.size(); ++i) {
        const char c = text[i];
        if (c < '0' || c > '9')
            throw InputError(spot.text(), "must be a whole number, got '" + std::string(text) + "'");
        if (v > (static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) - (c - '0')) / 10)
            throw InputError(spot.text(), "'" + std::string(text) + "' is beyond the 64-bit integer range (must be " +
                                              bound_text(min, max, what) + ")");
        v = v * 10 + static_cast<std::uint64_t>(c - '0');
    }
    const auto value = static_cast<std::int64_t>(v);
    return in_bounds(negative ? -value : value, spot, min, max, what);
}

double real_text(std::string_view text, const ConfigSpot& spot, double min, double max) {
    const std::string s(text);
    char* end = nullptr;
    errno = 0;
    const double v = s.empty() ? 0.0 : std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v))
        throw InputError(spot.text(), "must be a finite number, got '" + s + "'");
    if (v < min || v > max)
        throw InputError(spot.text(), "must be between " + std::to_string(min) + " and " + std::to_string(max) +
                                          ", got '" + s + "'");
    return v;
}

std::int64_t integer_json(const nlohmann::json& v, const ConfigSpot& spot, std::int64_t min, std::int64_t max,
                          std::string_view what) {
    if (!v.is_number_integer())
        throw InputError(spot.text(), "must be a whole number, got " + shown(v) + numeric_text_note(v));
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
        throw InputError(spot.text(), shown(v) + " is beyond the 64-bit integer range (must be " +
                                          bound_text(min, max, what) + ")");
    return in_bounds(v.get<std::int64_t>(), spot, min, max, what);
}

bool boolean_json(const nlohmann::json& v, const ConfigSpot& spot) {
    if (!v.is_boolean()) throw InputError(spot.text(), "must be true or false, got " + shown(v));
    return v.get<bool>();
}

std::string string_json(const nlohmann::json& v, const ConfigSpot& spot) {
    if (!v.is_string()) throw InputError(spot.text(), "must be a string, got " + shown(v));
    return v.get<std::string>();
}

Bounds field_bounds(std::string_view key) {
    const PlanField* f = plan_field(key);
    if (f && f->type == FieldType::integer && f->max > 0)
        return {f->min, f->max, f->bound_name.empty() ? std::string(f->domain) : "limits::" + std::string(f->bound_name)};
    return {1, limits::kMaxGpus, "limits::kMaxGpus"};
}

void set_field(ImportedConfig& out, std::string_view key, const FieldValue& value, const ConfigSpot& spot) {
    const PlanField* f = plan_field(key);
    if (!f) throw InputError(spot.text(), "internal: no plan field '" + std::string(key) + "'");
    if (const auto* x = std::get_if<std::int64_t>(&value); x && f->type == FieldType::integer) {
        const Bounds b = field_bounds(key);
        (void)in_bounds(*x, spot, b.min, b.max, b.what);  // a derived value (dp, grad_acc) too
    }
    Plan scratch;
    preflight::set_field(*f, scratch, value, spot.text());
    for (ImportedField& existing : out.fields)
        if (existing.key == key) {
            existing.value = value;
            existing.from = spot;
            return;
        }
    out.fields.push_back({std::string(key), value, spot});
}

std::int64_t set_integer_text(ImportedConfig& out, std::string_view key, std::string_view text, const ConfigSpot& spot) {
    const Bounds b = field_bounds(key);
    const std::int64_t v = integer_text(text, spot, b.min, b.max, b.what);
    set_field(out, key, v, spot);
    return v;
}

std::int64_t set_integer_json(ImportedConfig& out, std::string_view key, const nlohmann::json& v,
                              const ConfigSpot& spot) {
    const Bounds b = field_bounds(key);
    const std::int64_t n = integer_json(v, spot, b.min, b.max, b.what);
    set_field(out, key, n, spot);
    return n;
}

std::int64_t exact_quotient(std::int64_t a, std::int64_t b, const ConfigSpot& spot, const std::string& message) {
    if (b <= 0 || a % b != 0) throw InputError(spot.text(), message);
    return a / b;
}

}  // namespace preflight::import_values
