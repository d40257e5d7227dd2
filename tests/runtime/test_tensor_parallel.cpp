// Tensor parallelism (Megatron-LM style, Shoeybi et al. 2019) in the step program, without a GPU:
//  - the slices each rank holds, from hand-derived numbers (column-parallel q|k|v and gate|up,
//    row-parallel out and down, vocabulary-parallel embedding and head);
//  - every rank's dry run equals the planner's preflight-runtime prediction to the byte, alone and
//    with data parallelism and ZeRO;
//  - numerical parity on the host (double, loopback ranks in threads): tp = 2 and 4, and dp 2 x
//    tp 2 with ZeRO 0-3, give the loss and the updated parameters of one GPU running the same
//    global batch, 3 steps. The host computes in double, so the runs differ only in the order of
//    the sums (the row-parallel partial products, the vocabulary-parallel softmax): 1e-9
//    relative is ample.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "catalog_fixture.hpp"
#include "dry_run_compare.hpp"
#include "host_parity.hpp"
#include "host_step.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/runtime/host_runner.hpp"
#include "preflight/runtime/reference_model.hpp"

namespace preflight::runtime {
namespace {

using Vec = std::vector<double>;

const ParamSpec& param(const Program& P, const std::string& name) {
    for (const ParamSpec& ps : P.params)
        if (ps.name == name) return ps;
    throw std::logic_error("no tensor " + name);
}

Plan tp_plan(std::int64_t tp, std::int64_t dp = 1, int zero = 0) {
    Plan p;
    p.seq = 128;
    p.mbs = 2;
    p.tp = tp;
    p.dp = dp;
    p.zero = static_cast<ZeroStage>(zero);
    return p;
}

// GPT-2 small at tp = 2, rank 1, by hand: 12 heads of 64 -> 6 per rank, so q, k and v hold 384
// rows each (rows 384..767 of each of the whole 768-row blocks); fc1 1,536 of 3,072 rows; out and
// fc2 the columns 384..767 and 1,536..3,071. The vocabulary 50,257 is padded to a multiple of
// 128 x 2 = 256 (Megatron-LM's make-vocab-size-divisible-by 128 times tp): 50,432 rows, 25,216
// per rank; rank 1 holds tokens 25,216..50,431, of which 50,257 - 25,216 = 25,041 are real.
TEST(TensorParallelLayout, Gpt2SlicesByHand) {
    const Program P = build_program(test::catalog_model("gpt2"), tp_plan(2), 1);
    EXPECT_EQ(P.tp_rank, 1);
    EXPECT_EQ(P.dp_rank, 0);
    EXPECT_EQ(P.dims.heads, 6);
    EXPECT_EQ(P.dims.ffn, 1536);
    EXPECT_EQ(P.dims.vocab_padded, 25216);
    EXPECT_EQ(P.dims.vocab_begin, 25216);
    EXPECT_EQ(P.dims.vocab_valid, 25041);
    const ParamSpec& qkv = param(P, "layers.1.qkv_proj.weight");
    EXPECT_EQ(qkv.rows, 1152);
    EXPECT_EQ(qkv.global_rows, 2304);
    EXPECT_EQ(qkv.global_index(0, 0), 384 * 768);            // q row 384
    EXPECT_EQ(qkv.global_index(384, 5), (768 + 384) * 768 + 5);  // k row 384 of the whole k block
    EXPECT_EQ(qkv.global_index(1151, 767), 2304 * 768 - 1);  // the last v row
    const ParamSpec& out = param(P, "layers.1.o_proj.weight");
    EXPECT_EQ(out.rows, 768);
    EXPECT_EQ(out.cols, 384);
    EXPECT_EQ(out.global_index(2, 5), 2 * 768 + 384 + 5);
    const ParamSpec& fc2 = param(P, "layers.1.fc2.weight");
    EXPECT_EQ(fc2.cols, 1536);
    EXPECT_EQ(fc2.global_index(1, 0), 3072 + 1536);
    const ParamSpec& wte = param(P, "word_embedding");
    EXPECT_EQ(wte.rows, 25216);
    EXPECT_EQ(wte.global_index(0, 0), 25216 * 768);
    EXPECT_TRUE(param(P, "layers.1.attn_norm.weight").replicated());
    EXPECT_TRUE(param(P, "layers.1.o_proj.bias").replicated());
    // The logits of a micro-batch are this rank's columns only: 2 x 128 rows x 25,216.
    for (const BufferSpec& b : P.buffers)
        if (b.name == "logits") EXPECT_EQ(b.elements, 256 * 25216);
}

// Llama-3-8B at tp = 8, rank 7, by hand: 32 query and 8 key/value heads of 128 -> 4 and 1 per
// rank (q|k|v 512 + 128 + 128 = 768 rows: the whole k block starts at row 4,096, v at 5,120);
// gate|up 2 x 1,792 of 2 x 14,336 rows. The vocabulary 128,256 padded to a multiple of
// 128 x 8 = 1,024: 129,024, 16,128 per rank; rank 7 from 112,896, with 128,256 - 112,896 =
// 15,360 real tokens.
TEST(TensorParallelLayout, Llama3_8bSlicesByHand) {
    const Program P = build_program(test::catalog_model("llama-3-8b"), tp_plan(8), 7);
    const ParamSpec& qkv = param(P, "layers.1.qkv_proj.weight");
    EXPECT_EQ(qkv.rows, 768);
    EXPECT_EQ(qkv.global_index(0, 0), 7 * 512 * 4096);
    EXPECT_EQ(qkv.global_index(512, 0), (4096 + 7 * 128) * 4096);
    EXPECT_EQ(qkv.global_index(640, 0), (5120 + 7 * 128) * 4096);
    const ParamSpec& gu = param(P, "layers.1.gate_up_proj.weight");
    EXPECT_EQ(gu.rows, 3584);
    EXPECT_EQ(gu.global_index(1792, 0), (14336 + 7 * 1792) * 4096);
    const ParamSpec& down = param(P, "layers.1.down_proj.weight");
    EXPECT_EQ(down.cols, 1792);
    EXPECT_EQ(down.global_index(0, 0), 7 * 1792);
    EXPECT_EQ(P.dims.vocab_padded, 16128);
    EXPECT_EQ(P.dims.vocab_begin, 112896);
    EXPECT_EQ(P.dims.vocab_valid, 15360);
}

TEST(TensorParallelLayout, EveryElementOfEveryTensorHasExactlyOneOwner) {
    const ModelConfig m = test::llama_model(64, 2, 8, 8, 96, 1000, 128);
    const Program whole = build_program(m, tp_plan(1));
    for (std::int64_t tp : {2, 4, 8}) {
        std::map<std::string, std::vector<int>> owners;
        for (const ParamSpec& ps : whole.params) owners[ps.name].assign(static_cast<std::size_t>(ps.numel()), 0);
        for (std::int64_t r = 0; r < tp; ++r) {
            const Program P = build_program(m, tp_plan(tp), r);
            for (const ParamSpec& ps : P.params) {
                std::vector<int>& o = owners.at(ps.name);
                for (std::int64_t i = 0; i < ps.rows; ++i)
                    for (std::int64_t c = 0; c < ps.cols; ++c) {
                        const std::int64_t g = ps.global_index(i, c);
                        if (g < static_cast<std::int64_t>(o.size()) && (ps.replicated() ? r == 0 : true)) ++o[static_cast<std::size_t>(g)];
                    }
            }
        }
        for (const auto& [name, o] : owners)
            for (std::size_t i = 0; i < o.size(); ++i)
                ASSERT_EQ(o[i], 1) << "tp " << tp << " " << name << " element " << i;
    }
}

TEST(TensorParallelDryRun, EveryRankEqualsThePlannerToTheByte) {
    struct Kind {
        Recompute rc;
        Precision pr;
        AttentionKind at;
    };
    const Kind kinds[] = {{Recompute::none, Precision::bf16_mixed, AttentionKind::flash},
                          {Recompute::full, Precision::bf16_mixed, AttentionKind::flash},
                          {Recompute::selective, Precision::bf16_mixed_fp32_grads, AttentionKind::eager},
                          {Recompute::none, Precision::fp32, AttentionKind::eager},
                          {Recompute::none, Precision::fp8_mixed, AttentionKind::flash}};
    int plans = 0;
    for (const char* name : {"gpt2", "llama-3.2-1b"})
        for (std::int64_t tp : {2, 4})
            for (auto [dp, zero] : {std::pair{1, 0}, std::pair{2, 1}, std::pair{2, 3}})
                for (const Kind& k : kinds)
                    for (bool sp : {false, true}) {
                        Plan p = tp_plan(tp, dp, zero);
                        p.sp = sp;
                        p.recompute = k.rc;
                        p.precision = k.pr;
                        p.attention = k.at;
                        for (std::int64_t rank : {std::int64_t{0}, tp - 1, dp * tp - 1}) {
                            const test_support::Compared c =
                                test_support::compare_with_planner(test::catalog_model(name), p, rank);
                            const std::string what =
                                std::string(name) + " " + to_flags(p) + " rank " + std::to_string(rank);
                            EXPECT_EQ(c.dry, c.planned) << what << ": dry run peak at " << c.where;
                            EXPECT_EQ(c.dry_phase, c.planned_phase) << what << ": dry run peak at " << c.where;
                            ++plans;
                        }
                    }
    EXPECT_EQ(plans, 2 * 2 * 3 * 5 * 2 * 3);  // models x tp x (dp, ZeRO) x kinds x --sp x ranks
}

// Long sequences, where a layer's backward holds the peak: Llama-3-70B's tp 8 rank with and
// without sequence parallelism (dp 8, ZeRO-1, full recompute), and Llama-3-8B at tp 8 with
// sequence parallelism under every recompute mode and both attention kinds.
TEST(TensorParallelDryRun, LongSequencesEqualThePlanner) {
    std::map<PhaseKind, int> phases;
    auto check = [&](const char* name, const Plan& p, std::int64_t rank) {
        const test_support::Compared c = test_support::compare_with_planner(test::catalog_model(name), p, rank);
        EXPECT_EQ(c.dry, c.planned) << name << " " << to_flags(p) << ": " << c.where;
        ++phases[c.planned_phase];
    };
    for (bool sp : {false, true}) {
        Plan p = tp_plan(8, 8, 1);
        p.seq = 4096;
        p.mbs = 1;
        p.sp = sp;
        p.recompute = Recompute::full;
        check("llama-3-70b", p, 13);
    }
    for (Recompute rc : all_recomputes())
        for (AttentionKind at : {AttentionKind::flash, AttentionKind::eager}) {
            Plan p = tp_plan(8);
            p.seq = 4096;
            p.mbs = 1;
            p.sp = true;
            p.recompute = rc;
            p.attention = at;
            check("llama-3-8b", p, 5);
        }
    EXPECT_GT(phases[PhaseKind::backward], 0);
}

// Sequence parallelism (Korthikanti et al. 2022, sec. 4.2.2): the norms' inputs and outputs
// hold rows / tp rows. GPT-2 at seq 1,024 x mbs 2, tp 2: layer 1 keeps [2,048, 768] for each of
// them without it, [1,024, 768] with it; q|k|v stays [2,048, 1,152] (6 heads of 64 x 3) either way.
TEST(TensorParallelProgram, SequenceParallelNormTensorsHoldTheRanksRows) {
    const ModelConfig m = test::catalog_model("gpt2");
    Plan p = tp_plan(2);
    p.seq = 1024;
    auto elements = [](const Program& P, const std::string& name) {
        for (const BufferSpec& b : P.buffers)
            if (b.name == name) return b.elements;
        return std::int64_t{-1};
    };
    for (bool sp : {false, true}) {
        p.sp = sp;
        const Program P = build_program(m, p, 1);
        const std::int64_t rows = sp ? 1024 : 2048;
        for (const char* name : {"L1 attn norm in", "L1 attn norm out", "L1 mlp norm in", "L1 mlp norm out"})
            EXPECT_EQ(elements(P, name), rows * 768) << name << (sp ? " with --sp" : "");
        EXPECT_EQ(elements(P, "L1 qkv"), 2048 * 1152);
    }
}

TEST(TensorParallelProgram, RefusesSplitsThePlannerRefusesNamingTheFlag) {
    const ModelConfig m = test::catalog_model("gpt2");  // 12 heads
    for (std::int64_t tp : {5, 7}) try {
            build_program(m, tp_plan(tp));
            ADD_FAILURE() << "accepted tp " << tp;
        } catch (const InputError& e) {
            EXPECT_EQ(e.subject(), "--tp");
        }
    try {
        build_program(m, tp_plan(2, 2), 4);
        ADD_FAILURE() << "accepted rank 4 of 4";
    } catch (const InputError& e) {
        EXPECT_EQ(e.subject(), "--emulate-rank");
    }
}

// ---- parity on the host ----------------------------------------------------------------------

// Vocabulary 300: at tp 2 rank 0 holds tokens 0..255 and rank 1 256..299 (44 of its 256 rows);
// at tp 4 (128 rows each) rank 2 holds 44 real tokens and rank 3 padding only.
ModelConfig micro_llama(std::int64_t kv_heads) { return test::llama_model(16, 2, 4, kv_heads, 24, 300, 16); }
ModelConfig micro_gpt() { return test::gpt_model(16, 2, 2, 300, 16); }

struct Worst {
    double loss = 0, param = 0;
};

// The plan's dp x tp ranks against one GPU running the same global batch.
Worst compare(const ModelConfig& m, const Plan& multi, int steps) {
    const Plan single = single_gpu_plan(multi);
    const Program whole = build_program(m, single);
    std::vector<Program> many;
    for (std::int64_t r = 0; r < multi.dp * multi.tp; ++r) many.push_back(build_program(m, multi, r));
    const Vec init = ref::random_params(whole, 5, 0.4);
    const std::vector<RankResult> a = run_host_ranks(whole, {whole}, init, 77, steps);
    const std::vector<RankResult> b = run_host_ranks(whole, many, init, 77, steps);
    Worst w;
    for (int s = 0; s < steps; ++s) {
        const double want = a[0].losses[static_cast<std::size_t>(s)];
        for (const RankResult& r : b)  // every tensor-parallel rank holds the whole loss of its rows
            if (multi.dp == 1) w.loss = std::max(w.loss, std::abs(r.losses[static_cast<std::size_t>(s)] - want) / want);
        double mean = 0;
        for (const RankResult& r : b) mean += r.losses[static_cast<std::size_t>(s)] / static_cast<double>(b.size());
        w.loss = std::max(w.loss, std::abs(mean - want) / want);
    }
    double scale = 0, moved = 0;
    for (std::size_t i = 0; i < init.size(); ++i) {
        w.param = std::max(w.param, std::abs(b[0].updated[i] - a[0].updated[i]));
        scale = std::max(scale, std::abs(a[0].updated[i]));
        moved = std::max(moved, std::abs(a[0].updated[i] - init[i]));
    }
    EXPECT_GT(moved, 1e-4) << "the optimizer did not move the parameters";
    w.param /= scale;
    return w;
}

using test_support::micro_plan;

TEST(TensorParallelParity, TpAloneAndWithDataParallelismMatchOneGpu) {
    int cases = 0;
    Worst worst;
    auto check = [&](const ModelConfig& m, const Plan& p) {
        const Worst w = compare(m, p, 3);
        const std::string what = m.name + " " + to_flags(p);
        EXPECT_LE(w.loss, 1e-9) << what;
        EXPECT_LE(w.param, 1e-9) << what;
        worst.loss = std::max(worst.loss, w.loss);
        worst.param = std::max(worst.param, w.param);
        ++cases;
    };
    for (Precision pr : {Precision::fp32, Precision::bf16_mixed, Precision::bf16_mixed_fp32_grads, Precision::bf16}) {
        check(micro_llama(2), micro_plan(2, 1, 0, pr));
        check(micro_gpt(), micro_plan(2, 1, 0, pr));
        check(micro_llama(4), micro_plan(4, 1, 0, pr));
        for (int zero : {0, 1, 2, 3}) check(micro_llama(2), micro_plan(2, 2, zero, pr));
    }
    for (int zero : {0, 3}) check(micro_gpt(), micro_plan(2, 2, zero, Precision::bf16_mixed));
    // Sequence parallelism: seq 6 x mbs 2 = 12 rows, 6 per rank at tp 2.
    for (Precision pr : {Precision::fp32, Precision::bf16_mixed_fp32_grads}) {
        auto with_sp = [](Plan p) { return p.sp = true, p; };
        check(micro_llama(2), with_sp(micro_plan(2, 1, 0, pr)));
        check(micro_gpt(), with_sp(micro_plan(2, 1, 0, pr)));
        Plan four = with_sp(micro_plan(4, 1, 0, pr));
        four.seq = 8;  // 16 rows, 4 per rank
        check(micro_llama(4), four);
        for (int zero : {0, 1, 2, 3}) check(micro_llama(2), with_sp(micro_plan(2, 2, zero, pr)));
    }
    std::printf("tp 2 / 4 with and without sp, dp 2 x tp 2 (ZeRO 0-3) vs one GPU, 3 steps, %d cases: worst loss %.2e, "
                "worst parameter %.2e\n",
                cases, worst.loss, worst.param);
    EXPECT_EQ(cases, 4 * 7 + 2 + 2 * 7);
}

TEST(TensorParallelParity, RecomputeEagerAttentionAndSgdToo) {
    for (Recompute rc : all_recomputes())
        for (AttentionKind at : {AttentionKind::flash, AttentionKind::eager})
            for (Optimizer opt : {Optimizer::adamw, Optimizer::sgd})
                for (bool sp : {false, true}) {
                    Plan p = micro_plan(2, 1, 0, Precision::bf16_mixed);
                    p.sp = sp;
                    p.recompute = rc;
                    p.attention = at;
                    p.optimizer = opt;
                    const Worst w = compare(micro_llama(2), p, 2);
                    EXPECT_LE(w.loss, 1e-9) << to_flags(p);
                    EXPECT_LE(w.param, 1e-9) << to_flags(p);
                }
}

// An emulated tensor-parallel rank runs alone: its sums are its own share, so its numbers are not
// the model's, but they are finite and its buffers are those of the real rank.
TEST(TensorParallelParity, AnEmulatedTpRankRunsItsProgramAlone) {
    const Program prog = build_program(micro_llama(2), micro_plan(2, 2, 1, Precision::bf16_mixed), 3);
    HostEmulatedRank dp(prog.dp_rank, 2), tp(prog.tp_rank, 2);
    EXPECT_TRUE(std::isfinite(test_support::run_host_step(micro_llama(2), prog, {&dp, &tp, nullptr, nullptr}).loss_sum));
}

// Tensor-parallel rank 1 of 2 run alone, vocabulary 1000 (rank 1 holds rows 512..999). The
// synthetic tokens are ids 0..255, all on rank 0's rows, and only rank 0 adds the residual into
// the row-parallel sums: alone, rank 1 embeds every token as zero and its whole forward is zero,
// so every logit is 0 and each token's loss is ln(488), its real rows, whatever the weights (on
// an H200 such a rank's backward then overflowed bf16 at its norms: loss NaN at step 2, Llama-3-8B
// tp 2 and Llama-3-70B tp 8). Built as an emulated rank, it takes its tokens in its own rows and
// adds the residual itself: its logits, and so its loss, depend on the weights.
TEST(TensorParallelParity, AnEmulatedTpRankAboveZeroRunsOnItsOwnVocabularyRows) {
    const ModelConfig m = test::llama_model(16, 2, 4, 2, 24, 1000, 16);
    const Plan p = micro_plan(2, 1, 0, Precision::bf16_mixed);
    for (const bool emulated : {false, true}) {
        const Program prog = build_program(m, p, 1, emulated);
        ASSERT_EQ(prog.dims.vocab_begin, 512);
        ASSERT_EQ(prog.dims.vocab_valid, 488);
        HostEmulatedRank tp(prog.tp_rank, 2);
        const test_support::HostStep s = test_support::run_host_step(m, prog, {nullptr, &tp, nullptr, nullptr});
        const double per_token = s.loss_sum / static_cast<double>(p.mbs * p.seq * p.grad_acc);
        if (emulated)
            EXPECT_GT(std::abs(per_token - std::log(488.0)), 1e-3);
        else
            EXPECT_NEAR(per_token, std::log(488.0), 1e-9);
    }
    // The emulated rank's buffers are the real rank's: the dry run (which --dry-run and the
    // planner's preflight-runtime profile predict) is the same with and without.
    for (const bool sp : {false, true}) {
        Plan q = p;
        q.sp = sp;
        EXPECT_EQ(dry_run(build_program(m, q, 1, true), 1, false).peak_bytes,
                  dry_run(build_program(m, q, 1, false), 1, false).peak_bytes);
    }
}

}  // namespace
}  // namespace preflight::runtime
