#include "plan_file.hpp"

#include <cstdint>
#include <iostream>
#include <tuple>

#include "config_from.hpp"
#include "preflight/planner/plan_document.hpp"
#include "preflight/planner/plan_schema.hpp"
#include "preflight/planner/user_file.hpp"

namespace preflight::cli {

namespace {

// The bounded reader `--from -` and every user file go through (user_file.hpp), at 16 MiB.
nlohmann::json read_plan_stdin() {
    constexpr std::int64_t kMaxPlanBytes = std::int64_t{16} << 20;
    const std::string text =
        read_user_text_stream(std::cin, "standard input", "--plan -", kMaxPlanBytes, "a plan JSON", "--plan -'s 16 MiB");
    return parse_json_text(text, "--plan -", "standard input");
}

}  // namespace

void add_plan_file_option(CLI::App& sub, std::string& file) {
    auto* opt = sub.add_option("--plan", file,
                               "Plan JSON (a plan object, or a document with one under \"plan\"; - reads standard "
                               "input); plan flags given beside it override its values, and its recorded model and "
                               "GPU are used unless --model/--gpu are given");
    if (auto* from = sub.get_option_no_throw("--from")) opt->excludes(from);
}

Plan plan_from_file(const std::string& file, const CLI::App& sub, const Plan& flags_plan, std::string& model_name,
                    std::string& gpu_name) {
    const nlohmann::json j = file == "-" ? read_plan_stdin() : read_json_file(file, "--plan");
    PlanDocument doc;
    try {
        doc = read_plan_document(j, flags_plan);
    } catch (const InputError& e) {
        throw InputError("--plan " + file, e.what());
    }
    for (auto [recorded, flag, name] :
         {std::tuple{&doc.model, "--model", &model_name}, std::tuple{&doc.gpu, "--gpu", &gpu_name}}) {
        if (recorded->empty()) continue;
        if (!given_on(sub, flag))
            *name = *recorded;
        else if (*name != *recorded)
            throw InputError(flag, "'" + *name + "' differs from the " + std::string(flag + 2) + " '" + *recorded +
                                       "' recorded in --plan " + file + " (leave " + flag + " out to use the file's)");
    }
    // A plan flag given beside the file overrides the file's value, as beside --from.
    for (const PlanField& f : plan_fields())
        if (given_on(sub, std::string(f.flag))) set_field(f, doc.plan, f.get(flags_plan), std::string(f.flag));
    return doc.plan;
}

InputError blame_plan_file(const std::string& file, const CLI::App& sub, const InputError& e) {
    if (file.empty()) return e;
    std::string key = e.subject() == "--model" ? "model" : e.subject() == "--gpu" ? "gpu" : "";
    for (const PlanField& f : plan_fields())
        if (f.flag == e.subject()) key = f.key;
    if (key.empty() || given_on(sub, e.subject())) return e;
    return InputError("--plan " + file, key + ": " + e.detail());
}

}  // namespace preflight::cli
