// The DeviceRunner's norms (device_runner.hpp; program_layer.cpp emits them, their operands in
// program.hpp; the host runner's twin: host_runner.cpp and host_runner_ops.cpp): LayerNorm or
// RMSNorm over the residual stream's rows (norm.cu), and the q/k RMSNorms (Qwen3's per head, OLMoE's
// per projection) on the Q|K columns of the fused q|k|v (head_norm.cu).
#include "device_runner.hpp"

namespace preflight::runtime::cuda {

template <class T>
void DeviceRunner::norms(const Op& op, const BufferTable& t) {
    switch (op.kind) {
        case OpKind::norm_fwd:  // the view's rows: rows / tp under sequence parallelism
            launch_norm_fwd<T>(at<T>(t, op.v[0]), param<T>(t, op.p0), param<T>(t, op.p1),
                               op.v[2].buffer == kNoBuffer ? nullptr : at<T>(t, op.v[2]), at<T>(t, op.v[1]),
                               op.v[0].rows, d.h, norm_eps(), layernorm(), stream);
            break;
        case OpKind::norm_bwd:
            launch_norm_bwd<T>(at<T>(t, op.v[0]), param<T>(t, op.p0), at<T>(t, op.v[1]), at<T>(t, op.v[2]),
                               at<float>(t, op.v[3]), grad<T>(t, op.p0), grad<T>(t, op.p1), op.v[0].rows, d.h,
                               norm_eps(), layernorm(), op.accumulate, stream);
            break;
        case OpKind::head_norm_fwd:  // v0: qkv's Q|K columns (from the buffer's start), v1: the kept input
            launch_head_norm_fwd<T>(at<T>(t, op.v[0]), at<T>(t, op.v[1]), param<T>(t, op.p0), param<T>(t, op.p1),
                                    op.v[0].rows, d.qkv_width, d.qk_norm, norm_eps(), stream);
            break;
        case OpKind::head_norm_bwd:  // v0: the kept input, v1: dqkv's Q|K columns, v2: the scratch
            launch_head_norm_bwd<T>(at<T>(t, op.v[0]), at<T>(t, op.v[1]), at<float>(t, op.v[2]), param<T>(t, op.p0),
                                    param<T>(t, op.p1), grad<T>(t, op.p0), grad<T>(t, op.p1), op.v[1].rows, d.qkv_width,
                                    d.qk_norm, norm_eps(), stream);
            break;
        default: break;
    }
}

template void DeviceRunner::norms<float>(const Op&, const BufferTable&);
template void DeviceRunner::norms<bf16>(const Op&, const BufferTable&);

}  // namespace preflight::runtime::cuda
