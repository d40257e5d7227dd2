// dst += src, elementwise, in fp32 and rounded to dst's type: a rank's reduce-scattered gradient
// chunk added into its gradient shard (ZeRO-2/3, program_comm.cpp). CPU reference: the host
// executor's reduce_scatter (host_runner.cpp), checked by tests/runtime/gpu/test_gpu_comm_kernels.cpp.
#include "common.cuh"
#include "kernels.cuh"

namespace preflight::runtime::cuda {

template <class TD, class TS>
__global__ void accumulate_kernel(TD* dst, const TS* src, i64 n) {
    for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += static_cast<i64>(gridDim.x) * blockDim.x)
        dst[i] = from_f<TD>(to_f(dst[i]) + to_f(src[i]));
}

template <class TD, class TS>
void launch_accumulate(TD* dst, const TS* src, i64 n, cudaStream_t stream) {
    if (n == 0) return;
    const unsigned blocks = static_cast<unsigned>(std::min<i64>((n + 255) / 256, 132 * 16));
    accumulate_kernel<TD, TS><<<blocks, 256, 0, stream>>>(dst, src, n);
    PF_LAUNCH_CHECK();
}

template void launch_accumulate<float, bf16>(float*, const bf16*, i64, cudaStream_t);
template void launch_accumulate<bf16, bf16>(bf16*, const bf16*, i64, cudaStream_t);
template void launch_accumulate<float, float>(float*, const float*, i64, cudaStream_t);

}  // namespace preflight::runtime::cuda
