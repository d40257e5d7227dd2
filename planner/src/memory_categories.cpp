#include "preflight/planner/memory_categories.hpp"

#include <string>

#include "preflight/planner/memory.hpp"

namespace preflight {

const std::array<MemoryCategory, kMemoryCategoryCount>& memory_categories() {
    static const std::array<MemoryCategory, kMemoryCategoryCount> table{{
        {"weights", "Weights", "compute copy of the parameters", &MemoryBreakdown::weights},
        {"master_weights", "Master weights", "fp32 copy the optimizer updates", &MemoryBreakdown::master_weights},
        {"gradients", "Gradients", "gradient buffers", &MemoryBreakdown::gradients},
        {"optimizer_states", "Optimizer states", "AdamW moments / SGD momentum", &MemoryBreakdown::optimizer_states},
        {"activations", "Activations", "saved for backward, at the peak", &MemoryBreakdown::activations},
        {"logits_and_loss", "Logits & loss", "output logits + cross-entropy, at the peak",
         &MemoryBreakdown::logits_and_loss},
        {"buffers", "Buffers", "communication buckets, gathers, tables", &MemoryBreakdown::buffers},
        {"overhead", "Overhead", "CUDA context + library workspaces", &MemoryBreakdown::overhead},
    }};
    return table;
}

// Phase names (memory.hpp), as the timeline and the peak line print them.
std::string_view to_string(PhaseKind k) {
    switch (k) {
        case PhaseKind::step_start: return "step start";
        case PhaseKind::forward: return "forward";
        case PhaseKind::output_loss: return "output+loss";
        case PhaseKind::backward: return "backward";
        case PhaseKind::grad_reduce: return "gradient reduction";
        case PhaseKind::optimizer_step: return "optimizer step";
    }
    return "?";
}

std::string describe(const Phase& p) {
    std::string s(to_string(p.kind));
    if (p.kind == PhaseKind::forward || p.kind == PhaseKind::backward) s += " layer " + std::to_string(p.layer);
    if (p.micro_batch > 0 && (p.kind == PhaseKind::forward || p.kind == PhaseKind::backward ||
                              p.kind == PhaseKind::output_loss))
        s += " (micro-batch " + std::to_string(p.micro_batch) + ")";
    return s;
}

}  // namespace preflight
