#include "cudnn_sdpa.hpp"
#include "cudnn_fns.hpp"
#include "preflight/planner/profiles.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(PREFLIGHT_HAVE_CUDNN)
#include <cudnn_graph.h>
#endif

namespace preflight::runtime::cuda {

#if defined(PREFLIGHT_HAVE_CUDNN)
namespace {

// Every cuDNN call is checked: a failure throws DeviceError (library) with cuDNN's own message.
void check(cudnnStatus_t s, const char* what) {
    if (s == CUDNN_STATUS_SUCCESS) return;
    std::string detail = fns().error_string ? fns().error_string(s) : "status " + std::to_string(static_cast<int>(s));
    if (fns().last_error) {
        char buf[512] = {};
        fns().last_error(buf, sizeof buf);
        if (buf[0]) detail += std::string(": ") + buf;
    }
    throw DeviceError(FailureKind::library, static_cast<int>(s), std::string("cuDNN ") + what, detail);
}

// One backend descriptor, destroyed with its owner.
struct Desc {
    cudnnBackendDescriptor_t d = nullptr;
    explicit Desc(cudnnBackendDescriptorType_t t) { check(fns().create_desc(t, &d), "create descriptor"); }
    ~Desc() {
        if (d) fns().destroy_desc(d);
    }
    Desc(const Desc&) = delete;
    Desc& operator=(const Desc&) = delete;
    template <class T>
    void set(cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, const T* v, std::int64_t n = 1) {
        check(fns().set(d, a, t, n, v), "set attribute");
    }
    void set_desc(cudnnBackendAttributeName_t a, cudnnBackendDescriptor_t v) {
        check(fns().set(d, a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v), "set descriptor attribute");
    }
    void finalize(const char* what) { check(fns().finalize(d), what); }
};
using DescPtr = std::unique_ptr<Desc>;

// Builds one operation graph: tensors by uid, operations in order.
class GraphBuilder {
public:
    std::vector<DescPtr> keep;  // every descriptor the graph refers to
    std::vector<cudnnBackendDescriptor_t> ops;
    std::int64_t next_uid = 100;  // user tensors take 1..99

    cudnnBackendDescriptor_t tensor(std::int64_t uid, cudnnDataType_t t, std::vector<std::int64_t> dims,
                                    std::vector<std::int64_t> strides, bool is_virtual, bool by_value = false) {
        auto d = std::make_unique<Desc>(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
        const std::int64_t align = 16;
        d->set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &t);
        d->set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims.data(), static_cast<std::int64_t>(dims.size()));
        d->set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides.data(), static_cast<std::int64_t>(strides.size()));
        d->set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid);
        d->set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &align);
        const bool v = is_virtual;
        d->set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, &v);
        if (by_value) {
            const bool bv = true;
            d->set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, &bv);
        }
        d->finalize("tensor");
        keep.push_back(std::move(d));
        return keep.back()->d;
    }
    cudnnBackendDescriptor_t virt(cudnnDataType_t t, std::vector<std::int64_t> dims, std::vector<std::int64_t> strides) {
        return tensor(next_uid++, t, std::move(dims), std::move(strides), true);
    }
    cudnnBackendDescriptor_t scalar(std::int64_t uid, cudnnDataType_t t) {
        return tensor(uid, t, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
    }

    void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
        auto m = std::make_unique<Desc>(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
        const cudnnDataType_t ct = CUDNN_DATA_FLOAT;
        m->set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &ct);
        m->finalize("matmul");
        auto op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
        op->set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
        op->set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
        op->set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
        op->set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, m->d);
        op->finalize("matmul operation");
        add(std::move(m), std::move(op));
    }
    // y = mode(x [, b [, t]]); gen_index takes `axis`.
    void pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                   cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, cudnnDataType_t math = CUDNN_DATA_FLOAT,
                   std::int64_t axis = -1) {
        auto p = std::make_unique<Desc>(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
        p->set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &mode);
        p->set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &math);
        if (axis >= 0) p->set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, &axis);
        p->finalize("pointwise");
        auto op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
        op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, p->d);
        op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
        if (b) op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
        if (t) op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
        op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
        op->finalize("pointwise operation");
        add(std::move(p), std::move(op));
    }
    void reduction(cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
        auto r = std::make_unique<Desc>(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
        const cudnnDataType_t ct = CUDNN_DATA_FLOAT;
        r->set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, &mode);
        r->set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &ct);
        r->finalize("reduction");
        auto op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
        op->set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
        op->set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
        op->set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r->d);
        op->finalize("reduction operation");
        add(std::move(r), std::move(op));
    }
    void reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
        auto op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
        op->set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
        op->set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
        op->finalize("reshape operation");
        ops.push_back(op->d);
        keep.push_back(std::move(op));
    }

