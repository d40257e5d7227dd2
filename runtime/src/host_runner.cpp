// The host executor of step programs (host_runner.hpp): each op's views read as the CUDA
// executor reads them (runtime/cuda/device_runner.hpp), computed with the CPU reference kernels.
#include "preflight/runtime/host_runner.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <thread>

#include "preflight/runtime/context_parallel.hpp"
#include "preflight/runtime/reference.hpp"
#include "preflight/runtime/synthetic.hpp"

namespace preflight::runtime {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
using Vec = std::vector<double>;

Vec gather_view(const double* p, const View& v) {
    Vec o(static_cast<std::size_t>(v.rows * v.cols));
    for (std::int64_t r = 0; r < v.rows; ++r)
        for (std::int64_t c = 0; c < v.cols; ++c) o[static_cast<std::size_t>(r * v.cols + c)] = p[r * v.ld + c];
    return o;
}
void scatter_view(const Vec& o, double* p, const View& v) {
    for (std::int64_t r = 0; r < v.rows; ++r)
        for (std::int64_t c = 0; c < v.cols; ++c) p[r * v.ld + c] = o[static_cast<std::size_t>(r * v.cols + c)];
}

}  // namespace

// ---- collectives ---------------------------------------------------------------------------

void HostEmulatedRank::all_gather(const double* in, double* out, std::int64_t chunk) {
    const Vec mine(in, in + chunk);  // `in` may lie inside `out`
    for (std::int64_t r = 0; r < world_; ++r) std::copy(mine.begin(), mine.end(), out + r * chunk);
    (void)rank_;
}

void HostEmulatedRank::recv(double* buf, std::int64_t count, int) {
    // Uniform on [-a, a] has standard deviation a / sqrt(3).
    const double a = kEmulatedReceiveStd * std::sqrt(3.0);
    const std::uint64_t seed = emulated_receive_seed(rank_, ++receives_);
    for (std::int64_t i = 0; i < count; ++i)
        buf[i] = a * (2.0 * synthetic_uniform(seed, static_cast<std::uint64_t>(i)) - 1.0);
}

class HostLoopbackGroup::Rank final : public HostCollectives {
public:
    Rank(HostLoopbackGroup& g, std::int64_t r) : g_(g), r_(r) {}
    void all_reduce(double* buf, std::int64_t count, ReduceOp op) override {
        g_.arrive(r_, {Kind::all_reduce, buf, buf, count, op});
    }
    void reduce_scatter(double* buf, std::int64_t chunk, ReduceOp op) override {
        g_.arrive(r_, {Kind::reduce_scatter, buf, buf, chunk, op});
    }
    void all_gather(const double* in, double* out, std::int64_t chunk) override {
        g_.arrive(r_, {Kind::all_gather, in, out, chunk});
    }
    void send(const double* buf, std::int64_t count, int peer) override {
        g_.post(r_, ring_rank(r_, peer, g_.world_), buf, count);
    }
    void recv(double* buf, std::int64_t count, int peer) override {
        g_.take(ring_rank(r_, peer, g_.world_), r_, buf, count);
    }

private:
    HostLoopbackGroup& g_;
    std::int64_t r_;
};

