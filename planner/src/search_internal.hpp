// Shared by the plan search's source files (search.cpp, search_request.cpp, search_extensions.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "preflight/planner/gpu.hpp"
#include "preflight/planner/model.hpp"
#include "preflight/planner/search.hpp"

namespace preflight::detail {

inline std::string str(std::int64_t v) { return std::to_string(v); }

inline std::string gib(std::int64_t bytes) {  // "12.34 GiB"
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / static_cast<double>(kGiB));
    return buf;
}

// Why tensor parallelism of degree t cannot split the model ("does not divide the 32
// attention heads"), "" when it can.
std::string tp_problem(const ModelConfig& m, std::int64_t t);

// The ranking's score: predicted tokens/s less up to 1 % for memory, in proportion to the share
// of the limit the plan needs (all of it: 1 %; half: 0.5 %). The step-time model is good to a
// few per cent, so a lead of a fraction of a per cent is no reason to hold more memory: near-ties
// go to the plan with more headroom (Llama-3-8B on 8 H100s: ZeRO-2 at 49.06 GiB before ZeRO-1 at
// 62.15 GiB, 0.015 % faster), while a lead over 1 % always wins. One number per plan, no classes
// with edges and no pairwise tolerance, keeps the order a strict weak ordering for the sorts.
inline constexpr double kRankMemoryWeight = 0.01;
inline double rank_score(double tokens_per_s, std::int64_t judged_bytes, std::int64_t limit_bytes) {
    const double share =
        limit_bytes > 0 ? std::clamp(static_cast<double>(judged_bytes) / static_cast<double>(limit_bytes), 0.0, 1.0) : 0.0;
    return tokens_per_s * (1.0 - kRankMemoryWeight * share);
}

// One batch shape: mbs and grad_acc, and the signed relative error of its global batch.
struct Shape {
    std::int64_t mbs, grad_acc;
    double error;
};
// (mbs, grad_acc) pairs for one dp degree: the pairs whose global batch is closest to the target
// (all of them, so the search can trade micro-batch size for accumulation), grad_acc a multiple of
// `grad_acc_step` (the interleaved schedule's pp) unless pinned (search.cpp).
std::vector<Shape> batch_shapes(const SearchRequest& req, std::int64_t seq, std::int64_t dp,
                                std::int64_t grad_acc_step = 1);

// Records `change` and the plan `c` that then fits under request `r` (SearchResult::suggested: the
// plan in full, as `memory` takes its flags) and returns the start of its suggestion line,
// "CHANGE: then FLAGS fits at N GiB[ device need]" (search_suggest.cpp).
std::string record_suggestion(SearchResult& out, const std::string& change, const Candidate& c, const SearchRequest& r);

// Nothing fits `req` (at sequence length `seq`): the single changes that would fit, lightest
// first, into out.suggestions (search_suggest.cpp); SearchTooLarge once the budget is spent.
void suggest_changes(const ModelConfig& model, const GpuSpec& gpu, const SearchRequest& req, std::int64_t seq,
                     SearchResult& out);

}  // namespace preflight::detail
