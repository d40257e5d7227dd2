#include "gemm.cuh"

#include "check.hpp"

#include "preflight/runtime/errors.hpp"

#include <array>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

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

// The largest power of two up to 256 that divides the address (256 for null): cuBLASLt's
// heuristics assume 256-byte operands unless told (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES),
// and an algorithm chosen for wider alignment refuses a narrower pointer at run time.
std::uint32_t alignment_of(const void* p) {
    const auto v = reinterpret_cast<std::uintptr_t>(p);
    std::uint32_t a = 256;
    while (a > 1 && v % a != 0) a /= 2;
    return a;
}

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
void configure(cublasLtMatmulDesc_t desc, const GemmArgs& a, cudaDataType_t t, bool f8, const float* a_scale,
               const float* b_scale) {
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
        check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_scale, sizeof b_scale),
              "A scale");
        check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scale, sizeof a_scale),
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

// The scale factors' copies at the head of the workspace when the caller's are not 16-byte
// aligned (the runtime keeps them in 8-byte [amax, scale] slots, program_fp8.cpp); the GEMM
// gets the rest of the workspace.
constexpr std::size_t kScaleCopyBytes = 256;

void Gemm::run(const GemmArgs& a, cudaStream_t stream) {
    // Row-major D = op(A) op(B) is column-major D^T = op(B)^T op(A)^T: a row-major [r, c]
    // matrix with leading dimension ld is the column-major [c, r] one. So cuBLASLt sees
    // m = N, n = M, k = K with its A = our B and its B = our A.
    const bool f8 = is_fp8(a);
    if (f8 && (a.trans_a || !a.trans_b))
        throw DeviceError(FailureKind::other, 0, "Gemm::run", "fp8 GEMMs take both operands K-major (trans_a false, trans_b true)");
    auto fp8_type = [](GemmArgs::Fp8 f) { return f == GemmArgs::Fp8::e5m2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3; };
    // C, D (and the bias) are bf16 under fp8; the operands' types follow.
    const cudaDataType_t t = fp32_ ? CUDA_R_32F : CUDA_R_16BF;
    const cudaDataType_t ta = f8 ? fp8_type(a.fp8_b) : t;  // cuBLAS A = our B
    const cudaDataType_t tb = f8 ? fp8_type(a.fp8_a) : t;  // cuBLAS B = our A
    const float *a_scale = a.a_scale, *b_scale = a.b_scale;
    void* ws = workspace_;
    std::size_t ws_bytes = workspace_bytes_;
    if (f8 && (alignment_of(a_scale) < 16 || alignment_of(b_scale) < 16)) {
        if (workspace_ == nullptr || workspace_bytes_ < 2 * kScaleCopyBytes)
            throw DeviceError(FailureKind::other, 0, "Gemm::run", "fp8 GEMM with unaligned scales and no workspace to copy them to");
        float* copies = static_cast<float*>(workspace_);
        PF_CUDA_CHECK(cudaMemcpyAsync(copies, a.a_scale, sizeof(float), cudaMemcpyDeviceToDevice, stream));
        PF_CUDA_CHECK(cudaMemcpyAsync(copies + 4, a.b_scale, sizeof(float), cudaMemcpyDeviceToDevice, stream));
        a_scale = copies, b_scale = copies + 4;
        ws = static_cast<char*>(workspace_) + kScaleCopyBytes;
        ws_bytes -= kScaleCopyBytes;
    }
    cublasLtMatmulDesc_t desc = nullptr;
    check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc create");
    struct DescGuard {
        cublasLtMatmulDesc_t d;
        ~DescGuard() { cublasLtMatmulDescDestroy(d); }
    } guard{desc};
    configure(desc, a, t, f8, a_scale, b_scale);
    // Column-major shapes of the stored operands.
    const Layout la(ta, a.trans_b ? a.K : a.N, a.trans_b ? a.N : a.K, a.ldb, a.batch, a.stride_b);
    const Layout lb(tb, a.trans_a ? a.M : a.K, a.trans_a ? a.K : a.M, a.lda, a.batch, a.stride_a);
    const void* C = a.C ? a.C : a.D;
    const float beta = a.C ? a.beta : 0.f;
    const std::int64_t ldc = a.C ? a.ldc : a.ldd, stride_c = a.C ? a.stride_c : a.stride_d;
    const Layout lc(t, a.N, a.M, ldc, a.batch, stride_c);
    const Layout ld(t, a.N, a.M, a.ldd, a.batch, a.stride_d);

    // The operands' alignments (cuBLAS A = our B), told to the heuristic and part of the key.
    const std::array<std::uint32_t, 5> align{alignment_of(a.B), alignment_of(a.A), alignment_of(C), alignment_of(a.D),
                                             alignment_of(a.aux)};
    std::uintptr_t align_code = 0;
    for (std::uint32_t x : align) align_code = align_code * 512 + x;
    const Key key{a.trans_a, a.trans_b, a.M, a.N, a.K, a.lda, a.ldb, ldc, a.ldd, a.batch, a.bias != nullptr,
                  beta != 0.f, align_code, static_cast<int>(a.epilogue), a.ldaux,
                  static_cast<int>(a.fp8_a) * 16 + static_cast<int>(a.fp8_b) * 4 + (a.fast_accum ? 2 : 0) +
                      (ws != workspace_ ? 1 : 0)};
    auto it = algos_.find(key);
    if (it == algos_.end()) it = algos_.emplace(key, heuristics(a, desc, la.h, lb.h, lc.h, ld.h, align, ws_bytes)).first;
    // The first candidate that runs; the ones refused before it are dropped for next time.
    std::vector<cublasLtMatmulHeuristicResult_t>& cands = it->second;
    cublasStatus_t st = CUBLAS_STATUS_NOT_SUPPORTED;
    std::size_t used = 0;
    for (; used < cands.size(); ++used) {
        st = cublasLtMatmul(handle_, desc, &a.alpha, a.B, la.h, a.A, lb.h, &beta, C, lc.h, a.D, ld.h, &cands[used].algo, ws,
                            ws_bytes, stream);
        if (st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE) break;
    }
    if (st != CUBLAS_STATUS_SUCCESS)
        throw DeviceError(FailureKind::library, static_cast<int>(st), "cuBLASLt matmul",
                          std::string(cublasLt_status_name(st)) + " for " + describe(a, align, cands.size()));
    cands.erase(cands.begin(), cands.begin() + static_cast<std::ptrdiff_t>(used));
}

