// Names of the step program's categories, dtypes and op kinds, and the check that a plan
// is one the runtime executes.
#include "preflight/runtime/program.hpp"

#include <algorithm>

#include "preflight/planner/error.hpp"
#include "preflight/planner/profiles.hpp"

namespace preflight::runtime {
std::string_view to_string(Category c) {
    switch (c) {
        case Category::weights: return "weights";
        case Category::master: return "master";
        case Category::gradients: return "gradients";
        case Category::optimizer: return "optimizer";
        case Category::activations: return "activations";
        case Category::logits: return "logits";
        case Category::workspace: return "workspace";
        case Category::temporary: return "temporary";
        case Category::sharding: return "sharding";
    }
    return "?";
}

std::string_view contract_category(Category c) {
    switch (c) {
        case Category::weights: return "weights";
        case Category::master: return "master_weights";
        case Category::gradients: return "gradients";
        case Category::optimizer: return "optimizer_states";
        case Category::activations:
        case Category::temporary: return "activations";
        case Category::logits: return "logits_and_loss";
        case Category::workspace:
        case Category::sharding: return "buffers";
    }
    return "?";
}

int dtype_bytes(DType t) {
    switch (t) {
        case DType::f32: return 4;
        case DType::bf16: return 2;
        case DType::i64: return 8;
        case DType::u8:
        case DType::f8e4m3:
        case DType::f8e5m2: return 1;
    }
    return 1;
}

bool is_fp8(DType t) { return t == DType::f8e4m3 || t == DType::f8e5m2; }

std::string_view to_string(DType t) {
    switch (t) {
        case DType::f32: return "f32";
        case DType::bf16: return "bf16";
        case DType::i64: return "i64";
        case DType::u8: return "u8";
        case DType::f8e4m3: return "f8e4m3";
        case DType::f8e5m2: return "f8e5m2";
    }
    return "?";
}

std::string_view to_string(OpKind k) {
    switch (k) {
        case OpKind::init_params: return "init_params";
        case OpKind::teardown: return "teardown";
        case OpKind::zero_grads: return "zero_grads";
        case OpKind::tokens: return "tokens";
        case OpKind::labels: return "labels";
        case OpKind::embedding_fwd: return "embedding_fwd";
        case OpKind::embedding_bwd: return "embedding_bwd";
        case OpKind::norm_fwd: return "norm_fwd";
        case OpKind::norm_bwd: return "norm_bwd";
        case OpKind::linear_fwd: return "linear_fwd";
        case OpKind::linear_bwd_data: return "linear_bwd_data";
        case OpKind::linear_bwd_weight: return "linear_bwd_weight";
        case OpKind::rope_fwd: return "rope_fwd";
        case OpKind::rope_bwd: return "rope_bwd";
        case OpKind::flash_fwd: return "flash_fwd";
        case OpKind::flash_bwd: return "flash_bwd";
        case OpKind::eager_scores: return "eager_scores";
        case OpKind::eager_softmax: return "eager_softmax";
        case OpKind::eager_pv: return "eager_pv";
        case OpKind::eager_dp: return "eager_dp";
        case OpKind::eager_softmax_bwd: return "eager_softmax_bwd";
        case OpKind::eager_dqkv: return "eager_dqkv";
        case OpKind::swiglu_fwd: return "swiglu_fwd";
        case OpKind::swiglu_bwd: return "swiglu_bwd";
        case OpKind::gelu_fwd: return "gelu_fwd";
        case OpKind::gelu_bwd: return "gelu_bwd";
        case OpKind::cross_entropy: return "cross_entropy";
        case OpKind::loss_accumulate: return "loss_accumulate";
        case OpKind::grad_accumulate: return "grad_accumulate";
        case OpKind::optimizer: return "optimizer";
        case OpKind::head_norm_fwd: return "head_norm_fwd";
        case OpKind::head_norm_bwd: return "head_norm_bwd";
        case OpKind::unit_grads_begin: return "unit_grads_begin";
        case OpKind::all_reduce: return "all_reduce";
        case OpKind::reduce_scatter: return "reduce_scatter";
        case OpKind::all_gather: return "all_gather";
        case OpKind::comm_wait: return "comm_wait";
        case OpKind::fp8_cast: return "fp8_cast";
        case OpKind::fp8_cast_weights: return "fp8_cast_weights";
        case OpKind::ce_max: return "ce_max";
        case OpKind::ce_sums: return "ce_sums";
        case OpKind::seq_chunk: return "seq_chunk";
        case OpKind::p2p: return "p2p";
        case OpKind::cp_kv_pack: return "cp_kv_pack";
        case OpKind::cp_kv_order: return "cp_kv_order";
        case OpKind::cp_kv_unorder: return "cp_kv_unorder";
        case OpKind::cp_kv_unpack: return "cp_kv_unpack";
        case OpKind::moe_route: return "moe_route";
        case OpKind::moe_dispatch: return "moe_dispatch";
        case OpKind::moe_linear_fwd: return "moe_linear_fwd";
        case OpKind::moe_linear_bwd_data: return "moe_linear_bwd_data";
        case OpKind::moe_linear_bwd_weight: return "moe_linear_bwd_weight";
        case OpKind::moe_combine: return "moe_combine";
        case OpKind::moe_combine_bwd: return "moe_combine_bwd";
        case OpKind::moe_route_bwd: return "moe_route_bwd";
        case OpKind::moe_dispatch_bwd: return "moe_dispatch_bwd";
    }
    return "?";
}

std::int64_t ParamSpec::global_index(std::int64_t r, std::int64_t c) const {
    for (const RowBlock& b : row_blocks)
        if (r >= b.local_begin && r < b.local_begin + b.rows) return (b.global_begin + r - b.local_begin) * global_cols + col_begin + c;
    return -1;
}

std::int64_t Program::group_size(CommGroup g) const {
    switch (g) {
        case CommGroup::dp: return plan.dp;
        case CommGroup::tp: return plan.tp;
        case CommGroup::pp: return plan.pp;
        case CommGroup::embedding: return 2;
        case CommGroup::cp: return dims.cp;
        case CommGroup::ep: return dims.ep;
        case CommGroup::edp: return plan.dp / dims.ep;
    }
    return 1;
}

std::int64_t Program::group_rank(CommGroup g) const {
    switch (g) {
        case CommGroup::dp: return dp_rank;
        case CommGroup::tp: return tp_rank;
        case CommGroup::pp: return pp_rank;
        case CommGroup::embedding: return dims.first_stage ? 0 : 1;
        case CommGroup::cp: return dims.cp_rank;
        case CommGroup::ep: return dp_rank % dims.ep;
        case CommGroup::edp: return dp_rank / dims.ep;
    }
    return 0;
}

std::int64_t Program::group_key(CommGroup g) const {
    switch (g) {
        case CommGroup::dp: return tp_rank + plan.tp * pp_rank;
        case CommGroup::tp: return dp_rank + plan.dp * pp_rank;
        case CommGroup::pp:
        case CommGroup::embedding: return tp_rank + plan.tp * dp_rank;
        case CommGroup::cp: return tp_rank + plan.tp * (dp_rank / dims.cp + plan.dp / dims.cp * pp_rank);
        case CommGroup::ep: return tp_rank + plan.tp * (dp_rank / dims.ep + plan.dp / dims.ep * pp_rank);
        case CommGroup::edp: return tp_rank + plan.tp * (dp_rank % dims.ep + dims.ep * pp_rank);
    }
    return 0;
}

RankCoords rank_coords(const Plan& plan, std::int64_t rank) {
    const std::int64_t cp = std::max<std::int64_t>(1, plan.cp);
    return {rank / (plan.tp * cp) % plan.dp, rank % plan.tp, rank / (plan.tp * cp * plan.dp), rank / plan.tp % cp};
}

std::string rank_grid_text(const Plan& plan) {
    return "--dp " + std::to_string(plan.dp) + " x --tp " + std::to_string(plan.tp) + " x --pp " + std::to_string(plan.pp) +
           (plan.cp > 1 ? " x --cp " + std::to_string(plan.cp) : "");
}

Plan single_gpu_plan(Plan plan) {
    plan.grad_acc *= plan.dp;  // the cp ranks of a data-parallel rank share its sequences
    plan.dp = plan.tp = plan.pp = plan.vpp = plan.cp = plan.ep = 1;
    plan.moe_capacity_factor = 1.0;  // one GPU holds every expert: dropless
    plan.cp_full_seq = 0;
    plan.pp_schedule = PpSchedule::one_f_one_b;
    plan.zero = zero_none;
    plan.sp = false;
    return plan;
}

bool is_collective(OpKind k) {
    return k == OpKind::all_reduce || k == OpKind::reduce_scatter || k == OpKind::all_gather;
}

CollectiveVolume step_collectives(const Program& p) {
    CollectiveVolume v;
    for (std::size_t i = 0; i < p.step.size(); ++i) {
        const Op& op = p.step[i];
        if (!is_collective(op.kind)) continue;
        const BufferSpec& spec = p.buffers[static_cast<std::size_t>(op.v[0].buffer)];
        const std::int64_t runs = i >= p.repeat.begin && i < p.repeat.end ? p.repeat.times : 1;
        v.count += runs;
        v.bytes += runs * op.v[0].rows * op.v[0].cols * dtype_bytes(spec.dtype);
    }
    return v;
}

std::vector<Op> step_as_run(const Program& p, std::int64_t runs) {
    const Program::Repeat& r = p.repeat;
    if (r.times <= 1) return p.step;
    const auto at = [&](std::size_t i) { return p.step.begin() + static_cast<std::ptrdiff_t>(i); };
    std::vector<Op> ops(p.step.begin(), at(r.end));
    ops.reserve(p.step.size() + static_cast<std::size_t>(runs - 1) * (r.end - r.begin));
    for (std::int64_t run = 1; run < runs; ++run)
        for (std::size_t i = r.begin; i < r.end; ++i) {
            Op& o = ops.emplace_back(p.step[i]);
            o.phase.micro_batch += run * r.stride;
            for (Carried& c : o.carries) c.micro_batch += run * r.stride;
        }
    ops.insert(ops.end(), at(r.end), p.step.end());
    return ops;
}

std::vector<Op> step_as_run(const Program& p) { return step_as_run(p, p.repeat.times); }

std::size_t allocations_in(const std::vector<Op>& ops, std::size_t begin, std::size_t end) {
    std::size_t n = 0;
    for (std::size_t k = begin; k < end; ++k) n += ops[k].alloc.size();
    return n;
}

BufferId Program::optimizer_grads() const {
    return grad_shard != kNoBuffer ? grad_shard : grads_fp32 != kNoBuffer ? grads_fp32 : grads;
}

ParamRef Program::weight_at(ParamId id) const {
    if (id == kNoParam) return {};
    const ParamSpec& ps = params[static_cast<std::size_t>(id)];
    const BufferId unit = unit_weights.empty() ? kNoBuffer : unit_weights[static_cast<std::size_t>(ps.unit)];
    if (unit != kNoBuffer) return {unit, ps.offset - layout.units[static_cast<std::size_t>(ps.unit)].begin};
    return {weights, ps.offset};
}

ParamRef Program::grad_at(ParamId id) const {
    if (id == kNoParam) return {};
    const ParamSpec& ps = params[static_cast<std::size_t>(id)];
    const BufferId unit = unit_grads.empty() ? kNoBuffer : unit_grads[static_cast<std::size_t>(ps.unit)];
    if (unit != kNoBuffer) return {unit, ps.offset - layout.units[static_cast<std::size_t>(ps.unit)].begin};
    return {grads, ps.offset};
}

std::vector<OptimizerRegion> optimizer_regions(const Program& P) {
    // Tensors in layout order (a tied head shares the embedding's slot and is skipped).
    std::vector<const ParamSpec*> tensors;
    for (const ParamSpec& ps : P.params)
        if (tensors.empty() || ps.offset > tensors.back()->offset) tensors.push_back(&ps);
    const BufferId grads = P.optimizer_grads();
    std::vector<OptimizerRegion> out;
    auto add_tensors = [&](OptimizerRegion& r, std::int64_t first) {  // first: the region's offset in the layout
        for (const ParamSpec* ps : tensors) {
            const std::int64_t end = ps->offset + runtime_align(ps->numel());
            if (end <= first || ps->offset >= first + r.count) continue;
            r.tensors.emplace_back(std::max<std::int64_t>(ps->offset - first, 0), ps->decay);
        }
    };
    if (!P.layout.sharded()) {
        OptimizerRegion r{{grads, 0}, {P.weights, 0}, 0, P.layout.full_elements, {}};
        add_tensors(r, 0);
        out.push_back(std::move(r));
        return out;
    }
    for (const ShardUnit& u : P.layout.units) {
        const std::int64_t first = u.begin + P.unit_rank(u) * u.chunk;  // the rank's chunk in the full layout
        const bool grad_shard = P.plan.zero >= zero_gradients, weight_shard = P.plan.zero == zero_weights;
        OptimizerRegion r{{grads, grad_shard ? u.shard_begin : first}, {P.weights, weight_shard ? u.shard_begin : first},
                          u.shard_begin, u.chunk, {}};
        add_tensors(r, first);
        if (r.tensors.empty() || r.tensors.front().first != 0) r.tensors.insert(r.tensors.begin(), {0, false});
        out.push_back(std::move(r));
    }
    return out;
}

void check_supported(const ModelConfig& m, const Plan& p) {
    check_runtime_model(m);  // the planner's rules for what the runtime runs (runtime_support.cpp)
    check_runtime_plan(m, p);
}

}  // namespace preflight::runtime
