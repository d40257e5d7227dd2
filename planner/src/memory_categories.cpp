#include "preflight/planner/memory_categories.hpp"

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

}  // namespace preflight
