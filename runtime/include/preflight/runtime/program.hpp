// The step program: one training step of a plan on one GPU as an ordered list of
// ops, each with the buffers it allocates before it runs and frees after. The
// executor (CUDA) and the dry run (host) walk the same program through the same
// tracking allocator, so the dry run is the runtime's exact memory behaviour.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "preflight/planner/memory.hpp"
#include "preflight/planner/model.hpp"
#include "preflight/planner/plan.hpp"
#include "preflight/planner/qk_norm_groups.hpp"
#include "preflight/planner/runtime_layout.hpp"

namespace preflight::runtime {

// Allocation categories. `contract_category` maps each to the
// docs/interface.md per_gpu_bytes key it is reported under. `sharding`: ZeRO's gathered
// parameter units and unreduced unit gradients (reported under "buffers").
enum class Category : std::uint8_t {
    weights, master, gradients, optimizer, activations, logits, workspace, temporary, sharding
};
inline constexpr int kCategoryCount = 9;
std::string_view to_string(Category c);
std::string_view contract_category(Category c);

// f8e4m3 / f8e5m2: the fp8-mixed recipe's GEMM operands (reference.hpp Fp8Format), one byte each.
enum class DType : std::uint8_t { f32, bf16, i64, u8, f8e4m3, f8e5m2 };
bool is_fp8(DType t);
int dtype_bytes(DType t);
std::string_view to_string(DType t);

using BufferId = std::int32_t;
inline constexpr BufferId kNoBuffer = -1;
using ParamId = std::int32_t;
inline constexpr ParamId kNoParam = -1;

struct BufferSpec {
    std::string name;
    Category category = Category::temporary;
    DType dtype = DType::f32;
    std::int64_t elements = 0;
    std::int64_t bytes() const { return elements * dtype_bytes(dtype); }
};

// One parameter tensor, [rows, cols] row-major, at `offset` elements inside the full flat
// parameter layout (runtime_layout.hpp: units one after the other, each padded to dp chunks
// under ZeRO >= 1). Where the tensor lives at run time depends on the ZeRO stage
// (Program::weight_at / grad_at).
// Under tensor parallelism a rank holds a slice of a tensor (Shoeybi et al. 2019, sec. 3): rows
// of a column-parallel or vocabulary-parallel one, columns of a row-parallel one. Local row
// `local_begin + i` of a block is row `global_begin + i` of the whole tensor; local column c is
// column `col_begin + c` of its `global_cols`. A replicated tensor is one block of its own rows.
struct RowBlock {
    std::int64_t local_begin = 0, global_begin = 0, rows = 0;
};

struct ParamSpec {
    std::string name;
    std::int64_t rows = 0, cols = 1;
    std::int64_t offset = 0;
    std::int64_t layer = 0;  // 1-based layer, 0 outside the layers
    bool decay = false;      // AdamW weight decay (matrices only)
    // Replicated over tensor parallelism, but each rank's gradient a partial sum, summed over tp
    // before the optimizer (program_comm.cpp reduce_sequence_parallel_grads): a norm's weight or bias
    // under sequence parallelism (each rank normalises its rows), a per-head q/k norm's whenever tp > 1
    // (each rank its heads).
    bool tp_partial_grad = false;
    bool norm_weight = false;  // a norm's weight (LayerNorm, RMSNorm, q/k norms): initialised to 1
    std::int64_t unit = 0;   // index into Program::layout.units
    // The whole tensor and where this rank's slice sits in it (tensor parallelism).
    std::int64_t global_rows = 0, global_cols = 0, col_begin = 0;
    std::vector<RowBlock> row_blocks;
    std::int64_t numel() const { return rows * cols; }
    // The row-major index in the whole tensor of local element (r, c).
    std::int64_t global_index(std::int64_t r, std::int64_t c) const;
    bool replicated() const { return global_rows == rows && global_cols == cols; }
};

// A parameter's place at run time: element `offset` of `buffer`.
struct ParamRef {
    BufferId buffer = kNoBuffer;
    std::int64_t offset = 0;
};

// A row-major [rows, cols] window of a buffer, starting at element `offset`, rows `ld` apart.
struct View {
    BufferId buffer = kNoBuffer;
    std::int64_t rows = 0, cols = 0, ld = 0, offset = 0;
};

// Ops. Operand meaning per kind (v[i], p0/p1) is documented in program.cpp next to
// the code that emits it; the executor reads them in the same order.
enum class OpKind : std::uint8_t {
    init_params, teardown, zero_grads, tokens, labels,
    embedding_fwd, embedding_bwd, norm_fwd, norm_bwd,
    linear_fwd, linear_bwd_data, linear_bwd_weight, rope_fwd, rope_bwd,
    flash_fwd, flash_bwd, eager_scores, eager_softmax, eager_pv, eager_dp, eager_softmax_bwd, eager_dqkv,
    swiglu_fwd, swiglu_bwd, gelu_fwd, gelu_bwd, cross_entropy, loss_accumulate, grad_accumulate, optimizer,
    // q/k RMSNorm over Dims::qk_norm's groups (Qwen3's per head, OLMoE's per projection; program_layer.cpp
    // emit_head_norm_fwd): head_norm_fwd copies v0 (qkv's Q|K heads) into v1 (allocated here, kept for the
    // backward) and normalizes v0 in place, Q groups by p0 and K groups by p1. head_norm_bwd: v0 = that
    // copy, v1 = dqkv's Q|K heads (the output gradient in, the input gradient out, in place), v2 = its f32
    // scratch (each group's rstd, recomputed, then the weight gradients' partial sums:
    // runtime_head_norm_scratch_elements); p0/p1's gradients +=.
    head_norm_fwd, head_norm_bwd,
    // Data parallelism (program_comm.cpp). Collectives run on the communication stream after
    // everything the compute stream issued before them; comm_wait makes the compute stream wait.
    unit_grads_begin,  // ZeRO-2/3: the unit's gradient buffer (allocated here) zeroed
    all_reduce,        // ZeRO-0: v0 averaged over the data-parallel ranks, in place
    reduce_scatter,    // ZeRO-1/2/3: v0 (the unit, dp chunks) averaged, this rank's chunk in place; v1: added into
    all_gather,        // ZeRO-1/2: v0 in place from each rank's chunk; ZeRO-3: v0 gathered from the shard chunk v1
    comm_wait,         // the compute stream waits for the collective `comm_back` before the latest one
    // fp8-mixed (program_fp8.cpp): per-tensor current scaling. fp8_cast: v0 (bf16) quantized with
    // its amax into v1 (row-major, may be empty) and v2 (transposed, may be empty); the amax and the
    // dequantization factor go to scale slot `scale_a`. fp8_cast_weights: every layer GEMM weight
    // into the fp8 weight cache (W and W^T, scale slot Program::fp8_weight_slot); with `unit` >= 0
    // (ZeRO-3) only that gathered unit's, into its own cache (Program::unit_fp8[unit], allocated).
    fp8_cast, fp8_cast_weights,
    // Vocabulary-parallel cross-entropy (tp > 1; Megatron-LM's vocab_parallel_cross_entropy): ce_max
    // writes each row's largest local logit (v0 logits, v1 out [rows]); after the tensor-parallel max,
    // ce_sums writes each row's sum of exp(logit - max) and its label's logit where this rank holds it
    // (v0 logits, v1 labels, v2 max, v3 out [rows, 2]); after the tensor-parallel sum, cross_entropy
    // finishes with v3 = max and v4 = sums.
    ce_max, ce_sums,
    // Sequence parallelism: v2 = v0 (this rank's rows of a reduce-scattered buffer) + v1 (the
    // residual, may be empty), allocated here: the [rows/tp, cols] shard the norms work on.
    seq_chunk,
    // Pipeline parallelism (program_microbatch.cpp): v0 (may be empty) sent to the stage
    // `send_peer` away, v1 (may be empty, allocated here) received from the stage `recv_peer`
    // away (around the ring of stages: the interleaved schedule's last stage feeds the first;
    // ring_rank); the interleaved schedule also sends v2 to `send2_peer` and receives v3
    // (allocated here) from `recv2_peer`. All at once (Megatron-LM's send_forward_recv_backward
    // and the like); the compute stream waits for them, so the sent buffers may be freed after.
    p2p,
    // Context parallelism (program_cp.cpp; Llama 3 paper, sec. 3.3.2: K and V all-gathered over the
    // cp ranks). cp_kv_pack: v0's K|V columns (q|k|v, this rank's rows) into v1 ([rows, 2 kv_width],
    // which the all-gather reads into the rank-major [cp x rows, 2 kv_width]). cp_kv_order: v0 (gathered, rank-major)
    // into v1 ([b x cp s, 2 kv_width], sequence order). cp_kv_unorder: the inverse, v0 (sequence
    // order) into v1 (rank-major). cp_kv_unpack: this rank's chunk of v0 into v1's K|V columns.
    // With cp, flash_fwd reads K and V from v3 (sequence order) and flash_bwd from v6, writing the
    // query gradient into v4's Q columns and the whole sequence's dK|dV into v7.
    cp_kv_pack, cp_kv_order, cp_kv_unorder, cp_kv_unpack,
    // Mixture of experts (program_moe.cpp; Mixtral's token-choice top-k routing, dropless): the
    // routing buffer (i64, Dims::routing_elements) holds, for the rows x k (token, choice) pairs
    // numbered t k + j, the slot each goes to [0, rows k), then for each slot its pair, then the
    // E + 1 expert offsets of the slots (expert e's are [off[e], off[e+1]), pairs in order),
    // then each pair's expert. moe_route: v0 = router logits [rows, E] -> v1 = gate weights
    // [rows, k] f32 (the softmax over the k largest logits, or over all E at the k largest where
    // Dims::renormalize_gates is false) and v2 = routing. moe_dispatch: v0 = x
    // [rows, h], v2 = routing -> v1 = [rows k, h], slot s holding its pair's token. moe_linear_fwd /
    // bwd_data / bwd_weight: linear_* on each expert's slots (v2 = routing), p0 = the experts'
    // weights stacked [E N, K]. moe_combine: v3 (allocated) = v4 (residual) + sum_j v1[t, j] v0[slot(t, j)]
    // (v0 = expert outputs [rows k, h], v2 = routing). moe_combine_bwd: v0 = dOut [rows, h], v1 =
    // expert outputs, v2 = gate weights, v3 = routing -> v4 = d expert outputs [rows k, h], v5 = d gate
    // weights [rows, k] f32. moe_route_bwd: v0 = d gate weights, v1 = gate weights, v2 = routing (v4 =
    // the router logits, gates not renormalised) -> v3 = d router logits [rows, E]. moe_dispatch_bwd: v0 = d dispatched [rows k, h], v2 = routing
    // -> v1 = dx [rows, h] (+= when accumulate).
    moe_route, moe_dispatch, moe_linear_fwd, moe_linear_bwd_data, moe_linear_bwd_weight, moe_combine,
    moe_combine_bwd, moe_route_bwd, moe_dispatch_bwd,
};
// The rank `peer` places from `rank` around a group of `world` ranks (a p2p op's peers).
constexpr int ring_rank(std::int64_t rank, int peer, std::int64_t world) {
    return static_cast<int>(((rank + peer) % world + world) % world);
}
// Collectives run over the data-parallel group (a rank's peers at its tensor-parallel rank and
// stage), the tensor-parallel group (its peers at its data-parallel rank and stage), the pipeline
// (its stages at its data- and tensor-parallel ranks: p2p) or the embedding group (the first and
// last stage, which both hold a tied word embedding) or the context-parallel group (the cp ranks
// sharing its sequences: data-parallel ranks of one block of cp under context parallelism), and
// reduce by mean, sum or max.
// Under expert parallelism the ep consecutive data-parallel ranks of a block exchange their tokens
// (CommGroup::ep), and the dp / ep ranks that hold the same experts reduce their gradients
// (CommGroup::edp; Megatron-Core's expert-data-parallel group).
enum class CommGroup : std::uint8_t { dp, tp, pp, embedding, cp, ep, edp };
inline constexpr int kCommGroups = 7;
enum class ReduceOp : std::uint8_t { mean, sum, max };
std::string_view to_string(OpKind k);

// What a grouped exchange of the interleaved schedule carries: a send of a pass's output (a
// forward's activation) or input gradient (a backward's), or a receive of a later pass's input.
struct Carried {
    std::int64_t micro_batch = 0;
    std::int64_t chunk = 0;
    bool forward = true;  // an activation (else a gradient)
    bool send = true;     // sent (else received)
};

struct Op {
    OpKind kind = OpKind::init_params;
    std::string name;  // e.g. "L3 qkv"
    Phase phase;       // planner phase (kind, 1-based layer, 1-based micro-batch)
    std::array<View, 8> v{};
    ParamId p0 = kNoParam, p1 = kNoParam;
    bool accumulate = false;  // add into the output (beta = 1) instead of overwriting
    // moe_linear_bwd_weight: dW += scale dY^T X (1 / ep under expert parallelism: an expert's
    // gradient sums its ep block's tokens, then is averaged over the dp / ep ranks holding it).
    float scale = 1.0f;
    // fp8: the kept transposed input X^T carries its own amax and dequantization factor (2 x f32)
    // after its elements: an fp8_cast writes them there (v2), the weight gradient's
    // linear_bwd_weight reads them (v1) instead of scale slot scale_b, which a later micro-batch's
    // forward of the layer may have overwritten (pipeline stages hold several in flight).
    bool kept_scale = false;
    std::int64_t unit = -1;   // collectives, unit_grads_begin, fp8_cast_weights: the shard unit (layout.units)
    int comm_back = 0;        // comm_wait: 0 = the latest collective issued, 1 = the one before, ...
    std::int8_t send_peer = 0, recv_peer = 0;  // p2p: +1 the next stage, -1 the previous one
    std::int8_t send2_peer = 0, recv2_peer = 0;  // p2p: a second send (v2) and receive (v3) in the same group
    // fp8-mixed: the scale slots (Program::fp8_scales) of the op's fp8 operands: fp8_cast writes
    // scale_a; an fp8 GEMM reads its A operand's (scale_a) and B operand's (scale_b) factors.
    std::int32_t scale_a = -1, scale_b = -1;
    CommGroup group = CommGroup::dp;  // collectives: over which ranks
    ReduceOp reduce = ReduceOp::mean;  // all_reduce / reduce_scatter: how
    std::vector<BufferId> alloc;  // allocated before the op runs
    std::vector<BufferId> free;   // freed after it ran
    // p2p under the interleaved schedule: what the exchange carries. describe() names it from these
    // (its `name` is "exchange"), so a later run of the step's repeated block (Program::repeat)
    // names its own micro-batches.
    std::vector<Carried> carries;
};
bool is_collective(OpKind k);

// The collectives one step issues and the bytes of their buffers (each op's first view, as the
// device runner hands it to the communicator): the run report's collectives_per_step and
// collective_bytes_per_step, known from the program before anything runs.
struct Program;
struct CollectiveVolume {
    std::int64_t count = 0;
    std::int64_t bytes = 0;
};
// The collectives one step issues (the repeated block's `times` times) and their bytes.
CollectiveVolume step_collectives(const Program& p);
// The step's ops as `runs` runs of its repeated block (Program::repeat) run them: the block written
// out `runs` times, run r's micro-batches r x stride on (runs = repeat.times: the whole step).
std::vector<Op> step_as_run(const Program& p, std::int64_t runs);
std::vector<Op> step_as_run(const Program& p);
// Allocations ops [begin, end) make (their alloc lists).
std::size_t allocations_in(const std::vector<Op>& ops, std::size_t begin, std::size_t end);

// Dimensions of the program (one micro-batch).
struct Dims {
    std::int64_t s = 0, b = 0, rows = 0;  // rows = s*b tokens per micro-batch
    std::int64_t h = 0, heads = 0, kv_heads = 0, head_dim = 0, q_width = 0, kv_width = 0, qkv_width = 0;
    std::int64_t ffn = 0, up_width = 0;   // up_width = 2f (SwiGLU: gate|up) or f (GeLU)
    std::int64_t vocab = 0, vocab_padded = 0, layers = 0, max_positions = 0, grad_acc = 1;
    // Tensor parallelism: heads, kv_heads, the widths, ffn and vocab_padded above are this rank's
    // share (/ tp); vocab is the model's. The rank's vocabulary rows are [vocab_begin,
    // vocab_begin + vocab_padded) of the padded vocabulary, vocab_valid of them real tokens.
    std::int64_t tp = 1, vocab_begin = 0, vocab_valid = 0;
    // Sequence parallelism (Korthikanti et al. 2022, sec. 4.2.2): the norms and the residual stream
    // hold srows = rows / tp contiguous rows of the micro-batch (rows without it).
    bool sp = false;
    std::int64_t srows = 0;
    // Pipeline parallelism: `layers` above are the stage's; the first stage holds the embedding,
    // the last the head. The stage's layers come in model chunks (one, but v under the
    // interleaved schedule): chunk c holds stage layers first .. first + layers - 1, the model's
    // layers first_model .. (planner pipeline_stage_chunks).
    struct LayerChunk {
        std::int64_t first = 1, layers = 0, first_model = 1;
    };
    std::int64_t pp = 1;
    // Context parallelism: the rank holds s = s_full / cp tokens of each sequence, chunks cp_rank
    // and 2 cp - 1 - cp_rank of its 2 cp equal chunks (context_parallel.hpp cp_position).
    std::int64_t cp = 1, cp_rank = 0, s_full = 0;
    // Sliding-window attention (Mistral's, Phi-3's; ref::AttnShape::window): a query sees itself and
    // the window - 1 keys before it; 0: every key before it, also when the window spans s_full.
    std::int64_t window = 0;
    // Layers of two kinds (Gemma 3's, gpt-oss's, OLMo 3's): every full_attention_period-th model layer
    // attends to every key before the query, the others through `window`; 0: every layer alike.
    std::int64_t full_attention_period = 0;
    // RoPE's rotated dimensions at the start of each head (ModelConfig::rope_dims(); head_dim but for
    // a partial rotary model such as Phi-4-mini's 96 of 128).
    std::int64_t rope_dims = 0;
    // The q/k norms' groups per token (this rank's heads; all 0 without q/k norms): Qwen3's per head,
    // OLMoE's one over each whole projection.
    QkNormGroups qk_norm;
    // Mixture of experts: `experts` per layer (1: dense), each token routed to `topk` of them;
    // ffn and up_width above are one expert's. The gate weights are the softmax over the k chosen
    // logits (renormalised: Mixtral's, norm_topk_prob true), or else the softmax over all E at the
    // chosen experts (OLMoE's norm_topk_prob false), whose backward reads the kept router logits.
    std::int64_t experts = 1, topk = 1;
    bool renormalize_gates = true;
    bool moe() const { return experts > 1; }
    // Expert parallelism: the rank holds experts expert0 .. expert0 + local_experts - 1 and routes
    // the tokens of its ep block (ep x rows, gathered); each of its experts takes at most `capacity`
    // of the block's (token, choice) pairs (the plan's capacity factor: the rest are dropped).
    // Without it (ep 1) every expert is local and dropless (capacity 0: the routing's own slots).
    std::int64_t ep = 1, ep_rank = 0, local_experts = 1, expert0 = 0, capacity = 0;
    std::int64_t route_rows() const { return ep * rows; }
    // Rows of the experts' buffers: every pair's (ep 1), or capacity per local expert.
    std::int64_t slots() const { return ep > 1 ? local_experts * capacity : rows * topk; }
    // The routing buffer's i64 elements: slot per pair, pair per slot, expert offsets, expert per pair.
    std::int64_t routing_elements() const { return 3 * route_rows() * topk + experts + 1; }
    bool first_stage = true, last_stage = true;
    std::vector<LayerChunk> chunks;
    // The chunk holding stage layer l (1-based), and the model's index of that layer.
    std::size_t chunk_of(std::int64_t l) const;
    std::int64_t model_layer(std::int64_t l) const;
    // The window stage layer l attends through (ModelConfig::layer_attention_window): 0 on a full layer.
    std::int64_t window_of(std::int64_t l) const {
        return is_full_attention_layer(full_attention_period, model_layer(l)) ? 0 : window;
    }
    // The model's index of the stage's first layer (chunk 0's first; 1 without chunks).
    std::int64_t first_layer() const { return chunks.empty() ? 1 : chunks.front().first_model; }
    // The chunk begins the model (the embedding's) or ends it (the head's).
    bool model_first(std::size_t chunk) const { return first_stage && chunk == 0; }
    bool model_last(std::size_t chunk) const { return last_stage && chunk + 1 == chunks.size(); }
};

// norm1 / norm2: the norms on the attention's and the MLP's inputs, or (ModelConfig::post_norms,
// OLMo 2 and 3) on their outputs, before each residual add.
struct LayerParams {
    ParamId norm1_w = kNoParam, norm1_b = kNoParam, qkv_w = kNoParam, qkv_b = kNoParam, out_w = kNoParam,
            out_b = kNoParam, norm2_w = kNoParam, norm2_b = kNoParam, up_w = kNoParam, up_b = kNoParam,
            down_w = kNoParam, down_b = kNoParam;
    // q/k norms: [Dims::qk_norm.q_width] and [k_width]; Qwen3's of head_dim, replicated over tp.
    ParamId q_norm_w = kNoParam, k_norm_w = kNoParam;
    ParamId router_w = kNoParam;  // MoE: [E, h]; up_w / down_w stack the rank's experts' [E up_width, h] / [E h, ffn]
};

// Training hyper-parameters and initialisation (not part of the plan).
struct TrainHyper {
    double lr = 1e-3;
    double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;  // AdamW (Loshchilov & Hutter 2019)
    double weight_decay = 0.1;                      // on matrices only (validation/pytorch/train.py's groups)
    double momentum = 0.9;                          // SGD
    double init_std = 0.02;                         // GPT-2 initialisation
    double norm_eps = 1e-5;                         // the norms' epsilon: the model's rms_norm_eps (layer_norm_epsilon)
    double rope_base = 10000.0;                     // RoPE theta (Su et al. 2021): the model's rope_theta
    RopeScaling rope_scaling;                       // the model's rope_scaling (Llama 3)
};

struct Program {
    TrainHyper hyper;
    ModelConfig model;
    Plan plan;
    Dims dims;
    DType act = DType::bf16;     // activations, logits, weights' compute copy
    DType weight = DType::bf16;
    DType grad = DType::bf16;
    bool master = false;         // fp32 master copy (bf16-mixed recipes)
    bool grad_accum_fp32 = false;  // bf16-mixed-fp32-grads: extra fp32 accumulation buffer

