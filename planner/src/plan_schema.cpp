// The plan field table (plan_schema.hpp) and what is derived from it in the planner:
// to_flags, extension_flags, and the plan JSON in and out (report.cpp calls these).
#include "preflight/planner/plan_schema.hpp"

#include <cstdio>
#include <initializer_list>

#include <nlohmann/json.hpp>

#include "preflight/planner/error.hpp"
#include "preflight/planner/extensions.hpp"
#include "preflight/planner/limits.hpp"
#include "preflight/planner/search.hpp"
#include "preflight/planner/shown_value.hpp"

namespace preflight {

namespace {

std::int64_t integer(const FieldValue& v) { return std::get<std::int64_t>(v); }
double real(const FieldValue& v) { return std::get<double>(v); }
const std::string& name(const FieldValue& v) { return std::get<std::string>(v); }

template <typename E>
std::vector<std::string> names(std::initializer_list<E> values) {
    std::vector<std::string> out;
    for (E v : values) out.emplace_back(to_string(v));
    return out;
}
template <typename E>
std::vector<std::string> names(std::span<const E> values) {
    std::vector<std::string> out;
    for (E v : values) out.emplace_back(to_string(v));
    return out;
}

// Parses an enum name into `out`; false for an unknown name.
template <typename E, typename Parse>
bool set_enum(E& out, const FieldValue& v, Parse parse) {
    const auto parsed = parse(name(v));
    if (!parsed) return false;
    out = *parsed;
    return true;
}

constexpr std::string_view kPlanGroup = "Plan";
constexpr std::string_view kExtensionGroup = "Fine-tuning, offload, schedules, context/expert parallelism";

// A count flag: a positive whole number at most `max` (limits.hpp constant `bound_name`).
PlanField count(std::string_view key, std::string_view flag, std::string_view help, std::int64_t max,
                std::string_view bound_name) {
    PlanField f;
    f.key = key;
    f.flag = flag;
    f.help = help;
    f.group = kPlanGroup;
    f.type = FieldType::integer;
    f.min = 1;
    f.max = max;
    f.bound_name = bound_name;
    return f;
}

PlanField field(std::string_view key, std::string_view flag, std::string_view help, std::string_view group,
                FieldType type) {
    PlanField f;
    f.key = key;
    f.flag = flag;
    f.help = help;
    f.group = group;
    f.type = type;
    return f;
}

// The batch shape and the parallel degrees.
std::vector<PlanField> core_fields() {
    using namespace limits;
    std::vector<PlanField> t;
    // seq 0 stands for "the model's default" (resolve_defaults); not a search axis (SearchRequest::seq).
    t.push_back(count("seq", "--seq", "Sequence length in tokens (default: model context, capped at 4096; at most 2^24)",
                      kMaxSeq, "kMaxSeq"));
    t.back().get = [](const Plan& p) -> FieldValue { return p.seq; };
    t.back().set = [](Plan& p, const FieldValue& v) { return p.seq = integer(v), true; };
    t.back().runtime = true;
    t.push_back(count("mbs", "--mbs", "Micro-batch size in sequences per GPU per forward (default 1; at most 2^20)",
                      kMaxMbs, "kMaxMbs"));
    t.back().get = [](const Plan& p) -> FieldValue { return p.mbs; };
    t.back().set = [](Plan& p, const FieldValue& v) { return p.mbs = integer(v), true; };
    t.back().pin = [](PlanPins& s, const Plan& p) { s.mbs = p.mbs; };
    t.back().runtime = true;
    t.push_back(count("grad_acc", "--grad-acc",
                      "Gradient accumulation steps per optimizer step (default 1; at most 2^40: each step adds at "
                      "least one token to the global batch)",
                      kMaxGlobalBatchTokens, "kMaxGlobalBatchTokens"));
    // Said beside the bound's name when a value passes it: a step count under a token limit.
    t.back().domain = "each accumulation step adds at least one token to the global batch, which that limit bounds";
    t.back().get = [](const Plan& p) -> FieldValue { return p.grad_acc; };
    t.back().set = [](Plan& p, const FieldValue& v) { return p.grad_acc = integer(v), true; };
    t.back().pin = [](PlanPins& s, const Plan& p) { s.grad_acc = p.grad_acc; };
    t.back().runtime = true;
    t.push_back(count("dp", "--dp", "Data-parallel degree (default 1; at most 2^20)", kMaxGpus, "kMaxGpus"));
    t.back().get = [](const Plan& p) -> FieldValue { return p.dp; };
    t.back().set = [](Plan& p, const FieldValue& v) { return p.dp = integer(v), true; };
    t.back().pin = [](PlanPins& s, const Plan& p) { s.dp = p.dp; };
    t.push_back(count("tp", "--tp", "Tensor-parallel degree; must divide heads, KV heads and MLP width (default 1)",
                      kMaxGpus, "kMaxGpus"));
    t.back().get = [](const Plan& p) -> FieldValue { return p.tp; };
    t.back().set = [](Plan& p, const FieldValue& v) { return p.tp = integer(v), true; };
    t.back().pin = [](PlanPins& s, const Plan& p) { s.tp = p.tp; };
    t.push_back(count("pp", "--pp", "Pipeline-parallel stages, in the --pp-schedule (default 1)", kMaxGpus, "kMaxGpus"));
    t.back().get = [](const Plan& p) -> FieldValue { return p.pp; };
    t.back().set = [](Plan& p, const FieldValue& v) { return p.pp = integer(v), true; };
    t.back().pin = [](PlanPins& s, const Plan& p) { s.pp = p.pp; };
    return t;
}

// Sequence parallelism, ZeRO, the recipe (recompute, precision, optimizer, attention, dropout).
void add_recipe_fields(std::vector<PlanField>& t) {
    t.push_back(field("sp", "--sp", "Sequence parallelism (with --tp > 1): shards norm/dropout activations by tp",
                      kPlanGroup, FieldType::toggle));
    t.back().in_flags = Shown::non_default;
    t.back().get = [](const Plan& p) -> FieldValue { return p.sp; };
    t.back().set = [](Plan& p, const FieldValue& v) { return p.sp = std::get<bool>(v), true; };
    t.back().pin = [](PlanPins& s, const Plan& p) { s.sp = p.sp; };
    t.push_back(field("zero", "--zero",
                      "ZeRO stage over dp: 0 none, 1 optimizer states, 2 + gradients, 3 + weights (default 0)",
                      kPlanGroup, FieldType::integer));
    t.back().min = 0;
    t.back().max = 3;
    t.back().domain = "0, 1, 2 or 3";
    t.back().get = [](const Plan& p) -> FieldValue { return std::int64_t{p.zero}; };
    t.back().set = [](Plan& p, const FieldValue& v) {
        const auto stage = zero_stage(integer(v));
        if (stage) p.zero = *stage;
        return stage.has_value();
    };
    t.back().pin = [](PlanPins& s, const Plan& p) { s.zero = p.zero; };
    t.push_back(field("recompute", "--recompute",
                      "Activation recomputation: none | selective (attention core) | full (keep layer inputs) "
                      "(default none)",
                      kPlanGroup, FieldType::name));
    t.back().choices = names(all_recomputes());
    t.back().get = [](const Plan& p) -> FieldValue { return std::string(to_string(p.recompute)); };
    t.back().set = [](Plan& p, const FieldValue& v) { return set_enum(p.recompute, v, parse_recompute); };
    t.back().pin = [](PlanPins& s, const Plan& p) { s.recompute = p.recompute; };
    t.back().runtime = true;
    t.push_back(field("precision", "--precision",
                      "Precision recipe: fp32 | bf16-mixed | bf16-mixed-fp32-grads | bf16 | fp16-mixed | fp8-mixed "
                      "(default bf16-mixed)",
                      kPlanGroup, FieldType::name));
    t.back().choices = names(all_precisions());
    t.back().get = [](const Plan& p) -> FieldValue { return std::string(to_string(p.precision)); };
    t.back().set = [](Plan& p, const FieldValue& v) { return set_enum(p.precision, v, parse_precision); };
    t.back().pin = [](PlanPins& s, const Plan& p) { s.precision = p.precision; };
    t.back().runtime = true;
    t.push_back(field("fp8_scaling", "--fp8-scaling",
                      "With fp8-mixed: tensorwise (one scale per tensor: Transformer Engine, torchao's default) | "
                      "rowwise (torchao's rowwise recipe: slower GEMMs and casts) (default tensorwise)",
                      kPlanGroup, FieldType::name));
    t.back().choices = {"tensorwise", "rowwise"};
    t.back().in_flags = Shown::non_default;
    t.back().in_json = Shown::non_default;
    t.back().get = [](const Plan& p) -> FieldValue { return std::string(to_string(p.fp8_scaling)); };
    t.back().set = [](Plan& p, const FieldValue& v) { return set_enum(p.fp8_scaling, v, parse_fp8_scaling); };
    t.push_back(field("fp8_param_gather", "--fp8-param-gather",
                      "With fp8-mixed and --zero 1 (--framework megatron): Megatron-LM's --fp8-param-gather, the "
                      "decoder layers' GEMM weights kept as Transformer Engine fp8 parameters (no bf16 copy; the "
                      "fp32 main weights stay): 2 B less per such weight, and the step's all-gather of updated "
                      "weights moves them at 1 B (default off)",
                      kPlanGroup, FieldType::toggle));
    t.back().in_flags = Shown::non_default;
    t.back().in_json = Shown::non_default;
    t.back().get = [](const Plan& p) -> FieldValue { return p.fp8_param_gather; };
    t.back().set = [](Plan& p, const FieldValue& v) { return p.fp8_param_gather = std::get<bool>(v), true; };
    t.push_back(field("optimizer", "--optimizer", "adamw (2 fp32 moments) | sgd (1 fp32 momentum) (default adamw)",
                      kPlanGroup, FieldType::name));
    t.back().choices = names({Optimizer::adamw, Optimizer::sgd});
    t.back().get = [](const Plan& p) -> FieldValue { return std::string(to_string(p.optimizer)); };
    t.back().set = [](Plan& p, const FieldValue& v) { return set_enum(p.optimizer, v, parse_optimizer); };
    t.back().pin = [](PlanPins& s, const Plan& p) { s.optimizer = p.optimizer; };
    t.back().runtime = true;
    t.push_back(field("attention", "--attention",
                      "flash (keeps per-row softmax statistics) | eager (keeps s^2 scores) (default flash)", kPlanGroup,
                      FieldType::name));
    t.back().choices = names({AttentionKind::flash, AttentionKind::eager});
    t.back().get = [](const Plan& p) -> FieldValue { return std::string(to_string(p.attention)); };
    t.back().set = [](Plan& p, const FieldValue& v) { return set_enum(p.attention, v, parse_attention); };
    t.back().pin = [](PlanPins& s, const Plan& p) { s.attention = p.attention; };
    t.back().runtime = true;
    t.push_back(field("dropout", "--dropout", "Dropout probability in [0, 1); > 0 keeps dropout masks (default 0)",
                      kPlanGroup, FieldType::real));
    t.back().in_flags = Shown::non_default;
    t.back().get = [](const Plan& p) -> FieldValue { return p.dropout; };
    t.back().set = [](Plan& p, const FieldValue& v) { return p.dropout = real(v), true; };
    t.back().pin = [](PlanPins& s, const Plan& p) { s.dropout = p.dropout; };
}

void add_lora_fields(std::vector<PlanField>& t) {
    t.push_back(field("lora_rank", "--lora-rank",
                      "LoRA rank r, 1 to the model's hidden size (default 8, PEFT LoraConfig's)", kExtensionGroup,
                      FieldType::integer));
    t.back().get = [](const Plan& p) -> FieldValue { return p.lora.rank; };
    t.back().set = [](Plan& p, const FieldValue& v) { return p.lora.rank = integer(v), true; };
    t.push_back(field("lora_alpha", "--lora-alpha",
                      "LoRA alpha, a positive number; the update is scaled by alpha / r (default 8, PEFT's; no "
                      "effect on memory)",
                      kExtensionGroup, FieldType::real));
    t.back().get = [](const Plan& p) -> FieldValue { return p.lora.alpha; };
    t.back().set = [](Plan& p, const FieldValue& v) { return p.lora.alpha = real(v), true; };
    t.push_back(field("lora_targets", "--lora-targets",
                      "Projections with adapters: comma list of q,k,v,o,gate,up,down, or attention (= q,k,v,o) or "
                      "all-linear (QLoRA paper). Default q,v: PEFT's default target_modules for Llama/Mistral/Qwen2. "
                      "A fused module (GPT-2's c_attn, Phi-3's qkv_proj and gate_up_proj) takes one adapter, whole, "
                      "when any of its parts is named",
                      kExtensionGroup, FieldType::name));
    t.back().domain = "a comma list of q,k,v,o,gate,up,down (or attention, all-linear)";
    t.back().get = [](const Plan& p) -> FieldValue { return lora_targets_to_string(p.lora.targets); };
    t.back().set = [](Plan& p, const FieldValue& v) {
        const auto targets = parse_lora_targets(name(v));
        if (targets) p.lora.targets = *targets;
        return targets.has_value();
    };
    t.push_back(field("lora_dropout", "--lora-dropout",
                      "Dropout on each adapter's input (default 0, PEFT's); > 0 keeps a copy of the input and a mask "
                      "per adapter",
                      kExtensionGroup, FieldType::real));
    t.back().get = [](const Plan& p) -> FieldValue { return p.lora.dropout; };
    t.back().set = [](Plan& p, const FieldValue& v) { return p.lora.dropout = real(v), true; };
    for (std::size_t i = t.size() - 4; i < t.size(); ++i) {
        t[i].in_flags = Shown::finetuning;
        t[i].in_json = Shown::finetuning;
        t[i].pin = [](PlanPins& s, const Plan& p) { s.lora = p.lora; };
    }
    t.back().in_flags = Shown::finetuning_non_default;
}

void add_parallel_fields(std::vector<PlanField>& t) {
    t.push_back(field("vpp", "--vpp",
                      "Model chunks per pipeline stage for --pp-schedule interleaved (default 2 there, else 1; "
                      "pp * vpp divides the layers, or layers + 2 with the embedding and the loss taking a layer "
                      "slot each, as Megatron's --account-for-embedding/loss-in-pipeline-split)",
                      kExtensionGroup, FieldType::integer));
    t.back().get = [](const Plan& p) -> FieldValue { return p.vpp; };
    t.back().set = [](Plan& p, const FieldValue& v) { return p.vpp = integer(v), true; };
    t.back().pin = [](PlanPins& s, const Plan& p) { s.vpp = p.vpp; };
    t.push_back(field("cp", "--cp",
                      "Context-parallel degree: each sequence split over cp GPUs, ring attention exchanging K/V (the "
                      "Preflight runtime and its profile: K/V all-gathered) (default 1; 2 * cp must divide --seq; flash "
                      "attention; GPUs = dp * tp * pp * cp)",
                      kExtensionGroup, FieldType::integer));
    t.back().get = [](const Plan& p) -> FieldValue { return p.cp; };
    t.back().set = [](Plan& p, const FieldValue& v) { return p.cp = integer(v), true; };
    t.back().pin = [](PlanPins& s, const Plan& p) { s.cp = p.cp; };
    t.push_back(field("ep", "--ep", "Expert-parallel degree for MoE models: experts split over ep of the dp ranks (default 1)",
                      kExtensionGroup, FieldType::integer));
    t.back().get = [](const Plan& p) -> FieldValue { return p.ep; };
    t.back().set = [](Plan& p, const FieldValue& v) { return p.ep = integer(v), true; };
    t.back().pin = [](PlanPins& s, const Plan& p) { s.ep = p.ep; };
    t.push_back(field("moe_capacity_factor", "--moe-capacity-factor",
                      "Assumed load of the busiest expert over the balanced load, 1 to 64 (router imbalance; "
                      "default 1.0 = perfectly balanced; MoE models only)",
                      kExtensionGroup, FieldType::real));
    t.back().get = [](const Plan& p) -> FieldValue { return p.moe_capacity_factor; };
    t.back().set = [](Plan& p, const FieldValue& v) { return p.moe_capacity_factor = real(v), true; };
    t.back().pin = [](PlanPins& s, const Plan& p) { s.moe_capacity_factor = p.moe_capacity_factor; };
    for (std::size_t i = t.size() - 4; i < t.size(); ++i) t[i].in_flags = Shown::non_default;  // JSON: always
}

// Megatron-LM's --decoder-first/last-pipeline-num-layers (pipeline_uneven.cpp); not search axes: a
// given value goes to PlanPins::fixed, on every searched plan.
void add_pipeline_split_fields(std::vector<PlanField>& t) {
    t.push_back(field("pp_first_stage_layers", "--pp-first-stage-layers",
                      "Decoder layers on the first pipeline stage, the rest split evenly over the stages after it "
                      "(Megatron-LM's --decoder-first-pipeline-num-layers; --framework megatron, 1f1b or gpipe; "
                      "default 0: the even split)",
                      kExtensionGroup, FieldType::integer));
    t.back().get = [](const Plan& p) -> FieldValue { return p.pp_first_stage_layers; };
    t.back().set = [](Plan& p, const FieldValue& v) { return p.pp_first_stage_layers = integer(v), true; };
    t.push_back(field("pp_last_stage_layers", "--pp-last-stage-layers",
                      "Decoder layers on the last pipeline stage, the rest split evenly over the stages before it "
                      "(Megatron-LM's --decoder-last-pipeline-num-layers; default 0: the even split)",
                      kExtensionGroup, FieldType::integer));
    t.back().get = [](const Plan& p) -> FieldValue { return p.pp_last_stage_layers; };
    t.back().set = [](Plan& p, const FieldValue& v) { return p.pp_last_stage_layers = integer(v), true; };
    for (std::size_t i = t.size() - 2; i < t.size(); ++i) {
        t[i].in_flags = t[i].in_json = Shown::non_default;
        t[i].min = 0;
        t[i].max = limits::kMaxLayers;
        t[i].domain = "0 (not given) or a number of decoder layers up to limits::kMaxLayers";
    }
}

void add_extension_fields(std::vector<PlanField>& t) {
    t.push_back(field("finetune", "--finetune",
                      "full (default: every weight trained, pre-training accounting) | lora (frozen 16-bit base + "
                      "adapters, Hu et al. 2021) | qlora (frozen NF4 4-bit base with double-quantised constants, "
                      "Dettmers et al. 2023)",
                      kExtensionGroup, FieldType::name));
    t.back().choices = names({Finetune::full, Finetune::lora, Finetune::qlora});
    t.back().in_flags = Shown::non_default;
    t.back().get = [](const Plan& p) -> FieldValue { return std::string(to_string(p.finetune)); };
    t.back().set = [](Plan& p, const FieldValue& v) { return set_enum(p.finetune, v, parse_finetune); };
    t.back().pin = [](PlanPins& s, const Plan& p) { s.finetune = p.finetune; };
    add_lora_fields(t);
    t.push_back(field("offload", "--offload",
                      "none (default) | optimizer (ZeRO-Offload: fp32 master weights, moments and fp32 gradients in "
                      "host memory, CPU optimizer step) | params (ZeRO-Infinity: the 16-bit parameters too; needs "
                      "--zero 3)",
                      kExtensionGroup, FieldType::name));
    t.back().choices = names({Offload::none, Offload::optimizer, Offload::optimizer_and_params});
    t.back().in_flags = Shown::non_default;
    t.back().get = [](const Plan& p) -> FieldValue { return std::string(to_string(p.offload)); };
    t.back().set = [](Plan& p, const FieldValue& v) { return set_enum(p.offload, v, parse_offload); };
    t.back().pin = [](PlanPins& s, const Plan& p) { s.offload = p.offload; };
    t.push_back(field("pp_schedule", "--pp-schedule",
                      "Pipeline schedule with --pp > 1: 1f1b (default; stage i holds min(p-i, m) micro-batches) | "
                      "gpipe (all m held) | interleaved (v chunks per stage, bubble (p-1)/(v m); Narayanan et al. 2021)",
                      kExtensionGroup, FieldType::name));
    t.back().choices = names({PpSchedule::one_f_one_b, PpSchedule::gpipe, PpSchedule::interleaved});
    t.back().in_flags = Shown::non_default;
    t.back().get = [](const Plan& p) -> FieldValue { return std::string(to_string(p.pp_schedule)); };
    t.back().set = [](Plan& p, const FieldValue& v) { return set_enum(p.pp_schedule, v, parse_pp_schedule); };
    t.back().pin = [](PlanPins& s, const Plan& p) { s.pp_schedule = p.pp_schedule; };
    add_parallel_fields(t);
    add_pipeline_split_fields(t);
}

std::vector<PlanField> make_fields() {
    std::vector<PlanField> t = core_fields();
    add_recipe_fields(t);
    add_extension_fields(t);
    return t;
}

std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
}

}  // namespace

