// The step program, executed op by op on the host in double (this file's HostRunner
// mirrors runtime/cuda/executor.cpp's reading of each op's views, with the CPU reference
// kernels), gives the whole-model reference's loss and gradients for every recompute mode,
// attention kind, precision recipe and family. Buffers are NaN-poisoned when allocated and
// again when freed, so a program that reads a buffer before writing it or after freeing it
// yields NaN gradients. This is what the GPU gradient test relies on (the device runs the
// same program), checked without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>

#include <nlohmann/json.hpp>

#include "catalog_fixture.hpp"
#include "preflight/runtime/reference.hpp"
#include "preflight/runtime/reference_model.hpp"
#include "preflight/runtime/synthetic.hpp"

namespace preflight::runtime {
namespace {

using Vec = std::vector<double>;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

class HostRunner {
public:
    HostRunner(const Program& p, std::uint64_t seed) : P(p), d(p.dims), seed_(seed) {}

    Vec params;  // the weights the set-up op installs
    double loss_sum = 0;

    void walk(const std::vector<Op>& ops, std::int64_t step) {
        for (const Op& op : ops) {
            for (BufferId b : op.alloc) {  // byte buffers (cuBLASLt workspace, device scalars) are not simulated
                const BufferSpec& spec = P.buffers[static_cast<std::size_t>(b)];
                buf_[b].assign(spec.dtype == DType::u8 ? 0 : static_cast<std::size_t>(spec.elements), kNaN);
            }
            run(op, step);
            for (BufferId b : op.free) {
                auto& v = buf_.at(b);
                std::fill(v.begin(), v.end(), kNaN);  // poisoned: a later read shows up as NaN
                freed_.push_back(b);
            }
        }
    }
    const Vec& buffer(BufferId b) { return buf_.at(b); }

private:
    const Program& P;
    const Dims& d;
    std::uint64_t seed_;
    std::map<BufferId, Vec> buf_;
    std::vector<BufferId> freed_;

    double* at(const View& v) { return buf_.at(v.buffer).data() + v.offset; }
    double* w(ParamId id) { return id == kNoParam ? nullptr : buf_.at(P.weights).data() + P.params[static_cast<std::size_t>(id)].offset; }
    double* g(ParamId id) { return id == kNoParam ? nullptr : buf_.at(P.grads).data() + P.params[static_cast<std::size_t>(id)].offset; }
    std::int64_t* tok(const View& v) {  // token ids stored as doubles; converted on use
        ids_.resize(static_cast<std::size_t>(v.rows * v.cols));
        const double* p = at(v);
        for (std::size_t i = 0; i < ids_.size(); ++i) ids_[i] = static_cast<std::int64_t>(p[i]);
        return ids_.data();
    }
    std::vector<std::int64_t> ids_;
    ref::AttnShape shape() const { return {d.b, d.s, d.heads, d.kv_heads, d.head_dim}; }
    bool ln() const { return P.model.norm == NormKind::layernorm; }

    static Vec gather(const double* p, const View& v) {
        Vec o(static_cast<std::size_t>(v.rows * v.cols));
        for (std::int64_t r = 0; r < v.rows; ++r)
            for (std::int64_t c = 0; c < v.cols; ++c) o[static_cast<std::size_t>(r * v.cols + c)] = p[r * v.ld + c];
        return o;
    }
    static void scatter(const Vec& o, double* p, const View& v) {
        for (std::int64_t r = 0; r < v.rows; ++r)
            for (std::int64_t c = 0; c < v.cols; ++c) p[r * v.ld + c] = o[static_cast<std::size_t>(r * v.cols + c)];
    }

