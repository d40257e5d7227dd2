// `preflight run`: execute a plan on one GPU (CUDA runtime) and report measured next
// to predicted; --dry-run walks the same step program with no device.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <tuple>
#include <variant>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "config_from.hpp"
#include "output_paths.hpp"
#include "format.hpp"
#include "invocation.hpp"
#include "preflight/planner/catalog.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/extensions.hpp"
#include "preflight/runtime/reference.hpp"
#include "preflight/planner/limits.hpp"
#include "preflight/planner/plan_schema.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/report.hpp"
#include "preflight/planner/throughput.hpp"
#include "preflight/runtime/errors.hpp"
#include "preflight/runtime/device.hpp"
#include "preflight/runtime/runtime.hpp"
#include "plan_file.hpp"
#include "run_ranks.hpp"

namespace preflight::cli {

namespace {

struct RunState {
    PlanFlags flags;
    FromFlags from;
    std::string plan_file;
    int steps = 10;
    int warmup = 2;
    std::uint64_t seed = 1234;
    double lr = 1e-3;
    bool dry_run = false;
    bool debug_sync = false;
    bool no_cudnn = false;
    bool no_fused = false;
    bool op_times = false;
    std::string allocator = "arena";
    std::string save_init;
    std::string report_file;
    RankFlags ranks;
    std::int64_t emulate_rank = 0;  // --emulate-rank (bound here; RankFlags gets it when given)
    std::string ranked_for;         // --framework: what a pasted `plan:` line was ranked for
    CLI::App* sub = nullptr;  // to tell --model/--gpu given from their defaults
};

// Steps a run measures or warms up with, at most: bounded time (a step of a large plan takes seconds).
constexpr std::int64_t kMaxRunSteps = 100'000;

// --seed read exactly: CLI11 alone would wrap -1 to 2^64 - 1 and saturate values past it.
CLI::Validator exact_seed() {
    return CLI::Validator(
        [](std::string& value) -> std::string {
            std::uint64_t seed = 0;
            const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), seed);
            if (ec != std::errc() || end != value.data() + value.size())
                return "'" + value + "' is not a whole number from 0 to 18446744073709551615";
            value = std::to_string(seed);  // CLI11 reads a leading 0 as octal: hand it decimal
            return "";
        },
        "SEED");
}

// Tolerance on the tracked peak, measured vs predicted (within 1 %).
constexpr double kPeakTolerance = 0.01;

std::string opt_seconds(const std::optional<double>& v) {
    if (!v) return "n/a";
    char b[32];
    std::snprintf(b, sizeof b, "%.4f s", *v);
    return b;
}
std::string opt_ratio(const std::optional<double>& v) {
    if (!v) return "n/a";
    char b[32];
    std::snprintf(b, sizeof b, "%.1f %%", 100 * *v);
    return b;
}

// The rank a report is of, and what its collectives were.
void print_parallel(const runtime::RunReport& r) {
    const runtime::ParallelInfo& p = r.parallel;
    if (p.backend == "none") return;
    std::cout << "# rank " << p.rank << " of " << p.world_size << " (data-parallel rank " << p.dp_rank
              << ", tensor-parallel rank " << p.tp_rank << ", pipeline stage " << p.pp_rank
              << (r.plan.cp > 1 ? ", context-parallel rank " + std::to_string(p.cp_rank) : "") << "), collectives: " << p.backend;
    if (p.backend == "emulated")
        std::cout << " (this rank alone: collectives are local ops; communication time is the planner's prediction)";
    if (p.backend == "dry-run") std::cout << " (walked, not run)";
    std::cout << "\n";
    if (p.nccl_world1_bytes)
        std::cout << "# NCCL " << p.nccl << ": its own device memory, measured with a world-size-1 communicator: "
                  << format_bytes(*p.nccl_world1_bytes) << " (in the driver figures)\n";
}

// The peak a GEMM of the timed step is judged against: fp8 products against the fp8 peak, the
// rest against the plan's 16-bit peak, or fp32's when the whole recipe is fp32.
std::optional<double> gemm_peak_flops_per_s(const runtime::RunReport& r, const std::string& label) {
    if (label.rfind("fp8 ", 0) == 0) return compute_peak_flops_per_s(r.gpu, Precision::fp8_mixed);
    return compute_peak_flops_per_s(r.gpu, r.plan.precision == Precision::fp32 ? Precision::fp32 : Precision::bf16_mixed);
}

