// LayerNorm / RMSNorm forward and backward. CPU reference: ref::layernorm_* / rmsnorm_*.
// Statistics are recomputed in backward (the runtime keeps none), written to a
// scratch buffer for the weight-gradient pass.
#include "common.cuh"
#include "kernels.cuh"

namespace preflight::runtime::cuda {

// One block per row.
// `res` (may be null): a residual added to the output (a post-norm's, program_post_norm.cpp).
template <class T>
__global__ void norm_fwd_kernel(const T* x, const T* w, const T* b, const T* res, T* y, i64 h, float eps, bool ln) {
    const T* xr = x + blockIdx.x * h;
    float s = 0.f, ss = 0.f;
    for (i64 i = threadIdx.x; i < h; i += blockDim.x) {
        const float v = to_f(xr[i]);
        s += v;
        ss += v * v;
    }
    s = block_sum(s);
    ss = block_sum(ss);
    const float mean = ln ? s / h : 0.f;
    const float var = ss / h - mean * mean;
    const float rstd = rsqrtf(fmaxf(var, 0.f) + eps);
    for (i64 i = threadIdx.x; i < h; i += blockDim.x) {
        float v = (to_f(xr[i]) - mean) * rstd * to_f(w[i]);
        if (b) v += to_f(b[i]);
        if (res) v += to_f(res[blockIdx.x * h + i]);
        y[blockIdx.x * h + i] = from_f<T>(v);
    }
}

template <class T>
__global__ void norm_bwd_rows_kernel(const T* x, const T* w, const T* dy, T* dx, float* stats, i64 h, float eps,
                                     bool ln, bool accumulate) {
    const i64 r = blockIdx.x;
    const T* xr = x + r * h;
    const T* g = dy + r * h;
    float s = 0.f, ss = 0.f;
    for (i64 i = threadIdx.x; i < h; i += blockDim.x) {
        const float v = to_f(xr[i]);
        s += v;
        ss += v * v;
    }
    s = block_sum(s);
    ss = block_sum(ss);
    const float mean = ln ? s / h : 0.f;
    const float rstd = rsqrtf(fmaxf(ss / h - mean * mean, 0.f) + eps);
    float m1 = 0.f, m2 = 0.f;
    for (i64 i = threadIdx.x; i < h; i += blockDim.x) {
        const float gw = to_f(g[i]) * to_f(w[i]);
        m1 += gw;
        m2 += gw * (to_f(xr[i]) - mean) * rstd;
    }
    m1 = block_sum(m1) / h;
    m2 = block_sum(m2) / h;
    if (!ln) m1 = 0.f;
    for (i64 i = threadIdx.x; i < h; i += blockDim.x) {
        const float xhat = (to_f(xr[i]) - mean) * rstd;
        float v = rstd * (to_f(g[i]) * to_f(w[i]) - m1 - xhat * m2);
        if (accumulate) v += to_f(dx[r * h + i]);
        dx[r * h + i] = from_f<T>(v);
    }
    if (threadIdx.x == 0) {
        stats[2 * r] = mean;
        stats[2 * r + 1] = rstd;
    }
}

// 16-byte variant of the row pass (h a multiple of the pack width, aligned rows).
template <class T>
__global__ void norm_bwd_rows_vec_kernel(const T* x, const T* w, const T* dy, T* dx, float* stats, i64 h, float eps,
                                         bool ln, bool accumulate) {
    constexpr int N = Pack16<T>::N;
    const i64 r = blockIdx.x, packs = h / N;
    const T* xr = x + r * h;
    const T* g = dy + r * h;
    float s = 0.f, ss = 0.f;
    for (i64 p = threadIdx.x; p < packs; p += blockDim.x) {
        const Pack16<T> xv = load16(xr + p * N);
#pragma unroll
        for (int k = 0; k < N; ++k) {
            const float v = to_f(xv.v[k]);
            s += v;
            ss += v * v;
        }
    }
    s = block_sum(s);
    ss = block_sum(ss);
    const float mean = ln ? s / h : 0.f;
    const float rstd = rsqrtf(fmaxf(ss / h - mean * mean, 0.f) + eps);
    float m1 = 0.f, m2 = 0.f;
    for (i64 p = threadIdx.x; p < packs; p += blockDim.x) {
        const Pack16<T> xv = load16(xr + p * N), gv = load16(g + p * N), wv = load16(w + p * N);
#pragma unroll
        for (int k = 0; k < N; ++k) {
            const float gw = to_f(gv.v[k]) * to_f(wv.v[k]);
            m1 += gw;
            m2 += gw * (to_f(xv.v[k]) - mean) * rstd;
        }
    }
    m1 = block_sum(m1) / h;
    m2 = block_sum(m2) / h;
    if (!ln) m1 = 0.f;
    for (i64 p = threadIdx.x; p < packs; p += blockDim.x) {
        const Pack16<T> xv = load16(xr + p * N), gv = load16(g + p * N), wv = load16(w + p * N);
        Pack16<T> prev{}, o;
        if (accumulate) prev = load16(dx + r * h + p * N);
#pragma unroll
        for (int k = 0; k < N; ++k) {
            const float xhat = (to_f(xv.v[k]) - mean) * rstd;
            float v = rstd * (to_f(gv.v[k]) * to_f(wv.v[k]) - m1 - xhat * m2);
            if (accumulate) v += to_f(prev.v[k]);
            o.v[k] = from_f<T>(v);
        }
        store16(dx + r * h + p * N, o);
    }
    if (threadIdx.x == 0) {
        stats[2 * r] = mean;
        stats[2 * r + 1] = rstd;
    }
}

// Column sums: block (32, 8) handles 32 columns over all rows; deterministic.
template <class T>
__global__ void norm_bwd_weights_kernel(const T* x, const T* dy, const float* stats, T* dw, T* db, i64 rows, i64 h) {
    const i64 c = blockIdx.x * 32 + threadIdx.x;
    float aw = 0.f, ab = 0.f;
    if (c < h)
        for (i64 r = threadIdx.y; r < rows; r += blockDim.y) {
            const float g = to_f(dy[r * h + c]);
            aw += g * (to_f(x[r * h + c]) - stats[2 * r]) * stats[2 * r + 1];
            ab += g;
        }
    __shared__ float sw[8][33], sb[8][33];
    sw[threadIdx.y][threadIdx.x] = aw;
    sb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y == 0 && c < h) {
        for (int k = 1; k < static_cast<int>(blockDim.y); ++k) {
            aw += sw[k][threadIdx.x];
            ab += sb[k][threadIdx.x];
        }
        dw[c] = from_f<T>(to_f(dw[c]) + aw);
        if (db) db[c] = from_f<T>(to_f(db[c]) + ab);
    }
}