std::span<const PlanField> plan_fields() {
    static const std::vector<PlanField> fields = make_fields();
    return fields;
}

const PlanField* plan_field(std::string_view key) {
    for (const PlanField& f : plan_fields())
        if (f.key == key) return &f;
    return nullptr;
}

std::string field_text(const PlanField& field, const Plan& plan) {
    const FieldValue v = field.get(plan);
    switch (field.type) {
        case FieldType::integer: return std::to_string(integer(v));
        case FieldType::real: {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%g", real(v));
            return buf;
        }
        case FieldType::toggle: return std::get<bool>(v) ? "true" : "false";
        case FieldType::name: return name(v);
    }
    return {};
}

bool field_shown(const PlanField& field, Shown shown, const Plan& plan) {
    static const Plan defaults;
    const bool non_default = field.get(plan) != field.get(defaults);
    const bool finetuning = plan.finetune != Finetune::full;
    switch (shown) {
        case Shown::always: return true;
        case Shown::non_default: return non_default;
        case Shown::finetuning: return finetuning;
        case Shown::finetuning_non_default: return finetuning && non_default;
    }
    return true;
}

void set_field(const PlanField& field, Plan& plan, const FieldValue& value, const std::string& subject) {
    if (field.set(plan, value)) return;
    switch (field.type) {
        case FieldType::integer:
            throw InputError(subject, "must be " + std::string(field.domain) + ", got " + std::to_string(integer(value)));
        case FieldType::name:
            throw InputError(subject, "unknown value '" + name(value) + "' (" +
                                          (field.choices.empty() ? std::string(field.domain) : join(field.choices)) + ")");
        default: throw InputError(subject, "is out of range");
    }
}

