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
    const std::int64_t chunks = p.pp * p.vpp;
    return p.pp_schedule == PpSchedule::interleaved && model_layers % chunks != 0 && (model_layers + 2) % chunks == 0;
}

std::int64_t interleaved_chunk_layers(const Plan& p, std::int64_t model_layers) {
    const std::int64_t slots = model_layers + (interleaved_counts_embedding_and_loss(p, model_layers) ? 2 : 0);
    return slots / (p.pp * p.vpp);
}

std::int64_t pipeline_stage_layers(const Plan& p, std::int64_t model_layers, std::int64_t stage) {
    if (interleaved_counts_embedding_and_loss(p, model_layers))
        return interleaved_chunk_layers(p, model_layers) * p.vpp - (stage == 0 ? 1 : 0) - (stage == p.pp - 1 ? 1 : 0);
    return even_stage_layers(model_layers, p.pp, stage);
}

std::int64_t pipeline_held_layer_units(const Plan& p, std::int64_t model_layers, std::int64_t stage) {
    if (p.pp_schedule == PpSchedule::interleaved) {
        // Each chunk micro-batch holds one chunk of layers (a full chunk: an upper bound for
        // the one chunk that is a layer short when the embedding and loss take a slot).
        return pipeline_in_flight(p, stage) * interleaved_chunk_layers(p, model_layers);
    }
    return pipeline_in_flight(p, stage) * pipeline_stage_layers(p, model_layers, stage);
}

double pipeline_bubble_fraction(const Plan& p) {
    if (p.pp <= 1) return 0.0;
    // Narayanan et al. 2021, sec. 2.2.1: t_pb / t_id = (p - 1) / m for GPipe and 1F1B;
    // sec. 2.2.2: (p - 1) / (v m) with v chunks per device.
    const double v = p.pp_schedule == PpSchedule::interleaved ? static_cast<double>(p.vpp) : 1.0;
    return static_cast<double>(p.pp - 1) / (v * static_cast<double>(p.grad_acc));
}

}  // namespace preflight