HostLoopbackGroup::HostLoopbackGroup(std::int64_t world) : world_(world), calls_(static_cast<std::size_t>(world)) {
    for (std::int64_t r = 0; r < world; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
}
HostLoopbackGroup::~HostLoopbackGroup() = default;

HostCollectives& HostLoopbackGroup::rank(std::int64_t r) { return *ranks_.at(static_cast<std::size_t>(r)); }

void HostLoopbackGroup::abort() {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
    cv_.notify_all();
}

void HostLoopbackGroup::arrive(std::int64_t r, const Call& call) {
    std::unique_lock<std::mutex> lock(mu_);
    if (aborted_) throw std::runtime_error("loopback group aborted: another rank failed");
    calls_[static_cast<std::size_t>(r)] = call;
    const std::uint64_t gen = generation_;
    if (++arrived_ == world_) {
        perform();
        arrived_ = 0;
        ++generation_;
        cv_.notify_all();
        return;
    }
    cv_.wait(lock, [&] { return generation_ != gen || aborted_; });
    if (generation_ == gen) throw std::runtime_error("loopback group aborted: another rank failed");
}

void HostLoopbackGroup::post(std::int64_t from, std::int64_t to, const double* buf, std::int64_t count) {
    if (to < 0 || to >= world_) throw std::logic_error("loopback send to a rank outside the group");
    std::lock_guard<std::mutex> lock(mu_);
    mail_[{from, to}].emplace_back(buf, buf + count);
    cv_.notify_all();
}

void HostLoopbackGroup::take(std::int64_t from, std::int64_t to, double* buf, std::int64_t count) {
    if (from < 0 || from >= world_) throw std::logic_error("loopback receive from a rank outside the group");
    std::unique_lock<std::mutex> lock(mu_);
    auto& box = mail_[{from, to}];
    cv_.wait(lock, [&] { return !box.empty() || aborted_; });
    if (box.empty()) throw std::runtime_error("loopback group aborted: another rank failed");
    if (static_cast<std::int64_t>(box.front().size()) != count)
        throw std::logic_error("loopback ranks disagree on a p2p size");
    std::copy(box.front().begin(), box.front().end(), buf);
    box.pop_front();
}

// Every rank's call is the same collective with the same count (the step programs issue
// identical sequences); a mismatch is a bug in the program builder.
namespace {
// Element i of every call's buffer reduced in rank order.
template <class Calls>
double reduce_at(const Calls& calls, std::int64_t i, ReduceOp op, std::int64_t world) {
    double r = op == ReduceOp::max ? calls.front().out[i] : 0.0;
    for (const auto& c : calls) r = op == ReduceOp::max ? std::max(r, c.out[i]) : r + c.out[i];
    return op == ReduceOp::mean ? r / static_cast<double>(world) : r;
}
}  // namespace

void HostLoopbackGroup::perform() {
    const Call& c0 = calls_.front();
    for (const Call& c : calls_)
        if (c.kind != c0.kind || c.count != c0.count || c.op != c0.op)
            throw std::logic_error("loopback ranks disagree on the collective (kind, count or reduction)");
    const std::int64_t n = c0.count;
    switch (c0.kind) {
        case Kind::all_reduce:
            for (std::int64_t i = 0; i < n; ++i) {
                const double v = reduce_at(calls_, i, c0.op, world_);
                for (const Call& c : calls_) c.out[i] = v;
            }
            break;
        case Kind::reduce_scatter:  // chunk k of every rank, reduced, into rank k's chunk k
            for (std::int64_t k = 0; k < world_; ++k)
                for (std::int64_t i = 0; i < n; ++i)
                    calls_[static_cast<std::size_t>(k)].out[k * n + i] = reduce_at(calls_, k * n + i, c0.op, world_);
            break;
        case Kind::all_gather: {
            std::vector<Vec> parts;  // copied first: a rank's `in` may lie inside another's `out` region
            for (const Call& c : calls_) parts.emplace_back(c.in, c.in + n);
            for (const Call& c : calls_)
                for (std::int64_t k = 0; k < world_; ++k)
                    std::copy(parts[static_cast<std::size_t>(k)].begin(), parts[static_cast<std::size_t>(k)].end(),
                              c.out + k * n);
            break;
        }
    }
}

// ---- the runner ------------------------------------------------------------------------------

HostCollectives& HostRunner::comm(CommGroup g) {
    HostCollectives* c = comm_[static_cast<int>(g)];
    if (c == nullptr) throw std::logic_error("HostRunner: a collective without its group's communicator");
    return *c;
}

HostRunner::HostRunner(const Program& p, std::uint64_t seed, std::array<HostCollectives*, kCommGroups> comms)
    : P(p), d(p.dims), seed_(seed), comm_(comms) {
    if (p.model.position == PositionKind::rope)
        rope_ = ref::rope_frequencies(d.rope_dims, p.hyper.rope_base, p.hyper.rope_scaling, d.s_full, p.model.max_positions);
}

double* HostRunner::w(ParamId id) {
    const ParamRef r = P.weight_at(id);
    return r.buffer == kNoBuffer ? nullptr : buf_.at(r.buffer).data() + r.offset;
}
double* HostRunner::g(ParamId id) {
    const ParamRef r = P.grad_at(id);
    return r.buffer == kNoBuffer ? nullptr : buf_.at(r.buffer).data() + r.offset;
}
const std::int64_t* HostRunner::tok(const View& v) {  // token ids stored as doubles; converted on use
    ids_.resize(static_cast<std::size_t>(v.rows * v.cols));
    const double* p = at(v);
    for (std::size_t i = 0; i < ids_.size(); ++i) ids_[i] = static_cast<std::int64_t>(p[i]);
    return ids_.data();
}

void HostRunner::run(const Op& op, const BufferTable&) {
    for (BufferId b : op.alloc) {  // byte buffers (cuBLASLt workspace, device scalars) are not simulated
        const BufferSpec& spec = P.buffers[static_cast<std::size_t>(b)];
        buf_[b].assign(spec.dtype == DType::u8 ? 0 : static_cast<std::size_t>(spec.elements), kNaN);
    }
    switch (op.kind) {
        case OpKind::init_params: init(); break;
        case OpKind::optimizer: optimizer(); break;
        case OpKind::unit_grads_begin:
        case OpKind::all_reduce:
        case OpKind::reduce_scatter:
        case OpKind::all_gather:
        case OpKind::comm_wait:
        case OpKind::p2p: run_data_parallel(op); break;
        case OpKind::flash_fwd:
        case OpKind::flash_bwd:
        case OpKind::eager_scores:
        case OpKind::eager_softmax:
        case OpKind::eager_pv:
        case OpKind::eager_dp:
        case OpKind::eager_softmax_bwd:
        case OpKind::eager_dqkv:
        case OpKind::cp_kv_pack:
        case OpKind::cp_kv_order:
        case OpKind::cp_kv_unorder:
        case OpKind::cp_kv_unpack: run_attention(op); break;
        case OpKind::fp8_cast:
        case OpKind::fp8_cast_weights: run_fp8(op); break;
        case OpKind::moe_route:
        case OpKind::moe_dispatch:
        case OpKind::moe_linear_fwd:
        case OpKind::moe_linear_bwd_data:
        case OpKind::moe_linear_bwd_weight:
        case OpKind::moe_combine:
        case OpKind::moe_combine_bwd:
        case OpKind::moe_route_bwd:
        case OpKind::moe_dispatch_bwd: run_moe(op); break;
        case OpKind::linear_fwd:
        case OpKind::linear_bwd_data:
        case OpKind::linear_bwd_weight:
            if (is_fp8(P.buffers[static_cast<std::size_t>(op.v[0].buffer)].dtype)) {
                run_fp8_linear(op);
                break;
            }
            run_compute(op);
            break;
        default: run_compute(op); break;
    }
    for (BufferId b : op.free) {  // poisoned: a later read shows up as NaN
        auto& v = buf_.at(b);
        std::fill(v.begin(), v.end(), kNaN);
    }
}

// Set-up: zeros, then the parameters: the full weights or this rank's shard of them (ZeRO-3),
// and the fp32 master copy, full or this rank's shard (ZeRO >= 1).
void HostRunner::init() {
    for (auto& [b, v] : buf_) std::fill(v.begin(), v.end(), 0.0);
    if (params.size() != static_cast<std::size_t>(P.param_elements))
        throw std::logic_error("HostRunner: params hold " + std::to_string(params.size()) + " elements, the program " +
                               std::to_string(P.param_elements));
    auto shard_of = [&](Vec& out) {
        for (const ShardUnit& u : P.layout.units)
            std::copy_n(params.begin() + u.begin + P.unit_rank(u) * u.chunk, u.chunk, out.begin() + u.shard_begin);
    };
    Vec& weights = buf_.at(P.weights);
    if (P.plan.zero == zero_weights)
        shard_of(weights);
    else
        weights = params;
    if (P.master_weights != kNoBuffer) {
        Vec& master = buf_.at(P.master_weights);
        if (P.layout.sharded())
            shard_of(master);
        else
            master = params;
    }
}

void HostRunner::run_data_parallel(const Op& op) {
    switch (op.kind) {
        case OpKind::unit_grads_begin: std::fill_n(at(op.v[0]), op.v[0].cols, 0.0); break;
        case OpKind::comm_wait: break;  // host collectives complete when called
        case OpKind::p2p:  // a send is buffered, so sending first never waits on the peer's receive
            for (auto [v, peer] : {std::pair{std::size_t{0}, op.send_peer}, std::pair{std::size_t{2}, op.send2_peer}})
                if (op.v[v].buffer != kNoBuffer) comm(CommGroup::pp).send(at(op.v[v]), op.v[v].rows * op.v[v].cols, peer);
            for (auto [v, peer] : {std::pair{std::size_t{1}, op.recv_peer}, std::pair{std::size_t{3}, op.recv2_peer}})
                if (op.v[v].buffer != kNoBuffer) comm(CommGroup::pp).recv(at(op.v[v]), op.v[v].rows * op.v[v].cols, peer);
            break;
        case OpKind::all_reduce: comm(op.group).all_reduce(at(op.v[0]), op.v[0].rows * op.v[0].cols, op.reduce); break;
        case OpKind::reduce_scatter: {
            const std::int64_t chunk = op.v[0].rows * op.v[0].cols / P.group_size(op.group);
            comm(op.group).reduce_scatter(at(op.v[0]), chunk, op.reduce);
            if (op.v[1].buffer != kNoBuffer) {  // ZeRO-2/3: added into this rank's gradient shard
                const double* mine = at(op.v[0]) + P.group_rank(op.group) * chunk;
                double* shard = at(op.v[1]);
                for (std::int64_t i = 0; i < chunk; ++i) shard[i] += mine[i];
            }
            break;
        }
        case OpKind::all_gather: {
            const std::int64_t chunk = op.v[0].rows * op.v[0].cols / P.group_size(op.group);
            const double* in = op.v[1].buffer != kNoBuffer ? at(op.v[1]) : at(op.v[0]) + P.group_rank(op.group) * chunk;
            comm(op.group).all_gather(in, at(op.v[0]), chunk);
            break;
        }
        default: break;
    }
}

// AdamW / SGD over the rank's optimizer regions (program.hpp), the master copy (or the weights)
// updated and written to the weights.
void HostRunner::optimizer() {
    const TrainHyper& hp = P.hyper;
    for (const OptimizerRegion& r : optimizer_regions(P)) {
        const double* grad = buf_.at(r.grad.buffer).data() + r.grad.offset;
        double* weights = buf_.at(r.weights.buffer).data() + r.weights.offset;
        double* master = P.master_weights != kNoBuffer ? buf_.at(P.master_weights).data() + r.state : nullptr;
        double* m = buf_.at(P.moment1).data() + r.state;
        double* v = P.moment2 != kNoBuffer ? buf_.at(P.moment2).data() + r.state : nullptr;
        double* p = master ? master : weights;
        for (std::size_t k = 0; k < r.tensors.size(); ++k) {
            const std::int64_t b = r.tensors[k].first;
            const std::int64_t n = (k + 1 < r.tensors.size() ? r.tensors[k + 1].first : r.count) - b;
            const double wd = r.tensors[k].second ? hp.weight_decay : 0.0;
            if (P.plan.optimizer == Optimizer::adamw)
                ref::adamw(p + b, grad + b, m + b, v + b, n, hp.lr, hp.beta1, hp.beta2, hp.eps, wd, step_);
            else
                ref::sgd(p + b, grad + b, m + b, n, hp.lr, hp.momentum, wd);
        }
        if (master) std::copy_n(master, r.count, weights);
    }
}

void HostRunner::run_compute(const Op& op) {
    const std::int64_t h = d.h, s = d.s;
    const double eps = P.hyper.norm_eps;
    const bool ln = P.model.norm == NormKind::layernorm;
    switch (op.kind) {
        case OpKind::teardown: break;
        case OpKind::zero_grads:
            for (BufferId b : {P.grads, P.grads_fp32, P.grad_shard})
                if (b != kNoBuffer) std::fill(buf_.at(b).begin(), buf_.at(b).end(), 0.0);
            loss_sum = 0;
            break;
        case OpKind::tokens:
        case OpKind::labels: {
            double* p = at(op.v[0]);
            const int shift = op.kind == OpKind::labels ? 1 : 0;
            const std::int64_t mb = P.data_micro_batch(micro_batch_of(op));
            const TokenWindow w = token_window(P);
            for (std::int64_t i = 0; i < d.b * s; ++i)
                p[i] = static_cast<double>(
                    w.first + synthetic_token(seed_, step_, mb, i / s, cp_position(i % s, s, d.cp, d.cp_rank) + shift, w.vocab));
            break;
        }
        case OpKind::embedding_fwd:
        case OpKind::embedding_bwd: run_embedding(op); break;
        case OpKind::norm_fwd:  // the view's rows: rows / tp under sequence parallelism
            if (ln)
                ref::layernorm_fwd(at(op.v[0]), w(op.p0), w(op.p1), at(op.v[1]), op.v[0].rows, h, eps);
            else
                ref::rmsnorm_fwd(at(op.v[0]), w(op.p0), at(op.v[1]), op.v[0].rows, h, eps);
            if (op.v[2].buffer != kNoBuffer) {  // a post-norm's residual add (program_post_norm.cpp)
                double* y = at(op.v[1]);
                const double* r = at(op.v[2]);
                for (std::int64_t i = 0; i < op.v[1].rows * h; ++i) y[i] += r[i];
            }
            break;
        case OpKind::norm_bwd:
            if (ln)
                ref::layernorm_bwd(at(op.v[0]), w(op.p0), at(op.v[1]), at(op.v[2]), g(op.p0), g(op.p1), op.v[0].rows, h, eps,
                                   op.accumulate);
            else
                ref::rmsnorm_bwd(at(op.v[0]), w(op.p0), at(op.v[1]), at(op.v[2]), g(op.p0), op.v[0].rows, h, eps, op.accumulate);
            break;
        case OpKind::linear_fwd: {  // Y = X W^T (+ b) (+ residual)
            const View &x = op.v[0], &y = op.v[1];
            const Vec X = gather_view(at(x), x);
            Vec Y(static_cast<std::size_t>(y.rows * y.cols)), Rs;
            if (op.v[2].buffer != kNoBuffer) Rs = gather_view(at(op.v[2]), op.v[2]);
            ref::linear_fwd(X.data(), w(op.p0), w(op.p1), Rs.empty() ? nullptr : Rs.data(), Y.data(), y.rows, y.cols, x.cols);
            scatter_view(Y, at(y), y);
            break;
        }
        case OpKind::linear_bwd_data: {  // dX (=|+=) dY W
            const View &dy = op.v[0], &dx = op.v[1];
            const Vec DY = gather_view(at(dy), dy);
            Vec DX = op.accumulate ? gather_view(at(dx), dx) : Vec(static_cast<std::size_t>(dx.rows * dx.cols), 0.0);
            const double* W = w(op.p0);  // [N = dy.cols, K = dx.cols]
            for (std::int64_t i = 0; i < dy.rows; ++i)
                for (std::int64_t j = 0; j < dy.cols; ++j)
                    for (std::int64_t k = 0; k < dx.cols; ++k)
                        DX[static_cast<std::size_t>(i * dx.cols + k)] += DY[static_cast<std::size_t>(i * dy.cols + j)] * W[j * dx.cols + k];
            scatter_view(DX, at(dx), dx);
            break;
        }
        case OpKind::linear_bwd_weight: {  // dW += dY^T X, db += colsum(dY)
            const View &dy = op.v[0], &x = op.v[1];
            const Vec DY = gather_view(at(dy), dy), X = gather_view(at(x), x);
            Vec DX(static_cast<std::size_t>(x.rows * x.cols));
            ref::linear_bwd(DY.data(), X.data(), w(op.p0), DX.data(), g(op.p0), g(op.p1), dy.rows, dy.cols, x.cols);
            break;
        }
        default: run_elementwise(op); break;
    }
}

}  // namespace preflight::runtime

