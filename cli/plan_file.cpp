#include "plan_file.hpp"

#include <cstdint>
#include <iostream>
#include <tuple>

#include "config_from.hpp"
#include "preflight/planner/catalog.hpp"
#include "preflight/planner/checked.hpp"
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

// The file's own plan, a key it leaves out at the plan's default (not at a flag given beside it):
// the world and the global batch a layout flag divides anew.
Plan file_own_plan(const nlohmann::json& j, const CLI::App& sub, const std::string& file) {
    if (layout_flag_without_dp(sub).empty()) return {};
    try {
        return read_plan_document(j).plan;
    } catch (const InputError& e) {  // it counts its GPUs with a flag's value: which layout it means is unknown
        throw InputError("--plan " + file, std::string(e.what()) + " without the flags beside it: give --dp as well");
    }
}

// A layout flag beside the file divides the file's GPUs anew, as beside --from (divide_anew): dp,
// and the accumulation that keeps the file's global batch unless --grad-acc is given too. Without
// it the job silently grew (a dp 32 plan with --tp 2 became 64 GPUs).
void rederive_layout(const Plan& in_file, const CLI::App& sub, Plan& plan, const std::string& file) {
    const std::string flag = layout_flag_without_dp(sub);
    if (flag.empty()) return;
    const std::optional<std::int64_t> sequences =  // in_file was checked: within the plan bounds
        given_on(sub, "--grad-acc") ? std::nullopt
                                    : std::optional(checked_mul(checked_mul(in_file.mbs, in_file.grad_acc, flag), in_file.dp, flag));
    const DividedAnew d = divide_anew(plan, in_file.gpus(), sequences, flag, "--plan " + file + "'s", "--plan", std::cerr);
    plan.dp = d.dp;
    if (d.grad_acc) plan.grad_acc = *d.grad_acc;
}

// The model chunks a schedule takes when neither the file nor a flag says: 2 for the interleaved
// schedule (the flags' default), 1 for the others (a --pp-schedule 1f1b beside an interleaved
// file). The file's own vpp stands while its schedule does (restated by the flag or not).
void default_chunks(const nlohmann::json& j, const CLI::App& sub, Plan& plan) {
    const nlohmann::json& keys = j.contains("plan") && j["plan"].is_object() ? j["plan"] : j;
    const bool same_schedule = !keys.contains("pp_schedule") || !keys["pp_schedule"].is_string()
                                   ? plan.pp_schedule == PpSchedule::one_f_one_b
                                   : keys["pp_schedule"].get<std::string>() == to_string(plan.pp_schedule);
    if (given_on(sub, "--vpp") || (keys.contains("vpp") && same_schedule)) return;
    plan.vpp = plan.pp_schedule == PpSchedule::interleaved ? 2 : 1;
}

}  // namespace

void add_plan_file_option(CLI::App& sub, std::string& file) {
    auto* opt = sub.add_option("--plan", file,
                               "Plan JSON (a plan object, or a document with one under \"plan\"; - reads standard "
                               "input); plan flags given beside it override its values; its recorded model and GPU "
                               "are used (--model/--gpu beside it must name the same ones, or give them where the "
                               "file records none)");
    if (auto* from = sub.get_option_no_throw("--from")) opt->excludes(from);
}

Plan plan_from_file(const std::string& file, const CLI::App& sub, const Plan& flags_plan, std::string& model_name,
                    std::string& gpu_name, std::string* framework, std::optional<nlohmann::json>* model_config) {
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
    // A --from config's model shape, carried whole: read here, so that its errors name the file.
    if (doc.model_config && model_config != nullptr) {
        try {
            model_from_hf_config(*doc.model_config, doc.model);
        } catch (const InputError& e) {
            throw InputError("--plan " + file, "model_config." + e.subject() + ": " + e.detail());
        }
        *model_config = doc.model_config;
    }
    // The profile the file was ranked or judged under, unless --framework names another.
    if (framework != nullptr && !doc.framework.empty() && !given_on(sub, "--framework")) *framework = doc.framework;
    // A plan flag given beside the file overrides the file's value, as beside --from.
    const Plan in_file = file_own_plan(j, sub, file);
    for (const PlanField& f : plan_fields())
        if (given_on(sub, std::string(f.flag))) set_field(f, doc.plan, f.get(flags_plan), std::string(f.flag));
    rederive_layout(in_file, sub, doc.plan, file);
    default_chunks(j, sub, doc.plan);
    return doc.plan;
}

ModelConfig plan_file_model_config(const std::string& name, const std::optional<nlohmann::json>& config,
                                   const std::filesystem::path& data_dir) {
    return config ? model_from_hf_config(*config, name) : load_model(name, data_dir);
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
