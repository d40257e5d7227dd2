#include "preflight/planner/report.hpp"

#include <cstdint>

#include "preflight/planner/error.hpp"
#include "preflight/planner/memory_categories.hpp"
#include "preflight/planner/extensions.hpp"
#include "preflight/planner/plan_schema.hpp"

namespace preflight {

using nlohmann::json;

json plan_to_json(const Plan& p) {
    json j = json::object();
    plan_fields_to_json(p, j);  // the field table's keys (plan_schema.hpp)
    j["global_batch_tokens"] = p.global_batch_tokens();
    j["gpus"] = p.gpus();
    return j;
}

Plan plan_from_json(const json& j, Plan p) {
    if (!j.is_object()) throw InputError("plan", "must be a JSON object");
    plan_fields_from_json(j, p);
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
           // The phase the pool peaks at where it is not the tensors' peak phase, else null.
           {"reserved_peak_phase", r.reserved_peak_phase ? json(describe(*r.reserved_peak_phase)) : json(nullptr)},
           {"reserved_peak_stage", r.reserved_peak_phase ? json(r.reserved_peak_stage) : json(nullptr)},
           {"non_pytorch_bytes", r.non_pytorch_bytes},
           {"verdict_margin_bytes", r.verdict_margin_bytes},
           {"device_peak_bytes", r.device_peak_bytes},
           // "range-top": a host that runs ahead, judged at the top of its range (that pool + the memory
           // outside PyTorch, allocator_model.hpp range_top_need_bytes); "point": reserved + outside + margin.
           {"device_peak_source", r.need_at_range_top ? "range-top" : "point"},
           // The reserved pool beyond the allocated peak, by cause (fitted constants; all zero
           // for profiles without a caching-allocator model), before 2 MiB segment rounding.
           {"reserved_extra",
            {{"activation_fragmentation_bytes", r.reserved_extra.activation_fragmentation_bytes},
             {"loss_stage_bytes", r.reserved_extra.loss_stage_bytes},
             {"pipeline_runahead_bytes", r.reserved_extra.pipeline_runahead_bytes},
             {"constant_bytes", r.reserved_extra.constant_bytes},
             {"gradient_fragmentation_bytes", r.reserved_extra.gradient_fragmentation_bytes}}},
           // Whether the loop was taken to wait for the GPU every micro-batch (--host-pace).
           {"host_pace", to_string(r.host_pace)},
           // "expected": from the profile's host-pace model (expected_host_pace); "given": --host-pace;
           // "allocator-flush": expected to run ahead, but that pool outgrows the device, so the
           // allocator frees its cache and the host waits (allocator_model.hpp pool_outgrows_device).
           {"host_pace_source", r.allocator_flush ? "allocator-flush" : r.host_pace_expected ? "expected" : "given"},
           // The probability the host-pace model gives a wait (expected pace from a fitted model), else null.
           {"host_wait_probability", r.host_wait_probability ? json(*r.host_wait_probability) : json(nullptr)},
           // The running-ahead point pool (allocator-flush only; device_peak_bytes and fits are the
           // running-ahead need), else null.
           {"reserved_running_ahead_bytes",
            r.reserved_running_ahead_bytes ? json(*r.reserved_running_ahead_bytes) : json(nullptr)},
           // The pace is expected and unsure: the reserved figures and the point need are both paces'
           // weighted by host_wait_probability (allocator_model.hpp unsure_pace_band).
           {"unsure_pace_mix", r.unsure_pace_mix},
           // fits | may-not-fit | does-not-fit, by the range below where there is one (memory_verdict).
           {"verdict", memory_verdict(r)},
           // [waits, runs-ahead] device need and reserved pool (pace-dependent allocator models), else null.
           {"device_peak_range_bytes", r.device_peak_low_bytes ? json::array({*r.device_peak_low_bytes, *r.device_peak_high_bytes})
                                                               : json(nullptr)},
           {"reserved_range_bytes", r.reserved_low_bytes ? json::array({*r.reserved_low_bytes, *r.reserved_high_bytes})
                                                         : json(nullptr)},
           // Whether the cross-entropy was taken to run under torch.compile (--compiled-loss).
           {"compiled_loss", r.compiled_loss}};
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

json memory_document(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan, const MemoryReport& r,
                     const std::string& framework) {
    return json{{"schema_version", kSchemaVersion},
                {"framework", framework},
                {"model", {{"name", model.name}, {"params", r.params.total}, {"params_active", r.params.active}}},
                {"gpu", {{"name", gpu.name}, {"memory_bytes", gpu.memory_bytes}}},
                {"plan", plan_to_json(resolve_defaults(plan, model))},
                {"memory", memory_to_json(r)}};
}

}  // namespace preflight