// Up to kCandidates algorithms for the shape, best first, for pointers of these alignments.
std::vector<cublasLtMatmulHeuristicResult_t> Gemm::heuristics(const GemmArgs& a, cublasLtMatmulDesc_t desc,
                                                              cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                                                              cublasLtMatrixLayout_t lc, cublasLtMatrixLayout_t ld,
                                                              const std::array<std::uint32_t, 5>& align,
                                                              std::size_t ws_bytes) {
    cublasLtMatmulPreference_t pref = nullptr;
    check(cublasLtMatmulPreferenceCreate(&pref), "preference");
    struct PrefGuard {
        cublasLtMatmulPreference_t p;
        ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
    } guard{pref};
    const std::uint64_t ws = ws_bytes;
    check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws), "workspace pref");
    const cublasLtMatmulPreferenceAttributes_t which[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; ++i)
        check(cublasLtMatmulPreferenceSetAttribute(pref, which[i], &align[static_cast<std::size_t>(i)], sizeof(std::uint32_t)),
              "alignment pref");
    std::vector<cublasLtMatmulHeuristicResult_t> res(kCandidates);
    int found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(handle_, desc, la, lb, lc, ld, pref, kCandidates, res.data(), &found);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0)
        throw DeviceError(FailureKind::library, static_cast<int>(st), "cuBLASLt heuristic",
                          "no algorithm for " + describe(a, align, 0));
    res.resize(static_cast<std::size_t>(found));
    return res;
}

// The call in words, for errors: shape, leading dimensions, epilogue, types and alignments.
std::string Gemm::describe(const GemmArgs& a, const std::array<std::uint32_t, 5>& align, std::size_t tried) const {
    auto fp8 = [](GemmArgs::Fp8 f) { return f == GemmArgs::Fp8::none ? "" : f == GemmArgs::Fp8::e4m3 ? " e4m3" : " e5m2"; };
    const char* ep = a.epilogue == GemmArgs::Epilogue::gelu_aux ? "gelu_aux" : a.epilogue == GemmArgs::Epilogue::dgelu ? "dgelu" : "none";
    std::string s = "GEMM M=" + std::to_string(a.M) + " N=" + std::to_string(a.N) + " K=" + std::to_string(a.K) +
                    " trans_a=" + std::to_string(a.trans_a) + " trans_b=" + std::to_string(a.trans_b) +
                    " lda=" + std::to_string(a.lda) + " ldb=" + std::to_string(a.ldb) + " ldc=" + std::to_string(a.ldc) +
                    " ldd=" + std::to_string(a.ldd) + " ldaux=" + std::to_string(a.ldaux) + " batch=" + std::to_string(a.batch) +
                    " epilogue=" + ep + (a.bias ? "+bias" : "") + " dtype=" + (fp32_ ? "fp32" : "bf16") + " A" + fp8(a.fp8_a) +
                    " B" + fp8(a.fp8_b) + (a.fast_accum ? " fast-accum" : "") + "; alignment (bytes) A " +
                    std::to_string(align[1]) + " B " + std::to_string(align[0]) + " C " + std::to_string(align[2]) + " D " +
                    std::to_string(align[3]) + " aux " + std::to_string(align[4]) + " bias " + std::to_string(alignment_of(a.bias));
    if (is_fp8(a)) s += " scales " + std::to_string(alignment_of(a.a_scale)) + "/" + std::to_string(alignment_of(a.b_scale));
    if (tried > 0) s += "; " + std::to_string(tried) + " candidate algorithm(s) refused it";
    return s;
}

}  // namespace preflight::runtime::cuda
