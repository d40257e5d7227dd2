// Internal to the runtime's program builder (program.cpp, program_layer.cpp): the builder
// that appends buffers, parameters and ops to a Program, and the emitters of one decoder
// layer's forward and backward.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "preflight/runtime/program.hpp"

namespace preflight::runtime::program_detail {

// A rank's slice of a tensor (ParamSpec::row_blocks etc.): empty rows = the whole rows.
struct TpSlice {
    std::vector<RowBlock> rows;
    std::int64_t global_rows = 0, global_cols = 0, col_begin = 0;
};

class Builder {
public:
    explicit Builder(Program& p) : p_(p), d_(p.dims) {}

    BufferId buffer(std::string name, Category c, DType t, std::int64_t elements) {
        p_.buffers.push_back({std::move(name), c, t, elements});
        return static_cast<BufferId>(p_.buffers.size() - 1);
    }
    // Activation-sized [rows, cols] buffer at the activation dtype.
    BufferId act(std::string name, std::int64_t cols, Category c = Category::activations) {
        return buffer(std::move(name), c, p_.act, d_.rows * cols);
    }
    View full(BufferId b, std::int64_t cols) const { return {b, d_.rows, cols, cols, 0}; }
    // The sequence-parallel region (norms, residual stream): [srows, cols], the whole rows
    // without sequence parallelism.
    BufferId seq_act(std::string name, std::int64_t cols, Category c = Category::activations) {
        return buffer(std::move(name), c, p_.act, d_.srows * cols);
    }
    View seq(BufferId b, std::int64_t cols) const { return {b, d_.srows, cols, cols, 0}; }
    // [b*heads*s, s] attention scores or probabilities.
    View scores(BufferId b) const { return {b, d_.b * d_.heads * d_.s, d_.s, d_.s, 0}; }
    // [b*heads, s] fp32 log-sum-exp of flash attention.
    View lse(BufferId b) const { return {b, d_.b * d_.heads, d_.s, d_.s, 0}; }

    Op& emit(std::vector<Op>& out, OpKind k, std::string name, Phase ph) {
        out.push_back(Op{});
        Op& o = out.back();
        o.kind = k;
        o.name = std::move(name);
        o.phase = ph;
        return o;
    }

    // Parameters are placed unit by unit in the planner's layout (runtime_layout.hpp): each
    // tensor at a multiple of kRuntimeParamAlign after the previous one of its unit.
    void begin_unit(std::size_t unit) {
        unit_ = unit;
        cursor_ = p_.layout.units[unit].begin;
    }
    // Throws std::logic_error when the unit's tensors differ from the planner's count.
    void end_unit() const;
    // `slice`: where this rank's part sits in the whole tensor (tensor parallelism); the default
    // is the whole tensor (replicated).
    ParamId param(std::string name, std::int64_t rows, std::int64_t cols, std::int64_t layer, bool decay,
                  TpSlice slice = {}) {
        ParamSpec ps;
        ps.name = std::move(name);
        ps.rows = rows;
        ps.cols = cols;
        ps.offset = cursor_;
        ps.layer = layer;
        ps.decay = decay;
        ps.unit = static_cast<std::int64_t>(unit_);
        ps.global_rows = slice.global_rows > 0 ? slice.global_rows : rows;
        ps.global_cols = slice.global_cols > 0 ? slice.global_cols : cols;
        ps.col_begin = slice.col_begin;
        ps.row_blocks = slice.rows.empty() ? std::vector<RowBlock>{{0, 0, rows}} : slice.rows;
        p_.params.push_back(std::move(ps));
        cursor_ += runtime_align(rows * cols);
        return static_cast<ParamId>(p_.params.size() - 1);
    }

    // A norm's weight (or, `bias`, its bias) of n elements, replicated over tp; `partial_grad`: each
    // rank's gradient covers part of it (ParamSpec::tp_partial_grad).
    ParamId norm_param(std::string name, std::int64_t n, std::int64_t layer, bool partial_grad, bool bias = false) {
        const ParamId id = param(std::move(name), n, 1, layer, false);
        p_.params.back().tp_partial_grad = partial_grad;
        p_.params.back().norm_weight = !bias;
        return id;
    }

