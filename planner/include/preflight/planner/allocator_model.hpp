// PyTorch's CUDA caching allocator, as far as a planner needs it: what a request costs in
// blocks and segments, and the constants that turn an allocated peak into a reserved peak
// (the pool `torch.cuda.max_memory_reserved()` reports) and into what the device must hold.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace preflight {

// c10/cuda/CUDACachingAllocator.cpp (PyTorch 2.x), namespace-level constants:
inline constexpr std::int64_t kTorchMinBlockBytes = 512;                // kMinBlockSize: every block is a multiple
inline constexpr std::int64_t kTorchSmallSizeBytes = std::int64_t{1} << 20;       // kSmallSize: small pool limit
inline constexpr std::int64_t kTorchSmallBufferBytes = std::int64_t{2} << 20;     // kSmallBuffer: small-pool segment
inline constexpr std::int64_t kTorchMinLargeAllocBytes = std::int64_t{10} << 20;  // kMinLargeAlloc
inline constexpr std::int64_t kTorchLargeBufferBytes = std::int64_t{20} << 20;    // kLargeBuffer: segment for 1-10 MiB
inline constexpr std::int64_t kTorchRoundLargeBytes = std::int64_t{2} << 20;      // kRoundLarge

// Block size of one request (CUDACachingAllocator round_size): at least 512 B, a multiple of 512 B.
std::int64_t torch_block_bytes(std::int64_t request_bytes);
// Segment cudaMalloc'd for a request no cached block can serve (get_allocation_size): a 2 MiB
// small-pool segment up to 1 MiB, a 20 MiB segment below 10 MiB, else the block rounded up to 2 MiB.
std::int64_t torch_segment_bytes(std::int64_t request_bytes);

// Whether the training loop's host thread runs ahead of the GPU (PyTorch's asynchronous
// execution: kernels and NCCL calls are queued, the host goes on) or waits for the GPU at least
// once per micro-batch (a blocking poll such as nanotron's pipeline p2p on branch
// nouamane/bench2 since 67c5ebb6, which sleeps 0.1 s until each message is delivered; a .item()).
// A block freed while its last use on another stream is still queued is not reused until that
// use completes (c10/cuda/CUDACachingAllocator.cpp: record_stream events, process_events), so a
// host that runs ahead leaves the pool larger than its tensors. On the nanotron sweep the jobs
// whose step shows the waits hold the modelled tensors plus activation fragmentation only (data
// set README, "host pace").
enum class HostPace { runs_ahead, waits_each_micro_batch };
// The stall per micro-batch from which a loop counts as one that waits for the GPU: three of
// the 0.1 s sleeps nanotron's polled pipeline p2p makes per message (nouamane/bench2 since
// 67c5ebb6, parallel/pipeline_parallel/p2p.py _send_meta/_recv_meta). On the nanotron sweep the
// measured stalls split into jobs near 0 and jobs at 0.6-1.5 s (data set README).
inline constexpr double kHostWaitStallPerMicroBatchS = 0.3;
std::string_view to_string(HostPace p);
std::optional<HostPace> parse_host_pace(std::string_view s);

