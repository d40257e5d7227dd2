// The Preflight runtime's flat parameter layout and how data parallelism shards it (ZeRO),
// shared by the runtime (runtime/src/program.cpp builds its parameter buffers, collectives
// and optimizer shards from it) and by its planner profile (preflight-runtime), so that the
// dry run of any rank and the prediction agree to the byte. Pure functions, no CUDA.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "preflight/planner/memory.hpp"
#include "preflight/planner/model.hpp"
#include "preflight/planner/plan.hpp"

namespace preflight {

// Every parameter tensor starts at a multiple of 64 elements of the flat buffers (128 B in
// bf16) so the GEMMs' operands stay aligned; model widths are multiples of 64 in practice.
inline constexpr std::int64_t kRuntimeParamAlign = 64;

// x rounded up to a multiple of kRuntimeParamAlign.
constexpr std::int64_t runtime_align(std::int64_t x) {
    return (x + kRuntimeParamAlign - 1) / kRuntimeParamAlign * kRuntimeParamAlign;
}

// A shard unit: parameters that are sharded, gathered and reduced as one piece, as PyTorch
// FSDP shards each wrapped module's FlatParameter (torch/distributed/fsdp/_flat_param.py) and
// Megatron-Core's DDP reduces one bucket: the embeddings, each decoder layer, and the final
// norm with the LM head (an untied one). Under expert parallelism a mixture of experts' layer is
// two units: its dense part with the router, and this rank's experts, sharded and reduced over the
// ranks that hold the same experts (Megatron-Core's expert-data-parallel group, dp / ep of them).
enum class UnitKind { embedding, layer, experts, head };

struct ShardUnit {
    UnitKind kind = UnitKind::layer;
    std::int64_t layer = 0;        // 1-based for layer units, 0 otherwise
    std::int64_t elements = 0;     // the unit's tensors, each aligned to kRuntimeParamAlign
    std::int64_t chunk = 0;        // what one rank owns under ZeRO >= 1; `elements` without sharding
    std::int64_t padded = 0;       // the unit in the full flat buffers: dp * chunk, or `elements`
    std::int64_t begin = 0;        // offset of the unit in the full flat buffers
    std::int64_t shard_begin = 0;  // offset of a rank's chunk of it in that rank's shard buffers
    std::int64_t ranks = 1;        // the ranks sharing it: dp, or dp / ep for a layer's experts

