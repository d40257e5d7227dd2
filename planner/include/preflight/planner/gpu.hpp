// GPU specification (data/gpus/*.json).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace preflight {

// Dense peak throughput by math precision. Unknown is explicit (nullopt),
// printed as N/A, never guessed.
struct PeakFlops {
    std::optional<double> fp32_flops_per_s;
    std::optional<double> tf32_flops_per_s;
    std::optional<double> bf16_flops_per_s;
    std::optional<double> fp16_flops_per_s;
    std::optional<double> fp8_flops_per_s;
};

// Achievable fractions of the spec's peaks, used by the step-time model
// (throughput.hpp). Uncalibrated defaults until fitted from measured runs; a spec
// file without an "efficiency" object gets the defaults below.
struct Efficiency {
    // A GEMM whose smallest dimension is d runs at
    // gemm_max_fraction_of_peak * d / (d + gemm_half_efficiency_dim) of the dense peak.
    double gemm_max_fraction_of_peak = 0.70;
    double gemm_half_efficiency_dim = 128;
    // fp8 GEMMs replace gemm_max_fraction_of_peak against the fp8 peak. Transformer Engine
    // (per-tensor delayed or current scaling, the cast fused into the op before the GEMM):
    double fp8_gemm_max_fraction_of_peak = 0.55;
    // torchao's Float8Linear with dynamic per-tensor scaling ("tensorwise"; ThroughputOptions::
    // fp8_dynamic_scaling): an amax pass and a cast kernel per operand beside each GEMM, which the
    // step model's activation cast does not cover, folded into one figure; 0 = the figure above.
    double fp8_dynamic_gemm_max_fraction_of_peak = 0;
    // torchao's rowwise scaling (Fp8Scaling::rowwise): a rowwise-scaled GEMM kernel and casts of
    // both operands along the axis each GEMM reads, likewise folded; 0 = the dynamic figure.
    double fp8_rowwise_gemm_max_fraction_of_peak = 0;
    // The fp32 recipe's GEMMs (SGEMM on the FP32 units, which saturate at smaller sizes than
    // tensor-core GEMMs) and attention kernels against the fp32 peak; 0 = the figures above.
    double fp32_gemm_max_fraction_of_peak = 0;
    double fp32_gemm_half_efficiency_dim = 0;
    double fp32_attention_fraction_of_peak = 0;
    // Fused (flash) attention kernels, forward and backward, as a fraction of the dense peak:
    // the FlashAttention-2-class kernels PyTorch frameworks run (SDPA's flash backend, the
    // flash-attn package).
    double attention_fraction_of_peak = 0.40;
    // The attention of frameworks that run the GPU's native fused kernels instead
    // (ThroughputOptions::fused_attention: TransformerEngine's DotProductAttention on Hopper,
    // cuDNN fused attention or FlashAttention-3); 0 = attention_fraction_of_peak.
    double fused_attention_fraction_of_peak = 0;
    // Elementwise ops, norms, softmax, cross-entropy, optimizer: fraction of HBM bandwidth.
    double memory_bound_fraction_of_hbm = 0.75;
    // Collectives: achieved bus bandwidth as a fraction of the link bandwidth (NVLink tier).
    double collective_bus_efficiency = 0.75;
    // The same for the network between nodes (per-GPU NIC bandwidth).
    double inter_node_bus_efficiency = 0.75;
    // Per-hop latency of a collective step or a p2p send: NVLink/NVSwitch, and the network
    // between nodes (NCCL's small-message latency; nccl-tests all-reduce at 8 B).
    double intra_node_latency_s = 5e-6;
    double inter_node_latency_s = 20e-6;
    // Host-side time per transformer layer per micro-batch (forward + backward): Python
    // dispatch and kernel launches. The GPU waits for it when its own work for the layer is
    // shorter (the host runs ahead asynchronously otherwise). Tensor-parallel layers issue
    // more ops and collectives: tp_layer_launch_overhead_s more when tp > 1.
    double layer_launch_overhead_s = 0.0;
    double tp_layer_launch_overhead_s = 0.0;
    // More host time per layer and micro-batch, per TP rank, when the pipeline's stages span
    // nodes (pp > 1 on more than one node): tp * pipeline_span_layer_host_per_tp_s on top of the
    // two above. On nanotron's sweep such jobs run no faster than about 4.6 + 2.4 * tp ms per
    // layer of their busiest stage per micro-batch, whatever the micro-batch or the model, while
    // pipelines inside one node and single-stage jobs across nodes show no such floor. Fitted;
    // its cause is not established from nanotron's code. 0 = none. Charged only when
    // ThroughputOptions::spanning_pipeline_host is set (the nanotron profile).
    double pipeline_span_layer_host_per_tp_s = 0.0;
    // Per-micro-batch synchronisation stall that sets in as jobs grow (stragglers and
    // cross-node hand-offs): microbatch_sync_s * x / (1 + x) per micro-batch with
    // x = (nodes / microbatch_sync_half_nodes)^microbatch_sync_node_exponent (a logistic
    // in log nodes: half the full stall at microbatch_sync_half_nodes), times
    // microbatch_sync_no_pipeline_fraction when there is no pipeline (pp = 1). 0 = none.
    // Charged only when ThroughputOptions::cluster_stall is set (the nanotron profile).
    double microbatch_sync_s = 0.0;
    double microbatch_sync_half_nodes = 32.0;
    double microbatch_sync_node_exponent = 2.0;
    double microbatch_sync_no_pipeline_fraction = 1.0;
    // The Preflight runtime's weight-gradient column sums (bias gradients, runtime/kernels/
    // bias_grad.cu; norm weight gradients, norm.cu norm_bwd_weights_kernel) launch one 256-thread
    // block per 32 columns, and each block walks every row of the micro-batch, 8 rows at a time:
    // a few dozen blocks, latency-bound, so one such kernel takes about rows x column_sum_row_s
    // whatever its width. Fitted on the runtime's runs; 0 = not charged. Charged only when
    // ThroughputOptions::runtime_column_sums is set (the runtime profile).
    double column_sum_row_s = 0.0;
    // Fixed cost per optimizer step (kernel launches, data loading, logging).
    double step_overhead_s = 0.01;
    std::string provenance = "uncalibrated built-in defaults (the GPU spec has no \"efficiency\" object)";
};

