#include "plan_flags.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>

#include "preflight/planner/error.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/limits.hpp"
#include "preflight/planner/catalog.hpp"
#include "preflight/planner/user_file.hpp"

namespace preflight::cli {

ModelConfig load_plan_model(const PlanFlags& flags, const std::filesystem::path& data_dir) {
    if (!flags.model_config) {
        ModelConfig m = load_model(flags.model, data_dir);
        const auto& seq = flags.slots[static_cast<std::size_t>(plan_field("seq") - plan_fields().data())].integer;
        if (flags.context_follows_seq && seq) m.max_positions = std::max(m.max_positions, *seq);
        return m;
    }
    const std::string name = std::filesystem::path(flags.model_config_name).filename().string();
    return interpret_user_json(flags.model_config_name, [&] { return model_from_hf_config(*flags.model_config, name); });
}

namespace {

// The multiplier a count's suffix names: SI decimal k/K, M, G or B (billion), T; IEC binary Ki,
// Mi, Gi, Ti (4Mi = 4 x 2^20 = 4,194,304). 0 when `suffix` is none of them.
std::int64_t suffix_multiplier(std::string_view suffix) {
    static const std::pair<std::string_view, std::int64_t> known[] = {
        {"k", 1'000}, {"K", 1'000}, {"M", 1'000'000}, {"G", 1'000'000'000}, {"B", 1'000'000'000},
        {"T", 1'000'000'000'000}, {"Ki", 1LL << 10}, {"Mi", 1LL << 20}, {"Gi", 1LL << 30}, {"Ti", 1LL << 40}};
    for (const auto& [name, factor] : known)
        if (suffix == name) return factor;
    return 0;
}

// "1.5M", "4Mi", "15T": a decimal mantissa (digits, at most one point) times the suffix's
// multiplier, in exact integer arithmetic (a double would make 1.1K 1100.0000000000002).
// nullopt when `value` has no known suffix; otherwise "" and `value` rewritten, or the refusal.
std::optional<std::string> count_with_suffix(std::string& value) {
    const std::size_t digits_end = value.find_first_not_of("0123456789.");
    if (digits_end == std::string::npos || digits_end == 0) return std::nullopt;
    const std::int64_t factor = suffix_multiplier(std::string_view(value).substr(digits_end));
    if (factor == 0) return std::nullopt;
    const std::string mantissa = value.substr(0, digits_end);
    const std::size_t point = mantissa.find('.');
    const std::string whole = mantissa.substr(0, point);
    std::string fraction = point == std::string::npos ? "" : mantissa.substr(point + 1);
    if (fraction.find('.') != std::string::npos || (whole.empty() && fraction.empty()))
        return "'" + value + "' is not a number";
    fraction.erase(fraction.find_last_not_of('0') + 1);  // "1.50M" is "1.5M"
    const std::string range = "'" + value + "' is beyond the 64-bit integer range (9,223,372,036,854,775,807)";
    const std::size_t lead = std::min(whole.find_first_not_of('0'), whole.size());
    if (whole.size() - lead > 19) return range;  // >= 10^19 before the suffix
    if (fraction.size() > 18) return "'" + value + "' has more decimals than a count needs";
    // whole x factor + fraction x factor / 10^digits: each product < 10^19 x 2^40 < 2^127.
    __extension__ using Wide = __int128;
    const auto digits = [](const std::string& text) {
        Wide v = 0;
        for (const char c : text) v = v * 10 + (c - '0');
        return v;
    };
    Wide divisor = 1;
    for (std::size_t i = 0; i < fraction.size(); ++i) divisor *= 10;
    const Wide fraction_part = digits(fraction) * factor;
    if (fraction_part % divisor != 0) return "'" + value + "' is not a whole number";
    const Wide count = digits(whole) * factor + fraction_part / divisor;
    if (count > INT64_MAX) return range;
    if (count < 1) return "'" + value + "' is not a positive whole number";
    value = std::to_string(static_cast<std::int64_t>(count));
    return "";
}

// A count written in decimal notation with an optional fraction and exponent ("4.194304e6",
// "4096.0", "+5"), read exactly from its digits: "" and `value` rewritten as the integer, or why
// not. Digits D with exponent X: D x 10^X is whole only when the trailing digits X removes are 0.
std::string exact_decimal_count(std::string& value) {
    const std::string not_number = "'" + value + "' is not a number";
    std::string_view s = value;
    const bool negative = !s.empty() && s.front() == '-';
    if (!s.empty() && (s.front() == '-' || s.front() == '+')) s.remove_prefix(1);
    const std::size_t e = s.find_first_of("eE");
    const std::string_view mantissa = s.substr(0, e);
    std::int64_t exponent = 0;
    if (e != std::string_view::npos) {
        std::string_view x = s.substr(e + 1);
        const bool minus = !x.empty() && x.front() == '-';
        if (!x.empty() && (x.front() == '-' || x.front() == '+')) x.remove_prefix(1);
        if (x.empty() || x.find_first_not_of("0123456789") != std::string_view::npos) return not_number;
        for (const char c : x) exponent = std::min<std::int64_t>(exponent * 10 + (c - '0'), 1'000'000);
        if (minus) exponent = -exponent;
    }
    const std::size_t point = mantissa.find('.');
    const std::string_view whole = mantissa.substr(0, point);
    const std::string_view fraction = point == std::string_view::npos ? std::string_view() : mantissa.substr(point + 1);
    std::string digits = std::string(whole) + std::string(fraction);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return not_number;
    exponent -= static_cast<std::int64_t>(fraction.size());
    digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size()));
    while (!digits.empty() && digits.back() == '0') digits.pop_back(), ++exponent;
    if (digits.empty() || negative) return "'" + value + "' is not a positive whole number";
    if (exponent < 0) return "'" + value + "' is not a whole number";
    const std::string range = "'" + value + "' is beyond the 64-bit integer range (9,223,372,036,854,775,807)";
    if (static_cast<std::int64_t>(digits.size()) + exponent > 19) return range;
    std::uint64_t count = 0;  // < 10^19 < 2^64
    for (const char c : digits) count = count * 10 + static_cast<std::uint64_t>(c - '0');
    for (std::int64_t i = 0; i < exponent; ++i) count *= 10;
    if (count > static_cast<std::uint64_t>(INT64_MAX)) return range;
    value = std::to_string(count);
    return "";
}

}  // namespace

