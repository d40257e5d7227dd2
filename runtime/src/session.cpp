#include <algorithm>

#include "preflight/planner/extensions.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/throughput.hpp"
#include "preflight/runtime/arena.hpp"
#include "preflight/runtime/runtime.hpp"
#include "preflight/runtime/walker.hpp"

namespace preflight::runtime {

namespace {
// The step-time terms a prediction reports, copied from the planner's estimate.
void set_step_terms(Predicted& p, const Throughput& t) {
    p.step_time_s = t.step_time_s;
    p.dp_communication_s = t.dp_communication_s;
    p.tp_communication_s = t.tp_communication_s;
    p.pp_communication_s = t.pp_communication_s;
    p.pipeline_bubble_s = t.pipeline_bubble_s;
    p.cp_communication_s = t.cp_ep_communication_s - t.ep_communication_s;
    p.ep_communication_s = t.ep_communication_s;
    p.tokens_per_s = t.tokens_per_s;
    p.mfu = t.mfu;
    p.hfu = t.hfu;
}
}  // namespace

Predicted predict(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan_in, const RunOptions& options) {
    const Plan plan = resolve_defaults(plan_in, model);
    Predicted p;
    MemoryOptions mo;
    mo.profile = runtime_profile();
    mo.overhead_bytes = options.overhead_bytes;
    mo.pipeline_stage = rank_coords(plan, options.rank).pp;  // the rank's own stage
    // The runtime's own measured constants on this GPU, where the spec has them (GpuSpec::runtime).
    const GpuSpec own = gpu_for_profile(gpu, mo.profile);
    // The pool's slack under full recompute exists only with the pool allocator; an arena holds
    // its planned offsets and nothing more.
    if (options.allocator == "pool" && gpu.runtime)
        mo.profile.full_recompute_pool_slack_fraction = gpu.runtime->full_recompute_pool_slack_fraction;
    mo.timeline = true;
    p.memory = evaluate_memory(model, own, plan, mo);
    p.tracked_peak_bytes = p.memory.peak_bytes - p.memory.at_peak.overhead;
    if (plan.pp > 1) {  // the stage with the highest peak, when it is another one
        MemoryOptions every_stage = mo;
        every_stage.pipeline_stage.reset();
        every_stage.timeline = false;
        const MemoryReport most = evaluate_memory(model, own, plan, every_stage);
        if (most.pipeline_stage != *mo.pipeline_stage && most.peak_bytes > p.memory.peak_bytes)
            p.most_loaded_stage = Predicted::Stage{most.pipeline_stage, most.peak_bytes, most.fits};
    }
    const FlopCounts fc = step_flops(model, plan);
    p.model_flops_per_step = fc.model_flops_per_step;
    p.hardware_flops_per_step = fc.hardware_flops_per_step;
    try {
        // Without cuDNN a 16-bit flash plan runs the runtime's own attention kernel (FP32 units);
        // so does a context-parallel plan (the profile's adjust_throughput sets it).
        ThroughputOptions base;
        base.attention_on_fp32_units = !options.cudnn_attention;
        ThroughputOptions topt = throughput_options_for(mo.profile, model, plan, base);
        const Throughput t = estimate_throughput(model, own, plan, topt);
        set_step_terms(p, t);
        // A stage alone runs its passes back to back: an interleaved stage the same work as a
        // 1F1B stage of its layers (the schedule orders the passes, the emulated rank's
        // communication and bubble are set apart below), so it is timed as one.
        Plan stage_plan = plan;
        if (plan.pp_schedule == PpSchedule::interleaved) {
            stage_plan.pp_schedule = PpSchedule::one_f_one_b;
            stage_plan.vpp = 1;
            topt.stage_layers.clear();
            for (std::int64_t s = 0; s < plan.pp; ++s) topt.stage_layers.push_back(pipeline_stage_layers(plan, model.layers, s));
        }
        if (plan.pp == 1 || !uses_extended_throughput(stage_plan)) {
            topt.own_stage = rank_coords(plan, options.rank).pp;
            const Throughput alone = plan.pp > 1 ? estimate_throughput(model, own, stage_plan, topt) : t;
            // What the stage alone lacks is the one sum Predicted::emulated_communication_s() defines.
            Predicted own_stage;
            set_step_terms(own_stage, alone);
            p.emulated_step_time_s = alone.step_time_s - own_stage.emulated_communication_s();
        }
    } catch (const std::exception&) {
        // No published peak for this precision on this GPU: throughput left unknown.
    }
    return p;
}

RunReport report_for(const std::string& mode, const ModelConfig& model, const GpuSpec& gpu, const Plan& plan_in,
                     const RunOptions& options) {
    RunReport r;
    r.mode = mode;
    r.model = model;
    r.gpu = gpu;
    r.plan = resolve_defaults(plan_in, model);
    r.steps = options.steps;
    r.seed = options.seed;
    r.parallel.world_size = r.plan.gpus();
    r.parallel.rank = options.rank;
    const RankCoords at = rank_coords(r.plan, options.rank);
    r.parallel.dp_rank = at.dp;
    r.parallel.tp_rank = at.tp;
    r.parallel.pp_rank = at.pp;
    r.parallel.cp_rank = at.cp;
    r.predicted = predict(model, gpu, r.plan, options);
    return r;
}

RunReport dry_run_report(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan_in, const RunOptions& options) {
    RunReport r = report_for("dry-run", model, gpu, plan_in, options);
    const Plan& plan = r.plan;
    Program program = build_program(model, plan, options.rank);
    program.hyper = options.hyper;
    use_model_constants(program);
    r.parallel.backend = has_collectives(program) ? "dry-run" : "none";
    const CollectiveVolume collectives = step_collectives(program);  // what a device run would issue
    r.parallel.collectives_per_step = collectives.count;
    r.parallel.collective_bytes_per_step = collectives.bytes;
    const DryRunResult d = dry_run(program, 1, options.timeline);
    r.measured.allocator = options.allocator;
    if (options.allocator == "arena") {  // the arena a device run would take
        const ArenaPlan arena = plan_arena(program);
        r.measured.arena_bytes = arena.arena_bytes;
        r.measured.arena_live_peak_bytes = arena.live_peak_bytes;
    }
    r.measured.tracked_peak_bytes = d.peak_bytes;
    r.measured.peak_breakdown = d.peak_breakdown;
    r.measured.peak_where = d.peak_where;
    r.timeline = d.timeline;
    return r;
}

void fill_measured_throughput(RunReport& r) {
    if (!r.measured.step_time_s || *r.measured.step_time_s <= 0) return;
    const double t = *r.measured.step_time_s;
    r.measured.tokens_per_s = static_cast<double>(r.plan.global_batch_tokens()) / t;
    // The planner's peak for the recipe (fp8-mixed: the fp8 peak), as the predicted MFU beside it.
    if (const auto peak = compute_peak_flops_per_s(r.gpu, r.plan.precision)) {
        // One rank measured alone (emulated) stands for every rank at its pace.
        r.measured.mfu = flops_utilization(r.predicted.model_flops_per_step, t, r.plan.gpus(), *peak);
        r.measured.hfu = flops_utilization(r.predicted.hardware_flops_per_step, t, r.plan.gpus(), *peak);
    }
}

}  // namespace preflight::runtime