private:
    void add(DescPtr inner, DescPtr op) {
        ops.push_back(op->d);
        keep.push_back(std::move(inner));
        keep.push_back(std::move(op));
    }
};

// A finalised execution plan for one graph: the first engine configuration of cuDNN's
// heuristics (mode A) that finalises.
struct Plan {
    std::vector<DescPtr> keep;
    cudnnBackendDescriptor_t plan = nullptr;
    std::int64_t workspace_bytes = 0;
    std::string engine;
};

bool make_plan(cudnnHandle_t handle, GraphBuilder& g, Plan& out, std::string& why) {
    auto graph = std::make_unique<Desc>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    graph->set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g.ops.data(),
               static_cast<std::int64_t>(g.ops.size()));
    graph->set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &handle);
    graph->finalize("operation graph");
    auto heur = std::make_unique<Desc>(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heur->set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph->d);
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    heur->set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode);
    heur->finalize("engine heuristics");
    constexpr int kMaxConfigs = 8;
    std::vector<DescPtr> cfgs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int i = 0; i < kMaxConfigs; ++i) {
        cfgs.push_back(std::make_unique<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
        raw.push_back(cfgs.back()->d);
    }
    std::int64_t found = 0;
    check(fns().get(heur->d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, kMaxConfigs, &found,
                    raw.data()),
          "engine heuristics results");
    if (found == 0) {
        why = "cuDNN's heuristics offer no engine for the graph";
        return false;
    }
    std::string errors;
    for (std::int64_t i = 0; i < found; ++i) {
        auto plan = std::make_unique<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        plan->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &handle);
        plan->set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, raw[static_cast<std::size_t>(i)]);
        const cudnnStatus_t s = fns().finalize(plan->d);
        if (s != CUDNN_STATUS_SUCCESS) {
            errors += std::string(errors.empty() ? "" : "; ") + "config " + std::to_string(i) + ": " +
                      (fns().error_string ? fns().error_string(s) : std::to_string(static_cast<int>(s)));
            continue;
        }
        std::int64_t ws = 0, n = 0;
        check(fns().get(plan->d, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws),
              "plan workspace size");
        out.plan = plan->d;
        out.workspace_bytes = ws;
        out.engine = "engine config " + std::to_string(i) + " of " + std::to_string(found);
        out.keep.push_back(std::move(graph));
        out.keep.push_back(std::move(heur));
        for (auto& c : cfgs) out.keep.push_back(std::move(c));
        out.keep.push_back(std::move(plan));
        return true;
    }
    why = "no engine configuration finalised (" + errors + ")";
    return false;
}

void execute(cudnnHandle_t handle, const Plan& p, std::vector<std::int64_t> uids, std::vector<void*> ptrs,
             void* workspace, const char* what) {
    Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.data(), static_cast<std::int64_t>(uids.size()));
    pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, ptrs.data(),
             static_cast<std::int64_t>(ptrs.size()));
    pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &workspace);
    pack.finalize("variant pack");
    check(fns().execute(handle, p.plan, pack.d), what);
}

// User tensor uids.
enum : std::int64_t {
    kQ = 1, kK = 2, kV = 3, kO = 4, kStats = 5, kScale = 6, kNegInf = 7, kOne = 8, kWindow = 9,
    kdO = 10, kdQ = 11, kdK = 12, kdV = 13, kSoftmaxSum = 14, kdQAccum = 15,
};

}  // namespace

