// The loopback backend end to end (device.hpp run_ranks_on_device): every rank of a plan (dp x
// tp x pp) as a thread of this process on one GPU, each with its own streams, cuBLASLt handle,
// attention engine and allocations, their collectives and sends exchanging through device memory
// (comm.hpp LoopbackGroup: one per group of each kind). For numerical parity on a single GPU;
// memory is not measured here (the ranks share the device).
#include <array>
#include <map>
#include <thread>

#include "comm.hpp"
#include "device_runner.hpp"
#include "preflight/runtime/host_runner.hpp"

namespace preflight::runtime {

namespace {

// One rank's run: set-up, `steps` steps, its state read back into `full`, teardown.
void run_rank(const Program& prog, const RunOptions& opt, const std::array<cuda::DeviceComm*, kCommGroups>& comms,
              int steps, RankResult& out, const std::vector<std::vector<double>*>& fulls, std::mutex& assembly) {
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
        if (has_collectives(prog)) runner.set_comm(comms);
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
                std::lock_guard<std::mutex> lock(assembly);  // each ep rank's layout (host_runner.cpp run_one_rank)
                for (std::size_t e = 0; e < fulls.size(); ++e)
                    assemble_parameters(prog, mine, *fulls[e], static_cast<std::int64_t>(e) != prog.group_rank(CommGroup::ep));
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
    std::vector<Program> programs;
    for (std::int64_t r = 0; r < plan.gpus(); ++r) {
        programs.push_back(build_program(model, plan, r));
        programs.back().hyper = opt.hyper;
        use_model_constants(programs.back());
    }
    const Program whole = build_program(model, single_gpu_plan(plan), 0);
    PF_CUDA_CHECK(cudaSetDevice(0));
    // Per kind of group (CommGroup), one loopback group per key (Program::group_key); the
    // embedding group only where a tied word embedding spans the first and last stage.
    auto member = [](const Program& P, CommGroup g) {
        return g != CommGroup::embedding || (P.model.tied_embeddings && P.dims.pp > 1 && (P.dims.first_stage || P.dims.last_stage));
    };
    std::map<std::pair<int, std::int64_t>, std::unique_ptr<cuda::LoopbackGroup>> groups;
    std::vector<std::array<std::unique_ptr<cuda::DeviceComm>, kCommGroups>> comms(programs.size());
    for (std::size_t r = 0; r < programs.size(); ++r)
        for (int k = 0; k < kCommGroups; ++k) {
            const Program& P = programs[r];
            const auto g = static_cast<CommGroup>(k);
            if (!member(P, g)) continue;
            auto& grp = groups[{k, P.group_key(g)}];
            if (!grp) grp = std::make_unique<cuda::LoopbackGroup>(static_cast<int>(P.group_size(g)));
            comms[r][static_cast<std::size_t>(k)] = grp->rank(static_cast<int>(P.group_rank(g)));
        }
    std::vector<RankResult> out(programs.size());
    // A data-parallel group's full layout per ep rank (the experts it holds), from its shards.
    std::map<std::pair<std::int64_t, std::int64_t>, std::vector<double>> per_group;
    for (const Program& P : programs)
        per_group[{P.group_key(CommGroup::dp), P.group_rank(CommGroup::ep)}].assign(static_cast<std::size_t>(P.param_elements), 0.0);
    std::mutex assembly;
    std::exception_ptr first_error;
    auto body = [&](std::size_t r) {
        try {
            std::array<cuda::DeviceComm*, kCommGroups> mine{};
            for (int k = 0; k < kCommGroups; ++k) mine[static_cast<std::size_t>(k)] = comms[r][static_cast<std::size_t>(k)].get();
            const Program& P = programs[r];
            std::vector<std::vector<double>*> fulls;
            for (std::int64_t e = 0; e < P.group_size(CommGroup::ep); ++e) fulls.push_back(&per_group.at({P.group_key(CommGroup::dp), e}));
            run_rank(P, opt, mine, steps, out[r], fulls, assembly);
        } catch (...) {
            {
                std::lock_guard<std::mutex> lock(assembly);
                if (!first_error) first_error = std::current_exception();
            }
            for (auto& [key, g] : groups) g->abort();
        }
    };
    std::vector<std::thread> threads;
    for (std::size_t r = 1; r < programs.size(); ++r) threads.emplace_back(body, r);
    body(0);
    for (auto& t : threads) t.join();
    if (first_error) std::rethrow_exception(first_error);
    std::vector<double> full(static_cast<std::size_t>(whole.param_elements), 0.0);
    for (const Program& P : programs)
        if (P.group_rank(CommGroup::edp) == 0)
            unshard_parameters(whole, P, per_group.at({P.group_key(CommGroup::dp), P.group_rank(CommGroup::ep)}), full);
    for (auto& r : out) r.updated = full;
    return out;
}

}  // namespace preflight::runtime
