// Pipeline parallelism (1F1B, PipeDream-Flush: Narayanan et al. 2021, sec. 2.2) in the step
// program, without a GPU:
//  - the stage split (the planner's, pipeline_stage_layers) and what each stage holds, by hand;
//  - the 1F1B order of forwards and backwards and the micro-batches in flight, by hand;
//  - every stage's dry run equals the planner's preflight-runtime prediction to the byte, alone
//    and with tensor, sequence and data parallelism;
//  - numerical parity on the host (double, loopback ranks in threads): pp 2 and 4, and dp 2 x
//    tp 2 x pp 2, give the loss and the updated parameters of one GPU running the same global
//    batch, 3 steps (tied embeddings included: the first and last stage sum their copies'
//    gradients). The host computes in double; only the order of the sums differs: 1e-9.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "catalog_fixture.hpp"
#include "dry_run_compare.hpp"
#include "host_step.hpp"
#include "pipeline_support.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/runtime/host_runner.hpp"
#include "preflight/runtime/reference_model.hpp"
#include "preflight/runtime/synthetic.hpp"

namespace preflight::runtime {
namespace {

using Vec = std::vector<double>;

Plan pp_plan(std::int64_t pp, std::int64_t grad_acc, std::int64_t dp = 1, int zero = 0) {
    return test_support::pipeline_plan(pp, grad_acc, dp, zero);
}

using test_support::has_tensor;

// Llama-3-8B (32 layers) at pp 4: 8 layers a stage, the model's layers 1-8, 9-16, 17-24, 25-32;
// the embedding on stage 0, the final norm and LM head on stage 3. Ranks are tp-dp-pp ordered:
// at dp 2, stage s holds ranks 2s and 2s + 1.
TEST(PipelineLayout, Llama3_8bStagesByHand) {
    const ModelConfig m = test::catalog_model("llama-3-8b");
    const Plan p = pp_plan(4, 8, 2, 1);
    const std::int64_t first[] = {1, 9, 17, 25};
    for (std::int64_t s = 0; s < 4; ++s) {
        const Program P = build_program(m, p, 2 * s + 1);
        EXPECT_EQ(P.pp_rank, s);
        EXPECT_EQ(P.dp_rank, 1);
        EXPECT_EQ(P.dims.layers, 8);
        EXPECT_EQ(P.dims.first_layer(), first[s]);
        EXPECT_EQ(has_tensor(P, "word_embedding"), s == 0);
        EXPECT_EQ(has_tensor(P, "lm_head.weight"), s == 3);
        EXPECT_EQ(has_tensor(P, "final_norm.weight"), s == 3);
        EXPECT_TRUE(has_tensor(P, "layers." + std::to_string(first[s]) + ".qkv_proj.weight"));
        EXPECT_TRUE(has_tensor(P, "layers." + std::to_string(first[s] + 7) + ".down_proj.weight"));
        EXPECT_FALSE(has_tensor(P, "layers." + std::to_string(first[s] + 8) + ".down_proj.weight"));
    }
}

// GPT-2's 12 layers at pp 5: 3, 3, 2, 2, 2 (the remainder to the first stages, Megatron-LM's
// even split); its tied word embedding is on stage 0 and, as a copy, on stage 4.
TEST(PipelineLayout, Gpt2UnevenSplitAndTiedCopy) {
    const ModelConfig m = test::catalog_model("gpt2");
    const std::int64_t layers[] = {3, 3, 2, 2, 2};
    for (std::int64_t s = 0; s < 5; ++s) {
        const Program P = build_program(m, pp_plan(5, 5), s);
        EXPECT_EQ(P.dims.layers, layers[s]) << "stage " << s;
        EXPECT_EQ(has_tensor(P, "word_embedding"), s == 0 || s == 4) << "stage " << s;
        EXPECT_EQ(has_tensor(P, "position_embedding"), s == 0) << "stage " << s;
    }
}

// The forwards (F) and backwards (B) of a stage's step in program order, with the largest
// number of micro-batches whose forward ran and backward did not.
struct Order {
    std::string seq;
    std::int64_t in_flight = 0;
};
Order order_of(const Program& P) {
    Order o;
    std::int64_t open = 0;
    PhaseKind last = PhaseKind::step_start;
    std::int64_t last_mb = 0;
    for (const Op& op : step_as_run(P)) {
        const PhaseKind k = op.phase.kind == PhaseKind::output_loss ? PhaseKind::forward : op.phase.kind;
        if (k != PhaseKind::forward && k != PhaseKind::backward) continue;
        if (k == last && op.phase.micro_batch == last_mb) continue;
        if (op.kind == OpKind::p2p && op.recv_peer != 0 && op.send_peer != 0) continue;  // a pair closes a pass
        last = k;
        last_mb = op.phase.micro_batch;
        o.seq += (k == PhaseKind::forward ? "F" : "B") + std::to_string(last_mb) + " ";
        open += k == PhaseKind::forward ? 1 : -1;
        o.in_flight = std::max(o.in_flight, open);
    }
    return o;
}

// 1F1B on 4 stages with 6 micro-batches: stage i warms up with 3 - i forwards, then alternates,
// then drains; so stage i holds min(4 - i, 6) micro-batches at once.
TEST(PipelineSchedule, OneFOneBOrderByHand) {
    const ModelConfig m = test::llama_model(64, 8, 4, 2, 96, 1000, 256);
    const char* want[] = {"F1 F2 F3 F4 B1 F5 B2 F6 B3 B4 B5 B6 ", "F1 F2 F3 B1 F4 B2 F5 B3 F6 B4 B5 B6 ",
                          "F1 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 B6 ", "F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 "};
    for (std::int64_t s = 0; s < 4; ++s) {
        const Order o = order_of(build_program(m, pp_plan(4, 6), s));
        EXPECT_EQ(o.seq, want[s]) << "stage " << s;
        EXPECT_EQ(o.in_flight, 4 - s) << "stage " << s;
    }
    // Fewer micro-batches than stages: stage 0 holds all 2.
    EXPECT_EQ(order_of(build_program(m, pp_plan(4, 2), 0)).seq, "F1 F2 B1 B2 ");
}

// The sends and receives pair up as Megatron-LM's: a middle stage of 4 with 6 micro-batches
// receives 6 activations and 6 gradients and sends as many; in the steady state (3 rounds
// after 2 warm-up forwards... ) a send is merged with the next receive, so no stage ever waits on
// a lone send its neighbour answers only later.
TEST(PipelineSchedule, SendsAndReceivesPairAsMegatronDoes) {
    const ModelConfig m = test::llama_model(64, 8, 4, 2, 96, 1000, 256);
    for (std::int64_t s = 0; s < 4; ++s) {
        const Program P = build_program(m, pp_plan(4, 6), s);
        int sends = 0, recvs = 0, paired = 0;
        for (const Op& op : step_as_run(P)) {
            if (op.kind != OpKind::p2p) continue;
            sends += op.send_peer != 0;
            recvs += op.recv_peer != 0;
            paired += op.send_peer != 0 && op.recv_peer != 0;
            if (op.send_peer != 0 && op.recv_peer != 0) EXPECT_EQ(op.send_peer, op.recv_peer) << describe(P, op);
        }
        const int ends = (s == 0) + (s == 3);  // the first stage neither receives activations nor sends gradients
        EXPECT_EQ(sends, 12 - 6 * ends) << "stage " << s;
        EXPECT_EQ(recvs, 12 - 6 * ends) << "stage " << s;
        EXPECT_GT(paired, 0) << "stage " << s;
    }
}

// ZeRO-2/3 on a later stage: each backward's input-gradient send is issued before the stage's
// first layer's reduce-scatter, which then goes right after it on the communication stream (so the
// send does not queue behind a layer's reduction on the pipeline's critical path), and the
// reduction is waited for before the template ends.
TEST(PipelineSchedule, ZeroTwoSendsTheInputGradientBeforeTheFirstLayersReduction) {
    const ModelConfig m = test::llama_model(64, 8, 4, 2, 96, 1000, 256);  // untied
    for (int zero : {2, 3})
        for (std::int64_t s = 1; s < 4; ++s) {
            const Program P = build_program(m, pp_plan(4, 6, 2, zero), 2 * s);
            int sends = 0;
            const std::vector<Op> step = step_as_run(P);
            for (std::size_t i = 0; i + 2 < step.size(); ++i) {
                const Op& op = step[i];
                if (op.kind != OpKind::p2p || op.send_peer != -1) continue;
                ++sends;
                const Op& next = step[i + 1];
                EXPECT_EQ(next.kind, OpKind::reduce_scatter) << describe(P, next);
                EXPECT_EQ(next.unit, 0) << describe(P, next);  // a later stage's unit 0 is its first layer
                EXPECT_EQ(step[i + 2].kind, OpKind::comm_wait) << describe(P, step[i + 2]);
            }
            EXPECT_EQ(sends, 6) << "zero " << zero << " stage " << s;
        }
}

TEST(PipelineDryRun, EveryStageEqualsThePlannerToTheByte) {
    int ranks = 0;
    std::map<PhaseKind, int> phases;
    for (const char* name : {"gpt2", "llama-3.2-1b"})
        for (std::int64_t pp : {2, 4})
            for (std::int64_t ga : {1, 3, 8})
                for (Recompute rc : all_recomputes())
                    for (Precision pr : {Precision::bf16_mixed, Precision::bf16_mixed_fp32_grads, Precision::fp8_mixed})
                        for (auto [dp, tp, zero] : {std::tuple{1, 1, 0}, std::tuple{2, 1, 1}, std::tuple{1, 2, 0}}) {
                            Plan p = pp_plan(pp, ga, dp, zero);
                            p.tp = tp;
                            p.sp = tp > 1;
                            p.recompute = rc;
                            p.precision = pr;
                            for (std::int64_t s = 0; s < pp; ++s) {  // the last rank of each stage
                                const std::int64_t rank = (s + 1) * dp * tp - 1;
                                const test_support::Compared c =
                                    test_support::compare_with_planner(test::catalog_model(name), p, rank);
                                EXPECT_EQ(c.dry, c.planned) << name << " " << to_flags(p) << " stage " << s << ": " << c.where;
                                EXPECT_EQ(c.dry_phase, c.planned_phase) << name << " " << to_flags(p) << " stage " << s;
                                ++phases[c.planned_phase];
                                ++ranks;
                            }
                        }
    EXPECT_EQ(ranks, 2 * (2 + 4) * 3 * 3 * 3 * 3);
    EXPECT_GT(phases[PhaseKind::backward], 0);
    EXPECT_GT(phases[PhaseKind::output_loss], 0);
}

// A long 1F1B accumulation holds two periods of each stage's steady state and runs the second
// again (Program::repeat): every stage of pp 2 and 4 at 64 micro-batches, alone and beside dp 2
// under ZeRO-1 and ZeRO-3, every recompute mode, walks the planner's peak to the byte.
TEST(PipelineDryRun, ARepeatedSteadyStateEqualsThePlannerToTheByte) {
    int ranks = 0;
    for (const char* name : {"gpt2", "llama-3.2-1b"})
        for (std::int64_t pp : {2, 4})
            for (Recompute rc : all_recomputes())
                for (auto [dp, zero] : {std::pair{1, 0}, std::pair{2, 1}, std::pair{2, 3}}) {
                    Plan p = pp_plan(pp, 64, dp, zero);
                    p.recompute = rc;
                    for (std::int64_t s = 0; s < pp; ++s) {
                        const std::int64_t rank = s * dp;
                        EXPECT_GT(build_program(test::catalog_model(name), p, rank).repeat.times, 1)
                            << name << " " << to_flags(p) << " stage " << s;
                        const test_support::Compared c = test_support::compare_with_planner(test::catalog_model(name), p, rank);
                        EXPECT_EQ(c.dry, c.planned) << name << " " << to_flags(p) << " stage " << s << ": " << c.where;
                        EXPECT_EQ(c.dry_phase, c.planned_phase) << name << " " << to_flags(p) << " stage " << s;
                        ++ranks;
                    }
                }
    EXPECT_EQ(ranks, 2 * (2 + 4) * 3 * 3);
}

// The emulated ranks: the first and last stage of Llama-3-8B at pp 4 (seq 4096, 16
// micro-batches, dp 2, ZeRO-1, selective recompute): the first stage holds 4 micro-batches in
// flight and the planner's peak is its backward.
TEST(PipelineDryRun, Llama3_8bPp4FirstAndLastStage) {
    const ModelConfig m = test::catalog_model("llama-3-8b");
    Plan p = pp_plan(4, 16, 2, 1);
    p.seq = 4096;
    p.mbs = 1;
    p.recompute = Recompute::selective;
    const test_support::Compared first = test_support::compare_with_planner(m, p, 0);
    EXPECT_EQ(first.dry, first.planned) << first.where;
    EXPECT_EQ(first.dry_phase, PhaseKind::backward);
    const test_support::Compared last = test_support::compare_with_planner(m, p, 7);
    EXPECT_EQ(last.dry, last.planned) << last.where;
    EXPECT_LT(last.dry, first.dry);  // the last stage holds one micro-batch (and the head)
}

// ZeRO-2/3 under 1F1B, untied Llama-2-7B (32 layers) and the tied Llama-3.2-1B and GPT-2: every
// micro-batch reduce-scatters its layers' gradients (a tied embedding's unit keeps its gradients
// all step), ZeRO-3 gathers each layer for its forward and again for its backward; each stage's
// dry run equals the planner to the byte, alone and beside tensor and sequence parallelism.
TEST(PipelineDryRun, ZeroTwoAndThreeEqualThePlannerToTheByte) {
    int ranks = 0;
    for (const char* name : {"llama-2-7b", "llama-3.2-1b", "gpt2"})
    for (std::int64_t pp : {2, 4})
        for (std::int64_t ga : {1, 3, 8})
            for (Recompute rc : all_recomputes())
                for (Precision pr : {Precision::bf16_mixed, Precision::bf16_mixed_fp32_grads, Precision::fp8_mixed})
                    for (auto [tp, zero] : {std::pair{1, 2}, std::pair{1, 3}, std::pair{2, 2}, std::pair{2, 3}}) {
                        const ModelConfig m = test::catalog_model(name);
                        if (m.tied_embeddings && pr == Precision::bf16_mixed_fp32_grads) continue;  // refused
                        Plan p = pp_plan(pp, ga, 2, zero);
                        p.tp = tp;
                        p.sp = tp > 1;
                        p.recompute = rc;
                        p.precision = pr;
                        for (std::int64_t s = 0; s < pp; ++s) {
                            const std::int64_t rank = (s + 1) * 2 * tp - 1;
                            const test_support::Compared c = test_support::compare_with_planner(m, p, rank);
                            EXPECT_EQ(c.dry, c.planned) << name << " " << to_flags(p) << " stage " << s << ": " << c.where;
                            EXPECT_EQ(c.dry_phase, c.planned_phase) << name << " " << to_flags(p) << " stage " << s;
                            ++ranks;
                        }
                    }
    // stages x micro-batch counts x recomputes x (tp, ZeRO) x recipes (the tied models without fp32 accumulation)
    EXPECT_EQ(ranks, (2 + 4) * 3 * 3 * 4 * (3 + 2 + 2));
}

TEST(PipelineProgram, RefusesWhatTheRuntimeDoesNotRunNamingTheFlag) {
    const ModelConfig m = test::catalog_model("gpt2");
    auto refused = [&](Plan p, const std::string& flag) {
        try {
            build_program(m, p);
            ADD_FAILURE() << "accepted " << to_flags(p);
        } catch (const InputError& e) {
            EXPECT_EQ(e.subject(), flag) << e.what();
        }
    };
    // GPT-2's word embedding is tied: under ZeRO-2/3 its unit keeps 16-bit gradients all step.
    Plan fp32_grads = pp_plan(2, 4, 2, 2);
    fp32_grads.precision = Precision::bf16_mixed_fp32_grads;
    refused(fp32_grads, "--zero");
    EXPECT_NO_THROW(build_program(m, pp_plan(2, 4, 2, 3)));
    EXPECT_NO_THROW(build_program(test::catalog_model("llama-2-7b"), fp32_grads));  // untied
    Plan gpipe = pp_plan(2, 4);
    gpipe.pp_schedule = PpSchedule::gpipe;
    refused(gpipe, "--pp-schedule");
    try {
        build_program(m, pp_plan(2, 4), 2);
        ADD_FAILURE() << "accepted rank 2 of 2";
    } catch (const InputError& e) {
        EXPECT_EQ(e.subject(), "--emulate-rank");
    }
}

// ---- parity on the host ----------------------------------------------------------------------

ModelConfig micro_llama() { return test::llama_model(16, 4, 4, 2, 24, 300, 16); }  // untied
ModelConfig micro_gpt() { return test::gpt_model(16, 4, 2, 300, 16); }             // tied, learned positions

using test_support::Worst;
Worst compare(const ModelConfig& m, const Plan& multi, int steps) { return test_support::compare_with_one_gpu(m, multi, steps); }

// A micro pipeline plan (seq 6, mbs 2) and its parity against one GPU, 3 steps, within 1e-9,
// folded into the worst seen so far.
Plan parity_plan(std::int64_t pp, std::int64_t ga, std::int64_t dp, std::int64_t tp, int zero, Precision pr) {
    Plan p = pp_plan(pp, ga, dp, zero);
    p.seq = 6;
    p.tp = tp;
    p.sp = tp > 1;
    p.precision = pr;
    return p;
}
void expect_parity(const ModelConfig& m, const Plan& p, Worst& worst) {
    const Worst w = compare(m, p, 3);
    EXPECT_LE(w.loss, 1e-9) << m.name << " " << to_flags(p);
    EXPECT_LE(w.param, 1e-9) << m.name << " " << to_flags(p);
    worst.loss = std::max(worst.loss, w.loss);
    worst.param = std::max(worst.param, w.param);
}

TEST(PipelineParity, PpAloneAndWithTensorAndDataParallelismMatchOneGpu) {
    int cases = 0;
    Worst worst;
    for (const ModelConfig& m : {micro_llama(), micro_gpt()})
        for (Precision pr : {Precision::fp32, Precision::bf16_mixed_fp32_grads})
            for (auto [pp, ga] : {std::pair{2, 3}, std::pair{4, 6}, std::pair{4, 2}})
                for (auto [dp, tp, zero] : {std::tuple{1, 1, 0}, std::tuple{2, 2, 1}}) {
                    expect_parity(m, parity_plan(pp, ga, dp, tp, zero, pr), worst);
                    ++cases;
                }
    std::printf("pp 2 / 4, dp 2 x tp 2 x pp 2 / 4 vs one GPU, 3 steps, %d cases: worst loss %.2e, worst parameter %.2e\n",
                cases, worst.loss, worst.param);
    EXPECT_EQ(cases, 2 * 2 * 3 * 2);
}

// ZeRO-2/3 at dp 2, alone and beside tp 2 with sequence parallelism: every micro-batch's
// reduce-scatter adds into the shard (a tied embedding's unit: once, after its two copies are
// summed), the stages' updates and the last stages' loss are one GPU's.
TEST(PipelineParity, ZeroTwoAndThreeMatchOneGpu) {
    int cases = 0;
    Worst worst;
    for (const ModelConfig& m : {micro_llama(), micro_gpt()})
        for (Precision pr : {Precision::fp32, Precision::bf16_mixed_fp32_grads, Precision::bf16_mixed})
            for (auto [pp, ga] : {std::pair{2, 3}, std::pair{4, 6}, std::pair{4, 2}})
                for (auto [tp, zero] : {std::pair{1, 2}, std::pair{1, 3}, std::pair{2, 2}, std::pair{2, 3}}) {
                    // a tied embedding keeps 16-bit unit gradients all step: not under fp32 accumulation
                    if (m.tied_embeddings && pr == Precision::bf16_mixed_fp32_grads) continue;
                    expect_parity(m, parity_plan(pp, ga, 2, tp, zero, pr), worst);
                    ++cases;
                }
    std::printf("ZeRO-2/3 x pp 2 / 4 (dp 2, tp 1 / 2; untied and tied) vs one GPU, 3 steps, %d cases: worst loss %.2e, "
                "worst parameter %.2e\n",
                cases, worst.loss, worst.param);
    EXPECT_EQ(cases, (3 + 2) * 3 * 4);
}

// A long 1F1B accumulation runs a period of each stage's steady state again (Program::repeat),
// each run on its own micro-batches (a period of k forward-backward pairs is k micro-batches on;
// its ends are the sends merged with the next period's receives): pp 2 and 4 at 24 micro-batches,
// alone and beside dp 2 under ZeRO-2 and dp 2 x tp 2 with sp under ZeRO-1, untied and tied, match
// one GPU, every stage repeating.
TEST(PipelineParity, ARepeatedSteadyStateMatchesOneGpu) {
    int cases = 0;
    Worst worst;
    for (const ModelConfig& m : {micro_llama(), micro_gpt()})
        for (auto [pp, dp, tp, zero] : {std::tuple{2, 1, 1, 0}, std::tuple{4, 1, 1, 0}, std::tuple{2, 2, 1, 2}, std::tuple{4, 2, 2, 1}}) {
            const Plan p = parity_plan(pp, 24, dp, tp, zero, Precision::bf16_mixed);
            for (std::int64_t r = 0; r < p.gpus(); ++r) EXPECT_GT(build_program(m, p, r).repeat.times, 1) << to_flags(p) << " rank " << r;
            expect_parity(m, p, worst);
            ++cases;
        }
    std::printf("1F1B with a repeated steady state (pp 2 / 4, 24 micro-batches) vs one GPU, 3 steps, %d cases: worst loss "
                "%.2e, worst parameter %.2e\n",
                cases, worst.loss, worst.param);
    EXPECT_EQ(cases, 2 * 4);
}

TEST(PipelineParity, RecomputeAndEagerAttentionToo) {
    for (Recompute rc : all_recomputes())
        for (AttentionKind at : {AttentionKind::flash, AttentionKind::eager}) {
            Plan p;
            p.seq = 6;
            p.mbs = 2;
            p.pp = 2;
            p.grad_acc = 3;
            p.recompute = rc;
            p.attention = at;
            const Worst w = compare(micro_gpt(), p, 2);
            EXPECT_LE(w.loss, 1e-9) << to_flags(p);
            EXPECT_LE(w.param, 1e-9) << to_flags(p);
        }
}

// An emulated middle stage runs alone: it receives stand-in values for its input and gradients
// (the other stages are not there), so its numbers are finite, and it has no loss of its own.
TEST(PipelineParity, AnEmulatedStageRunsItsProgramAlone) {
    Plan p;
    p.seq = 6;
    p.mbs = 2;
    p.pp = 4;
    p.grad_acc = 5;
    const Program prog = build_program(micro_llama(), p, 1);
    HostEmulatedRank dp(0, 1), tp(0, 1), pp(1, 4);
    const test_support::HostStep s = test_support::run_host_step(micro_llama(), prog, {&dp, &tp, &pp, nullptr});
    EXPECT_EQ(s.loss_sum, 0.0);
    EXPECT_TRUE(s.weights_finite);
}

// An emulated last stage of a bias-free model: had it received zeros, RMSNorm(0) = 0 would keep
// every layer's output and every logit at 0, each token's loss ln(300) whatever the weights (its
// GEMMs timed on zeros, its norms' backward unbounded). It receives values at the init scale, so
// its loss depends on its weights and the receives' standard deviation is kEmulatedReceiveStd.
TEST(PipelineParity, AnEmulatedLastStageComputesOnWhatItReceives) {
    Plan p;
    p.seq = 6;
    p.mbs = 2;
    p.pp = 2;
    p.grad_acc = 2;
    const Program prog = build_program(micro_llama(), p, 1);
    HostEmulatedRank dp(0, 1), tp(0, 1), pp(1, 2);
    const test_support::HostStep s = test_support::run_host_step(micro_llama(), prog, {&dp, &tp, &pp, nullptr});
    const double per_token = s.loss_sum / static_cast<double>(p.mbs * p.seq * p.grad_acc);
    EXPECT_TRUE(std::isfinite(per_token));
    EXPECT_GT(std::abs(per_token - std::log(300.0)), 1e-3);
    std::vector<double> got(20000);
    HostEmulatedRank(1, 2).recv(got.data(), static_cast<std::int64_t>(got.size()), -1);
    double sum2 = 0;
    for (double v : got) sum2 += v * v;
    EXPECT_NEAR(std::sqrt(sum2 / static_cast<double>(got.size())), kEmulatedReceiveStd, 0.02 * kEmulatedReceiveStd);
}

}  // namespace
}  // namespace preflight::runtime
