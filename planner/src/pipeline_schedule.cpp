// Pipeline schedules: GPipe (Huang et al. 2019), 1F1B / PipeDream-Flush and interleaved
// 1F1B (Narayanan et al. 2021, sec. 2.2).
#include <algorithm>

#include "preflight/planner/extensions.hpp"
#include "preflight/planner/pipeline_split.hpp"

namespace preflight {

std::int64_t pipeline_in_flight(const Plan& p, std::int64_t stage) {
    const std::int64_t m = p.grad_acc;
    switch (p.pp_schedule) {
        // GPipe runs every micro-batch's forward before the first backward: all m are held.
        case PpSchedule::gpipe: return m;
        case PpSchedule::one_f_one_b: return std::min(p.pp - stage, m);
        case PpSchedule::interleaved: {
            // Megatron-LM (core/pipeline_parallel/schedules.py, interleaved): warm-up
            // forwards (p - rank - 1) * 2 + (v - 1) * p, then one more forward before the first
            // backward frees a chunk; at most all m * v chunk micro-batches.
            const std::int64_t warmup = (p.pp - stage - 1) * 2 + (p.vpp - 1) * p.pp;
            return std::min(warmup + 1, m * p.vpp);
        }
    }
    return 1;
}

bool interleaved_counts_embedding_and_loss(const Plan& p, std::int64_t model_layers) {
    // Megatron-LM's TransformerConfig refuses the embedding / loss slots beside the uneven split.
    const std::int64_t chunks = p.pp * p.vpp;
    return p.pp_schedule == PpSchedule::interleaved && !has_uneven_pipeline_split(p) && model_layers % chunks != 0 &&
           (model_layers + 2) % chunks == 0;
}

std::int64_t interleaved_chunk_layers(const Plan& p, std::int64_t model_layers) {
    const std::int64_t slots = model_layers + (interleaved_counts_embedding_and_loss(p, model_layers) ? 2 : 0);
    return slots / (p.pp * p.vpp);
}

std::int64_t pipeline_stage_layers(const Plan& p, std::int64_t model_layers, std::int64_t stage) {
    if (has_uneven_pipeline_split(p)) {
        // Megatron-LM transformer_block.py get_num_layers_to_build: the given first / last stage counts,
        // the rest evenly over the stages between (validate_uneven_pipeline_split: they divide).
        const std::int64_t first = p.pp_first_stage_layers, last = p.pp_last_stage_layers;
        if (stage == 0 && first > 0) return first;
        if (stage == p.pp - 1 && last > 0) return last;
        return (model_layers - first - last) / (p.pp - (first > 0 ? 1 : 0) - (last > 0 ? 1 : 0));
    }
    if (interleaved_counts_embedding_and_loss(p, model_layers))
        return interleaved_chunk_layers(p, model_layers) * p.vpp - (stage == 0 ? 1 : 0) - (stage == p.pp - 1 ? 1 : 0);
    return even_stage_layers(model_layers, p.pp, stage);
}

std::int64_t pipeline_held_layer_units(const Plan& p, std::int64_t model_layers, std::int64_t stage) {
    if (p.pp_schedule == PpSchedule::interleaved) {
        // Each chunk micro-batch holds one chunk of layers (a full chunk: an upper bound for
        // the one chunk that is a layer short when the embedding and loss take a slot); under the
        // uneven split a chunk is the stage's layers / v (transformer_block.py get_num_layers_to_build).
        const std::int64_t chunk = has_uneven_pipeline_split(p) ? pipeline_stage_layers(p, model_layers, stage) / p.vpp
                                                                : interleaved_chunk_layers(p, model_layers);
        return pipeline_in_flight(p, stage) * chunk;
    }
    return pipeline_in_flight(p, stage) * pipeline_stage_layers(p, model_layers, stage);
}

namespace {

// Megatron-LM transformer_layer.py get_transformer_layer_offset, uneven split with virtual stages:
// round c holds the model's layers [c T, (c + 1) T), T = layers / v; within it the first stage
// takes first / v, each middle stage middle-per-stage / v, the last last / v, in stage order.
std::vector<StageChunk> uneven_interleaved_chunks(const Plan& p, std::int64_t model_layers, std::int64_t stage) {
    const std::int64_t v = p.vpp, round = model_layers / v;
    std::int64_t before = 0;  // layers of the earlier stages within a round
    for (std::int64_t s = 0; s < stage; ++s) before += pipeline_stage_layers(p, model_layers, s) / v;
    const std::int64_t per_chunk = pipeline_stage_layers(p, model_layers, stage) / v;
    std::vector<StageChunk> chunks;
    for (std::int64_t c = 0; c < v; ++c) chunks.push_back({c * round + before + 1, per_chunk});
    return chunks;
}

}  // namespace

std::vector<StageChunk> pipeline_stage_chunks(const Plan& p, std::int64_t model_layers, std::int64_t stage) {
    if (p.pp_schedule != PpSchedule::interleaved) {
        StageChunk c{1, pipeline_stage_layers(p, model_layers, stage)};
        for (std::int64_t s = 0; s < stage; ++s) c.first_layer += pipeline_stage_layers(p, model_layers, s);
        return {c};
    }
    if (has_uneven_pipeline_split(p)) return uneven_interleaved_chunks(p, model_layers, stage);
    // Virtual stage g = c * p + stage holds layer slots [g C, (g + 1) C); slot 0 is the
    // embedding's and slot layers + 1 the loss's when they count, else slot j is layer j + 1.
    const std::int64_t per_chunk = interleaved_chunk_layers(p, model_layers);
    const bool slots = interleaved_counts_embedding_and_loss(p, model_layers);
    std::vector<StageChunk> chunks;
    for (std::int64_t c = 0; c < p.vpp; ++c) {
        const std::int64_t g = c * p.pp + stage;
        if (!slots) {
            chunks.push_back({g * per_chunk + 1, per_chunk});
            continue;
        }
        const std::int64_t first = std::max<std::int64_t>(g * per_chunk, 1);
        const std::int64_t last = std::min((g + 1) * per_chunk - 1, model_layers);
        chunks.push_back({first, std::max<std::int64_t>(last - first + 1, 0)});
    }
    return chunks;
}

namespace {

std::int64_t schedule_chunks(const Plan& p) { return p.pp_schedule == PpSchedule::interleaved ? p.vpp : 1; }

// The k-th forward or backward (0-based) of a stage: groups of p micro-batches, each through chunk
// 0, then 1, ... (Megatron-LM get_schedule_table), backwards through the chunks in reverse; with
// one chunk simply micro-batch k + 1.
PipelinePass kth_pass(const Plan& p, std::int64_t k, bool forward) {
    const std::int64_t v = schedule_chunks(p);
    const std::int64_t group = k / (p.pp * v), in_group = k % (p.pp * v);
    const std::int64_t chunk = v == 1 ? 0 : in_group / p.pp;
    const std::int64_t mb = v == 1 ? k + 1 : group * p.pp + in_group % p.pp + 1;
    return PipelinePass{forward, forward ? chunk : v - 1 - chunk, mb};
}

// Forwards before a stage's first backward.
std::int64_t warmup_passes(const Plan& p, std::int64_t stage) {
    const std::int64_t total = p.grad_acc * schedule_chunks(p);
    if (p.pp_schedule == PpSchedule::one_f_one_b) return std::min(p.pp - stage - 1, total);
    if (p.pp_schedule == PpSchedule::interleaved) return std::min((p.pp - stage - 1) * 2 + (p.vpp - 1) * p.pp, total);
    return total;
}

}  // namespace

std::vector<PipelineStep> interleaved_stage_steps(const Plan& p, std::int64_t stage) {
    const std::int64_t v = p.vpp, total = p.grad_acc * v, warmup = warmup_passes(p, stage), steady = total - warmup;
    const bool first = stage == 0, last = stage == p.pp - 1;
    // Megatron-LM recv_tensor_from_previous_stage: whether iteration k receives in that direction.
    // A stage receives every iteration, but the leading one (the first in forward, the last in
    // backward), whose feeder runs p - 1 passes behind and sends nothing from the model's last
    // (forward) or first (backward) chunk.
    auto receives = [&](std::int64_t k, bool forward) {
        if (!(forward ? first : last)) return true;
        if (k < p.pp - 1) return false;
        return kth_pass(p, k - (p.pp - 1), forward).chunk != (forward ? v - 1 : 0);
    };
    auto sends = [&](const PipelinePass& ps) {
        return ps.forward ? !(last && ps.chunk == v - 1) : !(first && ps.chunk == 0);
    };
    std::vector<PipelineStep> steps;
    auto compute = [&](const PipelinePass& ps) { steps.push_back({true, ps, {}, false, false}); };
    auto exchange = [&](std::vector<PipelinePass> out, bool recv_forward, bool recv_backward) {
        std::erase_if(out, [&](const PipelinePass& ps) { return !sends(ps); });
        if (!out.empty() || recv_forward || recv_backward) steps.push_back({false, {}, std::move(out), recv_forward, recv_backward});
    };
    exchange({}, !first, false);  // the first forward's input
    for (std::int64_t k = 0; k < warmup; ++k) {
        const PipelinePass f = kth_pass(p, k, true);
        compute(f);
        const bool recv_forward = receives(k, true) && k != total - 1;
        exchange({f}, recv_forward, k == warmup - 1 && steady > 0 && !last);  // the last also asks for the first gradient
    }
    for (std::int64_t k = 0; k < steady; ++k) {
        const PipelinePass f = kth_pass(p, warmup + k, true), b = kth_pass(p, k, false);
        compute(f);
        compute(b);
        exchange({f, b}, receives(warmup + k, true) && k != steady - 1, receives(k, false));
    }
    if (steady == 0) exchange({}, false, !last);  // every forward in the warm-up: the first gradient
    for (std::int64_t k = steady; k < total; ++k) {
        const PipelinePass b = kth_pass(p, k, false);
        compute(b);
        exchange({b}, false, receives(k, false) && k != total - 1);
    }
    return steps;
}

std::vector<PipelinePass> pipeline_stage_order(const Plan& p, std::int64_t stage) {
    const std::int64_t total = p.grad_acc * schedule_chunks(p), warmup = warmup_passes(p, stage);
    std::vector<PipelinePass> order;
    order.reserve(static_cast<std::size_t>(2 * total));
    for (std::int64_t k = 0; k < warmup; ++k) order.push_back(kth_pass(p, k, true));
    for (std::int64_t k = 0; k < total - warmup; ++k) {
        order.push_back(kth_pass(p, k + warmup, true));
        order.push_back(kth_pass(p, k, false));
    }
    for (std::int64_t k = total - warmup; k < total; ++k) order.push_back(kth_pass(p, k, false));
    return order;
}

double pipeline_bubble_fraction(const Plan& p) {
    if (p.pp <= 1) return 0.0;
    // Narayanan et al. 2021, sec. 2.2.1: t_pb / t_id = (p - 1) / m for GPipe and 1F1B;
    // sec. 2.2.2: (p - 1) / (v m) with v chunks per device.
    const double v = p.pp_schedule == PpSchedule::interleaved ? static_cast<double>(p.vpp) : 1.0;
    return static_cast<double>(p.pp - 1) / (v * static_cast<double>(p.grad_acc));
}

}  // namespace preflight
