// Launchers of the runtime kernels (one .cu file each under runtime/kernels/). The
// CPU reference of each lives in host code: preflight/runtime/reference.hpp.
// T is float or __nv_bfloat16; every launcher runs on `stream` and checks the launch.
// Host-includable (tests call the launchers from plain C++).
#pragma once

#include <climits>
#include <cstdint>

#include "check.hpp"
#include "preflight/planner/qk_norm_groups.hpp"

namespace preflight::runtime::cuda {

using i64 = std::int64_t;

// synthetic.cu: tokens [b, s] (positions 0..s-1) or labels (positions 1..s) from the seed, each
// plus `first` (an emulated tensor-parallel rank's own vocabulary rows: token_window, program.hpp);
// under context parallelism those at cp rank `cp_rank`'s positions (context_parallel.hpp).
void launch_synthetic_tokens(std::int64_t* out, i64 b, i64 s, i64 vocab, std::uint64_t seed, i64 step, i64 micro_batch,
                             bool labels, cudaStream_t stream, i64 first = 0, i64 cp = 1, i64 cp_rank = 0);

// init.cu: parameter initialisation, fills, RoPE tables, fp32 gradient accumulation.
// Element i is element local0 + i of a [*, cols] slice of the tensor whose (r, c) is the whole
// tensor's element first + r * global_cols + c (a ZeRO shard and / or tensor-parallel slice; the
// defaults: element i is the tensor's element i). w or master may be null.
struct InitMap {
    i64 first = 0, local0 = 0, cols = 1, global_cols = 1;
};
template <class T>
void launch_init_normal(T* w, float* master, i64 n, float std_dev, std::uint64_t seed, cudaStream_t stream,
                        InitMap map = {});
template <class T>
void launch_fill(T* w, float* master, i64 n, float value, cudaStream_t stream);
void launch_rope_tables(float* cos_t, float* sin_t, i64 s, i64 d, double base, cudaStream_t stream);
// acc += g; g = 0
void launch_grad_accumulate(float* acc, bf16* g, i64 n, cudaStream_t stream);

// accumulate.cu: dst[i] += src[i] in fp32, rounded to dst's type (a reduce-scattered gradient
// chunk into the rank's gradient shard). TD/TS: (float, bf16), (bf16, bf16), (float, float).
template <class TD, class TS>
void launch_accumulate(TD* dst, const TS* src, i64 n, cudaStream_t stream);

// loopback.cu: the collectives of `world` ranks of one process on one device, over every rank's
// buffers at once (the loopback backend), summing in rank order in fp32 (CPU reference:
// HostLoopbackGroup, host_runner.hpp). bufs[r] / ins[r]: rank r's buffer / gather input.
inline constexpr int kLoopbackMaxRanks = 64;
enum class LoopbackKind { all_reduce, reduce_scatter, all_gather };
enum class LoopbackReduce { mean, sum, max };  // program.hpp's ReduceOp
struct LoopbackBuffers {
    void* bufs[kLoopbackMaxRanks];
    const void* ins[kLoopbackMaxRanks];
};
// all_reduce: `count` elements of every buffer become their mean, sum or max; reduce_scatter:
// chunk k (count elements at k * count) of rank k's buffer becomes the reduction of every rank's
// chunk k; all_gather: chunk k of every rank's buffer receives rank k's `count` input elements.
template <class T>
void launch_loopback(LoopbackKind kind, LoopbackReduce op, const LoopbackBuffers& b, int world, i64 count,
                     cudaStream_t stream);

// amax.cu and fp8_cast.cu: fp8 current scaling (program_fp8.cpp). amax: max |x| over a
// [rows, cols] view (row stride ld) into *amax. fp8_cast: x times max_fp8 / slot[0] (the amax),
// rounded (E4M3, or E5M2 when e5m2) with saturation into row_out [rows, cols] and / or col_out
// [cols, rows] (either may be null); slot[1] receives the dequantization factor.
template <class T>
void launch_amax(const T* x, i64 rows, i64 cols, i64 ld, float* amax, cudaStream_t stream);
template <class T>
void launch_fp8_cast(const T* x, i64 rows, i64 cols, i64 ld, float* slot, bool e5m2, std::uint8_t* row_out,
                     std::uint8_t* col_out, cudaStream_t stream);

// embedding.cu. wte holds the tokens [vocab_begin, vocab_begin + vocab_rows) (a tensor-parallel
// rank's vocabulary rows); other tokens embed to 0 and get no gradient. wpe / dwpe may be null.
inline constexpr i64 kAllVocabRows = INT64_MAX;
template <class T>
void launch_embedding_fwd(const std::int64_t* tokens, const T* wte, const T* wpe, T* x, i64 b, i64 s, i64 h,
                          cudaStream_t stream, i64 vocab_begin = 0, i64 vocab_rows = kAllVocabRows);
// Deterministic: one block per distinct token sums its rows in order (no atomics).
template <class T>
void launch_embedding_bwd(const std::int64_t* tokens, const T* dx, T* dwte, T* dwpe, i64 b, i64 s, i64 h,
                          cudaStream_t stream, i64 vocab_begin = 0, i64 vocab_rows = kAllVocabRows);

// norm.cu: LayerNorm (bias may be null) or RMSNorm (layernorm = false), plus a residual `res` (may be null).
template <class T>
void launch_norm_fwd(const T* x, const T* w, const T* b, const T* res, T* y, i64 rows, i64 h, float eps,
                     bool layernorm, cudaStream_t stream);
// dx (= or +=), stats scratch [rows, 2] fp32, dw += , db += (db may be null).
template <class T>
void launch_norm_bwd(const T* x, const T* w, const T* dy, T* dx, float* stats, T* dw, T* db, i64 rows, i64 h,
                     float eps, bool layernorm, bool accumulate, cudaStream_t stream);

// head_norm.cu: RMSNorm of the Q and K columns of qkv [rows, ld] over the groups `g` (Qwen3's per
// head, OLMo's per projection: QkNormGroups), in place; `saved` [rows, g.columns()] receives the input.
// The backward reads it, writes the input gradient over dqkv's Q|K columns, its fp32 scratch (rows x
// g.per_row() rstd, then slices x g.weights() partial sums: runtime_head_norm_scratch_elements), and
// dwq, dwk +=.
template <class T>
void launch_head_norm_fwd(T* qkv, T* saved, const T* wq, const T* wk, i64 rows, i64 ld, const QkNormGroups& g,
                          float eps, cudaStream_t stream);
template <class T>
void launch_head_norm_bwd(const T* saved, T* dqkv, float* scratch, const T* wq, const T* wk, T* dwq, T* dwk, i64 rows,
                          i64 ld, const QkNormGroups& g, float eps, cudaStream_t stream);

// bias_grad.cu: db[n] += sum over rows of dy[rows, n] (row stride ld).
template <class T>
void launch_bias_grad(const T* dy, T* db, i64 rows, i64 n, i64 ld, cudaStream_t stream);

// rope.cu: in place on the Q and K parts of qkv [rows, (heads + 2 kv_heads) d], the first rot (even)
// dimensions of each head; tables [s, d]; inverse = backward.
template <class T>
void launch_rope(T* qkv, const float* cos_t, const float* sin_t, i64 b, i64 s, i64 heads, i64 kv_heads, i64 d,
                 i64 rot, bool inverse, cudaStream_t stream);

// gelu.cu (tanh approximation) and swiglu.cu.
template <class T>
void launch_gelu_fwd(const T* x, T* y, i64 n, cudaStream_t stream);
template <class T>  // dx overwrites dy in place allowed (dx == dy)
void launch_gelu_bwd(const T* x, const T* dy, T* dx, i64 n, cudaStream_t stream);
template <class T>
void launch_swiglu_fwd(const T* gu, T* act, i64 rows, i64 f, cudaStream_t stream);
// dgu [rows, 2f]: in: dact in columns [0, f); out: dgate | dup (in place).
template <class T>
void launch_swiglu_bwd(const T* gu, T* dgu, i64 rows, i64 f, cudaStream_t stream);

// moe.cu: the mixture-of-experts MLP (Mixtral's sparse MLP, Jiang et al. 2024, sec. 2.1; program.hpp
// OpKind::moe_*; CPU reference ref::moe_*, reference_moe.hpp, which lays out the i64 routing table
// of rows k (token, choice) pairs: routing_elements(rows, k, E) = 3 rows k + E + 1). Row-major,
// contiguous tensors: logits / dlogits [rows, E] (T), gates / dgates [rows, k] (fp32), x / dx / out
// / res [rows, h], the slots xd / y / dy / dxd [rows k, h] (T). The experts' GEMMs are cuBLASLt
// products per expert (DeviceRunner, device_runner_moe.cpp).
inline constexpr i64 kMoeMaxExperts = 256;  // the routing sort's shared memory (one block)
// Top-k of each row (the lower index first on a tie), gates = softmax over the chosen logits
// (`renormalize`) or over all E at the chosen, and the whole routing table (a stable counting sort by
// expert, deterministic). 1 <= k <= experts.
template <class T>
void launch_moe_route(const T* logits, float* gates, i64* routing, i64 rows, i64 experts, i64 k, bool renormalize,
                      cudaStream_t stream);
// Where the rank's experts' rows are (reference_moe.hpp ExpertSlots): experts first .. first +
// count - 1 of `experts`; capacity 0: the routing's own slots (every expert local), else C rows per
// local expert (its first C pairs, zeros after them; expert parallelism).
struct MoeSlots {
    i64 experts = 0, first = 0, count = 0, capacity = 0;
};
// The rank's expert rows: row local_row(p) = x[p / k] (capacity layout: zeros where unfilled).
template <class T>
void launch_moe_dispatch(const T* x, const i64* routing, i64 rows, i64 k, i64 h, MoeSlots s, T* xd, cudaStream_t stream);
// out[t] = res[t] (res may be null) + sum over the rank's kept pairs of gates[t, j] y[local_row(t k + j)].
template <class T>
void launch_moe_combine(const T* y, const float* gates, const i64* routing, const T* res, i64 rows, i64 k, i64 h,
                        MoeSlots s, T* out, cudaStream_t stream);
// The rank's kept pairs: dy[row] = gates[t, j] dout[t], dgates[t, j] = <dout[t], y[row]>; the others'
// dgates 0; the capacity layout's unfilled rows of dy 0.
template <class T>
void launch_moe_combine_bwd(const T* dout, const T* y, const float* gates, const i64* routing, i64 rows, i64 k, i64 h,
                            MoeSlots s, T* dy, float* dgates, cudaStream_t stream);
// logits null (renormalised gates): dlogits[t, e_j] = g_j (dg_j - sum_m g_m dg_m) for the chosen experts
// e_j, 0 elsewhere; else, p the softmax of the row's logits: dlogits[t, e] = p_e ([e chosen] dg_e -
// sum_m g_m dg_m). Overwritten.
template <class T>
void launch_moe_route_bwd(const float* dgates, const float* gates, const i64* routing, const T* logits, i64 rows,
                          i64 experts, i64 k, T* dlogits, cudaStream_t stream);
// dx[t] (= or += when accumulate) sum over the rank's kept pairs of dxd[local_row(t k + j)].
template <class T>
void launch_moe_dispatch_bwd(const T* dxd, const i64* routing, i64 rows, i64 k, i64 h, MoeSlots s, T* dx,
                             bool accumulate, cudaStream_t stream);

// softmax.cu: causal row softmax for eager attention over [b*heads*s, s] (row r is query t = r % s,
// which sees keys t - window + 1 .. t under a sliding window, 0 .. t with window 0).
template <class T>
void launch_causal_softmax_fwd(const T* scores, T* probs, i64 rows, i64 s, i64 window, cudaStream_t stream);
template <class T>
void launch_causal_softmax_bwd(const T* probs, const T* dp, T* ds, i64 rows, i64 s, i64 window, cudaStream_t stream);

// flash_attention.cu: causal, scale 1/sqrt(d), GQA; qkv [b*s, (heads + 2 kv) d], out [b*s, heads d], lse [b, heads, s];
// window > 0: the query at position p sees keys p - window + 1 .. p only (ref::AttnShape::window).
template <class T>
void launch_flash_fwd(const T* qkv, T* out, float* lse, i64 b, i64 s, i64 heads, i64 kv_heads, i64 d, i64 window,
                      cudaStream_t stream);
// dsum [b, heads, s] fp32 scratch; dqkv overwritten.
template <class T>
void launch_flash_bwd(const T* qkv, const T* out, const float* lse, const T* dout, T* dqkv, float* dsum, i64 b, i64 s,
                      i64 heads, i64 kv_heads, i64 d, i64 window, cudaStream_t stream);
// Context parallelism: the rank's s queries of each sequence (Q columns of qkv) at cp rank cp_rank's
// positions (context_parallel.hpp) against kv [b, cp s, 2 kv d] (K | V of the whole sequence, in
// sequence order); the backward writes dQ into dqkv's Q columns and the whole sequence's dK | dV
// into dkv (overwritten).
template <class T>
void launch_flash_fwd_cp(const T* qkv, const T* kv, T* out, float* lse, i64 b, i64 s, i64 heads, i64 kv_heads, i64 d,
                         i64 cp, i64 cp_rank, i64 window, cudaStream_t stream);
template <class T>
void launch_flash_bwd_cp(const T* qkv, const T* kv, const T* out, const float* lse, const T* dout, T* dqkv, T* dkv,
                         float* dsum, i64 b, i64 s, i64 heads, i64 kv_heads, i64 d, i64 cp, i64 cp_rank, i64 window,
                         cudaStream_t stream);

// cp_kv.cu: context parallelism's K|V moves (program.hpp OpKind::cp_kv_*; CPU reference ref::cp_kv_*):
// pack a rank's K|V columns (at q_width in qkv rows C wide) into rows of their own [b s, W] (the
// all-gather's input; it fills the rank-major [cp][b s rows, W]), order that buffer into sequence
// order [b, cp s, W], unorder back, unpack the rank's chunk into the K|V columns. W = 2 kv_width.
enum class CpKvMove : int { pack, order, unorder, unpack };
struct CpKvShape {
    i64 b = 1, s = 1, cp = 1, cp_rank = 0, C = 0, q_width = 0, W = 0;
};
template <class T>
void launch_cp_kv(const T* src, T* dst, CpKvMove move, const CpKvShape& g, cudaStream_t stream);

// cross_entropy.cu: logits [rows, vocab_padded] -> dlogits in place (scaled), loss per row;
// loss_sum: total += sum(loss rows) (one block, deterministic).
template <class T>
void launch_cross_entropy(T* logits, const std::int64_t* labels, float* loss_rows, i64 rows, i64 vocab,
                          i64 vocab_padded, float scale, cudaStream_t stream);
void launch_loss_sum(const float* loss_rows, i64 rows, float* total, cudaStream_t stream);

// vocab_parallel_ce.cu: the cross-entropy over a tensor-parallel rank's logit columns [rows,
// vocab_padded], the first `valid` of them real tokens [vocab_begin, vocab_begin + valid)
// (Megatron-LM's vocab_parallel_cross_entropy; CPU reference:
// HostRunner::vocab_parallel_cross_entropy). Between the three, the program sums or maxes over
// the ranks: max_rows [rows] (local max, then the global one); sums [rows, 2] (sum of
// exp(z - max) and the label's logit where this rank holds it, else 0); the finish writes the
// loss per row and the scaled gradient over the logits (0 in the padding).
template <class T>
void launch_ce_max(const T* logits, float* max_rows, i64 rows, i64 valid, i64 vocab_padded, cudaStream_t stream);
template <class T>
void launch_ce_sums(const T* logits, const std::int64_t* labels, const float* max_rows, float* sums, i64 rows,
                    i64 valid, i64 vocab_padded, i64 vocab_begin, cudaStream_t stream);
template <class T>
void launch_ce_finish(T* logits, const std::int64_t* labels, const float* max_rows, const float* sums,
                      float* loss_rows, i64 rows, i64 valid, i64 vocab_padded, i64 vocab_begin, float scale,
                      cudaStream_t stream);

// optimizer.cu: AdamW / SGD on one tensor. grad is fp32 when grad_f32 else bf16; master
// (fp32) is updated and written to `weights` when non-null, else weights are updated in place.
struct OptimizerArgs {
    const void* grad = nullptr;
    bool grad_f32 = false;
    float* master = nullptr;
    void* weights = nullptr;
    bool weights_f32 = false;
    float* m = nullptr;
    float* v = nullptr;  // null for SGD
    i64 n = 0;
    float lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0, momentum = 0;
    i64 step = 1;
};
void launch_adamw(const OptimizerArgs& a, cudaStream_t stream);
// Multi-tensor AdamW over elements [begin[0], end) of the flat buffers `a` points at (a.grad,
// a.weights, a.master, a.m, a.v at element 0; a.n unused): `count` <= kAdamwMaxTensors tensors
// starting at begin[k] (multiples of 4, sorted), weight decay a.weight_decay where decay[k].
inline constexpr int kAdamwMaxTensors = 256;
void launch_adamw_multi(const OptimizerArgs& a, const i64* begin, const bool* decay, int count, i64 end,
                        cudaStream_t stream);
void launch_sgd(const OptimizerArgs& a, cudaStream_t stream);

}  // namespace preflight::runtime::cuda
