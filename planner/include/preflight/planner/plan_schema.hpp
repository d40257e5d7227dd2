// The plan's settings in one table. Each field names its command-line flag, help text,
// allowed values and bounds, JSON key, and how it is read from and written to a Plan.
// Derived from it: the CLI's plan flags and the search pins (cli/plan_flags.cpp), the plan
// JSON in and out (report.cpp), to_flags, the arguments of a runtime run
// (validation/src/matrix.cpp) and the explorer's choice lists. A new plan setting is a
// Plan member, one row here and the code that uses the value (docs/architecture.md).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "preflight/planner/plan.hpp"

namespace preflight {

struct PlanPins;

// The type of a field's value: a whole number (counts, the ZeRO stage), a real number, an
// on/off switch, or a name (an enum's command-line name, or checked text).
enum class FieldType { integer, real, toggle, name };

// When a printed plan (to_flags, plan JSON) includes the field: always; when it differs
// from the default; whenever the plan fine-tunes (LoRA settings); when fine-tuning and not
// at the default.
enum class Shown { always, non_default, finetuning, finetuning_non_default };

using FieldValue = std::variant<std::int64_t, double, bool, std::string>;

struct PlanField {
    std::string_view key;    // JSON key and the field's name ("grad_acc")
    std::string_view flag;   // command-line flag ("--grad-acc")
    std::string_view help;   // --help text
    std::string_view group;  // --help section
    FieldType type = FieldType::integer;
    // name: the accepted names (empty: any text that `set` accepts).
    std::vector<std::string> choices;
    // What the values may be, for messages ("0, 1, 2 or 3", "a comma list of q,k,...").
    std::string_view domain;
    // integer: the flag's bound. With bound_name (a limits.hpp constant): a count in
    // [1, max], also written in scientific notation; without: an integer in [min, max].
    // max = 0: the flag is not checked (validate_plan checks the value).
    std::int64_t min = 0;
    std::int64_t max = 0;
    std::string_view bound_name;
    Shown in_flags = Shown::always;
    Shown in_json = Shown::always;
    bool runtime = false;  // passed to `preflight run` by the validation matrix (single-GPU plans)
    FieldValue (*get)(const Plan&) = nullptr;
    // Writes a value of the field's type; false when it is outside the field's domain.
    bool (*set)(Plan&, const FieldValue&) = nullptr;
    // Pins the search to the plan's value of this field (nullptr: not a search axis; a given
    // value then goes to PlanPins::fixed, which every searched plan starts from).
    void (*pin)(PlanPins&, const Plan&) = nullptr;
};

// Every plan field, in the order of --help and of to_flags.
std::span<const PlanField> plan_fields();
// The field with this JSON key (nullptr when none).
const PlanField* plan_field(std::string_view key);

// The value as written on the command line ("4096", "bf16-mixed", "0.1", "true").
std::string field_text(const PlanField& field, const Plan& plan);
// Whether a printed plan shows the field (Shown against the default plan).
bool field_shown(const PlanField& field, Shown shown, const Plan& plan);
// Writes `value` into the plan; throws InputError(subject, ...) when it is outside the field's domain.
void set_field(const PlanField& field, Plan& plan, const FieldValue& value, const std::string& subject);

// The plan's fields as JSON (each field whose in_json shows it, under its key), and back
// (keys absent stay as in `plan`; InputError names the key of a bad value).
void plan_fields_to_json(const Plan& plan, nlohmann::json& j);
void plan_fields_from_json(const nlohmann::json& j, Plan& plan);

}  // namespace preflight
