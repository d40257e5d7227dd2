// The step program executed op by op on the host in double, with the CPU reference kernels
// (reference.hpp), through the same walk() and tracking allocator as the device: the CPU
// twin of runtime/cuda/executor.cpp's reading of each op. Buffers are NaN-poisoned when
// allocated and again when freed, so a program that reads a buffer before writing it or after
// freeing it gives NaN results. Collectives go through HostCollectives: one emulated rank, or
// the ranks of a loopback group running in threads of one process. This is how CI checks the
// data-parallel programs (shards, buckets, lifetimes, the ZeRO update) without a GPU.
#pragma once

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "preflight/runtime/reference.hpp"
#include "preflight/runtime/runtime.hpp"
#include "preflight/runtime/walker.hpp"

namespace preflight::runtime {

// The collectives of one rank, on host buffers of doubles (every dtype is held as double), over
// one group (the rank's data-parallel or tensor-parallel peers).
class HostCollectives {
public:
    virtual ~HostCollectives() = default;
    // In place: `count` elements at `buf` become their mean, sum or max over the ranks.
    virtual void all_reduce(double* buf, std::int64_t count, ReduceOp op) = 0;
    // In place: `buf` holds one `chunk` per rank; this rank's (at rank * chunk) becomes the
    // reduction over the ranks of that chunk. The other chunks are left as they were.
    virtual void reduce_scatter(double* buf, std::int64_t chunk, ReduceOp op) = 0;
    // `out` (one chunk per rank) receives every rank's `chunk` elements from `in`.
    virtual void all_gather(const double* in, double* out, std::int64_t chunk) = 0;
    // Pipeline: `count` elements to / from the rank `peer` places away in the group (buffered:
    // a send returns at once, a receive waits for the matching send).
    virtual void send(const double* buf, std::int64_t count, int peer) = 0;
    virtual void recv(double* buf, std::int64_t count, int peer) = 0;
};

// One rank alone (preflight run --emulate-rank): every rank is taken to hold what this one holds,
// so a mean or a max is the value itself and a sum is left as this rank's share (the other
// ranks' partial sums are not here); a gather copies this rank's chunk into every chunk; a send
// goes nowhere and a receive gives fresh values of standard deviation kEmulatedReceiveStd
// (uniform here; the device's are normal), as the device's emulated rank (cuda/comm.hpp) does.
class HostEmulatedRank final : public HostCollectives {
public:
    HostEmulatedRank(std::int64_t rank, std::int64_t world) : rank_(rank), world_(world) {}
    void all_reduce(double*, std::int64_t, ReduceOp) override {}
    void reduce_scatter(double*, std::int64_t, ReduceOp) override {}
    void all_gather(const double* in, double* out, std::int64_t chunk) override;
    void send(const double*, std::int64_t, int) override {}
    void recv(double* buf, std::int64_t count, int) override;

private:
    std::int64_t rank_, world_;
    std::uint64_t receives_ = 0;
};

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
        ReduceOp op = ReduceOp::mean;
    };
    void arrive(std::int64_t r, const Call& call);
    void perform();
    void post(std::int64_t from, std::int64_t to, const double* buf, std::int64_t count);
    void take(std::int64_t from, std::int64_t to, double* buf, std::int64_t count);
    std::map<std::pair<std::int64_t, std::int64_t>, std::deque<std::vector<double>>> mail_;  // (from, to)
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
    // The rank's collectives by group (CommGroup: data-, tensor-parallel, pipeline, embedding);
    // null where the plan has none.
    HostRunner(const Program& program, std::uint64_t seed, std::array<HostCollectives*, kCommGroups> comms = {});
    HostRunner(const Program& program, std::uint64_t seed, HostCollectives* dp, HostCollectives* tp = nullptr)
        : HostRunner(program, seed, std::array<HostCollectives*, kCommGroups>{dp, tp, nullptr, nullptr}) {}

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
    void run_embedding(const Op& op);    // host_runner_ops.cpp
    void vocab_parallel_cross_entropy(const Op& op);  // host_runner_ops.cpp
    void run_moe(const Op& op);          // host_runner_moe.cpp
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
    std::array<HostCollectives*, kCommGroups> comm_{};  // by CommGroup
    HostCollectives& comm(CommGroup g);
    std::int64_t step_ = 1;
    std::map<BufferId, Vec> buf_;
    std::vector<std::int64_t> ids_;
    ref::RopeFrequencies rope_;  // RoPE frequencies with the model's scaling, and its attention factor
};

// A whole model's parameters (`whole`: the plan's program at dp = tp = 1) cut for `rank`: its
// tensor-parallel slices of every tensor, in its own layout (padding zero).
std::vector<double> shard_parameters(const Program& whole, const std::vector<double>& whole_params, const Program& rank);

// The inverse: a rank's parameters (its full layout) written into the whole model's `out` at
// the elements its slices hold.
void unshard_parameters(const Program& whole, const Program& rank, const std::vector<double>& rank_params,
                        std::vector<double>& out);

// Data-parallel rank `P.dp_rank`'s part of its state buffer after its steps (`rank_buffer`: the
// master copy where the recipe has one, else the weights) written into `full`, the rank's own
// full layout: all of it without ZeRO sharding, else the rank's chunk of every unit.
// `dense_only`: the units but a layer's experts' (expert parallelism: another ep rank's copy of the
// layout holds other experts there).
void assemble_parameters(const Program& P, const std::vector<double>& rank_buffer, std::vector<double>& full,
                         bool dense_only = false);

// Runs `steps` steps of every rank of one plan (dp x tp x pp x cp ranks, global rank order), each
// in its own thread with loopback groups for its data-, tensor-, context-parallel, pipeline and
// embedding peers, from the whole model's parameters `whole_params` (laid out as `whole`, the plan's
// single-GPU program). Returns each rank's losses (0 on stages without the loss) and the
// parameters after the last step in `whole`'s layout, assembled from every rank's shards,
// slices and stages (the same for every rank). Rethrows the first rank's failure.
std::vector<RankResult> run_host_ranks(const Program& whole, const std::vector<Program>& ranks,
                                       const std::vector<double>& whole_params, std::uint64_t seed, int steps);

}  // namespace preflight::runtime