// The host pace expected from the layout alone, before the job runs: a logistic model over
// host_pace_inputs, fitted on jobs whose pace was read off their measured step time
// (validation fit_host_pace_model); the loop waits when the logit is positive.
// Why these inputs: nanotron's pipeline receive blocks the host until the neighbouring stage has
// sent (parallel/pipeline_parallel/p2p.py: _recv_meta unpacks the received metadata tensor into
// Python ints; on nouamane/bench2 a 0.1 s poll), so a pipeline whose stages run their
// tensor-parallel collectives across nodes (tp above the GPUs of a node) paces its host by the
// slowest link; the node count stands for the cluster-wide synchronisation that the step-time
// model's stall follows (throughput.hpp stall_per_micro_batch_s). Without a pipeline nothing
// blocks the host while each layer's tensor-parallel all-reduce crosses nodes, so the GPU's
// micro-batch grows longer and the host stays ahead: the single-stage input's fitted weight is
// negative (on the sweep, tp 32 with pp 1 at 64 nodes runs ahead in 14 of 19 jobs, tp <= 8 with
// pp 1 there waits in 10 of 11).
struct HostPaceModel {
    double intercept = 0;
    double per_log2_nodes = 0;                 // log2 of the job's node count
    double per_log2_tp_nodes_in_pipeline = 0;  // log2(max(1, tp / GPUs per node)) when pp > 1, else 0
    double per_log2_tp_nodes_single_stage = 0;  // the same when pp = 1, else 0
    bool fitted() const {
        return intercept != 0 || per_log2_nodes != 0 || per_log2_tp_nodes_in_pipeline != 0 ||
               per_log2_tp_nodes_single_stage != 0;
    }
};
inline constexpr int kHostPaceInputs = 4;
// {1, log2(nodes), log2(max(1, tp / gpus_per_node)) x [pp > 1], the same x [pp = 1]},
// nodes = ceil(dp*tp*pp*cp / gpus_per_node).
// Counts below 1 are taken as 1.
std::array<double, kHostPaceInputs> host_pace_inputs(std::int64_t gpus, std::int64_t tp, std::int64_t pp,
                                                      std::int64_t gpus_per_node);
// The model's logit for those inputs (> 0: the host is expected to wait).
double host_wait_logit(const HostPaceModel& m, const std::array<double, kHostPaceInputs>& inputs);

// Constants of the reserved-memory model, fitted on measured runs (a profile carries them;
// all zero = reserved equals allocated, the figure the analytic model gives).
struct AllocatorConstants {
    // Extra reserved bytes per allocated activation byte: saved tensors of different sizes
    // split cached blocks that later, larger requests cannot reuse.
    double activation_fragmentation = 0;
    // Extra reserved bytes per byte of one micro-batch's hidden state (seq x mbs x hidden in
    // bf16, unsharded) on the stage that runs the LM head and the loss, while the loss's tensors
    // are live and the host runs ahead. Fitted: on the nanotron sweep the pool growth around the
    // loss follows s*b*h, not the logits (fitted per logit byte instead, every held-out figure is
    // worse; data set README).
    double loss_stage_fragmentation = 0;
    // Extra reserved bytes per byte of one micro-batch's hidden state (s*b*h in bf16, unsharded),
    // per decoder layer on the stage and per in-flight micro-batch beyond two (1F1B), while the
    // host runs ahead. Fitted (about 1.7): on the nanotron sweep the host-runs-ahead jobs with
    // pp >= 4 hold that much more than their tensors whatever tp is, the host-waits jobs none
    // (data set README); scaled by the activations or by the in-flight count alone it fits worse.
    double pipeline_runahead_fragmentation = 0;
    // Extra reserved bytes per byte of the step's gradients where the loop frees them after every
    // step (FrameworkProfile::grads_set_to_none). The likely cause (not traced block by block): each
    // backward allocates the gradients anew, and the first step created the optimizer's moments,
    // inside blocks the activations and logits had freed, so the next forward finds its blocks
    // split and takes new segments. Fitted on our PyTorch runs (profiles.cpp pytorch_profile,
    // validation/pytorch/fit_reserve.py).
    double gradient_fragmentation = 0;
    // Reserved bytes independent of the plan (small-pool segments, cuBLAS workspaces, RNG state).
    std::int64_t reserved_constant_bytes = 0;
    // Device memory outside PyTorch's pool: CUDA context and NCCL communicator buffers.
    // Negative: the GPU spec's overhead_bytes (documented there with its sources).
    std::int64_t non_pytorch_bytes = -1;
    // Device memory the measured jobs needed beyond the most loaded stage's modelled reserved
    // peak plus the memory outside PyTorch: peaks on ranks and in iterations the model does not
    // follow, transient spikes inside a phase. Fitted on fit/OOM outcomes, with a running-ahead
    // plan also judged at the top of its range (range_top_need_bytes); judged, not physical.
    std::int64_t verdict_margin_bytes = 0;
    // The pace expected_host_pace gives when no --host-pace is stated (unfitted: runs ahead).
    HostPaceModel pace;
    // An unsure pace: when the pace is expected (not given) and the host-pace model's wait
    // probability p lies in [unsure_pace_band, 1 - unsure_pace_band], the point pool is the two
    // paces' pools weighted by it, p x waiting + (1 - p) x running ahead (mix_unsure_pace), the
    // expected pool under the model, instead of the pool of the likelier pace alone. 0.5 or more:
    // never. Fitted on the training jobs (the band in 0.05 steps whose mix gives their point pools
    // the least mean absolute relative error); on the nanotron sweep a pool measured between the two
    // paces' is common where the model is unsure (data set README, "An unsure pace").
    double unsure_pace_band = 0.5;
    // The four reserve terms above at their upper envelope, for the top of the range only
    // (range_high_constants): fitted at the kRangeUpperQuantile of the training jobs' relative
    // residuals instead of their median. All zero: not fitted, the top uses the terms above.
    double upper_activation_fragmentation = 0, upper_loss_stage_fragmentation = 0;
    double upper_pipeline_runahead_fragmentation = 0;
    std::int64_t upper_reserved_constant_bytes = 0;
    std::string provenance = "no caching-allocator model: reserved = allocated";
};

