// Shared by the plan search's source files (search.cpp, search_request.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "preflight/planner/model.hpp"

namespace preflight::detail {

// Why tensor parallelism of degree t cannot split the model ("does not divide the 32
// attention heads"), "" when it can.
std::string tp_problem(const ModelConfig& m, std::int64_t t);

}  // namespace preflight::detail
