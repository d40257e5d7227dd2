// The DeviceRunner's state ops (device_runner.hpp): set-up of the parameters (whole, or this
// rank's shards under ZeRO), the gradients and loss zeroed, and the optimizer over the rank's
// regions (program.hpp optimizer_regions).
#include <algorithm>
#include <cmath>
#include <string>

#include "device_runner.hpp"

namespace preflight::runtime::cuda {

namespace {

std::size_t bytes_of(const Program& P, BufferId b) {
    return static_cast<std::size_t>(P.buffers[static_cast<std::size_t>(b)].bytes());
}

// How a tensor starts: norm weights 1, other vectors 0, matrices normal (GPT-2 initialisation;
// the residual projections scaled by 1/sqrt(2 L), GPT-2 paper, sec. 2.3).
struct InitRule {
    bool fill = true;
    float value = 0, std_dev = 0;
    std::uint64_t seed = 0;
    std::int64_t valid_rows = 0;  // rows of the whole tensor initialised (the vocabulary's padding rows stay 0)
};

// FNV-1a over the tensor's name: the name is the model's (layers.<model index>., word_embedding on
// every stage that keeps a copy), so a tensor starts alike in every rank's program, whatever
// stage, tensor-parallel slice or shard holds it (a rank-local index would not: a later pipeline
// stage's first layer would start as the model's first).
std::uint64_t name_key(const std::string& name) {
    std::uint64_t h = 1469598103934665603ull;
    for (const unsigned char c : name) h = (h ^ c) * 1099511628211ull;
    return h;
}

InitRule init_rule(const Program& P, std::size_t i, std::uint64_t seed) {
    const ParamSpec& ps = P.params[i];
    InitRule r;
    r.valid_rows = ps.global_rows;
    if (ps.cols == 1) {
        r.value = ps.norm_weight ? 1.f : 0.f;
        return r;
    }
    const bool resid = ps.name.find("o_proj") != std::string::npos || ps.name.find("down_proj") != std::string::npos ||
                       ps.name.find("fc2") != std::string::npos;
    // L is the model's depth, not the stage's (Dims::layers under pipeline parallelism).
    const double resid_std = P.hyper.init_std / std::sqrt(2.0 * static_cast<double>(P.model.layers));
    r.fill = false;
    r.std_dev = static_cast<float>(resid ? resid_std : P.hyper.init_std);
    r.seed = mix64(seed ^ mix64(name_key(ps.name)));
    const auto id = static_cast<ParamId>(i);
    if (id == P.wte || id == P.head) r.valid_rows = P.dims.vocab;
    return r;
}

// Local elements [lo, hi) of tensor `ps` (w / master point at element lo): a fill, or for each of
// the rank's row blocks the normal values of the whole tensor's elements there.
template <class T>
void init_span(const ParamSpec& ps, const InitRule& r, T* w, float* master, std::int64_t lo, std::int64_t hi,
               cudaStream_t s) {
    if (hi <= lo) return;
    if (r.fill) {
        launch_fill<T>(w, master, hi - lo, r.value, s);
        return;
    }
    for (const RowBlock& b : ps.row_blocks) {
        const std::int64_t rows = std::clamp<std::int64_t>(r.valid_rows - b.global_begin, 0, b.rows);
        const std::int64_t a = std::max(lo, b.local_begin * ps.cols), e = std::min(hi, (b.local_begin + rows) * ps.cols);
        if (e <= a) continue;
        const InitMap m{b.global_begin * ps.global_cols + ps.col_begin, a - b.local_begin * ps.cols, ps.cols, ps.global_cols};
        launch_init_normal<T>(w ? w + (a - lo) : nullptr, master ? master + (a - lo) : nullptr, e - a, r.std_dev, r.seed, s, m);
    }
}

}  // namespace

// Every tensor's elements go where this rank keeps them: the full weights (ZeRO-0/1/2) or the
// rank's chunk of its unit in the weights shard (ZeRO-3); the fp32 master copy whole (ZeRO-0)
// or the rank's chunk in the master shard. Element e of a tensor gets the same value in every
// layout and on every tensor-parallel rank (launch_init_normal's InitMap), so all ranks start
// from one model.
template <class T>
void DeviceRunner::init_parameters(const BufferTable& t) {
    T* weights = base<T>(t, P.weights);
    float* master = base<float>(t, P.master_weights);
    const bool shard_weights = P.plan.zero == zero_weights, shard_master = P.layout.sharded();
    for (std::size_t i = 0; i < P.params.size(); ++i) {
        const ParamSpec& ps = P.params[i];
        const InitRule r = init_rule(P, i, seed_);
        if (!shard_weights)
            init_span<T>(ps, r, weights + ps.offset, master && !shard_master ? master + ps.offset : nullptr, 0, ps.numel(),
                         stream);
        if (!shard_weights && !(shard_master && master)) continue;
        // This rank's chunk of the tensor's unit: [first, first + chunk) of the full layout.
        const ShardUnit& u = P.layout.units[static_cast<std::size_t>(ps.unit)];
        const std::int64_t first = u.begin + P.unit_rank(u) * u.chunk;
        const std::int64_t lo = std::max(first, ps.offset), hi = std::min(first + u.chunk, ps.offset + ps.numel());
        const std::int64_t at = u.shard_begin + (lo - first);
        if (hi <= lo) continue;
        init_span<T>(ps, r, shard_weights ? weights + at : nullptr, shard_master && master ? master + at : nullptr,
                     lo - ps.offset, hi - ps.offset, stream);
    }
}

void DeviceRunner::init(const BufferTable& t) {
    gemm_.set_workspace(t[static_cast<std::size_t>(P.gemm_workspace)], static_cast<std::size_t>(kRuntimeGemmWorkspaceBytes));
    if (attention_) attention_->set_shared_workspace(t[static_cast<std::size_t>(P.gemm_workspace)]);
    PF_CUDA_CHECK(cudaMemsetAsync(t[static_cast<std::size_t>(P.weights)], 0, bytes_of(P, P.weights), stream));
    if (P.master_weights != kNoBuffer)
        PF_CUDA_CHECK(cudaMemsetAsync(t[static_cast<std::size_t>(P.master_weights)], 0, bytes_of(P, P.master_weights), stream));
    if (P.weight == DType::f32)
        init_parameters<float>(t);
    else
        init_parameters<bf16>(t);
    zero_gradients(t);
    for (BufferId b : {P.moment1, P.moment2})
        if (b != kNoBuffer) PF_CUDA_CHECK(cudaMemsetAsync(t[static_cast<std::size_t>(b)], 0, bytes_of(P, b), stream));
    if (P.rope_cos != kNoBuffer) {
        // Tables computed on the host in double by the CPU reference's own function (the
        // model's rope_theta and rope_scaling), so both use the same frequencies.
        const std::size_t n = static_cast<std::size_t>(d.s * d.head_dim);
        std::vector<double> c(n), sn(n);
        // Under context parallelism row t is at the rank's position cp_position(t) (rope_tables_cp).
        const ref::AttnShape a = ref::attn_shape(d);
        ref::rope_tables_cp(c.data(), sn.data(), a,
                            ref::rope_frequencies(d.rope_dims, P.hyper.rope_base, P.hyper.rope_scaling, d.s_full,
                                                  P.model.max_positions));
        std::vector<float> cf(c.begin(), c.end()), sf(sn.begin(), sn.end());
        PF_CUDA_CHECK(cudaMemcpyAsync(base<float>(t, P.rope_cos), cf.data(), n * 4, cudaMemcpyHostToDevice, stream));
        PF_CUDA_CHECK(cudaMemcpyAsync(base<float>(t, P.rope_sin), sf.data(), n * 4, cudaMemcpyHostToDevice, stream));
        PF_CUDA_CHECK(cudaStreamSynchronize(stream));  // the host vectors go out of scope
    }
}

// The gradient buffers (full, fp32 accumulation, or this rank's shard) and the device scalars (loss sum) at 0.
void DeviceRunner::zero_gradients(const BufferTable& t) {
    for (BufferId b : {P.grads, P.grads_fp32, P.grad_shard})
        if (b != kNoBuffer) PF_CUDA_CHECK(cudaMemsetAsync(t[static_cast<std::size_t>(b)], 0, bytes_of(P, b), stream));
    PF_CUDA_CHECK(cudaMemsetAsync(t[static_cast<std::size_t>(P.scalars)], 0, kRuntimeScalarsBytes, stream));
}

namespace {

OptimizerArgs region_args(const Program& P, const OptimizerRegion& r, const BufferTable& t, std::int64_t step) {
    const TrainHyper& hp = P.hyper;
    auto at = [&](const ParamRef& ref) {
        const DType dt = P.buffers[static_cast<std::size_t>(ref.buffer)].dtype;
        return static_cast<char*>(t[static_cast<std::size_t>(ref.buffer)]) + ref.offset * dtype_bytes(dt);
    };
    OptimizerArgs a;
    a.grad = at(r.grad);
    a.grad_f32 = P.buffers[static_cast<std::size_t>(r.grad.buffer)].dtype == DType::f32;
    a.master = P.master_weights != kNoBuffer ? static_cast<float*>(t[static_cast<std::size_t>(P.master_weights)]) + r.state : nullptr;
    a.weights_f32 = P.weight == DType::f32;
    a.weights = at(r.weights);
    a.m = static_cast<float*>(t[static_cast<std::size_t>(P.moment1)]) + r.state;
    a.v = P.moment2 != kNoBuffer ? static_cast<float*>(t[static_cast<std::size_t>(P.moment2)]) + r.state : nullptr;
    a.lr = static_cast<float>(hp.lr);
    a.beta1 = static_cast<float>(hp.beta1);
    a.beta2 = static_cast<float>(hp.beta2);
    a.eps = static_cast<float>(hp.eps);
    a.weight_decay = static_cast<float>(hp.weight_decay);
    a.momentum = static_cast<float>(hp.momentum);
    a.step = step;
    return a;
}

}  // namespace

// grad_accumulate: the fp32 gradients += the 16-bit ones, then zeroed; over v0 (a model chunk's
// units) when the op has one, else every parameter.
void DeviceRunner::accumulate_grads(const Op& op, const BufferTable& t) {
    const bool region = op.v[0].buffer != kNoBuffer;
    const std::int64_t from = region ? op.v[0].offset : 0, count = region ? op.v[0].cols : P.param_elements;
    launch_grad_accumulate(base<float>(t, P.grads_fp32) + from, base<bf16>(t, P.grads) + from, count, stream);
}

// AdamW in as few launches as possible: a region at a time, up to kAdamwMaxTensors tensors per
// launch (a tensor's alignment padding included).

void DeviceRunner::adamw_region(const OptimizerRegion& r, const BufferTable& t) {
    const OptimizerArgs a = region_args(P, r, t, step_);
    for (std::size_t k = 0; k < r.tensors.size(); k += kAdamwMaxTensors) {
        const std::size_t n = std::min<std::size_t>(kAdamwMaxTensors, r.tensors.size() - k);
        const std::int64_t end = k + n < r.tensors.size() ? r.tensors[k + n].first : r.count;
        i64 begin[kAdamwMaxTensors];
        bool flags[kAdamwMaxTensors];
        for (std::size_t j = 0; j < n; ++j) {
            begin[j] = r.tensors[k + j].first;
            flags[j] = r.tensors[k + j].second;
        }
        launch_adamw_multi(a, begin, flags, static_cast<int>(n), end, stream);
    }
}

void DeviceRunner::sgd_region(const OptimizerRegion& r, const BufferTable& t) {
    const OptimizerArgs base_args = region_args(P, r, t, step_);
    const int gb = base_args.grad_f32 ? 4 : 2, wb = base_args.weights_f32 ? 4 : 2;
    for (std::size_t k = 0; k < r.tensors.size(); ++k) {
        const std::int64_t b = r.tensors[k].first, e = k + 1 < r.tensors.size() ? r.tensors[k + 1].first : r.count;
        OptimizerArgs a = base_args;
        a.grad = static_cast<const char*>(a.grad) + b * gb;
        a.weights = static_cast<char*>(a.weights) + b * wb;
        if (a.master) a.master += b;
        a.m += b;
        a.n = e - b;
        a.weight_decay = r.tensors[k].second ? base_args.weight_decay : 0.f;
        launch_sgd(a, stream);
    }
}

void DeviceRunner::optimizer(const BufferTable& t) {
    for (const OptimizerRegion& r : optimizer_regions(P)) {
        if (P.plan.optimizer == Optimizer::adamw)
            adamw_region(r, t);
        else
            sgd_region(r, t);
    }
}

template void DeviceRunner::init_parameters<float>(const BufferTable&);
template void DeviceRunner::init_parameters<bf16>(const BufferTable&);

}  // namespace preflight::runtime::cuda
