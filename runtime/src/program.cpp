// Builds the step program of a plan: its parameters, buffers and the ops of set-up, step and teardown.
#include "preflight/runtime/program.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "preflight/planner/error.hpp"
#include "preflight/planner/extensions.hpp"
#include "preflight/planner/profiles.hpp"
#include "program_builder.hpp"

namespace preflight::runtime {

namespace program_detail {
void Builder::end_unit() const {
    const ShardUnit& u = p_.layout.units[unit_];
    if (cursor_ - u.begin != u.elements)
        throw std::logic_error("the runtime's " + unit_name(u) + " holds " + std::to_string(cursor_ - u.begin) +
                               " parameter elements; the planner's layout (runtime_unit_elements) says " +
                               std::to_string(u.elements));
}
}  // namespace program_detail

namespace {

using namespace program_detail;

// Dimensions of one micro-batch of the plan on the model, as tensor-parallel rank `at.tp` of
// pipeline stage `at.pp` holds them (Shoeybi et al. 2019, sec. 3: each rank a 1/tp share of the
// heads, the MLP's hidden units and the vocabulary; the stage's layers by the planner's split,
// pipeline_stage_layers).
Dims program_dims(const ModelConfig& model, const Plan& plan, const RankCoords& at) {
    const std::int64_t tp_rank = at.tp;
    Dims d;
    d.tp = plan.tp;
    d.s = plan.seq;
    d.b = plan.mbs;
    d.rows = d.s * d.b;
    d.sp = plan.sp && plan.tp > 1;
    d.srows = d.sp ? d.rows / plan.tp : d.rows;
    d.h = model.hidden;
    d.heads = model.heads / d.tp;
    d.kv_heads = model.kv_heads / d.tp;
    d.head_dim = model.head_dim;
    d.rope_dims = model.rope_dims();
    d.q_width = model.q_width() / d.tp;
    d.kv_width = model.kv_width() / d.tp;
    d.qkv_width = d.q_width + 2 * d.kv_width;
    d.ffn = model.ffn_hidden / d.tp;
    d.up_width = model.mlp == MlpKind::swiglu ? 2 * d.ffn : d.ffn;
    d.experts = model.experts;
    d.topk = model.is_moe() ? model.experts_per_token : 1;
    d.renormalize_gates = !model.is_moe() || model.moe_renormalize;
    if (model.qk_norm) d.qk_norm = qk_norm_groups(model.qk_norm_whole, d.heads, d.kv_heads, d.head_dim);
    // Expert parallelism: ep consecutive data-parallel ranks split the experts; each expert takes
    // at most ceil(capacity factor x the block's balanced load) of its ep x rows tokens' pairs.
    d.ep = model.is_moe() ? std::max<std::int64_t>(plan.ep, 1) : 1;
    d.ep_rank = at.dp % d.ep;
    d.local_experts = d.experts / d.ep;
    d.expert0 = d.ep_rank * d.local_experts;
    d.capacity = runtime_moe_rows(model, plan, d.rows).capacity;  // 0 at ep 1 (dropless)
    d.vocab = model.vocab;
    // Same padding as the planner's runtime profile (vocab_pad_multiple, times tp).
    const std::int64_t unit = kRuntimeVocabPadMultiple * d.tp;
    d.vocab_padded = (model.vocab + unit - 1) / unit * unit / d.tp;
    d.vocab_begin = tp_rank * d.vocab_padded;
    d.vocab_valid = std::clamp<std::int64_t>(model.vocab - d.vocab_begin, 0, d.vocab_padded);
    d.pp = plan.pp;
    d.first_stage = at.pp == 0;
    d.last_stage = at.pp == plan.pp - 1;
    d.layers = pipeline_stage_layers(plan, model.layers, at.pp);
    std::int64_t local = 1;
    for (const StageChunk& c : pipeline_stage_chunks(plan, model.layers, at.pp)) {
        d.chunks.push_back({local, c.layers, c.first_layer});
        local += c.layers;
    }
    d.max_positions = model.max_positions;
    d.grad_acc = plan.grad_acc;
    return d;
}

// Where a rank's slice of each layer tensor sits in the whole tensor (tensor parallelism): the
// fused q|k|v holds this rank's query heads, then its key and value heads; the fused gate|up its
// share of the gate, then of up; the row-parallel output and down projections a column range.
struct LayerSlices {
    std::vector<RowBlock> qkv, up;
    std::int64_t qkv_rows = 0, up_rows = 0, q_cols = 0, q_col_begin = 0, f_cols = 0, f_col_begin = 0;
};
LayerSlices layer_slices(const ModelConfig& m, const Dims& d, std::int64_t t) {
    LayerSlices s;
    const std::int64_t Q = m.q_width(), KV = m.kv_width(), F = m.ffn_hidden;
    s.qkv = {{0, t * d.q_width, d.q_width}, {d.q_width, Q + t * d.kv_width, d.kv_width},
             {d.q_width + d.kv_width, Q + KV + t * d.kv_width, d.kv_width}};
    s.qkv_rows = Q + 2 * KV;
    if (m.mlp == MlpKind::swiglu) {
        s.up = {{0, t * d.ffn, d.ffn}, {d.ffn, F + t * d.ffn, d.ffn}};
        s.up_rows = 2 * F;
    } else {
        s.up = {{0, t * d.ffn, d.ffn}};
        s.up_rows = F;
    }
    s.q_cols = Q, s.q_col_begin = t * d.q_width, s.f_cols = F, s.f_col_begin = t * d.ffn;
    return s;
}

// Parameters of decoder layer l, in the planner's order (model.cpp param_tensors), q/k/v
// and gate/up fused; a rank's slices under tensor parallelism.
LayerParams add_layer_parameters(Builder& B, const ModelConfig& model, std::int64_t l, std::int64_t tp_rank) {
    const Dims& d = B.d_;
    const bool ln = model.norm == NormKind::layernorm;
    const bool swiglu = model.mlp == MlpKind::swiglu;
    const LayerSlices sl = layer_slices(model, d, tp_rank);
    const TpSlice column_qkv{sl.qkv, sl.qkv_rows, d.h, 0}, column_up{sl.up, sl.up_rows, d.h, 0};
    const TpSlice bias_qkv{sl.qkv, sl.qkv_rows, 1, 0}, bias_up{sl.up, sl.up_rows, 1, 0};
    const TpSlice row_out{{}, d.h, sl.q_cols, sl.q_col_begin}, row_down{{}, d.h, sl.f_cols, sl.f_col_begin};
    LayerParams lp;
    const std::string n = "layers." + std::to_string(d.model_layer(l)) + ".";  // the model's index
    const bool pre = !model.post_norms;  // else OLMo's norms on the sublayer outputs, after o_proj (check_runtime_plan: tp 1)
    if (pre) lp.norm1_w = B.norm_param(n + "attn_norm.weight", d.h, l, d.sp);  // sp: each rank its rows
    if (pre && ln) lp.norm1_b = B.norm_param(n + "attn_norm.bias", d.h, l, d.sp, true);
    lp.qkv_w = B.param(n + "qkv_proj.weight", d.qkv_width, d.h, l, true, column_qkv);
    if (model.qkv_bias) lp.qkv_b = B.param(n + "qkv_proj.bias", d.qkv_width, 1, l, false, bias_qkv);
    if (model.qk_norm) {  // Qwen3's one head_dim weight shared by the heads (each rank its heads); OLMoE's a
                          // weight per column (check_runtime_plan: tp 1)
        const bool per_head = !model.qk_norm_whole && d.tp > 1;
        lp.q_norm_w = B.norm_param(n + "q_norm.weight", d.qk_norm.q_width, l, per_head);
        lp.k_norm_w = B.norm_param(n + "k_norm.weight", d.qk_norm.k_width, l, per_head);
    }
    lp.out_w = B.param(n + "o_proj.weight", d.h, d.q_width, l, true, row_out);
    if (model.out_bias) lp.out_b = B.param(n + "o_proj.bias", d.h, 1, l, false);
    if (!pre) {  // model_params.cpp's order: both after o_proj
        lp.norm1_w = B.norm_param(n + "attn_post_norm.weight", d.h, l, false);
        lp.norm2_w = B.norm_param(n + "mlp_post_norm.weight", d.h, l, false);
        if (ln) lp.norm1_b = B.norm_param(n + "attn_post_norm.bias", d.h, l, false, true);
        if (ln) lp.norm2_b = B.norm_param(n + "mlp_post_norm.bias", d.h, l, false, true);
    }
    if (pre) lp.norm2_w = B.norm_param(n + "mlp_norm.weight", d.h, l, d.sp);
    if (pre && ln) lp.norm2_b = B.norm_param(n + "mlp_norm.bias", d.h, l, d.sp, true);
    if (d.moe()) {  // check_runtime_model: SwiGLU experts without biases
        // The router replicated; each expert's gate|up column-parallel and down row-parallel, as
        // the dense MLP's (Megatron-LM's expert tensor parallelism at its default, tp). Under expert
        // parallelism the rank holds experts expert0 .., in a unit of their own.
        std::vector<RowBlock> up;
        for (std::int64_t e = 0; e < d.local_experts; ++e)
            for (const RowBlock& b : sl.up)
                up.push_back({e * d.up_width + b.local_begin, (d.expert0 + e) * sl.up_rows + b.global_begin, b.rows});
        lp.router_w = B.param(n + "router.weight", d.experts, d.h, l, true);
        if (d.ep > 1) {
            B.end_unit();
            B.begin_unit(layer_unit(B.p_, l) + 1);
        }
        lp.up_w = B.param(n + "experts.gate_up_proj.weight", d.local_experts * d.up_width, d.h, l, true,
                          {up, d.experts * sl.up_rows, d.h, 0});
        lp.down_w = B.param(n + "experts.down_proj.weight", d.local_experts * d.h, d.ffn, l, true,
                            {{{0, d.expert0 * d.h, d.local_experts * d.h}}, d.experts * d.h, sl.f_cols, sl.f_col_begin});
        return lp;
    }
    lp.up_w = B.param(n + (swiglu ? "gate_up_proj.weight" : "fc1.weight"), d.up_width, d.h, l, true, column_up);
    if (model.mlp_bias)
        lp.up_b = B.param(n + (swiglu ? "gate_up_proj.bias" : "fc1.bias"), d.up_width, 1, l, false, bias_up);
    lp.down_w = B.param(n + (swiglu ? "down_proj.weight" : "fc2.weight"), d.h, d.ffn, l, true, row_down);
    if (model.mlp_bias) lp.down_b = B.param(n + (swiglu ? "down_proj.bias" : "fc2.bias"), d.h, 1, l, false);
    return lp;
}

// Every parameter of the stage, unit by unit in the planner's layout (runtime_layout.hpp): the
// embeddings (first stage), the stage's decoder layers, the final norm and the LM head (last
// stage; the word embedding itself when tied on one stage, a copy of it on a last stage of its
// own, as Megatron-LM keeps one for its output layer).
void add_parameters(Builder& B) {
    Program& P = B.p_;
    const ModelConfig& model = P.model;
    const Dims& d = P.dims;
    // Vocabulary-parallel embedding and head: this rank's rows of the padded vocabulary.
    const TpSlice vocab{{{0, d.vocab_begin, d.vocab_padded}}, d.vocab_padded * d.tp, d.h, 0};
    if (d.first_stage) {
        B.begin_unit(embedding_unit());
        P.wte = B.param("word_embedding", d.vocab_padded, d.h, 0, true, vocab);
        if (model.position == PositionKind::learned) P.wpe = B.param("position_embedding", d.max_positions, d.h, 0, true);
        B.end_unit();
    }
    for (std::int64_t l = 1; l <= d.layers; ++l) {
        B.begin_unit(layer_unit(P, l));
        P.layer_params.push_back(add_layer_parameters(B, model, l, P.tp_rank));
        B.end_unit();
    }
    if (d.last_stage) {
        B.begin_unit(head_unit(P));
        P.normf_w = B.norm_param("final_norm.weight", d.h, 0, d.sp);
        if (model.norm == NormKind::layernorm) P.normf_b = B.norm_param("final_norm.bias", d.h, 0, d.sp, true);
        if (model.tied_embeddings && d.first_stage)
            P.head = P.wte;
        else
            P.head = B.param(model.tied_embeddings ? "word_embedding" : "lm_head.weight", d.vocab_padded, d.h, 0, true, vocab);
        B.end_unit();
    }
    P.param_elements = P.layout.full_elements;
}

// Persistent buffers, one allocation per category (llm.c style), with the set-up op that
// allocates them and the teardown op that frees them. Their sizes follow the ZeRO stage
// (runtime_layout.hpp runtime_state_elements).
void add_persistent_buffers(Builder& B) {
    Program& P = B.p_;
    const Dims& d = P.dims;
    const RuntimeStateElements n = runtime_state_elements(P.layout);
    const bool sharded_grads = P.plan.zero >= zero_gradients;
    P.weights = B.buffer(P.plan.zero == zero_weights ? "weights shard" : "weights", Category::weights, P.weight, n.weights);
    if (P.master) P.master_weights = B.buffer("master weights", Category::master, DType::f32, n.optimizer);
    if (sharded_grads) {
        // The rank's reduced gradients: at the fp32 accumulation dtype when the recipe has one.
        const DType t = P.grad_accum_fp32 ? DType::f32 : P.grad;
        P.grad_shard = B.buffer("gradients shard", Category::gradients, t, n.gradients);
    } else {
        P.grads = B.buffer("gradients", Category::gradients, P.grad, n.gradients);
        if (P.grad_accum_fp32)
            P.grads_fp32 = B.buffer("gradients fp32 accumulation", Category::gradients, DType::f32, n.gradients);
    }
    if (P.plan.optimizer == Optimizer::adamw) {
        P.moment1 = B.buffer("adamw m", Category::optimizer, DType::f32, n.optimizer);
        P.moment2 = B.buffer("adamw v", Category::optimizer, DType::f32, n.optimizer);
    } else {
        P.moment1 = B.buffer("sgd momentum", Category::optimizer, DType::f32, n.optimizer);
    }
    add_fp8_buffers(B);
    P.gemm_workspace = B.buffer("cublaslt workspace", Category::workspace, DType::u8, kRuntimeGemmWorkspaceBytes);
    P.scalars = B.buffer("device scalars", Category::workspace, DType::u8, kRuntimeScalarsBytes);
    if (P.model.position == PositionKind::rope) {
        // cos/sin tables [s, head_dim] fp32, rotate-half layout (the planner's 2*s*d*4 bytes).
        P.rope_cos = B.buffer("rope cos", Category::workspace, DType::f32, d.s * d.head_dim);
        P.rope_sin = B.buffer("rope sin", Category::workspace, DType::f32, d.s * d.head_dim);
    }
    {
        Op& o = B.emit(P.setup, OpKind::init_params, "set-up: allocate and initialise", {PhaseKind::step_start, 0, 0});
        for (BufferId b = 0; b < static_cast<BufferId>(P.buffers.size()); ++b) o.alloc.push_back(b);
    }
    Op& o = B.emit(P.teardown, OpKind::teardown, "teardown", {PhaseKind::optimizer_step, 0, 0});
    o.free = P.setup.front().alloc;
    if (data_parallel(P)) add_unit_buffers(B);  // allocated and freed by the step's ops
}

}  // namespace

Program build_program(const ModelConfig& model, const Plan& plan_in, std::int64_t rank, bool emulated) {
    const Plan whole = resolve_defaults(plan_in, model);
    validate_plan(whole, model);
    check_supported(model, whole);
    const std::int64_t world = whole.gpus();
    if (rank < 0 || rank >= world)
        throw InputError("--emulate-rank", "rank " + std::to_string(rank) + " is outside the plan's ranks 0.." +
                                               std::to_string(world - 1) + " (" + rank_grid_text(whole) + ")");
    // Under context parallelism the rank's view: dp x cp ranks, seq / cp tokens (program.hpp).
    const Plan plan = context_parallel_rank_plan(whole);

    Program P;
    P.model = model;
    P.plan = plan;
    P.rank = rank;
    P.emulated = emulated;
    const RankCoords at = rank_coords(plan, rank);
    P.tp_rank = at.tp;
    P.dp_rank = at.dp;
    P.pp_rank = at.pp;
    use_model_constants(P);
    P.dims = program_dims(model, plan, at);
    P.dims.cp = whole.cp;
    P.dims.cp_rank = at.dp % whole.cp;
    P.dims.s_full = whole.seq;
    // Sliding-window attention where the window is narrower than the sequence: on every layer, or
    // on all but every full_attention_period-th (layers of two kinds, Dims::window_of).
    P.dims.window = model.attention_window(whole.seq);
    P.dims.full_attention_period = P.dims.window > 0 ? model.full_attention_period : 0;
    const Dims& d = P.dims;
    RuntimeStageSpan span{d.first_stage, d.last_stage, d.first_layer(), d.layers, {}};
    for (std::int64_t l = 1; l <= d.layers; ++l) span.model_layers.push_back(d.model_layer(l));
    P.layout = runtime_layout(model, plan, d.vocab_padded, span);
    // Precision recipes (docs/interface.md table): compute copy, gradients, master.
    const PrecisionBytes pb = precision_bytes(plan.precision);
    P.act = pb.activation == 4 ? DType::f32 : DType::bf16;
    P.weight = pb.weight == 4 ? DType::f32 : DType::bf16;
    P.grad = pb.gradient == 4 ? DType::f32 : DType::bf16;
    P.master = pb.master > 0;
    P.grad_accum_fp32 = pb.gradient_accum > 0;
    P.fp8 = plan.precision == Precision::fp8_mixed;

    Builder B(P);
    add_parameters(B);
    add_persistent_buffers(B);
    B.emit(P.step, OpKind::zero_grads, "zero gradients and loss", {PhaseKind::step_start, 0, 0});
    if (P.fp8 && P.fp8_weights != kNoBuffer)  // fp8_cast_weights: the updated weights into the fp8 cache, once a step
        B.emit(P.step, OpKind::fp8_cast_weights, "fp8 cast of the layers' weights", {PhaseKind::step_start, 0, 0});
    open_tied_unit_grads(B, P.step);
    emit_micro_batches(B);
    tie_embedding_grads(B, P.step);
    reduce_accumulated(B, P.step);
    wait_all(B, P.step, {PhaseKind::grad_reduce, 0, 0});
    reduce_sequence_parallel_grads(B, P.step);
    B.emit(P.step, OpKind::optimizer, plan.optimizer == Optimizer::adamw ? "adamw" : "sgd",
           {PhaseKind::optimizer_step, 0, 0});
    gather_updated(B, P.step);
    return P;
}

void use_model_constants(Program& P) {
    P.hyper.rope_base = P.model.rope_theta;
    P.hyper.rope_scaling = P.model.rope_scaling;
    P.hyper.norm_eps = P.model.norm_eps;
}

std::size_t Dims::chunk_of(std::int64_t l) const {
    std::size_t c = 0;
    while (c + 1 < chunks.size() && l >= chunks[c + 1].first) ++c;
    return c;
}

std::int64_t Dims::model_layer(std::int64_t l) const {
    if (chunks.empty()) return l;
    const LayerChunk& c = chunks[chunk_of(l)];
    return c.first_model + l - c.first;
}

namespace {

// "exchange: send activation of micro-batch 3, chunk 1; receive gradient of micro-batch 2, chunk 0",
// each micro-batch `micro_batch_offset` on.
std::string exchange_name(const std::vector<Carried>& carries, std::int64_t micro_batch_offset) {
    std::string s = "exchange:";
    for (const Carried& c : carries) {
        s += c.send ? " send" : " receive";
        s += c.forward ? " activation of micro-batch " : " gradient of micro-batch ";
        s += std::to_string(c.micro_batch + micro_batch_offset);
        s += ", chunk ";
        s += std::to_string(c.chunk);
        s += ';';
    }
    if (!carries.empty()) s.pop_back();  // the last ';'
    return s;
}

}  // namespace

std::string describe(const Program&, const Op& op, std::int64_t micro_batch_offset) {
    Phase phase = op.phase;
    phase.micro_batch += micro_batch_offset;  // a later run of the step's repeated block: its own index
    return preflight::describe(phase) + ": " +
           (op.carries.empty() ? op.name : exchange_name(op.carries, micro_batch_offset));
}

}  // namespace preflight::runtime
