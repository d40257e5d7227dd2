// The DeviceRunner's collective ops (device_runner.hpp): unit gradient buffers, the data- and
// tensor-parallel collectives on the communication stream, and the compute stream's waits.
#include <algorithm>

#include "device_runner.hpp"

namespace preflight::runtime::cuda {

DeviceRunner::~DeviceRunner() {
    for (cudaEvent_t e : started_) cudaEventDestroy(e);
    for (cudaEvent_t e : done_) cudaEventDestroy(e);
    if (ready_) cudaEventDestroy(ready_);
    if (comm_stream_) cudaStreamDestroy(comm_stream_);
}

void DeviceRunner::set_comm(const std::array<DeviceComm*, kCommGroups>& comms) {
    comm_ = comms;
    if (comm_stream_ == nullptr) {
        PF_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
        PF_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    }
    // One start / done pair per collective of a step (the program's count, its repeated
    // micro-batch's each time it runs; the step's ops are the same every step), at most
    // kCommEventRing of them (a ring: device_runner.hpp).
    constexpr std::int64_t kCommEventRing = 4096;
    const auto n = static_cast<std::size_t>(std::min(step_collectives(P).count, kCommEventRing));
    while (done_.size() < n) {
        cudaEvent_t a = nullptr, b = nullptr;
        PF_CUDA_CHECK(cudaEventCreate(&a));
        PF_CUDA_CHECK(cudaEventCreate(&b));
        started_.push_back(a);
        done_.push_back(b);
    }
    issued_kinds_.reserve(n);
}

void DeviceRunner::run_data_parallel(const Op& op, const BufferTable& t) {
    const BufferSpec& spec = P.buffers[static_cast<std::size_t>(op.v[0].buffer)];
    const std::int64_t count = op.v[0].rows * op.v[0].cols;
    char* v0 = static_cast<char*>(t[static_cast<std::size_t>(op.v[0].buffer)]) + op.v[0].offset * dtype_bytes(spec.dtype);
    if (op.kind == OpKind::unit_grads_begin) {
        PF_CUDA_CHECK(cudaMemsetAsync(v0, 0, static_cast<std::size_t>(count) * dtype_bytes(spec.dtype), stream));
        return;
    }
    const auto ring = static_cast<std::int64_t>(done_.size());
    if (op.kind == OpKind::comm_wait) {
        const std::int64_t target = issued_ - 1 - op.comm_back;
        if (target < 0 || target >= issued_) throw std::logic_error(describe(P, op) + ": waits for a collective not issued");
        if (issued_ - target > ring) throw std::logic_error(describe(P, op) + ": waits for a collective past the event ring");
        PF_CUDA_CHECK(cudaStreamWaitEvent(stream, done_[static_cast<std::size_t>(target % ring)], 0));
        return;
    }
    DeviceComm* comm = comm_[static_cast<int>(op.group)];
    if (comm == nullptr) throw std::logic_error(describe(P, op) + ": a collective without its group's communicator");
    if (ring == 0) throw std::logic_error("a collective in a step the program counts none in");
    const auto i = static_cast<std::size_t>(issued_ % ring);
    if (issued_ >= ring) fold(i, folded_);  // the slot's earlier collective: its time, before the slot is reused
    PF_CUDA_CHECK(cudaEventRecord(ready_, stream));
    PF_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, ready_, 0));
    PF_CUDA_CHECK(cudaEventRecord(started_[i], comm_stream_));
    const std::int64_t chunk = count / P.group_size(op.group);
    const std::int64_t rank = P.group_rank(op.group);
    switch (op.kind) {
        case OpKind::all_reduce: comm->all_reduce(v0, count, spec.dtype, op.reduce, comm_stream_); break;
        case OpKind::reduce_scatter: {  // data-parallel (ZeRO-2/3 gradients)
            comm->reduce_scatter(v0, chunk, spec.dtype, op.reduce, comm_stream_);
            if (op.v[1].buffer != kNoBuffer) {  // ZeRO-2/3: this rank's reduced chunk into its gradient shard
                const DType st = P.buffers[static_cast<std::size_t>(op.v[1].buffer)].dtype;
                void* shard = static_cast<char*>(t[static_cast<std::size_t>(op.v[1].buffer)]) + op.v[1].offset * dtype_bytes(st);
                const void* mine = v0 + rank * chunk * dtype_bytes(spec.dtype);
                if (st == DType::f32 && spec.dtype == DType::bf16)
                    launch_accumulate<float, bf16>(static_cast<float*>(shard), static_cast<const bf16*>(mine), chunk, comm_stream_);
                else if (st == DType::bf16)
                    launch_accumulate<bf16, bf16>(static_cast<bf16*>(shard), static_cast<const bf16*>(mine), chunk, comm_stream_);
                else
                    launch_accumulate<float, float>(static_cast<float*>(shard), static_cast<const float*>(mine), chunk, comm_stream_);
            }
            break;
        }
        case OpKind::all_gather: {
            const void* in = v0 + rank * chunk * dtype_bytes(spec.dtype);  // in place (ZeRO-1/2)
            if (op.v[1].buffer != kNoBuffer)  // ZeRO-3, sequence parallelism: from this rank's shard
                in = static_cast<const char*>(t[static_cast<std::size_t>(op.v[1].buffer)]) + op.v[1].offset * dtype_bytes(spec.dtype);
            comm->all_gather(in, v0, chunk, spec.dtype, comm_stream_);
            break;
        }
        default: throw std::logic_error("not a data-parallel op");
    }
    PF_CUDA_CHECK(cudaEventRecord(done_[i], comm_stream_));
    if (issued_kinds_.size() <= i) issued_kinds_.resize(i + 1);
    issued_kinds_[i] = {op.kind, static_cast<double>(count) * dtype_bytes(spec.dtype)};
    ++issued_;
}