namespace preflight::runtime {

void assemble_parameters(const Program& P, const std::vector<double>& v, std::vector<double>& full, bool dense_only) {
    if (!P.layout.sharded() && !dense_only) {
        full = v;
        return;
    }
    const bool shard = P.layout.sharded() && static_cast<std::int64_t>(v.size()) == P.layout.shard_elements;
    for (const ShardUnit& u : P.layout.units) {
        if (dense_only && u.kind == UnitKind::experts) continue;
        if (!P.layout.sharded()) {
            std::copy_n(v.begin() + u.begin, u.elements, full.begin() + u.begin);
            continue;
        }
        const std::int64_t dst = u.begin + P.unit_rank(u) * u.chunk, src = shard ? u.shard_begin : dst;
        std::copy_n(v.begin() + src, u.chunk, full.begin() + dst);
    }
}

namespace {

// The whole model's tensor of each of a rank's tensors (by name: a stage holds some of them).
std::vector<const ParamSpec*> whole_tensors(const Program& whole, const Program& rank) {
    std::map<std::string, const ParamSpec*> by_name;
    for (const ParamSpec& ps : whole.params) by_name.emplace(ps.name, &ps);
    std::vector<const ParamSpec*> out;
    for (const ParamSpec& ps : rank.params) {
        auto it = by_name.find(ps.name);
        if (it == by_name.end()) throw std::logic_error("the whole model has no tensor " + ps.name);
        out.push_back(it->second);
    }
    return out;
}

// Calls f(local element, element of the whole flat buffer) for every element of the rank's
// tensors that lies in the whole tensor (beyond it: vocabulary padding).
template <class F>
void for_each_element(const Program& whole, const Program& rank, F&& f) {
    const std::vector<const ParamSpec*> all = whole_tensors(whole, rank);
    for (std::size_t i = 0; i < rank.params.size(); ++i) {
        const ParamSpec &mine = rank.params[i], &w = *all[i];
        for (std::int64_t r = 0; r < mine.rows; ++r)
            for (std::int64_t c = 0; c < mine.cols; ++c) {
                const std::int64_t g = mine.global_index(r, c);
                if (g >= 0 && g < w.numel())
                    f(static_cast<std::size_t>(mine.offset + r * mine.cols + c), static_cast<std::size_t>(w.offset + g));
            }
    }
}

// The loopback groups of a plan's ranks: for each kind (CommGroup), one group per key
// (Program::group_key), each rank its group_rank in it. The embedding group exists with a tied
// word embedding across pipeline stages only, between the first and the last stage.
class HostRankGroups {
public:
    explicit HostRankGroups(const std::vector<Program>& ranks) {
        for (const Program& P : ranks)
            for (int k = 0; k < kCommGroups; ++k) {
                const auto g = static_cast<CommGroup>(k);
                if (!member(P, g)) continue;
                auto& slot = groups_[{k, P.group_key(g)}];
                if (!slot) slot = std::make_unique<HostLoopbackGroup>(P.group_size(g));
            }
    }
    std::array<HostCollectives*, kCommGroups> of(const Program& P) {
        std::array<HostCollectives*, kCommGroups> c{};
        for (int k = 0; k < kCommGroups; ++k) {
            const auto g = static_cast<CommGroup>(k);
            if (member(P, g)) c[static_cast<std::size_t>(k)] = &groups_.at({k, P.group_key(g)})->rank(P.group_rank(g));
        }
        return c;
    }
    void abort() {
        for (auto& [key, g] : groups_) g->abort();
    }

private:
    static bool member(const Program& P, CommGroup g) {
        if (g != CommGroup::embedding) return true;
        return P.model.tied_embeddings && P.dims.pp > 1 && (P.dims.first_stage || P.dims.last_stage);
    }
    std::map<std::pair<int, std::int64_t>, std::unique_ptr<HostLoopbackGroup>> groups_;
};

// One rank's steps; its state buffer (the master copy, else the weights) assembled into `full`.
// `fulls`: the layouts its data-parallel group assembles, one per ep rank (the rank's own at its
// ep rank; the others take its units but its experts').
void run_one_rank(const Program& P, const Program& whole, const std::vector<double>& whole_params, std::uint64_t seed,
                  int steps, std::array<HostCollectives*, kCommGroups> comms, RankResult& out,
                  const std::vector<std::vector<double>*>& fulls, std::mutex& assembly) {
    DryBackend backend;
    TrackingAllocator alloc(backend);
    BufferTable table;
    HostRunner run(P, seed, comms);
    run.params = shard_parameters(whole, whole_params, P);
    walk(P, P.setup, alloc, table, &run, "set-up");
    for (int s = 1; s <= steps; ++s) {
        run.set_step(s);
        walk(P, P.step, alloc, table, &run, "step", s);
        out.losses.push_back(run.loss_sum / static_cast<double>(P.dims.rows * P.dims.grad_acc));
    }
    {
        std::lock_guard<std::mutex> lock(assembly);  // ranks write disjoint chunks; the lock orders the copies
        const std::vector<double>& mine = run.buffer(P.master_weights != kNoBuffer ? P.master_weights : P.weights);
        for (std::size_t e = 0; e < fulls.size(); ++e)
            assemble_parameters(P, mine, *fulls[e], static_cast<std::int64_t>(e) != P.group_rank(CommGroup::ep));
    }
    walk(P, P.teardown, alloc, table, &run, "teardown");
}

}  // namespace

std::vector<double> shard_parameters(const Program& whole, const std::vector<double>& whole_params, const Program& rank) {
    std::vector<double> out(static_cast<std::size_t>(rank.param_elements), 0.0);
    for_each_element(whole, rank, [&](std::size_t mine, std::size_t w) { out[mine] = whole_params[w]; });
    return out;
}

void unshard_parameters(const Program& whole, const Program& rank, const std::vector<double>& mine, std::vector<double>& out) {
    for_each_element(whole, rank, [&](std::size_t m, std::size_t w) { out[w] = mine[m]; });
}

std::vector<RankResult> run_host_ranks(const Program& whole, const std::vector<Program>& ranks,
                                       const std::vector<double>& whole_params, std::uint64_t seed, int steps) {
    const std::size_t n = ranks.size();
    if (static_cast<std::int64_t>(n) != ranks.front().plan.gpus()) throw std::logic_error("run_host_ranks: one program per rank");
    HostRankGroups groups(ranks);
    std::vector<RankResult> out(n);
    std::exception_ptr first_error;  // the failure that made the others abort
    // Per data-parallel group (a tensor-parallel rank of a stage) and ep rank (the experts it holds),
    // its full layout from its ranks' shards.
    std::map<std::pair<std::int64_t, std::int64_t>, std::vector<double>> per_group;
    for (const Program& P : ranks)
        per_group[{P.group_key(CommGroup::dp), P.group_rank(CommGroup::ep)}].assign(static_cast<std::size_t>(P.param_elements), 0.0);
    auto fulls_of = [&](const Program& P) {
        std::vector<std::vector<double>*> v;
        for (std::int64_t e = 0; e < P.group_size(CommGroup::ep); ++e) v.push_back(&per_group.at({P.group_key(CommGroup::dp), e}));
        return v;
    };
    std::mutex assembly;
    auto body = [&](std::size_t r) {
        try {
            const Program& P = ranks[r];
            run_one_rank(P, whole, whole_params, seed, steps, groups.of(P), out[r], fulls_of(P), assembly);
        } catch (...) {
            {
                std::lock_guard<std::mutex> lock(assembly);
                if (!first_error) first_error = std::current_exception();
            }
            groups.abort();
        }
    };
    std::vector<std::thread> threads;
    for (std::size_t r = 1; r < n; ++r) threads.emplace_back(body, r);
    body(0);
    for (auto& t : threads) t.join();
    if (first_error) std::rethrow_exception(first_error);
    std::vector<double> full(static_cast<std::size_t>(whole.param_elements), 0.0);
    for (const Program& P : ranks)  // one rank per set of experts: those of the first ep block (edp rank 0)
        if (P.group_rank(CommGroup::edp) == 0)
            unshard_parameters(whole, P, per_group.at({P.group_key(CommGroup::dp), P.group_rank(CommGroup::ep)}), full);
    for (auto& r : out) r.updated = full;
    return out;
}

}  // namespace preflight::runtime