struct CudnnSdpa::Impl {
    cudnnHandle_t handle = nullptr;
    std::int64_t b = 0, s = 0, h = 0, hk = 0, d = 0;
    std::int64_t window = 0;  // sliding window (keys a query sees); 0: none
    Plan fwd, bwd;
    // Where the backward engine's own workspace lives: 0 = the shared cuBLASLt workspace, else
    // this offset into the flash backward workspace (after the accumulator; GQA engines).
    std::int64_t bwd_engine_offset = 0;
    GraphBuilder gf, gb;
    float scale = 1.f, neg_inf = -std::numeric_limits<float>::infinity(), one = 1.f, window_f = 0.f;
    std::int64_t C() const { return (h + 2 * hk) * d; }  // qkv row width
    // A window that spans the sequence masks nothing: the graphs are the plain causal ones.
    void set_window(std::int64_t w) {
        window = w > 0 && w < s ? w : 0;
        window_f = static_cast<float>(window);
    }
    ~Impl() {
        fwd.keep.clear();  // plans before the graphs and tensors they were built from
        bwd.keep.clear();
        gf.keep.clear();
        gb.keep.clear();
        if (handle) fns().destroy(handle);
    }

    // Q, K^T, V (and their gradients) as strided views of the packed [b*s, (h + 2 hk) d] rows.
    std::vector<std::int64_t> q_dims() const { return {b, h, s, d}; }
    std::vector<std::int64_t> q_strides() const { return {s * C(), d, C(), 1}; }
    std::vector<std::int64_t> kt_dims() const { return {b, hk, d, s}; }
    std::vector<std::int64_t> kt_strides() const { return {s * C(), d, 1, C()}; }
    std::vector<std::int64_t> kv_dims() const { return {b, hk, s, d}; }
    std::vector<std::int64_t> kv_strides() const { return {s * C(), d, C(), 1}; }
    std::vector<std::int64_t> o_dims() const { return {b, h, s, d}; }
    std::vector<std::int64_t> o_strides() const { return {s * h * d, d, h * d, 1}; }
    std::vector<std::int64_t> sc_dims() const { return {b, h, s, s}; }  // scores
    std::vector<std::int64_t> sc_strides() const { return {h * s * s, s * s, s, 1}; }
    std::vector<std::int64_t> row_dims() const { return {b, h, s, 1}; }  // per-row stats
    std::vector<std::int64_t> row_strides() const { return {h * s, s, 1, 1}; }

