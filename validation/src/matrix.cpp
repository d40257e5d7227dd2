#include "preflight/validation/matrix.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <set>

#include "preflight/planner/catalog.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/plan_schema.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/report.hpp"

namespace preflight::validation {

using nlohmann::json;

bool Tolerance::within(double measured, double predicted) const {
    return std::abs(measured - predicted) <= abs + rel * std::abs(predicted);
}

SourceTolerances default_tolerances() {
    // Own runtime: the tracked peak within 1 % (the runtime's contract) plus 1 MiB for
    // rounding; the non-tensor overhead within 512 MiB of the spec's figure until it is
    // calibrated; step time and MFU within 25 % while the constants are uncalibrated.
    // PyTorch: its allocator and modules are modelled, not designed: 10 %.
    SourceTolerances t;
    t[kSourceRuntime] = {{"peak_bytes", {1.0 * kMiB, 0.01}},
                         {"overhead_bytes", {512.0 * kMiB, 0.0}},
                         {"step_time_s", {0.0, 0.25}},
                         {"mfu", {0.0, 0.25}}};
    t[kSourcePytorch] = {{"peak_bytes", {64.0 * kMiB, 0.10}},
                         {"overhead_bytes", {1024.0 * kMiB, 0.0}},
                         {"step_time_s", {0.0, 0.35}},
                         {"mfu", {0.0, 0.35}}};
    return t;
}

namespace {

std::string at(const std::string& subject, const std::string& key) { return subject + "." + key; }

Tolerance tolerance_from_json(const json& j, const std::string& subject) {
    if (!j.is_object()) throw InputError(subject, "must be an object {\"abs\": number, \"rel\": number}");
    for (const auto& [k, v] : j.items())
        if (k != "abs" && k != "rel") throw InputError(at(subject, k), "unknown key: a tolerance has \"abs\" and \"rel\"");
    Tolerance t;
    for (const char* k : {"abs", "rel"}) {
        if (!j.contains(k)) continue;
        if (!j.at(k).is_number() || j.at(k).get<double>() < 0) throw InputError(at(subject, k), "must be a number >= 0");
        (std::string(k) == "abs" ? t.abs : t.rel) = j.at(k).get<double>();
    }
    return t;
}

int positive_int(const json& j, const char* key, int fallback, const std::string& subject, int min) {
    if (!j.contains(key)) return fallback;
    if (!j.at(key).is_number_integer() || j.at(key).get<int>() < min)
        throw InputError(at(subject, key), "must be an integer >= " + std::to_string(min));
    return j.at(key).get<int>();
}

// A "tolerances" object (its key path in `subject`) over `into`, source by source and quantity
// by quantity; a misspelt source or quantity would leave the defaults judging without a word.
void read_tolerances(const json& t, const std::string& subject, SourceTolerances& into) {
    if (!t.is_object()) throw InputError(subject, "must be an object keyed by source");
    for (const auto& [source, quantities] : t.items()) {
        const std::string s = at(subject, source);
        if (source != kSourceRuntime && source != kSourcePytorch && !profile_by_name(source))
            throw InputError(s, "unknown source: a report's \"source\" is \"preflight-runtime\", \"pytorch\" or a "
                                "framework profile's name");
        if (!quantities.is_object()) throw InputError(s, "must be an object keyed by quantity");
        for (const auto& [q, tol] : quantities.items()) {
            if (q != "peak_bytes" && q != "overhead_bytes" && q != "step_time_s" && q != "mfu")
                throw InputError(at(s, q), "unknown quantity: one of peak_bytes, overhead_bytes, step_time_s, mfu");
            into[source][q] = tolerance_from_json(tol, at(s, q));
        }
    }
}

std::filesystem::path matrix_path(const std::string& spec, const std::filesystem::path& matrices_dir) {
    std::filesystem::path path = spec;
    if (spec.find('/') == std::string::npos && path.extension() != ".json") path = matrices_dir / (spec + ".json");
    return path;
}

}  // namespace

Matrix matrix_from_json(const json& j, const std::string& subject) {
    if (!j.is_object()) throw InputError(subject, "a matrix must be a JSON object");
    Matrix m;
    m.raw = j;
    if (!j.contains("name") || !j.at("name").is_string()) throw InputError(at(subject, "name"), "must be a string");
    m.name = j.at("name").get<std::string>();
    if (j.contains("description")) {
        if (!j.at("description").is_string()) throw InputError(at(subject, "description"), "must be a string");
        m.description = j.at("description").get<std::string>();
    }
    if (j.contains("gpu")) {
        if (!j.at("gpu").is_string()) throw InputError(at(subject, "gpu"), "must be a string");
        m.gpu = j.at("gpu").get<std::string>();
    }
    m.tolerances = default_tolerances();
    if (j.contains("tolerances")) read_tolerances(j.at("tolerances"), at(subject, "tolerances"), m.tolerances);
    const json defaults = j.contains("defaults") ? j.at("defaults") : json::object();
    if (!defaults.is_object()) throw InputError(at(subject, "defaults"), "must be an object");
    const int steps = positive_int(defaults, "steps", 10, at(subject, "defaults"), 1);
    const int warmup = positive_int(defaults, "warmup", 2, at(subject, "defaults"), 0);
    if (!j.contains("runs") || !j.at("runs").is_array() || j.at("runs").empty())
        throw InputError(at(subject, "runs"), "must be a non-empty array");
    std::set<std::string> ids;
    for (std::size_t i = 0; i < j.at("runs").size(); ++i) {
        const json& r = j.at("runs")[i];
        const std::string rs = subject + ".runs[" + std::to_string(i) + "]";
        if (!r.is_object()) throw InputError(rs, "must be an object");
        MatrixRun run;
        for (const char* k : {"id", "model"})
            if (!r.contains(k) || !r.at(k).is_string() || r.at(k).get<std::string>().empty())
                throw InputError(at(rs, k), "must be a non-empty string");
        run.id = r.at("id").get<std::string>();
        for (char c : run.id)
            if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'))
                throw InputError(at(rs, "id"), "may hold only letters, digits, '-', '_' and '.' (it names a file)");
        if (!ids.insert(run.id).second) throw InputError(at(rs, "id"), "'" + run.id + "' appears twice");
        run.model = r.at("model").get<std::string>();
        if (!r.contains("plan")) throw InputError(at(rs, "plan"), "missing");
        try {
            run.plan = plan_from_json(r.at("plan"));
        } catch (const InputError& e) {
            throw InputError(at(rs, "plan." + e.subject()), e.what());
        }
        if (run.plan.dp != 1 || run.plan.tp != 1 || run.plan.pp != 1 || run.plan.zero != 0)
            throw InputError(at(rs, "plan"), "validation runs are single-GPU plans (dp = tp = pp = 1, zero 0)");
        if (run.plan.seq <= 0) throw InputError(at(rs, "plan.seq"), "must be given");
        run.steps = positive_int(r, "steps", steps, rs, 1);
        run.warmup = positive_int(r, "warmup", warmup, rs, 0);
        m.runs.push_back(std::move(run));
    }
    return m;
}

std::filesystem::path default_matrices_dir() {
    if (const char* env = std::getenv("PREFLIGHT_MATRICES_DIR"); env && *env) return env;
    return PREFLIGHT_MATRICES_DIR;
}

Matrix load_matrix(const std::string& spec, const std::filesystem::path& matrices_dir, const std::string& flag) {
    const std::filesystem::path path = matrix_path(spec, matrices_dir);
    const json j = read_json_file(path, flag);
    return interpret_user_json(flag, [&] { return matrix_from_json(j, path.string()); });
}

SourceTolerances load_tolerances(const std::string& spec, const std::filesystem::path& matrices_dir,
                                 const std::string& flag) {
    const std::filesystem::path path = matrix_path(spec, matrices_dir);
    const json j = read_json_file(path, flag);
    // Subjects "FLAG FILE: KEY"; only "tolerances" is read (a whole matrix's other keys are not).
    return interpret_user_json(flag + " " + path.string(), [&] {
        if (!j.is_object()) throw InputError("tolerances", "the file must hold a JSON object with a \"tolerances\" block");
        if (!j.contains("tolerances"))
            throw InputError("tolerances", "the file has no \"tolerances\" block: every run would be judged by the defaults");
        SourceTolerances t = default_tolerances();
        read_tolerances(j.at("tolerances"), "tolerances", t);
        return t;
    });
}

std::vector<std::string> run_arguments(const MatrixRun& run, const std::string& gpu) {
    std::vector<std::string> args = {"--model", run.model, "--gpu", gpu};
    // The plan fields the runtime executes (plan_schema.hpp), as `preflight run` reads them.
    for (const PlanField& f : plan_fields()) {
        if (!f.runtime) continue;
        args.emplace_back(f.flag);
        args.push_back(field_text(f, run.plan));
    }
    for (const std::string& a : {std::string("--steps"), std::to_string(run.steps), std::string("--warmup"),
                                 std::to_string(run.warmup)})
        args.push_back(a);
    return args;
}

}  // namespace preflight::validation