void DeviceRunner::fold(std::size_t slot, CommTimes& into) const {
    float ms = 0;
    PF_CUDA_CHECK(cudaEventSynchronize(done_[slot]));
    PF_CUDA_CHECK(cudaEventElapsedTime(&ms, started_[slot], done_[slot]));
    const double s = ms / 1e3;
    switch (issued_kinds_[slot].first) {
        case OpKind::all_reduce: into.all_reduce_s += s; break;
        case OpKind::reduce_scatter: into.reduce_scatter_s += s; break;
        default: into.all_gather_s += s; break;
    }
    into.bytes += issued_kinds_[slot].second;
    ++into.count;
}

// The compute stream's work so far, then the sends and receives on the communication stream (one
// NCCL group), then the compute stream waits for them: the received buffer is ready for the next
// op and the sent one may be freed after this op.
void DeviceRunner::run_p2p(const Op& op, const BufferTable& t) {
    DeviceComm* comm = comm_[static_cast<int>(CommGroup::pp)];
    if (comm == nullptr) throw std::logic_error(describe(P, op) + ": a send or receive without a pipeline communicator");
    auto ptr = [&](const View& v) -> char* {
        if (v.buffer == kNoBuffer) return nullptr;
        const BufferSpec& spec = P.buffers[static_cast<std::size_t>(v.buffer)];
        return static_cast<char*>(t[static_cast<std::size_t>(v.buffer)]) + v.offset * dtype_bytes(spec.dtype);
    };
    PF_CUDA_CHECK(cudaEventRecord(ready_, stream));
    PF_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, ready_, 0));
    auto part = [&](std::size_t v, int peer) { return P2pPart{ptr(op.v[v]), op.v[v].rows * op.v[v].cols, peer}; };
    comm->p2p({part(0, op.send_peer), part(2, op.send2_peer)}, {part(1, op.recv_peer), part(3, op.recv2_peer)}, P.act,
              comm_stream_);
    PF_CUDA_CHECK(cudaEventRecord(ready_, comm_stream_));
    PF_CUDA_CHECK(cudaStreamWaitEvent(stream, ready_, 0));
}

DeviceRunner::CommTimes DeviceRunner::comm_times() const {
    CommTimes c = folded_;
    const auto ring = static_cast<std::int64_t>(done_.size());
    for (std::int64_t k = std::max<std::int64_t>(0, issued_ - ring); k < issued_; ++k)
        fold(static_cast<std::size_t>(k % ring), c);
    return c;
}

}  // namespace preflight::runtime::cuda
