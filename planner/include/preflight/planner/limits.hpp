// Documented bounds on every input the planner takes. Inside them the planner's int64
// byte and element arithmetic cannot overflow (every per-GPU byte figure stays below
// kMaxBytes = 2^60, eight times under the int64 limit) and its work stays bounded.
// Each bound is named in the error that enforces it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace preflight {

struct ModelConfig;
struct Plan;
struct GpuSpec;

namespace limits {

// Model config fields (config.json).
inline constexpr std::int64_t kMaxWidth = std::int64_t{1} << 20;        // hidden_size, intermediate_size, heads x head_dim: 1,048,576
inline constexpr std::int64_t kMaxHeads = std::int64_t{1} << 14;        // attention / key-value heads: 16,384
inline constexpr std::int64_t kMaxLayers = std::int64_t{1} << 14;       // num_hidden_layers: 16,384
inline constexpr std::int64_t kMaxVocab = std::int64_t{1} << 24;        // vocab_size: 16,777,216
inline constexpr std::int64_t kMaxPositions = std::int64_t{1} << 27;    // max_position_embeddings: 134,217,728
inline constexpr std::int64_t kMaxExperts = std::int64_t{1} << 12;      // num_local_experts: 4,096
inline constexpr std::int64_t kMaxParams = std::int64_t{1} << 50;       // parameters of the whole model: ~1.13e15

// Plan flags.
inline constexpr std::int64_t kMaxSeq = std::int64_t{1} << 24;          // --seq: 16,777,216 tokens
inline constexpr std::int64_t kMaxMbs = std::int64_t{1} << 20;          // --mbs: 1,048,576 sequences
inline constexpr std::int64_t kMaxGpus = std::int64_t{1} << 20;         // --gpus, --dp, --tp, --pp, dp*tp*pp: 1,048,576
inline constexpr std::int64_t kMaxGlobalBatchTokens = std::int64_t{1} << 40;  // --gbs-tokens, seq*mbs*grad_acc*dp: ~1.1e12
inline constexpr std::int64_t kMaxBytes = std::int64_t{1} << 60;        // any per-GPU byte figure: 1 EiB
inline constexpr std::int64_t kMaxDeviceBytes = std::int64_t{1} << 50;  // GPU memory, --overhead-bytes: 1 PiB
inline constexpr std::int64_t kMaxGpusPerNode = 1024;                   // gpus_per_node
// GPU spec rates: per-GPU peaks between 1 MFLOP/s and 10 EFLOP/s, link and memory bandwidths
// between 1 kB/s and 10 PB/s, so no step time, token rate or GPU-hour figure leaves the finite range.
inline constexpr double kMinFlopsPerS = 1e6;
inline constexpr double kMaxFlopsPerS = 1e19;
inline constexpr double kMinBandwidthBytesPerS = 1e3;
inline constexpr double kMaxBandwidthBytesPerS = 1e16;
inline constexpr std::int64_t kMaxConfigFileBytes = std::int64_t{1} << 24;  // a --from config file: 16 MiB
// A JSON file users hand us (model config, GPU spec, plan, run report, matrix): 64 MiB, over 100x
// the largest run report the runtime writes (a GPT-2 XL report with every allocation, ~0.5 MB).
inline constexpr std::int64_t kMaxJsonFileBytes = std::int64_t{1} << 26;
// Nesting of arrays and objects in a JSON file users hand us (and a --from ds_config): 64
// levels, as the YAML and TOML config readers allow; the deepest file Preflight writes (a run
// report) nests 5. Deeper is refused when read, so no recursive walk of the value (nlohmann's
// dump, copy, comparison) can exhaust the stack.
inline constexpr int kMaxJsonDepth = 64;
// A measured data set's CSV: 64 MiB, about 200 times the nanotron sweep's 1,622 rows.
inline constexpr std::int64_t kMaxDataSetCsvBytes = std::int64_t{1} << 26;
// A launch script's command-line words (`--from-arg`, the explorer's import with arguments): as
// many as a script's array may hold (megatron_shell.hpp kMaxArrayElements).
inline constexpr std::size_t kMaxScriptArgs = 4096;

// Work: the plan search enumerates micro-batch sizes up to this many sequences
// (larger micro-batches are not searched, and the output says so).
inline constexpr std::int64_t kMaxSearchMbs = 4096;
// One plan request judges at most --max-plans plans on memory, over all the searches it makes
// (extension variants, "nothing fits" suggestions). The default covers the catalog's searches
// at realistic scales with every precision searched (Mixtral-8x7B on 128 to 1,024 GPUs at seq
// 4096: 53,000 to 66,000 plans; on 512 GPUs at seq 32768, with context parallelism: 209,000;
// Llama-3-70B on 4,096 GPUs: about 18,000) in 2 s or less of a release build (250,000 plans
// in 1.4 s on a shared 2-core machine); the cap keeps an explicit --max-plans to about a minute.
inline constexpr std::int64_t kDefaultSearchPlans = 500'000;
inline constexpr std::int64_t kMaxSearchPlans = 10'000'000;
// --top-k: ranked plans printed, each evaluated in full (memory timeline and step time).
inline constexpr std::int64_t kMaxTopK = 100;
// A data set's cross-validation folds ("targets": {"folds": k}): each fold is one fit over the
// data set (seconds on the nanotron sweep), so k stays in [2, 100].
inline constexpr std::int64_t kMaxFolds = 100;
// The arena is planned over the allocations alive together, which grow with the layers whose
// activations a micro-batch keeps: the placement's cost rises about as the cube of the model's
// layers (release dry run of one micro-batch, a 64-wide GPT-2 shape, no recompute: 256 layers
// 0.52 s, 512 2.1 s, 1,024 9.4 s, 4,096 222 s; a read-only audit, 2026-11-30). So the runtime
// takes at most 256 layers (the catalog's deepest, Llama-3.1-405B, has 126): 1.3-1.5 s at
// 8-64 micro-batches.
inline constexpr std::int64_t kMaxRuntimeLayers = 256;
// The runtime sorts a micro-batch's (token, expert) pairs by expert in one thread block whose
// shared memory holds 136 B per expert (runtime/kernels/moe.cu): at most 256 experts a layer
// (Mixtral has 8; DeepSeek-V3, among the widest public configs, 256).
inline constexpr std::int64_t kMaxRuntimeExperts = 256;
// The dry run and the runtime walk one step op by op. Without a pipeline the step holds four
// micro-batches' ops and runs the fourth again for the later ones, and a pipeline stage (1F1B
// since 2026-11-30, interleaved since 2026-12-01) holds two periods of its steady state and runs
// the second again (runtime Program::repeat); the arena places the block twice at the same
// offsets. So memory does not grow with the micro-batches, and a dry walk passes over the runs
// between the block's second and last (walker.cpp): release dry runs, 2026-12-01, at 131,072
// layer-steps (micro-batches x layers of a stage): Llama-3-8B selective with tp 2 --sp, ZeRO-3
// and fp8 at 4,096 micro-batches 0.07 s and 22 MB; its first stage at pp 4 under ZeRO-1, 16,384
// micro-batches, 0.10 s, interleaved (vpp 2) 0.65 s and 48 MB. Until 2026-11-30 every
// micro-batch's ops were written out, and the bounds were 16,384 layer-steps without a pipeline
// and 4,096 with one (that Llama-3-8B plan at 512 micro-batches: 0.82 s and 485 MB); until
// 2026-12-01 65,536 here, and the interleaved schedule's 1,024 micro-batches and 4,096
// layer-steps (its 512 micro-batches of that stage: 8.4 s). What still grows with the layer-steps
// is a device run's work, one step of which this bounds (the catalog's recommendations reach
// 81,920: MPT-70B's 1,024 micro-batches x 80 layers on 8 H200s without a pipeline).
inline constexpr std::int64_t kMaxRuntimeRepeatedLayerSteps = 131072;

// Model fields against the bounds above (InputError names the config.json field).
void check_model(const ModelConfig& model);

// Plan flags against the bounds above, then the plan's largest byte figures against
// kMaxBytes (InputError names the flag that drives the figure).
void check_plan(const Plan& plan, const ModelConfig& model);

// --overhead-bytes (or a spec's overhead_bytes) within [0, kMaxDeviceBytes].
void check_overhead_bytes(std::optional<std::int64_t> overhead_bytes);

}  // namespace limits
}  // namespace preflight
