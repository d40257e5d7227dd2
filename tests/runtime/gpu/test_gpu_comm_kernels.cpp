// The data-parallel kernels against their CPU references: accumulate.cu (a reduced gradient
// chunk added into the shard) and loopback.cu (the loopback backend's collectives over several
// ranks' buffers, against the host loopback group's arithmetic). Label: gpu; skips without a
// device. Bounds: fp32 1e-6 relative (sums of at most 4 terms); bf16 one rounding of the
// result (2^-8 relative) as the inputs are bf16-exact.
#include <gtest/gtest.h>

#include <thread>

#include "gpu_util.hpp"
#include "kernels.cuh"
#include "preflight/runtime/host_runner.hpp"

namespace preflight::runtime {
namespace {

using namespace test;

template <class TD, class TS>
void check_accumulate(double rtol) {
    const std::size_t n = 1000;
    const auto a = rounded<TD>(randn(n, 1)), b = rounded<TS>(randn(n, 2));
    DeviceBuffer<TD> dst(a);
    DeviceBuffer<TS> src(b);
    cuda::launch_accumulate<TD, TS>(dst.get(), src.get(), static_cast<std::int64_t>(n), nullptr);
    std::vector<double> want(n);
    for (std::size_t i = 0; i < n; ++i) want[i] = a[i] + b[i];
    expect_close(dst.download(), want, rtol, "accumulate");
}

TEST(GpuCommKernels, AccumulateMatchesItsReference) {
    PF_REQUIRE_GPU();
    check_accumulate<float, cuda::bf16>(1e-6);
    check_accumulate<float, float>(1e-6);
    check_accumulate<cuda::bf16, cuda::bf16>(1e-2);
}

// Every rank's buffer after one loopback collective on the device and on the host group.
template <class T>
void check_loopback(cuda::LoopbackKind kind, ReduceOp op, int world, double rtol) {
    const auto reduce = static_cast<cuda::LoopbackReduce>(op);  // the same order: mean, sum, max
    const std::int64_t count = 333;  // per chunk (reduce-scatter, all-gather) or the whole buffer
    const std::size_t len = static_cast<std::size_t>(kind == cuda::LoopbackKind::all_reduce ? count : count * world);
    std::vector<std::vector<double>> host;
    std::vector<std::unique_ptr<DeviceBuffer<T>>> dev;
    cuda::LoopbackBuffers b{};
    for (int r = 0; r < world; ++r) {
        host.push_back(rounded<T>(randn(len, 10 + static_cast<unsigned>(r))));
        dev.push_back(std::make_unique<DeviceBuffer<T>>(host.back()));
        b.bufs[r] = dev.back()->get();
        b.ins[r] = dev.back()->get() + r * count;  // all-gather in place
    }
    cuda::launch_loopback<T>(kind, reduce, b, world, count, nullptr);
    HostLoopbackGroup group(world);  // the reference: the host group's arithmetic, ranks as threads
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r)
        threads.emplace_back([&, r] {
            double* p = host[static_cast<std::size_t>(r)].data();
            HostCollectives& c = group.rank(r);
            if (kind == cuda::LoopbackKind::all_reduce) c.all_reduce(p, count, op);
            if (kind == cuda::LoopbackKind::reduce_scatter) c.reduce_scatter(p, count, op);
            if (kind == cuda::LoopbackKind::all_gather) c.all_gather(p + r * count, p, count);
        });
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r)
        expect_close(dev[static_cast<std::size_t>(r)]->download(), host[static_cast<std::size_t>(r)], rtol, "loopback");
}

TEST(GpuCommKernels, LoopbackCollectivesMatchTheHostGroup) {
    PF_REQUIRE_GPU();
    for (auto kind : {cuda::LoopbackKind::all_reduce, cuda::LoopbackKind::reduce_scatter, cuda::LoopbackKind::all_gather})
        for (ReduceOp op : {ReduceOp::mean, ReduceOp::sum, ReduceOp::max})
            for (int world : {1, 2, 3, 8}) {
                check_loopback<float>(kind, op, world, 1e-6);
                check_loopback<cuda::bf16>(kind, op, world, 1e-2);
            }
}

}  // namespace
}  // namespace preflight::runtime
