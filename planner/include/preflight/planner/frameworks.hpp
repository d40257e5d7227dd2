// Framework profiles beyond the default Megatron-like one (profiles.hpp): nanotron,
// torchtitan, DeepSpeed. Each lives in planner/src/profiles/<name>.cpp, term by term with
// the framework file and function it comes from.
#pragma once

#include <cstdint>
#include <vector>

#include "preflight/planner/memory.hpp"
#include "preflight/planner/pipeline_split.hpp"
#include "preflight/planner/throughput.hpp"

namespace preflight {

// nanotron (huggingface/nanotron) training a Llama-shaped model with bf16 parameters,
// accumulate_grad_in_fp32, AdamW, ZeRO-0/1, flash attention, TP in reduce-scatter (sequence
// parallel) or all-reduce mode, 1F1B pipeline. Its own memory model (evaluate_memory_nanotron)
// with the caching-allocator constants fitted on the Ultra-Scale Playbook sweep.
FrameworkProfile nanotron_profile();

// The default FrameworkProfile describes Megatron-LM; another framework's profile starts from this
// one, with Megatron-LM's own terms off: Megatron-FSDP, the fp32 gradient copy at the optimizer
// step, the MoE and fp8 activation rules, --fp8-param-gather and the uneven pipeline split.
FrameworkProfile non_megatron_profile();

// torchtitan (pytorch/torchtitan): FSDP2/DTensor training of Llama, its blocks run eagerly (a
// compiled loss is MemoryOptions::compiled_loss), PyTorch's caching-allocator reserve as fitted on
// the nanotron sweep; terms as in profiles/torchtitan.cpp.
FrameworkProfile torchtitan_profile();
// torchtitan v0.2.2 runs FSDP when the shard degree (dp under ZeRO 1-3) or cp is above 1
// (parallel_dims.py fsdp_enabled); without it, tp or pp turns mixed precision off
// (distributed/utils.py maybe_enable_amp) and the step runs in fp32 (or pure bf16). Given the
// degrees (the importer's) or a plan (the profile's check and the emitter's warning).
bool torchtitan_amp_off(std::int64_t shard, std::int64_t cp, std::int64_t tp, std::int64_t pp);
bool torchtitan_amp_off(const Plan& plan);
// ZeRO-0 is DDP, which torchtitan applies only when data parallelism is the whole mesh
// (models/llama3/infra/parallelize.py: "DDP has not supported > 1D parallelism").
bool torchtitan_ddp_beside_other_parallelism(const Plan& plan);

// DeepSpeed (microsoft/DeepSpeed) ZeRO-1/2/3 with its default bucket sizes; profiles/deepspeed.cpp.
FrameworkProfile deepspeed_profile();

// One nanotron pipeline stage, term by term (bytes per GPU of that stage).
struct NanotronStageMemory {
    StageBlocks blocks;
    std::int64_t in_flight = 0;             // micro-batches whose activations the stage holds (1F1B)
    std::int64_t params_local = 0;          // parameters on this GPU (after TP and the pipeline split)
    std::int64_t bf16_weights = 0;          // 2 B/param
    std::int64_t fp32_grad_buffer = 0;      // 4 B/param, every parameter even under ZeRO-1
    std::int64_t fp32_master = 0;           // 4 B/param over the ZeRO-1 shard
    std::int64_t adam_moments = 0;          // 8 B/param over the ZeRO-1 shard
    std::int64_t ddp_buckets = 0;           // 2 B/param when dp > 1 (DDP reducer's bucket copies)
    std::int64_t bf16_grads = 0;            // 2 B/param, alive until a micro-batch's backward ends
    std::int64_t zero1_gather = 0;          // 2 B/param + 2 B/param of the dp shard, optimizer step under ZeRO-1 with dp > 1
    std::int64_t tp_gather_buffer = 0;      // MemoryBuffer "allgather" + "allgather2" (2 x s*b*h bf16), tp > 1 with SP
    std::int64_t p2p_buffer = 0;            // one received activation or gradient, pp > 1
    std::int64_t rope_tables = 0;           // fp32 cos/sin
    std::int64_t activations_per_layer = 0; // one layer, one micro-batch
    std::int64_t activations = 0;           // every in-flight micro-batch at the end of a forward
    std::int64_t forward_transient = 0;     // a row-parallel linear's output before its reduce-scatter
    std::int64_t backward_transient = 0;    // gradients of one layer's activations
    std::int64_t logits_working_set = 0;    // bf16 logits + fp32 cast, or the fp32 cast + its shifted copy
    std::int64_t allocated_peak = 0;
    Phase allocated_peak_phase;             // the phase with the most tensors ...
    MemoryBreakdown at_allocated_peak;      // ... and its breakdown (allocated_peak + overhead)
    std::vector<TimelineEntry> phases;      // every phase the stage is judged at, in step order
    std::int64_t optimizer_step_allocated = 0;  // tensors during the optimizer step (model states, buffers, ZeRO-1 gather)
    std::int64_t reserved_peak = 0;
    Phase reserved_peak_phase;              // the phase with the largest reserved pool ...
    MemoryBreakdown at_peak;                // ... and its breakdown; overhead = the memory outside PyTorch
    ReservedExtra reserved_extra;           // reserved_peak beyond at_peak's tensors, by cause
    std::int64_t loss_hidden_at_peak = 0;   // s*b*h*2 the loss-stage term charged at the peak (0: loss not live)
    std::int64_t runahead_hidden_at_peak = 0;  // s*b*h*2 x layers x (in-flight - 2) the run-ahead term charged
};

// Every stage of a nanotron run (pp entries; stages without blocks hold nothing but buffers).
// Plans nanotron can run but the generic model refuses are accepted: pp above the layer count
// and above nanotron's L + 5 pipeline blocks (trailing stages stay empty). Throws InputError for a plan nanotron cannot build (tp not
// dividing the heads, key/value heads or MLP width; sp without tp).
// `pace`: whether the host runs ahead of the GPU (allocator_model.hpp; the run-ahead terms apply).
std::vector<NanotronStageMemory> nanotron_stage_memory(const ModelConfig& model, const Plan& plan,
                                                       const AllocatorConstants& allocator,
                                                       std::int64_t non_pytorch_bytes,
                                                       HostPace pace = HostPace::runs_ahead);

// The caching-allocator constants the nanotron profile uses: fitted on the nanotron H100 sweep
// (data/measurements/external/nanotron-h100) by `preflight validate --check`'s memory fit;
// provenance in the returned struct.
AllocatorConstants nanotron_allocator_constants();

// Step-time options of a nanotron run (throughput.hpp): throughput_options_for the nanotron
// profile, i.e. its compute-cost pipeline split (stage_layers), async sequence-parallel TP
// collectives, 25 MB DDP buckets and FlashAttention-2 attention.
ThroughputOptions nanotron_throughput_options(const ModelConfig& model, const Plan& plan);
// FrameworkProfile::adjust_throughput of the nanotron profile: the same settings over `options`.
void adjust_throughput_nanotron(const ModelConfig& model, const Plan& plan, ThroughputOptions& options);

// FrameworkProfile::evaluate of the nanotron profile.
MemoryReport evaluate_memory_nanotron(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan,
                                      const MemoryOptions& options);

}  // namespace preflight
