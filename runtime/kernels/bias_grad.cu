// Bias gradient: column sums of dY (CPU reference: the db term of ref::linear_bwd).
#include "common.cuh"
#include "kernels.cuh"

namespace preflight::runtime::cuda {

template <class T>
__global__ void bias_grad_kernel(const T* dy, T* db, i64 rows, i64 n, i64 ld) {
    const i64 c = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.f;
    if (c < n)
        for (i64 r = threadIdx.y; r < rows; r += blockDim.y) acc += to_f(dy[r * ld + c]);
    __shared__ float part[8][33];
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < n) {
        for (int k = 1; k < static_cast<int>(blockDim.y); ++k) acc += part[k][threadIdx.x];
        db[c] = from_f<T>(to_f(db[c]) + acc);
    }
}

template <class T>
void launch_bias_grad(const T* dy, T* db, i64 rows, i64 n, i64 ld, cudaStream_t stream) {
    bias_grad_kernel<T><<<grid_for(n, 32), dim3(32, 8), 0, stream>>>(dy, db, rows, n, ld);
    PF_LAUNCH_CHECK();
}

template void launch_bias_grad<float>(const float*, float*, i64, i64, i64, cudaStream_t);
template void launch_bias_grad<bf16>(const bf16*, bf16*, i64, i64, i64, cudaStream_t);

}  // namespace preflight::runtime::cuda
