// Learning-rate rules of thumb when the global batch changes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "preflight/planner/plan.hpp"

namespace preflight {

struct LrRule {
    std::string name;    // "linear", "square-root"
    double lr = 0;
    std::string source;  // citation
};

struct LrAdvice {
    double base_lr = 0;
    double base_batch_tokens = 0;
    double batch_tokens = 0;
    double ratio = 0;              // batch_tokens / base_batch_tokens
    LrRule linear;                 // base_lr * ratio
    LrRule square_root;            // base_lr * sqrt(ratio)
    std::string preferred;         // which rule the sources suggest for the optimizer
    std::int64_t warmup_steps = 0;
    double warmup_tokens = 0;
    std::string warmup_source;
    std::string caveat;            // "rules of thumb, not guarantees"
    std::vector<std::string> warnings;  // a batch change or a rate beyond where the rules were checked
};

// Throws InputError naming --base-lr / --base-batch for non-positive values.
LrAdvice lr_advice(double base_lr, double base_batch_tokens, double batch_tokens, Optimizer optimizer);

}  // namespace preflight
