// Context parallelism in the runtime (runtime/src/program_cp.cpp): the token placement by hand,
// the CPU reference's cp attention against whole-sequence attention, the ranks of cp plans
// together against one GPU running the same global batch (loopback ranks in threads, in double),
// and each cp rank's dry run against the planner's preflight-runtime profile.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>

#include "catalog_fixture.hpp"
#include "dry_run_compare.hpp"
#include "host_parity.hpp"
#include "preflight/runtime/context_parallel.hpp"
#include "preflight/runtime/host_runner.hpp"
#include "preflight/runtime/reference.hpp"
#include "preflight/runtime/reference_model.hpp"
#include "preflight/runtime/runtime.hpp"

namespace preflight::runtime {
namespace {

using Vec = std::vector<double>;

// Megatron-LM's placement, worked by hand: s_full 8 at cp 2 is 4 chunks of 2 tokens; rank 0 holds
// chunks 0 and 3 (positions 0, 1, 6, 7), rank 1 chunks 1 and 2 (2, 3, 4, 5).
TEST(ContextParallel, EachRankHoldsChunksRAnd2CpMinus1MinusR) {
    const std::vector<std::int64_t> r0 = {0, 1, 6, 7}, r1 = {2, 3, 4, 5};
    for (std::int64_t i = 0; i < 4; ++i) {
        EXPECT_EQ(cp_position(i, 4, 2, 0), r0[static_cast<std::size_t>(i)]);
        EXPECT_EQ(cp_position(i, 4, 2, 1), r1[static_cast<std::size_t>(i)]);
    }
    // The gathered buffer [cp][b][s_local] at b 2: position 6 of sequence 1 is rank 0's local
    // token 2 of sequence 1, row (0 x 2 + 1) x 4 + 2 = 6; position 3 of sequence 0 is rank 1's
    // token 1, row (1 x 2 + 0) x 4 + 1 = 9.
    EXPECT_EQ(cp_gathered_row(1, 6, 2, 4, 2), 6);
    EXPECT_EQ(cp_gathered_row(0, 3, 2, 4, 2), 9);
    for (std::int64_t cp : {2, 3, 4}) {  // every position once over the ranks, and the row map agrees
        const std::int64_t s_local = 6, b = 2;
        std::set<std::int64_t> seen;
        for (std::int64_t r = 0; r < cp; ++r)
            for (std::int64_t i = 0; i < s_local; ++i) {
                const std::int64_t p = cp_position(i, s_local, cp, r);
                EXPECT_TRUE(seen.insert(p).second) << "cp " << cp << " position " << p << " twice";
                EXPECT_EQ(cp_gathered_row(1, p, b, s_local, cp), (r * b + 1) * s_local + i);
            }
        EXPECT_EQ(static_cast<std::int64_t>(seen.size()), cp * s_local);
        EXPECT_EQ(*seen.rbegin(), cp * s_local - 1);
    }
}

// The cp ranks' attention, each on its own queries against the whole sequence's K and V, gives
// whole-sequence causal attention: outputs and log-sum-exps at each rank's positions, dQ there,
// and dK, dV summed over the ranks; through a sliding window of 5 keys too (across the chunks).
TEST(ContextParallel, RanksTogetherComputeWholeSequenceAttention) {
    for (const auto [cp, window] : {std::pair<std::int64_t, std::int64_t>{2, 0}, {3, 0}, {2, 5}, {3, 5}}) {
        ref::AttnShape whole{2, 12, 4, 2, 4};  // b 2, s 12, 4 query heads on 2 KV heads, d 4
        whole.window = window;
        const std::int64_t C = whole.qkv_width(), W = 2 * whole.kv_width(), S = whole.s, rows = whole.b * S;
        std::mt19937_64 gen(11);
        std::normal_distribution<double> nd(0.0, 1.0);
        Vec qkv(static_cast<std::size_t>(rows * C)), dout(static_cast<std::size_t>(rows * whole.heads * whole.d));
        for (double& v : qkv) v = nd(gen);
        for (double& v : dout) v = nd(gen);
        Vec out(dout.size()), lse(static_cast<std::size_t>(whole.b * whole.heads * S)), dqkv(qkv.size());
        ref::attention_fwd(qkv.data(), out.data(), lse.data(), whole);
        ref::attention_bwd(qkv.data(), dout.data(), dqkv.data(), whole);

        Vec kv(static_cast<std::size_t>(rows * W)), dkv_sum(kv.size(), 0.0);
        for (std::int64_t r = 0; r < rows; ++r)
            std::copy_n(qkv.begin() + r * C + whole.heads * whole.d, W, kv.begin() + r * W);
        double worst = 0;
        for (std::int64_t rank = 0; rank < cp; ++rank) {
            ref::AttnShape a = whole;
            a.s = S / cp;
            a.cp = cp;
            a.cp_rank = rank;
            const std::int64_t lrows = a.b * a.s, OW = a.heads * a.d;
            Vec q(static_cast<std::size_t>(lrows * C)), dl(static_cast<std::size_t>(lrows * OW));
            for (std::int64_t bi = 0; bi < a.b; ++bi)
                for (std::int64_t i = 0; i < a.s; ++i) {
                    const std::int64_t g = bi * S + cp_position(i, a.s, cp, rank), l = bi * a.s + i;
                    std::copy_n(qkv.begin() + g * C, C, q.begin() + l * C);
                    std::copy_n(dout.begin() + g * OW, OW, dl.begin() + l * OW);
                }
            Vec o(dl.size()), ls(static_cast<std::size_t>(a.b * a.heads * a.s)), dq(q.size(), -7.0), dkv(kv.size());
            ref::attention_fwd_cp(q.data(), kv.data(), o.data(), ls.data(), a);
            ref::attention_bwd_cp(q.data(), kv.data(), dl.data(), dq.data(), dkv.data(), a);
            for (std::size_t i = 0; i < dkv.size(); ++i) dkv_sum[i] += dkv[i];
            for (std::int64_t bi = 0; bi < a.b; ++bi)
                for (std::int64_t i = 0; i < a.s; ++i) {
                    const std::int64_t g = bi * S + cp_position(i, a.s, cp, rank), l = bi * a.s + i;
                    for (std::int64_t j = 0; j < OW; ++j) {
                        worst = std::max(worst, std::abs(o[static_cast<std::size_t>(l * OW + j)] - out[static_cast<std::size_t>(g * OW + j)]));
                        worst = std::max(worst, std::abs(dq[static_cast<std::size_t>(l * C + j)] - dqkv[static_cast<std::size_t>(g * C + j)]));
                    }
                    for (std::int64_t j = OW; j < C; ++j)  // the K|V columns are left to cp_kv_unpack
                        EXPECT_EQ(dq[static_cast<std::size_t>(l * C + j)], -7.0);
                    for (std::int64_t h = 0; h < a.heads; ++h)
                        worst = std::max(worst, std::abs(ls[static_cast<std::size_t>((bi * a.heads + h) * a.s + i)] -
                                                         lse[static_cast<std::size_t>((bi * a.heads + h) * S + (g - bi * S))]));
                }
        }
        for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t j = 0; j < W; ++j)
                worst = std::max(worst, std::abs(dkv_sum[static_cast<std::size_t>(r * W + j)] -
                                                 dqkv[static_cast<std::size_t>(r * C + whole.heads * whole.d + j)]));
        EXPECT_LT(worst, 1e-12) << "cp " << cp << " window " << window;
    }
}

// pack (into each rank's chunk, as the all-gather places it), order, then unorder and unpack: the round trip returns each
// rank's K|V columns, and the ordered buffer is the whole sequence's K|V in sequence order.
TEST(ContextParallel, KvMovesPutTheWholeSequenceInOrderAndBack) {
    const std::int64_t cp = 2, b = 2, s_full = 8, kvw = 2, heads = 2;
    ref::AttnShape a{b, s_full / cp, heads, 1, kvw};
    a.cp = cp;
    const std::int64_t C = a.qkv_width(), W = 2 * a.kv_width(), rows = b * a.s;
    Vec gathered(static_cast<std::size_t>(cp * rows * W), -1.0);
    std::vector<Vec> local(static_cast<std::size_t>(cp), Vec(static_cast<std::size_t>(rows * C)));
    for (std::int64_t r = 0; r < cp; ++r) {
        a.cp_rank = r;
        for (std::int64_t l = 0; l < rows; ++l)  // element j of a K|V row: 100 x sequence + 10 x position + j
            for (std::int64_t j = 0; j < C; ++j)
                local[static_cast<std::size_t>(r)][static_cast<std::size_t>(l * C + j)] =
                    j < heads * kvw ? -3.0
                                    : static_cast<double>(100 * (l / a.s) + 10 * cp_position(l % a.s, a.s, cp, r) + (j - heads * kvw));
        ref::cp_kv_pack(local[static_cast<std::size_t>(r)].data(), gathered.data() + r * rows * W, a);
    }
    Vec ordered(gathered.size());
    ref::cp_kv_order(gathered.data(), ordered.data(), a);
    for (std::int64_t bi = 0; bi < b; ++bi)
        for (std::int64_t p = 0; p < s_full; ++p)
            for (std::int64_t j = 0; j < W; ++j)
                EXPECT_EQ(ordered[static_cast<std::size_t>((bi * s_full + p) * W + j)], 100.0 * bi + 10.0 * p + j);
    Vec back(gathered.size());
    ref::cp_kv_unorder(ordered.data(), back.data(), a);
    EXPECT_EQ(back, gathered);
    for (std::int64_t r = 0; r < cp; ++r) {
        a.cp_rank = r;
        Vec q(static_cast<std::size_t>(rows * C), -3.0);
        ref::cp_kv_unpack(back.data(), q.data(), a);
        EXPECT_EQ(q, local[static_cast<std::size_t>(r)]);
    }
}

ModelConfig micro_llama() { return test::llama_model(16, 2, 4, 2, 24, 13, 32); }  // untied, GQA, RoPE

using test_support::compare;
using test_support::Worst;

TEST(ContextParallel, CpRanksMatchOneGpuRunningWholeSequences) {
    struct Case {
        std::int64_t dp, tp, pp, cp;
        int zero;
        Recompute rc;
        bool sp;
    };
    const Case cases[] = {
        {1, 1, 1, 2, 0, Recompute::none, false},      {2, 1, 1, 2, 1, Recompute::none, false},
        {1, 1, 1, 4, 3, Recompute::selective, false}, {1, 2, 1, 2, 0, Recompute::full, true},
        {1, 1, 2, 2, 2, Recompute::none, false},      {2, 1, 1, 2, 2, Recompute::full, false},
    };
    Worst worst;
    int n = 0;
    for (const Case& c : cases)
        for (Precision pr : {Precision::fp32, Precision::bf16_mixed}) {
            Plan p;
            p.seq = 16;
            p.mbs = 2;
            p.grad_acc = 2;
            p.dp = c.dp;
            p.tp = c.tp;
            p.pp = c.pp;
            p.cp = c.cp;
            p.sp = c.sp;
            p.zero = static_cast<ZeroStage>(c.zero);
            p.recompute = c.rc;
            p.precision = pr;
            const Worst w = compare(micro_llama(), p, 2);
            EXPECT_LE(w.loss, 1e-9) << to_flags(p);
            EXPECT_LE(w.param, 1e-9) << to_flags(p);
            worst.loss = std::max(worst.loss, w.loss);
            worst.param = std::max(worst.param, w.param);
            ++n;
        }
    std::printf("cp ranks vs one GPU, 2 steps, %d cases: worst loss %.2e, worst parameter %.2e (relative)\n", n,
                worst.loss, worst.param);
    EXPECT_EQ(n, 12);
}

// cp 3 (chunks of 2 tokens) and cp 2 under the interleaved schedule (4 layers, pp 2 x 2 chunks of one
// layer, the chunks' passes in Megatron-LM's order) also match one GPU.
TEST(ContextParallel, Cp3AndAnInterleavedPipelineMatchOneGpu) {
    Plan three;
    three.seq = 12;
    three.mbs = 2;
    three.grad_acc = 2;
    three.cp = 3;
    three.zero = ZeroStage{1};
    Plan inter;
    inter.seq = 16;
    inter.mbs = 1;
    inter.grad_acc = 2;
    inter.pp = 2;
    inter.pp_schedule = PpSchedule::interleaved;
    inter.vpp = 2;
    inter.cp = 2;
    for (const auto& [m, p] : {std::pair{micro_llama(), three}, std::pair{test::llama_model(16, 4, 4, 2, 24, 13, 32), inter}}) {
        const Worst w = compare(m, p, 2);
        EXPECT_LE(w.loss, 1e-9) << to_flags(p);
        EXPECT_LE(w.param, 1e-9) << to_flags(p);
    }
}

// What each cp rank's program allocates is what the planner's preflight-runtime profile predicts
// (plan_extensions.cpp cp_gathered_kv_bytes): the peak and the phase it falls in, at 8k and 32k.
TEST(ContextParallel, DryRunsEqualThePlanner) {
    int plans = 0;
    for (const char* name : {"qwen2.5-7b", "llama-3.2-3b"})  // 32k and 128k positions
        for (std::int64_t seq : {8192, 32768})
            for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full})
                for (auto [tp, sp] : {std::pair{1, false}, std::pair{4, true}}) {
                    Plan p;
                    p.seq = seq;
                    p.mbs = 1;
                    p.grad_acc = 4;
                    p.dp = 2;
                    p.tp = tp;
                    p.sp = sp;
                    p.cp = 4;
                    p.zero = ZeroStage{1};
                    p.recompute = rc;
                    for (std::int64_t rank : {std::int64_t{0}, p.gpus() - 1}) {
                        const test_support::Compared c = test_support::compare_with_planner(test::catalog_model(name), p, rank);
                        const std::string what = std::string(name) + " " + to_flags(p) + " rank " + std::to_string(rank);
                        EXPECT_EQ(c.dry, c.planned) << what << ": dry run peak at " << c.where;
                        EXPECT_EQ(c.dry_phase, c.planned_phase) << what << ": dry run peak at " << c.where;
                        ++plans;
                    }
                }
    EXPECT_EQ(plans, 2 * 2 * 3 * 2 * 2);
}

