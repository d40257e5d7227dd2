#include "preflight/planner/report.hpp"

#include <cstdint>

#include "preflight/planner/error.hpp"
#include "preflight/planner/memory_categories.hpp"
#include "preflight/planner/extensions.hpp"

namespace preflight {

using nlohmann::json;

json plan_to_json(const Plan& p) {
    json j{{"seq", p.seq},
                {"mbs", p.mbs},
                {"grad_acc", p.grad_acc},
                {"dp", p.dp},
                {"tp", p.tp},
                {"pp", p.pp},
                {"sp", p.sp},
                {"zero", p.zero},
                {"recompute", to_string(p.recompute)},
                {"precision", to_string(p.precision)},
                {"optimizer", to_string(p.optimizer)},
                {"attention", to_string(p.attention)},
                {"dropout", p.dropout},
                {"global_batch_tokens", p.global_batch_tokens()},
                {"gpus", p.gpus()}};
    extensions_to_json(p, j);  // only the extension fields that differ from their defaults
    return j;
}

namespace {
template <typename T, typename Parse>
void read_enum(const json& j, const char* key, T& out, Parse parse) {
    if (!j.contains(key)) return;
    const auto& v = j.at(key);
    if (!v.is_string()) throw InputError(key, "must be a string");
    auto parsed = parse(v.get<std::string>());
    if (!parsed) throw InputError(key, "unknown value '" + v.get<std::string>() + "'");
    out = *parsed;
}
void read_int(const json& j, const char* key, std::int64_t& out) {
    if (!j.contains(key)) return;
    if (!j.at(key).is_number_integer()) throw InputError(key, "must be an integer, got " + j.at(key).dump());
    if (j.at(key).is_number_unsigned() && j.at(key).get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
        throw InputError(key, j.at(key).dump() + " is beyond the 64-bit integer range");
    out = j.at(key).get<std::int64_t>();
}
}  // namespace

Plan plan_from_json(const json& j, Plan p) {
    if (!j.is_object()) throw InputError("plan", "must be a JSON object");
    read_int(j, "seq", p.seq);
    read_int(j, "mbs", p.mbs);
    read_int(j, "grad_acc", p.grad_acc);
    read_int(j, "dp", p.dp);
    read_int(j, "tp", p.tp);
    read_int(j, "pp", p.pp);
    std::int64_t zero = p.zero;
    read_int(j, "zero", zero);
    // Range-checked before the narrowing: 4294967297 must not become stage 1.
    if (zero < 0 || zero > 3) throw InputError("zero", "must be 0, 1, 2 or 3, got " + std::to_string(zero));
    p.zero = static_cast<int>(zero);
    if (j.contains("sp")) {
        if (!j.at("sp").is_boolean()) throw InputError("sp", "must be true or false");
        p.sp = j.at("sp").get<bool>();
    }
    if (j.contains("dropout")) {
        if (!j.at("dropout").is_number()) throw InputError("dropout", "must be a number");
        p.dropout = j.at("dropout").get<double>();
    }
    read_enum(j, "recompute", p.recompute, parse_recompute);
    read_enum(j, "precision", p.precision, parse_precision);
    read_enum(j, "optimizer", p.optimizer, parse_optimizer);
    read_enum(j, "attention", p.attention, parse_attention);
    extensions_from_json(j, p);
    return p;
}

json breakdown_to_json(const MemoryBreakdown& b) {
    json j = json::object();
    for (const auto& c : memory_categories()) j[std::string(c.key)] = b.*c.member;
    return j;
}

namespace {
json timeline_to_json(const std::vector<TimelineEntry>& t) {
    json a = json::array();
    for (const auto& e : t)
        a.push_back({{"phase", describe(e.phase)},
                     {"kind", to_string(e.phase.kind)},
                     {"layer", e.phase.layer},
                     {"micro_batch", e.phase.micro_batch},
                     {"total_bytes", e.bytes.total()},
                     {"bytes", breakdown_to_json(e.bytes)}});
    return a;
}
}  // namespace

json memory_to_json(const MemoryReport& r) {
    json inventory = json::array();
    for (const auto& t : r.layer_inventory)
        inventory.push_back({{"tensor", t.name}, {"bytes", t.bytes}, {"attention_core", t.attention_core}});
    json m{{"per_gpu_bytes", breakdown_to_json(r.at_peak)},
           {"activations_per_layer_bytes", r.activations_per_layer_bytes},
           {"peak_bytes", r.peak_bytes},
           {"peak_phase", describe(r.peak_phase)},
           {"fits", r.fits},
           {"capacity_bytes", r.capacity_bytes},
           {"pipeline_stage", r.pipeline_stage},
           {"layers_on_stage", r.layers_on_stage},
           {"micro_batches_in_flight", r.micro_batches_in_flight},
           {"params_on_gpu", r.params_on_gpu},
           {"first_step_peak_bytes", r.first_step_peak_bytes},
           {"first_step_peak_phase", describe(r.first_step_peak_phase)},
           {"layer_activation_inventory", inventory},
           // Caching-allocator view (allocator_model.hpp): tensors alone, the reserved pool,
           // the memory outside PyTorch, and reserved + that (what the device must hold).
           {"peak_allocated_bytes", r.peak_allocated_bytes},
           {"peak_reserved_bytes", r.peak_reserved_bytes},
           {"non_pytorch_bytes", r.non_pytorch_bytes},
           {"verdict_margin_bytes", r.verdict_margin_bytes},
           {"device_peak_bytes", r.device_peak_bytes}};
    if (r.host_bytes_per_gpu > 0) {  // offload only
        m["host_bytes_per_gpu"] = r.host_bytes_per_gpu;
        m["host_bytes_per_node"] = r.host_bytes_per_node;
    }
    if (!r.stage_reserved_bytes.empty()) {
        m["stage_allocated_bytes"] = r.stage_allocated_bytes;
        m["stage_reserved_bytes"] = r.stage_reserved_bytes;
    }
    if (!r.timeline_steady.empty()) {
        m["timeline"] = {{"steady_state", timeline_to_json(r.timeline_steady)},
                         {"first_step", timeline_to_json(r.timeline_first)}};
    }
    return m;
}

json memory_document(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan, const MemoryReport& r) {
    return json{{"schema_version", kSchemaVersion},
                {"model", {{"name", model.name}, {"params", r.params.total}, {"params_active", r.params.active}}},
                {"gpu", {{"name", gpu.name}, {"memory_bytes", gpu.memory_bytes}}},
                {"plan", plan_to_json(resolve_defaults(plan, model))},
                {"memory", memory_to_json(r)}};
}

}  // namespace preflight
