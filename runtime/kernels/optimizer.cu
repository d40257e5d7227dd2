// AdamW (fp32 moments, fp32 master when present, 16-bit copy written back) and SGD
// with momentum. CPU reference: ref::adamw / ref::sgd.
#include "common.cuh"
#include "kernels.cuh"

namespace preflight::runtime::cuda {

__device__ __forceinline__ float load(const void* p, bool f32, i64 i) {
    return f32 ? static_cast<const float*>(p)[i] : __bfloat162float(static_cast<const bf16*>(p)[i]);
}
__device__ __forceinline__ void store(void* p, bool f32, i64 i, float v) {
    if (f32)
        static_cast<float*>(p)[i] = v;
    else
        static_cast<bf16*>(p)[i] = __float2bfloat16(v);
}

__global__ void adamw_kernel(OptimizerArgs a, float c1, float c2) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= a.n) return;
    const float g = load(a.grad, a.grad_f32, i);
    const float m = a.beta1 * a.m[i] + (1.f - a.beta1) * g;
    const float v = a.beta2 * a.v[i] + (1.f - a.beta2) * g * g;
    a.m[i] = m;
    a.v[i] = v;
    float p = a.master ? a.master[i] : load(a.weights, a.weights_f32, i);
    p -= a.lr * ((m / c1) / (sqrtf(v / c2) + a.eps) + a.weight_decay * p);
    if (a.master) a.master[i] = p;
    store(a.weights, a.weights_f32, i, p);
}

__global__ void sgd_kernel(OptimizerArgs a) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= a.n) return;
    float p = a.master ? a.master[i] : load(a.weights, a.weights_f32, i);
    const float g = load(a.grad, a.grad_f32, i) + a.weight_decay * p;
    const float mom = a.momentum * a.m[i] + g;
    a.m[i] = mom;
    p -= a.lr * mom;
    if (a.master) a.master[i] = p;
    store(a.weights, a.weights_f32, i, p);
}

void launch_adamw(const OptimizerArgs& a, cudaStream_t stream) {
    if (a.n == 0) return;
    const float c1 = 1.f - powf(a.beta1, static_cast<float>(a.step));
    const float c2 = 1.f - powf(a.beta2, static_cast<float>(a.step));
    adamw_kernel<<<grid_for(a.n, 256), 256, 0, stream>>>(a, c1, c2);
    PF_LAUNCH_CHECK();
}

void launch_sgd(const OptimizerArgs& a, cudaStream_t stream) {
    if (a.n == 0) return;
    sgd_kernel<<<grid_for(a.n, 256), 256, 0, stream>>>(a);
    PF_LAUNCH_CHECK();
}

}  // namespace preflight::runtime::cuda
