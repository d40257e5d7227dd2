// The executor: runs a step program on device 0. Every allocation goes through the
// same walk() and TrackingAllocator as the dry run, with the planned arena (arena.hpp: one
// cudaMalloc, each buffer at its planned offset) or the stream-ordered cudaMallocAsync pool
// (`--allocator pool`); no managed memory, no fallback: a failed allocation stops the run
// with phase, request and free memory.
#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <utility>
#include <string>
#include <vector>

#include "comm.hpp"
#include "device_runner.hpp"
#include "preflight/runtime/arena.hpp"
#include "preflight/runtime/errors.hpp"
#include "preflight/runtime/nvml_probe.hpp"
#include "preflight/runtime/runtime.hpp"
#include "preflight/runtime/walker.hpp"

namespace preflight::runtime {

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

namespace {

// The initial parameters for the PyTorch reference (RunOptions::save_init_path).
void save_initial_parameters(const Program& prog, const BufferTable& table, const std::string& path,
                             cudaStream_t stream) {
    const std::vector<double> w =
        download_buffer(prog, table, prog.master_weights != kNoBuffer ? prog.master_weights : prog.weights, stream);
    std::string bytes(w.size() * 4, '\0');
    for (std::size_t i = 0; i < w.size(); ++i) {
        const float f = static_cast<float>(w[i]);
        std::memcpy(&bytes[i * 4], &f, 4);
    }
    write_file_atomic(path, bytes);
    nlohmann::json idx = {{"model", prog.model.name}, {"dtype", "float32"}, {"elements", w.size()},
                          {"vocab", prog.dims.vocab}, {"tensors", nlohmann::json::array()}};
    for (const ParamSpec& ps : prog.params)
        idx["tensors"].push_back({{"name", ps.name}, {"offset", ps.offset}, {"rows", ps.rows}, {"cols", ps.cols}});
    idx["tied_embeddings"] = prog.model.tied_embeddings;
    write_file_atomic(path + ".json", idx.dump(1) + "\n");
}

// The planned arena's device memory: one cudaMalloc of the whole plan or, when the device has
// less, of as much as it gives (the run then fails, out of memory, at the first allocation whose
// slot lies past it, so the report names that op as a pool run's would).
class DeviceArena {
public:
    explicit DeviceArena(std::int64_t bytes) {
        if (take(bytes)) return;
        std::size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return;
        const auto free_now = static_cast<std::int64_t>(free_b);
        for (std::int64_t margin : {std::int64_t{64} << 20, std::int64_t{256} << 20, std::int64_t{1} << 30, free_now / 2})
            if (free_now > margin && take(free_now - margin)) return;
    }
    ~DeviceArena() {
        if (base) (void)cudaFree(base);  // after a device fault this fails too: the context goes with the process
        (void)cudaGetLastError();
    }
    DeviceArena(const DeviceArena&) = delete;
    DeviceArena& operator=(const DeviceArena&) = delete;
    void* base = nullptr;
    std::int64_t capacity_bytes = 0;

private:
    bool take(std::int64_t bytes) {
        const cudaError_t e = cudaMalloc(&base, static_cast<std::size_t>(std::max<std::int64_t>(bytes, 1)));
        if (e == cudaSuccess) {
            capacity_bytes = bytes;
            return true;
        }
        base = nullptr;
        if (classify_cuda_error(static_cast<int>(e)) != FailureKind::out_of_memory) cuda::cuda_fail(e, "cudaMalloc", __FILE__, __LINE__);
        (void)cudaGetLastError();
        return false;
    }
};

// The buffers' device memory (RunOptions::allocator): the planned arena, or the pool.
struct BufferMemory {
    BufferMemory(const Program& prog, const std::string& allocator, cudaStream_t stream, Measured& m) : pool(stream) {
        if (allocator != "arena" && allocator != "pool")
            throw std::invalid_argument("allocator '" + allocator + "': arena or pool");
        m.allocator = allocator;
        if (allocator == "pool") return;
        plan.emplace(plan_arena(prog));
        m.arena_bytes = plan->arena_bytes;
        m.arena_live_peak_bytes = plan->live_peak_bytes;
        arena.emplace(plan->arena_bytes);
        arena_backend.emplace(*plan, arena->base, arena->capacity_bytes);
    }
    AllocBackend& backend() { return arena_backend ? static_cast<AllocBackend&>(*arena_backend) : pool; }
    cuda::CudaBackend pool;  // also what a device fault poisons
    std::optional<ArenaPlan> plan;
    std::optional<DeviceArena> arena;
    std::optional<ArenaBackend> arena_backend;
};

// Device-used memory (total - free) now, or -1.
std::int64_t device_used_now() {
    std::size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    return static_cast<std::int64_t>(t - f);
}

// The driver-side samples of one run, baseline subtracted as they are taken.
struct DriverSampler {
    DriverMemory& out;
    NvmlProbe& nvml;
    std::int64_t baseline = 0, nvml_baseline = -1;
    std::int64_t sample() {  // device used - baseline; updates the peaks
        const std::int64_t used = device_used_now();
        if (used < 0) return -1;
        const std::int64_t v = used - baseline;
        out.used_peak_bytes = std::max(out.used_peak_bytes.value_or(v), v);
        ++out.samples;
        if (nvml_baseline >= 0)
            if (const auto n = nvml.used_bytes())
                out.nvml_used_peak_bytes = std::max(out.nvml_used_peak_bytes.value_or(*n - nvml_baseline), *n - nvml_baseline);
        return v;
    }
};

// PCI bus id of a device, "" when the runtime cannot say (needs no context).
std::string pci_bus_id(int device) {
    char pci[32] = {};
    if (cudaDeviceGetPCIBusId(pci, sizeof pci, device) == cudaSuccess) return pci;
    (void)cudaGetLastError();
    return {};
}

// Creates the primary context and fixes the baseline every driver sample subtracts: the
// memory in use before the context when NVML answers (the context is then counted), else
// cudaMemGetInfo right after it. Returns the device-used memory after the context.
// NVML's "used" and cudaMemGetInfo's total - free are different books: NVML's counts the
// driver's reserved memory (503,316,480 B on an H100, 644,939,776 B on an H200, driver
// 580.159.04), which cudaMemGetInfo leaves out of its total and its used. A baseline from NVML
// made every sample that much low (on the H200 the context came out negative). So the context
// is NVML's own before/after difference, and the baseline is in cudaMemGetInfo's book: used
// after the context minus the context.
std::int64_t create_context(DriverSampler& sampler, const std::optional<std::int64_t>& nvml_before, int device) {
    DriverMemory& dm = sampler.out;
    PF_CUDA_CHECK(cudaSetDevice(device));
    PF_CUDA_CHECK(cudaFree(nullptr));  // creates the primary context
    const std::int64_t used_after_context = device_used_now();
    const std::optional<std::int64_t> nvml_after = nvml_before ? sampler.nvml.used_bytes() : std::nullopt;
    if (nvml_before && nvml_after && used_after_context >= 0) {
        const std::int64_t context_bytes = *nvml_after - *nvml_before;
        sampler.baseline = used_after_context - context_bytes;
        sampler.nvml_baseline = *nvml_before;
        dm.baseline_source = "nvml-before-context";
        dm.context_bytes = context_bytes;
    } else {
        sampler.baseline = used_after_context;  // the context itself is then not counted
        dm.baseline_source = "cudaMemGetInfo-after-context";
    }
    dm.baseline_bytes = sampler.baseline;
    return used_after_context;
}

DeviceInfo query_device(int device) {
    cudaDeviceProp prop{};
    PF_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    int driver = 0, rt = 0;
    PF_CUDA_CHECK(cudaDriverGetVersion(&driver));
    PF_CUDA_CHECK(cudaRuntimeGetVersion(&rt));
    auto ver = [](int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); };
    return DeviceInfo{prop.name, ver(driver), ver(rt), static_cast<std::int64_t>(prop.totalGlobalMem),
                      prop.major * 10 + prop.minor};
}

// The pinned host word the loss sum is copied into and the events that time a step.
struct StepTiming {
    float* host_loss = nullptr;
    cudaEvent_t start = nullptr, stop = nullptr;
    StepTiming() {
        PF_CUDA_CHECK(cudaMallocHost(&host_loss, sizeof(float)));
        PF_CUDA_CHECK(cudaEventCreate(&start));
        PF_CUDA_CHECK(cudaEventCreate(&stop));
    }
    ~StepTiming() {
        cudaEventDestroy(start);
        cudaEventDestroy(stop);
        cudaFreeHost(host_loss);
    }
    StepTiming(const StepTiming&) = delete;
    StepTiming& operator=(const StepTiming&) = delete;
};

// The rank's communicators by group (none without collectives) and, for an emulated rank, a
// world-size-1 NCCL communicator kept up for the run so that the driver's figures hold NCCL's own
// memory. With NCCL, the rendezvous' world communicator serves a group that spans the world, and
// is split into the others (global rank = tp_rank + tp * (dp_rank + dp * pp_rank), program.hpp).
struct Comms {
    std::unique_ptr<cuda::NcclComm> world, world1;
    std::vector<std::unique_ptr<cuda::DeviceComm>> own;
    std::array<cuda::DeviceComm*, kCommGroups> by_group{};
    bool any() const {
        return std::any_of(by_group.begin(), by_group.end(), [](const cuda::DeviceComm* c) { return c != nullptr; });
    }
};

// Whether the rank takes part in collectives of kind g (the embedding group: a tied word
// embedding's first and last stage only).
bool member(const Program& P, CommGroup g) {
    if (g != CommGroup::embedding) return true;
    return P.model.tied_embeddings && P.dims.pp > 1 && (P.dims.first_stage || P.dims.last_stage);
}

void make_nccl_comms(const Program& prog, const RunOptions& opt, Comms& c) {
    if (!opt.rendezvous) throw std::logic_error("the nccl backend needs the ranks' rendezvous");
    const std::int64_t world = prog.plan.gpus();
    if (opt.rendezvous->world_size != world)
        throw std::invalid_argument("the rendezvous has " + std::to_string(opt.rendezvous->world_size) +
                                    " ranks but the plan has " + std::to_string(world) + " (dp x tp x pp x cp)");
    c.world = std::make_unique<cuda::NcclComm>(*opt.rendezvous);
    for (int k = 0; k < kCommGroups; ++k) {  // every rank splits for the same kinds in the same order
        const auto g = static_cast<CommGroup>(k);
        if (prog.group_size(g) == world && member(prog, g)) {
            c.by_group[static_cast<std::size_t>(k)] = c.world.get();
            continue;
        }
        if (g == CommGroup::embedding && !(prog.model.tied_embeddings && prog.plan.pp > 1)) continue;
        if (g == CommGroup::cp && prog.dims.cp <= 1) continue;
        if ((g == CommGroup::ep || g == CommGroup::edp) && prog.dims.ep <= 1) continue;  // expert parallelism only
        const int color = member(prog, g) ? static_cast<int>(prog.group_key(g)) : cuda::NcclComm::kNoColor;
        std::unique_ptr<cuda::NcclComm> part = c.world->split(color, static_cast<int>(prog.group_rank(g)));
        c.by_group[static_cast<std::size_t>(k)] = part.get();
        if (part) c.own.push_back(std::move(part));
    }
}

// The device memory NCCL took since `before` (device_used_now) once `comm` has run one
// collective, so that it has set up what a first collective needs.
std::int64_t nccl_bytes_since(std::int64_t before, cuda::NcclComm& comm, cudaStream_t stream) {
    void* probe = nullptr;
    PF_CUDA_CHECK(cudaMalloc(&probe, 256));
    comm.all_reduce(probe, 64, DType::f32, ReduceOp::sum, stream);
    PF_CUDA_CHECK(cudaStreamSynchronize(stream));
    PF_CUDA_CHECK(cudaFree(probe));
    return device_used_now() - before;
}

Comms make_comms(const Program& prog, const RunOptions& opt, ParallelInfo& info, cudaStream_t stream) {
    using namespace cuda;
    Comms c;
    if (!has_collectives(prog)) return c;
    const NcclLibrary& nccl = nccl_library();
    info.nccl = nccl.version_or_error;
    if (opt.comm_backend == "nccl") {
        const std::int64_t before = device_used_now();
        make_nccl_comms(prog, opt, c);
        info.backend = "nccl";
        // One rank: every group is the world communicator, NCCL's whole footprint at world size 1,
        // the same figure an emulated rank measures (several ranks: NCCL's buffers grow with the
        // peers and are not measured apart).
        if (prog.plan.gpus() == 1) info.nccl_world1_bytes = nccl_bytes_since(before, *c.world, stream);
        return c;
    }
    info.backend = "emulated";
    for (int k = 0; k < kCommGroups; ++k) {
        const auto g = static_cast<CommGroup>(k);
        if (!member(prog, g)) continue;
        c.own.push_back(std::make_unique<EmulatedComm>(prog.group_rank(g), prog.group_size(g)));
        c.by_group[static_cast<std::size_t>(k)] = c.own.back().get();
    }
    if (!nccl.ok) return c;
    const std::int64_t before = device_used_now();
    c.world1 = std::make_unique<NcclComm>(Rendezvous{});
    info.nccl_world1_bytes = nccl_bytes_since(before, *c.world1, stream);
    return c;
}

// What a measured run's walk over set-up, steps and teardown works with.
struct DeviceRun {
    const Program& prog;
    const RunOptions& opt;
    RunReport& r;
    TrackingAllocator& alloc;
    BufferTable& table;
    cuda::DeviceRunner& runner;
    DriverSampler& sampler;
    cudaStream_t stream;
    cudaMemPool_t pool;
    StepTiming& timing;
    int step_now = 0;  // 1-based step in flight (0: set-up / teardown)
    std::vector<cuda::DeviceRunner::CommTimes> comm_steps;  // measured steps' collectives
    bool has_comm = false;
};

// Step i (0-based, warm-up steps first): walks the step, times it, reads its loss and samples
// the driver's used memory; step 1 also samples it just before the predicted peak op.
void run_step(DeviceRun& run, int i, int record_at, std::int64_t peak_op) {
    const Program& prog = run.prog;
    DriverMemory* dm = &run.r.measured.driver;
    DriverSampler* sampler = &run.sampler;
    run.step_now = i + 1;
    run.runner.set_step(i + 1);
    run.alloc.set_recording(i == record_at);
    if (i == 0 && peak_op >= 0) {
        const Op* at = &prog.step[static_cast<std::size_t>(peak_op)];
        dm->peak_op = describe(prog, *at);
        run.runner.sample_before(at, [dm, sampler] { dm->at_peak_op_bytes = sampler->sample(); });
    } else {
        run.runner.sample_before(nullptr, {});
    }
    PF_CUDA_CHECK(cudaEventRecord(run.timing.start, run.stream));
    walk(prog, prog.step, run.alloc, run.table, &run.runner, "step", i + 1);
    try {
        PF_CUDA_CHECK(cudaEventRecord(run.timing.stop, run.stream));
        PF_CUDA_CHECK(cudaMemcpyAsync(run.timing.host_loss, run.runner.loss_sum(run.table), sizeof(float),
                                      cudaMemcpyDeviceToHost, run.stream));
        PF_CUDA_CHECK(cudaEventSynchronize(run.timing.stop));
        PF_CUDA_CHECK(cudaStreamSynchronize(run.stream));
    } catch (const DeviceError& e) {
        // An asynchronous failure surfaced at the end of the step: name the step's last op.
        throw OpError(locate(prog, prog.step, prog.step.size() - 1, "step", i + 1, false), e.kind, e.code, e.what());
    }
    run.alloc.set_recording(false);
    float ms = 0;
    PF_CUDA_CHECK(cudaEventElapsedTime(&ms, run.timing.start, run.timing.stop));
    const double loss =
        static_cast<double>(*run.timing.host_loss) / static_cast<double>(prog.dims.rows * prog.dims.grad_acc);
    Measured& m = run.r.measured;
    const bool has_loss = prog.dims.last_stage;  // pipeline: only the last stage computes the loss
    if (has_loss) m.losses.push_back(loss);
    if (i >= run.opt.warmup) m.step_times_s.push_back(ms / 1e3);
    if (i >= run.opt.warmup && run.has_comm) run.comm_steps.push_back(run.runner.comm_times());
    const std::int64_t used = sampler->sample();
    if (i == 0) dm->after_warmup_bytes = used;
    if (run.opt.progress) {
        char line[200];
        char loss_text[40] = "loss N/A (not the last stage)";
        if (has_loss) std::snprintf(loss_text, sizeof loss_text, "loss %.4f", loss);
        std::snprintf(line, sizeof line, "step %d/%d%s: %s, %.1f ms, %.0f tokens/s", i + 1, run.opt.warmup + run.opt.steps,
                      i < run.opt.warmup ? " (warm-up)" : "", loss_text, ms,
                      static_cast<double>(run.r.plan.global_batch_tokens()) / (ms / 1e3));
        run.opt.progress(line);
    }
    if (has_loss && !std::isfinite(loss)) throw std::runtime_error("loss is not finite at step " + std::to_string(i + 1));
}

// `--op-times`: step i (after the measured ones) walked with an event before every op and one
// after the last; not a measured step (its time, loss and collectives are not recorded as one).
void time_ops_step(DeviceRun& run, int i) {
    run.step_now = i + 1;
    run.runner.set_step(i + 1);
    run.runner.sample_before(nullptr, {});
    cuda::OpTimer timer(run.stream);
    run.runner.set_op_timer(&timer);
    try {
        walk(run.prog, run.prog.step, run.alloc, run.table, &run.runner, "step", i + 1);
        timer.finish();
        PF_CUDA_CHECK(cudaStreamSynchronize(run.stream));
    } catch (...) {
        run.runner.set_op_timer(nullptr);
        throw;
    }
    run.runner.set_op_timer(nullptr);
    run.r.measured.op_times = aggregate_op_times(timer.collect());
    if (run.opt.progress) {
        char line[160];
        std::snprintf(line, sizeof line, "step %d: timed op by op (%lld ops, %.1f ms; not a measured step)", i + 1,
                      static_cast<long long>(run.r.measured.op_times->ops), run.r.measured.op_times->total_s * 1e3);
        run.opt.progress(line);
    }
}

// Set-up, the warm-up and measured steps, teardown. The pool's high-water marks are reset
// after set-up, so they cover the steps.
void run_program(DeviceRun& run) {
    const Program& prog = run.prog;
    walk(prog, prog.setup, run.alloc, run.table, &run.runner, "set-up");
    PF_CUDA_CHECK(cudaStreamSynchronize(run.stream));
    run.r.measured.driver.after_setup_bytes = run.sampler.sample();
    if (!run.opt.save_init_path.empty()) save_initial_parameters(prog, run.table, run.opt.save_init_path, run.stream);
    std::uint64_t zero = 0;
    PF_CUDA_CHECK(cudaMemPoolSetAttribute(run.pool, cudaMemPoolAttrUsedMemHigh, &zero));
    PF_CUDA_CHECK(cudaMemPoolSetAttribute(run.pool, cudaMemPoolAttrReservedMemHigh, &zero));
    // The timeline is recorded on a warm-up step when there is one (its host-side labelling
    // would otherwise perturb a timed step); so is the synchronised sample of the driver's
    // used memory at the predicted peak op (step 1 always).
    const int record_at = run.opt.timeline ? std::max(0, run.opt.warmup - 1) : -1;
    const std::int64_t peak_op = peak_step_op(prog);
    for (int i = 0; i < run.opt.warmup + run.opt.steps; ++i) run_step(run, i, record_at, peak_op);
    if (run.opt.op_times) time_ops_step(run, run.opt.warmup + run.opt.steps);
    run.step_now = 0;
    walk(prog, prog.teardown, run.alloc, run.table, &run.runner, "teardown");
    PF_CUDA_CHECK(cudaStreamSynchronize(run.stream));
}

// Status and failure of a run stopped by the exception being handled (call inside a catch);
// a device fault poisons the backend (every later call on the device would fail).
void record_failure(RunReport& r, int step_now, cuda::CudaBackend& backend) {
    FailureInfo f;
    r.status = "error";
    try {
        throw;
    } catch (const AllocationError& e) {
        r.status = "allocation-failed";
        f.kind = std::string(to_string(FailureKind::out_of_memory));
        f.where = e.where;
        f.buffer = e.buffer;
        f.category = std::string(to_string(e.category));
        f.requested_bytes = e.requested_bytes;
        f.free_bytes = e.free_bytes;
        f.in_use_bytes = e.in_use_bytes;
        f.message = e.what();
    } catch (const OpError& e) {
        f.kind = std::string(to_string(e.kind));
        f.op = e.at;
        f.code = e.code;
        f.where = e.at.label;
        f.message = e.what();
        if (e.kind == FailureKind::device_fault) backend.poison();
    } catch (const DeviceError& e) {
        f.kind = std::string(to_string(e.kind));
        f.code = e.code;
        f.where = step_now > 0 ? "step " + std::to_string(step_now) : "set-up / teardown";
        f.message = e.what();
        if (e.kind == FailureKind::device_fault) backend.poison();
    } catch (const std::exception& e) {
        f.kind = std::string(to_string(FailureKind::other));
        f.message = e.what();
    }
    r.failure = std::move(f);
}

// The collectives' medians over the measured steps and, for an emulated rank, its step with the
// planner's communication added.
void collect_comm(RunReport& r, const std::vector<cuda::DeviceRunner::CommTimes>& steps) {
    ParallelInfo& p = r.parallel;
    if (steps.empty()) return;
    std::vector<double> ar, rs, ag;
    for (const auto& c : steps) {
        ar.push_back(c.all_reduce_s);
        rs.push_back(c.reduce_scatter_s);
        ag.push_back(c.all_gather_s);
    }
    p.all_reduce_s = cuda::median(ar);
    p.reduce_scatter_s = cuda::median(rs);
    p.all_gather_s = cuda::median(ag);
    p.collectives_per_step = steps.back().count;
    p.collective_bytes_per_step = static_cast<std::int64_t>(steps.back().bytes);
    if (p.backend == "emulated" && r.measured.step_time_s && r.predicted.step_time_s)
        p.step_time_with_predicted_communication_s = *r.measured.step_time_s + r.predicted.emulated_communication_s();
}

// The tracked and pool peaks, the driver's figure and the step-time figures of a finished
// (or stopped) run.
void collect_measurements(RunReport& r, const TrackingAllocator& alloc, cudaMemPool_t pool) {
    Measured& m = r.measured;
    DriverMemory& dm = m.driver;
    m.tracked_peak_bytes = alloc.peak_bytes();
    m.peak_breakdown = alloc.peak_breakdown();
    m.peak_where = alloc.peak_where();
    r.timeline = alloc.timeline();
    std::uint64_t used_high = 0, reserved_high = 0;
    // The pool's figures only when the buffers came from it: under the arena they would read 0
    // (nothing was drawn from the pool), a number that looks measured but says nothing.
    if (m.allocator != "pool") pool = nullptr;
    if (pool && cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &used_high) == cudaSuccess) {
        m.pool_peak_bytes = static_cast<std::int64_t>(used_high);
        dm.pool_used_peak_bytes = static_cast<std::int64_t>(used_high);
    }
    if (pool && cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &reserved_high) == cudaSuccess)
        dm.pool_reserved_peak_bytes = static_cast<std::int64_t>(reserved_high);
    (void)cudaGetLastError();
    // The driver's figure: largest sampled device-used memory over the baseline.
    m.device_used_peak_bytes = dm.used_peak_bytes;
    if (!m.step_times_s.empty()) m.step_time_s = cuda::median(m.step_times_s);
    fill_measured_throughput(r);
}

}  // namespace

