// The plan search's extension axes: offload (when host memory is known or the mode is
// pinned), context parallelism for long sequences, expert parallelism for MoE models,
// whole-layer recompute under LoRA (what HF/PEFT's gradient checkpointing offers), the
// interleaved pipeline schedule as a refinement of pipeline candidates, and what the
// extensions would change when nothing fits.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <cstdio>

#include "preflight/planner/error.hpp"
#include "preflight/planner/extensions.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/search.hpp"
#include "search_internal.hpp"

namespace preflight {

namespace {

using detail::gib;
using detail::str;

// Merged variants' ranking, as one search's (search.cpp `better`): plans that surely fit (at the
// top of their memory range) first, then a batch within the tolerance (a pinned --mbs can leave
// some layouts outside it), then the score (tokens/s less up to 1 % for the memory judged,
// detail::rank_score), ties to less of that memory.
auto ranks_before(const SearchRequest& req, std::int64_t limit_bytes) {
    return [tolerance = req.batch_tolerance, profile = req.memory.profile, limit_bytes](const Candidate& a,
                                                                                         const Candidate& b) {
        const std::int64_t ja = judged_bytes(a.memory, profile), jb = judged_bytes(b.memory, profile);
        const bool a_sure = a.memory.device_peak_high_bytes.value_or(ja) <= limit_bytes,
                   b_sure = b.memory.device_peak_high_bytes.value_or(jb) <= limit_bytes;
        if (a_sure != b_sure) return a_sure;
        const bool a_in = std::abs(a.batch_error) <= tolerance, b_in = std::abs(b.batch_error) <= tolerance;
        if (a_in != b_in) return a_in;
        const double sa = detail::rank_score(a.throughput.tokens_per_s, ja, limit_bytes),
                     sb = detail::rank_score(b.throughput.tokens_per_s, jb, limit_bytes);
        if (sa != sb) return sa > sb;
        return ja < jb;
    };
}

std::string variant_label(const PlanPins& p, bool recompute_varies, bool vpp_varies) {  // " recompute none, offload optimizer"
    std::string s;
    const auto add = [&s](const std::string& part) { s += (s.empty() ? " " : ", ") + part; };
    if (recompute_varies && p.recompute) add("recompute " + std::string(to_string(*p.recompute)));
    if (vpp_varies && p.vpp) add("vpp " + str(*p.vpp));
    if (p.offload && *p.offload != Offload::none) add("offload " + std::string(to_string(*p.offload)));
    if (p.cp && *p.cp > 1) add("cp " + str(*p.cp));
    if (p.ep && *p.ep > 1) add("ep " + str(*p.ep));
    return s;
}

}  // namespace

void apply_extension_pins(const PlanPins& pins, Plan& plan) {
    plan.finetune = pins.finetune;
    plan.lora = pins.lora;
    if (pins.offload) plan.offload = *pins.offload;
    if (pins.pp_schedule) plan.pp_schedule = *pins.pp_schedule;
    plan.vpp = pins.vpp.value_or(plan.pp_schedule == PpSchedule::interleaved ? 2 : 1);
    if (pins.cp) plan.cp = *pins.cp;
    if (pins.ep) plan.ep = *pins.ep;
    plan.moe_capacity_factor = pins.moe_capacity_factor;
}

std::string extension_plan_problem(const Plan& plan, const ModelConfig& model) {
    if (!uses_extended_throughput(plan)) return {};
    try {
        validate_plan_extensions(plan, model);
        return {};
    } catch (const InputError& e) {
        return e.what();
    }
}

namespace {

// Pinned extension values that no layout of N GPUs can satisfy: said so instead of finding
// nothing (the settings no layout changes are checked by validate_request).
void check_extension_pins(const SearchRequest& req, std::int64_t seq) {
    const PlanPins& pins = req.pins;
    const std::int64_t N = req.gpus;
    if (pins.cp && (*pins.cp < 1 || N % *pins.cp != 0))
        throw InputError("--cp", str(pins.cp.value_or(0)) + " does not divide --gpus " + str(N));
    if (req.host_memory_bytes && *req.host_memory_bytes < 1) throw InputError("--host-memory", "must be positive");
    if (pins.cp && *pins.cp > 1 && seq % (2 * *pins.cp) != 0)
        throw InputError("--cp", "sequence length " + str(seq) + " is not divisible by 2 * cp = " + str(2 * *pins.cp));
    if (pins.offload == Offload::optimizer_and_params && pins.zero && *pins.zero != 3)
        throw InputError("--offload", "'params' (ZeRO-Infinity parameter offload) needs --zero 3");
    if (pins.pp_schedule && *pins.pp_schedule != PpSchedule::one_f_one_b && pins.pp && *pins.pp < 2)
        throw InputError("--pp-schedule", std::string(to_string(*pins.pp_schedule)) + " needs --pp > 1");
    if (pins.pp_schedule == PpSchedule::interleaved && pins.pp && pins.grad_acc && *pins.grad_acc % *pins.pp != 0)
        throw InputError("--grad-acc", str(*pins.grad_acc) + " micro-batches is not a multiple of --pp " + str(*pins.pp) +
                                           " (Megatron-LM's interleaved schedule requires it)");
    if (pins.vpp && *pins.vpp != 1 && pins.pp_schedule != PpSchedule::interleaved)
        throw InputError("--vpp", "needs --pp-schedule interleaved");
}

// The most model chunks per stage the search tries (Megatron-Bridge's Llama-3.1-405B recipe runs 8
// at pp 8; every count from 2 whose split Megatron-LM accepts is tried).
constexpr std::int64_t kMaxSearchedChunks = 16;

// The extension axes a request varies: offload, cp, ep, the recompute modes a fine-tune
// offers, and the one precision a fine-tune searches.
struct VariantAxes {
    std::vector<Offload> offloads;
    std::vector<std::int64_t> cps;
    std::vector<std::int64_t> eps;
    std::vector<std::optional<Recompute>> recomputes;
    std::vector<std::optional<std::int64_t>> vpps;  // a pinned interleaved schedule's chunks, 2 and 4 when not pinned
    std::optional<Precision> precision;
    bool needed = false;  // false: the plain search covers the request
};

VariantAxes variant_axes(const ModelConfig& model, const GpuSpec& gpu, const SearchRequest& req, std::int64_t seq) {
    const PlanPins& pins = req.pins;
    const std::int64_t N = req.gpus;
    VariantAxes v;
    if (pins.offload)
        v.offloads = {*pins.offload};
    else if (req.host_memory_bytes)
        v.offloads = {Offload::none, Offload::optimizer, Offload::optimizer_and_params};
    else
        v.offloads = {Offload::none};
    v.cps = {pins.cp.value_or(1)};
    // Context parallelism pays off only when one sequence's activations dominate (flash attention
    // only): from 8k tokens while each cp rank keeps 4k of them (Megatron-Bridge's Llama-3 recipes
    // run cp 2 at seq 8,192), from 32k tokens any cp up to 16 (the Llama 3 paper's long-context
    // layout, Table 4, runs cp 16 at 131,072).
    if (!pins.cp && seq >= 8192 && pins.attention.value_or(AttentionKind::flash) == AttentionKind::flash)
        for (std::int64_t cp : {2, 4, 8, 16})
            if (N % cp == 0 && seq % (2 * cp) == 0 && (seq >= 32768 || seq / cp >= 4096)) v.cps.push_back(cp);
    v.eps = {pins.ep.value_or(1)};
    if (!pins.ep && model.is_moe())
        for (std::int64_t ep : {2, 4, 8, 16})
            if (model.experts % ep == 0 && N % ep == 0) v.eps.push_back(ep);
    v.recomputes = {pins.recompute};
    v.vpps = {pins.vpp};
    // A pinned interleaved schedule without --vpp: fewer, larger chunks hold more at once or less
    // (Llama-3-70B at pp 4, 16 micro-batches: 110 layer activations in flight with 2, 95 with 4).
    // The chunk counts the refinement tries, those that can split the layers (or layers + 2).
    if (pins.pp_schedule == PpSchedule::interleaved && !pins.vpp) {
        v.vpps.clear();
        for (std::int64_t c = 2; c <= kMaxSearchedChunks; ++c)
            if (model.layers % c == 0 || (model.layers + 2) % c == 0) v.vpps.push_back(c);
    }
    // HF/PEFT checkpoint whole decoder layers (gradient_checkpointing_enable) or nothing.
    if (pins.finetune != Finetune::full && !pins.recompute) v.recomputes = {Recompute::none, Recompute::full};
    // PEFT trains fp32 adapters under bf16 (or fp16) autocast: the recipes that differ only in
    // how full-model states are kept are the same plan, so one is searched.
    v.precision = pins.precision;
    if (pins.finetune != Finetune::full && !v.precision) {
        // bf16 autocast where the GPU has bf16 tensor cores, else fp16; a framework that runs
        // neither starts from its own recipe (and refuses fine-tuning with its own reason).
        const FrameworkProfile& profile = req.memory.profile;
        v.precision = runs_precision(profile, Precision::fp16_mixed) ? Precision::fp16_mixed : default_precision(profile);
        for (Precision pr : {Precision::bf16_mixed, Precision::fp16_mixed})
            if (runs_precision(profile, pr) && compute_peak_flops_per_s(gpu, pr)) {
                v.precision = pr;
                break;
            }
    }
    const bool params_need_zero3 =
        std::find(v.offloads.begin(), v.offloads.end(), Offload::optimizer_and_params) != v.offloads.end() && !pins.zero;
    v.needed = v.offloads.size() > 1 || v.cps.size() > 1 || v.cps.front() > 1 || v.eps.size() > 1 ||
               v.recomputes.size() > 1 || v.vpps.size() > 1 || params_need_zero3 || v.precision != pins.precision;
    return v;
}

// The plain search of one variant (offload, cp, ep, recompute, precision pinned).
SearchRequest variant_request(const SearchRequest& req, Offload off, std::int64_t cp, std::int64_t ep,
                              const std::optional<Recompute>& rc, const std::optional<Precision>& precision,
                              const std::optional<std::int64_t>& vpp) {
    SearchRequest r = req;
    r.pins.vpp = vpp;
    r.expand_variants = false;
    r.top_k = refine_pool(req);  // each variant's best plans, for the refinement of the merged pool
    r.pins.offload = off;
    r.pins.cp = cp;
    r.pins.ep = ep;
    r.pins.recompute = rc;
    r.pins.precision = precision;
    if (off == Offload::optimizer_and_params && !req.pins.zero) r.pins.zero = zero_weights;
    r.gpus = req.gpus / cp;
    return r;
}

// Adds one variant's result: its candidates (the search refused those needing more host
// memory than given) and its rejections, labelled with the variant.
// `recompute_varies`, `vpp_varies`: the variants split on recompute (fine-tuning) or on a pinned
// interleaved schedule's chunks, so a family's label names it.
void merge_variant(const SearchRequest& r, bool recompute_varies, bool vpp_varies, SearchResult& res, SearchResult& out,
                   std::vector<Candidate>& all) {
    out.seq = res.seq;
    out.limit_bytes = res.limit_bytes;
    out.plans_evaluated += res.plans_evaluated;
    out.plans_fitting += res.plans_fitting;
    out.plans_ruled_out += res.plans_ruled_out;
    const std::string label = variant_label(r.pins, recompute_varies, vpp_varies);
    for (Candidate& c : res.candidates) all.push_back(std::move(c));
    for (Rejection& j : res.rejected) {
        if (!label.empty()) j.family += "," + label;
        out.rejected.push_back(std::move(j));
    }
}

// One row per rejected family of a pinned interleaved schedule's chunk counts: refused alike for
// every count (a tp that splits no heads, a batch no shape reaches), without the ", vpp N" label;
// else the count that came closest (the smallest peak of those rejected on memory, or the first).
void merge_chunk_rows(std::vector<Rejection>& rows, std::size_t chunk_counts) {
    const auto base = [](std::string family) {  // the label less its ", vpp N" (a ", cp C" after it stays)
        const std::size_t at = family.rfind(", vpp ");
        if (at == std::string::npos) return family;
        const std::size_t next = family.find(", ", at + 2);
        return family.erase(at, next == std::string::npos ? std::string::npos : next - at);
    };
    std::map<std::pair<std::string, std::string>, std::size_t> alike;
    std::map<std::string, std::size_t> closest;  // base family -> index of its row kept
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const std::string b = base(rows[i].family);
        ++alike[{b, rows[i].reason}];
        const auto [it, first] = closest.emplace(b, i);
        const Rejection& kept = rows[it->second];
        if (!first && rows[i].peak_bytes > 0 && (kept.peak_bytes == 0 || rows[i].peak_bytes < kept.peak_bytes))
            it->second = i;
    }
    std::vector<Rejection> out;
    for (std::size_t i = 0; i < rows.size(); ++i) {
        Rejection& r = rows[i];
        const std::string b = base(r.family);
        if (closest[b] != i) continue;
        if (alike[{b, r.reason}] >= chunk_counts) r.family = b;
        out.push_back(std::move(r));
    }
    rows = std::move(out);
}

}  // namespace

