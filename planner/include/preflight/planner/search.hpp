// Plan search: enumerate dp*tp*pp = N, mbs, grad_acc, ZeRO, recompute
// (and precision when not pinned); keep what fits under the headroom; rank.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "preflight/planner/error.hpp"
#include "preflight/planner/limits.hpp"
#include "preflight/planner/memory.hpp"
#include "preflight/planner/throughput.hpp"

namespace preflight {

// Plan fields the user pinned; unset fields are searched.
struct PlanPins {
    std::optional<std::int64_t> mbs, grad_acc, dp, tp, pp;
    std::optional<bool> sp;
    std::optional<ZeroStage> zero;
    std::optional<Recompute> recompute;
    std::optional<Precision> precision;
    std::optional<Optimizer> optimizer;
    std::optional<AttentionKind> attention;
    std::optional<double> dropout;
    // Extensions (plan_extensions.hpp). Fine-tuning is never searched: what the user asks
    // for (default full). Unset axes are weighed by search_extension_variants.
    Finetune finetune = Finetune::full;
    LoraSettings lora;
    std::optional<Offload> offload;
    std::optional<PpSchedule> pp_schedule;
    std::optional<std::int64_t> vpp, cp, ep;
    double moe_capacity_factor = 1.0;
    // The given values of plan fields the search does not vary (fields without a pin in
    // plan_schema.hpp): every searched plan starts from this plan.
    Plan fixed;
};

// Work one plan request may spend, shared by every search it makes (extension variants,
// "nothing fits" suggestions): plans judged on memory.
struct SearchBudget {
    std::int64_t limit = limits::kDefaultSearchPlans;  // the request's max_plans
    std::int64_t plans_left = limit;
    std::int64_t gpus = 0;  // the request's GPUs (a context-parallel variant searches gpus / cp)
};
// The request needs more than its max_plans plans judged (an InputError on --gpus).
class SearchTooLarge : public InputError {
public:
    using InputError::InputError;
};

struct SearchRequest {
    std::int64_t gpus = 1;
    std::int64_t gbs_tokens = 0;
    std::int64_t seq = 0;        // 0: the model's default (context capped at 4096)
    PlanPins pins;
    double headroom = 0.05;      // keep plans whose peak <= (1 - headroom) * GPU memory
    // A dp degree is searched when some mbs * grad_acc brings seq*mbs*grad_acc*dp within this
    // fraction of gbs_tokens; for each dp only the (mbs, grad_acc) pairs closest to the target are kept.
    double batch_tolerance = 0.05;
    int top_k = 10;
    // Plans judged on memory over all the searches this request makes (--max-plans; 1 to
    // limits::kMaxSearchPlans): past it the request is refused (SearchTooLarge).
    std::int64_t max_plans = limits::kDefaultSearchPlans;
    bool suggest = true;         // when nothing fits, search relaxed requests for the smallest change
    // Highest ZeRO stage searched together with pipeline parallelism (pp > 1); 1 for
    // DeepSpeed, whose pipeline engine refuses ZeRO-2/3 (deepspeed/runtime/pipe/engine.py).
    int max_zero_with_pp = 3;
    MemoryOptions memory;
    ThroughputOptions throughput;
    // Host memory per node available for offloaded states; offload is searched only when
    // it is known (or --offload is pinned), and plans needing more are rejected.
    std::optional<std::int64_t> host_memory_bytes;
    bool expand_variants = true;  // internal: false inside search_extension_variants' own searches
    // Called after each tensor-parallel degree with the layouts (tp, pp) this search has done,
    // its layouts in all, and the plans judged by every search of the request so far (the
    // extension variants each search their own layouts): callers show progress on long searches.
    std::function<void(std::int64_t, std::int64_t, std::int64_t)> progress;
    // Internal: the budget this request's searches share; null starts a fresh one.
    std::shared_ptr<SearchBudget> budget;
};

// The suggestion line that says the request's budget (its max_plans) ran out before every
// change was tried.
std::string search_budget_spent_note(const SearchRequest& req);
// Internal: how many fitting plans a search keeps for the interleaved refinement, which may lift
// any pipeline plan among them (search_extensions.cpp): kMaxTopK whatever --top-k shows, so the
// recommendation does not depend on how many plans are printed (it did: --top-k 1 and 2 differed).
int refine_pool(const SearchRequest& req);

struct Candidate {
    Plan plan;
    double batch_error = 0;  // (seq*mbs*grad_acc*dp - gbs_tokens) / gbs_tokens
    MemoryReport memory;
    Throughput throughput;
};

struct Rejection {
    Plan plan;           // a representative plan of the rejected family
    std::string family;  // e.g. "ZeRO-0, recompute none"
    std::string reason;  // e.g. "ZeRO-0: 128.5 GiB > 76.0 GiB"
    std::int64_t plans = 0;          // plans of the family rejected
    std::int64_t peak_bytes = 0;     // representative's peak (memory rejections), else 0
    bool others_fit = false;         // some plan of the same family fits
};

// A suggested change with the plan that then fits, the memory the fit is judged on (bytes; a
// device need where the profile judges the allocator's pool) and the plan's flags with the
// request's own (to_flags + request_flags: they paste into `memory`).
struct SuggestedPlan {
    std::string change;
    Plan plan;
    std::int64_t judged_bytes = 0;
    std::string flags;
};

struct SearchResult {
    std::vector<Candidate> candidates;  // ranked; [0] is the recommendation
    std::vector<Rejection> rejected;
    std::vector<std::string> suggestions;  // when nothing fits: the smallest change that would
    std::vector<SuggestedPlan> suggested;  // the suggestions that name a plan, with it, in order
    std::int64_t plans_evaluated = 0;  // memory + step time evaluated
    std::int64_t plans_fitting = 0;
    // Plans not evaluated because one no larger (micro-batch, micro-batches in flight) of the
    // same family did not fit; the rejected families' plan counts include them.
    std::int64_t plans_ruled_out = 0;
    std::int64_t seq = 0;              // the resolved sequence length
    std::int64_t limit_bytes = 0;      // (1 - headroom) * GPU memory
    bool mbs_capped = false;           // micro-batches above limits::kMaxSearchMbs were not searched
};

// Checks the request (gpus, gbs_tokens, seq, headroom, pins) and throws InputError naming the flag.
void validate_request(const ModelConfig& model, const GpuSpec& gpu, const SearchRequest& request);

SearchResult search_plans(const ModelConfig& model, const GpuSpec& gpu, const SearchRequest& request);

// The top candidate of `request` searched without suggestions; nothing when no plan fits or
// the request is refused (InputError; SearchTooLarge is passed on). What the "nothing fits"
// suggestions try.
std::optional<Candidate> best_plan_after_change(const ModelConfig& model, const GpuSpec& gpu, SearchRequest request);

// Extension axes of the search (search_extensions.cpp): when an unpinned axis applies
// (offload with known host memory, context parallelism for long sequences, expert
// parallelism for MoE, whole-layer recompute only under LoRA), runs one pinned search per
// variant and merges the ranked candidates; nullopt when the plain search is the whole answer.
std::optional<SearchResult> search_extension_variants(const ModelConfig& model, const GpuSpec& gpu,
                                                      const SearchRequest& request);
// Copies the extension pins into a plan.
void apply_extension_pins(const PlanPins& pins, Plan& plan);
// Why a plan's extension fields do not fit its layout ("--vpp: ..."), "" when they do: the
// search lists such plans as refused, with this reason.
std::string extension_plan_problem(const Plan& plan, const ModelConfig& model);
// Interleaved-schedule refinements of the ranked pipeline candidates (the refine_pool kept), then
// the request's top_k of them, and, when nothing fits, suggestions the extensions offer (LoRA /
// QLoRA, offload with its host memory).
// The request's settings beside the plan that its memory depends on, as flags (" --framework
// deepspeed --compiled-loss --host-pace waits --overhead-bytes N"; empty under the defaults): a
// suggestion's plan, or the recommendation's, with them pastes into `memory` and gives the bytes
// it claims.
std::string request_flags(const SearchRequest& request);
// Drops the candidates the framework would refuse to launch as they stand (a 1F1B pipeline
// Megatron-LM cannot split: pipeline_split_problem); searched for their interleaved refinements.
void drop_unlaunchable_pipelines(const ModelConfig& model, const SearchRequest& request, SearchResult& result);
void refine_with_extensions(const ModelConfig& model, const GpuSpec& gpu, const SearchRequest& request,
                            SearchResult& result);

}  // namespace preflight
