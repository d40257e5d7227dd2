// The collectives of one rank on the device, behind one interface (the DeviceRunner's
// all_reduce / reduce_scatter / all_gather ops call it on the communication stream):
//  - NcclComm: one process per GPU, NCCL over NVLink / the network (comm_nccl.cpp);
//  - EmulatedComm: one rank of the plan's world alone on this GPU, every collective a local op
//    on the same buffers in the same stream order (PyTorch's fake process group, but with the
//    real kernels and allocations);
//  - LoopbackComm: the ranks of a LoopbackGroup, threads of one process on one GPU, exchanging
//    through device memory (numerical parity on a single GPU).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "kernels.cuh"
#include "preflight/runtime/program.hpp"
#include "preflight/runtime/rendezvous.hpp"

namespace preflight::runtime::cuda {

// One send or receive of a pipeline exchange (DeviceComm::p2p): `count` elements at `data`, to or
// from the rank `peer` places away around the group (ring_rank).
struct P2pPart {
    void* data = nullptr;
    i64 count = 0;
    int peer = 0;
};
using P2pParts = std::array<P2pPart, 2>;

class DeviceComm {
public:
    virtual ~DeviceComm() = default;
    virtual std::string_view backend() const = 0;  // "nccl" | "emulated" | "loopback"
    // In place: `count` elements at `buf` become their mean, sum or max over the ranks.
    virtual void all_reduce(void* buf, i64 count, DType t, ReduceOp op, cudaStream_t s) = 0;
    // In place: `buf` holds one `chunk` per rank; this rank's (at rank * chunk) becomes the
    // reduction over the ranks of that chunk (ncclReduceScatter, in place).
    virtual void reduce_scatter(void* buf, i64 chunk, DType t, ReduceOp op, cudaStream_t s) = 0;
    // `out` (one chunk per rank) receives every rank's `chunk` elements from `in`; in place when
    // in == out + rank * chunk (ncclAllGather).
    virtual void all_gather(const void* in, void* out, i64 chunk, DType t, cudaStream_t s) = 0;
    // Pipeline: each send's `count` elements to the rank `peer` places away around the group and
    // each receive's from the rank `peer` away, all at once (a part with null `data` is skipped:
    // ncclSend / ncclRecv in one group, so that neighbours exchanging both ways never wait on each
    // other). Sends to one peer meet its receives from this rank in the order given.
    virtual void p2p(const P2pParts& sends, const P2pParts& recvs, DType t, cudaStream_t s) = 0;
};

// One rank alone: a mean or a max over ranks that all hold this rank's values is the value
// itself, and a sum is left as this rank's share (the others' partial sums are not here): no
// work either way. A gather that is not in place copies this rank's chunk into every chunk (the
// other ranks' parameters are not on this device); an in-place one leaves the other chunks as
// they are (the full buffer already holds parameters there). A send goes nowhere and a receive
// gives fresh values at an initialised model's scale (kEmulatedReceiveStd), as the neighbouring
// stages are not here: from zeros a stage's forward would stay zero through every bias-free layer
// (RMSNorm(0) = 0), its GEMMs would be timed on zeros and its norms' backward grow unbounded.
class EmulatedComm final : public DeviceComm {
public:
    EmulatedComm(std::int64_t rank, std::int64_t world) : rank_(rank), world_(world) {}
    std::string_view backend() const override { return "emulated"; }
    void all_reduce(void*, i64, DType, ReduceOp, cudaStream_t) override {}
    void reduce_scatter(void*, i64, DType, ReduceOp, cudaStream_t) override {}
    void all_gather(const void* in, void* out, i64 chunk, DType t, cudaStream_t s) override;
    void p2p(const P2pParts& sends, const P2pParts& recvs, DType t, cudaStream_t s) override;

private:
    std::int64_t rank_, world_;
    std::uint64_t receives_ = 0;  // each receive's values differ (the seed)
};

// `world` ranks, each driven by its own host thread with its own streams. A collective waits
// until every rank called it; the last to arrive makes one group stream wait for every rank's
// stream, runs the loopback kernel over all ranks' buffers (launch_loopback), and makes every
// rank's stream wait for it. abort() wakes waiting ranks with an exception.
class LoopbackGroup {
public:
    explicit LoopbackGroup(int world);
    ~LoopbackGroup();
    std::unique_ptr<DeviceComm> rank(int r);
    void abort();
    int world() const { return world_; }

    // Pipeline sends are buffered: the sender's data is copied into a staging buffer of the
    // group's on its stream; the receiver copies it out on its own once that copy is done.
    void post(int from, int to, const void* data, std::size_t bytes, cudaStream_t s);
    void take(int from, int to, void* data, std::size_t bytes, cudaStream_t s);

    struct Call {
        LoopbackKind kind{};
        LoopbackReduce op = LoopbackReduce::mean;
        const void* in = nullptr;
        void* buf = nullptr;
        i64 count = 0;
        DType dtype = DType::bf16;
        cudaStream_t stream = nullptr;
    };
    void arrive(int r, const Call& call);

private:
    void perform();
    int world_;
    std::vector<Call> calls_;
    std::vector<cudaEvent_t> ready_;
    cudaEvent_t done_ = nullptr;
    cudaStream_t group_stream_ = nullptr;
    struct Parcel {
        void* staging = nullptr;
        std::size_t bytes = 0;
        cudaEvent_t copied = nullptr;
    };
    std::map<std::pair<int, int>, std::deque<Parcel>> mail_;  // (from, to)
    int arrived_ = 0;
    std::uint64_t generation_ = 0;
    bool aborted_ = false;
    std::mutex mu_;
    std::condition_variable cv_;
};

// NCCL over the ranks of a rendezvous: the unique id from rank 0 (exchange_unique_id), then
// ncclCommInitRank on this process's device. libnccl.so.2 is loaded at run time (like cuDNN):
// PREFLIGHT_NCCL_LIB, else the dynamic loader's search path.
class NcclComm final : public DeviceComm {
public:
    explicit NcclComm(const Rendezvous& r);
    ~NcclComm() override;
    NcclComm(const NcclComm&) = delete;
    NcclComm& operator=(const NcclComm&) = delete;
    std::string_view backend() const override { return "nccl"; }
    void all_reduce(void* buf, i64 count, DType t, ReduceOp op, cudaStream_t s) override;
    void reduce_scatter(void* buf, i64 chunk, DType t, ReduceOp op, cudaStream_t s) override;
    void all_gather(const void* in, void* out, i64 chunk, DType t, cudaStream_t s) override;
    void p2p(const P2pParts& sends, const P2pParts& recvs, DType t, cudaStream_t s) override;
    // The ranks of this communicator with the same `color`, ordered by `key` (ncclCommSplit,
    // NCCL 2.18): a data-, tensor-parallel, pipeline or embedding group of the world. Collective
    // over every rank; a rank outside every group of the kind passes kNoColor and gets null.
    static constexpr int kNoColor = -1;  // NCCL_SPLIT_NOCOLOR
    std::unique_ptr<NcclComm> split(int color, int key);
    int rank() const { return rank_; }
    int world() const { return world_; }

private:
    NcclComm() = default;
    void* comm_ = nullptr;  // ncclComm_t
    int rank_ = 0, world_ = 1;
};

// The NCCL library this process can load: its version ("2.28.9") or why not (`ok` false).
struct NcclLibrary {
    bool ok = false;
    std::string version_or_error;
};
const NcclLibrary& nccl_library();

}  // namespace preflight::runtime::cuda