    // Collectives are counted as they are emitted so a wait can name one by how far back it is.
    std::int64_t collectives = 0;
    Op& emit_collective(std::vector<Op>& out, OpKind k, std::string name, Phase ph, std::int64_t unit) {
        Op& o = emit(out, k, std::move(name), ph);
        o.unit = unit;
        last_collective = collectives++;
        return o;
    }
    // The compute stream waits for collective number `which` (a value emit_collective's caller
    // read off `last_collective`); `release` is freed after the wait.
    Op& emit_wait(std::vector<Op>& out, std::int64_t which, Phase ph, std::vector<BufferId> release = {}) {
        Op& o = emit(out, OpKind::comm_wait, "wait for the communication stream", ph);
        o.comm_back = static_cast<int>(collectives - 1 - which);
        o.free = std::move(release);
        return o;
    }
    std::int64_t last_collective = -1;
    // Tensor parallelism: `v` summed (or maxed) over the tensor-parallel ranks in place, the compute
    // stream waiting for it at once (the next op reads it). Nothing without tensor parallelism.
    void tp_all_reduce(std::vector<Op>& out, const std::string& name, const Phase& ph, const View& v,
                       ReduceOp reduce = ReduceOp::sum) {
        if (d_.tp <= 1) return;
        Op& o = emit_collective(out, OpKind::all_reduce, name + " tensor-parallel all-reduce", ph, -1);
        o.group = CommGroup::tp;
        o.reduce = reduce;
        o.v[0] = v;
        emit_wait(out, last_collective, ph);
    }
    // Sequence parallelism (program_layer.cpp): `shard` [srows, cols] all-gathered over the
    // tensor-parallel ranks into a new temporary [rows, cols] (returned; the caller frees it), or
    // `shard` itself without sequence parallelism.
    BufferId gather_seq(std::vector<Op>& out, const std::string& name, const Phase& ph, BufferId shard,
                        std::int64_t cols);
    // `partial` [rows, cols] (partial sums over the tensor-parallel ranks) summed: in place without
    // sequence parallelism (returned, `residual` must then already be in it), else reduce-scattered
    // and this rank's rows plus `residual` (may be kNoBuffer) written to a new [srows, cols] buffer
    // `name` (returned), `partial` freed.
    BufferId reduce_seq(std::vector<Op>& out, const std::string& name, const Phase& ph, BufferId partial,
                        std::int64_t cols, BufferId residual, Category c);
    // ZeRO-2/3: units whose reduce-scatter is in flight, with that collective's number; their
    // gradient buffers are freed once the compute stream has waited for it.
    std::vector<std::pair<std::size_t, std::int64_t>> reducing;
    // ZeRO-3: per unit, the number of its latest all-gather.
    std::vector<std::int64_t> gathered_at;

