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
    // 32 heads at seq 2048, mbs 4, d 64 (MHA): b*heads*s*(d+1)*4 = 4*32*2048*65*4 = 68,157,440
    // bytes; llama-3.2-1b's GQA (8 KV heads) adds cuDNN's backward engine workspace,
    // 4*32*2048*64*4 + 256 = 67,109,120 (the figure cuDNN 9.19 asked for on an H100), so
    // 135,266,560; fp32: the kernel's D alone, 4*32*2048*4 = 1,048,576.
    EXPECT_EQ(runtime_flash_bwd_workspace_bytes(4, 32, 32, 2048, 64, 2), 68157440);
    EXPECT_EQ(runtime_flash_bwd_workspace_bytes(4, 32, 8, 2048, 64, 2), 135266560);
    EXPECT_EQ(runtime_flash_bwd_workspace_bytes(4, 32, 8, 2048, 64, 4), 1048576);
    // An accumulator that is not a multiple of 256 bytes is rounded up before the engine region:
    // 1*3*5*(8+1)*4 = 540 -> 768, + 1*3*5*8*4 + 256 = 736.
    EXPECT_EQ(runtime_flash_bwd_workspace_bytes(1, 3, 1, 5, 8, 2), 768 + 736);
    // Under context parallelism the runtime's kernel runs in bf16 too: its D alone, 1,048,576.
    EXPECT_EQ(runtime_flash_bwd_workspace_bytes(4, 32, 8, 2048, 64, 2, true), 1048576);
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
                EXPECT_EQ(ws.bytes(), pr == Precision::fp32 ? 1048576 : 135266560) << ws.name;
                EXPECT_EQ(ws.category, Category::temporary);
            }
        EXPECT_EQ(seen, 16);  // one per layer
    }
}

}  // namespace
}  // namespace preflight::runtime
