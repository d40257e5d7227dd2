// The communicators that need no NCCL: the emulated rank and the loopback group (comm.hpp).
#include <algorithm>
#include <stdexcept>

#include "comm.hpp"
#include "kernels.cuh"
#include "preflight/runtime/synthetic.hpp"

namespace preflight::runtime::cuda {

void EmulatedComm::all_gather(const void* in, void* out, i64 chunk, DType t, cudaStream_t s) {
    const std::size_t bytes = static_cast<std::size_t>(chunk) * static_cast<std::size_t>(dtype_bytes(t));
    char* o = static_cast<char*>(out);
    if (in == o + static_cast<std::size_t>(rank_) * bytes) return;  // in place: the other chunks hold parameters
    for (std::int64_t k = 0; k < world_; ++k)
        PF_CUDA_CHECK(cudaMemcpyAsync(o + static_cast<std::size_t>(k) * bytes, in, bytes, cudaMemcpyDeviceToDevice, s));
}

void EmulatedComm::p2p(const P2pParts&, const P2pParts& recvs, DType t, cudaStream_t s) {
    for (const P2pPart& r : recvs) {
        if (!r.data) continue;
        const std::uint64_t seed = emulated_receive_seed(rank_, ++receives_);
        const auto sd = static_cast<float>(kEmulatedReceiveStd);
        if (t == DType::bf16)
            launch_init_normal<bf16>(static_cast<bf16*>(r.data), nullptr, r.count, sd, seed, s);
        else if (t == DType::f32)
            launch_init_normal<float>(static_cast<float*>(r.data), nullptr, r.count, sd, seed, s);
        else
            throw std::logic_error("emulated rank: pipeline receives are f32 or bf16");
    }
}

namespace {

LoopbackReduce reduce_of(ReduceOp op) {
    switch (op) {
        case ReduceOp::sum: return LoopbackReduce::sum;
        case ReduceOp::max: return LoopbackReduce::max;
        case ReduceOp::mean: break;
    }
    return LoopbackReduce::mean;
}

class LoopbackComm final : public DeviceComm {
public:
    LoopbackComm(LoopbackGroup& g, int r) : g_(g), r_(r) {}
    std::string_view backend() const override { return "loopback"; }
    void all_reduce(void* buf, i64 count, DType t, ReduceOp op, cudaStream_t s) override {
        g_.arrive(r_, {LoopbackKind::all_reduce, reduce_of(op), nullptr, buf, count, t, s});
    }
    void reduce_scatter(void* buf, i64 chunk, DType t, ReduceOp op, cudaStream_t s) override {
        g_.arrive(r_, {LoopbackKind::reduce_scatter, reduce_of(op), nullptr, buf, chunk, t, s});
    }
    void all_gather(const void* in, void* out, i64 chunk, DType t, cudaStream_t s) override {
        g_.arrive(r_, {LoopbackKind::all_gather, LoopbackReduce::mean, in, out, chunk, t, s});
    }
    void p2p(const P2pParts& sends, const P2pParts& recvs, DType t, cudaStream_t s) override {
        const auto bytes = [t](i64 n) { return static_cast<std::size_t>(n) * dtype_bytes(t); };
        for (const P2pPart& o : sends)  // buffered: never waits
            if (o.data) g_.post(r_, ring_rank(r_, o.peer, g_.world()), o.data, bytes(o.count), s);
        for (const P2pPart& i : recvs)
            if (i.data) g_.take(ring_rank(r_, i.peer, g_.world()), r_, i.data, bytes(i.count), s);
    }

private:
    LoopbackGroup& g_;
    int r_;
};

}  // namespace

LoopbackGroup::LoopbackGroup(int world) : world_(world), calls_(static_cast<std::size_t>(world)) {
    if (world < 1 || world > kLoopbackMaxRanks)
        throw std::invalid_argument("loopback: 1 to " + std::to_string(kLoopbackMaxRanks) + " ranks, got " + std::to_string(world));
    PF_CUDA_CHECK(cudaStreamCreateWithFlags(&group_stream_, cudaStreamNonBlocking));
    PF_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    ready_.resize(static_cast<std::size_t>(world));
    for (auto& e : ready_) PF_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

LoopbackGroup::~LoopbackGroup() {
    for (auto& [key, box] : mail_)
        for (Parcel& p : box) {  // sent and never received (a failed run): the copy may still be running
            cudaEventSynchronize(p.copied);
            cudaEventDestroy(p.copied);
            cudaFree(p.staging);
        }
    for (auto& e : ready_) cudaEventDestroy(e);
    cudaEventDestroy(done_);
    cudaStreamDestroy(group_stream_);
}

std::unique_ptr<DeviceComm> LoopbackGroup::rank(int r) { return std::make_unique<LoopbackComm>(*this, r); }

void LoopbackGroup::abort() {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
    cv_.notify_all();
}

void LoopbackGroup::arrive(int r, const Call& call) {
    std::unique_lock<std::mutex> lock(mu_);
    if (aborted_) throw std::runtime_error("loopback group aborted: another rank failed");
    calls_[static_cast<std::size_t>(r)] = call;
    const std::uint64_t gen = generation_;
    if (++arrived_ == world_) {
        try {
            perform();
        } catch (...) {
            aborted_ = true;
            cv_.notify_all();
            throw;
        }
        arrived_ = 0;
        ++generation_;
        cv_.notify_all();
        return;
    }
    cv_.wait(lock, [&] { return generation_ != gen || aborted_; });
    if (generation_ == gen) throw std::runtime_error("loopback group aborted: another rank failed");
}

void LoopbackGroup::post(int from, int to, const void* data, std::size_t bytes, cudaStream_t s) {
    if (to < 0 || to >= world_) throw std::logic_error("loopback send to a rank outside the group");
    Parcel p;
    p.bytes = bytes;
    PF_CUDA_CHECK(cudaMalloc(&p.staging, std::max<std::size_t>(bytes, 1)));
    PF_CUDA_CHECK(cudaEventCreateWithFlags(&p.copied, cudaEventDisableTiming));
    PF_CUDA_CHECK(cudaMemcpyAsync(p.staging, data, bytes, cudaMemcpyDeviceToDevice, s));
    PF_CUDA_CHECK(cudaEventRecord(p.copied, s));
    std::lock_guard<std::mutex> lock(mu_);
    mail_[{from, to}].push_back(p);
    cv_.notify_all();
}

void LoopbackGroup::take(int from, int to, void* data, std::size_t bytes, cudaStream_t s) {
    if (from < 0 || from >= world_) throw std::logic_error("loopback receive from a rank outside the group");
    Parcel p;
    {
        std::unique_lock<std::mutex> lock(mu_);
        auto& box = mail_[{from, to}];
        cv_.wait(lock, [&] { return !box.empty() || aborted_; });
        if (box.empty()) throw std::runtime_error("loopback group aborted: another rank failed");
        p = box.front();
        box.pop_front();
    }
    if (p.bytes != bytes) throw std::logic_error("loopback ranks disagree on a p2p size");
    PF_CUDA_CHECK(cudaStreamWaitEvent(s, p.copied, 0));
    PF_CUDA_CHECK(cudaMemcpyAsync(data, p.staging, bytes, cudaMemcpyDeviceToDevice, s));
    PF_CUDA_CHECK(cudaStreamSynchronize(s));  // the staging buffer goes now
    PF_CUDA_CHECK(cudaEventDestroy(p.copied));
    PF_CUDA_CHECK(cudaFree(p.staging));
}

// Runs on the last rank's thread while the others wait in arrive(): their streams are idle on
// the host side, so recording on them here is safe.
void LoopbackGroup::perform() {
    const Call& c0 = calls_.front();
    LoopbackBuffers b{};
    for (int r = 0; r < world_; ++r) {
        const Call& c = calls_[static_cast<std::size_t>(r)];
        if (c.kind != c0.kind || c.op != c0.op || c.count != c0.count || c.dtype != c0.dtype)
            throw std::logic_error("loopback ranks disagree on the collective (kind, reduction, count or dtype)");
        b.bufs[r] = c.buf;
        b.ins[r] = c.in;
        PF_CUDA_CHECK(cudaEventRecord(ready_[static_cast<std::size_t>(r)], c.stream));
        PF_CUDA_CHECK(cudaStreamWaitEvent(group_stream_, ready_[static_cast<std::size_t>(r)], 0));
    }
    if (c0.dtype == DType::f32)
        launch_loopback<float>(c0.kind, c0.op, b, world_, c0.count, group_stream_);
    else if (c0.dtype == DType::bf16)
        launch_loopback<bf16>(c0.kind, c0.op, b, world_, c0.count, group_stream_);
    else
        throw std::logic_error("loopback: collectives on f32 or bf16 buffers only");
    PF_CUDA_CHECK(cudaEventRecord(done_, group_stream_));
    for (const Call& c : calls_) PF_CUDA_CHECK(cudaStreamWaitEvent(c.stream, done_, 0));
}

}  // namespace preflight::runtime::cuda
