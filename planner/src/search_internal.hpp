// Shared by the plan search's source files (search.cpp, search_request.cpp, search_extensions.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "preflight/planner/model.hpp"

namespace preflight::detail {

// Why tensor parallelism of degree t cannot split the model ("does not divide the 32
// attention heads"), "" when it can.
std::string tp_problem(const ModelConfig& m, std::int64_t t);

// The ranking's speed class: tokens/s in steps of 0.1 % (log base 1.001). Plans in one class tie
// on speed and rank by memory: a 1 token/s lead in 290,502 (a step-time model good to a few
// per cent) no longer puts a 153 GiB ZeRO-3 plan before a 73 GiB ZeRO-1 one. Classes, not a
// tolerance between pairs, keep the order a strict weak ordering (transitive ties) for the sorts.
inline std::int64_t speed_class(double tokens_per_s) {
    return tokens_per_s > 0 ? static_cast<std::int64_t>(std::floor(std::log(tokens_per_s) / std::log1p(1e-3))) : 0;
}

}  // namespace preflight::detail