    // Elements of rank `rank`'s chunk that hold parameters (the rest is padding): the chunk
    // covers [rank * chunk, (rank + 1) * chunk) of the unit. 0 for a rank whose chunk lies
    // wholly in the padding (dp larger than the unit's share allows).
    std::int64_t owned(std::int64_t rank) const;
};

std::string unit_name(const ShardUnit& u);  // "embedding", "layer 3", "layer 3 experts", "head"

// The layout of one rank's flat buffers for a plan. ZeRO >= 1 pads each unit to dp equal
// chunks (chunk = ceil(elements / dp) rounded up to kRuntimeParamAlign) so that NCCL's
// reduce-scatter and all-gather work in place on it (ncclReduceScatter/ncclAllGather: equal
// counts per rank; in place when the rank's part is at recvbuff + rank * count). ZeRO-0 (and
// dp 1) keeps the units unpadded.
struct RuntimeLayout {
    std::vector<ShardUnit> units;  // embedding, the layers, head (those of the stage)
    std::int64_t full_elements = 0;   // sum of padded: the full weights / gradient buffers
    std::int64_t shard_elements = 0;  // sum of chunk: a rank's shard buffers (ZeRO >= 1)
    std::int64_t dp = 1;
    ZeroStage zero = zero_none;
    bool sharded() const { return zero != zero_none; }
    // The units of each kind, null where the stage has none.
    const ShardUnit* embedding() const;
    const ShardUnit* head() const;
    const ShardUnit* first_layer() const;
};

// Elements of the runtime's own tensors per unit (runtime/src/program.cpp add_parameters: the
// word embedding padded to `vocab_padded` rows, learned positions, per layer the norms, fused
// q|k|v, output, fused gate|up (or fc1) and down (fc2) projections with their biases, the final
// norm and an untied LM head), before sharding.
struct RuntimeUnitElements {
    std::int64_t embedding = 0, layer = 0, head = 0;
    std::int64_t experts = 0;  // expert parallelism: a layer's unit of this rank's E / ep experts (0: in the layer)
};
// Under tensor parallelism each rank holds its slice (Shoeybi et al. 2019, sec. 3): the
// column-parallel q|k|v and gate|up (fc1) rows and biases / tp, the row-parallel output and
// down (fc2) columns / tp, `vocab_rows` of the vocabulary-parallel embedding and head; norms and
// row-parallel biases whole. `head_copies_embedding`: the head unit holds a copy of a tied word
// embedding (the last of several pipeline stages, as Megatron-LM keeps one for its output layer).
// `ep` > 1 (a mixture of experts): the layer unit holds the norms, attention and router, the
// experts unit this rank's E / ep experts.
RuntimeUnitElements runtime_unit_elements(const ModelConfig& model, std::int64_t vocab_rows, std::int64_t tp = 1,
                                          bool head_copies_embedding = false, std::int64_t ep = 1);

// The runtime's mixture-of-experts rows for a micro-batch of `tokens` (runtime/src/program_moe.cpp):
// the tokens its router sees (its own, or its ep block's ep x tokens under expert parallelism) and
// the rows of its expert buffers: every (token, choice) pair's (dropless, ep 1), or `capacity` per
// local expert, ceil(capacity factor x the block's balanced load per expert), at most the block's
// tokens (a token picks an expert once).
struct RuntimeMoeRows {
    std::int64_t routed_tokens = 0, slots = 0, capacity = 0;
};
RuntimeMoeRows runtime_moe_rows(const ModelConfig& model, const Plan& plan, std::int64_t tokens);

// The part of the model one pipeline stage holds: all of it at pp 1.
struct RuntimeStageSpan {
    bool first = true, last = true;
    std::int64_t first_layer = 1;
    std::int64_t layers = -1;  // -1: every layer of the model
    // The model's index of each of the stage's layers, in order, when they are not first_layer,
    // first_layer + 1, ... (an interleaved stage's chunks); they only name the units.
    std::vector<std::int64_t> model_layers;
};

// The layout of a stage's units for a resolved plan (dp, tp and zero): the embedding unit on the
// first stage, the stage's layers, the head unit on the last. `vocab_rows`: the rows of the
// embedding (and head) one tensor-parallel rank holds, the vocabulary padded as the runtime pads it.
RuntimeLayout runtime_layout(const ModelConfig& model, const Plan& plan, std::int64_t vocab_rows,
                             const RuntimeStageSpan& span = {});

// What one rank's collectives and ZeRO buffers hold beyond the model states, per unit, in bytes
// (runtime/src/program.cpp): the gathered full unit under ZeRO-3 (at the compute dtype) and
// the unit's unreduced gradients under ZeRO-2/3 (at the gradient dtype), each dp * chunk.
// The output layer's are the head unit's plus, for a word embedding tied to the LM head on the
// same stage, the embedding unit's (the head GEMMs read and write the embedding).
struct RuntimeUnitBuffers {
    std::int64_t gather_embedding = 0, gather_layer = 0, gather_output = 0;
    std::int64_t grad_embedding = 0, grad_layer = 0, grad_output = 0;
};
RuntimeUnitBuffers runtime_unit_buffers(const ModelConfig& model, const RuntimeLayout& layout, Precision precision);

// Elements of each per-rank state buffer under the layout (runtime/src/program.cpp
// add_persistent_buffers): the compute-dtype weights (full, or the shard under ZeRO-3), the
// gradient buffer (full under ZeRO-0/1, the shard under ZeRO-2/3), the fp32 master and
// optimizer moments (full under ZeRO-0, the shard otherwise).
struct RuntimeStateElements {
    std::int64_t weights = 0, gradients = 0, optimizer = 0;
};
RuntimeStateElements runtime_state_elements(const RuntimeLayout& layout);

// Bytes per element of the gradient a rank keeps for the optimizer: the fp32 accumulation
// buffer when the recipe has one, else the recipe's gradient dtype.
int runtime_shard_gradient_bytes(Precision precision);

// One rank's model states under the layout: weights at the compute dtype, the gradient buffer
// (full: the recipe's gradient plus its fp32 accumulation buffer; sharded: one buffer at
// runtime_shard_gradient_bytes), fp32 master weights and optimizer moments.
ModelStateBytes runtime_model_states(const RuntimeLayout& layout, Precision precision, Optimizer optimizer);

}  // namespace preflight
