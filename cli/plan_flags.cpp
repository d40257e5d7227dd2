#include "plan_flags.hpp"

#include <charconv>
#include <cmath>

#include "preflight/planner/error.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/limits.hpp"

namespace preflight::cli {

CLI::Validator count_in_any_notation() {
    return CLI::Validator(
        [](std::string& value) -> std::string {
            // Plain integers exactly (from_chars: no silent clamping past 2^63 - 1) ...
            std::int64_t exact = 0;
            const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), exact);
            if (end == value.data() + value.size()) {
                if (ec == std::errc::result_out_of_range)
                    return "'" + value + "' is beyond the 64-bit integer range (9,223,372,036,854,775,807)";
                if (exact < 1) return "'" + value + "' is not a positive whole number";
                return "";
            }
            // ... and scientific notation ("4.194304e6") through a double.
            std::size_t used = 0;
            double v = 0;
            try {
                v = std::stod(value, &used);
            } catch (const std::out_of_range&) {
                return "'" + value + "' is beyond the 64-bit integer range (9,223,372,036,854,775,807)";
            } catch (const std::exception&) {
                return "'" + value + "' is not a number";
            }
            if (used != value.size()) return "'" + value + "' is not a number";
            if (!std::isfinite(v) || v >= 9.2e18)
                return "'" + value + "' is beyond the 64-bit integer range (9,223,372,036,854,775,807)";
            if (!(v >= 1.0) || v != static_cast<double>(static_cast<std::int64_t>(v)))
                return "'" + value + "' is not a positive whole number";
            value = std::to_string(static_cast<std::int64_t>(v));
            return "";
        },
        "COUNT (e.g. 4194304 or 4.194304e6)");
}

CLI::Validator count_at_most(std::int64_t bound, const std::string& bound_name) {
    const CLI::Validator count = count_in_any_notation();
    return CLI::Validator(
        [count, bound, bound_name](std::string& value) -> std::string {
            std::string why = count(value);
            if (!why.empty()) return why;
            if (std::stoll(value) > bound)
                return value + " exceeds the limit " + bound_name + " = " + std::to_string(bound);
            return "";
        },
        "COUNT <= " + std::to_string(bound));
}