// `--op-times`: the timed step by op kind (longest first; the tail summed), then its longest GEMMs.
void print_op_times(const runtime::RunReport& r) {
    if (!r.measured.op_times) return;
    const runtime::OpTimes& o = *r.measured.op_times;
    constexpr std::size_t kKinds = 14, kGemms = 10;
    auto ms = [](double s) { return fixed(s * 1e3, 3); };
    auto pct = [](double x) { return fixed(100 * x, 1); };
    auto tflops = [](double flops, double s) { return s > 0 && flops > 0 ? fixed(flops / s / 1e12, 1) : std::string("-"); };
    std::printf("# the step timed op by op (one step after the measured ones, an event before every op): %lld ops, %.3f ms\n",
                static_cast<long long>(o.ops), o.total_s * 1e3);
    Table t;
    t.header = {"op", "count", "time", "share", "GEMM rate"};
    t.units = {"", "", "[ms]", "[%]", "[TFLOP/s]"};
    runtime::OpLabelTime rest{"other kinds", 0, 0, 0};
    for (std::size_t i = 0; i < o.by_label.size(); ++i) {
        const runtime::OpLabelTime& l = o.by_label[i];
        if (i < kKinds) {
            t.rows.push_back({l.label, std::to_string(l.count), ms(l.time_s), pct(o.total_s > 0 ? l.time_s / o.total_s : 0),
                              tflops(l.gemm_flops, l.time_s)});
        } else {
            rest.count += l.count;
            rest.time_s += l.time_s;
        }
    }
    if (rest.count > 0)
        t.rows.push_back({rest.label, std::to_string(rest.count), ms(rest.time_s), pct(o.total_s > 0 ? rest.time_s / o.total_s : 0), "-"});
    std::cout << t.render();
    Table g;
    g.header = {"GEMM (longest)", "M x N x K", "count", "time", "rate", "of peak"};
    g.units = {"", "", "", "[ms]", "[TFLOP/s]", "[%]"};
    for (std::size_t i = 0; i < o.gemms.size() && i < kGemms; ++i) {
        const runtime::GemmShapeTime& s = o.gemms[i];
        std::string dims = std::to_string(s.shape.m) + " x " + std::to_string(s.shape.n) + " x " + std::to_string(s.shape.k);
        if (s.shape.batch > 1) dims += " (x" + std::to_string(s.shape.batch) + ")";
        const std::optional<double> peak = gemm_peak_flops_per_s(r, s.label);
        g.rows.push_back({s.label, dims, std::to_string(s.count), ms(s.time_s), tflops(s.flops, s.time_s),
                          peak && s.time_s > 0 ? pct(s.flops / s.time_s / *peak) : std::string("N/A")});
    }
    if (!g.rows.empty()) std::cout << g.render();
}

// The planner's peak phase: it counts the micro-batches held at once (the walk's names the one it
// is in), model-chunk micro-batches under the interleaved schedule.
std::string planned_peak_phase(const runtime::RunReport& r) {
    Phase planned = r.predicted.memory.peak_phase;
    const std::int64_t held = planned.micro_batch;
    planned.micro_batch = 0;
    std::string where = describe(planned);
    const bool chunks = r.plan.pp_schedule == PpSchedule::interleaved;
    if (held > 0)
        where += " (" + count_of(held, chunks ? "chunk micro-batch" : "micro-batch", chunks ? "chunk micro-batches" : "micro-batches") +
                 " in flight)";
    return where;
}

// The arena is taken whole at the start: a plan whose tensors fit can still not get it.
void warn_arena_over_capacity(const runtime::RunReport& r) {
    const std::int64_t overhead = r.predicted.memory.at_peak.overhead;
    if (r.predicted.memory.fits && r.measured.arena_bytes &&
        *r.measured.arena_bytes + overhead > r.predicted.memory.capacity_bytes)
        std::printf("allocator: WARNING: the arena and the overhead (%s) exceed the %s the GPU has: a device run would "
                    "fail to allocate it (--allocator pool takes memory as the step asks)\n",
                    format_bytes(*r.measured.arena_bytes + overhead).c_str(),
                    format_bytes(r.predicted.memory.capacity_bytes).c_str());
}

