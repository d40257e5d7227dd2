// Token (+ learned position) embedding. CPU reference: ref::embedding_fwd / embedding_bwd; with a
// vocabulary range (tensor parallelism), HostRunner::run_embedding.
#include "common.cuh"
#include "kernels.cuh"

namespace preflight::runtime::cuda {

template <class T>
__global__ void embedding_fwd_kernel(const std::int64_t* tokens, const T* wte, const T* wpe, T* x, i64 rows, i64 s,
                                     i64 h, i64 vocab_begin, i64 vocab_rows) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= rows * h) return;
    const i64 r = i / h, c = i % h;
    const i64 row = tokens[r] - vocab_begin;  // another rank's token: 0 here
    float v = row >= 0 && row < vocab_rows ? to_f(wte[row * h + c]) : 0.f;
    if (wpe) v += to_f(wpe[(r % s) * h + c]);
    x[i] = from_f<T>(v);
}

// One block per row r. Only the first row holding a token works: it sums, in row
// order, dx over every row with that token and adds the sum to dwte once. Tokens outside this
// rank's vocabulary rows have no gradient here.
template <class T>
__global__ void embedding_bwd_kernel(const std::int64_t* tokens, const T* dx, T* dwte, i64 rows, i64 h, i64 vocab_begin,
                                     i64 vocab_rows) {
    const i64 r = blockIdx.x;
    const std::int64_t tok = tokens[r];
    if (tok < vocab_begin || tok - vocab_begin >= vocab_rows) return;  // the same for the whole block
    // Is there an earlier row with this token?
    int earlier = 0;
    for (i64 base = 0; base < r && !earlier; base += blockDim.x) {
        const i64 i = base + threadIdx.x;
        earlier = __syncthreads_or(i < r && tokens[i] == tok);
    }
    if (earlier) return;
    __shared__ unsigned masks[32];
    for (i64 cb = 0; cb < h; cb += blockDim.x * 4) {  // uniform trip count (barriers inside)
        const i64 c0 = cb + threadIdx.x;
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        for (i64 base = r; base < rows; base += blockDim.x) {
            const i64 i = base + threadIdx.x;
            const unsigned m = __ballot_sync(0xffffffffu, i < rows && tokens[i] == tok);
            __syncthreads();
            if (threadIdx.x % 32 == 0) masks[threadIdx.x / 32] = m;
            __syncthreads();
            for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) {
                unsigned mw = masks[w];
                while (mw) {
                    const int bit = __ffs(mw) - 1;
                    mw &= mw - 1;
                    const i64 row = base + w * 32 + bit;
                    for (int k = 0; k < 4; ++k) {
                        const i64 c = c0 + static_cast<i64>(k) * blockDim.x;
                        if (c < h) acc[k] += to_f(dx[row * h + c]);
                    }
                }
            }
        }
        for (int k = 0; k < 4; ++k) {
            const i64 c = c0 + static_cast<i64>(k) * blockDim.x;
            T* g = dwte + (tok - vocab_begin) * h;
            if (c < h) g[c] = from_f<T>(to_f(g[c]) + acc[k]);
        }
    }
}

template <class T>
__global__ void position_bwd_kernel(const T* dx, T* dwpe, i64 b, i64 s, i64 h) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= s * h) return;
    float acc = 0.f;
    for (i64 bb = 0; bb < b; ++bb) acc += to_f(dx[bb * s * h + i]);
    dwpe[i] = from_f<T>(to_f(dwpe[i]) + acc);
}

template <class T>
void launch_embedding_fwd(const std::int64_t* tokens, const T* wte, const T* wpe, T* x, i64 b, i64 s, i64 h,
                          cudaStream_t stream, i64 vocab_begin, i64 vocab_rows) {
    embedding_fwd_kernel<T><<<grid_for(b * s * h, 256), 256, 0, stream>>>(tokens, wte, wpe, x, b * s, s, h, vocab_begin,
                                                                          vocab_rows);
    PF_LAUNCH_CHECK();
}

template <class T>
void launch_embedding_bwd(const std::int64_t* tokens, const T* dx, T* dwte, T* dwpe, i64 b, i64 s, i64 h,
                          cudaStream_t stream, i64 vocab_begin, i64 vocab_rows) {
    embedding_bwd_kernel<T><<<static_cast<unsigned>(b * s), 256, 0, stream>>>(tokens, dx, dwte, b * s, h, vocab_begin,
                                                                               vocab_rows);
    PF_LAUNCH_CHECK();
    if (dwpe) {
        position_bwd_kernel<T><<<grid_for(s * h, 256), 256, 0, stream>>>(dx, dwpe, b, s, h);
        PF_LAUNCH_CHECK();
    }
}

template void launch_embedding_fwd<float>(const std::int64_t*, const float*, const float*, float*, i64, i64, i64, cudaStream_t, i64, i64);
template void launch_embedding_fwd<bf16>(const std::int64_t*, const bf16*, const bf16*, bf16*, i64, i64, i64, cudaStream_t, i64, i64);
template void launch_embedding_bwd<float>(const std::int64_t*, const float*, float*, float*, i64, i64, i64, cudaStream_t, i64, i64);
template void launch_embedding_bwd<bf16>(const std::int64_t*, const bf16*, bf16*, bf16*, i64, i64, i64, cudaStream_t, i64, i64);

}  // namespace preflight::runtime::cuda
