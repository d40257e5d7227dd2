// The step program: buffers balanced, every operand live when its op runs and
// inside its buffer, parameters as the planner counts them, unsupported plans refused.
#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "catalog_fixture.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/throughput.hpp"
#include "preflight/runtime/program.hpp"
#include "preflight/runtime/walker.hpp"

namespace preflight::runtime {
namespace {

Plan plan_of(std::int64_t seq, std::int64_t mbs, std::int64_t ga, Recompute rc, Precision pr, AttentionKind at) {
    Plan p;
    p.seq = seq;
    p.mbs = mbs;
    p.grad_acc = ga;
    p.recompute = rc;
    p.precision = pr;
    p.attention = at;
    return p;
}

// Checks each operand of each op while the walk runs.
class OperandChecker final : public OpRunner {
public:
    explicit OperandChecker(const Program& p) : p_(p) {}
    void run(const Op& op, const BufferTable& t) override {
        for (const View& v : op.v) {
            if (v.buffer == kNoBuffer) continue;
            ASSERT_LT(static_cast<std::size_t>(v.buffer), t.size());
            EXPECT_NE(t[static_cast<std::size_t>(v.buffer)], nullptr)
                << describe(p_, op) << " reads " << p_.buffers[static_cast<std::size_t>(v.buffer)].name
                << " which is not allocated";
            const std::int64_t last = v.offset + (v.rows - 1) * v.ld + v.cols;
            EXPECT_LE(last, p_.buffers[static_cast<std::size_t>(v.buffer)].elements) << describe(p_, op);
            EXPECT_GE(v.ld, v.cols) << describe(p_, op);
        }
        for (ParamId id : {op.p0, op.p1})
            if (id != kNoParam) EXPECT_LT(static_cast<std::size_t>(id), p_.params.size());
        ++ops;
    }
    const Program& p_;
    int ops = 0;
};

TEST(Program, EveryOperandIsLiveAndInBoundsForEveryPlanKind) {
    // A Mixtral shape (4 experts, top-2) whose attention widths take fp8 GEMMs (h 32, q 32, k|v 16).
    const nlohmann::json moe = {{"model_type", "mixtral"},  {"hidden_size", 32},        {"num_hidden_layers", 2},
                                {"num_attention_heads", 2}, {"num_key_value_heads", 1}, {"intermediate_size", 24},
                                {"vocab_size", 100},        {"max_position_embeddings", 256},
                                {"num_local_experts", 4},   {"num_experts_per_tok", 2}};
    for (const ModelConfig& m : {test::catalog_model("gpt2"), test::catalog_model("llama-3.2-1b"),
                                 model_from_hf_config(moe, "mixtral-test")}) {
        const std::string& name = m.name;
        for (auto rc : all_recomputes())
            for (auto at : {AttentionKind::flash, AttentionKind::eager})
                for (auto pr : {Precision::fp32, Precision::bf16_mixed, Precision::bf16_mixed_fp32_grads,
                                Precision::bf16, Precision::fp8_mixed})
                    for (auto opt : {Optimizer::adamw, Optimizer::sgd}) {
                        Plan p = plan_of(128, 2, 2, rc, pr, at);
                        p.optimizer = opt;
                        const Program prog = build_program(m, p);
                        DryBackend be;
                        TrackingAllocator a(be);
                        BufferTable t;
                        OperandChecker check(prog);
                        walk(prog, prog.setup, a, t, &check);
                        const std::int64_t persistent = a.current_total();
                        walk(prog, prog.step, a, t, &check);
                        EXPECT_EQ(a.current_total(), persistent) << name << ": a step leaks";
                        walk(prog, prog.step, a, t, &check);  // a second step reuses the same ids
                        walk(prog, prog.teardown, a, t, &check);
                        EXPECT_EQ(a.current_total(), 0);
                        EXPECT_EQ(a.live_allocations(), 0);
                    }
    }
}

TEST(Program, EachStepBufferIsAllocatedOnceAndFreedOnce) {
    const ModelConfig m = test::catalog_model("llama-3.2-1b");
    for (auto rc : all_recomputes())
        for (auto at : {AttentionKind::flash, AttentionKind::eager}) {
            const Program prog = build_program(m, plan_of(256, 1, 3, rc, Precision::bf16_mixed, at));
            std::vector<int> allocs(prog.buffers.size()), frees(prog.buffers.size());
            for (const Op& o : prog.step) {
                for (BufferId b : o.alloc) ++allocs[static_cast<std::size_t>(b)];
                for (BufferId b : o.free) ++frees[static_cast<std::size_t>(b)];
            }
            for (std::size_t b = 0; b < prog.buffers.size(); ++b) {
                EXPECT_EQ(allocs[b], frees[b]) << prog.buffers[b].name;
                EXPECT_LE(allocs[b], 3) << prog.buffers[b].name;  // at most once per micro-batch
            }
        }
}

TEST(Program, ParametersMatchThePlannerCountWithPaddedVocabulary) {
    for (const char* name : {"gpt2", "gpt2-medium", "llama-3.2-1b", "llama-3-8b", "smollm-360m"}) {
        const ModelConfig m = test::catalog_model(name);
        const Program prog = build_program(m, plan_of(512, 1, 1, Recompute::none, Precision::bf16_mixed,
                                                       AttentionKind::flash));
        const ParamCounts c = count_params(m);
        const std::int64_t vp = prog.dims.vocab_padded;
        const std::int64_t pad = (vp - m.vocab) * m.hidden * (m.tied_embeddings ? 1 : 2);
        std::int64_t sum = 0;
        for (const auto& p : prog.params) sum += p.numel();
        EXPECT_EQ(sum, c.total + pad) << name;
        EXPECT_EQ(prog.param_elements, c.total + pad) << name << ": alignment padding added";
        EXPECT_EQ(vp % kRuntimeVocabPadMultiple, 0);
    }
}

TEST(Program, PrecisionRecipesPickTheContractsBuffers) {
    const ModelConfig m = test::catalog_model("gpt2");
    auto bytes_of = [&](Precision pr, Category c) {
        const Program prog = build_program(m, plan_of(256, 1, 1, Recompute::none, pr, AttentionKind::flash));
        std::int64_t b = 0;
        for (BufferId id : prog.setup.front().alloc)
            if (prog.buffers[static_cast<std::size_t>(id)].category == c) b += prog.buffers[static_cast<std::size_t>(id)].bytes();
        return std::pair{b, prog.param_elements};
    };
    // docs/interface.md: weights / gradients / master bytes per parameter.
    for (auto [pr, w, g, mst] : {std::tuple{Precision::fp32, 4, 4, 0}, std::tuple{Precision::bf16_mixed, 2, 2, 4},
                                 std::tuple{Precision::bf16_mixed_fp32_grads, 2, 6, 4}, std::tuple{Precision::bf16, 2, 2, 0}}) {
        auto [wb, n] = bytes_of(pr, Category::weights);
        EXPECT_EQ(wb, w * n);
        EXPECT_EQ(bytes_of(pr, Category::gradients).first, g * n);
        EXPECT_EQ(bytes_of(pr, Category::master).first, mst * n);
        EXPECT_EQ(bytes_of(pr, Category::optimizer).first, 8 * n);  // AdamW: two fp32 moments
    }
}

TEST(Program, RefusesPlansTheRuntimeCannotRunNamingTheFlag) {
    const ModelConfig m = test::catalog_model("gpt2");
    auto refused = [&](auto edit, const std::string& flag) {
        Plan p = plan_of(256, 1, 1, Recompute::none, Precision::bf16_mixed, AttentionKind::flash);
        edit(p);
        try {
            build_program(m, p);
            ADD_FAILURE() << "accepted a plan with " << flag;
        } catch (const InputError& e) {
            EXPECT_EQ(e.subject(), flag);
        }
    };
    refused([](Plan& p) { p.pp = 2, p.pp_schedule = PpSchedule::gpipe; }, "--pp-schedule");
    refused([](Plan& p) { p.dropout = 0.1; }, "--dropout");
    refused([](Plan& p) { p.precision = Precision::fp16_mixed; }, "--precision");
    // fp8-mixed runs with per-tensor scaling and GEMM dimensions multiples of 16 (ZeRO-3 and --sp too).
    refused([](Plan& p) { p.precision = Precision::fp8_mixed, p.fp8_scaling = Fp8Scaling::rowwise; }, "--fp8-scaling");
    refused([](Plan& p) { p.precision = Precision::fp8_mixed, p.seq = 250; }, "--seq");
    // ... and a tensor-parallel rank's slices too: 96 / 4 = 24 columns of the MLP per rank.
    try {
        Plan p = plan_of(256, 1, 1, Recompute::none, Precision::fp8_mixed, AttentionKind::flash);
        p.tp = 4;
        build_program(test::llama_model(64, 2, 4, 4, 96, 64, 256), p);
        ADD_FAILURE() << "accepted fp8 GEMMs 24 wide";
    } catch (const InputError& e) {
        EXPECT_EQ(e.subject(), "--model");
        EXPECT_NE(std::string(e.what()).find("intermediate_size / --tp = 24"), std::string::npos) << e.what();
    }
    // Mixtral's experts run, but dropless: a capacity factor is refused (check_runtime_plan).
    Plan capacity = plan_of(256, 1, 1, Recompute::none, Precision::bf16_mixed, AttentionKind::flash);
    capacity.moe_capacity_factor = 1.25;
    EXPECT_THROW(build_program(test::catalog_model("mixtral-8x7b"), capacity), InputError);
}

TEST(Program, MicroBatchesShareTheFirstOnesBuffersSoTheTableDoesNotGrow) {
    // Was: every micro-batch added its own ~500 buffers and ~1,000 ops with fresh strings
    // (Llama-3-8B, 635 micro-batches: 1.1 GB and 12.5 s for a dry run); until 2026-11-30 the
    // ops still grew with the micro-batches. Now micro-batches 4.. are micro-batch 4's ops run
    // again (Program::repeat).
    const ModelConfig m = test::catalog_model("gpt2");
    const Program one = build_program(m, plan_of(128, 1, 1, Recompute::full, Precision::bf16_mixed, AttentionKind::eager));
    const Program eight = build_program(m, plan_of(128, 1, 8, Recompute::full, Precision::bf16_mixed, AttentionKind::eager));
    EXPECT_EQ(eight.buffers.size(), one.buffers.size());
    // zero_grads, micro-batches 1 to 4, the optimizer step: 2 + 4 x (ops of one micro-batch),
    // micro-batch 4's ops run 5 times (micro-batches 4 to 8): 2 + 8 x per micro-batch run.
    const std::size_t per_mb = one.step.size() - 2;
    ASSERT_EQ(eight.step.size(), 2 + 4 * per_mb);
    EXPECT_EQ(eight.repeat.begin, 1 + 3 * per_mb);
    EXPECT_EQ(eight.repeat.end, 1 + 4 * per_mb);
    EXPECT_EQ(eight.repeat.times, 5);
    EXPECT_EQ(eight.step_ops_run(), static_cast<std::int64_t>(2 + 8 * per_mb));
    EXPECT_EQ(one.repeat.times, 1);
    for (std::size_t k = 0; k < 4; ++k)
        for (std::size_t i = 0; i < per_mb; ++i) {
            const Op& a = one.step[1 + i];
            const Op& b = eight.step[1 + k * per_mb + i];
            ASSERT_EQ(b.kind, a.kind);
            ASSERT_EQ(b.name, a.name);
            ASSERT_EQ(b.alloc, a.alloc);
            ASSERT_EQ(b.free, a.free);
            ASSERT_EQ(b.phase.layer, a.phase.layer);
            ASSERT_EQ(b.phase.micro_batch, static_cast<std::int64_t>(k + 1));
        }
}

TEST(Program, OpsCarryTheirPhaseInStepOrder) {
    const ModelConfig m = test::catalog_model("gpt2");
    const Program prog = build_program(m, plan_of(128, 1, 2, Recompute::none, Precision::bf16_mixed, AttentionKind::eager));
    EXPECT_EQ(prog.step.front().phase.kind, PhaseKind::step_start);
    EXPECT_EQ(prog.step.back().phase.kind, PhaseKind::optimizer_step);
    EXPECT_EQ(prog.step.back().kind, OpKind::optimizer);
    std::int64_t last_mb = 0;
    for (const Op& o : prog.step) {
        if (o.phase.micro_batch > 0) {
            EXPECT_GE(o.phase.micro_batch, last_mb);
            last_mb = o.phase.micro_batch;
        }
    }
    EXPECT_EQ(last_mb, 2);
    std::set<OpKind> kinds;
    for (const Op& o : prog.step) kinds.insert(o.kind);
    for (OpKind k : {OpKind::eager_scores, OpKind::eager_softmax, OpKind::eager_pv, OpKind::eager_dp,
                     OpKind::eager_softmax_bwd, OpKind::eager_dqkv, OpKind::gelu_fwd, OpKind::gelu_bwd,
                     OpKind::cross_entropy, OpKind::embedding_bwd})
        EXPECT_TRUE(kinds.count(k)) << to_string(k);
    EXPECT_FALSE(kinds.count(OpKind::rope_fwd));  // GPT-2: learned positions
}

// The planner charges the runtime's column-sum kernels (planner runtime_column_sum_rows) by the
// rows they walk: the program's norm backward ops (weight gradients) and the weight-gradient ops
// of linears with a bias, every rank kind, with and without sequence and pipeline parallelism.
TEST(Program, ColumnSumRowsAreThePlannersForEveryRank) {
    for (const char* name : {"gpt2", "llama-3.2-1b"}) {
        const ModelConfig m = test::catalog_model(name);
        for (auto [tp, sp, pp, rc] : {std::tuple{1L, false, 1L, Recompute::none}, std::tuple{2L, false, 1L, Recompute::full},
                                      std::tuple{2L, true, 2L, Recompute::selective}, std::tuple{1L, false, 4L, Recompute::none}}) {
            Plan p = plan_of(128, 2, 4, rc, Precision::bf16_mixed, AttentionKind::flash);
            p.tp = tp;
            p.sp = sp;
            p.pp = pp;
            p = resolve_defaults(p, m);
            const RuntimeColumnSumRows planner = runtime_column_sum_rows(m, p);
            for (std::int64_t rank = 0; rank < p.gpus(); ++rank) {
                const Program prog = build_program(m, p, rank);
                std::int64_t rows = 0;
                for (const Op& o : prog.step)
                    if (o.kind == OpKind::norm_bwd || (o.kind == OpKind::linear_bwd_weight && o.p1 != kNoParam))
                        rows += o.v[0].rows;
                const std::int64_t expected =
                    p.grad_acc * (prog.dims.layers * planner.per_layer + (prog.dims.last_stage ? planner.final_norm : 0));
                EXPECT_EQ(rows, expected) << name << " " << to_flags(p) << " rank " << rank;
            }
        }
    }
}

}  // namespace
}  // namespace preflight::runtime