    // The row (query) and column (key) index of each of the scores `x`: gen_index over axes 2 and 3.
    std::pair<cudnnBackendDescriptor_t, cudnnBackendDescriptor_t> indices(GraphBuilder& g, cudnnBackendDescriptor_t x) {
        auto row = g.virt(CUDNN_DATA_INT32, sc_dims(), sc_strides());
        auto col = g.virt(CUDNN_DATA_INT32, sc_dims(), sc_strides());
        g.pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, nullptr, row, CUDNN_DATA_FLOAT, 2);
        g.pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, nullptr, col, CUDNN_DATA_FLOAT, 3);
        return {row, col};
    }

    // Causal mask on scores `x` (top-left diagonal: keep column <= row), as the composite
    // graph of cudnn-frontend's diagonal band mask: gen_index rows/cols, row >= col, select;
    // then the sliding window's left edge when there is one.
    cudnnBackendDescriptor_t causal(GraphBuilder& g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t neg_inf_t) {
        const auto [row, col] = indices(g, x);
        auto keep = g.virt(CUDNN_DATA_BOOLEAN, sc_dims(), sc_strides());
        g.pointwise(CUDNN_POINTWISE_CMP_GE, row, col, nullptr, keep, CUDNN_DATA_BOOLEAN);
        auto y = g.virt(CUDNN_DATA_FLOAT, sc_dims(), sc_strides());
        g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, x, neg_inf_t, keep, y);
        return window > 0 ? left_bound(g, y, neg_inf_t) : y;
    }

    // The sliding window's left edge on the causally masked scores `x` (keep column + window >
    // row), as cudnn-frontend's sliding_window_mask builds it for a top-left diagonal: its own
    // gen_index pair, the window added to the column as a by-value float, compare, select.
    cudnnBackendDescriptor_t left_bound(GraphBuilder& g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t neg_inf_t) {
        const auto [row, col] = indices(g, x);
        auto reach = g.virt(CUDNN_DATA_FLOAT, sc_dims(), sc_strides());
        g.pointwise(CUDNN_POINTWISE_ADD, col, g.scalar(kWindow, CUDNN_DATA_FLOAT), nullptr, reach, CUDNN_DATA_FLOAT, 3);
        auto keep = g.virt(CUDNN_DATA_BOOLEAN, sc_dims(), sc_strides());
        g.pointwise(CUDNN_POINTWISE_CMP_GT, reach, row, nullptr, keep, CUDNN_DATA_BOOLEAN);
        auto y = g.virt(CUDNN_DATA_FLOAT, sc_dims(), sc_strides());
        g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, x, neg_inf_t, keep, y);
        return y;
    }

    // The by-value scalars a graph reads beside its tensors (the window's only when it has one).
    void add_scalars(std::vector<std::int64_t>& uids, std::vector<void*>& ptrs, bool with_one) {
        uids.insert(uids.end(), {kScale, kNegInf});
        ptrs.insert(ptrs.end(), {&scale, &neg_inf});
        if (with_one) uids.push_back(kOne), ptrs.push_back(&one);
        if (window > 0) uids.push_back(kWindow), ptrs.push_back(&window_f);
    }

    // Forward (cudnn-frontend CompositeSDPANode + CompositeSoftmaxNode, training mode with stats):
    // S = scale Q K^T, causal mask, M = max, E = exp(S - M), Z = sum E, Stats = M + log Z,
    // P = E / Z (bf16), O = P V.
    void build_forward() {
        GraphBuilder& g = gf;
        auto Q = g.tensor(kQ, CUDNN_DATA_BFLOAT16, q_dims(), q_strides(), false);
        auto KT = g.tensor(kK, CUDNN_DATA_BFLOAT16, kt_dims(), kt_strides(), false);
        auto V = g.tensor(kV, CUDNN_DATA_BFLOAT16, kv_dims(), kv_strides(), false);
        auto O = g.tensor(kO, CUDNN_DATA_BFLOAT16, o_dims(), o_strides(), false);
        auto Stats = g.tensor(kStats, CUDNN_DATA_FLOAT, row_dims(), row_strides(), false);
        auto Scale = g.scalar(kScale, CUDNN_DATA_FLOAT);
        auto NegInf = g.scalar(kNegInf, CUDNN_DATA_FLOAT);
        auto S = g.virt(CUDNN_DATA_FLOAT, sc_dims(), sc_strides());
        g.matmul(Q, KT, S);
        auto Ss = g.virt(CUDNN_DATA_FLOAT, sc_dims(), sc_strides());
        g.pointwise(CUDNN_POINTWISE_MUL, S, Scale, nullptr, Ss);
        auto Sm = causal(g, Ss, NegInf);
        auto M = g.virt(CUDNN_DATA_FLOAT, row_dims(), row_strides());
        g.reduction(CUDNN_REDUCE_TENSOR_MAX, Sm, M);
        auto D = g.virt(CUDNN_DATA_FLOAT, sc_dims(), sc_strides());
        g.pointwise(CUDNN_POINTWISE_SUB, Sm, M, nullptr, D);
        auto E = g.virt(CUDNN_DATA_FLOAT, sc_dims(), sc_strides());
        g.pointwise(CUDNN_POINTWISE_EXP, D, nullptr, nullptr, E);
        auto Z = g.virt(CUDNN_DATA_FLOAT, row_dims(), row_strides());
        g.reduction(CUDNN_REDUCE_TENSOR_ADD, E, Z);
        auto LogZ = g.virt(CUDNN_DATA_FLOAT, row_dims(), row_strides());
        g.pointwise(CUDNN_POINTWISE_LOG, Z, nullptr, nullptr, LogZ);
        g.pointwise(CUDNN_POINTWISE_ADD, M, LogZ, nullptr, Stats);
        auto P = g.virt(CUDNN_DATA_BFLOAT16, sc_dims(), sc_strides());
        g.pointwise(CUDNN_POINTWISE_DIV, E, Z, nullptr, P);
        g.matmul(P, V, O);
    }

    // Backward (cudnn-frontend CompositeSDPABackwardNode, no dropout, cuDNN >= 9: dQ through an
    // fp32 accumulator): softmax_sum = rowsum(dO * O); P = exp(mask(scale Q K^T) - Stats);
    // dV = P^T dO; dP = dO V^T; dS = P (dP - softmax_sum) scale; dK = dS^T Q; dQ = dS K.
    // GQA: dK, dV computed per query head and summed over each KV head's group (reduction).
    void build_backward() {
        GraphBuilder& g = gb;
        const bool gqa = h != hk;
        auto Q = g.tensor(kQ, CUDNN_DATA_BFLOAT16, q_dims(), q_strides(), false);
        auto KT = g.tensor(kK, CUDNN_DATA_BFLOAT16, kt_dims(), kt_strides(), false);
        auto VT = g.tensor(kV, CUDNN_DATA_BFLOAT16, kt_dims(), kt_strides(), false);
        auto O = g.tensor(kO, CUDNN_DATA_BFLOAT16, o_dims(), o_strides(), false);
        auto dO = g.tensor(kdO, CUDNN_DATA_BFLOAT16, o_dims(), o_strides(), false);
        auto Stats = g.tensor(kStats, CUDNN_DATA_FLOAT, row_dims(), row_strides(), false);
        auto dQ = g.tensor(kdQ, CUDNN_DATA_BFLOAT16, q_dims(), q_strides(), false);
        auto dK = g.tensor(kdK, CUDNN_DATA_BFLOAT16, kv_dims(), kv_strides(), false);
        auto dV = g.tensor(kdV, CUDNN_DATA_BFLOAT16, kv_dims(), kv_strides(), false);
        auto SoftmaxSum = g.tensor(kSoftmaxSum, CUDNN_DATA_FLOAT, row_dims(), row_strides(), false);
        auto dQAccum = g.tensor(kdQAccum, CUDNN_DATA_FLOAT, q_dims(), {h * s * d, s * d, d, 1}, false);
        auto Scale = g.scalar(kScale, CUDNN_DATA_FLOAT);
        auto NegInf = g.scalar(kNegInf, CUDNN_DATA_FLOAT);
        auto One = g.scalar(kOne, CUDNN_DATA_FLOAT);

        // softmax_sum = rowsum(dO * O) * 1
        auto dOO = g.virt(CUDNN_DATA_FLOAT, o_dims(), {h * s * d, s * d, h * d, 1});
        g.pointwise(CUDNN_POINTWISE_MUL, dO, O, nullptr, dOO);
        auto rs = g.virt(CUDNN_DATA_FLOAT, row_dims(), row_strides());
        g.reduction(CUDNN_REDUCE_TENSOR_ADD, dOO, rs);
        g.pointwise(CUDNN_POINTWISE_MUL, rs, One, nullptr, SoftmaxSum);

        // P = exp(mask(scale Q K^T - Stats))
        auto S = g.virt(CUDNN_DATA_FLOAT, sc_dims(), sc_strides());
        g.matmul(Q, KT, S);
        auto Ss = g.virt(CUDNN_DATA_FLOAT, sc_dims(), sc_strides());
        g.pointwise(CUDNN_POINTWISE_MUL, S, Scale, nullptr, Ss);
        auto Sd = g.virt(CUDNN_DATA_FLOAT, sc_dims(), sc_strides());
        g.pointwise(CUDNN_POINTWISE_SUB, Ss, Stats, nullptr, Sd);
        auto Sm = causal(g, Sd, NegInf);
        auto P = g.virt(CUDNN_DATA_FLOAT, sc_dims(), sc_strides());
        g.pointwise(CUDNN_POINTWISE_EXP, Sm, nullptr, nullptr, P);

        // dV = P^T dO (summed over the group for GQA)
        auto PT = g.virt(CUDNN_DATA_BFLOAT16, {b, h, s, s}, {h * s * s, s * s, 1, s});
        g.reshape(P, PT);
        if (!gqa) {
            g.matmul(PT, dO, dV);
        } else {
            auto dVf = g.virt(CUDNN_DATA_BFLOAT16, {b, h, s, d}, {h * s * d, s * d, d, 1});
            g.matmul(PT, dO, dVf);
            g.reduction(CUDNN_REDUCE_TENSOR_ADD, dVf, dV);
        }

        // dS = P (dO V^T - softmax_sum) scale
        auto dP = g.virt(CUDNN_DATA_FLOAT, sc_dims(), sc_strides());
        g.matmul(dO, VT, dP);
        auto dPs = g.virt(CUDNN_DATA_FLOAT, sc_dims(), sc_strides());
        g.pointwise(CUDNN_POINTWISE_SUB, dP, SoftmaxSum, nullptr, dPs);
        auto dSu = g.virt(CUDNN_DATA_FLOAT, sc_dims(), sc_strides());
        g.pointwise(CUDNN_POINTWISE_MUL, dPs, P, nullptr, dSu);
        auto dS = g.virt(CUDNN_DATA_FLOAT, sc_dims(), sc_strides());
        g.pointwise(CUDNN_POINTWISE_MUL, dSu, Scale, nullptr, dS);

        // dK = dS^T Q (summed over the group for GQA)
        auto dST = g.virt(CUDNN_DATA_BFLOAT16, {b, h, s, s}, {h * s * s, s * s, 1, s});
        g.reshape(dS, dST);
        if (!gqa) {
            g.matmul(dST, Q, dK);
        } else {
            auto dKf = g.virt(CUDNN_DATA_BFLOAT16, {b, h, s, d}, {h * s * d, s * d, d, 1});
            g.matmul(dST, Q, dKf);
            g.reduction(CUDNN_REDUCE_TENSOR_ADD, dKf, dK);
        }

        // dQ = dS K through the fp32 accumulator
        auto K = g.virt(CUDNN_DATA_BFLOAT16, kv_dims(), kv_strides());
        g.reshape(KT, K);
        g.matmul(dS, K, dQAccum);
        g.pointwise(CUDNN_POINTWISE_IDENTITY, dQAccum, nullptr, nullptr, dQ);
    }
};

