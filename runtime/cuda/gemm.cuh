// Every matrix product of the runtime goes through cuBLASLt: bf16 inputs with fp32
// accumulation, or fp32 throughout (CUBLAS_COMPUTE_32F). Row-major interface.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace preflight::runtime::cuda {

// Row-major D[M,N] = alpha * op(A) op(B) + beta * C (+ bias[N] broadcast over rows).
// op(A) is [M,K]: A stored [M,K] (lda) or, transposed, [K,M]. op(B) is [K,N]: B stored
// [K,N] or, transposed, [N,K]. C may be null (beta ignored) or alias D. Strided batches
// when batch > 1.
struct GemmArgs {
    bool trans_a = false, trans_b = false;
    std::int64_t M = 0, N = 0, K = 0;
    const void* A = nullptr;
    std::int64_t lda = 0, stride_a = 0;
    const void* B = nullptr;
    std::int64_t ldb = 0, stride_b = 0;
    const void* C = nullptr;
    std::int64_t ldc = 0, stride_c = 0;
    void* D = nullptr;
    std::int64_t ldd = 0, stride_d = 0;
    int batch = 1;
    float alpha = 1.f, beta = 0.f;
    const void* bias = nullptr;
    // Fused epilogues (cuBLASLt, tanh-approximated GeLU): gelu_aux: D = gelu(op(A) op(B) + bias)
    // and aux = the pre-activation; dgelu: D = (op(A) op(B)) * gelu'(aux). aux is row-major
    // [M, N] with leading dimension ldaux, the operands' dtype.
    enum class Epilogue : std::uint8_t { none, gelu_aux, dgelu };
    Epilogue epilogue = Epilogue::none;
    void* aux = nullptr;
    std::int64_t ldaux = 0;
    // fp8 operands (the fp8-mixed recipe, program_fp8.cpp): A and B in E4M3 or E5M2, each times
    // the device float its *_scale points at (its dequantization factor); C, D and the bias bf16.
    // Hopper's fp8 GEMMs take both operands K-major only: trans_a false, trans_b true. fast_accum:
    // no periodic promotion of the fp32 accumulator (the forward's; torchao, Transformer Engine).
    enum class Fp8 : std::uint8_t { none, e4m3, e5m2 };
    Fp8 fp8_a = Fp8::none, fp8_b = Fp8::none;
    const float* a_scale = nullptr;
    const float* b_scale = nullptr;
    bool fast_accum = false;
};

class Gemm {
public:
    // fp32 = true: every operand fp32; else every operand bf16 (fp32 accumulate).
    // Creates the cuBLASLt handle (library set-up); the workspace comes later from the
    // tracking allocator (set_workspace) once the set-up op has allocated it.
    explicit Gemm(bool fp32);
    void set_workspace(void* workspace, std::size_t bytes) {
        workspace_ = workspace;
        workspace_bytes_ = bytes;
        algos_.clear();
    }
    ~Gemm();
    Gemm(const Gemm&) = delete;
    Gemm& operator=(const Gemm&) = delete;
    void run(const GemmArgs& a, cudaStream_t stream);

private:
    using Key = std::tuple<bool, bool, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                           std::int64_t, std::int64_t, int, bool, bool, std::uintptr_t, int, std::int64_t, int>;
    cublasLtHandle_t handle_ = nullptr;
    bool fp32_;
    void* workspace_ = nullptr;
    std::size_t workspace_bytes_ = 0;
    // Candidate algorithms per key, best first: the heuristic's picks for the operands' alignments.
    static constexpr int kCandidates = 4;
    std::map<Key, std::vector<cublasLtMatmulHeuristicResult_t>> algos_;
    std::vector<cublasLtMatmulHeuristicResult_t> heuristics(const GemmArgs& a, cublasLtMatmulDesc_t desc,
                                                            cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                                                            cublasLtMatrixLayout_t lc, cublasLtMatrixLayout_t ld,
                                                            const std::array<std::uint32_t, 5>& align, std::size_t ws_bytes);
    std::string describe(const GemmArgs& a, const std::array<std::uint32_t, 5>& align, std::size_t tried) const;
    static bool is_fp8(const GemmArgs& a) { return a.fp8_a != GemmArgs::Fp8::none || a.fp8_b != GemmArgs::Fp8::none; }
};

}  // namespace preflight::runtime::cuda
