// Checks a plan-search request against the documented bounds (limits.hpp) and the
// model, before any search: bad input is an InputError naming the flag (exit 2).
#include <string>

#include "preflight/planner/error.hpp"
#include "preflight/planner/extensions.hpp"
#include "preflight/planner/format.hpp"
#include "preflight/planner/limits.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/search.hpp"
#include "search_internal.hpp"

namespace preflight {

namespace {
std::string str(std::int64_t v) { return std::to_string(v); }

// A pinned tp or pp that cannot split the model (or that the framework refuses to split it by)
// whatever else the search picks.
void check_pinned_split(const ModelConfig& model, const SearchRequest& req) {
    const PlanPins& p = req.pins;
    if (p.tp) {
        if (auto why = detail::tp_problem(model, *p.tp); !why.empty())
            throw InputError("--tp", str(*p.tp) + " " + why + tp_choices(model));
        // A pinned tp above the GPUs of a node is a runnable layout (its collectives cross the
        // network) and is modelled; only the search's own candidates keep tp inside a node.
    }
    if (p.pp && *p.pp > model.layers)
        throw InputError("--pp", str(*p.pp) + " pipeline stages exceed the model's " + str(model.layers) + " layers");
    if (has_uneven_pipeline_split(p.fixed)) {  // Megatron-LM's uneven split (pipeline_uneven.cpp)
        if (!p.pp)
            throw InputError(p.fixed.pp_first_stage_layers ? "--pp-first-stage-layers" : "--pp-last-stage-layers",
                             "is searched only with --pp pinned (the split places layers on one pipeline degree)");
        Plan pinned = p.fixed;
        pinned.pp = *p.pp;
        pinned.pp_schedule = p.pp_schedule.value_or(PpSchedule::one_f_one_b);
        validate_uneven_pipeline_split(pinned, model);
    } else if (p.pp && p.pp_schedule.value_or(PpSchedule::one_f_one_b) != PpSchedule::interleaved) {
        Plan pinned;  // a schedule pinned other than interleaved: that split; else any schedule's
        pinned.pp = *p.pp;
        const std::string why = p.pp_schedule ? pipeline_split_problem(req.memory.profile, model, pinned)
                                              : pipeline_degree_problem(req.memory.profile, model, *p.pp);
        if (!why.empty()) throw InputError("--pp", why);
    }
}
}  // namespace

void validate_request(const ModelConfig& model, const GpuSpec& gpu, const SearchRequest& req) {
    if (req.gpus < 1) throw InputError("--gpus", "must be a positive integer, got " + str(req.gpus));
    if (req.gbs_tokens < 1) throw InputError("--gbs-tokens", "must be a positive integer, got " + str(req.gbs_tokens));
    if (req.seq < 0) throw InputError("--seq", "must be a positive integer, got " + str(req.seq));
    // Documented bounds (limits.hpp), so the search's work and arithmetic stay bounded.
    if (req.gpus > limits::kMaxGpus)
        throw InputError("--gpus", str(req.gpus) + " exceeds the limit kMaxGpus = " + str(limits::kMaxGpus));
    if (req.gbs_tokens > limits::kMaxGlobalBatchTokens)
        throw InputError("--gbs-tokens", str(req.gbs_tokens) + " exceeds the limit kMaxGlobalBatchTokens = " +
                                             str(limits::kMaxGlobalBatchTokens));
    if (req.seq > limits::kMaxSeq)
        throw InputError("--seq", str(req.seq) + " exceeds the limit kMaxSeq = " + str(limits::kMaxSeq));
    if (!(req.headroom >= 0.0 && req.headroom < 1.0))
        throw InputError("--headroom", "must be a fraction in [0, 1), got " + format_real(req.headroom));
    if (!(req.batch_tolerance >= 0.0)) throw InputError("--batch-tolerance", "must be >= 0");
    if (req.top_k < 1) throw InputError("--top-k", "must be at least 1");
    validate_memory_options(req.memory, req.pins.fixed);
    // A model the framework cannot run at all is bad input, not a table of refused families.
    if (req.memory.profile.check_model) req.memory.profile.check_model(model);
    if (req.top_k > limits::kMaxTopK)
        throw InputError("--top-k", str(req.top_k) + " exceeds the limit kMaxTopK = " + str(limits::kMaxTopK));
    if (req.max_plans < 1 || req.max_plans > limits::kMaxSearchPlans)
        throw InputError("--max-plans", "must be in [1, " + str(limits::kMaxSearchPlans) + "] (kMaxSearchPlans), got " +
                                            str(req.max_plans));
    const PlanPins& p = req.pins;
    const std::pair<const char*, const std::optional<std::int64_t>*> counts[] = {
        {"--mbs", &p.mbs}, {"--grad-acc", &p.grad_acc}, {"--dp", &p.dp}, {"--tp", &p.tp}, {"--pp", &p.pp}};
    for (const auto& [flag, v] : counts) {
        if (*v && **v < 1) throw InputError(flag, "must be a positive integer, got " + str(**v));
        if (*v && **v > limits::kMaxGlobalBatchTokens)
            throw InputError(flag, str(**v) + " exceeds the limit kMaxGlobalBatchTokens = " +
                                       str(limits::kMaxGlobalBatchTokens));
    }
    if (p.zero && (*p.zero < 0 || *p.zero > 3)) throw InputError("--zero", "must be 0, 1, 2 or 3");
    if (p.zero && p.pp && *p.pp > 1 && *p.zero > req.max_zero_with_pp)
        throw InputError("--zero", "ZeRO-" + std::to_string(*p.zero) + " with pipeline parallelism (--pp " + str(*p.pp) +
                                       ") is refused by the target framework (at most ZeRO-" +
                                       std::to_string(req.max_zero_with_pp) + " with pp > 1)");
    if (p.dropout && !(*p.dropout >= 0.0 && *p.dropout < 1.0)) throw InputError("--dropout", "must be in [0, 1)");
    // Megatron-LM runs --fp8-param-gather with fp8 and its distributed optimizer only (fp8_params.cpp).
    if (p.fixed.fp8_param_gather && (p.precision != Precision::fp8_mixed || p.zero != zero_optimizer_states))
        throw InputError("--fp8-param-gather", "is searched only with --precision fp8-mixed and --zero 1 pinned "
                                               "(Megatron-LM runs it with fp8 and its distributed optimizer)");
    for (const auto& [flag, v] : {std::pair{"--dp", p.dp}, std::pair{"--tp", p.tp}, std::pair{"--pp", p.pp}})
        if (v && *v > req.gpus) throw InputError(flag, str(*v) + " exceeds --gpus " + str(req.gpus));
    const std::int64_t pinned = p.dp.value_or(1) * p.tp.value_or(1) * p.pp.value_or(1);  // each <= 2^20
    if (req.gpus % pinned != 0)
        throw InputError(p.dp ? "--dp" : p.tp ? "--tp" : "--pp",
                         "pinned dp*tp*pp = " + str(pinned) + " does not divide --gpus " + str(req.gpus));
    if (p.dp && p.tp && p.pp && pinned != req.gpus)
        throw InputError("--gpus", "dp*tp*pp = " + str(pinned) + " but --gpus is " + str(req.gpus));
    check_pinned_split(model, req);
    if (p.sp && *p.sp && p.tp && *p.tp == 1) throw InputError("--sp", "sequence parallelism needs --tp > 1");
    if (p.precision && !compute_peak_flops_per_s(gpu, *p.precision))
        throw InputError("--precision", gpu.name + " publishes no dense peak for " +
                                            std::string(to_string(*p.precision)) +
                                            ": its speed and MFU would be a guess");
    const std::int64_t seq = req.seq > 0 ? req.seq : std::min(model.max_positions, kDefaultSeqCap);
    // A batch below one sequence is a request error, not a memory problem.
    if (req.gbs_tokens < seq)
        throw InputError("--gbs-tokens", str(req.gbs_tokens) + (req.gbs_tokens == 1 ? " token" : " tokens") +
                                             " is less than one sequence of " + str(seq) +
                                             " tokens (--seq): the global batch holds at least one sequence");
    if (seq > model.max_positions)
        throw InputError("--seq", str(seq) + " exceeds the model's " + str(model.max_positions) +
                                      (model.position == PositionKind::learned ? " learned positions"
                                                                               : " positions (max_position_embeddings)"));
    // Sequence parallelism splits each sequence's tokens over the tp ranks (validate_plan's rule):
    // with both pinned, no layout repairs it.
    if (p.sp && *p.sp && p.tp && seq % *p.tp != 0)
        throw InputError("--sp", "sequence length " + str(seq) + " is not divisible by --tp " + str(*p.tp));
    // Pinned extension settings that no layout repairs (LoRA rank, capacity factor, ...) are
    // bad input: refused here, not searched and reported as "nothing fits".
    Plan pinned_settings;
    if (p.precision) pinned_settings.precision = *p.precision;
    apply_extension_pins(p, pinned_settings);
    validate_extension_settings(pinned_settings, model);
}

}  // namespace preflight