RunReport run_on_device(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan_in, const RunOptions& opt) {
    using namespace cuda;
    RunReport r = report_for("device", model, gpu, plan_in, opt);
    Program prog = build_program(model, r.plan, opt.rank, opt.comm_backend == "emulated");
    prog.hyper = opt.hyper;
    use_model_constants(prog);
    r.measured.warmup_steps = opt.warmup;
    r.measured.debug_sync = opt.debug_sync;
    DriverMemory& dm = r.measured.driver;

    // NVML first (its used memory before this process creates a context is the baseline),
    // then the context, then the libraries: each step's cost measured by the driver.
    NvmlProbe nvml(pci_bus_id(opt.device));
    dm.nvml = nvml.available() ? "ok" : nvml.why();
    DriverSampler sampler{dm, nvml};
    const std::int64_t used_after_context = create_context(sampler, nvml.used_bytes(), opt.device);
    r.device = query_device(opt.device);
    // A GPU this build has no kernel image for, or fp8 without fp8 tensor cores: said before the first op.
    if (const std::string why = device_support_problem(r.device->compute_capability, PREFLIGHT_CUDA_ARCHS, prog.fp8);
        !why.empty())
        throw DeviceError(FailureKind::no_device, 0, "cudaGetDeviceProperties", why);
    cudaStream_t stream = nullptr;
    PF_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaMemPool_t pool = nullptr;
    PF_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, opt.device));
    std::uint64_t threshold = std::numeric_limits<std::uint64_t>::max();
    PF_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    Gemm gemm(prog.act == DType::f32);
    AttentionEngine attention(prog, opt.cudnn_attention);
    r.measured.attention_backend = attention.backend();
    if (!attention.note().empty() && opt.progress) opt.progress(attention.note());
    const Comms comms = make_comms(prog, opt, r.parallel, stream);  // NCCL's memory counts with the libraries'
    std::size_t free_b = 0, total_b = 0;
    PF_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const std::int64_t used_with_libraries = static_cast<std::int64_t>(total_b - free_b);
    r.measured.overhead_bytes = used_with_libraries - sampler.baseline;  // context + libraries
    dm.libraries_bytes = used_with_libraries - used_after_context;
    sampler.sample();

    const auto t0 = std::chrono::steady_clock::now();
    BufferMemory memory(prog, opt.allocator, stream, r.measured);
    TrackingAllocator alloc(memory.backend(), [t0] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
    BufferTable table;
    DeviceRunner runner(prog, stream, opt.seed, gemm, opt.debug_sync);
    runner.set_attention(&attention);
    runner.set_fuse_gelu(opt.fuse_epilogues);
    if (comms.any()) runner.set_comm(comms.by_group);
    {
        StepTiming timing;
        DeviceRun run{prog, opt, r, alloc, table, runner, sampler, stream, pool, timing, 0, {}, comms.any()};
        try {
            run_program(run);
        } catch (const std::exception&) {
            record_failure(r, run.step_now, memory.pool);
        }
        if (r.failure && r.failure->kind != to_string(FailureKind::device_fault)) {  // release what the failed run holds
            try {
                release_all_buffers(table, alloc, stream);
            } catch (const std::exception&) {
                // A second failure while cleaning up: the first one is what the report names.
            }
        }
        collect_measurements(r, alloc, pool);
        collect_comm(r, run.comm_steps);
    }
    cudaMemPoolTrimTo(pool, 0);
    cudaStreamDestroy(stream);
    (void)cudaGetLastError();
    return r;
}

}  // namespace preflight::runtime
