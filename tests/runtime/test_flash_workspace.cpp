// The flash-attention backward workspace: sized for cuDNN's fp32 dQ accumulator and softmax
// sum with 16-bit activations, the kernel's D with fp32, the same in the program (dry run)
// and in the planner's runtime profile.
#include <gtest/gtest.h>

#include "catalog_fixture.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/runtime/program.hpp"

namespace preflight::runtime {
namespace {

TEST(FlashWorkspace, BytesByHand) {
    // llama-3.2-1b at seq 2048, mbs 4: b*heads*s*(d+1)*4 = 4*32*2048*65*4 = 68,157,440 bytes;
    // fp32: the kernel's D alone, 4*32*2048*4 = 1,048,576.
    EXPECT_EQ(runtime_flash_bwd_workspace_bytes(4, 32, 2048, 64, 2), 68157440);
    EXPECT_EQ(runtime_flash_bwd_workspace_bytes(4, 32, 2048, 64, 4), 1048576);
}

TEST(FlashWorkspace, ProgramAllocatesItInEveryFlashBackward) {
    const ModelConfig m = test::catalog_model("llama-3.2-1b");
    for (auto pr : {Precision::bf16_mixed, Precision::fp32}) {
        Plan p;
        p.seq = 2048;
        p.mbs = 4;
        p.precision = pr;
        const Program prog = build_program(m, p);
        int seen = 0;
        for (const Op& op : prog.step)
            if (op.kind == OpKind::flash_bwd) {
                ++seen;
                const BufferSpec& ws = prog.buffers[static_cast<std::size_t>(op.v[5].buffer)];
                EXPECT_EQ(ws.bytes(), pr == Precision::fp32 ? 1048576 : 68157440) << ws.name;
                EXPECT_EQ(ws.category, Category::temporary);
            }
        EXPECT_EQ(seen, 16);  // one per layer
    }
}

}  // namespace
}  // namespace preflight::runtime
