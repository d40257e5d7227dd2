// The loopback backend's collectives: `world` ranks of one process on one device, each with
// its own buffers, reduced over all of them at once by one kernel (sums in rank order in fp32,
// so the result does not depend on which rank's thread launched it). CPU reference: the host
// loopback group (HostLoopbackGroup::perform, host_runner.cpp); compared in
// tests/runtime/gpu/test_gpu_comm_kernels.cpp.
#include "common.cuh"
#include "kernels.cuh"

namespace preflight::runtime::cuda {

template <class T>
__global__ void loopback_kernel(LoopbackKind kind, LoopbackBuffers b, int world, i64 count) {
    const i64 total = kind == LoopbackKind::all_reduce_mean ? count : count * world;
    const float inv = 1.f / static_cast<float>(world);
    for (i64 j = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; j < total;
         j += static_cast<i64>(gridDim.x) * blockDim.x) {
        switch (kind) {
            case LoopbackKind::all_reduce_mean: {
                float s = 0.f;
                for (int r = 0; r < world; ++r) s += to_f(static_cast<const T*>(b.bufs[r])[j]);
                for (int r = 0; r < world; ++r) static_cast<T*>(b.bufs[r])[j] = from_f<T>(s * inv);
                break;
            }
            case LoopbackKind::reduce_scatter_mean: {  // j = k * count + i: chunk k into rank k
                const int k = static_cast<int>(j / count);
                float s = 0.f;
                for (int r = 0; r < world; ++r) s += to_f(static_cast<const T*>(b.bufs[r])[j]);
                static_cast<T*>(b.bufs[k])[j] = from_f<T>(s * inv);
                break;
            }
            case LoopbackKind::all_gather: {  // j = k * count + i: rank k's input into every chunk k
                const int k = static_cast<int>(j / count);
                const T v = static_cast<const T*>(b.ins[k])[j - static_cast<i64>(k) * count];
                for (int r = 0; r < world; ++r) static_cast<T*>(b.bufs[r])[j] = v;
                break;
            }
        }
    }
}

template <class T>
void launch_loopback(LoopbackKind kind, const LoopbackBuffers& b, int world, i64 count, cudaStream_t stream) {
    if (world < 1 || world > kLoopbackMaxRanks)
        throw DeviceError(FailureKind::other, 0, "launch_loopback", "world size out of range 1..64");
    const i64 total = kind == LoopbackKind::all_reduce_mean ? count : count * world;
    if (total == 0) return;
    const unsigned blocks = static_cast<unsigned>(std::min<i64>((total + 255) / 256, 132 * 16));
    loopback_kernel<T><<<blocks, 256, 0, stream>>>(kind, b, world, count);
    PF_LAUNCH_CHECK();
}

template void launch_loopback<float>(LoopbackKind, const LoopbackBuffers&, int, i64, cudaStream_t);
template void launch_loopback<bf16>(LoopbackKind, const LoopbackBuffers&, int, i64, cudaStream_t);

}  // namespace preflight::runtime::cuda