// The two ends of the range the reserved pool can take (MemoryReport::reserved_low/high_bytes),
// each evaluated with its own constants:
//  - low, the host waiting for the GPU and every freed block reused: the reserve terms zero, so
//    the pool is the live tensors in 2 MiB segments (a pool cannot hold less than its tensors);
//  - high, the host running ahead with the reserve terms at their upper envelope: fitted at the
//    95th percentile of the relative residuals (quantile regression, Koenker & Bassett 1978,
//    "Regression Quantiles"), the pool 19 in 20 training jobs stayed under.
inline constexpr double kRangeUpperQuantile = 0.95;
AllocatorConstants range_low_constants(const AllocatorConstants& c);
AllocatorConstants range_high_constants(const AllocatorConstants& c);

// What the reserved pool holds beyond the allocated tensors, by cause (the fitted constants
// times what each applies to), before the pool is rounded up to whole 2 MiB segments.
// loss_hidden_bytes: s*b*h*2 of the micro-batch on a phase where the loss's tensors are live
// (0 on phases and stages without the loss); runahead_hidden_bytes: s*b*h*2 x the stage's layers
// x its in-flight micro-batches beyond two on a phase holding activations (else 0). Under
// HostPace::waits_each_micro_batch both caller-side figures are 0 (the pool keeps up).
struct ReservedExtra {
    std::int64_t activation_fragmentation_bytes = 0;  // activation_fragmentation x activation bytes
    std::int64_t loss_stage_bytes = 0;                // loss_stage_fragmentation x s*b*h*2 on the loss stage
    std::int64_t pipeline_runahead_bytes = 0;         // pipeline_runahead_fragmentation x runahead_hidden_bytes
    std::int64_t constant_bytes = 0;                  // reserved_constant_bytes
    std::int64_t gradient_fragmentation_bytes = 0;    // gradient_fragmentation x the step's gradient bytes
    std::int64_t total() const {
        return activation_fragmentation_bytes + loss_stage_bytes + pipeline_runahead_bytes + constant_bytes +
               gradient_fragmentation_bytes;
    }
};
ReservedExtra reserved_extra(std::int64_t activation_bytes, std::int64_t loss_hidden_bytes,
                             std::int64_t runahead_hidden_bytes, const AllocatorConstants& c);
// gradient_fragmentation x `step_gradient_bytes` (0 where the constant is): refused past kMaxBytes.
std::int64_t gradient_fragmentation_bytes(std::int64_t step_gradient_bytes, const AllocatorConstants& c);
// The pool for `allocated_bytes` of tensors and `extra` beyond them: whole 2 MiB segments.
std::int64_t reserved_pool_bytes(std::int64_t allocated_bytes, const ReservedExtra& extra);