CudnnSdpa::CudnnSdpa(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudnnSdpa::~CudnnSdpa() = default;

std::unique_ptr<CudnnSdpa> CudnnSdpa::create(std::int64_t b, std::int64_t s, std::int64_t heads,
                                             std::int64_t kv_heads, std::int64_t d, std::int64_t window,
                                             std::int64_t workspace_bytes, std::int64_t shared_workspace_bytes,
                                             std::string& why) {
    const CudnnLibrary& lib = cudnn_library();
    if (!lib.loaded) {
        why = lib.path_or_error;
        return nullptr;
    }
    if (!fns().ok) {
        why = "libcudnn lacks a backend API entry point";
        return nullptr;
    }
    if (d % 8 != 0 || d > 128) {
        why = "head_dim " + std::to_string(d) + " (cuDNN's flash attention needs a multiple of 8, at most 128)";
        return nullptr;
    }
    auto impl = std::make_unique<Impl>();
    impl->b = b, impl->s = s, impl->h = heads, impl->hk = kv_heads, impl->d = d;
    impl->set_window(window);
    impl->scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
    try {
        check(fns().create(&impl->handle), "cudnnCreate");
        impl->build_forward();
        impl->build_backward();
        std::string fwhy, bwhy;
        if (!make_plan(impl->handle, impl->gf, impl->fwd, fwhy)) {
            why = "forward: " + fwhy;
            return nullptr;
        }
        if (!make_plan(impl->handle, impl->gb, impl->bwd, bwhy)) {
            why = "backward: " + bwhy;
            return nullptr;
        }
        // Workspace: the fp32 dQ accumulator and softmax sum start the program's flash backward
        // workspace. An engine's own workspace comes from the one cuBLASLt uses (ops on one
        // stream never overlap) when it fits there; a larger backward one (cuDNN's GQA engines)
        // from the rest of the flash backward workspace, which the program sizes for it
        // (profiles.hpp runtime_cudnn_gqa_engine_workspace_bytes). So cuDNN adds no memory the
        // program does not plan.
        const std::int64_t fixed = b * heads * s * (d + 1) * 4;
        if (fixed > workspace_bytes) {
            why = "the backward needs " + std::to_string(fixed) + " bytes for its dQ accumulator and softmax sum, the "
                  "program plans " + std::to_string(workspace_bytes);
            return nullptr;
        }
        const std::int64_t accum = runtime_flash_bwd_accumulator_bytes(b, heads, s, d);
        const std::int64_t rest = std::max<std::int64_t>(0, workspace_bytes - accum);
        if (impl->bwd.workspace_bytes > shared_workspace_bytes && impl->bwd.workspace_bytes <= rest)
            impl->bwd_engine_offset = accum;
        if (impl->fwd.workspace_bytes > shared_workspace_bytes ||
            (impl->bwd.workspace_bytes > shared_workspace_bytes && impl->bwd_engine_offset == 0)) {
            why = "its engines need " + std::to_string(std::max(impl->fwd.workspace_bytes, impl->bwd.workspace_bytes)) +
                  " bytes of workspace (forward " + std::to_string(impl->fwd.workspace_bytes) + ", backward " +
                  std::to_string(impl->bwd.workspace_bytes) + "), more than the shared " +
                  std::to_string(shared_workspace_bytes) + " and the flash backward workspace's " +
                  std::to_string(rest) + " after its accumulator";
            return nullptr;
        }
        why = "cuDNN " + std::to_string(lib.version) + " from " + lib.path_or_error + "; forward " + impl->fwd.engine +
              ", backward " + impl->bwd.engine + "; engine workspace " + std::to_string(impl->fwd.workspace_bytes) +
              " / " + std::to_string(impl->bwd.workspace_bytes) + " bytes" +
              (impl->bwd_engine_offset ? " (backward's in the flash backward workspace)" : "");
    } catch (const std::exception& e) {
        why = e.what();
        return nullptr;
    }
    return std::unique_ptr<CudnnSdpa>(new CudnnSdpa(std::move(impl)));
}

std::string CudnnSdpa::check_graphs(std::int64_t b, std::int64_t s, std::int64_t heads, std::int64_t kv_heads,
                                    std::int64_t d, std::int64_t window, int (&ops)[2]) {
    const CudnnLibrary& lib = cudnn_library();
    if (!lib.loaded) return lib.path_or_error;
    if (!fns().ok) return "libcudnn lacks a backend API entry point";
    Impl m;
    m.b = b, m.s = s, m.h = heads, m.hk = kv_heads, m.d = d;
    m.set_window(window);
    try {
        m.build_forward();
        m.build_backward();
    } catch (const std::exception& e) {
        return e.what();
    }
    ops[0] = static_cast<int>(m.gf.ops.size());
    ops[1] = static_cast<int>(m.gb.ops.size());
    return "";
}

void CudnnSdpa::forward(const bf16* qkv, bf16* out, float* lse, void* shared, cudaStream_t stream) {
    Impl& m = *impl_;
    check(fns().set_stream(m.handle, stream), "cudnnSetStream");
    const bf16* q = qkv;
    const bf16* k = qkv + m.h * m.d;
    const bf16* v = qkv + (m.h + m.hk) * m.d;
    std::vector<std::int64_t> uids = {kQ, kK, kV, kO, kStats};
    std::vector<void*> ptrs = {const_cast<bf16*>(q), const_cast<bf16*>(k), const_cast<bf16*>(v), out, lse};
    m.add_scalars(uids, ptrs, false);
    execute(m.handle, m.fwd, std::move(uids), std::move(ptrs), m.fwd.workspace_bytes > 0 ? shared : nullptr,
            "SDPA forward");
}

void CudnnSdpa::backward(const bf16* qkv, const bf16* out, const float* lse, const bf16* dout, bf16* dqkv,
                         void* workspace, std::int64_t workspace_bytes, void* shared, cudaStream_t stream) {
    Impl& m = *impl_;
    check(fns().set_stream(m.handle, stream), "cudnnSetStream");
    const std::int64_t accum_bytes = m.b * m.h * m.s * m.d * 4, sum_bytes = m.b * m.h * m.s * 4;
    if (accum_bytes + sum_bytes > workspace_bytes)
        throw DeviceError(FailureKind::other, 0, "cuDNN SDPA backward", "workspace smaller than planned");
    auto* ws = static_cast<char*>(workspace);
    float* dq_accum = reinterpret_cast<float*>(ws);
    float* softmax_sum = reinterpret_cast<float*>(ws + accum_bytes);
    void* engine_ws = m.bwd.workspace_bytes == 0 ? nullptr : m.bwd_engine_offset ? ws + m.bwd_engine_offset : shared;
    if (m.bwd_engine_offset && m.bwd_engine_offset + m.bwd.workspace_bytes > workspace_bytes)
        throw DeviceError(FailureKind::other, 0, "cuDNN SDPA backward", "engine workspace outside the planned one");
    PF_CUDA_CHECK(cudaMemsetAsync(dq_accum, 0, static_cast<std::size_t>(accum_bytes), stream));
    const bf16* q = qkv;
    const bf16* k = qkv + m.h * m.d;
    const bf16* v = qkv + (m.h + m.hk) * m.d;
    bf16* dq = dqkv;
    bf16* dk = dqkv + m.h * m.d;
    bf16* dv = dqkv + (m.h + m.hk) * m.d;
    std::vector<std::int64_t> uids = {kQ, kK, kV, kO, kdO, kStats, kdQ, kdK, kdV, kSoftmaxSum, kdQAccum};
    std::vector<void*> ptrs = {const_cast<bf16*>(q),   const_cast<bf16*>(k),    const_cast<bf16*>(v),
                               const_cast<bf16*>(out), const_cast<bf16*>(dout), const_cast<float*>(lse),
                               dq,                     dk,                      dv,
                               softmax_sum,            dq_accum};
    m.add_scalars(uids, ptrs, true);
    execute(m.handle, m.bwd, std::move(uids), std::move(ptrs), engine_ws, "SDPA backward");
}

#else  // no cuDNN headers: never available

struct CudnnSdpa::Impl {};
CudnnSdpa::CudnnSdpa(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudnnSdpa::~CudnnSdpa() = default;
std::unique_ptr<CudnnSdpa> CudnnSdpa::create(std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                             std::int64_t, std::int64_t, std::int64_t, std::string& why) {
    why = cudnn_library().path_or_error;
    return nullptr;
}
std::string CudnnSdpa::check_graphs(std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                    int (&)[2]) {
    return cudnn_library().path_or_error;
}
void CudnnSdpa::forward(const bf16*, bf16*, float*, void*, cudaStream_t) {
    throw DeviceError(FailureKind::library, 0, "cuDNN SDPA forward", "no cuDNN in this build");
}
void CudnnSdpa::backward(const bf16*, const bf16*, const float*, const bf16*, bf16*, void*, std::int64_t, void*,
                         cudaStream_t) {
    throw DeviceError(FailureKind::library, 0, "cuDNN SDPA backward", "no cuDNN in this build");
}

#endif

}  // namespace preflight::runtime::cuda