void print_table(const runtime::RunReport& r) {
    std::cout << "# preflight run (" << r.mode << "): " << r.model.name << "\n# plan: " << to_flags(r.plan) << "\n";
    print_parallel(r);
    if (r.device) std::cout << "# device: " << r.device->name << " (" << format_bytes(r.device->memory_bytes) << ")\n";
    std::cout << "# predicted with " << (r.gpu.runtime ? "the runtime's own constants (the GPU spec's \"runtime\": step time, "
                                                         "non-tensor memory, and pool slack for --allocator pool)"
                                                       : "the GPU's generic constants (its spec has no \"runtime\" block)");
    // A spec without runs of its own says which GPU they were measured on (calibration_from).
    if (r.gpu.runtime && r.gpu.runtime->provenance.rfind("transferred from ", 0) == 0) {
        const std::string& p = r.gpu.runtime->provenance;
        std::cout << ", " << p.substr(0, p.find(" ("));
    }
    std::cout << "\n";
    if (r.model.is_moe())  // program_moe.cpp; no run of it has been timed yet
        std::cout << "# mixture of experts: its step time is not fitted on runs of its own (one GEMM per expert with "
                     "slots, the host reading each routing's expert offsets): the dense GEMMs' rate is assumed\n";
    // Sliding-window attention past the window (Dims::window, window_of): what the attention computes, and
    // what the FLOPs count (forward_flops_per_token caps the keys; layers of two kinds at their mean).
    if (const std::int64_t w = r.model.attention_window(r.plan.seq); w > 0 && r.model.full_attention_period > 0)
        std::cout << "# attention: one layer in " << r.model.full_attention_period << " (layers "
                  << r.model.full_attention_period << ", " << 2 * r.model.full_attention_period
                  << ", ...) to the whole sequence, the " << r.model.layers - r.model.full_attention_layers
                  << " others through the model's sliding window, each query seeing itself and the " << w - 1
                  << " tokens before it (FLOPs count the two kinds' mean)\n";
    else if (w > 0)
        std::cout << "# attention: through the model's sliding window on every layer, each query sees itself and the "
                  << w - 1 << " tokens before it (FLOPs count those keys only)\n";
    // LongRoPE (ref::rope_frequencies): which factors this sequence takes, and what cos and sin are scaled by.
    const RopeScaling& rs = r.model.rope_scaling;
    if (r.model.position == PositionKind::rope && rs.type == "longrope") {
        const runtime::ref::RopeFrequencies f = runtime::ref::rope_frequencies(r.model.rope_dims(), r.model.rope_theta, rs,
                                                                               r.plan.seq, r.model.max_positions);
        const bool beyond = f.longrope_factors == "long";
        std::cout << "# RoPE: longrope with its " << f.longrope_factors << " factors (seq " << r.plan.seq
                  << (beyond ? " > " : " <= ") << "original_max_position_embeddings " << rs.original_max_positions
                  << "), cos and sin x " << fixed(f.attention_factor, 4) << "\n";
    }
    // Which peak MFU/HFU divide by, so a reader never compares an fp32 row's MFU with a bf16 row's.
    const std::optional<double> peak = compute_peak_flops_per_s(r.gpu, r.plan.precision);
    std::cout << "# MFU/HFU: of the dense " << compute_peak_name(r.plan.precision) << " peak, "
              << format_rate(peak ? std::optional<double>(*peak / 1e12) : std::nullopt, "TFLOP/s")
              << " per GPU (the GPU spec's)\n";
    Table t;
    // A dry run measures nothing: its tracked peak is what the walk allocated, no device involved.
    t.header = {"", r.mode == "dry-run" ? "walked" : "measured", "predicted"};
    t.units = {"", "", ""};
    t.rows.push_back({"tracked peak", format_bytes(r.measured.tracked_peak_bytes),
                      format_bytes(r.predicted.tracked_peak_bytes)});
    // Measured: the driver's device-used peak where there is one (what validate --check gates
    // on), else tensors plus the measured non-tensor memory.
    std::string device_peak = "n/a";
    if (r.measured.driver.used_peak_bytes)
        device_peak = format_bytes(*r.measured.driver.used_peak_bytes);
    else if (r.measured.overhead_bytes)
        device_peak = format_bytes(r.measured.tracked_peak_bytes + *r.measured.overhead_bytes);
    t.rows.push_back({"peak incl. overhead", device_peak, format_bytes(r.predicted.memory.peak_bytes)});
    // NCCL's own memory is measured, not predicted: the figure validate --check compares sets it apart.
    const std::optional<std::int64_t>& driver_peak = r.measured.driver.used_peak_bytes;
    if (driver_peak && r.parallel.nccl_world1_bytes)
        t.rows.push_back({"peak less NCCL's own", format_bytes(*driver_peak - *r.parallel.nccl_world1_bytes),
                          format_bytes(r.predicted.memory.peak_bytes)});
    t.rows.push_back({"step time", opt_seconds(r.measured.step_time_s), opt_seconds(r.predicted.step_time_s)});
    if (r.parallel.backend == "emulated")  // measured compute + the planner's exposed communication
        t.rows.push_back({"step + pred. comm. + bubble", opt_seconds(r.parallel.step_time_with_predicted_communication_s),
                          opt_seconds(r.predicted.step_time_s)});
    t.rows.push_back({"MFU", opt_ratio(r.measured.mfu), opt_ratio(r.predicted.mfu)});
    t.rows.push_back({"HFU", opt_ratio(r.measured.hfu), opt_ratio(r.predicted.hfu)});
    std::cout << t.render();
    // The runtime's reports count attention FLOPs in full (the planner's default convention).
    std::cout << mfu_above_peak_note(std::max({r.measured.mfu.value_or(0.0), r.predicted.mfu.value_or(0.0),
                                               r.measured.hfu.value_or(0.0), r.predicted.hfu.value_or(0.0)}),
                                     true);
    if (r.mode == "dry-run")  // what a device run of this rank would meet
        std::printf("fit: %s on %s (%s): predicted peak incl. overhead %s\n",
                    r.predicted.memory.fits ? "fits" : "DOES NOT FIT", r.gpu.name.c_str(),
                    format_bytes(r.predicted.memory.capacity_bytes).c_str(), format_bytes(r.predicted.memory.peak_bytes).c_str());
    if (const auto& most = r.predicted.most_loaded_stage) {  // the rank that decides whether the plan fits
        const std::int64_t rank =
            r.parallel.tp_rank + r.plan.tp * (r.parallel.cp_rank + r.plan.cp * (r.parallel.dp_rank + r.plan.dp * most->stage));
        std::printf("most loaded: pipeline stage %lld (--emulate-rank %lld), predicted peak incl. overhead %s: %s\n",
                    static_cast<long long>(most->stage), static_cast<long long>(rank), format_bytes(most->peak_bytes).c_str(),
                    most->fits ? "fits" : "DOES NOT FIT");
    }
    std::printf("peak: %s; planner's peak phase: %s; agreement %.4f %%\n", r.measured.peak_where.c_str(),
                planned_peak_phase(r).c_str(), 100 * runtime::peak_relative_error(r));
    if (!r.measured.losses.empty()) std::printf("loss: first %.4f, last %.4f\n", r.measured.losses.front(), r.measured.losses.back());
    if (!r.measured.attention_backend.empty()) std::cout << "attention: " << r.measured.attention_backend << "\n";
    if (r.measured.arena_bytes && r.measured.arena_live_peak_bytes)
        std::printf("allocator: arena of %s planned, %.3f %% over the most bytes alive at once (%s)\n",
                    format_bytes(*r.measured.arena_bytes).c_str(),
                    100.0 * static_cast<double>(*r.measured.arena_bytes - *r.measured.arena_live_peak_bytes) /
                        static_cast<double>(std::max<std::int64_t>(*r.measured.arena_live_peak_bytes, 1)),
                    format_bytes(*r.measured.arena_live_peak_bytes).c_str());
    else if (r.measured.allocator == "pool")
        std::cout << "allocator: cudaMallocAsync pool (--allocator pool)\n";
    warn_arena_over_capacity(r);
    if (r.measured.driver.used_peak_bytes) {
        // The buffers' memory: the arena taken in one piece, or the pool's reserved high-water mark.
        const std::optional<std::int64_t> held =
            r.measured.allocator == "arena" ? r.measured.arena_bytes : r.measured.driver.pool_reserved_peak_bytes;
        std::printf("driver: device-used peak %s over the baseline (%s), %s %s, NVML %s\n",
                    format_bytes(*r.measured.driver.used_peak_bytes).c_str(), r.measured.driver.baseline_source.c_str(),
                    r.measured.allocator == "arena" ? "arena" : "pool reserved peak",
                    held ? format_bytes(*held).c_str() : "n/a",
                    r.measured.driver.nvml_used_peak_bytes ? format_bytes(*r.measured.driver.nvml_used_peak_bytes).c_str()
                                                           : r.measured.driver.nvml.c_str());
    }
    if (r.parallel.collectives_per_step > 0 && r.parallel.backend == "dry-run")
        std::printf("collectives: %lld a step over %s of buffers (walked, not run: what a device run issues%s)\n",
                    static_cast<long long>(r.parallel.collectives_per_step), format_bytes(r.parallel.collective_bytes_per_step).c_str(),
                    r.plan.pp > 1 ? "; pipeline sends and receives apart" : "");
    else if (r.parallel.collectives_per_step > 0)
        std::printf("collectives: %lld a step (%s), all-reduce %s, reduce-scatter %s, all-gather %s%s\n",
                    static_cast<long long>(r.parallel.collectives_per_step), format_bytes(r.parallel.collective_bytes_per_step).c_str(),
                    opt_seconds(r.parallel.all_reduce_s).c_str(), opt_seconds(r.parallel.reduce_scatter_s).c_str(),
                    opt_seconds(r.parallel.all_gather_s).c_str(),
                    r.parallel.backend == "nccl" ? "" : " (local ops, no bytes crossed GPUs)");
    if (r.measured.debug_sync) std::cout << "debug-sync: synchronised after every op (step times not representative)\n";
    print_op_times(r);
    if (r.failure) std::cout << "FAILED (" << r.failure->kind << "): " << r.failure->message << "\n";
}