    std::vector<ParamSpec> params;
    std::int64_t param_elements = 0;  // flat length incl. alignment padding
    ParamId wte = kNoParam, wpe = kNoParam, normf_w = kNoParam, normf_b = kNoParam, head = kNoParam;
    std::vector<LayerParams> layer_params;  // index l-1

    std::vector<BufferSpec> buffers;
    // Persistent buffers (allocated by setup, freed by teardown). Under ZeRO (runtime_layout.hpp)
    // `weights` is the full compute copy (ZeRO-0/1/2) or this rank's shard (ZeRO-3); `grads` the
    // full gradient buffer the backward writes (ZeRO-0/1; kNoBuffer under ZeRO-2/3, whose backward
    // writes unit_grads); `grad_shard` this rank's reduced gradients (ZeRO-2/3, fp32 for the
    // fp32-accumulation recipe); master and moments full (ZeRO-0) or this rank's shard.
    BufferId weights = kNoBuffer, master_weights = kNoBuffer, grads = kNoBuffer, grads_fp32 = kNoBuffer,
             grad_shard = kNoBuffer, moment1 = kNoBuffer, moment2 = kNoBuffer, gemm_workspace = kNoBuffer,
             scalars = kNoBuffer, rope_cos = kNoBuffer, rope_sin = kNoBuffer;

