// The plan search's "smallest change that would fit" (search_internal.hpp suggest_changes): each
// change a request could make, searched; those that fit are listed, lightest first.
#include <string>

#include "preflight/planner/format.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/search.hpp"
#include "search_internal.hpp"

namespace preflight::detail {

std::string record_suggestion(SearchResult& out, const std::string& change, const Candidate& c, const SearchRequest& r) {
    // The plan in full, as `memory` takes it (its recipe, --sp, schedule and accumulation too: the
    // fit may rest on any of them, and a summary re-checked with `memory` judged another plan).
    // Braced, not emplace_back(args...): clang 14 (the fuzz build) has no parenthesized aggregate init.
    const SuggestedPlan& s = out.suggested.emplace_back(
        SuggestedPlan{change, c.plan, judged_bytes(c.memory, r.memory.profile), to_flags(c.plan) + request_flags(r)});
    return change + ": then " + s.flags + " fits at " + gib(s.judged_bytes) +
           (r.memory.profile.verdict_on_reserved ? " device need" : "");
}

namespace {

// Searches the changed request; when something fits, records the change as a suggestion.
bool try_change(const ModelConfig& model, const GpuSpec& gpu, const SearchRequest& r, const std::string& change,
                SearchResult& out) {
    const std::optional<Candidate> best = best_plan_after_change(model, gpu, r);
    if (!best) return false;
    out.suggestions.push_back(record_suggestion(out, change, *best, r));
    return true;
}

}  // namespace

// When nothing fits: the smallest change that makes something fit, least disruptive first.
void suggest_changes(const ModelConfig& model, const GpuSpec& gpu, const SearchRequest& req, std::int64_t seq,
                     SearchResult& out) {
    const PlanPins& pins = req.pins;
    auto attempt = [&](const SearchRequest& r, const std::string& change) { return try_change(model, gpu, r, change, out); };
    SearchRequest r = req;
    if (req.host_memory_bytes) {  // the host limit may be what refuses every plan (offload)
        r.host_memory_bytes.reset();
        attempt(r, "--host-memory left out (more host memory per node than " + gib(*req.host_memory_bytes) + ")");
    }
    // The pinned ZeRO stage and recompute mode: the first other one that fits, lightest first (a
    // stage the framework refuses may have a lighter neighbour that runs: torchtitan's ZeRO-1, 2).
    const char* shards[] = {"", "optimizer states", "gradients and optimizer states", "weights, gradients and optimizer states"};
    for (int z = pins.zero ? static_cast<int>(*pins.zero) + 1 : 4; z <= 3; ++z) {
        r = req;
        r.pins.zero = static_cast<ZeroStage>(z);
        if (attempt(r, "--zero " + str(z) + " (shard " + shards[z] + " over dp)")) break;
    }
    for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
        if (!pins.recompute || *pins.recompute == rc || (rc == Recompute::none && *pins.recompute != Recompute::selective)) continue;
        r = req;
        r.pins.recompute = rc;
        if (attempt(r, "--recompute " + std::string(to_string(rc)) +
                           (rc == Recompute::full ? " (keep only each layer's input)" : "")))
            break;
    }
    if (pins.precision && (*pins.precision == Precision::fp32 || *pins.precision == Precision::bf16_mixed_fp32_grads)) {
        r = req;
        r.pins.precision = Precision::bf16_mixed;
        attempt(r, "--precision bf16-mixed");
    }
    // Pure bf16 is not searched unpinned (search.cpp searched_precisions): offered here.
    if (!pins.precision && runs_precision(req.memory.profile, Precision::bf16) &&
        compute_peak_flops_per_s(gpu, Precision::bf16)) {
        r = req;
        r.pins.precision = Precision::bf16;
        attempt(r, "--precision bf16 (pure bf16: no fp32 master weights, less stable than mixed precision)");
    }
    if (pins.tp || pins.pp || pins.dp) {
        r = req;
        r.pins.tp.reset();
        r.pins.pp.reset();
        r.pins.dp.reset();
        attempt(r, "unpin --dp/--tp/--pp (let the search use tensor and pipeline parallelism)");
    }
    if (pins.mbs || pins.grad_acc) {
        r = req;
        r.pins.mbs.reset();
        r.pins.grad_acc.reset();
        attempt(r, "unpin --mbs/--grad-acc");
    }
    for (std::int64_t s = seq / 2; s >= 128; s /= 2) {
        r = req;
        r.seq = s;
        if (attempt(r, "--seq " + str(s) + " (shorter sequence, same tokens per step)")) break;
    }
    // A cp variant searches its GPUs / cp (variant_request): the suggestion names the job's count.
    const std::int64_t gpus = req.gpus, cp = req.pins.cp.value_or(1);
    for (std::int64_t n = 2 * gpus; n <= 64 * gpus; n *= 2) {
        r = req;
        r.gpus = n;
        r.pins.dp.reset();
        if (attempt(r, "--gpus " + str(n * cp) + " (more GPUs)")) break;
    }
    if (out.suggestions.empty() && out.plans_evaluated == 0 && !out.rejected.empty())
        out.suggestions.push_back("no plan was judged on memory: the search refused every plan it built (each rejected "
                                  "family says why); change the flag the refusal names");
    if (out.suggestions.empty())
        out.suggestions.push_back("no single change tried fits under --framework " + req.memory.profile.name +
                                  " (ZeRO-3, full recompute, TP/PP and up to " + str(64 * gpus) +
                                  " GPUs where it runs them, sequence down to 128): choose a larger GPU, a smaller "
                                  "model or another --framework");
}

}  // namespace preflight::detail
