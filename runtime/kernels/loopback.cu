// The loopback backend's collectives: `world` ranks of one process on one device, each with
// its own buffers, reduced over all of them at once by one kernel (sums and maxima in rank order
// in fp32, so the result does not depend on which rank's thread launched it). CPU reference: the host
// loopback group (HostLoopbackGroup::perform, host_runner.cpp); compared in
// tests/runtime/gpu/test_gpu_comm_kernels.cpp.
#include "common.cuh"
#include "kernels.cuh"

namespace preflight::runtime::cuda {

// Element j of every rank's buffer reduced in rank order.
template <class T>
__device__ float reduce_ranks(const LoopbackBuffers& b, LoopbackReduce op, int world, i64 j) {
    float acc = to_f(static_cast<const T*>(b.bufs[0])[j]);
    for (int r = 1; r < world; ++r) {
        const float v = to_f(static_cast<const T*>(b.bufs[r])[j]);
        acc = op == LoopbackReduce::max ? fmaxf(acc, v) : acc + v;
    }
    return op == LoopbackReduce::mean ? acc / static_cast<float>(world) : acc;
}

template <class T>
__global__ void loopback_kernel(LoopbackKind kind, LoopbackReduce op, LoopbackBuffers b, int world, i64 count) {
    const i64 total = kind == LoopbackKind::all_reduce ? count : count * world;
    for (i64 j = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; j < total;
         j += static_cast<i64>(gridDim.x) * blockDim.x) {
        switch (kind) {
            case LoopbackKind::all_reduce: {
                const T v = from_f<T>(reduce_ranks<T>(b, op, world, j));
                for (int r = 0; r < world; ++r) static_cast<T*>(b.bufs[r])[j] = v;
                break;
            }
            case LoopbackKind::reduce_scatter: {  // j = k * count + i: chunk k into rank k
                const int k = static_cast<int>(j / count);
                static_cast<T*>(b.bufs[k])[j] = from_f<T>(reduce_ranks<T>(b, op, world, j));
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
void launch_loopback(LoopbackKind kind, LoopbackReduce op, const LoopbackBuffers& b, int world, i64 count,
                     cudaStream_t stream) {
    if (world < 1 || world > kLoopbackMaxRanks)
        throw DeviceError(FailureKind::other, 0, "launch_loopback", "world size out of range 1..64");
    const i64 total = kind == LoopbackKind::all_reduce ? count : count * world;
    if (total == 0) return;
    const unsigned blocks = static_cast<unsigned>(std::min<i64>((total + 255) / 256, 132 * 16));
    loopback_kernel<T><<<blocks, 256, 0, stream>>>(kind, op, b, world, count);
    PF_LAUNCH_CHECK();
}

template void launch_loopback<float>(LoopbackKind, LoopbackReduce, const LoopbackBuffers&, int, i64, cudaStream_t);
template void launch_loopback<bf16>(LoopbackKind, LoopbackReduce, const LoopbackBuffers&, int, i64, cudaStream_t);

}  // namespace preflight::runtime::cuda
