// The `preflight run` report: measured (device run or dry run) and predicted
// (planner, runtime profile) side by side, the device, the plan and the timeline.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "preflight/planner/gpu.hpp"
#include "preflight/planner/memory.hpp"
#include "preflight/runtime/allocator.hpp"
#include "preflight/runtime/errors.hpp"
#include "preflight/runtime/op_times.hpp"

namespace preflight::runtime {

struct DeviceInfo {
    std::string name;
    std::string driver;          // e.g. "13.0"
    std::string runtime;         // CUDA runtime version
    std::int64_t memory_bytes = 0;
    int compute_capability = 0;  // 90 for sm_90
};

struct FailureInfo {
    std::string where;   // op label / phase
    std::string buffer;
    std::string category;
    std::int64_t requested_bytes = 0;
    std::int64_t free_bytes = -1;
    std::int64_t in_use_bytes = 0;
    std::string message;
    std::string kind = "out-of-memory";  // FailureKind name (errors.hpp)
    std::optional<OpLocation> op;        // the op it happened in (errors other than out of memory)
    int code = 0;                        // CUDA / cuBLASLt / cuDNN status, 0 when none
};

// Device memory as the driver sees it (device runs only). Every figure is "used" memory
// (total - free) with the baseline (memory in use before this run's CUDA context)
// subtracted, so the CUDA context, library handles and workspaces, and the pool's
// reserved memory are all in it.
struct DriverMemory {
    std::optional<std::int64_t> baseline_bytes;  // device used before the context, cudaMemGetInfo terms (see baseline_source)
    std::string baseline_source;                 // "nvml-before-context" | "cudaMemGetInfo-after-context"
    std::optional<std::int64_t> context_bytes;   // the CUDA context (NVML used after minus before)
    std::optional<std::int64_t> libraries_bytes;  // cuBLASLt / cuDNN handles and the stream, after the context
    std::optional<std::int64_t> after_setup_bytes;     // persistent buffers allocated and initialised
    std::optional<std::int64_t> at_peak_op_bytes;      // synchronised at the predicted peak op (a warm-up step)
    std::optional<std::int64_t> after_warmup_bytes;    // after the first step
    std::optional<std::int64_t> used_peak_bytes;       // largest of every sample
    std::optional<std::int64_t> pool_reserved_peak_bytes;  // cudaMemPoolAttrReservedMemHigh
    std::optional<std::int64_t> pool_used_peak_bytes;      // cudaMemPoolAttrUsedMemHigh
    std::optional<std::int64_t> nvml_used_peak_bytes;      // NVML used (all processes) - NVML baseline
    std::string nvml;                                      // "ok" or why NVML was not read
    std::string peak_op;                                   // label of the sampled op
    int samples = 0;
};

// What one run measured (device) or walked (dry run).
struct Measured {
    DriverMemory driver;
    bool debug_sync = false;          // synchronised after every op (timings not representative)
    std::string attention_backend;    // "cudnn" | "kernel" | "eager" (device runs)
    std::int64_t tracked_peak_bytes = 0;  // tracking allocator peak
    CategoryBytes peak_breakdown{};
    std::string peak_where;
    std::optional<std::int64_t> overhead_bytes;     // cudaMemGetInfo delta over context + library set-up
    std::optional<std::int64_t> pool_peak_bytes;    // stream-ordered pool's used-memory high-water mark
    std::string allocator;                          // "arena" | "pool" (RunOptions::allocator)
    std::optional<std::int64_t> arena_bytes;        // the planned arena (arena.hpp; dry runs and arena runs)
    std::optional<std::int64_t> arena_live_peak_bytes;  // its lower bound: most 256-byte slots' bytes alive at once
    std::optional<std::int64_t> device_used_peak_bytes;  // total - free, lowest free seen
    std::optional<double> step_time_s;              // median over measured steps
    std::vector<double> step_times_s;
    std::vector<double> losses;                     // loss per step (warm-up included, marked)
    int warmup_steps = 0;
    std::optional<double> tokens_per_s, mfu, hfu;
    std::optional<OpTimes> op_times;                // `--op-times`: the extra step, op by op
};

struct Predicted {
    MemoryReport memory;  // planner, runtime profile
    std::int64_t tracked_peak_bytes = 0;  // peak minus the modelled overhead
    std::optional<double> step_time_s, tokens_per_s, mfu, hfu;
    std::optional<double> dp_communication_s;  // the step time's exposed data-parallel communication
    std::optional<double> tp_communication_s;  // its tensor-parallel collectives (exposed, Megatron-LM's default)
    std::optional<double> pp_communication_s;  // its pipeline sends and receives
    std::optional<double> pipeline_bubble_s;   // its pipeline bubble, (pp - 1) / m of the ideal step (/ v interleaved)
    std::optional<double> cp_communication_s;  // its context-parallel K/V all-gathers and dK/dV reduce-scatters
    std::optional<double> ep_communication_s;  // its expert-parallel token all-gathers and reduce-scatters
    // What an emulated rank's measured step lacks: its collectives are local ops and its pipeline
    // receives wait for no neighbour, so it has neither their time nor the bubble.
    double emulated_communication_s() const {
        return dp_communication_s.value_or(0.0) + tp_communication_s.value_or(0.0) + pp_communication_s.value_or(0.0) +
               pipeline_bubble_s.value_or(0.0) + cp_communication_s.value_or(0.0) + ep_communication_s.value_or(0.0);
    }
    // The step an emulated rank runs alone: its own pipeline stage's work (ThroughputOptions::
    // own_stage; at pp 1 the job's step) less that stage's exposed communication and bubble. A real
    // stage waits for the slowest; one run alone does not.
    std::optional<double> emulated_step_time_s;
    double model_flops_per_step = 0, hardware_flops_per_step = 0;
    // A pipeline plan whose most loaded stage (the planner's highest predicted peak) is not this
    // rank's: that stage, and its peak incl. overhead and verdict on this GPU. A run of this rank
    // says nothing of whether that stage fits (nullopt: pp 1, or this rank is on it).
    struct Stage {
        std::int64_t stage = 0;
        std::int64_t peak_bytes = 0;
        bool fits = false;
    };
    std::optional<Stage> most_loaded_stage;
};

// Where a run sits in the plan's world and how its collectives ran.
struct ParallelInfo {
    std::int64_t world_size = 1;  // the plan's ranks (dp x tp x pp x cp)
    std::int64_t rank = 0;        // the rank this report is of
    std::int64_t dp_rank = 0, tp_rank = 0, pp_rank = 0, cp_rank = 0;  // its coordinates (program.hpp rank_coords)
    // "none" (no collectives: dp 1 without ZeRO) | "dry-run" | "emulated" | "nccl" | "loopback"
    std::string backend = "none";
    std::string nccl;  // the NCCL library's version, or why it was not loaded ("" when not needed)
    // Emulated ranks: NCCL's own device memory, measured with a world-size-1 communicator that
    // stays up for the run (so the driver's figures include it; a real job's NCCL holds more per peer).
    std::optional<std::int64_t> nccl_world1_bytes;
    // Collectives per step as measured (median over the measured steps): NCCL's real exchange, or
    // an emulated / loopback rank's local ops (no bytes cross GPUs then).
    std::optional<double> all_reduce_s, reduce_scatter_s, all_gather_s;
    std::int64_t collectives_per_step = 0;
    std::int64_t collective_bytes_per_step = 0;
    // Emulated ranks: the measured step (compute and local ops) plus the planner's predicted
    // exposed communication, labelled as such: the step time rank `rank` of the real job would see.
    std::optional<double> step_time_with_predicted_communication_s;
};

struct RunReport {
    std::string mode = "dry-run";  // "dry-run" | "device"
    std::string status = "ok";     // "ok" | "allocation-failed" | "error"
    ModelConfig model;
    GpuSpec gpu;
    Plan plan;
    std::optional<DeviceInfo> device;
    int steps = 0;
    std::uint64_t seed = 0;
    ParallelInfo parallel;
    Measured measured;
    Predicted predicted;
    std::vector<TimelineSample> timeline;
    std::optional<FailureInfo> failure;
};

// Relative error of the measured tracked peak against the prediction's (|m - p| / p).
double peak_relative_error(const RunReport& r);

nlohmann::json category_bytes_to_json(const CategoryBytes& b);
// docs/interface.md per_gpu_bytes keys from runtime categories (activations include temporaries,
// buffers include workspaces), with `overhead` given.
nlohmann::json contract_bytes_to_json(const CategoryBytes& b, std::int64_t overhead);
nlohmann::json run_report_to_json(const RunReport& r);

// Writes `text` to `path` atomically: a temp file in the same folder, then rename. A symbolic
// link is written through (its target replaced, the link kept); an existing file that is not a
// regular one (/dev/null, /dev/stdout, a FIFO) is written in place, never replaced.
// Throws std::runtime_error naming the path on failure.
void write_file_atomic(const std::filesystem::path& path, const std::string& text);

}  // namespace preflight::runtime