CLI::Validator count_in_any_notation(Suffix suffix) {
    return CLI::Validator(
        [suffix](std::string& value) -> std::string {
            std::string as_written = value;
            if (auto why = count_with_suffix(as_written)) {
                if (suffix == Suffix::read) {
                    value = as_written;
                    return *why;
                }
                return "'" + value + "': this flag takes the number itself (a suffix would be ambiguous here: 8K is "
                                     "8,000 or 8,192); suffixes are read by plan's --gbs-tokens, --train-tokens, "
                                     "--base-batch, --host-memory and --max-plans, and by --overhead-bytes";
            }
            // Plain integers exactly (from_chars: no silent clamping past 2^63 - 1) ...
            std::int64_t exact = 0;
            const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), exact);
            if (end == value.data() + value.size()) {
                if (ec == std::errc::result_out_of_range)
                    return "'" + value + "' is beyond the 64-bit integer range (9,223,372,036,854,775,807)";
                if (exact < 1) return "'" + value + "' is not a positive whole number";
                value = std::to_string(exact);  // CLI11 reads a leading 0 as octal: hand it decimal
                return "";
            }
            // ... and decimal scientific notation ("4.194304e6"), read exactly as text (a double
            // would round 1048575.99999999999 to 1048576; std::stod also takes "0x10" and "inf").
            if (value.empty() || value.find_first_not_of("0123456789.eE+-") != std::string::npos)
                return "'" + value + "' is not a number" +
                       (suffix == Suffix::read ? " (a count is 4194304, 4.194304e6, or a number with one of the suffixes "
                                                 "k K M G B T (powers of 10) or Ki Mi Gi Ti (powers of 2): 4Mi, 15T)"
                                               : "");
            return exact_decimal_count(value);
        },
        suffix == Suffix::read ? "COUNT (e.g. 4194304, 4.194304e6, 4Mi = 4 x 2^20 or 15T = 15e12)"
                               : "COUNT (e.g. 4096 or 4.096e3)");
}

