// How training frameworks assign the model's blocks to pipeline stages.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "preflight/planner/model.hpp"

namespace preflight {

enum class PipelineSplit {
    // Megatron-LM: num_layers / pp transformer layers per stage (the planner puts the
    // remainder on the first stages), embedding on the first stage, final norm + LM head
    // + loss on the last.
    even_layers,
    // nanotron (models/base.py, build_model): every PipelineBlock in model order (embedding,
    // the decoder layers, final norm, LM head, fp32 cast, loss) goes to the current rank, which
    // advances once the cumulative compute cost reaches (rank+1)/pp of the total (the code says
    // passes; the measured sweep closes at a tie, pipeline_split.cpp). Costs come
    // from LlamaForTraining.get_block_compute_costs: a decoder layer counts
    // 4*heads*head_dim*hidden + 3*ffn*hidden, the LM head vocab*hidden, every other block 0.
    nanotron_compute_cost,
};
std::string_view to_string(PipelineSplit s);

// What one pipeline stage holds.
struct StageBlocks {
    std::int64_t layers = 0;       // decoder layers
    std::int64_t first_layer = 0;  // 0-based index of its first layer
    bool embedding = false;        // token embedding
    bool head = false;             // final norm and LM head
    bool loss = false;             // fp32 cast of the logits and the loss (nanotron: can follow the head's stage)
};

// Decoder layers on `stage` (0-based) when `layers` split evenly over `pp` stages, the
// remainder one each on the first stages (Megatron-LM's even split; pp >= 1).
constexpr std::int64_t even_stage_layers(std::int64_t layers, std::int64_t pp, std::int64_t stage) {
    return layers / pp + (stage < layers % pp ? 1 : 0);
}

// One entry per stage (pp entries). Under nanotron_compute_cost trailing stages can be empty
// when pp exceeds the number of blocks. pp must be >= 1 (throws InputError otherwise).
std::vector<StageBlocks> pipeline_stages(const ModelConfig& model, std::int64_t pp, PipelineSplit split);

}  // namespace preflight
