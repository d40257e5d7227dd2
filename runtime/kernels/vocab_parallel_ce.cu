// Vocabulary-parallel cross-entropy (tensor parallelism): each rank holds the logits of its
// vocabulary columns only, so the softmax statistics are combined over the ranks (the program's
// all-reduces between these kernels) and the full logits are never gathered (Megatron-LM,
// core/tensor_parallel/cross_entropy.py). CPU reference: HostRunner::vocab_parallel_cross_entropy
// (host_runner_ops.cpp); compared in tests/runtime/gpu/test_gpu_tensor_parallel.cpp.
#include "common.cuh"
#include "kernels.cuh"

namespace preflight::runtime::cuda {

// One block per row: the largest of the row's `valid` logits (-inf when the rank holds none).
template <class T>
__global__ void ce_max_kernel(const T* logits, float* max_rows, i64 valid, i64 vp) {
    const T* z = logits + blockIdx.x * vp;
    float m = -INFINITY;
    for (i64 c = threadIdx.x; c < valid; c += blockDim.x) m = fmaxf(m, to_f(z[c]));
    m = block_max(m);
    if (threadIdx.x == 0) max_rows[blockIdx.x] = m;
}

// One block per row: sum of exp(z - max) over the rank's columns, and the label's logit when
// the label is one of them (else 0: the tensor-parallel sum then holds the label's logit).
template <class T>
__global__ void ce_sums_kernel(const T* logits, const std::int64_t* labels, const float* max_rows, float* sums,
                               i64 valid, i64 vp, i64 vocab_begin) {
    const i64 r = blockIdx.x;
    const T* z = logits + r * vp;
    const float m = max_rows[r];
    float s = 0.f;
    for (i64 c = threadIdx.x; c < valid; c += blockDim.x) s += __expf(to_f(z[c]) - m);
    s = block_sum(s);
    if (threadIdx.x == 0) {
        const i64 mine = labels[r] - vocab_begin;
        sums[2 * r] = s;
        sums[2 * r + 1] = mine >= 0 && mine < valid ? to_f(z[mine]) : 0.f;
    }
}

// One block per row: loss = log(sum) + max - label logit; the gradient scale * (softmax - onehot)
// over the logits in place, 0 in the padding columns.
template <class T>
__global__ void ce_finish_kernel(T* logits, const std::int64_t* labels, const float* max_rows, const float* sums,
                                 float* loss_rows, i64 valid, i64 vp, i64 vocab_begin, float scale) {
    const i64 r = blockIdx.x;
    T* z = logits + r * vp;
    const float m = max_rows[r], s = sums[2 * r];
    const i64 mine = labels[r] - vocab_begin;
    if (threadIdx.x == 0) loss_rows[r] = __logf(s) + m - sums[2 * r + 1];
    const float inv = 1.f / s;
    for (i64 c = threadIdx.x; c < vp; c += blockDim.x) {
        const float g = c < valid ? scale * (__expf(to_f(z[c]) - m) * inv - (c == mine ? 1.f : 0.f)) : 0.f;
        z[c] = from_f<T>(g);
    }
}

template <class T>
void launch_ce_max(const T* logits, float* max_rows, i64 rows, i64 valid, i64 vocab_padded, cudaStream_t stream) {
    if (rows == 0) return;
    ce_max_kernel<T><<<static_cast<unsigned>(rows), 512, 0, stream>>>(logits, max_rows, valid, vocab_padded);
    PF_LAUNCH_CHECK();
}

template <class T>
void launch_ce_sums(const T* logits, const std::int64_t* labels, const float* max_rows, float* sums, i64 rows,
                    i64 valid, i64 vocab_padded, i64 vocab_begin, cudaStream_t stream) {
    if (rows == 0) return;
    ce_sums_kernel<T><<<static_cast<unsigned>(rows), 512, 0, stream>>>(logits, labels, max_rows, sums, valid,
                                                                       vocab_padded, vocab_begin);
    PF_LAUNCH_CHECK();
}

template <class T>
void launch_ce_finish(T* logits, const std::int64_t* labels, const float* max_rows, const float* sums,
                      float* loss_rows, i64 rows, i64 valid, i64 vocab_padded, i64 vocab_begin, float scale,
                      cudaStream_t stream) {
    if (rows == 0) return;
    ce_finish_kernel<T><<<static_cast<unsigned>(rows), 512, 0, stream>>>(logits, labels, max_rows, sums, loss_rows,
                                                                         valid, vocab_padded, vocab_begin, scale);
    PF_LAUNCH_CHECK();
}

template void launch_ce_max<float>(const float*, float*, i64, i64, i64, cudaStream_t);
template void launch_ce_max<bf16>(const bf16*, float*, i64, i64, i64, cudaStream_t);
template void launch_ce_sums<float>(const float*, const std::int64_t*, const float*, float*, i64, i64, i64, i64,
                                    cudaStream_t);
template void launch_ce_sums<bf16>(const bf16*, const std::int64_t*, const float*, float*, i64, i64, i64, i64,
                                   cudaStream_t);
template void launch_ce_finish<float>(float*, const std::int64_t*, const float*, const float*, float*, i64, i64, i64,
                                      i64, float, cudaStream_t);
template void launch_ce_finish<bf16>(bf16*, const std::int64_t*, const float*, const float*, float*, i64, i64, i64,
                                     i64, float, cudaStream_t);

}  // namespace preflight::runtime::cuda
