// Gradient capture: one step of a program on device 0, its initial weights and its
// fp32 gradients read back for the comparison with the PyTorch reference.
#include <stdexcept>
#include <vector>

#include "device_runner.hpp"
#include "preflight/runtime/runtime.hpp"
#include "preflight/runtime/walker.hpp"

namespace preflight::runtime {

// Reads a persistent f32 / bf16 buffer back as doubles (synchronous).
std::vector<double> download_buffer(const Program& prog, const BufferTable& table, BufferId id, cudaStream_t stream) {
    const BufferSpec& spec = prog.buffers[static_cast<std::size_t>(id)];
    std::vector<double> out(static_cast<std::size_t>(spec.elements));
    PF_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (spec.dtype == DType::f32) {
        std::vector<float> h(out.size());
        PF_CUDA_CHECK(cudaMemcpy(h.data(), table[static_cast<std::size_t>(id)], h.size() * 4, cudaMemcpyDeviceToHost));
        for (std::size_t i = 0; i < h.size(); ++i) out[i] = h[i];
    } else if (spec.dtype == DType::bf16) {
        std::vector<cuda::bf16> h(out.size());
        PF_CUDA_CHECK(cudaMemcpy(h.data(), table[static_cast<std::size_t>(id)], h.size() * 2, cudaMemcpyDeviceToHost));
        for (std::size_t i = 0; i < h.size(); ++i) out[i] = static_cast<double>(__bfloat162float(h[i]));
    } else {
        throw std::runtime_error("download_buffer: " + spec.name + " is not f32 or bf16");
    }
    return out;
}

StepGradients capture_step_gradients(const ModelConfig& model, const Plan& plan_in, const RunOptions& opt) {
    using namespace cuda;
    const Plan plan = resolve_defaults(plan_in, model);
    Program prog = build_program(model, plan);
    prog.hyper = opt.hyper;
    use_model_constants(prog);
    PF_CUDA_CHECK(cudaSetDevice(0));
    cudaStream_t stream = nullptr;
    PF_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    StepGradients out;
    {
        Gemm gemm(prog.act == DType::f32);
        CudaBackend backend(stream);
        TrackingAllocator alloc(backend);
        BufferTable table;
        DeviceRunner runner(prog, stream, opt.seed, gemm, opt.debug_sync);
        AttentionEngine attention(prog, opt.cudnn_attention);
        runner.set_attention(&attention);
        runner.set_fuse_gelu(opt.fuse_epilogues);
        try {
            walk(prog, prog.setup, alloc, table, &runner, "set-up");
            out.weights = download_buffer(prog, table, prog.weights, stream);
            runner.set_step(1);
            walk(prog, prog.step, alloc, table, &runner, "step", 1);
            out.gradients = download_buffer(prog, table, prog.grads_fp32 != kNoBuffer ? prog.grads_fp32 : prog.grads, stream);
            float loss_sum = 0;
            PF_CUDA_CHECK(cudaMemcpy(&loss_sum, runner.loss_sum(table), sizeof(float), cudaMemcpyDeviceToHost));
            out.loss = static_cast<double>(loss_sum) / static_cast<double>(prog.dims.rows * prog.dims.grad_acc);
            walk(prog, prog.teardown, alloc, table, &runner, "teardown");
            PF_CUDA_CHECK(cudaStreamSynchronize(stream));
        } catch (...) {
            release_all_buffers(table, alloc, stream);
            cudaStreamDestroy(stream);
            throw;
        }
    }
    cudaStreamDestroy(stream);
    return out;
}

}  // namespace preflight::runtime