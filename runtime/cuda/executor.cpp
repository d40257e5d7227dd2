// The executor: runs a step program on device 0. Every allocation goes through the
// same walk() and TrackingAllocator as the dry run, with a stream-ordered
// cudaMallocAsync backend (no managed memory, no fallback: a failed allocation stops
// the run with phase, request and free memory).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "device_runner.hpp"
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

}  // namespace

RunReport run_on_device(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan_in, const RunOptions& opt) {
    using namespace cuda;
    RunReport r = report_for("device", model, gpu, plan_in, opt);
    const Plan plan = r.plan;
    Program prog = build_program(model, plan);
    prog.hyper = opt.hyper;
    use_model_rope(prog);
    r.measured.warmup_steps = opt.warmup;
    r.measured.debug_sync = opt.debug_sync;
    DriverMemory& dm = r.measured.driver;

    // NVML first (its used memory before this process creates a context is the baseline),
    // then the context, then the libraries: each step's cost measured by the driver.
    char pci[32] = {};
    const bool have_pci = cudaDeviceGetPCIBusId(pci, sizeof pci, 0) == cudaSuccess;  // no context needed
    if (!have_pci) (void)cudaGetLastError();
    NvmlProbe nvml(have_pci ? std::string(pci) : std::string());
    dm.nvml = nvml.available() ? "ok" : nvml.why();
    const std::optional<std::int64_t> nvml_before = nvml.used_bytes();

    PF_CUDA_CHECK(cudaSetDevice(0));
    PF_CUDA_CHECK(cudaFree(nullptr));  // creates the primary context
    const std::int64_t used_after_context = device_used_now();
    DriverSampler sampler{dm, nvml};
    if (nvml_before) {
        sampler.baseline = *nvml_before;
        sampler.nvml_baseline = *nvml_before;
        dm.baseline_source = "nvml-before-context";
        dm.context_bytes = used_after_context - *nvml_before;
    } else {
        sampler.baseline = used_after_context;  // the context itself is then not counted
        dm.baseline_source = "cudaMemGetInfo-after-context";
    }
    dm.baseline_bytes = sampler.baseline;

    cudaDeviceProp prop{};
    PF_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    int driver = 0, rt = 0;
    PF_CUDA_CHECK(cudaDriverGetVersion(&driver));
    PF_CUDA_CHECK(cudaRuntimeGetVersion(&rt));
    auto ver = [](int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); };
    r.device = DeviceInfo{prop.name, ver(driver), ver(rt), static_cast<std::int64_t>(prop.totalGlobalMem),
                          prop.major * 10 + prop.minor};
    cudaStream_t stream = nullptr;
    PF_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaMemPool_t pool = nullptr;
    PF_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
    std::uint64_t threshold = std::numeric_limits<std::uint64_t>::max();
    PF_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    Gemm gemm(prog.act == DType::f32);
    AttentionEngine attention(prog, opt.cudnn_attention);
    r.measured.attention_backend = attention.backend();
    if (!attention.note().empty() && opt.progress) opt.progress(attention.note());
    std::size_t free_b = 0, total_b = 0;
    PF_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    r.measured.overhead_bytes = static_cast<std::int64_t>(total_b - free_b) - sampler.baseline;  // context + libraries
    dm.libraries_bytes = static_cast<std::int64_t>(total_b - free_b) - used_after_context;
    sampler.sample();
    std::int64_t min_free = static_cast<std::int64_t>(free_b);

    const auto t0 = std::chrono::steady_clock::now();
    CudaBackend backend(stream);
    TrackingAllocator alloc(backend, [t0] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
    BufferTable table;
    DeviceRunner runner(prog, stream, opt.seed, gemm, opt.debug_sync);
    runner.set_attention(&attention);
    runner.set_fuse_gelu(opt.fuse_epilogues);
    const std::int64_t peak_op = peak_step_op(prog);
    float* host_loss = nullptr;
    PF_CUDA_CHECK(cudaMallocHost(&host_loss, sizeof(float)));
    cudaEvent_t start = nullptr, stop = nullptr;
    PF_CUDA_CHECK(cudaEventCreate(&start));
    PF_CUDA_CHECK(cudaEventCreate(&stop));
    const double tokens_per_step = static_cast<double>(plan.global_batch_tokens());
    int step_now = 0;  // 1-based step in flight (0: set-up / teardown)
    try {
        walk(prog, prog.setup, alloc, table, &runner, "set-up");
        PF_CUDA_CHECK(cudaStreamSynchronize(stream));
        dm.after_setup_bytes = sampler.sample();
        if (!opt.save_init_path.empty()) save_initial_parameters(prog, table, opt.save_init_path, stream);
        std::uint64_t zero = 0;
        PF_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
        PF_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero));
        const int total_steps = opt.warmup + opt.steps;
        // The timeline is recorded on a warm-up step when there is one (its host-side
        // labelling would otherwise perturb a timed step); so is the synchronised sample
        // of the driver's used memory at the predicted peak op (step 1 always).
        const int record_at = opt.timeline ? std::max(0, opt.warmup - 1) : -1;
        for (int i = 0; i < total_steps; ++i) {
            step_now = i + 1;
            runner.set_step(i + 1);
            alloc.set_recording(i == record_at);
            if (i == 0 && peak_op >= 0) {
                const Op* at = &prog.step[static_cast<std::size_t>(peak_op)];
                dm.peak_op = describe(prog, *at);
                runner.sample_before(at, [&] { dm.at_peak_op_bytes = sampler.sample(); });
            } else {
                runner.sample_before(nullptr, {});
            }
            PF_CUDA_CHECK(cudaEventRecord(start, stream));
            walk(prog, prog.step, alloc, table, &runner, "step", i + 1);
            try {
                PF_CUDA_CHECK(cudaEventRecord(stop, stream));
                PF_CUDA_CHECK(cudaMemcpyAsync(host_loss, runner.loss_sum(table), sizeof(float), cudaMemcpyDeviceToHost, stream));
                PF_CUDA_CHECK(cudaEventSynchronize(stop));
                PF_CUDA_CHECK(cudaStreamSynchronize(stream));
            } catch (const DeviceError& e) {
                // An asynchronous failure surfaced at the end of the step: name the step's last op.
                throw OpError(locate(prog, prog.step, prog.step.size() - 1, "step", i + 1, false), e.kind, e.code, e.what());
            }
            alloc.set_recording(false);
            float ms = 0;
            PF_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
            const double loss = static_cast<double>(*host_loss) / static_cast<double>(prog.dims.rows * prog.dims.grad_acc);
            r.measured.losses.push_back(loss);
            if (i >= opt.warmup) r.measured.step_times_s.push_back(ms / 1e3);
            const std::int64_t used = sampler.sample();
            if (i == 0) dm.after_warmup_bytes = used;
            std::size_t f = 0, tt = 0;
            if (cudaMemGetInfo(&f, &tt) == cudaSuccess) min_free = std::min(min_free, static_cast<std::int64_t>(f));
            if (opt.progress) {
                char line[200];
                std::snprintf(line, sizeof line, "step %d/%d%s: loss %.4f, %.1f ms, %.0f tokens/s", i + 1, total_steps,
                              i < opt.warmup ? " (warm-up)" : "", loss, ms, tokens_per_step / (ms / 1e3));
                opt.progress(line);
            }
            if (!std::isfinite(loss)) throw std::runtime_error("loss is not finite at step " + std::to_string(i + 1));
        }
        step_now = 0;
        walk(prog, prog.teardown, alloc, table, &runner, "teardown");
        PF_CUDA_CHECK(cudaStreamSynchronize(stream));
    } catch (const AllocationError& e) {
        r.status = "allocation-failed";
        r.failure = FailureInfo{};
        r.failure->kind = std::string(to_string(FailureKind::out_of_memory));
        r.failure->where = e.where;
        r.failure->buffer = e.buffer;
        r.failure->category = std::string(to_string(e.category));
        r.failure->requested_bytes = e.requested_bytes;
        r.failure->free_bytes = e.free_bytes;
        r.failure->in_use_bytes = e.in_use_bytes;
        r.failure->message = e.what();
    } catch (const OpError& e) {
        r.status = "error";
        r.failure = FailureInfo{};
        r.failure->kind = std::string(to_string(e.kind));
        r.failure->op = e.at;
        r.failure->code = e.code;
        r.failure->where = e.at.label;
        r.failure->message = e.what();
        if (e.kind == FailureKind::device_fault) backend.poison();
    } catch (const DeviceError& e) {
        r.status = "error";
        r.failure = FailureInfo{};
        r.failure->kind = std::string(to_string(e.kind));
        r.failure->code = e.code;
        r.failure->where = step_now > 0 ? "step " + std::to_string(step_now) : "set-up / teardown";
        r.failure->message = e.what();
        if (e.kind == FailureKind::device_fault) backend.poison();
    } catch (const std::exception& e) {
        r.status = "error";
        r.failure = FailureInfo{};
        r.failure->kind = std::string(to_string(FailureKind::other));
        r.failure->message = e.what();
    }
    if (r.failure && r.failure->kind != to_string(FailureKind::device_fault)) {  // release what the failed run holds
        try {
            cudaStreamSynchronize(stream);
            for (void*& p : table)
                if (p) {
                    alloc.release(p);
                    p = nullptr;
                }
            cudaStreamSynchronize(stream);
        } catch (const std::exception&) {
            // A second failure while cleaning up: the first one is what the report names.
        }
    }
    r.measured.tracked_peak_bytes = alloc.peak_bytes();
    r.measured.peak_breakdown = alloc.peak_breakdown();
    r.measured.peak_where = alloc.peak_where();
    r.timeline = alloc.timeline();
    std::uint64_t used_high = 0, reserved_high = 0;
    if (cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &used_high) == cudaSuccess) {
        r.measured.pool_peak_bytes = static_cast<std::int64_t>(used_high);
        dm.pool_used_peak_bytes = static_cast<std::int64_t>(used_high);
    }
    if (cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &reserved_high) == cudaSuccess)
        dm.pool_reserved_peak_bytes = static_cast<std::int64_t>(reserved_high);
    (void)cudaGetLastError();
    // The driver's figure: largest sampled device-used memory over the baseline.
    r.measured.device_used_peak_bytes = dm.used_peak_bytes;
    (void)min_free;
    if (!r.measured.step_times_s.empty()) r.measured.step_time_s = median(r.measured.step_times_s);
    fill_measured_throughput(r);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaFreeHost(host_loss);
    cudaMemPoolTrimTo(pool, 0);
    cudaStreamDestroy(stream);
    (void)cudaGetLastError();
    return r;
}

}  // namespace preflight::runtime
