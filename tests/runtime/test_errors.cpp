// Failure classification (only cudaErrorMemoryAllocation is "does not fit"), the error
// that names the failing op, debug-sync switch, the driver-sample op, NVML without a driver.
#include <gtest/gtest.h>

#include "catalog_fixture.hpp"
#include "preflight/runtime/errors.hpp"
#include "preflight/runtime/nvml_probe.hpp"
#include "preflight/runtime/walker.hpp"

namespace preflight::runtime {
namespace {

TEST(Errors, OnlyMemoryAllocationIsOutOfMemory) {
    EXPECT_EQ(classify_cuda_error(2), FailureKind::out_of_memory);  // cudaErrorMemoryAllocation
    // Sticky kernel faults (driver_types.h): illegal address 700, assert 710, misaligned 716,
    // launch failure 719, unknown 999. Never "does not fit".
    for (int code : {700, 710, 714, 715, 716, 717, 718, 719, 999}) {
        EXPECT_EQ(classify_cuda_error(code), FailureKind::device_fault) << code;
        EXPECT_TRUE(is_sticky_cuda_error(code)) << code;
        EXPECT_EQ(exit_code_for(classify_cuda_error(code)), 3) << code;
    }
    for (int code : {35, 100, 209}) EXPECT_EQ(classify_cuda_error(code), FailureKind::no_device) << code;
    EXPECT_EQ(classify_cuda_error(1), FailureKind::other);  // invalid value: a runtime bug
    EXPECT_FALSE(is_sticky_cuda_error(2));
    EXPECT_FALSE(is_sticky_cuda_error(1));
    EXPECT_EQ(exit_code_for(FailureKind::out_of_memory), 1);
    EXPECT_EQ(exit_code_for(FailureKind::library), 3);
}

TEST(Errors, DeviceErrorTextNamesCallCodeAndStickiness) {
    const DeviceError e(FailureKind::device_fault, 700, "cudaStreamSynchronize(stream)", "cudaErrorIllegalAddress");
    const std::string w = e.what();
    EXPECT_NE(w.find("device-fault"), std::string::npos);
    EXPECT_NE(w.find("cudaStreamSynchronize(stream) returned 700"), std::string::npos);
    EXPECT_NE(w.find("unusable"), std::string::npos);
}

TEST(Errors, DebugSyncFromFlagOrEnvironment) {
    EXPECT_TRUE(debug_sync_requested(true, nullptr));
    EXPECT_FALSE(debug_sync_requested(false, nullptr));
    EXPECT_FALSE(debug_sync_requested(false, ""));
    EXPECT_FALSE(debug_sync_requested(false, "0"));
    EXPECT_TRUE(debug_sync_requested(false, "1"));
}

// A runner that fails like a CUDA check would at one op kind.
struct FailingRunner final : OpRunner {
    OpKind fail_at;
    bool sync;
    FailingRunner(OpKind k, bool s) : fail_at(k), sync(s) {}
    void run(const Op& op, const BufferTable&) override {
        if (op.kind == fail_at) throw DeviceError(FailureKind::device_fault, 700, "kernel", "cudaErrorIllegalAddress");
    }
    bool checks_each_op() const override { return sync; }
};

Program small_llama(AttentionKind at) {
    const ModelConfig m = test::catalog_model("llama-3.2-1b");
    Plan p;
    p.seq = 128;
    p.mbs = 1;
    p.attention = at;
    p.precision = Precision::bf16_mixed;
    return build_program(m, p);
}

TEST(Errors, WalkNamesTheFailingOpIndexKindAndLayer) {
    const Program prog = small_llama(AttentionKind::flash);
    DryBackend be;
    TrackingAllocator alloc(be);
    BufferTable table;
    walk(prog, prog.setup, alloc, table, nullptr, "set-up");
    FailingRunner runner(OpKind::flash_bwd, true);
    try {
        walk(prog, prog.step, alloc, table, &runner, "step", 3);
        FAIL() << "no error";
    } catch (const OpError& e) {
        // The first flash backward is the last layer's (backward runs from layer L down).
        EXPECT_EQ(e.at.kind, "flash_bwd");
        EXPECT_EQ(e.at.layer, 16);
        EXPECT_EQ(e.at.step, 3);
        EXPECT_EQ(e.at.section, "step");
        EXPECT_TRUE(e.at.synchronised);
        EXPECT_EQ(e.kind, FailureKind::device_fault);
        ASSERT_GE(e.at.index, 0);
        EXPECT_EQ(prog.step[static_cast<std::size_t>(e.at.index)].kind, OpKind::flash_bwd);
        EXPECT_NE(std::string(e.what()).find("failed in step op " + std::to_string(e.at.index) + " (flash_bwd, layer 16"),
                  std::string::npos)
            << e.what();
    }
}

TEST(Errors, AsynchronousFailureSaysSoAndHowToNameTheOp) {
    const Program prog = small_llama(AttentionKind::eager);
    DryBackend be;
    TrackingAllocator alloc(be);
    BufferTable table;
    walk(prog, prog.setup, alloc, table, nullptr, "set-up");
    FailingRunner runner(OpKind::eager_softmax, false);
    try {
        walk(prog, prog.step, alloc, table, &runner, "step", 1);
        FAIL() << "no error";
    } catch (const OpError& e) {
        EXPECT_FALSE(e.at.synchronised);
        EXPECT_EQ(e.at.layer, 1);
        EXPECT_NE(std::string(e.what()).find("PREFLIGHT_DEBUG_SYNC=1"), std::string::npos);
    }
}

// A backend whose allocation hits a sticky fault: not an AllocationError (not "does not fit").
struct FaultingBackend final : AllocBackend {
    void* allocate(std::int64_t) override {
        throw DeviceError(FailureKind::device_fault, 700, "cudaMallocAsync", "cudaErrorIllegalAddress");
    }
    void release(void*) override {}
    const char* name() const override { return "faulting"; }
};

TEST(Errors, StickyFaultInAnAllocationIsNotOutOfMemory) {
    const Program prog = small_llama(AttentionKind::flash);
    FaultingBackend be;
    TrackingAllocator alloc(be);
    BufferTable table;
    try {
        walk(prog, prog.setup, alloc, table, nullptr, "set-up");
        FAIL() << "no error";
    } catch (const AllocationError&) {
        FAIL() << "a sticky fault was reported as out of memory";
    } catch (const OpError& e) {
        EXPECT_EQ(e.kind, FailureKind::device_fault);
        EXPECT_EQ(e.at.section, "set-up");
        EXPECT_EQ(e.at.kind, "init_params");
    }
}

TEST(Errors, OutOfMemoryStaysAnAllocationError) {
    const Program prog = small_llama(AttentionKind::flash);
    DryBackend be(1024);  // 1 KiB device
    TrackingAllocator alloc(be);
    BufferTable table;
    EXPECT_THROW(walk(prog, prog.setup, alloc, table, nullptr, "set-up"), AllocationError);
}

TEST(DriverSample, PeakOpIsWhereTheDryRunPeaks) {
    for (auto at : {AttentionKind::flash, AttentionKind::eager}) {
        const Program prog = small_llama(at);
        const std::int64_t i = peak_step_op(prog);
        ASSERT_GE(i, 0);
        const DryRunResult d = dry_run(prog, 1, false);
        EXPECT_EQ(describe(prog, prog.step[static_cast<std::size_t>(i)]), d.peak_where);
    }
}

TEST(Nvml, AbsentDriverIsReportedNotThrown) {
    const NvmlProbe probe;
    if (probe.available()) GTEST_SKIP() << "NVML is present here; this checks the no-driver path";
    EXPECT_FALSE(probe.why().empty());
    EXPECT_FALSE(probe.used_bytes().has_value());
}


// Which GPUs a build serves (CMAKE_CUDA_ARCHITECTURES, CUDA's compatibility rules: an "N" entry
// embeds PTX that the driver compiles for any later GPU, an "N-real" one runs on major N/10 at
// minor N%10 and above, "Na" on N alone), and fp8 from compute capability 8.9 (Ada) on.
TEST(DeviceSupport, TheBuildsArchitecturesAndFp8TensorCores) {
    EXPECT_EQ(device_support_problem(90, "90", false), "");   // H100 / H200
    EXPECT_EQ(device_support_problem(100, "90", true), "");   // B200 through the PTX
    EXPECT_NE(device_support_problem(100, "90-real", false).find("rebuild with -DCMAKE_CUDA_ARCHITECTURES=100"),
              std::string::npos);
    EXPECT_NE(device_support_problem(100, "90a", false), "");
    EXPECT_EQ(device_support_problem(86, "80-real", false), "");  // A10 / RTX 30 on sm_80 code
    const std::string a100 = device_support_problem(80, "90", false);
    EXPECT_NE(a100.find("compiled for CMAKE_CUDA_ARCHITECTURES=90 and this GPU has compute capability 8.0"),
              std::string::npos) << a100;
    EXPECT_NE(a100.find("-DCMAKE_CUDA_ARCHITECTURES=80"), std::string::npos) << a100;
    EXPECT_EQ(device_support_problem(80, "80;90", false), "");
    const std::string fp8 = device_support_problem(80, "80;90", true);
    EXPECT_NE(fp8.find("fp8-mixed needs fp8 tensor cores"), std::string::npos) << fp8;
    EXPECT_NE(fp8.find("compute capability 8.0"), std::string::npos) << fp8;
    EXPECT_EQ(device_support_problem(89, "89", true), "");  // L40S
    // Not judged: what "native" or "all" builds for is decided by the toolchain; fp8 still is.
    EXPECT_EQ(device_support_problem(75, "native", false), "");
    EXPECT_NE(device_support_problem(75, "native", true), "");
}

}  // namespace
}  // namespace preflight::runtime
