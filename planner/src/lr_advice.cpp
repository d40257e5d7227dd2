// Learning-rate rules of thumb for a changed global batch.
#include "preflight/planner/lr_advice.hpp"

#include <cmath>

#include "preflight/planner/error.hpp"
#include "preflight/planner/format.hpp"
#include "preflight/planner/limits.hpp"

namespace preflight {

namespace {
constexpr double kMaxBaseLr = 1e3;
// Goyal et al. 2017 checked the linear rule from 256 to 8,192 images per batch: 32x.
constexpr double kCheckedBatchRatio = 32.0;
// Adam-type: above every learning rate of GPT-3's table (at most 6.0e-4, Brown et al. 2020,
// Table 2.1) by more than 16x. SGD: Goyal et al. 2017 reached 0.1 x 32 = 3.2.
constexpr double kHighAdamLr = 1e-2;
constexpr double kHighSgdLr = 10.0;

std::vector<std::string> lr_warnings(const LrAdvice& a, Optimizer optimizer) {
    std::vector<std::string> w;
    if (a.ratio > kCheckedBatchRatio || a.ratio < 1.0 / kCheckedBatchRatio)
        w.push_back("the target batch is " + format_real(a.ratio) +
                    " x the base batch; the linear rule was checked up to 32 x (Goyal et al. 2017, 256 to 8,192 "
                    "images): measure a short run at the new batch");
    const double lr = a.preferred == "linear" ? a.linear.lr : a.square_root.lr;
    const bool adam = optimizer == Optimizer::adamw;
    if (lr > (adam ? kHighAdamLr : kHighSgdLr))
        w.push_back("the " + a.preferred + " rule gives " + format_real(lr) +
                    (adam ? ", above 0.01, over 16 x GPT-3's largest Adam learning rate (6.0e-4, Brown et al. 2020, "
                            "Table 2.1)"
                          : ", above 10, about 3 x the 3.2 Goyal et al. 2017 reached with SGD") +
                    ": check --base-lr and --base-batch");
    return w;
}
}  // namespace

LrAdvice lr_advice(double base_lr, double base_batch_tokens, double batch_tokens, Optimizer optimizer) {
    // Bounded so that the rules (up to 2^40 times it) stay finite: no learning rate is near 1,000.
    if (!(base_lr > 0 && base_lr <= kMaxBaseLr))
        throw InputError("--base-lr", "must be a positive number up to 1,000 (a learning rate)");
    // A whole number of tokens within the global-batch bound (limits.hpp), so the ratio and both
    // rules stay finite and the batch prints as the integer it is.
    if (!(base_batch_tokens >= 1 && base_batch_tokens <= static_cast<double>(limits::kMaxGlobalBatchTokens)) ||
        std::floor(base_batch_tokens) != base_batch_tokens)
        throw InputError("--base-batch", "must be a whole number of tokens from 1 to 2^40 = 1,099,511,627,776");
    if (!(batch_tokens > 0)) throw InputError("--gbs-tokens", "must be positive");
    LrAdvice a;
    a.base_lr = base_lr;
    a.base_batch_tokens = base_batch_tokens;
    a.batch_tokens = batch_tokens;
    a.ratio = batch_tokens / base_batch_tokens;
    // Linear scaling rule: lr grows with the batch (Goyal et al. 2017, sec. 2.1), stated for SGD.
    a.linear = {"linear", base_lr * a.ratio,
                "Goyal et al. 2017, 'Accurate, Large Minibatch SGD', sec. 2.1 (SGD)"};
    // Square-root rule: lr grows with sqrt(batch) (Krizhevsky 2014; Granziol et al. 2022 and
    // Malladi et al. 2022 for adaptive optimizers such as Adam).
    a.square_root = {"square-root", base_lr * std::sqrt(a.ratio),
                     "Krizhevsky 2014, 'One weird trick'; Granziol et al. 2022 (JMLR) and Malladi et al. 2022 "
                     "(NeurIPS) for Adam-type optimizers"};
    a.preferred = optimizer == Optimizer::adamw ? "square-root" : "linear";
    // Warm-up: GPT-3 warmed the learning rate up linearly over the first 375M tokens
    // (Brown et al. 2020, App. B); gradual warm-up itself is Goyal et al. 2017, sec. 2.2.
    a.warmup_tokens = 375e6;
    a.warmup_steps = static_cast<std::int64_t>(std::ceil(a.warmup_tokens / batch_tokens));
    a.warmup_source = "linear warm-up over 375M tokens (Brown et al. 2020, GPT-3, App. B); Llama used 2,000 steps "
                      "(Touvron et al. 2023)";
    a.caveat = "rules of thumb, not guarantees: both rules break down beyond the critical batch size "
               "(McCandlish et al. 2018); tune around these values";
    a.warnings = lr_warnings(a, optimizer);
    return a;
}

}  // namespace preflight