CLI::Validator count_at_most(std::int64_t bound, const std::string& bound_name, Suffix suffix, const std::string& why) {
    const CLI::Validator count = count_in_any_notation(suffix);
    return CLI::Validator(
        [count, bound, bound_name, why](std::string& value) -> std::string {
            std::string refused = count(value);
            if (!refused.empty()) return refused;
            if (std::stoll(value) > bound)
                return value + " exceeds the limit " + bound_name + " = " + std::to_string(bound) +
                       (why.empty() ? "" : " (" + why + ")");
            return "";
        },
        "COUNT <= " + std::to_string(bound));
}

CLI::Validator byte_count_or_zero(std::int64_t bound, const std::string& bound_name) {
    const CLI::Validator count = count_at_most(bound, bound_name, Suffix::read);
    return CLI::Validator(
        [count](std::string& value) -> std::string {
            // 0 ("0", "00") is a byte count here; every other value reads as --host-memory's.
            std::int64_t zero = -1;
            const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), zero);
            if (ec == std::errc() && end == value.data() + value.size() && zero == 0) {
                value = "0";
                return "";
            }
            return count(value);
        },
        "BYTES (e.g. 1073741824, 1e9, 1Gi = 2^30 or 1.5G)");
}

CLI::Validator finite_real() {
    return CLI::Validator(
        [](std::string& value) -> std::string {
            double v = 0;
            const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
            if (ec == std::errc::result_out_of_range) return "'" + value + "' is beyond the range of a number";
            if (ec != std::errc() || end != value.data() + value.size() || !std::isfinite(v))
                return "'" + value + "' is not a finite number";
            return "";
        },
        "NUMBER");
}

CLI::Validator exact_integer() {
    return CLI::Validator(
        [](std::string& value) -> std::string {
            std::int64_t v = 0;
            const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
            if (ec == std::errc::result_out_of_range)
                return "'" + value + "' is beyond the 64-bit integer range (9,223,372,036,854,775,807)";
            if (ec != std::errc() || end != value.data() + value.size()) return "'" + value + "' is not a whole number";
            value = std::to_string(v);  // CLI11 reads a leading 0 as octal (strtoll base 0): hand it decimal
            return "";
        },
        "INT");
}

namespace {

// The option of one plan field: its type, its check (bound, range or names), its group.
CLI::Option* add_field_option(CLI::App& app, const PlanField& field, PlanFlags::Slot& slot) {
    const std::string flag(field.flag), help(field.help);
    CLI::Option* o = nullptr;
    switch (field.type) {
        case FieldType::integer:
            o = app.add_option(flag, slot.integer, help);
            // Counts are bounded (limits.hpp) so no byte figure can overflow; the bound is named when exceeded.
            if (!field.bound_name.empty())
                o->transform(count_at_most(field.max, std::string(field.bound_name), Suffix::refused, std::string(field.domain)));
            else if (field.max > 0)
                o->transform(exact_integer())->check(CLI::Range(field.min, field.max));
            else
                o->transform(exact_integer());
            break;
        case FieldType::real: o = app.add_option(flag, slot.real, help)->check(finite_real()); break;
        case FieldType::toggle: o = app.add_flag(flag, slot.toggle, help); break;
        case FieldType::name:
            o = app.add_option(flag, slot.name, help);
            if (!field.choices.empty()) o->check(CLI::IsMember(field.choices));
            break;
    }
    return o->group(std::string(field.group));
}

FieldValue slot_value(const PlanField& field, const PlanFlags::Slot& slot) {
    switch (field.type) {
        case FieldType::integer: return *slot.integer;
        case FieldType::real: return *slot.real;
        case FieldType::toggle: return slot.toggle;
        case FieldType::name: return *slot.name;
    }
    return {};
}

}  // namespace