// What `preflight run` cannot execute, and its bounds on the work of one step.
void check_runnable(const RunState& st, const ModelConfig& model, const Plan& plan) {
    // Names the flag: the pipeline schedule, the extensions, the bounds on a step's work
    // (micro-batches, layer-steps) among them (the planner's check_runtime_plan).
    // Megatron-LM's settings the runtime does not run, refused before any device is looked for.
    check_fp8_param_gather_profile(plan, runtime_profile());
    check_uneven_pipeline_split_profile(plan, runtime_profile());
    runtime::check_supported(model, plan);
    if (st.steps < 1) throw InputError("--steps", "must be at least 1");
    if (st.warmup < 0) throw InputError("--warmup", "must be 0 or more");
}

runtime::RunOptions run_options(const RunState& st, const ModelConfig& model) {
    runtime::RunOptions opt;
    opt.steps = st.steps;
    opt.warmup = st.warmup;
    opt.seed = st.seed;
    opt.overhead_bytes = st.flags.overhead_bytes;
    opt.hyper.lr = st.lr;
    opt.hyper.rope_base = model.rope_theta;
    opt.hyper.rope_scaling = model.rope_scaling;
    opt.hyper.norm_eps = model.norm_eps;
    opt.save_init_path = st.save_init;
    opt.op_times = st.op_times;
    opt.allocator = st.allocator;
    opt.fuse_epilogues = !st.no_fused && !runtime::debug_sync_requested(false, std::getenv("PREFLIGHT_NO_FUSED_EPILOGUES"));
    opt.debug_sync = runtime::debug_sync_requested(st.debug_sync, std::getenv("PREFLIGHT_DEBUG_SYNC"));
    opt.cudnn_attention = !st.no_cudnn && !runtime::debug_sync_requested(false, std::getenv("PREFLIGHT_NO_CUDNN"));
    opt.progress = [](const std::string& line) { std::cerr << "preflight run: " << line << "\n"; };
    return opt;
}

