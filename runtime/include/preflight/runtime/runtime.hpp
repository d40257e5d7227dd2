// Entry points of the runtime: the dry run (host, always available) and, through the
// device backend (device.hpp), the device run.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "preflight/planner/gpu.hpp"
#include "preflight/runtime/program.hpp"
#include "preflight/runtime/rendezvous.hpp"
#include "preflight/runtime/run_report.hpp"

namespace preflight::runtime {

struct RunOptions {
    int steps = 10;          // measured steps (median step time over these)
    int warmup = 2;          // excluded from timing
    std::uint64_t seed = 1234;
    std::optional<std::int64_t> overhead_bytes;  // for the prediction; default: the GPU spec's
    TrainHyper hyper;
    bool timeline = true;    // record the timeline of one step
    // Synchronise and check after every op, so a failure names the op that failed
    // (`preflight run --debug-sync` or PREFLIGHT_DEBUG_SYNC=1). Step times are then not
    // representative (the report says so).
    bool debug_sync = false;
    // Attention for bf16 flash plans: cuDNN's fused flash attention when the library loads
    // and supports the shape (else the runtime's own kernel, reported); false forces the kernel.
    bool cudnn_attention = true;
    // bf16 GeLU models: the activation fused into the fc1 GEMM and its gradient into the fc2
    // dgrad GEMM as cuBLASLt epilogues (`--no-fused-epilogues` / PREFLIGHT_NO_FUSED_EPILOGUES=1: off).
    bool fuse_epilogues = true;
    // Device runs: one more step after the measured ones with an event around every op
    // (`preflight run --op-times`; op_times.hpp); its time is not a measured step's.
    bool op_times = false;
    // When set: after set-up, the initial parameters (fp32 master copy, else the weights) are
    // written to PATH (raw little-endian fp32 in the program's flat layout) and PATH.json (name,
    // offset, rows, cols per tensor), so the PyTorch reference can start from the same weights.
    std::string save_init_path;
    // Progress lines (device runs: one per step); null = quiet.
    std::function<void(const std::string&)> progress;
    // Multi-GPU plans (dp, tp or pp > 1, or a ZeRO stage): the rank this process runs (global:
    // program.hpp rank_coords; the prediction is its pipeline stage's) and how its collectives
    // run: "emulated" (rank `rank` alone on this GPU, every collective a local op; `preflight run
    // --emulate-rank`) or "nccl" (one process per GPU, ranks from `rendezvous`).
    std::int64_t rank = 0;
    std::string comm_backend = "emulated";
    std::optional<Rendezvous> rendezvous;
    int device = 0;  // the CUDA device this process runs on (a rendezvous' local rank)
    // Device memory for the program's buffers: "arena" (default; arena.hpp: every offset
    // planned before the run, one cudaMalloc of the planned size, no allocator slack) or "pool"
    // (cudaMallocAsync from the device's default pool, as every run recorded before 2026-11-28:
    // the pool keeps slack beyond the tensors, which the prediction then adds under full recompute).
    std::string allocator = "arena";
};

// What one rank of a multi-rank run ends with (loopback and host runs).
struct RankResult {
    std::vector<double> losses;   // the rank's mean loss per step
    std::vector<double> updated;  // the parameters after the last step in the full flat layout,
                                  // assembled from every rank's shard (the fp32 master copy where
                                  // the recipe has one, else the weights)
};

// The planner's prediction for the plan under the runtime profile (never reads
// measured numbers): memory, and step time / MFU / HFU from the planner's FLOP counts.
Predicted predict(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan, const RunOptions& options);

// A report with everything known before running: mode ("dry-run" | "device"), model,
// GPU, resolved plan, steps, seed and the prediction. Shared by both run paths.
RunReport report_for(const std::string& mode, const ModelConfig& model, const GpuSpec& gpu, const Plan& plan,
                     const RunOptions& options);

// Walks set-up, one step and teardown with no device. The report's `measured`
// section holds the tracking allocator's figures (no times).
RunReport dry_run_report(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan, const RunOptions& options);

// Fills measured throughput (tokens/s, MFU, HFU) from a measured step time and the
// planner's FLOP counts for the plan on `gpu` (its dense peak for the compute precision).
void fill_measured_throughput(RunReport& report);

}  // namespace preflight::runtime

#include "preflight/runtime/device.hpp"  // the device backend: device_count, run_on_device