// Whether the pool of a host that runs ahead outgrows the device: the most loaded stage's pool at
// the top of the range (range_high_constants) plus the memory outside PyTorch, over the capacity.
// When cudaMalloc fails, PyTorch's caching allocator frees every cached block that is not split
// and retries (c10/cuda/CUDACachingAllocator.cpp, the allocator's header comment; malloc ->
// release_cached_blocks, which first waits for the pending uses of freed blocks,
// synchronize_and_free_events). So the host has waited for the GPU, and the blocks it held for
// running ahead are freed. Such a plan's pool is expected at the waiting pace. On the nanotron
// sweep, 14 of the 16 held-out ok jobs this applies to lie nearer that pool than the running-ahead
// one, and 9 of them also show the wait in their step time (data set README, "The allocator's flush").
bool pool_outgrows_device(std::int64_t high_reserved_bytes, std::int64_t non_pytorch_bytes, std::int64_t capacity_bytes);

// Whether a wait probability counts as unsure under `band` (AllocatorConstants::unsure_pace_band).
inline bool unsure_pace(double wait_probability, double band) {
    return band < 0.5 && wait_probability >= band && wait_probability <= 1.0 - band;
}
// p x waiting + (1 - p) x running ahead, rounded to a byte: the point pool of an unsure pace.
std::int64_t mix_unsure_pace(std::int64_t running_ahead_bytes, std::int64_t waiting_bytes, double wait_probability);

// What the device must hold for a host that runs ahead, at the top of its range: the most loaded
// stage's pool there (range_high_constants) plus the memory outside PyTorch. A running-ahead plan's
// device need is the larger of this and its point need (reserved + outside PyTorch + margin), so it
// fits only if it fits at the top of its range. Past that the step lives on the allocator's flush
// (pool_outgrows_device), which frees only cached blocks that are not split (the allocator's header
// comment): blocks sharing a segment with a live tensor stay, and whether what is freed is enough,
// this model cannot tell. On the nanotron sweep, held out, judging running-ahead plans there took
// the verdict from 97.8 % to 98.2 % right with 0.4 % of predicted fits dying OOM either way, and
// the fitted verdict margin on top of the point from about 7.8 GiB to 64 MiB (data set
// README, "The verdict at the top of the range").
std::int64_t range_top_need_bytes(std::int64_t high_reserved_bytes, std::int64_t non_pytorch_bytes);

// Whether the reserve terms charged only while the host runs ahead are fitted (non-zero): only
// then does the host's pace change the reserved pool.
inline bool has_run_ahead_terms(const AllocatorConstants& c) {
    return c.loss_stage_fragmentation > 0 || c.pipeline_runahead_fragmentation > 0;
}

// Whether a profile's memory depends on the host's pace: its verdict reads the reserved pool and
// it has run-ahead terms. Only then do --host-pace and the range between the two paces mean anything.
inline bool pace_changes_memory(const AllocatorConstants& c, bool verdict_on_reserved) {
    return verdict_on_reserved && has_run_ahead_terms(c);
}

// What the rules above make of one plan's pace (pace_range.cpp applies them to a report, the
// validation's nanotron path to its stage figures), from the pool at the top of the range
// (`high_reserved_bytes`, range_high_constants; nullopt where it could not be evaluated):
//  - a host that runs ahead is judged at range_top_need_bytes as well (0 for a waiting host);
//  - an expected running-ahead pool whose top outgrows the device is given at the waiting pace
//    (pool_outgrows_device: the allocator's flush), its device need and verdict kept;
//  - otherwise an expected pace the host-pace model is unsure of (wait_probability inside
//    unsure_pace_band) takes the two paces' pools mixed (mix_unsure_pace).
struct PaceRules {
    std::int64_t top_need_bytes = 0;
    bool flush = false;
    bool mix = false;
};
PaceRules pace_rules(HostPace pace, bool pace_expected, std::optional<double> wait_probability,
                     const AllocatorConstants& c, std::optional<std::int64_t> high_reserved_bytes,
                     std::int64_t non_pytorch_bytes, std::int64_t capacity_bytes);

}  // namespace preflight