    // Data parallelism: this program's rank, the planner's layout of the flat buffers, and per
    // unit the ZeRO-3 gathered parameters and the ZeRO-2/3 unreduced gradients (kNoBuffer
    // where the stage has none). The reduced gradient the optimizer reads: grad_shard, else
    // grads_fp32, else grads.
    // Ranks: global `rank` = tp_rank + tp * dp_rank (Megatron-LM's order: tensor-parallel ranks
    // adjacent, then data-parallel; megatron/core/parallel_state.py). Under context parallelism
    // `plan` is the rank's view (context_parallel_rank_plan: dp x cp ranks, seq / cp) and dp_rank
    // = cp_rank + cp x the data-parallel rank: gradients are averaged and ZeRO shards cut over the
    // dp x cp ranks, as Megatron-LM's data-parallel-with-context-parallel group does.
    std::int64_t rank = 0, dp_rank = 0, tp_rank = 0, pp_rank = 0;
    // The rank runs alone (`preflight run --emulate-rank`, EmulatedComm): its tensor-parallel sums
    // bring nothing from its peers. It then adds the residual and biases that only tensor-parallel
    // rank 0 adds in a real group (without them its residual stream is lost at every layer), and
    // takes its synthetic tokens from its own vocabulary rows (token_window below). The
    // buffers, allocations and collectives are those of the real rank.
    bool emulated = false;
    RuntimeLayout layout;