void add_plan_flags(CLI::App& app, PlanFlags& f) {
    app.add_option("--model", f.model,
                   "Catalog name (see `preflight models`) or path to a Hugging Face config.json")
        ->capture_default_str();
    app.add_option("--gpu", f.gpu, "Catalog name (see `preflight gpus`) or path to a GPU spec JSON")
        ->capture_default_str();
    auto* g = "Plan";
    // Counts are bounded (limits.hpp) so no byte figure can overflow; the bound is named when exceeded.
    using namespace limits;
    app.add_option("--seq", f.seq, "Sequence length in tokens (default: model context, capped at 4096; at most 2^24)")
        ->transform(count_at_most(kMaxSeq, "kMaxSeq"))
        ->group(g);
    app.add_option("--mbs", f.mbs, "Micro-batch size in sequences per GPU per forward (default 1; at most 2^20)")
        ->transform(count_at_most(kMaxMbs, "kMaxMbs"))
        ->group(g);
    app.add_option("--grad-acc", f.grad_acc, "Gradient accumulation steps per optimizer step (default 1)")
        ->transform(count_at_most(kMaxGlobalBatchTokens, "kMaxGlobalBatchTokens"))
        ->group(g);
    app.add_option("--dp", f.dp, "Data-parallel degree (default 1; at most 2^20)")
        ->transform(count_at_most(kMaxGpus, "kMaxGpus"))
        ->group(g);
    app.add_option("--tp", f.tp, "Tensor-parallel degree; must divide heads, KV heads and MLP width (default 1)")
        ->transform(count_at_most(kMaxGpus, "kMaxGpus"))
        ->group(g);
    app.add_option("--pp", f.pp, "Pipeline-parallel stages, 1F1B schedule (default 1)")
        ->transform(count_at_most(kMaxGpus, "kMaxGpus"))
        ->group(g);
    app.add_flag("--sp", f.sp, "Sequence parallelism (with --tp > 1): shards norm/dropout activations by tp")
        ->group(g);
    app.add_option("--zero", f.zero,
                   "ZeRO stage over dp: 0 none, 1 optimizer states, 2 + gradients, 3 + weights (default 0)")
        ->check(CLI::Range(0, 3))
        ->group(g);
    app.add_option("--recompute", f.recompute,
                   "Activation recomputation: none | selective (attention core) | full (keep layer inputs) "
                   "(default none)")
        ->check(CLI::IsMember({"none", "selective", "full"}))
        ->group(g);
    app.add_option("--precision", f.precision,
                   "Precision recipe: fp32 | bf16-mixed | bf16-mixed-fp32-grads | bf16 | fp16-mixed | fp8-mixed "
                   "(default bf16-mixed)")
        ->check(CLI::IsMember({"fp32", "bf16-mixed", "bf16-mixed-fp32-grads", "bf16", "fp16-mixed", "fp8-mixed"}))
        ->group(g);
    app.add_option("--optimizer", f.optimizer, "adamw (2 fp32 moments) | sgd (1 fp32 momentum) (default adamw)")
        ->check(CLI::IsMember({"adamw", "sgd"}))
        ->group(g);
    app.add_option("--attention", f.attention,
                   "flash (keeps per-row softmax statistics) | eager (keeps s^2 scores) (default flash)")
        ->check(CLI::IsMember({"flash", "eager"}))
        ->group(g);
    app.add_option("--dropout", f.dropout, "Dropout probability; > 0 keeps dropout masks (default 0)")->group(g);
    add_extension_flags(app, f);
    app.add_option("--overhead-bytes", f.overhead_bytes,
                   "Per-GPU overhead (CUDA context, library workspaces) in bytes; overrides the GPU spec "
                   "(at most 2^50 = 1 PiB)")
        ->check(CLI::Range(std::int64_t{0}, kMaxDeviceBytes));
    app.add_option("--data-dir", f.data_dir, "Catalog folder (default: $PREFLIGHT_DATA_DIR or the built-in data/)");
}

void add_framework_flag(CLI::App& app, PlanFlags& f) {
    app.add_option("--framework", f.framework,
                   "Framework whose memory behaviour to model: megatron (default) | nanotron | torchtitan | "
                   "deepspeed | preflight-runtime | pytorch. nanotron has its own model (fp32 gradient "
                   "accumulator, cost-balanced pipeline split, caching-allocator reserve fitted on measured runs; "
                   "its verdict uses the reserved pool + CUDA context/NCCL)")
        ->check(CLI::IsMember({"megatron", "nanotron", "torchtitan", "deepspeed", "preflight-runtime", "pytorch"}));
}

FrameworkProfile framework_profile(const PlanFlags& f) {
    const auto p = profile_by_name(f.framework);
    if (!p) throw InputError("--framework", "unknown framework '" + f.framework + "'");
    return *p;
}

Plan PlanFlags::to_plan() const {
    Plan p;
    p.seq = seq.value_or(0);
    p.mbs = mbs.value_or(p.mbs);
    p.grad_acc = grad_acc.value_or(p.grad_acc);
    p.dp = dp.value_or(p.dp);
    p.tp = tp.value_or(p.tp);
    p.pp = pp.value_or(p.pp);
    p.sp = sp;
    p.zero = zero.value_or(p.zero);
    if (recompute) p.recompute = *parse_recompute(*recompute);
    if (precision) p.precision = *parse_precision(*precision);
    if (optimizer) p.optimizer = *parse_optimizer(*optimizer);
    if (attention) p.attention = *parse_attention(*attention);
    p.dropout = dropout.value_or(p.dropout);
    apply_extension_flags(*this, p);
    if (seq && *seq <= 0) throw InputError("--seq", "must be a positive integer, got " + std::to_string(*seq));
    return p;
}

}  // namespace preflight::cli