    void run(const Op& op, std::int64_t step) {
        const std::int64_t R = d.rows, h = d.h;
        const double eps = P.hyper.norm_eps, scale = 1.0 / std::sqrt(static_cast<double>(d.head_dim));
        const std::int64_t H = d.heads, G = d.heads / d.kv_heads, dh = d.head_dim, C = d.qkv_width, s = d.s;
        switch (op.kind) {
            case OpKind::init_params:
                for (BufferId b : op.alloc) std::fill(buf_[b].begin(), buf_[b].end(), 0.0);
                buf_[P.weights] = params;
                break;
            case OpKind::teardown: break;
            case OpKind::zero_grads:
                std::fill(buf_.at(P.grads).begin(), buf_.at(P.grads).end(), 0.0);
                if (P.grads_fp32 != kNoBuffer) std::fill(buf_.at(P.grads_fp32).begin(), buf_.at(P.grads_fp32).end(), 0.0);
                loss_sum = 0;
                break;
            case OpKind::tokens:
            case OpKind::labels: {
                double* p = at(op.v[0]);
                const int shift = op.kind == OpKind::labels ? 1 : 0;
                for (std::int64_t i = 0; i < d.b * s; ++i)
                    p[i] = static_cast<double>(synthetic_token(seed_, step, op.phase.micro_batch, i / s, i % s + shift, d.vocab));
                break;
            }
            case OpKind::embedding_fwd: ref::embedding_fwd(tok(op.v[0]), w(op.p0), w(op.p1), at(op.v[1]), d.b, s, h); break;
            case OpKind::embedding_bwd: ref::embedding_bwd(tok(op.v[0]), at(op.v[1]), g(op.p0), g(op.p1), d.b, s, h); break;
            case OpKind::norm_fwd:
                if (ln())
                    ref::layernorm_fwd(at(op.v[0]), w(op.p0), w(op.p1), at(op.v[1]), R, h, eps);
                else
                    ref::rmsnorm_fwd(at(op.v[0]), w(op.p0), at(op.v[1]), R, h, eps);
                break;
            case OpKind::norm_bwd:
                if (ln())
                    ref::layernorm_bwd(at(op.v[0]), w(op.p0), at(op.v[1]), at(op.v[2]), g(op.p0), g(op.p1), R, h, eps, op.accumulate);
                else
                    ref::rmsnorm_bwd(at(op.v[0]), w(op.p0), at(op.v[1]), at(op.v[2]), g(op.p0), R, h, eps, op.accumulate);
                break;
            case OpKind::linear_fwd: {  // Y = X W^T (+ b) (+ residual)
                const View &x = op.v[0], &y = op.v[1];
                const Vec X = gather(at(x), x);
                Vec Y(static_cast<std::size_t>(y.rows * y.cols)), Rs;
                if (op.v[2].buffer != kNoBuffer) Rs = gather(at(op.v[2]), op.v[2]);
                ref::linear_fwd(X.data(), w(op.p0), w(op.p1), Rs.empty() ? nullptr : Rs.data(), Y.data(), y.rows, y.cols, x.cols);
                scatter(Y, at(y), y);
                break;
            }
            case OpKind::linear_bwd_data: {  // dX (=|+=) dY W
                const View &dy = op.v[0], &dx = op.v[1];
                const Vec DY = gather(at(dy), dy);
                Vec DX(static_cast<std::size_t>(dx.rows * dx.cols), 0.0);
                const double* W = w(op.p0);  // [N = dy.cols, K = dx.cols]
                for (std::int64_t i = 0; i < dy.rows; ++i)
                    for (std::int64_t j = 0; j < dy.cols; ++j)
                        for (std::int64_t k = 0; k < dx.cols; ++k)
                            DX[static_cast<std::size_t>(i * dx.cols + k)] += DY[static_cast<std::size_t>(i * dy.cols + j)] * W[j * dx.cols + k];
                if (op.accumulate) {
                    const Vec old = gather(at(dx), dx);
                    for (std::size_t i = 0; i < DX.size(); ++i) DX[i] += old[i];
                }
                scatter(DX, at(dx), dx);
                break;
            }
            case OpKind::linear_bwd_weight: {  // dW += dY^T X, db += colsum(dY)
                const View &dy = op.v[0], &x = op.v[1];
                const Vec DY = gather(at(dy), dy), X = gather(at(x), x);
                Vec DX(static_cast<std::size_t>(x.rows * x.cols));
                ref::linear_bwd(DY.data(), X.data(), w(op.p0), DX.data(), g(op.p0), g(op.p1), dy.rows, dy.cols, x.cols);
                break;
            }
            case OpKind::rope_fwd: ref::rope_fwd(at(op.v[0]), shape(), P.hyper.rope_base); break;
            case OpKind::rope_bwd: ref::rope_bwd(at(op.v[0]), shape(), P.hyper.rope_base); break;
            case OpKind::flash_fwd: ref::attention_fwd(at(op.v[0]), at(op.v[1]), at(op.v[2]), shape()); break;
            case OpKind::flash_bwd: {
                ref::attention_bwd(at(op.v[0]), at(op.v[3]), at(op.v[4]), shape());
                const double* o = at(op.v[1]);  // the kernel reads O and the log-sum-exp: they must be live
                const double* l = at(op.v[2]);
                for (std::int64_t i = 0; i < R * d.q_width; ++i) ASSERT_FALSE(std::isnan(o[i])) << "flash bwd reads a dead O";
                for (std::int64_t i = 0; i < d.b * H * s; ++i) ASSERT_FALSE(std::isnan(l[i])) << "flash bwd reads a dead lse";
                break;
            }
            // Eager attention over [b, H, s, s] score rows (row (bb*H + hh)*s + t); GQA: head hh reads KV head hh / G.
            case OpKind::eager_scores: {
                const double* qkv = at(op.v[0]);
                double* S = at(op.v[1]);
                for (std::int64_t bb = 0; bb < d.b; ++bb)
                    for (std::int64_t hh = 0; hh < H; ++hh)
                        for (std::int64_t t = 0; t < s; ++t)
                            for (std::int64_t u = 0; u < s; ++u) {
                                double acc = 0;
                                for (std::int64_t i = 0; i < dh; ++i)
                                    acc += qkv[(bb * s + t) * C + hh * dh + i] * qkv[(bb * s + u) * C + d.q_width + (hh / G) * dh + i];
                                S[((bb * H + hh) * s + t) * s + u] = scale * acc;
                            }
                break;
            }
            case OpKind::eager_softmax: {
                const double* S = at(op.v[0]);
                double* Pr = at(op.v[1]);
                for (std::int64_t r = 0; r < op.v[0].rows; ++r) {
                    const std::int64_t t = r % s;
                    double mx = -INFINITY, sum = 0;
                    for (std::int64_t u = 0; u <= t; ++u) mx = std::max(mx, S[r * s + u]);
                    for (std::int64_t u = 0; u <= t; ++u) sum += std::exp(S[r * s + u] - mx);
                    for (std::int64_t u = 0; u < s; ++u) Pr[r * s + u] = u <= t ? std::exp(S[r * s + u] - mx) / sum : 0.0;
                }
                break;
            }
            case OpKind::eager_pv: {
                const double *Pr = at(op.v[0]), *qkv = at(op.v[1]);
                double* O = at(op.v[2]);
                for (std::int64_t bb = 0; bb < d.b; ++bb)
                    for (std::int64_t hh = 0; hh < H; ++hh)
                        for (std::int64_t t = 0; t < s; ++t)
                            for (std::int64_t i = 0; i < dh; ++i) {
                                double acc = 0;
                                for (std::int64_t u = 0; u < s; ++u)
                                    acc += Pr[((bb * H + hh) * s + t) * s + u] *
                                           qkv[(bb * s + u) * C + d.q_width + d.kv_width + (hh / G) * dh + i];
                                O[(bb * s + t) * d.q_width + hh * dh + i] = acc;
                            }
                break;
            }
            case OpKind::eager_dp: {
                const double *dO = at(op.v[0]), *qkv = at(op.v[1]);
                double* dP = at(op.v[2]);
                for (std::int64_t bb = 0; bb < d.b; ++bb)
                    for (std::int64_t hh = 0; hh < H; ++hh)
                        for (std::int64_t t = 0; t < s; ++t)
                            for (std::int64_t u = 0; u < s; ++u) {
                                double acc = 0;
                                for (std::int64_t i = 0; i < dh; ++i)
                                    acc += dO[(bb * s + t) * d.q_width + hh * dh + i] *
                                           qkv[(bb * s + u) * C + d.q_width + d.kv_width + (hh / G) * dh + i];
                                dP[((bb * H + hh) * s + t) * s + u] = acc;
                            }
                break;
            }
            case OpKind::eager_softmax_bwd: ref::softmax_bwd(at(op.v[0]), at(op.v[1]), at(op.v[2]), op.v[0].rows, s); break;
            case OpKind::eager_dqkv: {
                const double *dS = at(op.v[0]), *Pr = at(op.v[1]), *dO = at(op.v[2]), *qkv = at(op.v[3]);
                double* dqkv = at(op.v[4]);
                std::fill(dqkv, dqkv + R * C, 0.0);
                for (std::int64_t bb = 0; bb < d.b; ++bb)
                    for (std::int64_t hh = 0; hh < H; ++hh)
                        for (std::int64_t t = 0; t < s; ++t)
                            for (std::int64_t u = 0; u < s; ++u) {
                                const std::int64_t e = ((bb * H + hh) * s + t) * s + u;
                                const std::int64_t q = (bb * s + t) * C + hh * dh, k = (bb * s + u) * C + d.q_width + (hh / G) * dh;
                                const std::int64_t v = k + d.kv_width, o = (bb * s + t) * d.q_width + hh * dh;
                                for (std::int64_t i = 0; i < dh; ++i) {
                                    dqkv[q + i] += scale * dS[e] * qkv[k + i];
                                    dqkv[k + i] += scale * dS[e] * qkv[q + i];
                                    dqkv[v + i] += Pr[e] * dO[o + i];
                                }
                            }
                break;
            }
            case OpKind::swiglu_fwd: ref::swiglu_fwd(at(op.v[0]), at(op.v[1]), R, d.ffn); break;
            case OpKind::swiglu_bwd: {  // v0: dact in the first f of 2f columns in, dgate|dup out; v1: gate|up
                Vec dact(static_cast<std::size_t>(R * d.ffn)), dgu(static_cast<std::size_t>(R * 2 * d.ffn));
                const double* in = at(op.v[0]);
                for (std::int64_t r = 0; r < R; ++r)
                    for (std::int64_t c = 0; c < d.ffn; ++c) dact[static_cast<std::size_t>(r * d.ffn + c)] = in[r * 2 * d.ffn + c];
                ref::swiglu_bwd(at(op.v[1]), dact.data(), dgu.data(), R, d.ffn);
                std::copy(dgu.begin(), dgu.end(), at(op.v[0]));
                break;
            }
            case OpKind::gelu_fwd: ref::gelu_fwd(at(op.v[0]), at(op.v[1]), R * d.ffn); break;
            case OpKind::gelu_bwd: {
                const Vec dy(at(op.v[0]), at(op.v[0]) + R * d.ffn);
                ref::gelu_bwd(at(op.v[1]), dy.data(), at(op.v[0]), R * d.ffn);
                break;
            }
            case OpKind::cross_entropy: {
                const Vec z(at(op.v[0]), at(op.v[0]) + R * d.vocab_padded);
                ref::cross_entropy(z.data(), tok(op.v[1]), at(op.v[2]), at(op.v[0]), R, d.vocab, d.vocab_padded,
                                   1.0 / static_cast<double>(R * d.grad_acc));
                break;
            }
            case OpKind::loss_accumulate:
                for (std::int64_t i = 0; i < R; ++i) loss_sum += at(op.v[0])[i];
                break;
            case OpKind::grad_accumulate: {
                Vec& acc = buf_.at(P.grads_fp32);
                Vec& gr = buf_.at(P.grads);
                for (std::size_t i = 0; i < acc.size(); ++i) acc[i] += gr[i], gr[i] = 0.0;
                break;
            }
            case OpKind::optimizer: break;  // gradients are what is compared
        }
    }
};

ModelConfig micro_llama() { return preflight::test::llama_model(16, 2, 4, 2, 24, 13, 16); }
ModelConfig micro_gpt() { return preflight::test::gpt_model(16, 2, 2, 13, 16); }

TEST(ProgramReference, HostExecutionOfTheProgramGivesTheReferenceGradients) {
    int cases = 0;
    for (const ModelConfig& m : {micro_llama(), micro_gpt()})
        for (auto rc : all_recomputes())
            for (auto at : {AttentionKind::flash, AttentionKind::eager})
                for (auto pr : {Precision::fp32, Precision::bf16_mixed, Precision::bf16_mixed_fp32_grads, Precision::bf16}) {
                    Plan p;
                    p.seq = 6;
                    p.mbs = 2;
                    p.grad_acc = 2;
                    p.recompute = rc;
                    p.attention = at;
                    p.precision = pr;
                    const Program P = build_program(m, p);
                    HostRunner host(P, 77);
                    host.params = ref::random_params(P, 5, 0.4);
                    host.walk(P.setup, 0);
                    host.walk(P.step, 1);
                    const Vec& got = host.buffer(P.grads_fp32 != kNoBuffer ? P.grads_fp32 : P.grads);
                    const double loss = host.loss_sum / static_cast<double>(P.dims.rows * P.dims.grad_acc);
                    Vec want;
                    const double want_loss = ref::model_loss(P, host.params, ref::synthetic_batches(P, 77, 1), &want);
                    const std::string what = m.name + " " + std::string(to_string(rc)) + " " + std::string(to_string(at)) +
                                             " " + std::string(to_string(pr));
                    ASSERT_EQ(got.size(), want.size()) << what;
                    EXPECT_NEAR(loss, want_loss, 1e-12 * want_loss) << what;
                    double worst = 0, gmax = 0;
                    for (std::size_t i = 0; i < got.size(); ++i) {
                        ASSERT_FALSE(std::isnan(got[i])) << what << ": NaN gradient at " << i << " (a dead buffer was read)";
                        worst = std::max(worst, std::abs(got[i] - want[i]));
                        gmax = std::max(gmax, std::abs(want[i]));
                    }
                    // Same double arithmetic in a different order: agreement to ~1e-15 relative.
                    EXPECT_LE(worst, 1e-12 * gmax) << what << ": worst " << worst << " of max " << gmax;
                    host.walk(P.teardown, 1);
                    ++cases;
                }
    EXPECT_EQ(cases, 2 * 3 * 2 * 4);
}

}  // namespace
}  // namespace preflight::runtime
