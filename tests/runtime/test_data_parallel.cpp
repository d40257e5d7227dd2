// Data-parallel programs (dp > 1, ZeRO 0-3): the planner's shard layout (units, chunks,
// padding) from hand-derived numbers, every rank's dry run equal to the preflight-runtime
// prediction to the byte, and the collectives' placement, waits and buffer lifetimes.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "catalog_fixture.hpp"
#include "dry_run_compare.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/runtime_layout.hpp"
#include "preflight/runtime/program.hpp"
#include "preflight/runtime/walker.hpp"

namespace preflight::runtime {
namespace {

Plan dp_plan(std::int64_t dp, int zero, std::int64_t grad_acc = 1) {
    Plan p;
    p.seq = 128;
    p.mbs = 2;
    p.grad_acc = grad_acc;
    p.dp = dp;
    p.zero = static_cast<ZeroStage>(zero);
    return p;
}

// GPT-2 small, by hand (runtime_unit_elements): the embedding unit is the word embedding
// padded to 50,304 rows plus 1,024 positions, x 768; a layer is two LayerNorms (4 x 768),
// q|k|v 2,304 x 768 + bias, out 768 x 768 + bias, fc1 3,072 x 768 + bias, fc2 768 x 3,072 +
// bias; the head unit is the final LayerNorm (the LM head is the tied embedding).
TEST(DataParallelLayout, Gpt2UnitsAndShardsByHand) {
    const ModelConfig m = test::catalog_model("gpt2");
    const RuntimeUnitElements e = runtime_unit_elements(m, 50304);
    EXPECT_EQ(e.embedding, (50304 + 1024) * 768);  // 39,419,904
    EXPECT_EQ(e.layer, 4 * 768 + 2304 * 768 + 2304 + 768 * 768 + 768 + 3072 * 768 + 3072 + 768 * 3072 + 768);
    EXPECT_EQ(e.layer, 7087872);
    EXPECT_EQ(e.head, 2 * 768);

    // dp 8, ZeRO-1: a layer's chunk is ceil(7,087,872 / 8) = 885,984 rounded up to 64 = 886,016,
    // so the unit is padded to 7,088,128; the embedding divides evenly (4,927,488 = 64 x 76,992).
    const RuntimeLayout L = runtime_layout(m, dp_plan(8, 1), 50304);
    ASSERT_EQ(L.units.size(), 14u);
    EXPECT_EQ(L.embedding()->chunk, 4927488);
    EXPECT_EQ(L.embedding()->padded, 39419904);
    EXPECT_EQ(L.units[1].chunk, 886016);
    EXPECT_EQ(L.units[1].padded, 7088128);
    EXPECT_EQ(L.units[1].begin, 39419904);
    EXPECT_EQ(L.units[2].begin, 39419904 + 7088128);
    EXPECT_EQ(L.head()->chunk, 192);  // ceil(1,536 / 8) = 192, a multiple of 64
    EXPECT_EQ(L.shard_elements, 4927488 + 12 * 886016 + 192);
    EXPECT_EQ(L.full_elements, 39419904 + 12 * 7088128 + 1536);
    // The last rank's layer chunk holds 7,087,872 - 7 x 886,016 = 885,760 parameters and 256 padding.
    EXPECT_EQ(L.units[1].owned(7), 885760);
    EXPECT_EQ(L.units[1].owned(0), 886016);

    // dp 64: the head's 1,536 elements make chunks of 64; ranks 24..63 own only padding.
    const RuntimeLayout W = runtime_layout(m, dp_plan(64, 3), 50304);
    EXPECT_EQ(W.head()->chunk, 64);
    EXPECT_EQ(W.head()->owned(23), 64);
    EXPECT_EQ(W.head()->owned(24), 0);
    EXPECT_EQ(W.head()->owned(63), 0);
    // ZeRO-0 does not pad.
    EXPECT_EQ(runtime_layout(m, dp_plan(8, 0), 50304).full_elements, 39419904 + 12 * 7087872 + 1536);
}

TEST(DataParallelLayout, EveryElementOfEveryUnitHasExactlyOneOwner) {
    const ModelConfig m = test::catalog_model("llama-3.2-1b");
    for (std::int64_t dp : {1, 2, 3, 7, 64, 1000})
        for (int zero : {1, 2, 3}) {
            const RuntimeLayout L = runtime_layout(m, dp_plan(dp, zero), 128256);
            std::int64_t shard = 0;
            for (const ShardUnit& u : L.units) {
                EXPECT_EQ(u.chunk % kRuntimeParamAlign, 0) << unit_name(u);
                EXPECT_EQ(u.padded, dp * u.chunk);
                EXPECT_LT(u.padded - u.elements, dp * kRuntimeParamAlign + u.chunk) << unit_name(u);
                std::int64_t covered = 0;
                for (std::int64_t r = 0; r < dp; ++r) covered += u.owned(r);
                EXPECT_EQ(covered, u.elements) << unit_name(u) << " dp " << dp;
                EXPECT_EQ(u.shard_begin, shard);
                shard += u.chunk;
            }
            EXPECT_EQ(L.shard_elements, shard);
        }
}

using test_support::Compared;

TEST(DataParallelDryRun, EveryRankEqualsThePlannerToTheByte) {
    struct Kind {
        Recompute rc;
        Precision pr;
        AttentionKind at;
    };
    const Kind kinds[] = {{Recompute::none, Precision::bf16_mixed, AttentionKind::flash},
                          {Recompute::full, Precision::bf16_mixed, AttentionKind::flash},
                          {Recompute::selective, Precision::bf16_mixed_fp32_grads, AttentionKind::eager},
                          {Recompute::none, Precision::fp32, AttentionKind::eager},
                          {Recompute::full, Precision::bf16, AttentionKind::flash},
                          {Recompute::selective, Precision::fp8_mixed, AttentionKind::flash}};
    int plans = 0;
    std::map<PhaseKind, int> phases;
    // gpt2: tied, learned positions, LayerNorm, GeLU; llama-3.2-1b: tied, RoPE, GQA;
    // a two-layer untied Llama with a large vocabulary (the head unit bigger than a layer).
    const ModelConfig untied = test::llama_model(256, 2, 4, 2, 512, 32000, 256);
    for (const ModelConfig& m : {test::catalog_model("gpt2"), test::catalog_model("llama-3.2-1b"), untied})
        for (std::int64_t dp : {2, 5, 64})
            for (int zero : {0, 1, 2, 3})
                for (const Kind& k : kinds)
                    for (std::int64_t ga : {1, 3}) {
                        Plan p = dp_plan(dp, zero, ga);
                        p.recompute = k.rc;
                        p.precision = k.pr;
                        p.attention = k.at;
                        for (std::int64_t rank : {std::int64_t{0}, dp / 2, dp - 1}) {
                            const Compared c = test_support::compare_with_planner(m, p, rank);
                            const std::string what = m.name + " " + to_flags(p) + " rank " + std::to_string(rank);
                            EXPECT_EQ(c.dry, c.planned) << what << ": dry run peak at " << c.where;
                            EXPECT_EQ(c.dry_phase, c.planned_phase) << what << ": dry run peak at " << c.where;
                            ++plans;
                            ++phases[c.planned_phase];
                        }
                    }
    EXPECT_EQ(plans, 3 * 3 * 4 * 6 * 2 * 3);
    // The grid reaches the peaks the ZeRO buffers move: the output layer and the backward.
    EXPECT_GT(phases[PhaseKind::output_loss], 0);
    EXPECT_GT(phases[PhaseKind::backward], 0);
}

// Walks a program checking the collectives: what they read and write is live, a buffer a
// collective touched is freed only after the compute stream waited for it, every collective is
// waited for before the step ends, and waits name a collective already issued.
class CollectiveChecker final : public OpRunner {
public:
    explicit CollectiveChecker(const Program& p) : P(p) {}
    void run(const Op& op, const BufferTable& t) override {
        if (op.kind == OpKind::comm_wait) {
            const std::int64_t target = issued_ - 1 - op.comm_back;
            EXPECT_GE(target, 0) << describe(P, op);
            waited_ = std::max(waited_, target);  // the communication stream is in order: all before it are done
        }
        if (is_collective(op.kind)) {
            for (const View& v : op.v)
                if (v.buffer != kNoBuffer) {
                    EXPECT_NE(t[static_cast<std::size_t>(v.buffer)], nullptr) << describe(P, op) << " uses dead " << name(v.buffer);
                    last_use_[v.buffer] = issued_;
                }
            sequence.push_back({op.kind, op.unit, op.v[0].rows * op.v[0].cols});
            ++issued_;
        }
        for (BufferId b : op.free) {  // freed after this op: the last collective on it must be waited for
            auto it = last_use_.find(b);
            if (it != last_use_.end()) EXPECT_LE(it->second, waited_) << describe(P, op) << " frees " << name(b);
        }
    }
    void end_of_step() const { EXPECT_EQ(waited_, issued_ - 1) << "collectives left in flight at the end of the step"; }
    struct Call {
        OpKind kind;
        std::int64_t unit, count;
        bool operator==(const Call&) const = default;
    };
    std::vector<Call> sequence;

private:
    std::string name(BufferId b) const { return P.buffers[static_cast<std::size_t>(b)].name; }
    const Program& P;
    std::int64_t issued_ = 0, waited_ = -1;
    std::map<BufferId, std::int64_t> last_use_;
};

TEST(DataParallelProgram, CollectivesAreWaitedForBeforeTheirBuffersGoAndRanksAgree) {
    for (const char* name : {"gpt2", "llama-3.2-1b"})
        for (int zero : {0, 1, 2, 3})
            for (Precision pr : {Precision::bf16_mixed, Precision::bf16_mixed_fp32_grads})
                for (std::int64_t ga : {1, 2, 4}) {
                    const ModelConfig m = test::catalog_model(name);
                    Plan p = dp_plan(4, zero, ga);
                    p.precision = pr;
                    std::vector<CollectiveChecker::Call> first;
                    for (std::int64_t rank = 0; rank < 4; ++rank) {
                        const Program prog = build_program(m, p, rank);
                        DryBackend backend;
                        TrackingAllocator alloc(backend);
                        BufferTable table;
                        CollectiveChecker check(prog);
                        walk(prog, prog.setup, alloc, table, nullptr, "set-up");
                        walk(prog, prog.step, alloc, table, &check, "step", 1);
                        check.end_of_step();
                        walk(prog, prog.teardown, alloc, table, nullptr, "teardown");
                        // Every rank issues the same collectives in the same order (no deadlock).
                        if (rank == 0)
                            first = check.sequence;
                        else
                            EXPECT_EQ(check.sequence, first) << name << " zero " << zero << " rank " << rank;
                    }
                    // How many: (L + 2) units; ZeRO-0/1 reduce once per step, ZeRO-2/3 every
                    // micro-batch (a tied embedding twice: the head's share, then its own);
                    // ZeRO-1/2 gather the updated units once; ZeRO-3 gathers every unit for
                    // forward and backward (the tied embedding also for the head) per micro-batch.
                    const std::int64_t units = m.layers + 2, tied = m.tied_embeddings ? 1 : 0;
                    std::int64_t want = 0;
                    if (zero <= 1) want = units;
                    if (zero >= 2) want = ga * (units + tied);
                    if (zero == 1 || zero == 2) want += units;
                    if (zero == 3) want += ga * (1 + m.layers + 1 + tied + m.layers);
                    EXPECT_EQ(static_cast<std::int64_t>(first.size()), want) << name << " zero " << zero << " ga " << ga;
                }
}

TEST(DataParallelProgram, OneGpuWithoutZeroHasNoCollectives) {
    for (Precision pr : {Precision::fp32, Precision::bf16_mixed, Precision::bf16_mixed_fp32_grads, Precision::bf16}) {
        Plan p = dp_plan(1, 0, 3);
        p.precision = pr;
        const Program prog = build_program(test::catalog_model("gpt2"), p);
        for (const Op& op : prog.step)
            EXPECT_FALSE(is_collective(op.kind) || op.kind == OpKind::comm_wait || op.kind == OpKind::unit_grads_begin)
                << to_string(pr) << ": " << describe(prog, op);
    }
}

TEST(DataParallelProgram, RefusesARankOutsideThePlanNamingTheFlag) {
    const ModelConfig m = test::catalog_model("gpt2");
    for (std::int64_t rank : {-1, 8, 9}) try {
            build_program(m, dp_plan(8, 1), rank);
            ADD_FAILURE() << "accepted rank " << rank;
        } catch (const InputError& e) {
            EXPECT_EQ(e.subject(), "--emulate-rank");
        }
}

}  // namespace
}  // namespace preflight::runtime