std::optional<SearchResult> search_extension_variants(const ModelConfig& model, const GpuSpec& gpu,
                                                      const SearchRequest& req) {
    const std::int64_t seq = req.seq > 0 ? req.seq : std::min(model.max_positions, kDefaultSeqCap);
    check_extension_pins(req, seq);
    const VariantAxes v = variant_axes(model, gpu, req, seq);
    if (!v.needed) return std::nullopt;

    SearchResult out;
    std::vector<Candidate> all;
    for (Offload off : v.offloads)
        for (std::int64_t cp : v.cps)
            for (std::int64_t ep : v.eps)
                for (const auto& rc : v.recomputes)
                    for (const auto& vpp : v.vpps) {
                        SearchRequest r = variant_request(req, off, cp, ep, rc, v.precision, vpp);
                        r.suggest = false;
                        SearchResult res;
                        try {
                            res = search_plans(model, gpu, r);
                        } catch (const SearchTooLarge&) {
                            throw;  // the request, not the variant: refused whole
                        } catch (const InputError&) {
                            continue;  // a variant no layout can run
                        }
                        merge_variant(r, v.recomputes.size() > 1, v.vpps.size() > 1, res, out, all);
                    }
    if (v.vpps.size() > 1) merge_chunk_rows(out.rejected, v.vpps.size());
    std::stable_sort(all.begin(), all.end(), ranks_before(req, out.limit_bytes));
    // The pool the interleaved refinement looks at; refine_with_extensions cuts it to the top_k.
    all.resize(std::min(all.size(), static_cast<std::size_t>(refine_pool(req))));
    out.candidates = std::move(all);
    if (out.candidates.empty() && req.suggest) {
        // The plain search's smallest changes for the first variant, then the extensions'. Of the
        // recompute modes searched (fine-tuning: none, full), the last holds the least: changes
        // judged under `none` alone said "no single change fits" where 2 GPUs fit with full.
        const SearchRequest r = variant_request(req, v.offloads.front(), v.cps.front(), v.eps.front(), v.recomputes.back(),
                                                v.precision, v.vpps.front());
        try {
            SearchResult plain = search_plans(model, gpu, r);
            out.suggestions = std::move(plain.suggestions);
            out.suggested = std::move(plain.suggested);
        } catch (const SearchTooLarge&) {
            out.suggestions.push_back(search_budget_spent_note(req));
        } catch (const InputError&) {
        }
    }
    refine_with_extensions(model, gpu, req, out);
    return out;
}