namespace {

// `plan`'s help: a layout, batch-shape or recipe flag left out is searched, so its "(default X)"
// would say what the search does not keep.
void say_searched(CLI::App& app) {
    for (const char* name : {"--mbs", "--grad-acc", "--dp", "--tp", "--pp", "--sp", "--zero", "--recompute", "--precision"}) {
        CLI::Option* o = app.get_option_no_throw(name);
        if (o == nullptr) continue;
        std::string d = o->get_description();
        const std::size_t at = d.find("(default ");
        if (at == std::string::npos) {
            d += " (searched when not given)";
        } else {
            const std::size_t end = d.find_first_of(";)", at);
            d.replace(at, end - at, "(searched when not given");
        }
        o->description(d);
    }
    // The schedule and its chunks: the search tries interleaved with every chunk count from 2 to 16
    // that splits the layers.
    for (const char* name : {"--pp-schedule", "--vpp"})
        if (CLI::Option* o = app.get_option_no_throw(name))
            o->description(o->get_description() +
                           "; plan: searched when not given (interleaved with each chunk count from 2 to 16 that splits "
                           "the layers)");
}

}  // namespace

void add_plan_flags(CLI::App& app, PlanFlags& f, bool searched) {
    app.add_option("--model", f.model,
                   "Catalog name (see `preflight models`) or path to a Hugging Face config.json (model_type gpt2, "
                   "llama, mistral, qwen2, qwen3, phi3, gemma3_text, olmo2, olmo3, mixtral, qwen3_moe, olmoe or gpt_oss)")
        ->capture_default_str();
    app.add_option("--gpu", f.gpu, "Catalog name (see `preflight gpus`) or path to a GPU spec JSON")
        ->capture_default_str();
    const auto fields = plan_fields();
    for (std::size_t i = 0; i < fields.size(); ++i) add_field_option(app, fields[i], f.slots[i]);
    app.add_option("--overhead-bytes", f.overhead_bytes,
                   "Per-GPU overhead (CUDA context, library workspaces) in bytes; overrides the GPU spec "
                   "(0 to 2^50 = 1 PiB; 1e9, 512Mi, 1.5G allowed)")
        ->type_name("BYTES")
        ->transform(byte_count_or_zero(limits::kMaxDeviceBytes, "kMaxDeviceBytes"));
    app.add_option("--data-dir", f.data_dir, "Catalog folder (default: $PREFLIGHT_DATA_DIR or the built-in data/)");
    if (searched) say_searched(app);
}

void check_emit_flags(const CLI::App& sub, const std::string& emit, const std::string& format) {
    if (emit.empty()) return;
    // --emit's output is the framework's own form, so a JSON request cannot be honoured silently.
    if (format == "json")
        throw InputError("--format", "json does not apply with --emit " + emit +
                                         ", which prints that framework's own form (drop one of the two)");
    // It prints the recommendation alone: a count of ranked plans to show would change nothing.
    if (sub.count("--top-k") > 0)
        throw InputError("--top-k", "does not apply with --emit " + emit +
                                        ", which prints the recommendation alone (drop one of the two)");
}

void add_framework_flag(CLI::App& app, PlanFlags& f) {
    app.add_option("--framework", f.framework,
                   "Framework whose memory and step time to model: megatron (default) | nanotron | torchtitan | "
                   "deepspeed | preflight-runtime | pytorch. nanotron has its own model (fp32 gradient "
                   "accumulator, cost-balanced pipeline split, caching-allocator reserve fitted on measured runs; "
                   "its verdict uses the reserved pool + CUDA context/NCCL). Attention runs at the GPU spec's "
                   "fused-kernel figure under megatron (TransformerEngine), at its FlashAttention-2 figure under the "
                   "others. pytorch (one GPU, a Hugging Face model run eagerly) counts each layer's elementwise "
                   "kernels, autocast's casts and autograd's backward ones, and the host's time to launch them "
                   "(fitted on our PyTorch runs: a small layer waits on the host)")
        ->check(CLI::IsMember(framework_names()));
    app.add_option("--host-pace", f.host_pace,
                   "expected (default: what the profile's host-pace model predicts from the layout; nanotron on the "
                   "H100 sweep: waits from about 40 nodes, from 9 nodes when tp spans 4 nodes inside a pipeline, "
                   "from 81 when it spans 4 without one, else runs-ahead) | runs-ahead (PyTorch's asynchronous "
                   "execution: the host queues work and goes on) | waits (the training loop blocks on the GPU every "
                   "micro-batch, e.g. nanotron's polled pipeline p2p on branch nouamane/bench2 since 67c5ebb6, or a "
                   ".item() per micro-batch). Only profiles with a fitted caching-allocator model (nanotron) use it: "
                   "waiting lets the pool keep up, so the loss-stage and pipeline run-ahead reserves are not "
                   "charged; their report also gives the range between the two paces and a verdict by it (fits / "
                   "may not fit / does not fit), and a host that runs ahead fits only if the pool at the top of that "
                   "range does (past it the step would live on the allocator's flush)")
        ->check(CLI::IsMember({"expected", "runs-ahead", "waits"}));
    app.add_flag("--compiled-loss", f.compiled_loss,
                 "The cross-entropy runs under torch.compile (torchtitan since April 2025 with --training.compile, "
                 "build_cross_entropy_loss in torchtitan/components/loss.py; or your own torch.compile'd loss): "
                 "the fused loss holds only the logits and their gradient instead of PyTorch's fp32 buffers (10 B "
                 "less per logit, 14 B under torchtitan's loss_parallel with TP); under --framework pytorch the "
                 "step time also charges one fused pass each way instead of Hugging Face's eager loss kernels "
                 "(20 B less per logit). --framework torchtitan or pytorch only");
}

