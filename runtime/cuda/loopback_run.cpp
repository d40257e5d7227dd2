// The loopback backend end to end (device.hpp run_ranks_on_device): every rank of a plan (dp x
// tp) as a thread of this process on one GPU, each with its own streams, cuBLASLt handle,
// attention engine and allocations, their collectives exchanging through device memory
// (comm.hpp LoopbackGroup: one per data-parallel rank over its tensor-parallel peers, one per
// tensor-parallel rank over its data-parallel peers). For numerical parity on a single GPU;
// memory is not measured here (the ranks share the device).
#include <thread>

#include "comm.hpp"
#include "device_runner.hpp"
#include "preflight/runtime/host_runner.hpp"

namespace preflight::runtime {

namespace {

// One rank's run: set-up, `steps` steps, its state read back into `full`, teardown.
void run_rank(const Program& prog, const RunOptions& opt, cuda::DeviceComm* dp, cuda::DeviceComm* tp, int steps,
              RankResult& out, std::vector<double>& full, std::mutex& assembly) {
    using namespace cuda;
    PF_CUDA_CHECK(cudaSetDevice(0));
    cudaStream_t stream = nullptr;
    PF_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    Gemm gemm(prog.act == DType::f32);
    AttentionEngine attention(prog, opt.cudnn_attention);
    CudaBackend backend(stream);
    TrackingAllocator alloc(backend);
    BufferTable table;
    {
        DeviceRunner runner(prog, stream, opt.seed, gemm, opt.debug_sync);
        runner.set_attention(&attention);
        runner.set_fuse_gelu(opt.fuse_epilogues);
        if (dp || tp) runner.set_comm(dp, tp);
        try {
            walk(prog, prog.setup, alloc, table, &runner, "set-up");
            for (int s = 1; s <= steps; ++s) {
                runner.set_step(s);
                walk(prog, prog.step, alloc, table, &runner, "step", s);
                float loss_sum = 0;
                PF_CUDA_CHECK(cudaMemcpyAsync(&loss_sum, runner.loss_sum(table), sizeof(float), cudaMemcpyDeviceToHost, stream));
                PF_CUDA_CHECK(cudaStreamSynchronize(stream));
                out.losses.push_back(static_cast<double>(loss_sum) / static_cast<double>(prog.dims.rows * prog.dims.grad_acc));
            }
            const BufferId state = prog.master_weights != kNoBuffer ? prog.master_weights : prog.weights;
            const std::vector<double> mine = download_buffer(prog, table, state, stream);
            {
                std::lock_guard<std::mutex> lock(assembly);
                assemble_parameters(prog, mine, full);
            }
            walk(prog, prog.teardown, alloc, table, &runner, "teardown");
            PF_CUDA_CHECK(cudaStreamSynchronize(stream));
        } catch (...) {
            release_all_buffers(table, alloc, stream);
            cudaStreamDestroy(stream);
            throw;
        }
    }
    cudaStreamDestroy(stream);
}

}  // namespace

std::vector<RankResult> run_ranks_on_device(const ModelConfig& model, const Plan& plan_in, const RunOptions& opt,
                                            int steps) {
    const Plan plan = resolve_defaults(plan_in, model);
    const std::int64_t dp = plan.dp, tp = plan.tp;
    std::vector<Program> programs;
    for (std::int64_t r = 0; r < dp * tp; ++r) {
        programs.push_back(build_program(model, plan, r));
        programs.back().hyper = opt.hyper;
        use_model_rope(programs.back());
    }
    const Program whole = build_program(model, single_gpu_plan(plan), 0);
    PF_CUDA_CHECK(cudaSetDevice(0));
    std::vector<std::unique_ptr<cuda::LoopbackGroup>> dp_groups, tp_groups;  // by tp rank / by dp rank
    for (std::int64_t t = 0; t < tp; ++t) dp_groups.push_back(std::make_unique<cuda::LoopbackGroup>(static_cast<int>(dp)));
    for (std::int64_t k = 0; k < dp; ++k) tp_groups.push_back(std::make_unique<cuda::LoopbackGroup>(static_cast<int>(tp)));
    std::vector<std::unique_ptr<cuda::DeviceComm>> dp_comms, tp_comms;
    for (const Program& p : programs) {
        dp_comms.push_back(dp > 1 ? dp_groups[static_cast<std::size_t>(p.tp_rank)]->rank(static_cast<int>(p.dp_rank)) : nullptr);
        tp_comms.push_back(tp > 1 ? tp_groups[static_cast<std::size_t>(p.dp_rank)]->rank(static_cast<int>(p.tp_rank)) : nullptr);
    }
    std::vector<RankResult> out(programs.size());
    std::vector<std::vector<double>> per_tp;  // each tensor-parallel rank's full layout, from its dp ranks' shards
    for (std::int64_t t = 0; t < tp; ++t)
        per_tp.emplace_back(static_cast<std::size_t>(programs[static_cast<std::size_t>(t)].param_elements), 0.0);
    std::mutex assembly;
    std::exception_ptr first_error;
    auto body = [&](std::size_t r) {
        try {
            run_rank(programs[r], opt, dp_comms[r].get(), tp_comms[r].get(), steps, out[r],
                     per_tp[static_cast<std::size_t>(programs[r].tp_rank)], assembly);
        } catch (...) {
            {
                std::lock_guard<std::mutex> lock(assembly);
                if (!first_error) first_error = std::current_exception();
            }
            for (auto& g : dp_groups) g->abort();
            for (auto& g : tp_groups) g->abort();
        }
    };
    std::vector<std::thread> threads;
    for (std::size_t r = 1; r < programs.size(); ++r) threads.emplace_back(body, r);
    body(0);
    for (auto& t : threads) t.join();
    if (first_error) std::rethrow_exception(first_error);
    std::vector<double> full(static_cast<std::size_t>(whole.param_elements), 0.0);
    for (std::int64_t t = 0; t < tp; ++t) unshard_parameters(whole, programs[static_cast<std::size_t>(t)], per_tp[static_cast<std::size_t>(t)], full);
    for (auto& r : out) r.updated = full;
    return out;
}

}  // namespace preflight::runtime