// Where a cp rank's peak falls in a layer's flash attention backward (a small vocabulary keeps the
// output layer below it: 8 heads of 128, 256 tokens, 64k at cp 2 and 4), its K/V buffers and the
// kernel's workspace decide the peak: the walk still equals the planner to the byte.
TEST(ContextParallel, DryRunsPeakingInTheFlashBackwardEqualThePlanner) {
    const ModelConfig m = test::llama_model(1024, 2, 8, 8, 2048, 256, 131072);
    int flash_peaks = 0, plans = 0;
    for (std::int64_t cp : {2, 4})
        for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full})
            for (auto [tp, sp] : {std::pair{1, false}, std::pair{2, true}})
                for (Precision pr : {Precision::bf16_mixed, Precision::fp32}) {
                    Plan p;
                    p.seq = 65536;
                    p.grad_acc = 2;
                    p.dp = 2;
                    p.tp = tp;
                    p.sp = sp;
                    p.cp = cp;
                    p.zero = ZeroStage{1};
                    p.recompute = rc;
                    p.precision = pr;
                    const test_support::Compared c = test_support::compare_with_planner(m, p, p.gpus() - 1);
                    EXPECT_EQ(c.dry, c.planned) << to_flags(p) << ": dry run peak at " << c.where;
                    EXPECT_EQ(c.dry_phase, c.planned_phase) << to_flags(p) << ": dry run peak at " << c.where;
                    flash_peaks += c.where.find("flash attention bwd") != std::string::npos ? 1 : 0;
                    ++plans;
                }
    std::printf("cp walks peaking in the flash backward: %d of %d\n", flash_peaks, plans);
    EXPECT_GE(flash_peaks, plans / 2);
}

