// Step-time model: a per-op roofline for one micro-batch of one
// pipeline stage on one GPU, tensor-parallel collectives, the 1F1B pipeline bubble,
// exposed data-parallel / ZeRO communication, the optimizer step and a fixed overhead.
#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>

#include "preflight/planner/collectives.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/eager_kernels.hpp"
#include "preflight/planner/extensions.hpp"
#include "preflight/planner/throughput.hpp"
#include "activations.hpp"
#include "stage_params.hpp"
#include "throughput_totals.hpp"

namespace preflight {

namespace {

struct Rates {
    double gemm_peak = 0;   // FLOP/s of the GEMM precision
    double attn_peak = 0;   // FLOP/s of the attention kernels (16-bit, or fp32 for the fp32 recipe)
    double hbm = 0;         // achievable bytes/s for memory-bound ops
    const Efficiency* e = nullptr;
    int gemm_in_bytes = 2;  // GEMM operand bytes (1 under fp8)
    int act_bytes = 2;      // activation element bytes
    double gemm_max = 0;    // max fraction of gemm_peak
    double half_dim = 0;    // GEMM dimension at half of gemm_max
    double attn_fraction = 0;  // flash attention kernels' fraction of attn_peak
    bool fp8 = false;       // GEMM inputs are cast to fp8 first
    double gemm16_peak = 0, gemm16_max = 0;  // the dense 16-bit rate and its max fraction (16-bit GEMMs under fp8)
};

// GEMM (M x K) by (K x N): a shape-dependent fraction of the dense peak,
// e = e_max * d / (d + d_half) with d the smallest dimension (a saturating fit of
// the kind Calculon and llm-analysis use for efficiency vs. size; uncalibrated),
// and never faster than its HBM traffic (roofline, Williams et al. 2009).
double gemm_s(double M, double N, double K, const Rates& r) {
    const double flops = 2.0 * M * N * K;
    const double d = std::min({M, N, K});
    const double eff = r.gemm_max * d / (d + r.half_dim);
    const double compute = flops / (r.gemm_peak * eff);
    const double bytes = (M * K + K * N) * r.gemm_in_bytes + M * N * r.act_bytes;
    // fp8 (Transformer Engine): the activation operand is read in 16 bits and written as fp8 first.
    const double cast = r.fp8 ? M * K * (r.act_bytes + 1.0) / r.hbm : 0.0;
    return std::max(compute, bytes / r.hbm) + cast;
}

double memory_s(double bytes, const Rates& r) { return bytes / r.hbm; }

double allreduce_s(double bytes, std::int64_t n, const LinkTier& link) {
    return collective_s(CollectiveKind::all_reduce, bytes, n, link);
}
double gather_s(double bytes, std::int64_t n, const LinkTier& link) {
    return collective_s(CollectiveKind::all_gather, bytes, n, link);
}
double scatter_s(double bytes, std::int64_t n, const LinkTier& link) {
    return collective_s(CollectiveKind::reduce_scatter, bytes, n, link);
}

// Costs of one transformer layer for one micro-batch on one GPU.
struct LayerCost {
    double gemm_fwd = 0, attn_fwd = 0, attn_bwd = 0, mem_fwd = 0, tp_fwd = 0;
    // What torchtitan's op-level selective recompute re-runs (ThroughputOptions::selective_op_sac):
    // the wk, wo and w3 GEMMs, and the two sequence-parallel all-gathers; 0 where it does not apply.
    double op_sac_gemm = 0, op_sac_tp = 0;
    double tp_bwd_s = 0;  // the conjugate collectives (Shoeybi et al. 2019, fig. 3), exposed part
    double column_sums_bwd = 0;  // the runtime's latency-bound column sums (Efficiency::column_sum_row_s)
    double weight_cast = 0;      // fp8 under the runtime's ZeRO-3: the gathered layer's weights cast, per pass
    // ThroughputOptions::hf_eager_kernels: the backward's elementwise time as autograd runs it, and
    // the host time of the forward's and of the backward's kernel launches.
    std::optional<double> mem_bwd_s;
    std::int64_t kernels_fwd = 0, kernels_bwd = 0;  // launches, counted (0: host time per layer from the spec)
    double host_per_kernel_s = 0;
    double gemm_bwd() const { return 2.0 * gemm_fwd; }  // dgrad + wgrad, same shapes
    // Fused passes: reads input + output grad, writes input grad (~2x the forward's bytes).
    double mem_bwd() const { return mem_bwd_s ? *mem_bwd_s : 2.0 * mem_fwd; }
    double tp_bwd() const { return tp_bwd_s; }
};

// Exposed sequence-parallel collectives of one layer when each linear issues them
// asynchronously (nanotron parallel/tensor_parallel/functional.py, reduce-scatter mode with
// tp_linear_async_communication). col[i] / row[i]: forward GEMM time of the two column
// (qkv, gate_up) and two row (o_proj, down_proj) linears; ag / rs: one all-gather /
// reduce-scatter of the s*b*h activation.
//  forward  _ColumnLinearAsyncCommunication.forward: all-gather beside the local-shard GEMM
//           (1/t of its rows); _RowLinearAsyncCommunication.forward: reduce-scatter after the GEMM.
//  backward _ColumnLinearAsyncCommunication.backward: the input all-gather beside the
//           input-gradient GEMM, the reduce-scatter beside the weight-gradient GEMM;
//           _RowLinearAsyncCommunication.backward: the output-gradient all-gather beside the
//           local-shard input-gradient GEMM.
void async_tp_exposed(LayerCost& c, const double col[2], const double row[2], double ag, double rs, double t) {
    c.tp_fwd = 0;
    c.tp_bwd_s = 0;
    for (int i = 0; i < 2; ++i) {
        c.tp_fwd += std::max(0.0, ag - col[i] / t) + rs;
        c.tp_bwd_s += std::max(0.0, ag - col[i]) + std::max(0.0, rs - col[i]) + std::max(0.0, ag - row[i] / t);
    }
}

// Exposed sequence-parallel collectives of one layer under TransformerEngine's userbuffers
// overlap (Megatron-Core --tp-comm-overlap: megatron/core/extensions/transformer_engine.py passes
// ub_overlap_ag / ub_overlap_rs and, for the layernorm column linears, ub_bulk_dgrad /
// ub_bulk_wgrad to TE). Each collective is split into chunks pipelined with the GEMM beside it,
// which hides it up to its own time:
//  forward  column linear: all-gather + GEMM; row linear: GEMM + reduce-scatter;
//  backward column linear: the input all-gather (for wgrad) beside the dgrad GEMM and the dgrad
//           reduce-scatter beside the wgrad GEMM; row linear: the output-gradient all-gather
//           beside the dgrad GEMM.
void userbuffers_tp_exposed(LayerCost& c, const double col[2], const double row[2], double ag, double rs) {
    c.tp_fwd = 0;
    c.tp_bwd_s = 0;
    for (int i = 0; i < 2; ++i) {
        c.tp_fwd += std::max(0.0, ag - col[i]) + std::max(0.0, rs - row[i]);
        c.tp_bwd_s += std::max(0.0, ag - col[i]) + std::max(0.0, rs - col[i]) + std::max(0.0, ag - row[i]);
    }
}

// Attention core of one layer, forward and backward (flash or eager), one micro-batch.
// `score_passes`: eager attention's softmax passes over the scores are charged here (false: the
// caller charges the ops over the scores itself, ThroughputOptions::hf_eager_kernels).
void attention_core(LayerCost& c, const ModelConfig& m, const Plan& p, const Rates& r, bool score_passes) {
    const double t = static_cast<double>(p.tp);
    const double b = static_cast<double>(p.mbs), s = static_cast<double>(p.seq);
    const double qw = static_cast<double>(m.q_width());
    const double heads_local = static_cast<double>(m.heads) / t, d = static_cast<double>(m.head_dim);
    const double ab = r.act_bytes;
    if (p.attention == AttentionKind::flash) {
        // A causal flash kernel executes half of the 4*b*s^2*q_width FLOPs (Dao et al. 2022), fewer
        // under a sliding window (its blocks beyond the window are skipped: causal_attention_pairs;
        // layers of both kinds at their mean, mean_causal_pairs); its backward runs 5 matmuls to the
        // forward's 2 (it recomputes S = QK^T, alg. 4).
        const double fwd = 4.0 * b * mean_causal_pairs(m, p.seq) * qw / t;
        const double rate = r.attn_peak * r.attn_fraction;
        c.attn_fwd = fwd / rate;
        c.attn_bwd = 2.5 * fwd / rate;
    } else {
        // Eager: two batched GEMMs over the full s x s scores (the mask does not skip work),
        // softmax (and dropout) over the s^2 scores in HBM.
        const double batches = b * heads_local;
        Rates r16 = r;
        r16.gemm_peak = r.attn_peak;
        r16.gemm_in_bytes = r.act_bytes;
        r16.gemm_max = kernel_efficiency(*r.e, p.precision).gemm_max_fraction_of_peak;
        r16.fp8 = false;
        const double bmm = batches * (gemm_s(s, s, d, r16) + gemm_s(s, d, s, r16));
        const double scores = batches * s * s;
        double soft_bytes = scores * 2.0 * ab;                       // read scores, write probabilities
        if (p.dropout > 0) soft_bytes += scores * (2.0 * ab + 1.0);  // read, write, 1-byte mask
        const double soft_bwd_bytes = scores * 3.0 * ab + (p.dropout > 0 ? scores * (2.0 * ab + 1.0) : 0);
        c.attn_fwd = bmm + (score_passes ? memory_s(soft_bytes, r) : 0.0);
        c.attn_bwd = 2.0 * bmm + (score_passes ? memory_s(soft_bwd_bytes, r) : 0.0);
    }

}

// ThroughputOptions::hf_eager_kernels: the layer's elementwise ops as Hugging Face's eager modules
// run them, op by op (eager_kernels.hpp), and the host time of their launches.
void eager_layer(LayerCost& c, const ModelConfig& m, const Plan& p, const Rates& r, const ThroughputOptions& opt) {
    const eager::LayerKernels k = eager::hf_layer_kernels(m, p, opt.hf_autocast);
    c.mem_fwd = memory_s(k.fwd_bytes, r);
    c.mem_bwd_s = memory_s(k.bwd_bytes, r);
    c.attn_fwd += memory_s(k.score_fwd_bytes, r);
    c.attn_bwd += memory_s(k.score_bwd_bytes, r);
    c.kernels_fwd = k.fwd_kernels;
    c.kernels_bwd = k.bwd_kernels;
    c.host_per_kernel_s = opt.eager_kernel_host_s;
}

LayerCost layer_cost(const ModelConfig& m, const Plan& p, const Rates& r, const LinkTier& tp_link,
                     const ThroughputOptions& opt) {
    const double t = static_cast<double>(p.tp);
    const double b = static_cast<double>(p.mbs), s = static_cast<double>(p.seq);
    const double M = b * s;  // tokens of the micro-batch (every TP rank sees all of them in its GEMMs)
    const double h = static_cast<double>(m.hidden), qw = static_cast<double>(m.q_width());
    const double kvw = static_cast<double>(m.kv_width()), f = static_cast<double>(m.ffn_hidden);
    const double ab = r.act_bytes;
    const double sp_div = p.sp ? t : 1.0;
    LayerCost c;

    // GEMMs, Megatron column/row split (Shoeybi et al. 2019, sec. 3).
    const double mats_in = m.mlp == MlpKind::swiglu ? 2.0 : 1.0;  // gate+up fused | fc1
    const double col[2] = {gemm_s(M, (qw + 2.0 * kvw) / t, h, r), gemm_s(M, mats_in * f / t, h, r)};  // QKV, up
    const double row[2] = {gemm_s(M, h, qw / t, r), gemm_s(M, h, f / t, r)};  // attention output, down
    c.gemm_fwd += col[0];
    c.gemm_fwd += row[0];
    if (m.is_moe()) {
        // Each expert sees M*k/E tokens on average (balanced routing assumed).
        const double E = static_cast<double>(m.experts);
        const double Me = std::max(1.0, M * static_cast<double>(m.experts_per_token) / E);
        Rates re = r;  // the experts' and the router's GEMMs: fp8's, or 16-bit ones beside fp8 (moe_experts_16bit)
        if (r.fp8 && opt.moe_experts_16bit)
            re.gemm_peak = r.gemm16_peak, re.gemm_max = r.gemm16_max, re.gemm_in_bytes = r.act_bytes, re.fp8 = false;
        c.gemm_fwd += E * (gemm_s(Me, mats_in * f / t, h, re) + gemm_s(Me, h, f / t, re));
        c.gemm_fwd += gemm_s(M, E, h, re);  // router
    } else {
        c.gemm_fwd += col[1] + row[1];
        // torchtitan's op policy saves the 1st, 3rd, 5th and 7th mm (wq, wv, w1, w2) of a SwiGLU
        // block: recompute re-runs wk, wo and w3 (_apply_ac_to_transformer_block).
        if (activations::op_sac_applies(m))
            c.op_sac_gemm = gemm_s(M, kvw / t, h, r) + row[0] + gemm_s(M, f / t, h, r);
    }

    const bool hf_eager = opt.hf_eager_kernels && !m.is_moe() && p.tp == 1;
    attention_core(c, m, p, r, !hf_eager);

    // Memory-bound elementwise ops, forward bytes (backward ~2x).
    const double Mk = M * (m.is_moe() ? static_cast<double>(m.experts_per_token) : 1.0);
    double bytes = 0;
    if (m.pre_norms) bytes += 2.0 * (2.0 * M * h * ab) / sp_div;  // two norms: read x, write normalized x
    bytes += 2.0 * (3.0 * M * h * ab) / sp_div;  // two residual adds: read 2, write 1
    if (m.position == PositionKind::rope) bytes += 2.0 * M * (qw + kvw) / t * ab;  // RoPE on q and k
    if (m.qk_norm) bytes += 2.0 * M * (qw + kvw) / t * ab;  // q/k norms (per head or whole): read, write normalized
    if (m.post_norms) bytes += 2.0 * (2.0 * M * h * ab) / sp_div;  // two post-sublayer norms, likewise
    bytes += (m.mlp == MlpKind::swiglu ? 3.0 : 2.0) * Mk * f / t * ab;  // silu(g)*u: read 2, write 1 | GeLU
    if (m.is_moe()) bytes += 4.0 * Mk * h * ab;                          // token dispatch + combine permutes
    if (p.dropout > 0) bytes += 2.0 * M * h * (2.0 * ab + 1.0) / sp_div;  // two residual dropouts
    c.mem_fwd = memory_s(bytes, r);
    if (hf_eager) eager_layer(c, m, p, r, opt);
    if (opt.runtime_column_sums)
        c.column_sums_bwd = static_cast<double>(runtime_column_sum_rows(m, p).per_layer) * r.e->column_sum_row_s;
    // amax reads the 16-bit weights, the cast reads them again and writes W and W^T (1 B each):
    // 2 + 2 + 2 bytes per element of the layer's GEMM weights (runtime/kernels/amax.cu, fp8_cast.cu).
    if (opt.fp8_casts_gathered_weights)  // (a 16-bit MoE MLP casts none)
        c.weight_cast = memory_s(6.0 * (h * (qw + 2.0 * kvw) + qw * h +
                                        (m.is_moe() && opt.moe_experts_16bit ? 0.0 : (mats_in + 1.0) * f * h)) / t, r);

    // Tensor parallel: two all-reduces of the b*s*h output per layer in forward (after
    // attention and after the MLP), two in backward; with sequence parallelism each
    // becomes an all-gather before the column-parallel GEMM and a reduce-scatter after the
    // row-parallel one, the same volume with half the latency steps each (Korthikanti et al.
    // 2022, sec. 4.2.2). Not overlapped with compute (Megatron's default) unless the linears
    // issue them asynchronously (opt.tp_async_overlap) or TransformerEngine pipelines them with
    // the GEMMs (opt.tp_comm_overlap).
    if (p.tp > 1) {
        const double bytes = M * h * ab;
        const double ag = gather_s(bytes, p.tp, tp_link), rs = scatter_s(bytes, p.tp, tp_link);
        c.tp_fwd = p.sp ? 2.0 * (ag + rs) : 2.0 * allreduce_s(bytes, p.tp, tp_link);
        c.tp_bwd_s = c.tp_fwd;
        if (opt.tp_comm_overlap && p.sp && !m.is_moe())
            userbuffers_tp_exposed(c, col, row, ag, rs);
        else if (opt.tp_async_overlap && p.sp && !m.is_moe())
            async_tp_exposed(c, col, row, ag, rs, t);
        // Recomputing wk and w3 gathers their normalized inputs again (the reduce-scatter outputs are saved).
        if (p.sp) c.op_sac_tp = 2.0 * ag;
    }
    return c;
}

}  // namespace

namespace {

// Peak rates of the plan's precision on this GPU, scaled by the fitted efficiencies.
Rates step_rates(const GpuSpec& gpu, const Plan& p, double peak, const ThroughputOptions& opt) {
    const Efficiency& e = gpu.efficiency;
    const PrecisionBytes pb = precision_bytes(p.precision);
    Rates r;
    r.e = &gpu.efficiency;
    r.gemm_peak = peak;
    const AttentionRate attn = attention_rate(gpu, p, opt, peak);
    r.attn_peak = attn.peak_flops_per_s;
    r.attn_fraction = attn.fraction_of_peak;
    r.hbm = gpu.hbm_bandwidth_bytes_per_s * e.memory_bound_fraction_of_hbm;
    r.gemm_in_bytes = pb.gemm_input;
    r.fp8 = p.precision == Precision::fp8_mixed;
    const KernelEfficiency k =
        kernel_efficiency(e, p.precision, opt.fused_attention, {p.fp8_scaling, opt.fp8_dynamic_scaling});
    r.gemm_max = r.fp8 ? k.fp8_gemm_max_fraction_of_peak : k.gemm_max_fraction_of_peak;
    if (r.fp8) {  // the bf16 rate of 16-bit GEMMs beside fp8 ones (moe_experts_16bit)
        r.gemm16_peak = compute_peak_flops_per_s(gpu, Precision::bf16_mixed).value_or(peak);
        r.gemm16_max = kernel_efficiency(e, Precision::bf16_mixed).gemm_max_fraction_of_peak;
    }
    r.half_dim = k.gemm_half_efficiency_dim;
    r.act_bytes = pb.activation;
    return r;
}

struct Links {
    LinkTier tp, dp, pp;
    std::int64_t nodes = 1;
};

// Rank order tp (fastest), dp, pp (Megatron-LM's and nanotron's process grids): the tp
// group is tp consecutive ranks, the dp group strides by tp, the pp group by tp*dp.
// A group wider than a node runs at the network tier (tp across nodes included).
Links plan_links(const GpuSpec& gpu, const Plan& p) {
    const Efficiency& e = gpu.efficiency;
    Network net;
    net.intra_node = {gpu.intra_node_bandwidth_bytes_per_s * e.collective_bus_efficiency, e.intra_node_latency_s};
    net.inter_node = {gpu.inter_node_bandwidth_bytes_per_s * e.inter_node_bus_efficiency, e.inter_node_latency_s};
    net.gpus_per_node = std::max(1, gpu.gpus_per_node);
    Links l;
    l.tp = group_link(net, place_group(p.tp, 1, net.gpus_per_node));
    l.dp = group_link(net, place_group(p.dp, p.tp, net.gpus_per_node));
    l.pp = group_link(net, place_group(2, p.tp * p.dp, net.gpus_per_node));
    l.nodes = (p.gpus() + net.gpus_per_node - 1) / net.gpus_per_node;
    return l;
}

// One layer's forward, backward (with what recomputation re-executes), TP collectives and
// the host-dispatch gap, for one micro-batch.
struct LayerTimes {
    double fwd = 0, bwd = 0, tp = 0, host = 0, recompute = 0, column_sums = 0;
    std::int64_t kernels = 0;  // launches counted (ThroughputOptions::hf_eager_kernels), else 0
};

// op_sac: torchtitan's op-level selective recompute applies (the option and activations::op_sac_applies).
// span_host_s: the extra host time per layer when the pipeline spans nodes (0 otherwise).
LayerTimes layer_times(const LayerCost& lc, const Plan& p, const Efficiency& e, bool op_sac, double span_host_s) {
    LayerTimes t;
    double recompute_tp = 0;
    if (p.recompute == Recompute::full) {
        t.recompute = lc.gemm_fwd + lc.attn_fwd + lc.mem_fwd;  // the layer's forward again
        recompute_tp = lc.tp_fwd;
    } else if (p.recompute == Recompute::selective && op_sac) {
        t.recompute = lc.op_sac_gemm + lc.mem_fwd;  // torchtitan's op policy: unsaved GEMMs + elementwise
        recompute_tp = lc.op_sac_tp;
    } else if (p.recompute == Recompute::selective) {
        t.recompute = lc.attn_fwd;  // attention core only (Korthikanti et al. 2022, sec. 5)
    }
    t.fwd = lc.gemm_fwd + lc.attn_fwd + lc.mem_fwd + lc.weight_cast;
    t.bwd = lc.gemm_bwd() + lc.attn_bwd + lc.mem_bwd() + lc.column_sums_bwd + lc.weight_cast + t.recompute;
    t.column_sums = lc.column_sums_bwd;
    t.tp = lc.tp_fwd + lc.tp_bwd() + recompute_tp;
    // Host-side dispatch of one layer's forward and backward (fitted; 0 by default): the GPU
    // idles for the part its own work for the layer does not cover.
    // ThroughputOptions::hf_eager_kernels: every kernel's launch, the recomputed forward's again.
    t.kernels = lc.kernels_fwd * (p.recompute == Recompute::full ? 2 : 1) + lc.kernels_bwd;
    const double host = t.kernels > 0 ? static_cast<double>(t.kernels) * lc.host_per_kernel_s
                                      : e.layer_launch_overhead_s + (p.tp > 1 ? e.tp_layer_launch_overhead_s : 0.0) +
                                            span_host_s;
    t.host = std::max(0.0, host - (t.fwd + t.bwd + t.tp));
    return t;
}

// The embedding (first stage) and the output layer + loss (last stage), one micro-batch.
struct EdgeTimes {
    double embed_compute = 0, embed_tp = 0, head_fwd = 0, head_bwd = 0, head_tp = 0;
    double head_column_sums = 0;  // the final norm's weight gradient (runtime), inside head_bwd
};

EdgeTimes edge_times(const ModelConfig& model, const Plan& p, const Rates& r, const LinkTier& tp_link,
                     const ThroughputOptions& opt) {
    const double M = static_cast<double>(p.mbs * p.seq), h = static_cast<double>(model.hidden);
    const double ab = r.act_bytes, t = static_cast<double>(p.tp), sp_div = p.sp ? t : 1.0;
    EdgeTimes x;
    // Embedding: row gather + scatter-add gradient (fp32).
    x.embed_compute = memory_s(2.0 * M * h * ab / sp_div, r) + memory_s(2.0 * M * h * 4.0 / sp_div, r);
    // Vocab-parallel embedding: all-reduce in forward, nothing in backward; under SP a
    // reduce-scatter in forward and an all-gather of the output gradient in backward.
    if (p.tp > 1)
        x.embed_tp = p.sp ? scatter_s(M * h * ab, p.tp, tp_link) + gather_s(M * h * ab, p.tp, tp_link)
                          : allreduce_s(M * h * ab, p.tp, tp_link);
    // Output layer: final norm, LM-head GEMM (vocab split over TP), cross-entropy over the
    // logits (read at activation width, fp32 working copy, gradient written back).
    const double v_local = std::ceil(static_cast<double>(model.vocab) / t);
    double loss_fwd_bytes = ab + 8.0, loss_bwd_bytes = 4.0 + ab;  // per logit
    if (opt.hf_eager_kernels && !opt.compiled_loss) {
        // Hugging Face's loss (ForCausalLMLoss; train.py's own the same): logits.float() (a cast
        // unless fp32), log_softmax (fp32 in, fp32 out) and nll_loss; backward: nll_loss's
        // zero-filled fp32 gradient, log_softmax's (reads gradient and output), the cast back.
        const double cast = ab == 4 ? 0.0 : ab + 4.0;
        loss_fwd_bytes = cast + 8.0;
        loss_bwd_bytes = 4.0 + 12.0 + cast;
    }
    x.head_fwd = memory_s(2.0 * M * h * ab / sp_div, r) + gemm_s(M, v_local, h, r) + memory_s(M * v_local * loss_fwd_bytes, r);
    x.head_bwd = memory_s(4.0 * M * h * ab / sp_div, r) + 2.0 * gemm_s(M, v_local, h, r) +
                 memory_s(M * v_local * loss_bwd_bytes, r);
    if (opt.runtime_column_sums) {
        x.head_column_sums = static_cast<double>(runtime_column_sum_rows(model, p).final_norm) * r.e->column_sum_row_s;
        x.head_bwd += x.head_column_sums;
    }
    // Vocab-parallel cross-entropy: two small all-reduces (max, sum-exp); the column-parallel
    // head gathers its input under SP (reduce-scatter of its gradient) or all-reduces the
    // input gradient without SP (Megatron-LM tensor_parallel/cross_entropy.py, layers.py).
    if (p.tp > 1)
        x.head_tp = 2.0 * allreduce_s(M * 4.0, p.tp, tp_link) +
                    (p.sp ? gather_s(M * h * ab, p.tp, tp_link) + scatter_s(M * h * ab, p.tp, tp_link)
                          : allreduce_s(M * h * ab, p.tp, tp_link));
    return x;
}

// The slowest stage sets the 1F1B slot: its compute and TP time per micro-batch.
struct Slot {
    double compute = 0, tp = 0;
    std::int64_t layers = 0;
    double column_sums = 0;  // inside compute
};

// One stage's slot: n layers, plus the embedding on the first stage and the output layer on the last.
Slot stage_slot(std::int64_t n, bool first, bool last, const LayerTimes& lt, const EdgeTimes& x) {
    Slot sl;
    sl.compute = static_cast<double>(n) * (lt.fwd + lt.bwd + lt.host) + (first ? x.embed_compute : 0.0) +
                 (last ? x.head_fwd + x.head_bwd : 0.0);
    sl.tp = static_cast<double>(n) * lt.tp + (first ? x.embed_tp : 0.0) + (last ? x.head_tp : 0.0);
    sl.layers = n;
    sl.column_sums = static_cast<double>(n) * lt.column_sums + (last ? x.head_column_sums : 0.0);
    return sl;
}

Slot bottleneck_slot(const throughput_detail::StageLayers& s, const LayerTimes& lt, const EdgeTimes& x, std::int64_t pp) {
    auto stage = [&](std::int64_t n, bool first, bool last) { return stage_slot(n, first, last, lt, x); };
    const Slot first = stage(s.first, true, pp == 1);
    const Slot last = stage(s.last, pp == 1, true);
    const Slot middle = s.custom && pp > 2 ? stage(s.middle_max, false, false) : Slot{};
    auto total = [](const Slot& sl) { return sl.compute + sl.tp; };
    if (total(first) >= total(last) && total(first) >= total(middle)) return first;
    return total(middle) > total(last) ? middle : last;
}

// The fitted stall (stall_per_micro_batch_s, host_pace.cpp) over the step's micro-batches.
double microbatch_sync_s(const Efficiency& e, const Plan& p, std::int64_t nodes) {
    return static_cast<double>(p.grad_acc) * stall_per_micro_batch_s(e, p, nodes);
}

// Exposed data-parallel / ZeRO communication per step (Rajbhandari et al. 2020, sec. 7:
// ZeRO-0..2 move 2*Psi per step, ZeRO-3 3*Psi). Bucketed reductions overlap the backward
// pass; the last bucket cannot (Li et al. 2020, PyTorch DDP, sec. 3.2.3).
// `weight_bytes`: the stage's weights as they are gathered (gathered_weight_bytes).
double dp_exposed_s(const Plan& p, double params, double weight_bytes, const PrecisionBytes& pb,
                    std::int64_t bucket_bytes, const LinkTier& dp_link, std::int64_t slot_layers, double mb_fwd,
                    double mb_bwd) {
    if (p.dp <= 1) return 0.0;
    const int grad_reduce_bytes = pb.gradient_accum > 0 ? 4 : pb.gradient;  // fp32 buffer is what gets reduced
    const double G = params * grad_reduce_bytes;
    const double W = weight_bytes;
    const double bucket_share = std::min(1.0, static_cast<double>(bucket_bytes) / std::max(G, 1.0));
    const double m_count = static_cast<double>(p.grad_acc);
    auto overlapped = [&](double comm, double window, double tail) { return std::max(comm - window, tail); };
    switch (p.zero) {
        case 0: {  // one all-reduce per step, during the last micro-batch's backward
            const double ar = allreduce_s(G, p.dp, dp_link);
            return overlapped(ar, mb_bwd, ar * bucket_share);
        }
        case 1: {  // one reduce-scatter per step (overlapped) + all-gather of updated weights (exposed)
            const double rs = scatter_s(G, p.dp, dp_link);
            return overlapped(rs, mb_bwd, rs * bucket_share) + gather_s(W, p.dp, dp_link);
        }
        case 2: {  // only a gradient shard is kept: reduce-scatter after every micro-batch
            const double rs = scatter_s(G, p.dp, dp_link);
            return m_count * overlapped(rs, mb_bwd, rs * bucket_share) + gather_s(W, p.dp, dp_link);
        }
        default: {  // ZeRO-3: gather weights for forward and again for backward, reduce-scatter
                    // gradients, every micro-batch; prefetch overlaps all but one layer's share
            const double ag = gather_s(W, p.dp, dp_link);
            const double rs = scatter_s(G, p.dp, dp_link);
            const double per_layer = 1.0 / static_cast<double>(std::max<std::int64_t>(slot_layers, 1));
            return m_count * (overlapped(ag, mb_fwd, ag * per_layer) + overlapped(ag + rs, mb_bwd, rs * per_layer));
        }
    }
}

// The bytes a weight all-gather moves for `params` weights of which `layers` decoder layers'
// GEMM weights: under --fp8-param-gather Megatron-LM's distributed optimizer gathers those as
// their 1-byte fp8 data (param_and_grad_buffer.py: uint8 parameter buffer; fp8_params.cpp), the
// rest at the 16-bit width.
double gathered_weight_bytes(const Plan& p, double params, const throughput_detail::StageParams& sp,
                             std::int64_t layers, const PrecisionBytes& pb) {
    const double fp8 = p.fp8_param_gather ? sp.gemm_per_layer * static_cast<double>(layers) : 0.0;
    return (params - fp8) * pb.weight + fp8 * 1.0;
}

// Optimizer step: a memory-bound pass over this GPU's shard of the states.
double optimizer_step_s(const Plan& p, double params, const PrecisionBytes& pb, const Rates& r) {
    const double shard = p.zero >= 1 ? params / static_cast<double>(p.dp) : params;
    const double opt_state = optimizer_bytes_per_param(p.optimizer);
    const double grad_read = pb.gradient_accum > 0 ? 4.0 : pb.gradient;
    double bytes_per_param = grad_read + 2.0 * opt_state;  // read gradient; read + write moments
    if (pb.master > 0)
        bytes_per_param += 2.0 * pb.master + pb.weight;  // read + write master, write the 16-bit copy
    else
        bytes_per_param += 2.0 * pb.weight;  // update the weights in place
    return memory_s(shard * bytes_per_param, r);
}

double checked_peak_flops_per_s(const GpuSpec& gpu, const Plan& p) {
    const std::optional<double> peak = compute_peak_flops_per_s(gpu, p.precision);
    if (!peak)
        throw InputError("--precision", gpu.name + " publishes no dense " +
                                            std::string(p.precision == Precision::fp8_mixed ? "fp8" : "peak") +
                                            " throughput for " + std::string(to_string(p.precision)) +
                                            "; its speed and MFU are unknown");
    return *peak;
}

}  // namespace

ThroughputOptions throughput_options_for(const FrameworkProfile& profile, const ModelConfig& model, const Plan& plan,
                                         ThroughputOptions base) {
    base.fused_attention = profile.fused_attention;
    base.fp8_dynamic_scaling = profile.fp8_dynamic_scaling;
    if (profile.adjust_throughput) profile.adjust_throughput(model, plan, base);
    return base;
}

Throughput estimate_throughput(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan_in,
                               const ThroughputOptions& opt) {
    if (uses_extended_throughput(plan_in)) {  // fine-tuning, offload, schedules, cp, ep (extensions.hpp)
        if (opt.own_stage >= 0 && plan_in.pp > 1)
            throw std::invalid_argument("own_stage: a plan of 1F1B stages without extensions only");
        return estimate_extended_throughput(model, gpu, plan_in, opt);
    }
    const Plan p = resolve_defaults(plan_in, model);
    validate_plan(p, model);
    const double peak = checked_peak_flops_per_s(gpu, p);
    const Efficiency& e = gpu.efficiency;
    const PrecisionBytes pb = precision_bytes(p.precision);
    const Rates r = step_rates(gpu, p, peak, opt);
    const Links links = plan_links(gpu, p);
    // Efficiency::pipeline_span_layer_host_per_tp_s: stages on more than one node.
    const double span_host_s = opt.spanning_pipeline_host && p.pp > 1 && links.nodes > 1
                                   ? e.pipeline_span_layer_host_per_tp_s * static_cast<double>(p.tp)
                                   : 0.0;
    const LayerTimes lt = layer_times(layer_cost(model, p, r, links.tp, opt), p, e,
                                      opt.selective_op_sac && activations::op_sac_applies(model), span_host_s);
    const EdgeTimes edges = edge_times(model, p, r, links.tp, opt);
    const throughput_detail::StageLayers layers = throughput_detail::stage_layers(model, p, opt);
    // ThroughputOptions::own_stage: that stage's layers (the framework's split or the planner's).
    const bool own = opt.own_stage >= 0 && p.pp > 1;
    if (opt.own_stage >= p.pp)
        throw std::invalid_argument("own_stage " + std::to_string(opt.own_stage) + " of a plan with " +
                                    std::to_string(p.pp) + " pipeline stages");
    const bool own_first = own && opt.own_stage == 0, own_last = own && opt.own_stage == p.pp - 1;
    const std::int64_t own_layers = !own ? 0 : layers.custom ? layers.split[static_cast<std::size_t>(opt.own_stage)]
                                                             : pipeline_stage_layers(p, model.layers, opt.own_stage);
    const Slot slot = own ? stage_slot(own_layers, own_first, own_last, lt, edges) : bottleneck_slot(layers, lt, edges, p.pp);
    // Pipeline: each micro-batch's activation goes forward and its gradient back across a
    // stage boundary (scattered by TP under SP).
    const double sp_div = p.sp ? static_cast<double>(p.tp) : 1.0;
    const double act_bytes = static_cast<double>(p.mbs * p.seq) * static_cast<double>(model.hidden) * pb.activation;
    const double p2p = p.pp > 1 ? 2.0 * p2p_s(act_bytes / sp_div, links.pp) : 0.0;

    Throughput out;
    const double m_count = static_cast<double>(p.grad_acc);
    // 1F1B: m micro-batch slots in steady state plus (p-1) fill/drain slots
    // (Narayanan et al. 2021, sec. 2.2.1: bubble fraction (p-1)/m).
    out.compute_s = m_count * slot.compute;
    out.column_sums_s = m_count * slot.column_sums;
    out.tp_communication_s = m_count * slot.tp;
    out.pp_communication_s = m_count * p2p;
    out.pipeline_bubble_s = pipeline_bubble_fraction(p.pp, p.grad_acc) * m_count * (slot.compute + slot.tp + p2p);
    out.launch_overhead_s = m_count * static_cast<double>(slot.layers) * lt.host;
    out.compute_s -= out.launch_overhead_s;
    out.microbatch_sync_s = opt.cluster_stall ? microbatch_sync_s(e, p, links.nodes) : 0.0;
    const throughput_detail::StageParams sp = own ? throughput_detail::stage_params(model, p, own_layers, own_layers)
                                                        : throughput_detail::stage_params(model, p, layers.first, layers.last);
    const throughput_detail::BusiestStage busiest = throughput_detail::busiest_stage(sp, layers, p);
    const double params = !own      ? busiest.params
                          : own_first ? sp.first
                          : own_last  ? sp.last
                                      : sp.per_layer * static_cast<double>(own_layers);
    const std::int64_t params_layers = own ? own_layers : busiest.layers;
    const double n_slot = static_cast<double>(slot.layers);
    out.dp_communication_s = dp_exposed_s(p, params, gathered_weight_bytes(p, params, sp, params_layers, pb), pb,
                                          opt.grad_bucket_bytes, links.dp, slot.layers, n_slot * lt.fwd,
                                          n_slot * lt.bwd);
    out.optimizer_s = optimizer_step_s(p, params, pb, r);
    out.overhead_s = e.step_overhead_s;
    if (lt.kernels > 0)
        out.host_dispatch = {lt.kernels, opt.eager_kernel_host_s, lt.fwd + lt.bwd + lt.tp, slot.layers * p.grad_acc};
    throughput_detail::finish_throughput(out, model, p, opt, peak, n_slot * lt.recompute * m_count);
    return out;
}

double gemm_time_s(const GpuSpec& gpu, Precision precision, double m, double n, double k, double batch) {
    const std::optional<double> peak = compute_peak_flops_per_s(gpu, precision);
    if (!peak || *peak <= 0)
        throw InputError("--gpu", gpu.name + " publishes no dense peak for " + std::string(to_string(precision)));
    Plan p;
    p.precision = precision;
    return batch * gemm_s(m, n, k, step_rates(gpu, p, *peak, ThroughputOptions{}));
}

}  // namespace preflight
