// The DeviceRunner's flash attention (device_runner.hpp): cuDNN's fused kernels for bf16 when the
// engine is set (attention.hpp), else the runtime's kernel (flash_attention.cu); and the
// context-parallel ops (program_cp.cpp emits them): the K|V moves between the rank's q|k|v rows,
// the gather buffer and sequence order (cp_kv.cu), and flash attention of the rank's queries at
// their positions (flash_attention.cu's cp launchers; cuDNN is not used under cp).
#include "attention.hpp"
#include "device_runner.hpp"

namespace preflight::runtime::cuda {

namespace {

// The runner's view access, for the helpers below.
template <class T>
constexpr T* (*at)(const BufferTable&, const View&) = &DeviceRunner::at<T>;

template <class T>
void run_cp_as(const Program& P, const Op& op, const BufferTable& t, cudaStream_t stream) {
    const Dims& d = P.dims;
    switch (op.kind) {
        case OpKind::flash_fwd:  // v0 qkv, v1 out, v2 lse, v3 K|V in sequence order
            launch_flash_fwd_cp<T>(at<T>(t, op.v[0]), at<T>(t, op.v[3]), at<T>(t, op.v[1]),
                                   at<float>(t, op.v[2]), d.b, d.s, d.heads, d.kv_heads, d.head_dim, d.cp,
                                   d.cp_rank, d.window_of(op.phase.layer), stream);
            return;
        case OpKind::flash_bwd:  // v3 dOut, v4 dqkv (Q columns), v5 workspace, v6 K|V, v7 dK|dV
            launch_flash_bwd_cp<T>(at<T>(t, op.v[0]), at<T>(t, op.v[6]), at<T>(t, op.v[1]),
                                   at<float>(t, op.v[2]), at<T>(t, op.v[3]), at<T>(t, op.v[4]),
                                   at<T>(t, op.v[7]), reinterpret_cast<float*>(at<std::uint8_t>(t, op.v[5])),
                                   d.b, d.s, d.heads, d.kv_heads, d.head_dim, d.cp, d.cp_rank, d.window_of(op.phase.layer),
                                   stream);
            return;
        default: break;
    }
    const CpKvMove move = op.kind == OpKind::cp_kv_pack      ? CpKvMove::pack
                          : op.kind == OpKind::cp_kv_order   ? CpKvMove::order
                          : op.kind == OpKind::cp_kv_unorder ? CpKvMove::unorder
                                                             : CpKvMove::unpack;
    const CpKvShape g{d.b, d.s, d.cp, d.cp_rank, d.qkv_width, d.q_width, 2 * d.kv_width};
    launch_cp_kv<T>(at<T>(t, op.v[0]), at<T>(t, op.v[1]), move, g, stream);
}

template <class T>
void flash_as(const Program& P, const Op& op, const BufferTable& t, cudaStream_t stream) {
    const Dims& d = P.dims;
    if (op.kind == OpKind::flash_fwd)  // v0 qkv, v1 out, v2 lse
        launch_flash_fwd<T>(at<T>(t, op.v[0]), at<T>(t, op.v[1]), at<float>(t, op.v[2]), d.b, d.s,
                            d.heads, d.kv_heads, d.head_dim, d.window_of(op.phase.layer), stream);
    else  // v3 dOut, v4 dqkv, v5 workspace
        launch_flash_bwd<T>(at<T>(t, op.v[0]), at<T>(t, op.v[1]), at<float>(t, op.v[2]),
                            at<T>(t, op.v[3]), at<T>(t, op.v[4]),
                            reinterpret_cast<float*>(at<std::uint8_t>(t, op.v[5])), d.b, d.s, d.heads, d.kv_heads,
                            d.head_dim, d.window_of(op.phase.layer), stream);
}

}  // namespace

void DeviceRunner::run_flash(const Op& op, const BufferTable& t) {
    if (d.cp > 1) return run_cp(op, t);
    if (P.act == DType::f32) return flash_as<float>(P, op, t, stream);
    if (!attention_) return flash_as<bf16>(P, op, t, stream);
    if (op.kind == OpKind::flash_fwd)
        attention_->forward(at<bf16>(t, op.v[0]), at<bf16>(t, op.v[1]), at<float>(t, op.v[2]), d.window_of(op.phase.layer),
                            stream);
    else
        attention_->backward(at<bf16>(t, op.v[0]), at<bf16>(t, op.v[1]), at<float>(t, op.v[2]),
                             at<bf16>(t, op.v[3]), at<bf16>(t, op.v[4]), at<std::uint8_t>(t, op.v[5]),
                             op.v[5].cols, d.window_of(op.phase.layer), stream);
}

void DeviceRunner::run_cp(const Op& op, const BufferTable& t) {
    if (P.act == DType::f32)
        run_cp_as<float>(P, op, t, stream);
    else
        run_cp_as<bf16>(P, op, t, stream);
}

}  // namespace preflight::runtime::cuda