// fp8's cuBLASLt GEMMs need a rank's rows, seq / cp x mbs, to be a multiple of 16: 8,208 tokens at
// cp 2 leave 4,104 (16 x 256.5) and are refused, naming --seq; 8,224 leave 4,112 (16 x 257).
TEST(ContextParallel, Fp8NeedsEachRanksRowsAMultipleOf16) {
    Plan p;
    p.seq = 8208;
    p.cp = 2;
    p.precision = Precision::fp8_mixed;
    const ModelConfig m = test::catalog_model("llama-3.2-1b");
    try {
        check_supported(m, resolve_defaults(p, m));
        ADD_FAILURE() << "4,104 rows a rank were accepted for fp8";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("--seq / --cp x --mbs = 4104"), std::string::npos) << e.what();
    }
    p.seq = 8224;
    EXPECT_NO_THROW(check_supported(m, resolve_defaults(p, m)));
}

// The runtime's K/V exchange is waited for at once (program_cp.cpp): per layer and micro-batch three
// all-gathers (forward, recomputed forward, backward) and one reduce-scatter, each moving (cp - 1) /
// cp of the sequence's K|V. Llama-3.2-1B (16 layers, 8 KV heads of 64) at seq 8192, cp 2, selective
// recompute, 2 micro-batches: (cp - 1) x 2 x 4,096 tokens x 512 x 2 B = 8,388,608 B a collective,
// 2 x 16 x 4 of them over the H100's NVLink at the runtime's bus efficiency.
TEST(ContextParallel, PredictedExchangeIsEveryGatherAndReduceScatterExposed) {
    Plan p;
    p.seq = 8192;
    p.cp = 2;
    p.grad_acc = 2;
    p.recompute = Recompute::selective;
    const GpuSpec gpu = test::catalog_gpu("h100-sxm-80gb");
    ASSERT_TRUE(gpu.runtime.has_value());
    const double bus = gpu.intra_node_bandwidth_bytes_per_s * gpu.runtime->efficiency.collective_bus_efficiency;
    const Predicted pr = predict(test::catalog_model("llama-3.2-1b"), gpu, p, RunOptions{});
    ASSERT_TRUE(pr.cp_communication_s.has_value());
    EXPECT_NEAR(*pr.cp_communication_s, 2 * 16 * 4 * 8388608.0 / bus, 1e-9);
}

// Learned positions would need the same placement in the embedding: refused, naming --cp.
TEST(ContextParallel, LearnedPositionsAreRefusedNamingCp) {
    Plan p;
    p.seq = 16;
    p.cp = 2;
    try {
        build_program(test::gpt_model(16, 2, 2, 13, 16), p, 0);
        ADD_FAILURE() << "a cp plan of a learned-position model was built";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("--cp"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace preflight::runtime
