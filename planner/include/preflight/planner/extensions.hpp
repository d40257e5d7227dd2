// Modelling of the plan extensions (plan_extensions.hpp): LoRA / QLoRA model states,
// adapter activations and QLoRA's dequantised weights; ZeRO-Offload / ZeRO-Infinity
// GPU/host split and PCIe traffic; pipeline schedules; context and expert parallelism.
// The memory and step-time models call the hooks at the end of this header; every hook
// leaves a plan with default extension fields untouched.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "preflight/planner/gpu.hpp"
#include "preflight/planner/memory.hpp"
#include "preflight/planner/model.hpp"
#include "preflight/planner/plan.hpp"
#include "preflight/planner/throughput.hpp"

namespace preflight {

// ---- LoRA / QLoRA ----------------------------------------------------------------

// Trainable adapter parameters: every targeted projection W (out x in) gets A (r x in)
// and B (out x r) (Hu et al. 2021, sec. 4.1), in every layer (and every expert copy).
// tp > 1: the share one tensor-parallel rank holds (A of a column-parallel projection
// and B of a row-parallel one are replicated, the other factor is split).
std::int64_t lora_params_per_layer(const ModelConfig& model, const LoraSettings& lora, std::int64_t tp = 1);
std::int64_t lora_params(const ModelConfig& model, const LoraSettings& lora);
// Refuses (InputError naming --lora-rank) adapters with more than limits::kMaxParams
// parameters in all, counted in long double before any int64 product.
void check_lora_size(const ModelConfig& model, const LoraSettings& lora);
// The LoRA target bits a decoder-layer weight answers to (0: none), by its tensor name.
unsigned lora_target_bit(std::string_view tensor_name);

// One weight tensor stored in NF4 with (double-quantised) block constants
// (Dettmers et al. 2023, sec. 3).
struct Nf4Bytes {
    std::int64_t weights = 0;    // 4 bits per element
    std::int64_t constants = 0;  // absmax per block: fp32, or 8-bit + fp32 per constant block (double quant)
    std::int64_t total() const { return weights + constants; }
};
Nf4Bytes nf4_bytes(std::int64_t numel, const LoraSettings& lora);

// Whether QLoRA's 4-bit quantisation takes the tensor to NF4: the decoder layers' nn.Linear weights
// (transformers' bitsandbytes integration replaces nn.Linear modules), not gpt-oss's experts, which
// are parameter tensors of GptOssExperts and stay in 16 bits (fp32 after prepare_model_for_kbit_training).
bool qlora_quantizes(const ModelConfig& model, const ParamTensor& t);

// Frozen base model of a LoRA / QLoRA plan, whole model, one copy.
struct FrozenBase {
    std::int64_t quantized_params = 0;  // QLoRA: the decoder layers' linear weights
    std::int64_t quantized_bytes = 0;   // their NF4 weights + constants
    std::int64_t other_params = 0;      // embeddings, norms, LM head, biases (and every weight under LoRA)
    std::int64_t other_bytes = 0;       // in the weight dtype (fp32 after prepare_model_for_kbit_training)
    std::int64_t total_bytes() const { return quantized_bytes + other_bytes; }
};
FrozenBase frozen_base(const ModelConfig& model, const Plan& plan);

// QLoRA: bytes of the largest bf16 weight dequantised for one GEMM (TP-local); 0 otherwise.
std::int64_t qlora_dequant_bytes(const ModelConfig& model, const Plan& plan);

// ---- Offload -----------------------------------------------------------------------

// Model states of `params` parameters on the GPU and in host memory (per GPU) under
// ZeRO over dp and the offload mode (Ren et al. 2021, sec. 4: 16-bit parameters and
// gradients stay on the GPU; fp32 master weights, optimizer moments and an fp32 copy of
// the gradients live on the CPU, which runs the optimizer step).
struct OffloadSplit {
    ModelStateBytes gpu;
    std::int64_t host_bytes = 0;
};
OffloadSplit offload_state_bytes(std::int64_t params, Precision precision, Optimizer optimizer, int zero,
                                 std::int64_t dp, Offload offload);

// Host bytes of the busiest node: ranks are laid out with the pipeline stage slowest
// (Megatron-LM's default order tp-cp-ep-dp-pp, torchtitan's mesh, DeepSpeed's
// PipeDataParallelTopology), so `ranks_per_stage` consecutive ranks share a stage and a node holds
// `gpus_per_node` consecutive ranks. host_bytes_by_stage[s]: one rank of stage s. The largest
// node's sum, by prefix sums over the ranks (O(1) a node).
std::int64_t host_bytes_per_node(const std::vector<std::int64_t>& host_bytes_by_stage, std::int64_t ranks_per_stage,
                                 std::int64_t gpus_per_node);

// Assumptions the offload step time needs beyond the GPU spec.
struct OffloadAssumptions {
    // Host memory bandwidth the CPU optimizer step achieves per GPU (DeepSpeed's CPU-Adam is
    // memory-bound: it reads the fp32 gradient, reads and writes master weights and both
    // moments and writes the 16-bit parameter, 30 B per parameter). An assumption: a
    // two-socket DDR5 server (~600 GB/s peak) shared by 8 GPUs at ~40 % efficiency.
    double host_bandwidth_bytes_per_s_per_gpu = 30e9;
    // Fraction of the PCIe figure host<->device copies reach (pinned memory).
    double pcie_efficiency = 0.8;
};

// Bytes crossing PCIe per GPU per optimizer step.
struct PcieTraffic {
    double gradients_to_host = 0;  // 16-bit gradients after reduction
    double params_to_device = 0;   // updated 16-bit parameters
    double param_fetches = 0;      // ZeRO-Infinity: parameters streamed in for forward and backward
    double total() const { return gradients_to_host + params_to_device + param_fetches; }
};

// ---- Pipeline schedules --------------------------------------------------------------

// Micro-batches whose activations stage `stage` (0-based) holds at its peak: GPipe m,
// 1F1B min(p - stage, m) (Narayanan et al. 2021, sec. 2.2.1); interleaved: model-chunk
// micro-batches min((p - stage - 1) * 2 + (v - 1) * p + 1, m * v) (Megatron-LM
// schedules.py, forward_backward_pipelining_with_interleaving: warm-up count + 1).
std::int64_t pipeline_in_flight(const Plan& plan, std::int64_t stage);
// Layer x micro-batch activation units held at the peak on `stage` (layers_on_stage per
// micro-batch for GPipe / 1F1B; layers / (p v) per chunk micro-batch when interleaved).
std::int64_t pipeline_held_layer_units(const Plan& plan, std::int64_t model_layers, std::int64_t stage);
// Interleaved schedule whose p * v chunks do not divide the layers but divide layers + 2:
// Megatron-LM's --account-for-embedding-in-pipeline-split and
// --account-for-loss-in-pipeline-split give the embedding and the loss one layer slot each
// (megatron/core/transformer/transformer_block.py, get_num_layers_to_build).
bool interleaved_counts_embedding_and_loss(const Plan& plan, std::int64_t model_layers);
// Layers per model chunk of the interleaved schedule: layers / (p v), or (layers + 2) / (p v)
// when the embedding and the loss take a slot each.
std::int64_t interleaved_chunk_layers(const Plan& plan, std::int64_t model_layers);
// Decoder layers on pipeline stage `stage`: Megatron-LM's uneven split where the plan gives one
// (pp_first_stage_layers / pp_last_stage_layers, pipeline_uneven.cpp), else the extra layers to
// the first stages; with the embedding and loss slots, v chunks of (layers + 2) / (p v) with the
// first stage's first chunk and the last stage's last chunk one layer short.
std::int64_t pipeline_stage_layers(const Plan& plan, std::int64_t model_layers, std::int64_t stage);
// Whether the plan gives Megatron-LM's uneven split (--pp-first-stage-layers / --pp-last-stage-layers).
bool has_uneven_pipeline_split(const Plan& plan);
// The uneven split's decoder layers per stage (pp entries; validate_uneven_pipeline_split's rule
// assumed), or an empty list for a plan without one.
std::vector<std::int64_t> uneven_pipeline_stage_layers(const Plan& plan, std::int64_t model_layers);
// One model chunk of a pipeline stage: `layers` decoder layers from the model's layer
// `first_layer` (1-based). A 1F1B or GPipe stage is one chunk; an interleaved stage v of them,
// chunk c being the model's virtual stage c * p + stage (Narayanan et al. 2021, sec. 2.2.2;
// Megatron-LM's get_num_layers_to_build, with the embedding's and loss's slots when they count).
struct StageChunk {
    std::int64_t first_layer = 1;
    std::int64_t layers = 0;
};
std::vector<StageChunk> pipeline_stage_chunks(const Plan& plan, std::int64_t model_layers, std::int64_t stage);
// One forward or backward pass of a stage's step: model chunk `chunk` (0-based) on micro-batch
// `micro_batch` (1-based).
struct PipelinePass {
    bool forward = true;
    std::int64_t chunk = 0;
    std::int64_t micro_batch = 1;
    bool operator==(const PipelinePass&) const = default;
};
// The passes of stage `stage` in the order it runs them. 1F1B: min(p - stage - 1, m) forwards,
// then one forward and the oldest backward in turn, then the remaining backwards (Narayanan et
// al. 2021, sec. 2.2.1). Interleaved (m a multiple of p): the same with (p - stage - 1) * 2 +
// (v - 1) * p warm-up forwards (at most m v), forwards taking chunk 0 for p micro-batches, then
// chunk 1 for the same p, ..., and backwards the chunks in reverse (Megatron-LM schedules.py,
// get_schedule_table with microbatch_group_size_per_vp_stage = p). GPipe: every forward, then
// every backward.
std::vector<PipelinePass> pipeline_stage_order(const Plan& plan, std::int64_t stage);
// One step of an interleaved stage's program: a pass computed, or one grouped exchange with the
// neighbouring stages (Megatron-LM's send_forward_recv_forward, send_backward_recv_backward and
// send_forward_backward_recv_forward_backward: every send and receive of the step at once).
struct PipelineStep {
    bool compute = false;
    PipelinePass pass;                    // compute: the pass
    std::vector<PipelinePass> sends;      // exchange: the passes whose output (a forward's) or input
                                          // gradient (a backward's) goes to the next or previous stage
    bool recv_forward = false;            // exchange: an activation comes from the previous stage
    bool recv_backward = false;           // exchange: a gradient comes from the next stage
};
// The steps of stage `stage` under the interleaved schedule, as Megatron-LM runs them without p2p
// overlap (schedules.py, forward_backward_pipelining_with_interleaving): a receive before the
// warm-up; each warm-up forward, then its exchange; each steady-state forward and backward, then
// one exchange for both; each cool-down backward, then its exchange. Received activations and
// gradients are queued by chunk: the n-th activation received is the input of the n-th forward
// that takes one (every forward but the model's first chunk's), the n-th gradient that of the n-th
// backward that takes one (every backward but the model's last chunk's).
std::vector<PipelineStep> interleaved_stage_steps(const Plan& plan, std::int64_t stage);
// Idle fraction: (p - 1) / m for GPipe and 1F1B, (p - 1) / (v m) interleaved
// (Narayanan et al. 2021, sec. 2.2).
double pipeline_bubble_fraction(const Plan& plan);

// ---- Context and expert parallelism ------------------------------------------------------

// A context-parallel rank's view of the plan: seq / cp tokens per sequence, the
// gradient reduction and ZeRO sharding over dp * cp ranks (Megatron-LM's
// data-parallel-with-context-parallel group), cp = 1, cp_full_seq = seq. Identity at cp = 1.
Plan context_parallel_rank_plan(const Plan& plan);
// Ring attention (Liu et al. 2023): K/V chunks in flight (send + receive), forward; the
// backward also moves dK/dV. Bytes per GPU, on a rank view.
std::int64_t cp_ring_buffer_bytes(const ModelConfig& model, const Plan& rank_view);
// All-gather context parallelism as the Preflight runtime runs it (Llama 3 paper, sec. 3.3.2;
// runtime/src/program_cp.cpp): the whole sequence's K and V twice beside a layer's attention
// (gathered and in sequence order, or gathered and their gradients). Bytes per GPU, on a rank view.
std::int64_t cp_gathered_kv_bytes(const ModelConfig& model, const Plan& rank_view);
// Expert parallelism: dispatch and combine all-to-all buffers of the routed tokens.
std::int64_t ep_all_to_all_buffer_bytes(const ModelConfig& model, const Plan& plan);

// ---- Flags and JSON ------------------------------------------------------------------------

// " --finetune qlora --lora-rank 16 ..." for every extension field that differs from its
// default (empty for a pre-training plan), as the CLI reads them (from plan_schema.hpp's table).
std::string extension_flags(const Plan& plan);

// ---- Hooks for the memory and step-time models -----------------------------------------

// Throws InputError naming the flag for an inconsistent extension (LoRA rank < 1, vpp
// without interleaving, cp not dividing the sequence, ep not dividing experts / dp, ...).
void validate_plan_extensions(const Plan& plan, const ModelConfig& model);
// The part of validate_plan_extensions no layout can change: the LoRA settings (with the
// precision), vpp/cp/ep bounds, ep against the model's experts, the MoE capacity factor. A
// search refuses pinned values that fail it up front instead of finding no plan.
void validate_extension_settings(const Plan& plan, const ModelConfig& model);

bool uses_extended_states(const Plan& plan);
struct StageStates {
    ModelStateBytes gpu;
    std::int64_t host_bytes = 0;
    std::int64_t trainable_params = 0;  // on this GPU before ZeRO (adapters under LoRA)
};
// Model states of one pipeline stage under fine-tuning mode, offload and expert parallelism.
StageStates extended_stage_states(const ModelConfig& model, const Plan& plan, const FrameworkProfile& profile,
                                  std::int64_t layers, bool first, bool last);
// Edits a layer's saved-tensor inventory for LoRA / QLoRA (frozen projections keep no
// GEMM input, adapters add their intermediates) and the MoE capacity factor.
void adjust_layer_inventory(const ModelConfig& model, const Plan& plan, std::vector<ActivationTensor>& inventory);
// Within-layer working memory the extensions add (QLoRA dequantised weight, ring
// attention K/V buffers, all-to-all buffers).
std::int64_t extension_transient_bytes(const ModelConfig& model, const Plan& plan);

bool uses_extended_throughput(const Plan& plan);
// Why the plan's expert-parallel degree cannot shard its experts over the data-parallel ranks
// (ep not dividing dp * cp; the --ep message of validate_plan_extensions), or "" when it can.
// It does not depend on the batch shape, so the search checks it once per family.
std::string ep_data_parallel_problem(const Plan& plan);
// The flag of the first setting that makes uses_extended_throughput true ("--finetune",
// "--offload", "--pp-schedule", "--vpp", "--cp", "--ep", "--moe-capacity-factor"); "" when none.
std::string extended_setting_flag(const Plan& plan);
// The step time of a plan with extensions: the base model's estimate for the rank view
// (full fine-tune, no offload, 1F1B) plus what each extension changes.
Throughput estimate_extended_throughput(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan,
                                        const ThroughputOptions& options,
                                        const OffloadAssumptions& offload = {});
// PCIe traffic per GPU per step of an offloading plan.
PcieTraffic offload_pcie_traffic(const ModelConfig& model, const Plan& plan);

}  // namespace preflight