// The spec's "efficiency" object for `e`, the inverse of the loader: every constant under its
// key (a figure whose 0 means "use the general one" is left out at 0); no provenance.
nlohmann::json efficiency_to_json(const Efficiency& e);

// The Preflight runtime's own constants on this GPU (spec key "runtime"), fitted by
// `preflight calibrate` on the runtime's device runs (data/measurements/<gpu>/): its
// step-time efficiency (a C++ program launching kernels has none of a Python framework's
// host time), its non-tensor device memory (CUDA context + cuBLAS/cuDNN handles, measured by
// the driver) and, for runs with its pool allocator (`--allocator pool`), that pool's slack
// under full recompute. Absent: the GPU's generic constants.
struct RuntimeCalibration {
    Efficiency efficiency;
    std::int64_t overhead_bytes = 0;
    double full_recompute_pool_slack_fraction = 0;  // of one layer's full activations
    std::string provenance;
};

// Spec key "calibration_from": a GPU without measured runs of its own takes the fitted
// constants of one that has them, when the two share what those constants describe (the same
// compute die, clocks and tensor-core peaks: H200 from H100 SXM, A100 80GB from A100 40GB).
// Each of "efficiency" and "runtime" is taken from `gpu` unless this spec has its own; the
// peaks, HBM bandwidth and links stay this spec's own, so the model still applies them.
// efficiency_scale multiplies named fractions of the transferred efficiency (both blocks): a
// documented judgement of how this part differs (the H100 PCIe's 350 W limit), never a fit.
struct CalibrationTransfer {
    std::string gpu;                              // catalog name of the calibrated GPU
    std::string why;                              // what the two share (printed in the provenance)
    std::map<std::string, double> efficiency_scale;  // key of Efficiency -> factor > 0
};

struct GpuSpec {
    std::string name;
    std::string display_name;
    std::string architecture;
    std::int64_t memory_bytes = 0;
    PeakFlops peak;
    double hbm_bandwidth_bytes_per_s = 0;
    double intra_node_bandwidth_bytes_per_s = 0;  // per GPU, per direction
    int gpus_per_node = 1;
    double inter_node_bandwidth_bytes_per_s = 0;  // per GPU, per direction
    std::int64_t overhead_bytes = 0;  // CUDA context + library workspaces, per GPU
    // Host <-> device link (PCIe), per GPU per direction; nullopt when the spec has none.
    std::optional<double> pcie_bandwidth_bytes_per_s;
    std::map<std::string, std::string> sources;   // key -> citation
    Efficiency efficiency;                        // "efficiency" object; defaults when absent
    std::optional<RuntimeCalibration> runtime;    // "runtime" object (see RuntimeCalibration)
    std::optional<CalibrationTransfer> calibration_from;  // set until load_gpu applies it
    bool own_efficiency = false;                  // the spec has an "efficiency" object
    std::string efficiency_transferred_from;      // the GPU `efficiency` came from ("" = this spec's own)
};

// Where a spec's step-time constants come from, in a few words for tables: "fitted" (a fit on
// measured runs), "from <gpu>" (a calibration transfer) or "defaults" (uncalibrated).
std::string efficiency_origin(const GpuSpec& g);

// Parses a GPU spec object; throws InputError naming the key on bad input.
GpuSpec gpu_from_json(const nlohmann::json& spec, const std::string& fallback_name);

// `target` with the calibration of `source` applied as target.calibration_from says (see
// CalibrationTransfer): the blocks target lacks, scaled, with provenance "transferred from
// <source> (<why>); there: <source's provenance>". Throws InputError when a scaled fraction
// leaves (0, 1]. load_gpu calls it; source must have no transfer pending itself.
GpuSpec apply_calibration_transfer(GpuSpec target, const GpuSpec& source);

// After a fit wrote its own "efficiency" and/or "runtime" block into `spec`: the parts of its
// "calibration_from" those blocks supersede are removed (efficiency_scale once "efficiency" is
// the spec's own; the whole transfer once both are), so the written spec loads and says
// where each block comes from.
void drop_superseded_transfer(nlohmann::json& spec);

}  // namespace preflight
