// Context parallelism in the step program (Llama 3 paper, sec. 3.3.2: all-gather based context
// parallelism). Each cp rank holds two chunks of every sequence (context_parallel.hpp), runs the
// layers on its own rows, and for attention gathers the K and V of the whole sequence from its cp
// peers; its queries attend to them at their own positions. The backward gathers K and V again
// (nothing of the whole sequence is kept between the passes) and returns the whole sequence's dK
// and dV to their owners with a reduce-scatter (a sum over the cp ranks). The planner's
// preflight-runtime profile counts these buffers (plan_extensions.cpp cp_gathered_kv_bytes).
#include "program_builder.hpp"

namespace preflight::runtime::program_detail {

View cp_kv_view(const Dims& d, BufferId b) {
    return {b, d.b * d.s_full, 2 * d.kv_width, 2 * d.kv_width, 0};
}

namespace {
// [cp x rows, 2 kv_width]: each cp rank's K|V rows as it holds them, rank after rank.
View gathered_view(const Dims& d, BufferId b) { return {b, d.cp * d.rows, 2 * d.kv_width, 2 * d.kv_width, 0}; }
}  // namespace

BufferId emit_cp_gather_kv(Builder& B, std::vector<Op>& out, const std::string& n, const Phase& ph, BufferId qkv) {
    const Dims& d = B.d_;
    const std::int64_t elements = d.cp * d.rows * 2 * d.kv_width;
    // The rank's K|V rows are packed into a buffer of their own and gathered from it (not in
    // place): an emulated rank alone then finds its own rows in every rank's chunk, never stale
    // memory (cuda/comm.hpp EmulatedComm).
    const BufferId mine = B.buffer(n + "cp k|v rows", Category::temporary, B.p_.act, d.rows * 2 * d.kv_width);
    const BufferId gathered = B.buffer(n + "cp gathered k|v", Category::temporary, B.p_.act, elements);
    const BufferId ordered = B.buffer(n + "cp k|v (sequence order)", Category::temporary, B.p_.act, elements);
    {
        Op& o = B.emit(out, OpKind::cp_kv_pack, n + "cp pack k|v", ph);
        o.alloc = {mine};
        o.v[0] = B.full(qkv, d.qkv_width);
        o.v[1] = B.full(mine, 2 * d.kv_width);
    }
    Op& g = B.emit_collective(out, OpKind::all_gather, n + "k|v context-parallel all-gather", ph, -1);
    g.group = CommGroup::cp;
    g.alloc = {gathered};
    g.v[0] = gathered_view(d, gathered);
    g.v[1] = B.full(mine, 2 * d.kv_width);
    B.emit_wait(out, B.last_collective, ph, {mine});
    Op& o = B.emit(out, OpKind::cp_kv_order, n + "cp k|v into sequence order", ph);
    o.alloc = {ordered};
    o.v[0] = gathered_view(d, gathered);
    o.v[1] = cp_kv_view(d, ordered);
    o.free = {gathered};
    return ordered;
}

void emit_cp_scatter_dkv(Builder& B, std::vector<Op>& out, const std::string& n, const Phase& ph, BufferId dkv,
                         BufferId dqkv) {
    const Dims& d = B.d_;
    const BufferId parts =
        B.buffer(n + "cp d k|v by rank", Category::temporary, B.p_.act, d.cp * d.rows * 2 * d.kv_width);
    {
        Op& o = B.emit(out, OpKind::cp_kv_unorder, n + "cp d k|v into rank order", ph);
        o.alloc = {parts};
        o.v[0] = cp_kv_view(d, dkv);
        o.v[1] = gathered_view(d, parts);
        o.free = {dkv};
    }
    // Every rank's queries reached every rank's keys: this rank's K|V gradient is the sum of the
    // cp ranks' contributions to its rows.
    Op& r = B.emit_collective(out, OpKind::reduce_scatter, n + "d k|v context-parallel reduce-scatter", ph, -1);
    r.group = CommGroup::cp;
    r.reduce = ReduceOp::sum;
    r.v[0] = gathered_view(d, parts);
    B.emit_wait(out, B.last_collective, ph);
    Op& o = B.emit(out, OpKind::cp_kv_unpack, n + "cp unpack d k|v", ph);
    o.v[0] = gathered_view(d, parts);
    o.v[1] = B.full(dqkv, d.qkv_width);
    o.free = {parts};
}

}  // namespace preflight::runtime::program_detail
