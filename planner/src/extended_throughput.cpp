// Step time of plans with extensions: the base step-time model evaluated on the
// context-parallel rank's view of a full-fine-tune, non-offloaded 1F1B plan, then what
// each extension adds or removes: ring-attention work and K/V exchange, expert
// all-to-all, LoRA (no weight-gradient GEMMs for frozen weights, adapter GEMMs, QLoRA
// dequantisation, the adapters' optimizer step), the pipeline schedule's bubble, and
// offload (CPU optimizer step, PCIe transfers).
#include <algorithm>
#include <cmath>

#include "preflight/planner/collectives.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/extensions.hpp"
#include "stage_params.hpp"

namespace preflight {

bool uses_extended_throughput(const Plan& p) { return !extended_setting_flag(p).empty(); }

std::string extended_setting_flag(const Plan& p) {
    const std::pair<bool, const char*> settings[] = {
        {p.finetune != Finetune::full, "--finetune"},
        {p.offload != Offload::none, "--offload"},
        {p.pp_schedule != PpSchedule::one_f_one_b, "--pp-schedule"},
        {p.vpp != 1, "--vpp"},
        {p.cp > 1, "--cp"},
        {p.ep > 1, "--ep"},
        {p.moe_capacity_factor != 1.0, "--moe-capacity-factor"},
    };
    for (const auto& [set, flag] : settings)
        if (set) return flag;
    return "";
}

namespace {

struct Rates {
    double gemm_peak = 0, gemm_max = 0, half_dim = 128, hbm = 0, attn = 0;
    int in_bytes = 2, act_bytes = 2;
};

// Same GEMM form as the base model: a shape-dependent fraction of the peak, bounded by HBM traffic.
double gemm_s(double M, double N, double K, const Rates& r) {
    const double d = std::min({M, N, K});
    const double eff = r.gemm_max * d / (d + r.half_dim);
    const double bytes = (M * K + K * N) * r.in_bytes + M * N * r.act_bytes;
    return std::max(2.0 * M * N * K / (r.gemm_peak * eff), bytes / r.hbm);
}

double bus_for(std::int64_t span, const GpuSpec& gpu) {
    const double bw = span <= std::max(1, gpu.gpus_per_node) ? gpu.intra_node_bandwidth_bytes_per_s
                                                             : gpu.inter_node_bandwidth_bytes_per_s;
    return bw * gpu.efficiency.collective_bus_efficiency;
}

void set_slice(Throughput& t, const std::string& name, double seconds) {
    for (auto& s : t.breakdown)
        if (s.name == name) {
            s.seconds = seconds;
            return;
        }
    t.breakdown.push_back({name, seconds});
}

// The per-rank dimensions every extension term reads.
struct Shape {
    double m = 0, L = 0, tp = 0, s_local = 0, b = 0, M = 0, h = 0, ab = 0;
    bool full_rc = false;
};

// What the extensions change, accumulated term by term in a fixed order.
struct Deltas {
    double d_compute = 0;   // change of the GPU compute time per step
    double extra_comm = 0;  // exposed cp / ep communication per step
    double ep_comm = 0;     // its expert-parallel part
    double adapters_s = 0, dequant_s = 0;
};

// The base plan: the context-parallel rank's view as a full-fine-tune, non-offloaded 1F1B plan.
Plan base_plan_of(const Plan& p) {
    Plan base = context_parallel_rank_plan(p);
    base.cp_full_seq = 0;
    base.finetune = Finetune::full;
    base.lora = {};
    base.offload = Offload::none;
    base.pp_schedule = PpSchedule::one_f_one_b;
    base.vpp = 1;
    base.ep = 1;
    base.moe_capacity_factor = 1.0;
    return base;
}

// GEMM, HBM and attention rates of this GPU and precision.
Rates rates_for(const GpuSpec& gpu, const Plan& p, const Throughput& t, const PrecisionBytes& pb,
                const ThroughputOptions& opt) {
    const Efficiency& e = gpu.efficiency;
    Rates r;
    r.gemm_peak = t.peak_flops_per_s;
    const KernelEfficiency k =
        kernel_efficiency(e, p.precision, opt.fused_attention, {p.fp8_scaling, opt.fp8_dynamic_scaling});
    // fp8-mixed GEMMs against the fp8 peak at the fp8 figure (the cast traffic is not charged here).
    r.gemm_max = p.precision == Precision::fp8_mixed ? k.fp8_gemm_max_fraction_of_peak : k.gemm_max_fraction_of_peak;
    r.half_dim = k.gemm_half_efficiency_dim;
    r.hbm = gpu.hbm_bandwidth_bytes_per_s * e.memory_bound_fraction_of_hbm;
    r.in_bytes = pb.gemm_input;
    r.act_bytes = pb.activation;
    const AttentionRate attn = attention_rate(gpu, p, opt, t.peak_flops_per_s);
    r.attn = attn.peak_flops_per_s * attn.fraction_of_peak;
    return r;
}

// The per-rank dimensions of the plan.
Shape shape_of(const ModelConfig& model, const Plan& p, const Plan& base, const PrecisionBytes& pb,
               const throughput_detail::StageLayers& layers) {
    Shape sh;
    sh.m = static_cast<double>(p.grad_acc);
    // Layers on the busiest stage: the even split's first, or the most of a custom split.
    sh.L = static_cast<double>(layers.custom ? *std::max_element(layers.split.begin(), layers.split.end())
                                             : layers.first);
    sh.tp = static_cast<double>(p.tp);
    sh.s_local = static_cast<double>(base.seq);
    sh.b = static_cast<double>(p.mbs);
    sh.M = sh.b * sh.s_local;  // tokens per micro-batch on one rank
    sh.h = static_cast<double>(model.hidden);
    sh.ab = pb.activation;
    sh.full_rc = p.recompute == Recompute::full;
    return sh;
}

// Context parallelism: ring-attention work and the exposed K/V exchange.
void add_context_parallel(const ModelConfig& model, const GpuSpec& gpu, const Plan& p, const Rates& r,
                          const Shape& sh, const ThroughputOptions& opt, Deltas& d) {
    const double m = sh.m, L = sh.L, tp = sh.tp, s_local = sh.s_local, b = sh.b, M = sh.M, ab = sh.ab;
    // Context parallelism: the base model charged a causal flash kernel for (s/cp)^2 per
    // rank; with load-balanced ring attention each rank computes (s/cp) x s, cp times more.
    const double cp = static_cast<double>(p.cp);
    const double attn_fwd = 0.5 * 4.0 * b * s_local * s_local * static_cast<double>(model.q_width()) / tp / r.attn;
    const double rc = p.recompute == Recompute::none ? 0.0 : 1.0;
    d.d_compute += m * L * (cp - 1.0) * (1.0 + 2.5 + rc) * attn_fwd;
    // K/V chunks travel cp - 1 hops per layer forward; K/V and dK/dV backward, hidden
    // behind the attention of the chunk in hand where the link keeps up.
    const double kv_bytes = (cp - 1.0) * 2.0 * M * static_cast<double>(model.kv_width()) / tp * ab;
    const double bus = bus_for(p.tp * p.cp, gpu);
    if (opt.cp_all_gather_kv) {  // (cp - 1) / cp of the sequence's K/V in each gather, as in the reduce-scatter
        d.extra_comm += m * L * (3.0 + rc) * kv_bytes / bus;
        return;
    }
    const double fwd = std::max(0.0, kv_bytes / bus - cp * attn_fwd);
    const double bwd = std::max(0.0, 2.0 * kv_bytes / bus - cp * 2.5 * attn_fwd);
    d.extra_comm += m * L * (fwd * (1.0 + (sh.full_rc ? 1.0 : 0.0)) + bwd);
}

// One all-to-all of `bytes` per rank spread evenly over the ep ranks of a group lying tp apart.
// NCCL runs it as a group of sends to every peer at once (ncclGroupStart, ncclSend/ncclRecv per peer):
// to the group's members in the rank's node over NVLink, to the others over its NIC, both links
// busy together, so the larger share over its link sets the time. A group inside one node is
// (ep - 1)/ep of the bytes over NVLink; across nodes the NIC carries (ep - members per node)/ep.
double all_to_all_s(double bytes, std::int64_t tp, std::int64_t ep, const GpuSpec& gpu) {
    const double eff = gpu.efficiency.collective_bus_efficiency;
    const double local = static_cast<double>(place_group(ep, tp, gpu.gpus_per_node).ranks_per_node);
    const double n = static_cast<double>(ep);
    const auto over = [&](double peers, double bandwidth) { return peers > 0 ? bytes * peers / n / (bandwidth * eff) : 0.0; };
    return std::max(over(local - 1.0, gpu.intra_node_bandwidth_bytes_per_s),
                    over(n - local, gpu.inter_node_bandwidth_bytes_per_s));
}

// Expert parallelism: the exposed dispatch and combine all-to-all.
void add_expert_parallel(const ModelConfig& model, const GpuSpec& gpu, const Plan& p, const Shape& sh,
                         const ThroughputOptions& opt, Deltas& d) {
    const double ep = static_cast<double>(p.ep);
    // An ep group's ranks lie tp apart, ep of them: Megatron-Core's expert grid orders its ranks
    // etp-ep-edp-pp with cp folded into ep x edp (parallel_state.py initialize_model_parallel,
    // expert_decoder_rank_generator, at d98e8a6; etp = tp by default), and the runtime's blocks are
    // ep consecutive ranks of its dp x cp view (program_types.cpp group_key): the span is tp x ep.
    const double bus = bus_for(p.tp * p.ep, gpu);
    if (opt.ep_all_gather_tokens) {
        // The runtime's (program_moe.cpp): per MoE layer the block's tokens all-gathered and the
        // partial combine reduce-scattered in forward (the gather again under full recompute), the
        // output gradient all-gathered and the input gradient reduce-scattered in backward; each
        // moves (ep - 1) x the rank's tokens x h, waited for at once.
        const double per = (ep - 1.0) * sh.M * sh.h * sh.ab / bus;
        d.ep_comm = sh.m * sh.L * per * (4.0 + (sh.full_rc ? 1.0 : 0.0));
        d.extra_comm += d.ep_comm;
        return;
    }
    // Expert parallelism: dispatch and combine all-to-all per MoE layer forward, the same
    // backward (and again under full recompute); (ep-1)/ep of the routed tokens leave the rank.
    const double routed = sh.M * static_cast<double>(model.experts_per_token) * sh.h * sh.ab * p.moe_capacity_factor;
    const double per = 2.0 * all_to_all_s(routed, p.tp, p.ep, gpu);
    d.ep_comm = sh.m * sh.L * per * (2.0 + (sh.full_rc ? 1.0 : 0.0));
    d.extra_comm += d.ep_comm;
}

// LoRA / QLoRA: no weight-gradient GEMMs for frozen weights, adapter GEMMs, dequantisation.
void add_lora_compute(const ModelConfig& model, const Plan& p, const Rates& r, const Shape& sh, Deltas& d) {
    const double m = sh.m, L = sh.L, tp = sh.tp, M = sh.M, ab = sh.ab;
    const bool full_rc = sh.full_rc;
    // Frozen weights: the backward runs only the input-gradient GEMMs, so each linear's
    // weight-gradient GEMM (same shape as its forward) disappears.
    double wgrad = 0, adapter_bytes = 0, dequant_bytes = 0;
    for (const ParamTensor& pt : param_tensors(model)) {
        if (!pt.gemm_weight) continue;
        const double out = static_cast<double>(pt.split == TpSplit::column ? pt.rows / p.tp : pt.rows);
        const double in = static_cast<double>(pt.split == TpSplit::row ? pt.cols / p.tp : pt.cols);
        if (pt.place == TensorPlace::layer) {
            const double E = static_cast<double>(pt.copies);
            const double tokens = pt.copies > 1 ? std::max(1.0, M * static_cast<double>(model.experts_per_token) / E) : M;
            wgrad += E * gemm_s(tokens, out, in, r);
            const bool targeted = (lora_target_bit(pt.name) & p.lora.targets) != 0;
            if (targeted) {
                // Rank-r GEMMs are bandwidth-bound: read x, write and read the r-wide
                // intermediate, read-add-write the output; backward about twice that.
                const double tok = tokens * E;
                double fwd = tok * (in + 3.0 * out + 2.0 * static_cast<double>(p.lora.rank)) * ab;
                if (p.lora.dropout > 0) fwd += tok * in * (2.0 * ab + 1.0);
                adapter_bytes += fwd * (3.0 + (full_rc ? 1.0 : 0.0));
            }
            if (p.finetune == Finetune::qlora && qlora_quantizes(model, pt)) {
                // dequantize_4bit: read 0.5 B + constants, write 2 B per weight, for the
                // forward, the input-gradient GEMM and a recomputed forward.
                dequant_bytes += E * out * in * (0.5 + 2.0 + 1.0 / 64.0) * (2.0 + (full_rc ? 1.0 : 0.0));
            }
        } else if (p.pp == 1) {
            wgrad += gemm_s(M, static_cast<double>(pt.rows) / tp, static_cast<double>(pt.cols), r) / L;  // LM head
        }
    }
    d.adapters_s = m * L * adapter_bytes / r.hbm;
    d.dequant_s = m * L * dequant_bytes / r.hbm;
    d.d_compute += -m * L * wgrad + d.adapters_s + d.dequant_s;
}

// Trainable parameters on this GPU after ZeRO sharding; for LoRA also the adapters'
// optimizer step and the reduced gradient volume.
double trainable_shard(const ModelConfig& model, const Plan& p, const PrecisionBytes& pb, const Rates& r,
                       const throughput_detail::StageLayers& layers, const Shape& sh, Throughput& t) {
    // Trainable TP-local parameters (before ZeRO) for the optimizer, the gradient reduction and
    // offload: the stage with the most parameters, as the base model's reduction and step
    // (throughput.cpp); LoRA's adapters on the stage with the most layers.
    const double stage_params =
        throughput_detail::busiest_stage(throughput_detail::stage_params(model, p, layers.first, layers.last), layers, p)
            .params;
    const double trainable = p.finetune == Finetune::full
                                 ? stage_params
                                 : static_cast<double>(lora_params_per_layer(model, p.lora, p.tp)) * sh.L;
    const double zero_ranks = static_cast<double>(p.dp * p.cp);
    const double shard = p.zero >= 1 ? trainable / zero_ranks : trainable;
    if (p.finetune != Finetune::full) {
        // fp32 adapters: read gradient (4), read + write both moments (16), read + write weight (8).
        t.optimizer_s = shard * (4.0 + 2.0 * optimizer_bytes_per_param(p.optimizer) + 8.0) / r.hbm;
        // Only the fp32 adapter gradients are reduced.
        const int grad_bytes = pb.gradient_accum > 0 ? 4 : pb.gradient;
        t.dp_communication_s *= trainable * 4.0 / (stage_params * grad_bytes);
    }
    return shard;
}

// Offload: CPU optimizer step plus the PCIe transfers compute does not hide.
void apply_offload(const ModelConfig& model, const GpuSpec& gpu, const Plan& p, const OffloadAssumptions& oa,
                   double shard, double m, double d_compute, Throughput& t) {
    // Offload: the optimizer runs on the CPU; gradients go to the host (overlapping the last
    // micro-batch's backward), updated parameters come back (exposed), and ZeRO-Infinity
    // streams parameters in for every forward and backward (prefetched behind compute).
    if (!gpu.pcie_bandwidth_bytes_per_s)
        throw InputError("--offload", gpu.name + " has no pcie_bandwidth_bytes_per_s in its spec: the offload "
                                                 "step time is unknown");
    const double pcie = *gpu.pcie_bandwidth_bytes_per_s * oa.pcie_efficiency;
    const PcieTraffic tr = offload_pcie_traffic(model, p);
    const double cpu_step = shard * 30.0 / oa.host_bandwidth_bytes_per_s_per_gpu;
    const double last_bwd = 2.0 * t.compute_s / (3.0 * m);
    double exposed = std::max(0.0, tr.gradients_to_host / pcie - last_bwd) + tr.params_to_device / pcie;
    exposed += std::max(0.0, tr.param_fetches / pcie - (t.compute_s + d_compute));
    t.offload_s = cpu_step + exposed;
    t.optimizer_s = 0;
    t.pcie_bytes_per_step = tr.total();
}

// Step time as the sum of its parts (the base estimate's, throughput.cpp, plus the extensions'),
// then tokens per second. The host dispatch and the micro-batch synchronisation were left out
// until 2026-11-29: an interleaved plan's step was short by its host dispatch and ranked too high.
void finish_step_time(const Plan& p, const Deltas& d, Throughput& t) {
    t.step_time_s = t.compute_s + t.launch_overhead_s + d.adapters_s + d.dequant_s + t.tp_communication_s +
                    t.pp_communication_s + t.pipeline_bubble_s + t.microbatch_sync_s + t.dp_communication_s +
                    t.optimizer_s + t.overhead_s + t.cp_ep_communication_s + t.offload_s;
    t.gpus = p.gpus();
    t.tokens_per_step = p.global_batch_tokens();
    t.tokens_per_s = static_cast<double>(t.tokens_per_step) / t.step_time_s;
    t.tokens_per_s_per_gpu = t.tokens_per_s / static_cast<double>(t.gpus);
}

// Model and hardware FLOPs of a LoRA step: frozen weights skip their weight gradients.
void lora_step_flops(const ModelConfig& model, const Plan& p, const ThroughputOptions& opt, FlopCounts& fc) {
    // Frozen weights: forward + input gradient (2 x forward) for every linear; attention
    // core forward + backward (3 x); adapters 3 x their forward (2 r (in + out) per token).
    const ForwardFlopsPerToken f = forward_flops_per_token(model, p.seq, opt.attention_flops);
    const double lin = f.qkv + f.attention_out + f.mlp + f.router;
    const double core = f.attention_core();
    double adapter = 0;
    for (const ParamTensor& pt : param_tensors(model))
        if (pt.place == TensorPlace::layer && pt.gemm_weight) {
            const double share = pt.copies > 1 ? static_cast<double>(model.experts_per_token) : 1.0;
            const unsigned bit = lora_target_bit(pt.name);
            if (bit & p.lora.targets)
                adapter += share * 2.0 * static_cast<double>(p.lora.rank) * static_cast<double>(pt.rows + pt.cols);
        }
    const double Ld = static_cast<double>(model.layers);
    const double per_token = Ld * (2.0 * lin + 3.0 * core + 3.0 * adapter) + 2.0 * f.lm_head;
    double hw = per_token;
    if (p.recompute == Recompute::full) hw += Ld * (lin + core + adapter);
    if (p.recompute == Recompute::selective) hw += Ld * core;
    const double tokens = static_cast<double>(p.global_batch_tokens());
    fc.model_flops_per_token = per_token;
    fc.hardware_flops_per_token = hw;
    fc.model_flops_per_step = per_token * tokens;
    fc.hardware_flops_per_step = hw * tokens;
}

// MFU and HFU from the step's FLOPs at the full sequence length.
void set_utilisation(const ModelConfig& model, const Plan& p, const ThroughputOptions& opt, Throughput& t) {
    // FLOPs of the whole step at the full sequence length.
    FlopCounts fc = step_flops(model, p, opt.attention_flops);
    if (p.finetune != Finetune::full) lora_step_flops(model, p, opt, fc);
    t.model_flops_per_step = fc.model_flops_per_step;
    t.hardware_flops_per_step = fc.hardware_flops_per_step;
    t.mfu = flops_utilization(t.model_flops_per_step, t.step_time_s, t.gpus, t.peak_flops_per_s);
    t.hfu = flops_utilization(t.hardware_flops_per_step, t.step_time_s, t.gpus, t.peak_flops_per_s);
}

// The breakdown rows the extensions change or add.
void update_breakdown(const Plan& p, const Deltas& d, Throughput& t) {
    double rc = 0;
    for (const auto& s : t.breakdown)
        if (s.name == "recompute") rc = s.seconds;
    set_slice(t, "forward + backward compute", t.compute_s - rc);
    set_slice(t, "pipeline sends", t.pp_communication_s);
    set_slice(t, "pipeline bubble", t.pipeline_bubble_s);
    set_slice(t, "data-parallel communication (exposed)", t.dp_communication_s);
    set_slice(t, "optimizer step", t.optimizer_s);
    if (d.adapters_s > 0) set_slice(t, "LoRA adapter GEMMs", d.adapters_s);
    if (d.dequant_s > 0) set_slice(t, "QLoRA dequantisation (4-bit -> bf16 per GEMM)", d.dequant_s);
    if (p.cp > 1) set_slice(t, "context-parallel K/V exchange (exposed)", p.ep > 1 ? 0.0 : d.extra_comm);
    if (p.ep > 1) set_slice(t, "cp K/V exchange + expert all-to-all (exposed)", d.extra_comm);
    if (p.offload != Offload::none) set_slice(t, "offload: CPU optimizer step + exposed PCIe", t.offload_s);
}

}  // namespace

Throughput estimate_extended_throughput(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan_in,
                                        const ThroughputOptions& opt, const OffloadAssumptions& oa) {
    const Plan p = resolve_defaults(plan_in, model);
    validate_plan(p, model);
    const Plan base = base_plan_of(p);
    ThroughputOptions bopt = opt;
    bopt.breakdown = true;
    Throughput t = estimate_throughput(model, gpu, base, bopt);

    const PrecisionBytes pb = precision_bytes(p.precision);
    const Rates r = rates_for(gpu, p, t, pb, opt);
    const throughput_detail::StageLayers layers = throughput_detail::stage_layers(model, p, opt);
    const Shape sh = shape_of(model, p, base, pb, layers);
    const double m = sh.m;
    const double old_per_mb = (t.compute_s + t.tp_communication_s + t.pp_communication_s) / m;

    Deltas d;
    if (p.cp > 1) add_context_parallel(model, gpu, p, r, sh, opt, d);
    if (p.ep > 1 && model.is_moe()) add_expert_parallel(model, gpu, p, sh, opt, d);
    if (p.finetune != Finetune::full) add_lora_compute(model, p, r, sh, d);
    const double shard = trainable_shard(model, p, pb, r, layers, sh, t);

    // Pipeline schedule: the bubble is (p-1) slots of the busiest stage's per-micro-batch
    // time (GPipe as 1F1B), divided by v when interleaved, whose chunks also cross v times
    // as many stage boundaries.
    const double v = p.pp_schedule == PpSchedule::interleaved ? static_cast<double>(p.vpp) : 1.0;
    const double new_per_mb = old_per_mb + (d.d_compute + d.extra_comm) / m;
    // Each of a micro-batch's v chunk hand-offs: exposed whole, or with overlap_p2p_comm only
    // what one chunk's compute (the base plan's plus the extensions' delta) does not cover.
    if (opt.p2p_overlap && v > 1) {
        const double chunk_s = (t.compute_s + d.d_compute) / (m * v);
        t.pp_communication_s = v * m * std::max(0.0, t.pp_communication_s / m - chunk_s);
    } else {
        t.pp_communication_s *= v;
    }
    t.compute_s += d.d_compute - d.adapters_s - d.dequant_s;
    t.pipeline_bubble_s = p.pp > 1 ? pipeline_bubble_fraction(p) * m * new_per_mb : 0.0;
    t.cp_ep_communication_s = d.extra_comm;
    t.ep_communication_s = d.ep_comm;

    if (p.offload != Offload::none) apply_offload(model, gpu, p, oa, shard, m, d.d_compute, t);
    finish_step_time(p, d, t);
    set_utilisation(model, p, opt, t);

    if (opt.breakdown)
        update_breakdown(p, d, t);
    else
        t.breakdown.clear();
    return t;
}

}  // namespace preflight