    // fp8-mixed (program_fp8.cpp): the layers' GEMMs take fp8 operands; the LM head stays bf16.
    // fp8_weights caches W (E4M3, [N, K]) and W^T ([K, N]) of every layer GEMM weight, cast once
    // per step. Under ZeRO-3 there are no full weights to cast: each layer unit has a cache of its
    // own (unit_fp8), cast from the gathered unit after each of its gathers (forward and backward)
    // and freed with it. fp8_scales holds two fp32 per scale slot (amax, dequantization factor),
    // three slots per layer GEMM (its input, its weight, its output gradient).
    bool fp8 = false;
    BufferId fp8_weights = kNoBuffer, fp8_scales = kNoBuffer;
    std::vector<std::int64_t> fp8_weight_offset;  // per ParamId: W's offset in its cache (W^T after it), -1 none
    std::vector<BufferId> fp8_weight_buffer;      // per ParamId: the cache holding W (fp8_weights or unit_fp8[unit])
    std::vector<std::int32_t> fp8_weight_slot;    // per ParamId: W's scale slot, -1 none
    std::vector<BufferId> unit_fp8;               // per unit, ZeRO-3: its fp8 cache (kNoBuffer: none)
    std::vector<BufferId> unit_weights, unit_grads;
    BufferId optimizer_grads() const;
    // Where parameter `id`'s weights / gradients are while an op runs (a gathered unit or the
    // full buffer; a unit gradient buffer or the full one). kNoParam gives {kNoBuffer, 0}.
    ParamRef weight_at(ParamId id) const;
    ParamRef grad_at(ParamId id) const;
    // The global index of micro-batch `mb` of this rank: the synthetic data of dp ranks with
    // grad_acc micro-batches each are those of one GPU with dp * grad_acc micro-batches.
    // Under context parallelism dp_rank counts the dp x cp ranks (cp adjacent): the cp ranks of one
    // block share their sequences.
    std::int64_t data_micro_batch(std::int64_t mb) const { return dp_rank / dims.cp * dims.grad_acc + mb; }
    // The ranks of a collective's group and this rank's place among them.
    std::int64_t group_size(CommGroup g) const;
    std::int64_t group_rank(CommGroup g) const;
    // Which group of its kind the rank is in (the same for every member of a group; the
    // embedding group is keyed like the pipeline's), for backends that build the groups.
    std::int64_t group_key(CommGroup g) const;
    // A shard unit's group (CommGroup::dp, or edp for a layer's experts under expert parallelism)
    // and this rank's place in it: its chunk is [rank * chunk, (rank + 1) * chunk) of the unit.
    CommGroup unit_group(const ShardUnit& u) const { return u.kind == UnitKind::experts ? CommGroup::edp : CommGroup::dp; }
    std::int64_t unit_rank(const ShardUnit& u) const { return group_rank(unit_group(u)); }

