// Strict reading of plan documents (plan_document.hpp).
#include "preflight/planner/plan_document.hpp"

#include <utility>

#include "preflight/planner/error.hpp"
#include "preflight/planner/plan_schema.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/report.hpp"
#include "preflight/planner/shown_value.hpp"

namespace preflight {

namespace {

// "model": "name" (plan --emit preflight) or "model": {"name": ...} (memory and run reports).
std::string recorded_name(const nlohmann::json& doc, const char* key) {
    const auto it = doc.find(key);
    if (it == doc.end()) return {};
    if (it->is_null())  // never the default model or GPU in its place
        throw InputError(key, "null: name one, or leave the key out for the default");
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object() && it->contains("name")) {
        if (!it->at("name").is_string())
            throw InputError(std::string(key) + ".name", "must be a string, got " + shown_json(it->at("name")));
        return it->at("name").get<std::string>();
    }
    throw InputError(key, "must be a name or an object with \"name\"");
}

// The keys plan_to_json writes plus the document's own (model, gpu, schema_version at the top).
void check_keys(const nlohmann::json& fields, bool top_level) {
    for (const auto& [key, value] : fields.items()) {
        const bool known = plan_field(key) != nullptr || key == "gpus" || key == "global_batch_tokens" ||
                           (top_level && (key == "model" || key == "gpu" || key == "schema_version" || key == "framework" ||
                                          key == "model_config"));
        // `plan --format json` output holds ranked candidates, not one plan: say which output is one.
        const std::string hint = top_level && key == "candidates"
                                     ? " (this is `plan --format json` output: `plan ... --emit preflight` writes the "
                                       "recommendation as a plan file)"
                                     : "";
        if (!known)
            throw InputError(key, "unknown key: a plan file holds the plan fields (docs/interface.md), model, gpu, "
                                  "framework, gpus, global_batch_tokens, schema_version and model_config" + hint);
    }
    if (const auto v = fields.find("schema_version"); v != fields.end() && *v != kSchemaVersion)
        throw InputError("schema_version", shown_json(*v) + ": this preflight reads plan files of schema version " +
                                               std::to_string(kSchemaVersion));
}

// The totals a document records must be its fields': a file edited in one place and not the
// other is refused, not half believed.
void check_totals(const nlohmann::json& fields, const Plan& p) {
    for (const auto& [key, value] : {std::pair{"gpus", p.gpus()}, std::pair{"global_batch_tokens", p.global_batch_tokens()}}) {
        const auto v = fields.find(key);
        if (v == fields.end()) continue;
        if (!v->is_number_integer() || v->get<std::int64_t>() != value)
            throw InputError(key, shown_json(*v) + " differs from the plan's " + std::to_string(value) +
                                      (std::string(key) == "gpus" ? " (dp x tp x pp x cp)" : " (seq x mbs x grad_acc x dp)") +
                                      ": correct it or leave the key out");
    }
}

// "framework" at the top (plan --emit preflight, memory --format json), else a run report's
// predicted.profile: the profile's name, checked.
std::string recorded_framework(const nlohmann::json& doc) {
    const nlohmann::json* v = nullptr;
    std::string key = "framework";
    if (const auto it = doc.find("framework"); it != doc.end()) {
        v = &*it;
    } else if (const auto p = doc.find("predicted"); p != doc.end() && p->is_object() && p->contains("profile")) {
        v = &p->at("profile");
        key = "predicted.profile";
    }
    if (v == nullptr) return {};
    if (!v->is_string()) throw InputError(key, "must be a framework profile's name, got " + shown_json(*v));
    const std::string name = v->get<std::string>();
    if (!profile_by_name(name)) {
        std::string names;
        for (const std::string& n : framework_names()) names += (names.empty() ? "" : ", ") + n;
        throw InputError(key, "'" + name + "' is not a framework profile (" + names + ")");
    }
    return name;
}

}  // namespace

PlanDocument read_plan_document(const nlohmann::json& doc, const Plan& defaults) {
    if (!doc.is_object()) throw InputError("plan", "must hold a JSON object");
    PlanDocument d;
    d.model = recorded_name(doc, "model");
    d.gpu = recorded_name(doc, "gpu");
    d.framework = recorded_framework(doc);
    if (const auto it = doc.find("model_config"); it != doc.end()) {
        if (!it->is_object()) throw InputError("model_config", "must be a config.json object, got " + shown_json(*it));
        if (d.model.empty()) throw InputError("model_config", "needs \"model\": the name the model goes by");
        d.model_config = *it;
    }
    const bool report = doc.contains("plan");  // a memory or run report: its plan under "plan"
    const nlohmann::json& fields = report ? doc.at("plan") : doc;
    if (fields.is_object()) check_keys(fields, !report);
    d.plan = plan_from_json(fields, defaults);
    check_totals(fields, d.plan);
    // As on the command line (--lora-rank without --finetune): adapter settings of a plan that
    // trains every weight would be dropped unseen.
    // Written null (plan_to_json: no adapters), a setting is not there; beside adapters it must be.
    if (fields.is_object())
        for (const PlanField& f : plan_fields()) {
            const auto v = fields.find(std::string(f.key));
            if (f.in_json != Shown::finetuning || v == fields.end()) continue;
            if (d.plan.finetune == Finetune::full && !v->is_null())
                throw InputError(std::string(f.key), "LoRA settings need \"finetune\": \"lora\" or \"qlora\"");
            if (d.plan.finetune != Finetune::full && v->is_null())
                throw InputError(std::string(f.key), "null: give the adapters' value, or leave the key out for the default");
        }
    return d;
}

}  // namespace preflight