namespace {

// The batch shapes an interleaved variant of a pipeline plan may take: its own when its
// accumulation is a whole number of groups of pp micro-batches (Megatron-LM's requirement), else,
// unless --grad-acc is pinned, dp's closest shapes that are, within the batch tolerance.
std::vector<detail::Shape> interleaved_shapes(const SearchRequest& req, const Candidate& c) {
    const Plan& plan = c.plan;
    if (plan.grad_acc % plan.pp == 0 || req.pins.grad_acc) return {{plan.mbs, plan.grad_acc, c.batch_error}};
    std::vector<detail::Shape> shapes = detail::batch_shapes(req, plan.seq, plan.dp, plan.pp);
    std::erase_if(shapes, [&](const detail::Shape& s) { return std::abs(s.error) > req.batch_tolerance; });
    return shapes;
}

// Interleaved 1F1B (Narayanan et al. 2021, sec. 2.2.2) for pipeline candidates: the bubble
// shrinks by v at v times the pipeline sends and (p-1)/(p v) more activations. Swapped in where
// the ranking prefers it. (A pinned interleaved schedule's chunks are a variant axis instead.)
void refine_interleaved(const ModelConfig& model, const GpuSpec& gpu, const SearchRequest& req, SearchResult& out) {
    // Under a pinned uneven split, chunk counts its stages do not divide fail evaluate_memory's
    // validate_uneven_pipeline_split and are skipped below.
    if (req.pins.pp_schedule) return;
    MemoryOptions mopt = req.memory;
    mopt.timeline = false;
    ThroughputOptions topt = req.throughput;
    topt.grad_bucket_bytes = req.memory.profile.grad_bucket_bytes;
    bool changed = false;
    for (Candidate& c : out.candidates) {
        if (c.plan.pp < 2 || c.plan.pp_schedule == PpSchedule::gpipe) continue;
        const Plan was = c.plan;
        // A split the framework refuses (Megatron-LM: pp must divide the layers outside the
        // interleaved schedule; drop_unlaunchable_pipelines removes it next) is replaced by any
        // interleaved form that fits, however it scores.
        bool launchable = pipeline_split_problem(req.memory.profile, model, was).empty();
        for (const detail::Shape& shape : interleaved_shapes(req, c))
            for (std::int64_t v = 2; v <= kMaxSearchedChunks && v * was.pp <= model.layers + 2; ++v) {
                Plan p = was;
                p.pp_schedule = PpSchedule::interleaved;
                p.vpp = v;
                p.mbs = shape.mbs;
                p.grad_acc = shape.grad_acc;
                const bool same = c.plan.pp_schedule == PpSchedule::interleaved && c.plan.vpp == v &&
                                  c.plan.mbs == shape.mbs && c.plan.grad_acc == shape.grad_acc;
                if (same || !extension_plan_problem(p, model).empty()) continue;
                MemoryReport mem;
                try {
                    mem = evaluate_memory(model, gpu, p, mopt);
                } catch (const InputError&) {
                    continue;  // the framework cannot build it (nanotron has no interleaved schedule)
                }
                ++out.plans_evaluated;
                const std::int64_t judged = judged_bytes(mem, req.memory.profile);
                if (judged > out.limit_bytes) continue;
                const Throughput th =
                    estimate_throughput(model, gpu, p, throughput_options_for(req.memory.profile, model, p, topt));
                // As the ranking weighs them: a higher score, or the same score in less memory.
                const std::int64_t held = judged_bytes(c.memory, req.memory.profile);
                const double now = detail::rank_score(c.throughput.tokens_per_s, held, out.limit_bytes),
                             then = detail::rank_score(th.tokens_per_s, judged, out.limit_bytes);
                if (!launchable || then > now || (then == now && judged < held)) {
                    launchable = true;
                    c.plan = p;
                    c.batch_error = shape.error;
                    c.memory = mem;
                    c.throughput = th;
                    changed = true;
                }
            }
    }
    if (!changed) return;
    std::stable_sort(out.candidates.begin(), out.candidates.end(), ranks_before(req, out.limit_bytes));
    // Two pipeline plans of one layout whose shapes differ may both become the same interleaved one.
    std::set<std::string> seen;
    std::erase_if(out.candidates, [&seen](const Candidate& c) { return !seen.insert(to_flags(c.plan)).second; });
}

}  // namespace

