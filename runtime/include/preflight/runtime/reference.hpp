// CPU reference implementations of every runtime kernel, in double precision,
// row-major. They define what the CUDA kernels compute; GPU tests compare against
// them (documented error bounds per dtype) and CPU tests check them against
// hand-computed values and finite differences.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "preflight/planner/model.hpp"
#include "preflight/runtime/program.hpp"

namespace preflight::runtime::ref {

using i64 = std::int64_t;

// Round to the nearest bfloat16 (round-to-nearest-even), as __float2bfloat16 does.
float round_bf16(float x);

// Y[M,N] = X[M,K] W[N,K]^T (+ b[N]) (+ R[M,N]).
void linear_fwd(const double* x, const double* w, const double* b, const double* r, double* y, i64 M, i64 N, i64 K);
// dX[M,K] = dY W (overwrites), dW[N,K] += dY^T X, db[N] += colsum(dY) (db may be null).
void linear_bwd(const double* dy, const double* x, const double* w, double* dx, double* dw, double* db, i64 M, i64 N,
                i64 K);

// LayerNorm (Ba et al. 2016) and RMSNorm (Zhang & Sennrich 2019) over rows of width h.
void layernorm_fwd(const double* x, const double* w, const double* b, double* y, i64 rows, i64 h, double eps);
// dX (+= when accumulate), dW += , dB += (dB may be null).
void layernorm_bwd(const double* x, const double* w, const double* dy, double* dx, double* dw, double* db, i64 rows,
                   i64 h, double eps, bool accumulate);
void rmsnorm_fwd(const double* x, const double* w, double* y, i64 rows, i64 h, double eps);
void rmsnorm_bwd(const double* x, const double* w, const double* dy, double* dx, double* dw, i64 rows, i64 h,
                 double eps, bool accumulate);

// Layout of the fused projection output per token: [Q (heads*d) | K (kv_heads*d) | V (kv_heads*d)].
// Under context parallelism s is the rank's tokens of each sequence (s / cp of them), at the
// positions context_parallel.hpp gives cp rank `cp_rank` (RoPE angles, attention masks).
struct AttnShape {
    i64 b = 1, s = 1, heads = 1, kv_heads = 1, d = 1;
    i64 cp = 1, cp_rank = 0;
    // Sliding-window attention (Mistral's, Phi-3's): a query at position p sees the keys at p - window
    // + 1 .. p, itself and window - 1 before it (transformers' sliding_window_overlay: kv > q - window;
    // Megatron-LM's --window-size window - 1,0); 0: every key up to p.
    i64 window = 0;
    // RoPE's rotated dimensions at the start of each head (partial_rotary_factor); 0: all d.
    i64 rot = 0;
    i64 rotary() const { return rot > 0 ? rot : d; }
    i64 qkv_width() const { return (heads + 2 * kv_heads) * d; }
    i64 kv_width() const { return kv_heads * d; }
    // The first key position a query at position p sees.
    i64 first_key(i64 p) const { return window > 0 && p >= window ? p - window + 1 : 0; }
};
// A micro-batch's attention as the program's rank holds it.
inline AttnShape attn_shape(const Dims& d) {
    return {d.b, d.s, d.heads, d.kv_heads, d.head_dim, d.cp, d.cp_rank, d.window, d.rope_dims};
}
// The same for the attention of stage layer l (its own window: Dims::window_of).
inline AttnShape attn_shape(const Dims& d, std::int64_t l) {
    AttnShape a = attn_shape(d);
    a.window = d.window_of(l);
    return a;
}

// RMSNorm of Q and K over the groups `g` (qk_norm_groups: Qwen3's q_norm / k_norm per head, OLMo's
// over each whole projection; before RoPE): in place on the Q|K columns of qkv [rows, ld], Q's groups
// scaled by wq [g.q_width] and K's by wk [g.k_width]; `saved` [rows, g.columns()] receives the input
// the backward reads.
void head_rmsnorm_fwd(double* qkv, double* saved, const double* wq, const double* wk, i64 rows, i64 ld,
                      const QkNormGroups& g, double eps);
// Its backward in place on dqkv's Q|K columns (their output gradient in, input gradient out); dwq and dwk +=.
void head_rmsnorm_bwd(const double* saved, double* dqkv, const double* wq, const double* wk, double* dwq, double* dwk,
                      i64 rows, i64 ld, const QkNormGroups& g, double eps);
// The same per head (Qwen3's) on a micro-batch of shape `a`: d weights each.
void head_rmsnorm_fwd(double* qkv, double* saved, const double* wq, const double* wk, const AttnShape& a, double eps);
void head_rmsnorm_bwd(const double* saved, double* dqkv, const double* wq, const double* wk, double* dwq, double* dwk,
                      const AttnShape& a, double eps);

// RoPE (Su et al. 2021), rotate-half layout (HF Llama): pairs (i, i + r/2) of each Q and K head
// rotated by t * base^(-2i/r), r = a.rotary() (d, or the rotated share of a partial rotary model,
// whose other dimensions pass through). In place; bwd rotates by the opposite angle.
void rope_tables(double* cos_t, double* sin_t, i64 s, i64 d, double base);  // [s, d]
// A model's RoPE: d/2 inverse frequencies, and the factor that multiplies cos and sin (transformers'
// attention_scaling, applied in the rotary embedding's forward: 1 but for longrope). Frequencies alone
// convert to it with the factor 1.
struct RopeFrequencies {
    std::vector<double> inv_freq;
    double attention_factor = 1.0;
    // LongRoPE's factor set this sequence takes ("short" or "long"); empty for any other RoPE.
    std::string_view longrope_factors;
    RopeFrequencies() = default;
    RopeFrequencies(std::vector<double> f, double attention = 1.0) : inv_freq(std::move(f)), attention_factor(attention) {}
};
// Inverse frequencies base^(-2i/d), i < d/2, with Llama-3 scaling when `scaling.type` is
// "llama3" (HF transformers modeling_rope_utils.py, _compute_llama3_parameters: wavelengths
// above original/low_freq_factor divided by `factor`, below original/high_freq_factor kept,
// smoothly interpolated between). Throws InputError for another rope_type (longrope: rope_frequencies).
std::vector<double> rope_inv_freq(i64 d, double base, const RopeScaling& scaling);
// The same, and LongRoPE (_compute_longrope_parameters, and longrope_frequency_update, which
// switches to long_factor when a sequence's last position passes original_max_positions): each
// frequency divided by short_factor[i] for a sequence of `seq` tokens within original_max_positions,
// by long_factor[i] beyond, and cos and sin multiplied by attention_factor, or, not given,
// sqrt(1 + ln(factor) / ln(original)) for factor (not given: max_positions / original) above 1.
RopeFrequencies rope_frequencies(i64 d, double base, const RopeScaling& scaling, i64 seq, i64 max_positions);
// Tables [s, d] and rotation from explicit frequencies (rotary() / 2 of them; the tables' columns
// past the rotated ones hold cos 1 and sin 0).
void rope_tables(double* cos_t, double* sin_t, i64 s, i64 d, const RopeFrequencies& f);
// The same for cp rank `cp_rank`'s s tokens: row t at the position cp_position(t).
void rope_tables_cp(double* cos_t, double* sin_t, const AttnShape& a, const RopeFrequencies& f);
void rope_fwd(double* qkv, const AttnShape& a, const RopeFrequencies& f);
void rope_bwd(double* dqkv, const AttnShape& a, const RopeFrequencies& f);
void rope_fwd(double* qkv, const AttnShape& a, double base);
void rope_bwd(double* dqkv, const AttnShape& a, double base);

// Causal attention, scale 1/sqrt(d), GQA (query head h uses KV head h / (heads/kv_heads)), through
// the sliding window when a.window > 0.
// out [b*s, heads*d]; lse [b, heads, s] = log-sum-exp of the scaled scores per row (may be null).
void attention_fwd(const double* qkv, double* out, double* lse, const AttnShape& a);
// dqkv (overwritten) from dOut.
void attention_bwd(const double* qkv, const double* dout, double* dqkv, const AttnShape& a);
// Eager pieces: probabilities [b, heads, s, s] (masked entries 0) and softmax backward
// dS = P * (dP - rowsum(P * dP)).
void attention_probs(const double* qkv, double* probs, const AttnShape& a);
void softmax_bwd(const double* p, const double* dp, double* ds, i64 rows, i64 cols);

// Context parallelism (reference_cp.cpp; runtime/src/program_cp.cpp). `kv` [b, cp s, 2 kv_width]:
// the whole sequence's K | V in sequence order; the rank's queries (Q columns of its qkv rows, at
// its positions) attend causally to them. Forward: out, lse as attention_fwd. Backward: dQ into
// dqkv's Q columns (its K|V columns untouched), the whole sequence's dK | dV into dkv (overwritten).
void attention_fwd_cp(const double* qkv, const double* kv, double* out, double* lse, const AttnShape& a);
void attention_bwd_cp(const double* qkv, const double* kv, const double* dout, double* dqkv, double* dkv,
                      const AttnShape& a);
// The K|V moves: `pack` the K|V columns of the rank's qkv rows into rows of their own [b s, 2
// kv_width] (what the all-gather sends; it fills the rank-major [cp][b s rows, 2 kv_width]);
// `order` that buffer into sequence order [b, cp s]; `unorder` the inverse; `unpack` the rank's
// chunk of it into qkv's K|V columns.
void cp_kv_pack(const double* qkv, double* rows_out, const AttnShape& a);
void cp_kv_order(const double* gathered, double* ordered, const AttnShape& a);
void cp_kv_unorder(const double* ordered, double* gathered, const AttnShape& a);
void cp_kv_unpack(const double* gathered, double* qkv, const AttnShape& a);

// GeLU, tanh approximation (Hendrycks & Gimpel 2016; GPT-2).
void gelu_fwd(const double* x, double* y, i64 n);
void gelu_bwd(const double* x, const double* dy, double* dx, i64 n);
// SwiGLU (Shazeer 2020): gu [rows, 2f] = gate|up; act = silu(gate) * up.
void swiglu_fwd(const double* gu, double* act, i64 rows, i64 f);
void swiglu_bwd(const double* gu, const double* dact, double* dgu, i64 rows, i64 f);

// Softmax cross-entropy over the first `vocab` of `vocab_padded` columns. Writes the
// per-row loss and dlogits = scale * (softmax - onehot) (0 in the padding); returns the summed loss.
double cross_entropy(const double* logits, const std::int64_t* labels, double* loss_rows, double* dlogits, i64 rows,
                     i64 vocab, i64 vocab_padded, double scale);

// x[b*s, h] = wte[token] (+ wpe[t]); bwd accumulates into dwte / dwpe (dwpe may be null).
void embedding_fwd(const std::int64_t* tokens, const double* wte, const double* wpe, double* x, i64 b, i64 s, i64 h);
void embedding_bwd(const std::int64_t* tokens, const double* dx, double* dwte, double* dwpe, i64 b, i64 s, i64 h);

// AdamW (Loshchilov & Hutter 2019) with bias correction at 1-based `step`; SGD with momentum.
void adamw(double* p, const double* g, double* m, double* v, i64 n, double lr, double beta1, double beta2, double eps,
           double weight_decay, i64 step);
void sgd(double* p, const double* g, double* mom, i64 n, double lr, double momentum, double weight_decay);

// FP8 (OCP 8-bit floating point; Micikevicius et al. 2022, "FP8 Formats for Deep Learning",
// table 1): E4M3 (bias 7, 3 mantissa bits, no infinities, largest 448) for weights and
// activations, E5M2 (bias 15, 2 mantissa bits, largest 57,344) for gradients.
enum class Fp8Format { e4m3, e5m2 };
double fp8_max(Fp8Format f);
// The nearest fp8 value (ties to even), saturated at +-max as the CUDA conversion with
// __NV_SATFINITE does; NaN stays NaN.
double round_fp8(double x, Fp8Format f);
// Per-tensor current scaling (Transformer Engine's current scaling, torchao's tensorwise):
// amax = max |x|; scale = max_fp8 / amax (1 when amax is 0 or not finite); q_i = round_fp8(x_i *
// scale); a GEMM of quantized operands multiplies by each one's scale_inv = 1 / scale.
struct Fp8Tensor {
    std::vector<double> q;  // the fp8 values (times scale)
    double amax = 0, scale = 1, scale_inv = 1;
};
// The scale the quantization uses for a tensor with this amax, in fp32 as the device computes it.
double fp8_scale(double amax, Fp8Format f);
Fp8Tensor quantize_fp8(const double* x, i64 n, Fp8Format f);

}  // namespace preflight::runtime::ref
