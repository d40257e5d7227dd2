// Plan search: enumerate dp*tp*pp = N, mbs/grad_acc closest to the
// target batch, ZeRO 0-3, recompute, SP and precision; keep what fits under the
// headroom; rank by predicted tokens/s.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>

#include "preflight/planner/allocator_model.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/extensions.hpp"
#include "preflight/planner/format.hpp"
#include "preflight/planner/limits.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/search.hpp"
#include "search_internal.hpp"

namespace preflight {

namespace {

using detail::batch_shapes;
using detail::gib;
using detail::Shape;
using detail::str;

std::vector<std::int64_t> divisors(std::int64_t n) {
    // Pairs (d, n/d) up to sqrt(n): O(sqrt n) work, ascending order.
    std::vector<std::int64_t> low, high;
    for (std::int64_t d = 1; d <= n / d; ++d)
        if (n % d == 0) {
            low.push_back(d);
            if (d != n / d) high.push_back(n / d);
        }
    low.insert(low.end(), high.rbegin(), high.rend());
    return low;
}

// A plan that fits, with what the ranking needs.
struct FittingPlan {
    Plan plan;
    std::int64_t peak_bytes;
    double tokens_per_s;
    double score;  // detail::rank_score
    double error;
    // Fits at the top of its memory range too (MemoryReport::device_peak_high_bytes: the host
    // running ahead), not only at the expected pace.
    bool surely_fits = true;
    // Its batch is within --batch-tolerance of the target (a pinned --mbs or --grad-acc can
    // leave every shape of a dp outside it; such plans are kept, but rank after the others).
    bool batch_within = true;
    std::int64_t order = 0;  // the n-th plan found to fit: the last tie-break, so the ranking is a total order
};

// Ranking: plans that surely fit before those that may not, then the score (predicted tokens/s
// less up to 1 % for memory, detail::rank_score), ties to less memory, then parallel data
// parallelism over sequential accumulation (larger dp, fewer accumulation steps).
bool better(const FittingPlan& a, const FittingPlan& b) {
    if (a.surely_fits != b.surely_fits) return a.surely_fits;
    if (a.batch_within != b.batch_within) return a.batch_within;
    if (a.score != b.score) return a.score > b.score;
    if (a.peak_bytes != b.peak_bytes) return a.peak_bytes < b.peak_bytes;
    if (a.plan.dp != b.plan.dp) return a.plan.dp > b.plan.dp;
    if (a.plan.grad_acc != b.plan.grad_acc) return a.plan.grad_acc < b.plan.grad_acc;
    return a.order < b.order;
}

}  // namespace
namespace detail {
// Why tensor parallelism of degree t cannot split the model (empty when it can).
std::string tp_problem(const ModelConfig& m, std::int64_t t) {
    if (m.heads % t != 0) return "does not divide the " + str(m.heads) + " attention heads";
    if (m.kv_heads % t != 0) return "does not divide the " + str(m.kv_heads) + " key/value heads";
    if (m.ffn_hidden % t != 0) return "does not divide the MLP width " + str(m.ffn_hidden);
    return {};
}

std::vector<Shape> batch_shapes(const SearchRequest& req, std::int64_t seq, std::int64_t dp, std::int64_t grad_acc_step) {
    const double target = static_cast<double>(req.gbs_tokens);
    const double per_replica = target / static_cast<double>(seq * dp);  // sequences per replica
    auto make = [&](std::int64_t mbs, std::int64_t ga) {
        const double achieved = static_cast<double>(seq) * static_cast<double>(mbs) * static_cast<double>(ga) *
                                static_cast<double>(dp);  // in double: pinned shapes may exceed int64
        return Shape{mbs, ga, (achieved - target) / target};
    };
    const auto step = static_cast<double>(std::max<std::int64_t>(grad_acc_step, 1));
    auto nearest_ga = [&](std::int64_t mbs) {  // the nearest multiple of the step, at least one step
        const double steps = std::max(1.0, static_cast<double>(std::llround(per_replica / static_cast<double>(mbs) / step)));
        return static_cast<std::int64_t>(steps * step);
    };
    if (req.pins.mbs && req.pins.grad_acc) return {make(*req.pins.mbs, *req.pins.grad_acc)};
    if (req.pins.mbs) return {make(*req.pins.mbs, nearest_ga(*req.pins.mbs))};
    if (req.pins.grad_acc) {
        const std::int64_t mbs =
            std::max<std::int64_t>(1, std::llround(per_replica / static_cast<double>(*req.pins.grad_acc)));
        return {make(mbs, *req.pins.grad_acc)};
    }
    // Bounded work: micro-batches above limits::kMaxSearchMbs sequences are not enumerated.
    const std::int64_t max_mbs = std::clamp<std::int64_t>(
        static_cast<std::int64_t>(std::min(std::ceil(per_replica), 1e18)), 1, limits::kMaxSearchMbs);
    std::vector<Shape> all;
    double best = 1e300;
    for (std::int64_t mbs = 1; mbs <= max_mbs; ++mbs) {
        const Shape s = make(mbs, nearest_ga(mbs));
        best = std::min(best, std::abs(s.error));
        all.push_back(s);
    }
    std::vector<Shape> keep;
    for (const Shape& s : all)
        if (std::abs(s.error) <= best * (1 + 1e-9) + 1e-12) keep.push_back(s);
    return keep;
}
}  // namespace detail
namespace {

// Memory rejections are grouped by ZeRO stage and parallel layout (dp, tp, pp).
using FamilyKey = std::tuple<int, std::int64_t, std::int64_t, std::int64_t>;

// What one search carries from layout to layout.
struct SearchState {
    SearchState(const ModelConfig& m, const GpuSpec& g, const SearchRequest& r, SearchResult& o)
        : model(m), gpu(g), req(r), out(o) {}
    const ModelConfig& model;
    const GpuSpec& gpu;
    const SearchRequest& req;
    SearchResult& out;
    Plan base;                     // the pinned fields every plan shares
    std::int64_t seq = 0;
    std::int64_t limit = 0;        // bytes a plan may use: (1 - headroom) * GPU memory
    std::vector<Precision> precisions;
    std::vector<Recompute> recomputes;
    MemoryOptions memory;          // no timeline
    ThroughputOptions throughput;  // no breakdown
    std::map<FamilyKey, Rejection> families;
    // Plans of a family the memory model refused as input (a framework profile that cannot
    // build them): counted apart, so a family nothing was judged in is never reported as a
    // memory rejection.
    struct Refusal {
        std::int64_t plans = 0;
        Plan plan;        // the first refused plan
        std::string why;  // the rejection's reason: who refused it, and its InputError message
    };
    std::map<FamilyKey, Refusal> refused;
    // Plans that fit the GPU but need more host memory per node than --host-memory (offload).
    std::map<FamilyKey, Refusal> over_host_memory;
    std::int64_t plans_fitting = 0;
    std::vector<FittingPlan> top;  // the best fitting plans (refine_pool), a heap whose front is the worst kept
};

// Precision: pinned, or every recipe whose compute peak the GPU publishes (the others rejected).
std::vector<Precision> searched_precisions(const GpuSpec& gpu, const PlanPins& pins, const Plan& base,
                                           const FrameworkProfile& profile, SearchResult& out) {
    if (pins.precision) return {*pins.precision};
    // Unpinned, the search offers the recipes frameworks train with by default, with fp32 master
    // weights: pure bf16 (no master copy) only when --precision asks for it (a suggestion when
    // nothing fits), fp16-mixed (loss scaling) only on GPUs without a bf16 peak.
    const bool bf16_mixed_searched =
        runs_precision(profile, Precision::bf16_mixed) && compute_peak_flops_per_s(gpu, Precision::bf16_mixed);
    std::vector<Precision> precisions;
    for (Precision pr : all_precisions()) {
        if (!runs_precision(profile, pr)) continue;  // the framework cannot run it: not a candidate
        if (pr == Precision::bf16 || (pr == Precision::fp16_mixed && bf16_mixed_searched)) continue;
        if (compute_peak_flops_per_s(gpu, pr)) {
            precisions.push_back(pr);
            continue;
        }
        Rejection r;
        r.plan = base;
        r.plan.precision = pr;
        r.family = "precision " + std::string(to_string(pr));
        r.reason = gpu.name + " publishes no dense peak for " + std::string(to_string(pr)) +
                   ": not searched (its speed and MFU would be a guess)";
        out.rejected.push_back(r);
    }
    return precisions;
}

// The search's own tp candidates stay inside a node and must split the model; false (and a
// rejection) when tp cannot be used.
bool tp_usable(SearchState& st, std::int64_t tp) {
    if (st.req.pins.tp) return true;
    std::string why = detail::tp_problem(st.model, tp);
    if (why.empty() && tp > st.gpu.gpus_per_node) why = "exceeds the " + str(st.gpu.gpus_per_node) + " GPUs of a node";
    if (why.empty()) return true;
    Rejection r;
    r.plan = st.base;
    r.plan.tp = tp;
    r.family = "tp " + str(tp);
    r.reason = "tp " + str(tp) + " " + why;
    st.out.rejected.push_back(r);
    return false;
}

// Whether a family of this name is already listed as rejected (one row each).
bool already_rejected(const SearchState& st, const std::string& family) {
    for (const Rejection& seen : st.out.rejected)
        if (seen.family == family) return true;
    return false;
}

// False (and one rejection per pp) when the framework refuses a pipeline of pp stages over the
// model's layers (pipeline_split_problem: Megatron-LM's even split).
bool pp_usable(SearchState& st, std::int64_t pp) {
    // validate_plan_extensions' rule; a pinned uneven split's (validate_request: pp pinned, checked there)
    if (st.base.pp_schedule == PpSchedule::interleaved || has_uneven_pipeline_split(st.base)) return true;
    const std::string why = pipeline_degree_problem(st.req.memory.profile, st.model, pp);
    if (why.empty()) return true;
    const std::string family = "pp " + str(pp);
    if (already_rejected(st, family)) return false;
    Rejection r;
    r.plan = st.base;
    r.plan.pp = pp;
    r.family = family;
    r.reason = why;
    st.out.rejected.push_back(r);
    return false;
}

// False (and a rejection) when no (mbs, grad_acc) brings dp replicas within the batch tolerance.
bool batch_reachable(SearchState& st, const Plan& layout, const std::vector<Shape>& shapes) {
    const PlanPins& pins = st.req.pins;
    if (pins.mbs || pins.grad_acc || std::abs(shapes.front().error) <= st.req.batch_tolerance) return true;
    Rejection r;
    r.family = "batch dp " + str(layout.dp);
    // One row per dp: its batch shapes depend on dp alone (and on pp under a pinned interleaved schedule).
    if (pins.pp_schedule == PpSchedule::interleaved && layout.pp > 1) r.family += " pp " + str(layout.pp);
    if (already_rejected(st, r.family)) return false;
    r.plan = layout;
    r.plan.mbs = shapes.front().mbs;
    r.plan.grad_acc = shapes.front().grad_acc;
    char buf[160];
    std::snprintf(buf, sizeof buf, "dp %lld reaches at best %lld tokens per step (%+.1f %% of %lld)",
                  static_cast<long long>(layout.dp), static_cast<long long>(r.plan.global_batch_tokens()),
                  100.0 * shapes.front().error, static_cast<long long>(st.req.gbs_tokens));
    r.reason = buf;
    st.out.rejected.push_back(r);
    return false;
}

std::vector<bool> searched_sps(const PlanPins& pins, std::int64_t tp) {
    if (pins.sp) return {*pins.sp};
    if (tp > 1) return {false, true};
    return {false};
}

// Architectures before Blackwell (the GPU spec's "architecture"), where Megatron-LM asks for
// CUDA_DEVICE_MAX_CONNECTIONS=1 under tensor or context parallelism.
bool pre_blackwell(const GpuSpec& gpu) {
    for (const char* a : {"volta", "turing", "ampere", "ada", "hopper"})
        if (gpu.architecture == a) return true;
    return false;
}

std::vector<ZeroStage> searched_zeros(const PlanPins& pins, std::int64_t dp_cp, std::int64_t pp, const FrameworkProfile& profile) {
    if (pins.zero) return {*pins.zero};
    // ZeRO shards over dp x cp ranks (memory.cpp): one shards nothing, but a framework may offload
    // the optimizer only under a stage (FrameworkProfile::offload_needs_zero).
    if (dp_cp == 1)
        return {pins.offload == Offload::optimizer && profile.offload_needs_zero ? zero_optimizer_states : zero_none};
    std::vector<ZeroStage> z = profile.zero_stages;  // the stages the framework implements (empty: all)
    if (z.empty()) z = {zero_none, zero_optimizer_states, zero_gradients, zero_weights};
    if (pp > 1) std::erase_if(z, [&](ZeroStage s) { return s > profile.max_zero_with_pp; });
    return z;
}

// Plans refused before their memory was judged (`plan` the first), counted against their family.
void note_refusal(SearchState& st, const Plan& plan, const std::string& why, std::int64_t plans = 1) {
    auto& refusal = st.refused[{plan.zero, plan.dp, plan.tp, plan.pp}];
    if (refusal.plans == 0) {
        refusal.plan = plan;
        refusal.why = why;
    }
    refusal.plans += plans;
}

// One plan judged on memory, out of the request's budget (bounded work).
void spend_budget(SearchState& st) {
    if (st.req.budget->plans_left-- > 0) return;
    // A mixture-of-experts model's expert-parallel degree multiplies the layouts: --ep narrows most.
    const SearchBudget& b = *st.req.budget;
    throw SearchTooLarge("--gpus", str(b.gpus) + " GPUs with this batch and these pins need more than --max-plans " +
                                       str(b.limit) + " plans judged on memory (default " +
                                       str(limits::kDefaultSearchPlans) + ", at most " + str(limits::kMaxSearchPlans) +
                                       " = kMaxSearchPlans): raise --max-plans, or pin " +
                                       (st.model.is_moe() ? "--ep, " : "") +
                                       "--tp, --pp, --zero, --recompute or --precision to narrow it");
}

// Keeps a fitting plan if it ranks among the best refine_pool so far: memory stays bounded
// however many plans fit (a 400,000-GPU search finds tens of thousands).
void keep_if_top(SearchState& st, FittingPlan fit) {
    fit.order = st.plans_fitting++;
    auto& top = st.top;
    if (top.size() == static_cast<std::size_t>(refine_pool(st.req))) {
        if (!better(fit, top.front())) return;
        std::pop_heap(top.begin(), top.end(), better);
        top.back() = std::move(fit);
    } else {
        top.push_back(std::move(fit));
    }
    std::push_heap(top.begin(), top.end(), better);
}

// Evaluates one family (layout, sp, ZeRO, recompute, precision) over the batch shapes:
// the fitting plans go to st.fits, the others count against the family.
void evaluate_family(SearchState& st, const Plan& family, const std::vector<Shape>& shapes) {
    // An expert-parallel degree that does not divide dp * cp refuses every batch shape alike:
    // noted once for the family (an exception per shape was a quarter of a MoE search's time).
    if (const std::string why = ep_data_parallel_problem(family); !why.empty() && !shapes.empty()) {
        Plan first = family;
        first.mbs = shapes.front().mbs;
        first.grad_acc = shapes.front().grad_acc;
        note_refusal(st, first, "the plan cannot run: --ep: " + why, static_cast<std::int64_t>(shapes.size()));
        return;
    }
    std::int64_t failed_mbs = 0, failed_cap = 0;
    for (const Shape& sh : shapes) {
        Plan plan = family;
        plan.mbs = sh.mbs;
        plan.grad_acc = sh.grad_acc;
        if (const std::string why = extension_plan_problem(plan, st.model); !why.empty()) {
            note_refusal(st, plan, "the plan cannot run: " + why);
            continue;
        }
        Rejection& fam = st.families[{plan.zero, plan.dp, plan.tp, plan.pp}];
        // Memory grows with mbs and with the micro-batches in flight, min(pp, grad_acc): a
        // plan at least as large on both as one that did not fit cannot fit either.
        const std::int64_t cap = std::min(plan.pp, sh.grad_acc);
        if (failed_mbs > 0 && sh.mbs >= failed_mbs && cap >= failed_cap) {
            ++fam.plans;
            ++st.out.plans_ruled_out;
            continue;
        }
        spend_budget(st);
        MemoryReport mem;
        try {
            mem = evaluate_memory(st.model, st.gpu, plan, st.memory);
        } catch (const InputError& e) {  // a framework profile that cannot build this plan (e.g. ZeRO-3)
            note_refusal(st, plan, std::string("the memory model cannot build it: ") + e.what());
            continue;
        }
        ++st.out.plans_evaluated;
        // Profiles with an allocator model judge the device need (reserved pool + memory
        // outside PyTorch), the others the allocated peak + overhead.
        const std::int64_t judged = judged_bytes(mem, st.memory.profile);
        if (judged > st.limit) {
            if (fam.plans == 0 || judged < fam.peak_bytes) {
                fam.plan = plan;
                fam.peak_bytes = judged;
            }
            ++fam.plans;
            if (failed_mbs == 0 || sh.mbs < failed_mbs) {
                failed_mbs = sh.mbs;
                failed_cap = cap;
            }
            continue;
        }
        // Offloaded states live in the host's memory: a plan needing more than --host-memory
        // per node cannot run there, whichever search (plain or variant) built it.
        if (st.req.host_memory_bytes && mem.host_bytes_per_node > *st.req.host_memory_bytes) {
            auto& over = st.over_host_memory[{plan.zero, plan.dp, plan.tp, plan.pp}];
            if (over.plans++ == 0) {
                over.plan = plan;
                over.why = "needs " + format_bytes(mem.host_bytes_per_node) + " of host memory per node > --host-memory " +
                           format_bytes(*st.req.host_memory_bytes);
            }
            continue;
        }
        fam.others_fit = true;
        const Throughput th = estimate_throughput(
            st.model, st.gpu, plan, throughput_options_for(st.req.memory.profile, st.model, plan, st.throughput));
        keep_if_top(st, {plan, judged, th.tokens_per_s, detail::rank_score(th.tokens_per_s, judged, st.limit), sh.error,
                         mem.device_peak_high_bytes.value_or(judged) <= st.limit,
                         std::abs(sh.error) <= st.req.batch_tolerance});
    }
}

// Every family of one parallel layout (tp, pp; dp follows from the GPUs).
void search_layout(SearchState& st, std::int64_t tp, std::int64_t pp) {
    const PlanPins& pins = st.req.pins;
    Plan layout = st.base;
    layout.tp = tp;
    layout.pp = pp;
    layout.dp = st.req.gpus / (tp * pp);
    if (pins.dp && layout.dp != *pins.dp) return;
    // A pinned interleaved schedule takes whole groups of pp micro-batches (Megatron-LM).
    const bool interleaved = pins.pp_schedule == PpSchedule::interleaved && pp > 1;
    const std::vector<Shape> shapes = batch_shapes(st.req, st.seq, layout.dp, interleaved ? pp : 1);
    if (!batch_reachable(st, layout, shapes)) return;
    if (interleaved && pins.grad_acc && *pins.grad_acc % pp != 0) {  // every family alike: refused once
        Plan first = layout;
        first.mbs = shapes.front().mbs;
        first.grad_acc = shapes.front().grad_acc;
        note_refusal(st, first, "the plan cannot run: --grad-acc: " + str(*pins.grad_acc) +
                                    " micro-batches is not a multiple of --pp " + str(pp) +
                                    " (Megatron-LM's interleaved schedule requires it)");
        return;
    }
    const std::vector<bool> sps = searched_sps(pins, tp);
    std::vector<ZeroStage> zeros = searched_zeros(pins, layout.dp * st.base.cp, pp, st.req.memory.profile);
    // Megatron-LM warns against tp or cp beside Megatron-FSDP (ZeRO-2/3) before Blackwell (arguments.py
    // validate_args, d98e8a6: FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS != 1): unpinned, left out.
    if (!pins.zero && st.req.memory.profile.megatron_fsdp && (tp > 1 || st.base.cp > 1) &&
        pre_blackwell(st.gpu))
        std::erase_if(zeros, [](ZeroStage z) { return z >= zero_gradients; });
    for (Precision pr : st.precisions)
        for (bool sp : sps) {
            if (sp && (tp == 1 || st.seq % tp != 0)) continue;
            for (ZeroStage zero : zeros)
                for (Recompute rc : st.recomputes) {
                    if (pp > 1 && zero > st.req.max_zero_with_pp) continue;
                    Plan family = layout;
                    family.sp = sp;
                    family.zero = zero;
                    family.recompute = rc;
                    family.precision = pr;
                    evaluate_family(st, family, shapes);
                }
        }
}

// Every parallel layout dp * tp * pp = N, with progress reports.
void search_layouts(SearchState& st) {
    const PlanPins& pins = st.req.pins;
    const std::int64_t gpus = st.req.gpus;
    std::int64_t layouts_total = 0, layouts_done = 0;
    for (std::int64_t tp : divisors(gpus)) layouts_total += static_cast<std::int64_t>(divisors(gpus / tp).size());
    for (std::int64_t tp : divisors(gpus)) {
        if (st.req.progress)  // plans judged by every search of the request so far (extension variants too)
            st.req.progress(layouts_done, layouts_total, st.req.budget->limit - st.req.budget->plans_left);
        layouts_done += static_cast<std::int64_t>(divisors(gpus / tp).size());
        if (pins.tp && tp != *pins.tp) continue;
        if (!tp_usable(st, tp)) continue;
        for (std::int64_t pp : divisors(gpus / tp)) {
            if (pins.pp && pp != *pins.pp) continue;
            if (pp > st.model.layers) continue;
            if (!pp_usable(st, pp)) continue;
            search_layout(st, tp, pp);
        }
    }
}

// "ZeRO-z, dp D tp T pp P": how the rejection list names a family.
std::string family_name(const FamilyKey& key) {
    const auto& [zero, dp, tp, pp] = key;
    return "ZeRO-" + std::to_string(zero) + ", dp " + str(dp) + " tp " + str(tp) + " pp " + str(pp);
}

// Memory rejections per family, families with no fitting plan first; the representative
// is the family's smallest rejected plan.
void add_memory_rejections(SearchState& st) {
    std::vector<Rejection> mem_rejections;
    for (auto& [key, r] : st.families) {
        if (r.plans == 0) continue;
        r.family = family_name(key);
        const bool host = st.over_host_memory.count(key) > 0;
        r.reason = "ZeRO-" + std::to_string(std::get<0>(key)) + ": " + gib(r.peak_bytes) + " > " + gib(st.limit) +
                   (r.others_fit ? " from mbs " + str(r.plan.mbs) + " up (smaller micro-batches fit)"
                    : host       ? " from mbs " + str(r.plan.mbs) + " up (smaller micro-batches need more host memory)"
                                 : " even at its smallest (mbs " + str(r.plan.mbs) + ", recompute " +
                                       std::string(to_string(r.plan.recompute)) + ", " +
                                       std::string(to_string(r.plan.precision)) + ")");
        mem_rejections.push_back(r);
    }
    std::stable_sort(mem_rejections.begin(), mem_rejections.end(),
                     [](const Rejection& a, const Rejection& b) { return !a.others_fit && b.others_fit; });
    st.out.rejected.insert(st.out.rejected.begin(), mem_rejections.begin(), mem_rejections.end());
    for (const auto& [key, over] : st.over_host_memory) {  // fit the GPU, not the host
        Rejection r;
        r.plan = over.plan;
        r.plans = over.plans;
        r.family = "host memory, " + family_name(key);
        r.reason = over.why;
        st.out.rejected.push_back(r);
    }
    // Families whose every plan was refused before its memory was judged: the refusal's reason.
    for (const auto& [key, refusal] : st.refused) {
        const auto it = st.families.find(key);
        if (it != st.families.end() && (it->second.plans > 0 || it->second.others_fit)) continue;
        Rejection r;
        r.plan = refusal.plan;
        r.plans = refusal.plans;
        r.family = family_name(key);
        r.reason = refusal.why;
        st.out.rejected.push_back(r);
    }
}

// Ranks the kept fitting plans and evaluates them in full.
void rank_candidates(SearchState& st) {
    auto& fits = st.top;
    std::sort_heap(fits.begin(), fits.end(), better);  // best first
    const std::size_t k = fits.size();
    ThroughputOptions full = st.req.throughput;
    full.breakdown = true;
    full.grad_bucket_bytes = st.req.memory.profile.grad_bucket_bytes;
    for (std::size_t i = 0; i < k; ++i) {
        Candidate c;
        c.plan = fits[i].plan;
        c.batch_error = fits[i].error;
        c.memory = evaluate_memory(st.model, st.gpu, c.plan, st.memory);
        c.throughput = estimate_throughput(st.model, st.gpu, c.plan,
                                           throughput_options_for(st.req.memory.profile, st.model, c.plan, full));
        st.out.candidates.push_back(std::move(c));
    }
}

}  // namespace

int refine_pool(const SearchRequest& req) {  // search.hpp: the pool refined, then the top_k shown
    return req.pins.pp_schedule ? req.top_k : std::max(req.top_k, static_cast<int>(limits::kMaxTopK));
}

std::string search_budget_spent_note(const SearchRequest& req) {
    return "(no further change tried: this request's searches have judged --max-plans " +
           str(req.budget ? req.budget->limit : req.max_plans) + " plans, its limit)";
}

SearchResult search_plans(const ModelConfig& model, const GpuSpec& gpu, const SearchRequest& request) {
    validate_request(model, gpu, request);
    SearchRequest req = request;
    if (!req.budget) req.budget = std::make_shared<SearchBudget>(SearchBudget{req.max_plans, req.max_plans, req.gpus});
    if (req.expand_variants)  // offload, cp, ep, LoRA recompute axes (search_extensions.cpp)
        if (auto merged = search_extension_variants(model, gpu, req)) return *merged;
    SearchResult out;
    const PlanPins& pins = req.pins;
    SearchState st(model, gpu, req, out);
    st.seq = req.seq > 0 ? req.seq : std::min(model.max_positions, kDefaultSeqCap);
    out.seq = st.seq;
    st.limit = static_cast<std::int64_t>(std::floor((1.0 - req.headroom) * static_cast<double>(gpu.memory_bytes)));
    out.limit_bytes = st.limit;

    st.base = pins.fixed;  // given fields the search does not vary
    st.base.seq = st.seq;
    if (pins.optimizer) st.base.optimizer = *pins.optimizer;
    if (pins.attention) st.base.attention = *pins.attention;
    if (pins.dropout) st.base.dropout = *pins.dropout;
    apply_extension_pins(pins, st.base);
    st.precisions = searched_precisions(gpu, pins, st.base, req.memory.profile, out);
    if (pins.recompute)
        st.recomputes.push_back(*pins.recompute);
    else if (!req.memory.profile.recomputes.empty())
        st.recomputes = req.memory.profile.recomputes;  // the modes the framework implements
    else
        st.recomputes.assign(all_recomputes().begin(), all_recomputes().end());
    st.throughput = req.throughput;
    st.throughput.breakdown = false;
    st.throughput.grad_bucket_bytes = req.memory.profile.grad_bucket_bytes;
    st.memory = req.memory;
    st.memory.timeline = false;

    out.mbs_capped = !pins.mbs && req.gbs_tokens / st.seq > limits::kMaxSearchMbs;
    search_layouts(st);
    out.plans_fitting = st.plans_fitting;
    add_memory_rejections(st);
    rank_candidates(st);
    if (out.candidates.empty() && req.suggest) {
        try {
            detail::suggest_changes(model, gpu, req, st.seq, out);
        } catch (const SearchTooLarge&) {
            out.suggestions.push_back(search_budget_spent_note(req));
        }
    }
    // Interleaving, top_k, LoRA/offload suggestions. A variant's own search (expand_variants off) keeps
    // the pipelines the framework cannot split: the merged pool's refinement (or best_plan_after_change's) takes them.
    if (req.expand_variants) refine_with_extensions(model, gpu, req, out);
    return out;
}

std::string request_flags(const SearchRequest& req) {
    const std::string& framework = req.memory.profile.name;
    return (framework.empty() || framework == "megatron" ? std::string() : " --framework " + framework) +
           (req.memory.compiled_loss ? " --compiled-loss" : "") +
           (req.memory.host_pace ? " --host-pace " + std::string(to_string(*req.memory.host_pace)) : "") +
           (req.memory.overhead_bytes ? " --overhead-bytes " + std::to_string(*req.memory.overhead_bytes) : "");
}

void drop_unlaunchable_pipelines(const ModelConfig& model, const SearchRequest& req, SearchResult& out) {
    std::erase_if(out.candidates, [&](const Candidate& c) {
        return !pipeline_split_problem(req.memory.profile, model, c.plan).empty();
    });
}

std::optional<Candidate> best_plan_after_change(const ModelConfig& model, const GpuSpec& gpu, SearchRequest r) {
    r.suggest = false;
    r.top_k = 1;
    try {
        SearchResult s = search_plans(model, gpu, r);
                if (!r.expand_variants) refine_with_extensions(model, gpu, r, s);  // a variant's own search: unrefined
        if (s.candidates.empty()) return std::nullopt;
        return std::move(s.candidates.front());
    } catch (const SearchTooLarge&) {
        throw;
    } catch (const InputError&) {
        return std::nullopt;
    }
}

}  // namespace preflight
