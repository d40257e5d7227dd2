// Fused softmax cross-entropy: loss per row and dlogits written over the logits.
// CPU reference: ref::cross_entropy.
#include "common.cuh"
#include "kernels.cuh"

namespace preflight::runtime::cuda {

// One block per row: online max/sum over the vocabulary, then the gradient.
template <class T>
__global__ void cross_entropy_kernel(T* logits, const std::int64_t* labels, float* loss_rows, i64 vocab, i64 vp,
                                     float scale) {
    const i64 r = blockIdx.x;
    T* z = logits + r * vp;
    float mx = -INFINITY, sum = 0.f;
    for (i64 c = threadIdx.x; c < vocab; c += blockDim.x) {
        const float v = to_f(z[c]);
        if (v > mx) {
            sum = sum * __expf(mx - v) + 1.f;
            mx = v;
        } else {
            sum += __expf(v - mx);
        }
    }
    // Combine (max, sum) pairs across the block.
    const float bm = block_max(mx);
    sum = block_sum(mx == -INFINITY ? 0.f : sum * __expf(mx - bm));
    const float lse = bm + __logf(sum);
    const std::int64_t y = labels[r];
    if (threadIdx.x == 0) loss_rows[r] = lse - to_f(z[y]);
    __syncthreads();  // everyone has read z[y] before it is overwritten
    for (i64 c = threadIdx.x; c < vp; c += blockDim.x) {
        const float g = c < vocab ? scale * (__expf(to_f(z[c]) - lse) - (c == y ? 1.f : 0.f)) : 0.f;
        z[c] = from_f<T>(g);
    }
}

__global__ void loss_sum_kernel(const float* loss_rows, i64 rows, float* total) {
    float acc = 0.f;
    for (i64 i = threadIdx.x; i < rows; i += blockDim.x) acc += loss_rows[i];
    acc = block_sum(acc);
    if (threadIdx.x == 0) *total += acc;
}

template <class T>
void launch_cross_entropy(T* logits, const std::int64_t* labels, float* loss_rows, i64 rows, i64 vocab,
                          i64 vocab_padded, float scale, cudaStream_t stream) {
    cross_entropy_kernel<T><<<static_cast<unsigned>(rows), 512, 0, stream>>>(logits, labels, loss_rows, vocab,
                                                                             vocab_padded, scale);
    PF_LAUNCH_CHECK();
}

void launch_loss_sum(const float* loss_rows, i64 rows, float* total, cudaStream_t stream) {
    loss_sum_kernel<<<1, 1024, 0, stream>>>(loss_rows, rows, total);
    PF_LAUNCH_CHECK();
}

template void launch_cross_entropy<float>(float*, const std::int64_t*, float*, i64, i64, i64, float, cudaStream_t);
template void launch_cross_entropy<bf16>(bf16*, const std::int64_t*, float*, i64, i64, i64, float, cudaStream_t);

}  // namespace preflight::runtime::cuda