std::string to_flags(const Plan& plan) {
    std::string s;
    for (const PlanField& f : plan_fields()) {
        if (!field_shown(f, f.in_flags, plan)) continue;
        if (!s.empty()) s += ' ';  // appended piecewise: GCC 12 warns (-Wrestrict) on " " + string
        s += f.flag;
        if (f.type != FieldType::toggle) (s += ' ') += field_text(f, plan);
    }
    return s;
}

std::string extension_flags(const Plan& plan) {
    std::string s;
    for (const PlanField& f : plan_fields()) {
        if (f.group != kExtensionGroup || !field_shown(f, f.in_flags, plan)) continue;
        (s += ' ') += f.flag;
        if (f.type != FieldType::toggle) (s += ' ') += field_text(f, plan);
    }
    return s;
}

void plan_fields_to_json(const Plan& plan, nlohmann::json& j) {
    for (const PlanField& f : plan_fields()) {
        if (!field_shown(f, f.in_json, plan)) {
            // The adapters' settings of a plan without adapters: not applicable, null (the key kept).
            if (f.in_json == Shown::finetuning) j[std::string(f.key)] = nullptr;
            continue;
        }
        // A count not yet resolved (seq 0: the model's default) is left out, as a file says "default".
        if (f.type == FieldType::integer && f.min >= 1 && integer(f.get(plan)) < f.min) continue;
        std::visit([&](const auto& v) { j[std::string(f.key)] = v; }, f.get(plan));
    }
}