// On the device backend (the CUDA executor, or in a build without CUDA the no-device one):
// the report, or the exit code when no report can be made.
std::variant<runtime::RunReport, int> device_report(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan,
                                                    const runtime::RunOptions& opt) {
    if (const auto why = runtime::device_backend_unavailable_reason(); !why.empty()) {
        std::cerr << "preflight: error: run: " << why << "; use --dry-run to walk the plan without a GPU\n";
        return kExitNoDevice;
    }
    if (runtime::device_count() == 0) {
        std::cerr << "preflight: error: run: no CUDA device is available (use --dry-run to walk the plan without a GPU)\n";
        return kExitNoDevice;
    }
    if (opt.device >= runtime::device_count()) {
        std::cerr << "preflight: error: run: this rank's GPU (LOCAL_RANK " << opt.device << ") is not among the "
                  << runtime::device_count() << " visible\n";
        return kExitNoDevice;
    }
    try {
        return runtime::run_on_device(model, gpu, plan, opt);
    } catch (const runtime::DeviceError& e) {
        // Before the first op (context, stream, library handles): no report to write.
        std::cerr << "preflight: error: run: the device could not be set up: " << e.what() << "\n";
        return runtime::exit_code_for(e.kind) == 1 ? kExitDoesNotFit : kExitNoDevice;
    }
}

// Whatever the format: a GPU spec without a dense peak for the recipe (e.g. fp8 on an A100: no such
// tensor-core mode) leaves MFU and HFU with nothing to divide by.
void warn_no_dense_peak(const runtime::RunReport& r) {
    if (compute_peak_flops_per_s(r.gpu, r.plan.precision)) return;
    std::cerr << "preflight: warning: " << r.gpu.name << " publishes no dense " << to_string(r.plan.precision)
              << " peak (null in its spec: no such tensor-core mode, or no published figure), so MFU and HFU are N/A"
              << (r.plan.precision == Precision::fp8_mixed
                      ? "; a device run of fp8-mixed needs fp8 tensor cores (compute capability 8.9 or later)"
                      : "")
              << "\n";
}