// 16-byte variant (h a multiple of the pack width, aligned rows): the same two passes over
// the row, one Pack16 of x, w (and b) per thread per iteration.
template <class T>
__global__ void norm_fwd_vec_kernel(const T* x, const T* w, const T* b, const T* res, T* y, i64 h, float eps, bool ln) {
    constexpr int N = Pack16<T>::N;
    const T* xr = x + blockIdx.x * h;
    const i64 packs = h / N;
    float s = 0.f, ss = 0.f;
    for (i64 p = threadIdx.x; p < packs; p += blockDim.x) {
        const Pack16<T> xv = load16(xr + p * N);
#pragma unroll
        for (int k = 0; k < N; ++k) {
            const float v = to_f(xv.v[k]);
            s += v;
            ss += v * v;
        }
    }
    s = block_sum(s);
    ss = block_sum(ss);
    const float mean = ln ? s / h : 0.f;
    const float var = ss / h - mean * mean;
    const float rstd = rsqrtf(fmaxf(var, 0.f) + eps);
    for (i64 p = threadIdx.x; p < packs; p += blockDim.x) {
        const Pack16<T> xv = load16(xr + p * N), wv = load16(w + p * N);
        Pack16<T> bv{}, rv{}, o;
        if (b) bv = load16(b + p * N);
        if (res) rv = load16(res + blockIdx.x * h + p * N);
#pragma unroll
        for (int k = 0; k < N; ++k) {
            float v = (to_f(xv.v[k]) - mean) * rstd * to_f(wv.v[k]);
            if (b) v += to_f(bv.v[k]);
            if (res) v += to_f(rv.v[k]);
            o.v[k] = from_f<T>(v);
        }
        store16(y + blockIdx.x * h + p * N, o);
    }
}

template <class T>
void launch_norm_fwd(const T* x, const T* w, const T* b, const T* res, T* y, i64 rows, i64 h, float eps,
                     bool layernorm, cudaStream_t stream) {
    if (h % Pack16<T>::N == 0 && aligned16(x, w, y) && aligned16(b) && aligned16(res))
        norm_fwd_vec_kernel<T><<<static_cast<unsigned>(rows), 256, 0, stream>>>(x, w, b, res, y, h, eps, layernorm);
    else
        norm_fwd_kernel<T><<<static_cast<unsigned>(rows), 256, 0, stream>>>(x, w, b, res, y, h, eps, layernorm);
    PF_LAUNCH_CHECK();
}

template <class T>
void launch_norm_bwd(const T* x, const T* w, const T* dy, T* dx, float* stats, T* dw, T* db, i64 rows, i64 h,
                     float eps, bool layernorm, bool accumulate, cudaStream_t stream) {
    if (h % Pack16<T>::N == 0 && aligned16(x, w, dy) && aligned16(dx))
        norm_bwd_rows_vec_kernel<T><<<static_cast<unsigned>(rows), 256, 0, stream>>>(x, w, dy, dx, stats, h, eps,
                                                                                     layernorm, accumulate);
    else
        norm_bwd_rows_kernel<T><<<static_cast<unsigned>(rows), 256, 0, stream>>>(x, w, dy, dx, stats, h, eps, layernorm,
                                                                                 accumulate);
    PF_LAUNCH_CHECK();
    norm_bwd_weights_kernel<T><<<grid_for(h, 32), dim3(32, 8), 0, stream>>>(x, dy, stats, dw, layernorm ? db : nullptr,
                                                                             rows, h);
    PF_LAUNCH_CHECK();
}

template void launch_norm_fwd<float>(const float*, const float*, const float*, const float*, float*, i64, i64, float,
                                     bool, cudaStream_t);
template void launch_norm_fwd<bf16>(const bf16*, const bf16*, const bf16*, const bf16*, bf16*, i64, i64, float, bool,
                                    cudaStream_t);
template void launch_norm_bwd<float>(const float*, const float*, const float*, float*, float*, float*, float*, i64, i64,
                                     float, bool, bool, cudaStream_t);
template void launch_norm_bwd<bf16>(const bf16*, const bf16*, const bf16*, bf16*, float*, bf16*, bf16*, i64, i64,
                                    float, bool, bool, cudaStream_t);

}  // namespace preflight::runtime::cuda