    std::vector<Op> setup;     // allocate and initialise persistent state
    std::vector<Op> step;      // one optimizer step (grad_acc micro-batches)
    std::vector<Op> teardown;  // free persistent state
    // Without a pipeline the micro-batches between the first three and the last repeat one
    // micro-batch's ops on the same buffers, and a pipeline's steady state repeats a period of
    // passes, so the step holds them once: step ops [begin, end) run `times` times in a row, run r
    // on micro-batches (each op's micro_batch) + r x stride (emit_micro_batches, append_repeating;
    // walk() runs them, plan_arena places them once). times 1: no repeat.
    struct Repeat {
        std::size_t begin = 0, end = 0;
        std::int64_t times = 1, stride = 1;
    } repeat;
    // Ops one step runs: step.size() with the repeated block counted `times` times.
    std::int64_t step_ops_run() const {
        return static_cast<std::int64_t>(step.size()) +
               static_cast<std::int64_t>(repeat.end - repeat.begin) * (repeat.times - 1);
    }
};

// The optimizer step of a rank as contiguous regions: in each, the gradients, the compute-copy
// weights and the fp32 states (master, moments) are each contiguous. ZeRO-0 updates the whole
// flat layout (one region); ZeRO >= 1 the rank's chunk of every unit (one region each: its
// gradients in the full buffer under ZeRO-1, in the shard under ZeRO-2/3; its weights in the full
// buffer, or the shard under ZeRO-3; its states at the unit's shard offset).
struct OptimizerRegion {
    ParamRef grad, weights;  // the region's first element
    std::int64_t state = 0;  // its first element in the master and moment buffers
    std::int64_t count = 0;
    // The tensors the region covers: (first element relative to the region, AdamW weight decay),
    // ascending; a tensor's alignment padding (and a chunk's) belongs to the tensor before it.
    std::vector<std::pair<std::int64_t, bool>> tensors;
};
std::vector<OptimizerRegion> optimizer_regions(const Program& program);

// Throws InputError naming the flag for a plan this runtime cannot run (fp16, dropout, MoE,
// a GPipe pipeline or an interleaved chunk without a layer, ZeRO-2/3 with pp > 1 and a tied
// embedding under bf16-mixed-fp32-grads, rowwise fp8, head_dim > 128, LoRA, offload, cp without RoPE, ep, more micro-batches
// or layer-steps than its bounds): the planner's
// check_runtime_model and check_runtime_plan (profiles.hpp), which the preflight-runtime
// profile applies too.
void check_supported(const ModelConfig& model, const Plan& plan);

// Builds the program of global rank `rank` (0 <= rank < dp x tp x pp x cp, numbered as rank_coords;
// InputError naming --emulate-rank otherwise) for a resolved, validated, supported plan.
// `emulated`: the rank runs alone (Program::emulated).
Program build_program(const ModelConfig& model, const Plan& plan, std::int64_t rank = 0, bool emulated = false);
// A global rank's place in the plan's grid: tensor-parallel ranks adjacent, then data-parallel,
// then pipeline stages (Megatron-LM's default order tp-dp-pp, megatron/core/parallel_state.py):
// rank = tp_rank + tp * (dp_rank + dp * pp_rank).
// Under context parallelism the cp ranks come between: rank = tp_rank + tp * (cp_rank + cp *
// (dp_rank + dp * pp_rank)) (Megatron-LM's order tp-cp-dp-pp).
struct RankCoords {
    std::int64_t dp = 0, tp = 0, pp = 0, cp = 0;
};
RankCoords rank_coords(const Plan& plan, std::int64_t rank);
// The plan's rank grid for messages: "--dp D x --tp T x --pp P", with " x --cp C" when cp > 1.
std::string rank_grid_text(const Plan& plan);

// The plan on one GPU with the same global batch: dp = tp = 1, grad_acc x dp, no ZeRO or
// sequence parallelism (the reference of the parity checks, and the whole model's layout).
Plan single_gpu_plan(Plan plan);

// Sets the RoPE base and scaling and the norms' epsilon of `program.hyper` from its model
// (build_program does; call again after replacing `hyper`).
void use_model_constants(Program& program);

// The ids the synthetic tokens and labels take: first + [0, min(vocab, kSyntheticVocab)) (synthetic.hpp).
// Ids 0..255 lie on tensor-parallel rank 0's vocabulary rows only. In a real group the embedding's
// tensor-parallel sum brings rank 0's rows to the other ranks; an emulated rank > 0 is alone, so with
// those ids every token would embed as zero, the whole forward would be zero, and its backward would
// grow by about 1/sqrt(norm eps) at every RMSNorm (at x = 0) until bf16 overflows and inf * 0 makes
// the gradients NaN ("loss is not finite at step 2"). It takes the same sequences in its own rows.
struct TokenWindow {
    std::int64_t first = 0, vocab = 0;
};
inline TokenWindow token_window(const Program& P) {
    if (P.emulated && P.dims.tp > 1 && P.dims.vocab_valid > 0) return {P.dims.vocab_begin, P.dims.vocab_valid};
    return {0, P.dims.vocab};
}

// Whether the program has collectives: dp > 1, or a ZeRO stage (whose collectives are then
// over one rank).
bool has_collectives(const Program& program);

// Op label for reports: "backward layer 3 (micro-batch 1): L3 mlp down dgrad".
std::string describe(const Program& program, const Op& op, std::int64_t micro_batch_offset = 0);

}  // namespace preflight::runtime