    Program& p_;
    const Dims& d_;

private:
    std::size_t unit_ = 0;
    std::int64_t cursor_ = 0;
};

// Micro-batches (program_microbatch.cpp): the embedding of micro-batch mb (returns layer 1's
// input), the output and loss (returns dLoss/d(last layer output)), and every micro-batch of the
// step in schedule order.
BufferId emit_embedding_forward(Builder& B, std::int64_t mb, BufferId tokens);
BufferId emit_output_and_loss(Builder& B, std::int64_t mb, BufferId x, bool reduce);
void emit_micro_batches(Builder& B);

// "L<n> ": the prefix of the buffer and op names of the stage's layer l, n its index in the model.
inline std::string layer_label(const Dims& d, std::int64_t l) {
    std::string s = "L";  // appended piecewise: GCC 12 warns (-Wrestrict) on "L" + to_string(l)
    s += std::to_string(d.model_layer(l));
    s += ' ';
    return s;
}

// The name of layer l's input buffer: its attention norm's input (pre-norms), or the layer's own.
inline std::string layer_input_label(const Program& P, std::int64_t l) {
    return layer_label(P.dims, l) + (P.model.post_norms ? "layer in" : "attn norm in");
}

// The buffers one layer's forward creates. Under fp8-mixed the four GEMM inputs (xn1, attn, xn2,
// act) are kept as transposed fp8 copies (the *_8t buffers) for the weight gradients, and the
// bf16 ones go with their cast, but for the attention output under flash (its backward reads it).
struct LayerFwd {
    BufferId x = kNoBuffer, xn1 = kNoBuffer, qkv = kNoBuffer, core = kNoBuffer, attn = kNoBuffer, x1 = kNoBuffer,
             xn2 = kNoBuffer, up = kNoBuffer, act = kNoBuffer, out = kNoBuffer;
    BufferId xn1_8t = kNoBuffer, attn_8t = kNoBuffer, xn2_8t = kNoBuffer, act_8t = kNoBuffer;
    BufferId qk_in = kNoBuffer;  // per-head q/k norms: their input, the q|k projections (head_norm_fwd)
    // Mixture of experts (program_moe.cpp): gate weights, routing table, the dispatched tokens and
    // the experts' outputs (up and act above are the experts', [rows k, .]).
    BufferId gates = kNoBuffer, routing = kNoBuffer, xd = kNoBuffer, y = kNoBuffer;
    BufferId logits = kNoBuffer;  // the router logits, kept where the gates are not renormalised
    // Post-norms (program_post_norm.cpp): the inputs of the norms on the attention's and the MLP's
    // outputs, the o_proj and down_proj outputs.
    BufferId ya = kNoBuffer, ym = kNoBuffer;
};

// What a layer keeps for its backward, but its input x and its attention core (listed apart).
std::vector<BufferId> layer_kept(const Program& P, const LayerFwd& f);

// Emits one layer's forward. Saved tensors follow the planner's inventory
// (memory.cpp full_inventory): x (norm input), xn1 (QKV GEMM input), qkv (Q, K after
// RoPE and V), softmax output (eager) or log-sum-exp (flash), attention output, x1
// (MLP norm input), xn2 (MLP GEMM input), gate|up or fc1 output, down/fc2 GEMM input.
// `produce_output` false (full-recompute re-forward) stops before the down projection.
// `keep_core` false (selective recompute) frees the attention core after use.
LayerFwd emit_layer_forward(Builder& B, std::vector<Op>& out, std::int64_t l, std::int64_t mb, BufferId x,
                            bool produce_output, bool keep_core, const std::string& tag);

// Backward of layer l. `dres` holds dLoss/d(layer output) and is updated in place to
// dLoss/d(layer input).
void emit_layer_backward(Builder& B, std::vector<Op>& out, std::int64_t l, std::int64_t mb, const LayerFwd& saved,
                         BufferId dres);

// The same for a layer whose norms sit on the sublayer outputs, before each residual add (OLMo 2 and
// 3: program_post_norm.cpp); emit_layer_forward and emit_layer_backward hand such a layer to them.
LayerFwd emit_post_norm_layer_forward(Builder& B, std::vector<Op>& out, std::int64_t l, std::int64_t mb, BufferId x,
                                      bool produce_output, bool keep_core, const std::string& tag);
void emit_post_norm_layer_backward(Builder& B, std::vector<Op>& out, std::int64_t l, std::int64_t mb,
                                   const LayerFwd& saved, BufferId dres);

// Pieces both kinds of layer share (program_layer.cpp). After the q|k|v projection into f.qkv: the
// q/k norms, RoPE and the attention core into f.attn (`keep_core` as emit_layer_forward's).
void emit_attention_after_qkv(Builder& B, std::vector<Op>& out, const std::string& n, const Phase& ph,
                              const LayerParams& lp, LayerFwd& f, bool keep_core);
// From d(attn out) (`dattn`, freed) back through the attention core, RoPE and the q/k norms:
// returns d(q|k|v), allocated here.
BufferId emit_attention_core_backward(Builder& B, std::vector<Op>& out, const std::string& n, const Phase& ph,
                                      const LayerParams& lp, const LayerFwd& f, BufferId dattn);
// The MLP activation (SwiGLU or GeLU) from f.up into f.act, allocated here.
void emit_activation_fwd(Builder& B, std::vector<Op>& out, const std::string& n, const Phase& ph, LayerFwd& f);
// The MLP activation's backward in place on dgu (dA in its first ffn columns in, d(gate|up) out).
void emit_activation_bwd(Builder& B, std::vector<Op>& out, const std::string& n, const Phase& ph, const LayerFwd& f,
                         BufferId dgu);
// The recomputation at the start of layer l's backward (full: the layer's forward again; selective:
// its attention core), `f` updated to the recomputed buffers, which are returned.
std::vector<BufferId> emit_recompute(Builder& B, std::vector<Op>& out, std::int64_t l, std::int64_t mb, const Phase& ph,
                                     LayerFwd& f);
// What goes with the layer's last backward op: its input, its kept tensors (or the recomputed ones)
// and its attention core.
std::vector<BufferId> layer_release(const Program& P, const LayerFwd& saved, const LayerFwd& f,
                                    const std::vector<BufferId>& recomputed);

// Mixture of experts (program_moe.cpp): the MLP half of layer l after its norm (f.xn2), and its
// backward down to the norm output's gradient (returned, allocated here).
void emit_moe_forward(Builder& B, std::vector<Op>& out, std::int64_t l, const std::string& n, const Phase& ph,
                      LayerFwd& f, bool produce_output);
BufferId emit_moe_backward(Builder& B, std::vector<Op>& out, const std::string& n, const Phase& ph,
                           const LayerParams& lp, const LayerFwd& f, BufferId dres);

// Forward of a linear: y = in W^T + b (+ residual), y's buffer allocated by the op.
void emit_linear_fwd(Builder& B, std::vector<Op>& out, const std::string& name, const Phase& ph, const View& in,
                     const View& y, ParamId w, ParamId b, const View& residual = {});

// Forward of a norm over rows of width h: y = norm(x) (+ residual), y allocated by the op.
void emit_norm_fwd(Builder& B, std::vector<Op>& out, const std::string& name, const Phase& ph, BufferId x, BufferId y,
                   ParamId w, ParamId b, BufferId residual = kNoBuffer);

// Backward of a linear: dX (= or +=) dY W, then dW += dY^T X and db += colsum(dY).
void emit_linear_bwd(Builder& B, std::vector<Op>& out, const std::string& name, const Phase& ph, const View& dy,
                     const View& x, const View& dx, ParamId w, ParamId b, std::vector<BufferId> alloc_dx);

// Backward of a norm: x's gradient written (or added, `accumulate`) into dx.
void emit_norm_bwd(Builder& B, std::vector<Op>& out, const std::string& name, const Phase& ph, BufferId x,
                   BufferId dy, BufferId dx, bool accumulate, ParamId w, ParamId b, std::vector<BufferId> alloc,
                   std::vector<BufferId> free);

// --- Context parallelism (program_cp.cpp): K and V all-gathered over the cp ranks (Llama 3 paper,
// sec. 3.3.2). emit_cp_gather_kv returns the whole sequence's K|V in sequence order, [b x s_full,
// 2 kv_width] (allocated; the caller frees it); emit_cp_scatter_dkv sums the whole sequence's
// dK|dV (`dkv`, freed) over the cp ranks and writes this rank's rows into dqkv's K|V columns.
BufferId emit_cp_gather_kv(Builder& B, std::vector<Op>& out, const std::string& n, const Phase& ph, BufferId qkv);
void emit_cp_scatter_dkv(Builder& B, std::vector<Op>& out, const std::string& n, const Phase& ph, BufferId dkv,
                         BufferId dqkv);
// The [b x s_full, 2 kv_width] view of such a buffer.
View cp_kv_view(const Dims& d, BufferId b);

// --- fp8-mixed (program_fp8.cpp). Scale slots: three per layer GEMM (0 qkv, 1 out, 2 up,
// 3 down): its input, its weight, its output gradient.
enum class Fp8Operand { input = 0, weight = 1, grad = 2 };
std::int32_t fp8_slot(std::int64_t layer, int gemm, Fp8Operand o);
// The fp8 weight cache and the scale slots (after the parameters, before the set-up op).
void add_fp8_buffers(Builder& B);
// ZeRO-3: each layer unit's fp8 cache (after the set-up op: allocated by the unit's casts).
void add_unit_fp8_buffers(Builder& B);
// ZeRO-3, after unit u's gather has been waited for: its GEMM weights cast into its fp8 cache
// (allocated here, freed with the gathered unit by release_gathered). Nothing for a unit
// without layer GEMMs, or without ZeRO-3 and fp8.
void cast_unit_fp8(Builder& B, std::vector<Op>& out, std::size_t u, const Phase& ph);
// Forward of a layer GEMM. Under fp8 (a weight with an fp8 copy): the input cast (a row-major
// copy for the GEMM, freed after it; a transposed one kept for the weight gradient, returned),
// `free_input` letting the bf16 input go with the cast, then the fp8 GEMM (unless `run_gemm` is
// false: full recompute re-creates the kept copy without the GEMM). Else the bf16 linear
// (returns kNoBuffer).
BufferId emit_gemm_fwd(Builder& B, std::vector<Op>& out, const std::string& name, const Phase& ph, const View& in,
                       const View& y, ParamId w, ParamId b, const View& residual, bool free_input, bool run_gemm = true);
// Backward of a layer GEMM. Under fp8: the output gradient cast (row-major and transposed, both
// freed after the weight gradient) feeds the fp8 data and weight gradients, `x8t` being the kept
// input copy; the bias gradient reads the bf16 dy. Else the bf16 backward.
void emit_gemm_bwd(Builder& B, std::vector<Op>& out, const std::string& name, const Phase& ph, const View& dy,
                   const View& x, BufferId x8t, const View& dx, ParamId w, ParamId b, std::vector<BufferId> alloc_dx);

// --- Data parallelism (program_comm.cpp): the collectives and ZeRO buffers of a rank's
// step, emitted around the compute ops. Unit u indexes Program::layout.units (0: the
// embedding, l: layer l, L + 1: the head). `reduce`: the micro-batch reduces its gradients
// (every micro-batch under ZeRO-2/3, the last one under ZeRO-0/1).

// Whether the plan has data-parallel collectives (dp > 1 or a ZeRO stage).
bool data_parallel(const Program& P);
// The shard unit of layer l, of the embedding, of the head.
std::size_t layer_unit(const Program& P, std::int64_t l);
std::size_t last_layer_unit(const Program& P, std::int64_t l);  // its experts' under expert parallelism
std::size_t embedding_unit();
std::size_t head_unit(const Program& P);
// Per unit: ZeRO-3's gathered parameters and ZeRO-2/3's unreduced gradients (not allocated at set-up).
void add_unit_buffers(Builder& B);
// ZeRO-3: gathers unit `u` (allocating its buffer) and makes compute wait for it; the gathered
// buffer is freed with `last`, the last op that reads it.
void gather_unit(Builder& B, std::vector<Op>& out, std::size_t u, const Phase& ph);
void release_gathered(Builder& B, Op& last, std::size_t u);
// ZeRO-3, forward of layer l: layer l's gather (at its chunk's first layer) and the prefetch of
// layer l + 1 (within the chunk).
void layer_forward_gathers(Builder& B, std::vector<Op>& out, std::int64_t l, const Phase& ph);
// ZeRO-3, backward of layer l: layer l's gather (at its chunk's last layer) and the prefetch of
// l - 1 (within the chunk);
// ZeRO-2/3: layer l's gradient buffer.
void layer_backward_begin(Builder& B, std::vector<Op>& out, std::int64_t l, const Phase& ph);
// After layer l's backward: its gathered parameters released; its gradients reduced (ZeRO-0/1
// when `reduce`, in the full buffer; ZeRO-2/3 from its unit buffer into the shard), the
// previous unit's reduce-scatter waited for and its buffer freed.
void layer_backward_end(Builder& B, std::vector<Op>& out, std::int64_t l, const Phase& ph, bool reduce);
// Output layer: ZeRO-3 gathers the head (and a tied embedding); ZeRO-2/3 their gradient buffers
// before the head's backward; after it, gathers released and gradients reduced.
void output_gathers(Builder& B, std::vector<Op>& out, const Phase& ph);
void output_grads_begin(Builder& B, std::vector<Op>& out, const Phase& ph);
void output_end(Builder& B, std::vector<Op>& out, const Phase& ph, bool reduce);
// After the model's last chunk's forward under the interleaved schedule: ZeRO-2/3 wait for the
// head's reduce-scatter and free its buffer there (1F1B overlaps it with the backward that
// follows; the interleaved schedule's next pass may be another chunk's).
void output_pass_end(Builder& B, std::vector<Op>& out, const Phase& ph);
// Embedding backward: ZeRO-2/3 wait for the pending reductions and open the embedding's
// gradient buffer; after it, the embedding's gradients reduced (and waited for under ZeRO-2/3).
void embedding_backward_begin(Builder& B, std::vector<Op>& out, const Phase& ph);
void embedding_backward_end(Builder& B, std::vector<Op>& out, const Phase& ph, bool reduce);
// A model chunk after the first, after its input gradient is sent: ZeRO-2/3 reduce-scatter its
// first layer's (`first_layer`) gradients (under the interleaved schedule the send leaves the pass
// for the exchange after it, so this reduce-scatter and its wait come first: exposed, not modelled) (held back so that the send does not queue behind them), wait for it and free
// the buffer, so that a micro-batch's template leaves nothing in flight for the forwards 1F1B
// interleaves with it. (The send then ends the template with this wait after it, so it is not
// paired with the next forward's receive as append_as pairs them otherwise: a lone send, then a
// lone receive.)
void stage_backward_end(Builder& B, std::vector<Op>& out, std::int64_t first_layer, const Phase& ph);
// Pipeline parallelism with a tied word embedding: after the last micro-batch, its gradient on
// the first stage and its copy's on the last are summed (Megatron-LM's embedding group), then
// the unit holding it reduced over the data-parallel ranks. Under ZeRO-2/3 that unit's gradient
// buffer is opened at the step's start (open_tied_unit_grads) and kept, accumulating, through the
// micro-batches (a reduce-scatter every micro-batch could not be summed with the other stage's
// copy), reduce-scattered here and freed.
void open_tied_unit_grads(Builder& B, std::vector<Op>& out);
void tie_embedding_grads(Builder& B, std::vector<Op>& out);
// After the last micro-batch: ZeRO-0/1 with an fp32 accumulation buffer reduce it now, unit by
// unit; then the compute stream waits for every collective before the optimizer.
void reduce_accumulated(Builder& B, std::vector<Op>& out);
void wait_all(Builder& B, std::vector<Op>& out, const Phase& ph);
// Sequence parallelism: each rank's norm weight (and bias) gradients cover its rows only, so the
// reduced gradients the optimizer reads are summed over the tensor-parallel ranks first
// (Megatron-LM's all-reduce of the sequence-parallel parameters' gradients, in
// finalize_model_grads). In place; sums commute with the data-parallel means before them. The
// per-head q/k norms' gradients cover the rank's heads only: summed so with tp > 1, sp or not (as
// Megatron-LM sums its q_layernorm and k_layernorm gradients, _allreduce_non_tensor_model_parallel_grads).
// Which tensors: those marked ParamSpec::tp_partial_grad where they are made (Builder::norm_param).
void reduce_sequence_parallel_grads(Builder& B, std::vector<Op>& out);
// After the optimizer: ZeRO-1/2 all-gather the updated parameters in place, unit by unit.
void gather_updated(Builder& B, std::vector<Op>& out);

// What a chunk micro-batch's forward leaves for its backward.
struct ForwardState {
    BufferId tokens = kNoBuffer;
    std::vector<LayerFwd> saved;  // the chunk's layers, first to last
    BufferId dres = kNoBuffer;    // the model's last chunk: dLoss/d(last layer output)
};
// The forward and the backward of model chunk `chunk` on micro-batch mb, each with its receive
// first (but the model's first chunk's forward and last chunk's backward) and its send last (but
// the model's last chunk's forward and first chunk's backward; under ZeRO-2/3 a backward's send is
// followed by its first layer's reduction); `reduce`: the pass reduces its gradients (ZeRO-0/1).
ForwardState emit_forward_pass(Builder& B, std::size_t chunk, std::int64_t mb, bool reduce);
void emit_backward_pass(Builder& B, std::size_t chunk, std::int64_t mb, const ForwardState& s, bool reduce);
// Ops appended to the step since `from`, taken out of it (a template).
std::vector<Op> take_from(Program& P, std::size_t from);
// The interleaved schedule's step (program_interleaved.cpp).
void emit_interleaved(Builder& B);

// An item of a pipeline stage's step (a pass, or a grouped exchange), for finding its steady
// state: items with the same key emit the same ops on the same buffers, `mb` micro-batches on.
// The key is an identity only (the address of what the emitter emits the item from), compared,
// never read through: each emitter keeps its items' own data beside them.
struct PeriodItem {
    const void* key = nullptr;
    std::int64_t mb = 0;
};
// Appends the items (append(from, to) emits items [from, to)). Their periodic stretch (a
// pipeline's steady state: runs of at most max_period items, each the same keys as the first on
// micro-batches `stride` later), when it has four or more periods, goes as its first period, its
// second (the step's repeated block, Program::repeat: run periods - 2 times, each `stride`
// micro-batches on), then its last period and what follows. The block starts after the ops the
// first period's end holds and ends with the ops the next period's first may merge into (1F1B's
// append_as merges a send and the receive after it), so every run of it, the last included, is
// followed by the same ops.
void append_repeating(Program& P, const std::vector<PeriodItem>& items, std::size_t max_period,
                      const std::function<void(std::size_t, std::size_t)>& append);

}  // namespace preflight::runtime::program_detail
