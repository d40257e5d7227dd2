// AdamW (fp32 moments, fp32 master when present, 16-bit copy written back) and SGD
// with momentum. CPU reference: ref::adamw / ref::sgd.
#include "common.cuh"
#include "kernels.cuh"

#include <algorithm>

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

// Multi-tensor AdamW: one launch over a contiguous range of the flat parameter buffers
// covering up to kAdamwMaxTensors tensors; each thread updates 4 consecutive elements with
// 16-byte fp32 loads/stores (moments, master) and 8-byte (bf16) or 16-byte (fp32) weight
// and gradient accesses. Every tensor starts at a multiple of 64 elements and its padding
// (zero gradient, zero weight) stays zero, so the range is a multiple of 4 with no tails.
struct AdamwMultiParams {
    i64 begin[kAdamwMaxTensors];         // tensor start, absolute element index (sorted)
    unsigned char decay[kAdamwMaxTensors];
    int count;
    i64 end;  // one past the last element
};

__device__ __forceinline__ void load4(const void* p, bool f32, i64 i, float (&o)[4]) {
    if (f32) {
        const float4 v = *reinterpret_cast<const float4*>(static_cast<const float*>(p) + i);
        o[0] = v.x, o[1] = v.y, o[2] = v.z, o[3] = v.w;
    } else {
        const uint2 raw = *reinterpret_cast<const uint2*>(static_cast<const bf16*>(p) + i);
        const __nv_bfloat162 a = *reinterpret_cast<const __nv_bfloat162*>(&raw.x);
        const __nv_bfloat162 b = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
        const float2 fa = __bfloat1622float2(a), fb = __bfloat1622float2(b);
        o[0] = fa.x, o[1] = fa.y, o[2] = fb.x, o[3] = fb.y;
    }
}
__device__ __forceinline__ void store4(void* p, bool f32, i64 i, const float (&v)[4]) {
    if (f32) {
        *reinterpret_cast<float4*>(static_cast<float*>(p) + i) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
        const __nv_bfloat162 a = __floats2bfloat162_rn(v[0], v[1]), b = __floats2bfloat162_rn(v[2], v[3]);
        uint2 raw;
        raw.x = *reinterpret_cast<const unsigned*>(&a);
        raw.y = *reinterpret_cast<const unsigned*>(&b);
        *reinterpret_cast<uint2*>(static_cast<bf16*>(p) + i) = raw;
    }
}

__global__ void adamw_multi_kernel(OptimizerArgs a, AdamwMultiParams t, float c1, float c2) {
    const i64 first = t.begin[0];
    const i64 groups = (t.end - first) / 4;
    for (i64 gi = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; gi < groups;
         gi += static_cast<i64>(gridDim.x) * blockDim.x) {
        const i64 i = first + 4 * gi;
        int lo = 0, hi = t.count - 1;  // last tensor whose begin <= i
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (t.begin[mid] <= i) lo = mid; else hi = mid - 1;
        }
        const float wd = t.decay[lo] ? a.weight_decay : 0.f;
        float g[4], p[4];
        load4(a.grad, a.grad_f32, i, g);
        float4 m = *reinterpret_cast<const float4*>(a.m + i), v = *reinterpret_cast<const float4*>(a.v + i);
        float mm[4] = {m.x, m.y, m.z, m.w}, vv[4] = {v.x, v.y, v.z, v.w};
        if (a.master) {
            const float4 pm = *reinterpret_cast<const float4*>(a.master + i);
            p[0] = pm.x, p[1] = pm.y, p[2] = pm.z, p[3] = pm.w;
        } else {
            load4(a.weights, a.weights_f32, i, p);
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            mm[k] = a.beta1 * mm[k] + (1.f - a.beta1) * g[k];
            vv[k] = a.beta2 * vv[k] + (1.f - a.beta2) * g[k] * g[k];
            p[k] -= a.lr * ((mm[k] / c1) / (sqrtf(vv[k] / c2) + a.eps) + wd * p[k]);
        }
        *reinterpret_cast<float4*>(a.m + i) = make_float4(mm[0], mm[1], mm[2], mm[3]);
        *reinterpret_cast<float4*>(a.v + i) = make_float4(vv[0], vv[1], vv[2], vv[3]);
        if (a.master) *reinterpret_cast<float4*>(a.master + i) = make_float4(p[0], p[1], p[2], p[3]);
        store4(a.weights, a.weights_f32, i, p);
    }
}

void launch_adamw_multi(const OptimizerArgs& a, const i64* begin, const bool* decay, int count, i64 end,
                        cudaStream_t stream) {
    if (count <= 0 || count > kAdamwMaxTensors)
        throw DeviceError(FailureKind::other, 0, "launch_adamw_multi", "tensor count out of range");
    AdamwMultiParams t{};
    for (int k = 0; k < count; ++k) {
        t.begin[k] = begin[k];
        t.decay[k] = decay[k] ? 1 : 0;
    }
    t.count = count;
    t.end = end;
    if ((end - begin[0]) % 4 != 0 || begin[0] % 4 != 0)
        throw DeviceError(FailureKind::other, 0, "launch_adamw_multi", "range not a multiple of 4 elements");
    const float c1 = 1.f - powf(a.beta1, static_cast<float>(a.step));
    const float c2 = 1.f - powf(a.beta2, static_cast<float>(a.step));
    const i64 groups = (end - begin[0]) / 4;
    const unsigned blocks = static_cast<unsigned>(std::min<i64>((groups + 255) / 256, 132 * 16));
    adamw_multi_kernel<<<std::max(blocks, 1u), 256, 0, stream>>>(a, t, c1, c2);
    PF_LAUNCH_CHECK();
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