// Writes and prints the report; the exit code of the comparison. A rank of a multi-process job
// writes its own report file (rank_report_path) and, but for rank 0, prints nothing.
int finish_run(const RunState& st, const runtime::RunReport& report, const RankChoice& ranks) {
    nlohmann::json j = runtime::run_report_to_json(report);
    if (st.sub) j["invocation"] = invocation_json(*st.sub, data_dir_of(st.flags.data_dir));  // version, arguments
    const std::string text = j.dump(2) + "\n";
    const bool one_of_many = ranks.in_launch && report.parallel.world_size > 1;
    if (!st.report_file.empty())
        runtime::write_file_atomic(one_of_many ? rank_report_path(st.report_file, static_cast<int>(report.parallel.rank))
                                               : st.report_file,
                                   text);
    if (!(one_of_many && report.parallel.rank != 0)) warn_no_dense_peak(report);
    if (one_of_many && report.parallel.rank != 0) {
        // quiet: rank 0 speaks for the job
    } else if (st.flags.format == "json") {
        std::cout << text;
    } else {
        print_table(report);
    }
    if (report.failure) {
        std::cerr << "preflight run: " << report.failure->message << "\n";
        // A failed allocation is the plan not fitting (1); any other device or library
        // failure is the GPU or a library being unusable (3).
        return report.status == "allocation-failed" ? kExitDoesNotFit : kExitNoDevice;
    }
    if (runtime::peak_relative_error(report) > kPeakTolerance) {
        std::cerr << "preflight run: tracked peak differs from the prediction by more than 1 %\n";
        return kExitDoesNotFit;
    }
    return kExitOk;
}

int run_command(const RunState& st) {
    if (!(std::isfinite(st.lr) && st.lr > 0))
        throw InputError("--lr", "must be a positive finite number, got " + format_real(st.lr));
    if (!st.report_file.empty()) check_output_file(st.report_file, "--report");  // before any work
    if (!st.ranked_for.empty() && st.ranked_for != "preflight-runtime")
        std::cerr << "# note: --framework " << st.ranked_for << ": the plan was ranked for " << st.ranked_for
                  << "; run predicts what the Preflight runtime keeps and runs (its own profile, preflight-runtime)\n";
    const auto dir = data_dir_of(st.flags.data_dir);
    std::string model_name = st.flags.model, gpu_name = st.flags.gpu;
    Plan plan = st.flags.to_plan();
    std::optional<nlohmann::json> file_model;  // a --from config's model shape the plan file carries
    if (!st.plan_file.empty()) plan = plan_from_file(st.plan_file, *st.sub, plan, model_name, gpu_name, nullptr, &file_model);
    std::optional<ModelConfig> model_read;
    std::optional<GpuSpec> gpu_read;
    try {
        model_read = st.plan_file.empty() ? load_plan_model(st.flags, dir) : plan_file_model_config(model_name, file_model, dir);
        gpu_read = load_gpu(gpu_name, dir);
        plan = ResolvedPlan(plan, *model_read).plan();  // defaults filled and validated once
        check_runnable(st, *model_read, plan);
    } catch (const InputError& e) {
        // A config key the runtime refuses (rope_scaling.rope_type, hidden_act): named with the model it came from.
        const std::string& key = e.subject();
        if (key.rfind("rope_scaling", 0) == 0 || key == "hidden_act" || key == "activation_function")
            throw InputError("--model " + model_name, e.what());
        throw blame_plan_file(st.plan_file, *st.sub, e);
    }
    const ModelConfig& model = *model_read;
    const GpuSpec& gpu = *gpu_read;
    RankFlags rf = st.ranks;
    if (st.sub && st.sub->count("--emulate-rank") > 0) rf.emulate_rank = st.emulate_rank;
    const RankChoice ranks = choose_ranks(rf, runtime::rendezvous_from_env(std::getenv), plan, st.dry_run);
    if (ranks.mode == RankMode::launcher) {
        if (const auto why = runtime::device_backend_unavailable_reason(); !why.empty()) {
            std::cerr << "preflight: error: run: " << why << "; use --dry-run --emulate-rank R to walk a rank without a GPU\n";
            return kExitNoDevice;
        }
        if (const int visible = runtime::device_count(); visible < rf.nproc_per_node) {
            std::cerr << "preflight: error: run: --nproc-per-node " << rf.nproc_per_node << " needs " << rf.nproc_per_node
                      << " GPUs on this node; " << visible << " visible (use --dry-run --emulate-rank R to walk a rank)\n";
            return kExitNoDevice;
        }
        return launch_local_ranks(rf.nproc_per_node);
    }
    runtime::RunOptions opt = run_options(st, model);
    if (opt.op_times && st.dry_run)
        throw InputError("--op-times", "times the ops of a device run; a dry run executes none (leave out --dry-run)");
    if (opt.op_times && opt.debug_sync)
        throw InputError("--op-times", "cannot time ops that --debug-sync (or PREFLIGHT_DEBUG_SYNC) synchronises after each: "
                                       "leave one of them out");
    opt.rank = ranks.rank;
    if (ranks.mode == RankMode::nccl_rank) {
        opt.comm_backend = "nccl";
        opt.rendezvous = ranks.launch;
        opt.device = ranks.launch->local_rank;
        const std::string tag = "rank " + std::to_string(ranks.rank) + ": ";
        opt.progress = [tag](const std::string& line) { std::cerr << "preflight run: " << tag << line << "\n"; };
    }
    if (st.dry_run) {
        (void)runtime::build_program(model, plan, opt.rank);  // an out-of-range --emulate-rank names the flag
        return finish_run(st, runtime::dry_run_report(model, gpu, plan, opt), ranks);
    }
    auto outcome = device_report(model, gpu, plan, opt);
    if (const int* code = std::get_if<int>(&outcome)) return *code;
    return finish_run(st, std::get<runtime::RunReport>(outcome), ranks);
}