namespace {
FieldValue json_value(const PlanField& f, const nlohmann::json& v, const std::string& key) {
    switch (f.type) {
        case FieldType::integer:
            if (!v.is_number_integer()) throw InputError(key, "must be an integer, got " + shown_json(v));
            if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
                throw InputError(key, shown_json(v) + " is beyond the 64-bit integer range");
            // A count written in a file is the count: 0 is not "the default" there (seq 0 is the
            // in-memory stand-in for the model's default, which a file gives by leaving the key out).
            if (f.min >= 1 && v.get<std::int64_t>() < f.min)
                throw InputError(key, "must be a whole number >= " + std::to_string(f.min) + ", got " + shown_json(v) +
                                          " (leave the key out for the default)");
            return v.get<std::int64_t>();
        case FieldType::real:
            if (!v.is_number()) throw InputError(key, "must be a number");
            return v.get<double>();
        case FieldType::toggle:
            if (!v.is_boolean()) throw InputError(key, "must be true or false");
            return v.get<bool>();
        case FieldType::name:
            if (!v.is_string()) throw InputError(key, "must be a string");
            return v.get<std::string>();
    }
    return {};
}
}  // namespace

void plan_fields_from_json(const nlohmann::json& j, Plan& plan) {
    for (const PlanField& f : plan_fields()) {
        const std::string key(f.key);
        if (!j.contains(key)) continue;
        // An adapter setting null is not applicable (plan_fields_to_json): as left out here;
        // read_plan_document refuses it beside adapters.
        if (f.in_json == Shown::finetuning && j.at(key).is_null()) continue;
        set_field(f, plan, json_value(f, j.at(key), key), key);
    }
}

}  // namespace preflight