void refine_with_extensions(const ModelConfig& model, const GpuSpec& gpu, const SearchRequest& req,
                            SearchResult& out) {
    refine_interleaved(model, gpu, req, out);
    drop_unlaunchable_pipelines(model, req, out);
    out.candidates.resize(std::min(out.candidates.size(), static_cast<std::size_t>(req.top_k)));  // the pool refined, the top_k shown
    if (!out.candidates.empty() || !req.suggest) return;
    // Nothing fits: what the extensions would change.
    auto attempt = [&](const SearchRequest& r, const std::string& change) {
        std::optional<Candidate> best;
        try {
            best = best_plan_after_change(model, gpu, r);
        } catch (const SearchTooLarge&) {  // the budget is spent: say so once
            if (std::find(out.suggestions.begin(), out.suggestions.end(), search_budget_spent_note(req)) ==
                out.suggestions.end())
                out.suggestions.push_back(search_budget_spent_note(req));
            return false;
        }
        if (!best) return false;
        const Candidate& c = *best;
        std::string line = detail::record_suggestion(out, change, c, r) + " per GPU";
        if (c.memory.host_bytes_per_node > 0)
            line += " with " + gib(c.memory.host_bytes_per_node) + " of host memory per node";
        char buf[64];
        std::snprintf(buf, sizeof buf, ", %.3f s per step", c.throughput.step_time_s);
        out.suggestions.push_back(line + buf);
        return true;
    };
    if (!req.pins.offload && !req.host_memory_bytes) {
        SearchRequest r = req;
        r.pins.offload = Offload::optimizer;
        if (!attempt(r, "--offload optimizer (ZeRO-Offload: fp32 master weights and moments in host memory)")) {
            r.pins.offload = Offload::optimizer_and_params;
            if (!req.pins.zero) r.pins.zero = zero_weights;
            attempt(r, "--offload params --zero 3 (ZeRO-Infinity: parameters in host memory too)");
        }
    }
    if (req.pins.finetune == Finetune::full) {
        SearchRequest r = req;
        r.pins.finetune = Finetune::lora;
        r.pins.offload.reset();
        if (!attempt(r, "--finetune lora (a different job: frozen bf16 base, rank-" + str(r.pins.lora.rank) +
                            " adapters)")) {
            r.pins.finetune = Finetune::qlora;
            attempt(r, "--finetune qlora (a different job: frozen NF4 base, rank-" + str(r.pins.lora.rank) + " adapters)");
        }
    }
}

}  // namespace preflight
