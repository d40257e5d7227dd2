// The step program executed op by op on the host in double, with the CPU reference kernels
// (reference.hpp), through the same walk() and tracking allocator as the device: the CPU
// twin of runtime/cuda/executor.cpp's reading of each op. Buffers are NaN-poisoned when
// allocated and again when freed, so a program that reads a buffer before writing it or after
// freeing it gives NaN results. Collectives go through HostCollectives: one emulated rank, or
// the ranks of a loopback group running in threads of one process. This is how CI checks the
// data-parallel programs (shards, buckets, lifetimes, the ZeRO update) without a GPU.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "preflight/runtime/runtime.hpp"
#include "preflight/runtime/walker.hpp"

namespace preflight::runtime {

// The collectives of one rank, on host buffers of doubles (every dtype is held as double).
class HostCollectives {
public:
    virtual ~HostCollectives() = default;
    // In place: `count` elements at `buf` become their mean over the ranks.
    virtual void all_reduce_mean(double* buf, std::int64_t count) = 0;
    // In place: `buf` holds one `chunk` per rank; this rank's (at rank * chunk) becomes the mean
    // over the ranks of that chunk. The other chunks are left as they were.
    virtual void reduce_scatter_mean(double* buf, std::int64_t chunk) = 0;
    // `out` (one chunk per rank) receives every rank's `chunk` elements from `in`.
    virtual void all_gather(const double* in, double* out, std::int64_t chunk) = 0;
};

// One rank alone (preflight run --emulate-rank): every rank is taken to hold what this one holds,
// so a mean is the value itself; a gather copies this rank's chunk into every chunk (the other
// ranks' parameters are not here).
class HostEmulatedRank final : public HostCollectives {
public:
    HostEmulatedRank(std::int64_t rank, std::int64_t world) : rank_(rank), world_(world) {}
    void all_reduce_mean(double*, std::int64_t) override {}
    void reduce_scatter_mean(double*, std::int64_t) override {}
    void all_gather(const double* in, double* out, std::int64_t chunk) override;

private:
    std::int64_t rank_, world_;
};

// `world` ranks in threads of one process, exchanging through host memory. Each call blocks
// until every rank made its matching call; the last to arrive performs the collective over all
// ranks' buffers, summing in rank order, so the result does not depend on the threads' timing.
// abort() wakes every waiting rank with an exception (a rank that failed cannot reach the next
// collective).
class HostLoopbackGroup {
public:
    explicit HostLoopbackGroup(std::int64_t world);
    ~HostLoopbackGroup();
    HostCollectives& rank(std::int64_t r);
    void abort();
    std::int64_t world() const { return world_; }

private:
    class Rank;
    friend class Rank;
    enum class Kind { all_reduce, reduce_scatter, all_gather };
    struct Call {
        Kind kind{};
        const double* in = nullptr;
        double* out = nullptr;
        std::int64_t count = 0;
    };
    void arrive(std::int64_t r, const Call& call);
    void perform();
    std::int64_t world_;
    std::vector<std::unique_ptr<Rank>> ranks_;
    std::vector<Call> calls_;
    std::int64_t arrived_ = 0;
    std::uint64_t generation_ = 0;
    bool aborted_ = false;
    std::mutex mu_;
    std::condition_variable cv_;
};

class HostRunner final : public OpRunner {
public:
    // `comm` may be null for a plan without collectives.
    HostRunner(const Program& program, std::uint64_t seed, HostCollectives* comm = nullptr);

    // The full initial parameters (Program::param_elements, the full flat layout) the set-up op
    // installs: the weights (or this rank's shard of them) and the fp32 master copy.
    std::vector<double> params;
    double loss_sum = 0;  // the step's summed per-token loss, as the device scalars
    void set_step(std::int64_t step) { step_ = step; }

    void run(const Op& op, const BufferTable& table) override;
    // A live buffer's contents (throws std::out_of_range for one never allocated).
    const std::vector<double>& buffer(BufferId b) const { return buf_.at(b); }

private:
    using Vec = std::vector<double>;
    void run_compute(const Op& op);
    void run_elementwise(const Op& op);  // host_runner_ops.cpp
    void run_attention(const Op& op);    // host_runner_ops.cpp
    void run_eager(const Op& op);        // host_runner_ops.cpp
    void run_fp8(const Op& op);          // host_runner_fp8.cpp
    void run_fp8_linear(const Op& op);   // host_runner_fp8.cpp
    template <class At>
    void quantize_into(At at, std::int64_t rows, std::int64_t cols, DType t, double* row, double* col, int slot);
    double scale_inv(int slot);
    void run_data_parallel(const Op& op);
    void init();
    void optimizer();
    double* at(const View& v) { return buf_.at(v.buffer).data() + v.offset; }
    double* w(ParamId id);
    double* g(ParamId id);
    const std::int64_t* tok(const View& v);

    const Program& P;
    const Dims& d;
    std::uint64_t seed_;
    HostCollectives* comm_;
    std::int64_t step_ = 1;
    std::map<BufferId, Vec> buf_;
    std::vector<std::int64_t> ids_;
    std::vector<double> inv_freq_;  // RoPE frequencies with the model's scaling
};

// Rank `P.rank`'s part of the parameters after its steps, from its state buffer (the master copy
// where the recipe has one, else the weights: `rank_buffer`), written into `full` (the full flat
// layout): all of it without sharding, else the rank's chunk of every unit.
void assemble_parameters(const Program& P, const std::vector<double>& rank_buffer, std::vector<double>& full);

// Runs `steps` steps of the programs of ranks 0..dp-1 of one plan, each in its own thread of a
// loopback group (one rank alone needs no group), from the same initial parameters. Returns
// each rank's losses and the assembled parameters (the same for every rank). Rethrows the first
// rank's failure.
std::vector<RankResult> run_host_ranks(const std::vector<Program>& ranks, const std::vector<double>& params,
                                           std::uint64_t seed, int steps);

}  // namespace preflight::runtime