// How a multi-GPU plan's ranks run: --emulate-rank R alone, or --nproc-per-node local processes.
void add_rank_options(CLI::App& sub, RunState& st) {
    sub.add_option("--emulate-rank", st.emulate_rank,
                   "Multi-GPU plans (--dp, --tp, --pp or --cp > 1, or a ZeRO stage): run rank R of the plan's dp x tp x "
                   "pp x cp ranks alone on this GPU (R = tp_rank + tp x (cp_rank + cp x (dp_rank + dp x pp_stage)): "
                   "tensor-parallel ranks adjacent, then context-parallel, then data-parallel, then pipeline stages, as "
                   "Megatron-LM numbers them), every collective a local op on the same buffers (a context-parallel "
                   "rank gathers its own K and V in place of its peers') and a pipeline stage receiving stand-in values (normal, std 0.02) from "
                   "its neighbours: its memory is what rank R of the real job holds (but for NCCL's own buffers, "
                   "measured and reported), its step time the measured compute plus the planner's predicted "
                   "communication and pipeline bubble; its loss is not the model's "
                   "(the other ranks' partial sums are missing; stages before the last report none). With --dry-run: "
                   "the rank walked (default 0)")
        ->transform(exact_integer());
    sub.add_option("--nproc-per-node", st.ranks.nproc_per_node,
                   "Start one process per rank on this node (N = --dp x --tp x --pp x --cp), each on GPU LOCAL_RANK, "
                   "collectives over NCCL; each rank writes --report with .rank<R> before the extension. On several "
                   "nodes launch `preflight run` with torchrun or srun instead: RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/"
                   "MASTER_PORT or SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID are read, the NCCL id handed over TCP "
                   "(PREFLIGHT_COMM_INIT=fs and PREFLIGHT_NCCL_ID_FILE: through a shared file)")
        ->transform(exact_integer());
}

}  // namespace