std::optional<HostPace> host_pace(const PlanFlags& f) {
    if (f.host_pace == "expected") return std::nullopt;
    const auto p = parse_host_pace(f.host_pace);
    if (!p) throw InputError("--host-pace", "expected expected, runs-ahead or waits, got '" + f.host_pace + "'");
    const FrameworkProfile profile = framework_profile(f);
    if (!pace_changes_memory(profile.allocator, profile.verdict_on_reserved))
        throw InputError("--host-pace", "changes nothing under --framework " + f.framework +
                                            ": only a profile with a fitted caching-allocator model (nanotron) "
                                            "charges memory by the host's pace");
    return *p;
}

FrameworkProfile framework_profile(const PlanFlags& f) {
    auto p = profile_by_name(f.framework);
    if (!p) throw InputError("--framework", "unknown framework '" + f.framework + "'");
    if (f.deepspeed_zero && p->deepspeed_zero_optimizer) p->deepspeed_zero = *f.deepspeed_zero;
    return *p;
}

bool PlanFlags::given(std::string_view key) const {
    const auto fields = plan_fields();
    for (std::size_t i = 0; i < fields.size(); ++i)
        if (fields[i].key == key) return slots[i].given();
    return false;
}

Plan PlanFlags::to_plan() const {
    Plan p;
    const auto fields = plan_fields();
    std::string lora_flag;  // the first LoRA flag given, named when --finetune is missing
    for (std::size_t i = 0; i < fields.size(); ++i) {
        if (!slots[i].given()) continue;
        set_field(fields[i], p, slot_value(fields[i], slots[i]), std::string(fields[i].flag));
        if (lora_flag.empty() && fields[i].in_json == Shown::finetuning) lora_flag = fields[i].flag;
    }
    if (!lora_flag.empty() && p.finetune == Finetune::full)
        throw InputError(lora_flag, "LoRA flags need --finetune lora or qlora");
    // The interleaved schedule's default: two model chunks per stage.
    if (!given("vpp") && p.pp_schedule == PpSchedule::interleaved) p.vpp = 2;
    // A framework that does not run the default recipe (nanotron: no bf16-mixed) starts from its own.
    if (!given("precision"))
        if (const auto profile = profile_by_name(framework)) p.precision = default_precision(*profile);
    return p;
}

void PlanFlags::pin(PlanPins& pins) const {
    const Plan p = to_plan();  // parses and checks the values
    const auto fields = plan_fields();
    for (std::size_t i = 0; i < fields.size(); ++i) {
        if (!slots[i].given()) continue;
        if (fields[i].pin)
            fields[i].pin(pins, p);
        else  // not a search axis: every searched plan carries the given value
            set_field(fields[i], pins.fixed, slot_value(fields[i], slots[i]), std::string(fields[i].flag));
    }
}

}  // namespace preflight::cli
