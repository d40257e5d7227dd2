#include "gemm.cuh"

#include "preflight/runtime/errors.hpp"

#include <stdexcept>
#include <string>

namespace preflight::runtime::cuda {

const char* cublasLt_status_name(cublasStatus_t s) {
    switch (s) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
        case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
        case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
        case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
        default: return "unknown cuBLAS status";
    }
}

namespace {

void check(cublasStatus_t s, const char* what) {
    if (s != CUBLAS_STATUS_SUCCESS)
        throw DeviceError(FailureKind::library, static_cast<int>(s), std::string("cuBLASLt ") + what,
                          cublasLt_status_name(s));
}

// RAII holders for the descriptors of one call.
struct Layout {
    cublasLtMatrixLayout_t h = nullptr;
    Layout(cudaDataType_t t, std::int64_t rows, std::int64_t cols, std::int64_t ld, int batch, std::int64_t stride) {
        check(cublasLtMatrixLayoutCreate(&h, t, static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(cols), ld),
              "layout create");
        if (batch > 1) {
            check(cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch), "batch");
            check(cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
                  "stride");
        }
    }
    ~Layout() { cublasLtMatrixLayoutDestroy(h); }
};

}  // namespace

Gemm::Gemm(bool fp32) : fp32_(fp32) {
    check(cublasLtCreate(&handle_), "create");
}

Gemm::~Gemm() {
    if (handle_) cublasLtDestroy(handle_);
}

namespace {

// The descriptor's transposes, epilogue (bias, GeLU), and under fp8 the operands' scale pointers
// (cuBLAS A is our B) and fast accumulation.
void configure(cublasLtMatmulDesc_t desc, const GemmArgs& a, cudaDataType_t t, bool f8) {
    const cublasOperation_t opa = a.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLAS A = our B
    const cublasOperation_t opb = a.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLAS B = our A
    check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa), "transa");
    check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb), "transb");
    const cudaDataType_t bt = t;  // bf16 under fp8 too (t: the C / D type)
    if (a.bias) check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt), "bias type");
    cublasLtEpilogue_t ep = a.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if (a.epilogue == GemmArgs::Epilogue::gelu_aux) ep = a.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    if (a.epilogue == GemmArgs::Epilogue::dgelu) {
        if (a.bias) throw DeviceError(FailureKind::other, 0, "Gemm::run", "dgelu epilogue with a bias");
        ep = CUBLASLT_EPILOGUE_DGELU;
    }
    if (ep != CUBLASLT_EPILOGUE_DEFAULT)
        check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep), "epilogue");
    if (a.bias) check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &a.bias, sizeof a.bias), "bias");
    if (f8) {  // the dequantization factors (cuBLAS A is our B)
        check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a.b_scale, sizeof a.b_scale),
              "A scale");
        check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a.a_scale, sizeof a.a_scale),
              "B scale");
        const std::int8_t fast = a.fast_accum ? 1 : 0;
        check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast), "fast accum");
    }
    if (a.epilogue != GemmArgs::Epilogue::none) {
        // The aux matrix has D's (column-major) shape: cuBLASLt's m = our N, ld = ours.
        check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &a.aux, sizeof a.aux),
              "aux pointer");
        check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &a.ldaux, sizeof a.ldaux),
              "aux ld");
    }
}

}  // namespace

void Gemm::run(const GemmArgs& a, cudaStream_t stream) {
    // Row-major D = op(A) op(B) is column-major D^T = op(B)^T op(A)^T: a row-major [r, c]
    // matrix with leading dimension ld is the column-major [c, r] one. So cuBLASLt sees
    // m = N, n = M, k = K with its A = our B and its B = our A.
    const bool f8 = a.fp8_a != GemmArgs::Fp8::none || a.fp8_b != GemmArgs::Fp8::none;
    if (f8 && (a.trans_a || !a.trans_b))
        throw DeviceError(FailureKind::other, 0, "Gemm::run", "fp8 GEMMs take both operands K-major (trans_a false, trans_b true)");
    auto fp8_type = [](GemmArgs::Fp8 f) { return f == GemmArgs::Fp8::e5m2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3; };
    // C, D (and the bias) are bf16 under fp8; the operands' types follow.
    const cudaDataType_t t = fp32_ ? CUDA_R_32F : CUDA_R_16BF;
    const cudaDataType_t ta = f8 ? fp8_type(a.fp8_b) : t;  // cuBLAS A = our B
    const cudaDataType_t tb = f8 ? fp8_type(a.fp8_a) : t;  // cuBLAS B = our A
    cublasLtMatmulDesc_t desc = nullptr;
    check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc create");
    struct DescGuard {
        cublasLtMatmulDesc_t d;
        ~DescGuard() { cublasLtMatmulDescDestroy(d); }
    } guard{desc};
    configure(desc, a, t, f8);
    // Column-major shapes of the stored operands.
    const Layout la(ta, a.trans_b ? a.K : a.N, a.trans_b ? a.N : a.K, a.ldb, a.batch, a.stride_b);
    const Layout lb(tb, a.trans_a ? a.M : a.K, a.trans_a ? a.K : a.M, a.lda, a.batch, a.stride_a);
    const void* C = a.C ? a.C : a.D;
    const float beta = a.C ? a.beta : 0.f;
    const std::int64_t ldc = a.C ? a.ldc : a.ldd, stride_c = a.C ? a.stride_c : a.stride_d;
    const Layout lc(t, a.N, a.M, ldc, a.batch, stride_c);
    const Layout ld(t, a.N, a.M, a.ldd, a.batch, a.stride_d);

    // Heuristic per shape (alignment of the pointers matters: key on their low bits).
    const std::uintptr_t align = (reinterpret_cast<std::uintptr_t>(a.A) | reinterpret_cast<std::uintptr_t>(a.B) |
                                  reinterpret_cast<std::uintptr_t>(C) | reinterpret_cast<std::uintptr_t>(a.D)) & 0xff;
    const Key key{a.trans_a, a.trans_b, a.M, a.N, a.K, a.lda, a.ldb, ldc, a.ldd, a.batch, a.bias != nullptr,
                  beta != 0.f, align | (reinterpret_cast<std::uintptr_t>(a.aux) & 0xff), static_cast<int>(a.epilogue), a.ldaux,
                  static_cast<int>(a.fp8_a) * 8 + static_cast<int>(a.fp8_b) * 2 + (a.fast_accum ? 1 : 0)};
    auto it = algos_.find(key);
    if (it == algos_.end()) {
        cublasLtMatmulPreference_t pref = nullptr;
        check(cublasLtMatmulPreferenceCreate(&pref), "preference");
        const std::uint64_t ws = workspace_bytes_;
        check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
              "workspace pref");
        cublasLtMatmulHeuristicResult_t res{};
        int found = 0;
        const cublasStatus_t st =
            cublasLtMatmulAlgoGetHeuristic(handle_, desc, la.h, lb.h, lc.h, ld.h, pref, 1, &res, &found);
        cublasLtMatmulPreferenceDestroy(pref);
        if (st != CUBLAS_STATUS_SUCCESS || found == 0)
            throw std::runtime_error("cuBLASLt: no algorithm for GEMM M=" + std::to_string(a.M) +
                                     " N=" + std::to_string(a.N) + " K=" + std::to_string(a.K));
        it = algos_.emplace(key, res).first;
    }
    check(cublasLtMatmul(handle_, desc, &a.alpha, a.B, la.h, a.A, lb.h, &beta, C, lc.h, a.D, ld.h, &it->second.algo,
                         workspace_, workspace_bytes_, stream),
          "matmul");
}

}  // namespace preflight::runtime::cuda