Command add_run_command(CLI::App& app) {
    auto st = std::make_shared<RunState>();
    auto* sub = app.add_subcommand(
        "run", "Execute a plan on one GPU: peak memory, timeline, step time, MFU/HFU next to the prediction");
    st->sub = sub;
    add_plan_flags(*sub, st->flags);
    add_from_flags(*sub, st->from, true);
    add_plan_file_option(*sub, st->plan_file);
    // `plan`'s plan: line names the framework it ranked for, so it pastes here as into `memory`.
    sub->add_option("--framework", st->ranked_for,
                    "The framework a pasted `plan:` line was ranked for; run predicts what the Preflight runtime "
                    "keeps and runs (--framework preflight-runtime's profile) whatever it names")
        ->check(CLI::IsMember(framework_names()));
    sub->add_option("--steps", st->steps, "Measured steps (median step time over these) (default 10; at most 100,000)")
        ->transform(exact_integer())
        ->check(CLI::Range(std::int64_t{1}, kMaxRunSteps));
    sub->add_option("--warmup", st->warmup, "Warm-up steps excluded from timing (default 2; at most 100,000)")
        ->transform(exact_integer())
        ->check(CLI::Range(std::int64_t{0}, kMaxRunSteps));
    sub->add_option("--seed", st->seed, "Seed for initialisation and synthetic tokens (default 1234; 0 to 2^64 - 1)")
        ->transform(exact_seed());
    sub->add_option("--lr", st->lr, "Learning rate (default 1e-3)")->check(finite_real());
    sub->add_flag("--dry-run", st->dry_run, "Walk the step program's allocations with no device");
    sub->add_flag("--debug-sync", st->debug_sync,
                  "Synchronise and check after every op so a failure names the op (index, kind, layer); also "
                  "PREFLIGHT_DEBUG_SYNC=1. Step times are then not representative");
    sub->add_flag("--no-cudnn", st->no_cudnn,
                  "bf16 flash attention with the runtime's own kernel instead of cuDNN's (also PREFLIGHT_NO_CUDNN=1); "
                  "it computes on the FP32 units, and the prediction times it so");
    sub->add_flag("--no-fused-epilogues", st->no_fused,
                  "bf16 GeLU models: run the activation and its gradient as kernels instead of cuBLASLt GEMM "
                  "epilogues (also PREFLIGHT_NO_FUSED_EPILOGUES=1)");
    sub->add_flag("--op-times", st->op_times,
                  "Device runs: one more step after the measured ones, timed op by op (a CUDA event before every op "
                  "and after the last): where the step's time goes, by op kind and by GEMM shape with its TFLOP/s, in "
                  "the table and under measured.op_times in the JSON. That step is not a measured step: its time, "
                  "loss and collectives stay out of the step figures");
    sub->add_option("--allocator", st->allocator,
                    "Device memory for the buffers: arena (default: every buffer's offset planned before the run, "
                    "one cudaMalloc of the planned size, which is the largest set of buffers alive at once: no "
                    "allocator slack) | pool (cudaMallocAsync from the device's default pool, as runs recorded before "
                    "2026-11-28: the pool keeps slack, which the prediction adds under full recompute)")
        ->check(CLI::IsMember({"arena", "pool"}));
    sub->add_option("--save-init", st->save_init,
                    "Write the initial parameters (fp32, flat) to FILE and their index to FILE.json, for "
                    "validation/pytorch/train.py --init-from (device runs)");
    add_rank_options(*sub, *st);
    sub->add_option("--report", st->report_file, "Also write the JSON report to this file (atomically)");
    sub->add_option("--format", st->flags.format, "table (default) | json")->check(CLI::IsMember({"table", "json"}));
    sub->footer(
        "Example:\n  preflight run --model gpt2 --seq 1024 --mbs 4 --steps 20 --format json\n"
        "  preflight run --model llama-3.2-1b --seq 2048 --recompute selective --dry-run\n"
        "  preflight run --model llama-3.2-1b --seq 2048 --mbs 4 --op-times   # where the step's time goes, op by op\n"
        "  preflight plan --model llama-3-8b --gpus 8 --gbs-tokens 4194304 --framework preflight-runtime \\\n"
        "    --emit preflight | \\\n"
        "    preflight run --plan - --emulate-rank 0      # rank 0 of the recommendation, on this GPU\n"
        "  preflight run --model gpt2 --dp 8 --zero 1 --nproc-per-node 8   # eight local ranks over NCCL\n"
        "  preflight run --model llama-3-8b --seq 4096 --tp 2 --sp --pp 2 --grad-acc 4 --emulate-rank 3 --dry-run\n"
        "                                                  # the last stage's tensor-parallel rank 1, walked\n"
        "  preflight run --model llama-3-8b --pp 4 --pp-schedule interleaved --vpp 2 --grad-acc 8 --dry-run\n"
        "                                                  # stage 0 of an interleaved pipeline, 2 chunks a stage\n"
        "  preflight run --model qwen2.5-7b --seq 16384 --cp 4 --tp 2 --sp --emulate-rank 3 --dry-run\n"
        "                                                  # a context-parallel rank (K and V all-gathered)\n"
        "  preflight run --model mixtral-8x7b --seq 4096 --tp 2 --sp --pp 8 --grad-acc 8 --emulate-rank 0 --dry-run\n"
        "                                                  # a Mixtral rank: every expert, each a 1/tp slice\n"
        "Exit codes: 0 ok; 1 allocation failed (report still written) or tracked peak off the prediction by > 1 %;\n"
        "2 bad input or a plan the runtime cannot run (fp16, dropout, a GPipe pipeline, rowwise fp8, cp without\n"
        "RoPE or beside ep, a step over its work bounds: docs/interface.md lists them); 3 no GPU or\n"
        "no CUDA build (nothing written), or a CUDA/cuBLASLt/NCCL failure during the run (report still written).");
    return {sub, [st, sub] {
                const FromApplied applied = apply_from(st->from, *sub, st->flags, std::nullopt, std::cerr);
                return blaming_from_file(applied, [&] { return run_command(*st); });
            }};
}

}  // namespace preflight::cli
