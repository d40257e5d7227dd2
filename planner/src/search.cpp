// Plan search: enumerate dp*tp*pp = N, mbs/grad_acc closest to the
// target batch, ZeRO 0-3, recompute, SP and precision; keep what fits under the
// headroom; rank by predicted tokens/s.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>

#include "preflight/planner/error.hpp"
#include "preflight/planner/limits.hpp"
#include "preflight/planner/search.hpp"

namespace preflight {

namespace {

std::string str(std::int64_t v) { return std::to_string(v); }

std::string gib(std::int64_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / static_cast<double>(kGiB));
    return buf;
}

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

// Why tensor parallelism of degree t cannot split the model (empty when it can).
std::string tp_problem(const ModelConfig& m, std::int64_t t) {
    if (m.heads % t != 0) return "does not divide the " + str(m.heads) + " attention heads";
    if (m.kv_heads % t != 0) return "does not divide the " + str(m.kv_heads) + " key/value heads";
    if (m.ffn_hidden % t != 0) return "does not divide the MLP width " + str(m.ffn_hidden);
    return {};
}

struct Shape {
    std::int64_t mbs, grad_acc;
    double error;  // signed relative batch error
};

// (mbs, grad_acc) pairs for one dp degree: the pairs whose global batch is closest to
// the target (all of them, so the search can trade micro-batch size for accumulation).
std::vector<Shape> batch_shapes(const SearchRequest& req, std::int64_t seq, std::int64_t dp) {
    const double target = static_cast<double>(req.gbs_tokens);
    const double per_replica = target / static_cast<double>(seq * dp);  // sequences per replica
    auto make = [&](std::int64_t mbs, std::int64_t ga) {
        const double achieved = static_cast<double>(seq) * static_cast<double>(mbs) * static_cast<double>(ga) *
                                static_cast<double>(dp);  // in double: pinned shapes may exceed int64
        return Shape{mbs, ga, (achieved - target) / target};
    };
    auto nearest_ga = [&](std::int64_t mbs) {
        return std::max<std::int64_t>(1, std::llround(per_replica / static_cast<double>(mbs)));
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

struct Light {
    Plan plan;
    std::int64_t peak_bytes;
    double tokens_per_s;
    double error;
};

// Ranking: predicted tokens/s, ties to less memory, then parallel data parallelism
// over sequential accumulation (larger dp, fewer accumulation steps).
bool better(const Light& a, const Light& b) {
    const double scale = std::max(a.tokens_per_s, b.tokens_per_s);
    if (std::abs(a.tokens_per_s - b.tokens_per_s) > 1e-9 * scale) return a.tokens_per_s > b.tokens_per_s;
    if (a.peak_bytes != b.peak_bytes) return a.peak_bytes < b.peak_bytes;
    if (a.plan.dp != b.plan.dp) return a.plan.dp > b.plan.dp;
    return a.plan.grad_acc < b.plan.grad_acc;
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
        throw InputError("--headroom", "must be a fraction in [0, 1), got " + std::to_string(req.headroom));
    if (!(req.batch_tolerance >= 0.0)) throw InputError("--batch-tolerance", "must be >= 0");
    if (req.top_k < 1) throw InputError("--top-k", "must be at least 1");
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
    for (const auto& [flag, v] : {std::pair{"--dp", p.dp}, std::pair{"--tp", p.tp}, std::pair{"--pp", p.pp}})
        if (v && *v > req.gpus) throw InputError(flag, str(*v) + " exceeds --gpus " + str(req.gpus));
    const std::int64_t pinned = p.dp.value_or(1) * p.tp.value_or(1) * p.pp.value_or(1);  // each <= 2^20
    if (req.gpus % pinned != 0)
        throw InputError(p.dp ? "--dp" : p.tp ? "--tp" : "--pp",
                         "pinned dp*tp*pp = " + str(pinned) + " does not divide --gpus " + str(req.gpus));
    if (p.dp && p.tp && p.pp && pinned != req.gpus)
        throw InputError("--gpus", "dp*tp*pp = " + str(pinned) + " but --gpus is " + str(req.gpus));
    if (p.tp) {
        if (auto why = tp_problem(model, *p.tp); !why.empty()) throw InputError("--tp", str(*p.tp) + " " + why);
        // A pinned tp above the GPUs of a node is a runnable layout (its collectives cross the
        // network) and is modelled; only the search's own candidates keep tp inside a node.
    }
    if (p.pp && *p.pp > model.layers)
        throw InputError("--pp", str(*p.pp) + " pipeline stages exceed the model's " + str(model.layers) + " layers");
    if (p.sp && *p.sp && p.tp && *p.tp == 1) throw InputError("--sp", "sequence parallelism needs --tp > 1");
    if (p.precision && !compute_peak_flops_per_s(gpu, *p.precision))
        throw InputError("--precision", gpu.name + " publishes no dense peak for " +
                                            std::string(to_string(*p.precision)) +
                                            ": its speed and MFU would be a guess");
    const std::int64_t seq = req.seq > 0 ? req.seq : std::min(model.max_positions, kDefaultSeqCap);
    // A batch below one sequence is a request error, not a memory problem.
    if (req.gbs_tokens < seq)
        throw InputError("--gbs-tokens", str(req.gbs_tokens) + " tokens is less than one sequence of " + str(seq) +
                                             " tokens (--seq): the global batch holds at least one sequence");
    if (seq > model.max_positions)
        throw InputError("--seq", str(seq) + " exceeds the model's " + str(model.max_positions) +
                                      (model.position == PositionKind::learned ? " learned positions"
                                                                               : " positions (max_position_embeddings)"));
}

SearchResult search_plans(const ModelConfig& model, const GpuSpec& gpu, const SearchRequest& req) {
    validate_request(model, gpu, req);
    if (req.expand_variants)  // offload, cp, ep, LoRA recompute axes (search_extensions.cpp)
        if (auto merged = search_extension_variants(model, gpu, req)) return *merged;
    SearchResult out;
    const PlanPins& pins = req.pins;
    const std::int64_t N = req.gpus;
    const std::int64_t seq = req.seq > 0 ? req.seq : std::min(model.max_positions, kDefaultSeqCap);
    out.seq = seq;
    const std::int64_t limit =
        static_cast<std::int64_t>(std::floor((1.0 - req.headroom) * static_cast<double>(gpu.memory_bytes)));
    out.limit_bytes = limit;

    Plan base;
    base.seq = seq;
    if (pins.optimizer) base.optimizer = *pins.optimizer;
    if (pins.attention) base.attention = *pins.attention;
    if (pins.dropout) base.dropout = *pins.dropout;
    apply_extension_pins(pins, base);

    // Precision: pinned, or every recipe whose compute peak the GPU publishes.
    std::vector<Precision> precisions;
    if (pins.precision) {
        precisions.push_back(*pins.precision);
    } else {
        for (Precision pr : all_precisions()) {
            if (compute_peak_flops_per_s(gpu, pr)) {
                precisions.push_back(pr);
            } else {
                Rejection r;
                r.plan = base;
                r.plan.precision = pr;
                r.family = "precision " + std::string(to_string(pr));
                r.reason = gpu.name + " publishes no dense peak for " + std::string(to_string(pr)) +
                           ": not searched (its speed and MFU would be a guess)";
                out.rejected.push_back(r);
            }
        }
    }
    std::vector<Recompute> recomputes;
    if (pins.recompute)
        recomputes.push_back(*pins.recompute);
    else
        recomputes.assign(all_recomputes().begin(), all_recomputes().end());

    ThroughputOptions topt = req.throughput;
    topt.breakdown = false;
    topt.grad_bucket_bytes = req.memory.profile.grad_bucket_bytes;
    MemoryOptions mopt = req.memory;
    mopt.timeline = false;

    // Memory rejections per family: ZeRO stage and parallel layout (dp, tp, pp).
    std::map<std::tuple<int, std::int64_t, std::int64_t, std::int64_t>, Rejection> families;
    std::vector<Light> fits;

    out.mbs_capped = !pins.mbs && req.gbs_tokens / seq > limits::kMaxSearchMbs;
    std::int64_t layouts_total = 0, layouts_done = 0;
    for (std::int64_t tp : divisors(N)) layouts_total += static_cast<std::int64_t>(divisors(N / tp).size());
    for (std::int64_t tp : divisors(N)) {
        if (req.progress) req.progress(layouts_done, layouts_total, out.plans_evaluated);
        layouts_done += static_cast<std::int64_t>(divisors(N / tp).size());
        if (pins.tp && tp != *pins.tp) continue;
        if (!pins.tp) {
            std::string why = tp_problem(model, tp);
            if (why.empty() && tp > gpu.gpus_per_node)
                why = "exceeds the " + str(gpu.gpus_per_node) + " GPUs of a node";
            if (!why.empty()) {
                Rejection r;
                r.plan = base;
                r.plan.tp = tp;
                r.family = "tp " + str(tp);
                r.reason = "tp " + str(tp) + " " + why;
                out.rejected.push_back(r);
                continue;
            }
        }
        for (std::int64_t pp : divisors(N / tp)) {
            if (pins.pp && pp != *pins.pp) continue;
            if (pp > model.layers) continue;
            const std::int64_t dp = N / (tp * pp);
            if (pins.dp && dp != *pins.dp) continue;
            const std::vector<Shape> shapes = batch_shapes(req, seq, dp);
            const bool shape_pinned = pins.mbs || pins.grad_acc;
            if (!shape_pinned && std::abs(shapes.front().error) > req.batch_tolerance) {
                Rejection r;
                r.plan = base;
                r.plan.dp = dp;
                r.plan.tp = tp;
                r.plan.pp = pp;
                r.plan.mbs = shapes.front().mbs;
                r.plan.grad_acc = shapes.front().grad_acc;
                r.family = "batch dp " + str(dp);
                char buf[160];
                std::snprintf(buf, sizeof buf, "dp %lld reaches at best %lld tokens per step (%+.1f %% of %lld)",
                              static_cast<long long>(dp), static_cast<long long>(r.plan.global_batch_tokens()),
                              100.0 * shapes.front().error, static_cast<long long>(req.gbs_tokens));
                r.reason = buf;
                out.rejected.push_back(r);
                continue;
            }
            std::vector<bool> sps;
            if (pins.sp)
                sps.push_back(*pins.sp);
            else {
                sps.push_back(false);
                if (tp > 1) sps.push_back(true);
            }
            std::vector<ZeroStage> zeros;
            if (pins.zero)
                zeros.push_back(*pins.zero);
            else if (dp == 1)
                zeros.push_back(zero_none);  // ZeRO over one rank shards nothing
            else
                zeros = {zero_none, zero_optimizer_states, zero_gradients, zero_weights};

            for (Precision pr : precisions)
                for (bool sp : sps) {
                    if (sp && (tp == 1 || seq % tp != 0)) continue;
                    for (ZeroStage zero : zeros)
                        for (Recompute rc : recomputes) {
                            if (pp > 1 && zero > req.max_zero_with_pp) continue;
                            std::int64_t failed_mbs = 0, failed_cap = 0;
                            for (const Shape& sh : shapes) {
                                Plan plan = base;
                                plan.mbs = sh.mbs;
                                plan.grad_acc = sh.grad_acc;
                                plan.dp = dp;
                                plan.tp = tp;
                                plan.pp = pp;
                                plan.sp = sp;
                                plan.zero = zero;
                                plan.recompute = rc;
                                plan.precision = pr;
                                if (!extension_plan_valid(plan, model)) continue;
                                Rejection& fam = families[{zero, dp, tp, pp}];
                                // Memory grows with mbs and with the micro-batches in flight,
                                // min(pp, grad_acc): a plan at least as large on both as one
                                // that did not fit cannot fit either.
                                const std::int64_t cap = std::min(pp, sh.grad_acc);
                                if (failed_mbs > 0 && sh.mbs >= failed_mbs && cap >= failed_cap) {
                                    ++fam.plans;
                                    continue;
                                }
                                MemoryReport mem;
                                try {
                                    mem = evaluate_memory(model, gpu, plan, mopt);
                                } catch (const InputError&) {
                                    ++fam.plans;  // a framework profile that cannot build this plan (e.g. ZeRO-3)
                                    continue;
                                }
                                ++out.plans_evaluated;
                                // Profiles with an allocator model judge the device need (reserved pool +
                                // memory outside PyTorch), the others the allocated peak + overhead.
                                const std::int64_t judged =
                                    mopt.profile.verdict_on_reserved ? mem.device_peak_bytes : mem.peak_bytes;
                                if (judged > limit) {
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
                                fam.others_fit = true;
                                const Throughput th = estimate_throughput(model, gpu, plan, topt);
                                fits.push_back({plan, judged, th.tokens_per_s, sh.error});
                            }
                        }
                }
        }
    }
    out.plans_fitting = static_cast<std::int64_t>(fits.size());

    // Memory rejections per family, families with no fitting plan first; the
    // representative is the family's smallest rejected plan.
    std::vector<Rejection> mem_rejections;
    for (auto& [key, r] : families) {
        if (r.plans == 0) continue;
        const auto& [zero, dp, tp, pp] = key;
        r.family = "ZeRO-" + std::to_string(zero) + ", dp " + str(dp) + " tp " + str(tp) + " pp " + str(pp);
        r.reason = "ZeRO-" + std::to_string(zero) + ": " + gib(r.peak_bytes) + " > " + gib(limit) +
                   (r.others_fit ? " from mbs " + str(r.plan.mbs) + " up (smaller micro-batches fit)"
                                 : " even at its smallest (mbs " + str(r.plan.mbs) + ", recompute " +
                                       std::string(to_string(r.plan.recompute)) + ", " +
                                       std::string(to_string(r.plan.precision)) + ")");
        mem_rejections.push_back(r);
    }
    std::stable_sort(mem_rejections.begin(), mem_rejections.end(),
                     [](const Rejection& a, const Rejection& b) { return !a.others_fit && b.others_fit; });
    out.rejected.insert(out.rejected.begin(), mem_rejections.begin(), mem_rejections.end());

    // Rank, then evaluate the top k in full.
    const std::size_t k = std::min<std::size_t>(static_cast<std::size_t>(req.top_k), fits.size());
    std::partial_sort(fits.begin(), fits.begin() + static_cast<std::ptrdiff_t>(k), fits.end(), better);
    ThroughputOptions full = req.throughput;
    full.breakdown = true;
    full.grad_bucket_bytes = req.memory.profile.grad_bucket_bytes;
    for (std::size_t i = 0; i < k; ++i) {
        Candidate c;
        c.plan = fits[i].plan;
        c.batch_error = fits[i].error;
        c.memory = evaluate_memory(model, gpu, c.plan, mopt);
        c.throughput = estimate_throughput(model, gpu, c.plan, full);
        out.candidates.push_back(std::move(c));
    }

    if (out.candidates.empty() && req.suggest) {
        // The smallest change that makes something fit, least disruptive first.
        auto attempt = [&](SearchRequest r, const std::string& change) {
            r.suggest = false;
            r.top_k = 1;
            try {
                const SearchResult s = search_plans(model, gpu, r);
                if (s.candidates.empty()) return false;
                const Candidate& c = s.candidates.front();
                char buf[256];
                std::snprintf(buf, sizeof buf, "%s: then dp %lld, tp %lld, pp %lld, ZeRO-%d, recompute %s, mbs %lld fits at %s",
                              change.c_str(), static_cast<long long>(c.plan.dp), static_cast<long long>(c.plan.tp),
                              static_cast<long long>(c.plan.pp), c.plan.zero,
                              std::string(to_string(c.plan.recompute)).c_str(), static_cast<long long>(c.plan.mbs),
                              gib(c.memory.peak_bytes).c_str());
                out.suggestions.push_back(buf);
                return true;
            } catch (const InputError&) {
                return false;
            }
        };
        if (pins.zero && *pins.zero != 3) {
            SearchRequest r = req;
            r.pins.zero = zero_weights;
            attempt(r, "--zero 3 (shard weights, gradients and optimizer states over dp)");
        }
        if (pins.recompute && *pins.recompute != Recompute::full) {
            SearchRequest r = req;
            r.pins.recompute = Recompute::full;
            attempt(r, "--recompute full (keep only each layer's input)");
        }
        if (pins.precision && (*pins.precision == Precision::fp32 || *pins.precision == Precision::bf16_mixed_fp32_grads)) {
            SearchRequest r = req;
            r.pins.precision = Precision::bf16_mixed;
            attempt(r, "--precision bf16-mixed");
        }
        if (pins.tp || pins.pp || pins.dp) {
            SearchRequest r = req;
            r.pins.tp.reset();
            r.pins.pp.reset();
            r.pins.dp.reset();
            attempt(r, "unpin --dp/--tp/--pp (let the search use tensor and pipeline parallelism)");
        }
        if (pins.mbs || pins.grad_acc) {
            SearchRequest r = req;
            r.pins.mbs.reset();
            r.pins.grad_acc.reset();
            attempt(r, "unpin --mbs/--grad-acc");
        }
        for (std::int64_t s = seq / 2; s >= 128; s /= 2) {
            SearchRequest r = req;
            r.seq = s;
            if (attempt(r, "--seq " + str(s) + " (shorter sequence, same tokens per step)")) break;
        }
        for (std::int64_t n = 2 * N; n <= 64 * N; n *= 2) {
            SearchRequest r = req;
            r.gpus = n;
            r.pins.dp.reset();
            if (attempt(r, "--gpus " + str(n) + " (more GPUs)")) break;
        }
        if (out.suggestions.empty())
            out.suggestions.push_back("no single change tried fits (ZeRO-3, full recompute, TP/PP, sequence down to 128, "
                                      "up to " + str(64 * N) + " GPUs): choose a larger GPU or a smaller model");
    }
    if (req.expand_variants) refine_with_extensions(model, gpu, req, out);  // interleaving, LoRA/offload suggestions
    return out;
}

}  // namespace preflight
