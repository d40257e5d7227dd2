// A training plan: batch shape, parallelism, ZeRO stage, precision, recompute.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "preflight/planner/plan_extensions.hpp"

namespace preflight {

struct ModelConfig;

enum class Precision { fp32, bf16_mixed, bf16_mixed_fp32_grads, bf16, fp16_mixed, fp8_mixed };
enum class Recompute { none, selective, full };
enum class Optimizer { adamw, sgd };
enum class AttentionKind { flash, eager };
// How an fp8-mixed recipe scales its GEMM operands: one scale per tensor (Transformer Engine's
// current/delayed scaling, torchao's "tensorwise") or one per row (torchao's "rowwise": a
// rowwise-scaled GEMM and a cast of each operand along the axis each GEMM reads).
enum class Fp8Scaling { tensorwise, rowwise };
// ZeRO stage over the data-parallel ranks (Rajbhandari et al. 2020, sec. 5): stage 1
// shards the optimizer states (and master weights), 2 also the gradients, 3 also the
// weights. Unscoped with an int base so that the stage order reads as in the paper
// (`zero >= 2`: gradients sharded) and prints as its number.
enum ZeroStage : int { zero_none = 0, zero_optimizer_states = 1, zero_gradients = 2, zero_weights = 3 };
// The stage of a number (nullopt outside 0..3).
std::optional<ZeroStage> zero_stage(std::int64_t stage);

// Names exactly as on the command line (docs/interface.md).
std::string_view to_string(Precision p);
std::string_view to_string(Recompute r);
std::string_view to_string(Optimizer o);
std::string_view to_string(AttentionKind a);
std::string_view to_string(Fp8Scaling s);
std::optional<Precision> parse_precision(std::string_view s);
std::optional<Recompute> parse_recompute(std::string_view s);
std::optional<Optimizer> parse_optimizer(std::string_view s);
std::optional<AttentionKind> parse_attention(std::string_view s);
std::optional<Fp8Scaling> parse_fp8_scaling(std::string_view s);
std::span<const Precision> all_precisions();
std::span<const Recompute> all_recomputes();

struct Plan {
    std::int64_t seq = 0;  // 0 = the model's context length capped at 4096 (see resolve_defaults)
    std::int64_t mbs = 1;
    std::int64_t grad_acc = 1;
    std::int64_t dp = 1;
    std::int64_t tp = 1;
    std::int64_t pp = 1;
    bool sp = false;  // sequence parallelism (needs tp > 1)
    ZeroStage zero = zero_none;  // ZeRO stage over dp
    Recompute recompute = Recompute::none;
    Precision precision = Precision::bf16_mixed;
    Optimizer optimizer = Optimizer::adamw;
    AttentionKind attention = AttentionKind::flash;
    Fp8Scaling fp8_scaling = Fp8Scaling::tensorwise;  // fp8-mixed only
    // Megatron-LM's --fp8-param-gather (fp8-mixed, ZeRO-1, --framework megatron): the decoder layers'
    // GEMM weights are Transformer Engine fp8 parameters, with no 16-bit copy (fp8_params.cpp).
    bool fp8_param_gather = false;
    double dropout = 0.0;
    // Fine-tuning, offload, pipeline schedule, context / expert parallelism
    // (plan_extensions.hpp); the defaults are pre-training's plan.
    Finetune finetune = Finetune::full;
    LoraSettings lora;
    Offload offload = Offload::none;
    PpSchedule pp_schedule = PpSchedule::one_f_one_b;
    std::int64_t vpp = 1;  // model chunks per pipeline stage (interleaved schedule)
    // Megatron-LM's --decoder-first/last-pipeline-num-layers (--framework megatron, 1F1B or GPipe):
    // the decoder layers on the first / last pipeline stage, the rest split evenly over the
    // stages between (pipeline_uneven.cpp). 0 = not given; both 0 = the even split.
    std::int64_t pp_first_stage_layers = 0;
    std::int64_t pp_last_stage_layers = 0;
    std::int64_t cp = 1;   // context-parallel degree (sequence split over cp ranks, ring attention)
    std::int64_t ep = 1;   // expert-parallel degree (MoE experts split over ep of the dp ranks)
    double moe_capacity_factor = 1.0;  // assumed busiest expert's load / the balanced load
    // Set only inside the planner on a context-parallel rank's view of a plan (seq already
    // divided by cp): the sequence before the split. 0 everywhere else.
    std::int64_t cp_full_seq = 0;

    std::int64_t gpus() const { return dp * tp * pp * cp; }
    // Global batch in tokens = seq * mbs * grad_acc * dp (docs/interface.md).
    std::int64_t global_batch_tokens() const { return seq * mbs * grad_acc * dp; }
};

// The plan as the command-line flags that reproduce it ("--seq 4096 --mbs 1 ..."), derived
// from the field table (plan_schema.hpp); --sp, --dropout and the extensions appear only when set.
std::string to_flags(const Plan& plan);

// Default sequence length: the model's context length capped at 4096 (docs/interface.md).
inline constexpr std::int64_t kDefaultSeqCap = 4096;

// Fills seq when 0. Pure: returns a copy.
Plan resolve_defaults(Plan plan, const ModelConfig& model);

// Throws InputError naming the flag for an inconsistent plan (mbs 0, tp not
// dividing heads, pp > layers, sp without tp, dropout out of [0,1), ...).
void validate_plan(const Plan& plan, const ModelConfig& model);
// The part of validate_plan for --fp8-param-gather (fp8_params.cpp): it needs --precision fp8-mixed
// and --zero 1 (Megatron-LM's distributed optimizer), without fine-tuning or offload.
void validate_fp8_param_gather(const Plan& plan);
// The part of validate_plan for --pp-first-stage-layers / --pp-last-stage-layers (pipeline_uneven.cpp):
// Megatron-LM's rule (TransformerConfig.__post_init__, "Uneven PP") and what the planner does not model.
void validate_uneven_pipeline_split(const Plan& plan, const ModelConfig& model);
// " (tp can be 1, 2, 4 or 8)": the tensor-parallel degrees that divide the model's heads, key/value
// heads and MLP width, appended to the refusal of any other.
std::string tp_choices(const ModelConfig& model);

// A plan with its defaults filled from the model (resolve_defaults) that passed
// validate_plan: what a command builds once and hands to every model.
class ResolvedPlan {
public:
    ResolvedPlan(const Plan& plan, const ModelConfig& model);
    const Plan& plan() const { return plan_; }
    operator const Plan&() const { return plan_; }

private:
    Plan plan_;
};

// Bytes per element and per parameter for a precision recipe (docs/interface.md table).
struct PrecisionBytes {
    int weight = 2;               // the compute copy of each parameter
    int gradient = 2;             // 16-bit (or fp32) gradient buffer
    int gradient_accum = 0;       // extra fp32 accumulation buffer (bf16-mixed-fp32-grads)
    int master = 4;               // fp32 master copy
    int activation = 2;           // activation / logits element
    int gemm_input = 2;           // saved GEMM inputs (1 under fp8: fp8 copies kept for backward)
    int fp8_weight_copies = 0;    // fp8 weight + its transpose per GEMM weight (Transformer Engine)
};
PrecisionBytes precision_bytes(Precision p);

// Optimizer state bytes per parameter: AdamW two fp32 moments, SGD one fp32 momentum.
int optimizer_bytes_per_param(Optimizer o);

}  // namespace preflight
