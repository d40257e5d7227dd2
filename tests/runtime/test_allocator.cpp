// The tracking allocator: bytes per category, peak and where, timeline, failures.
#include <gtest/gtest.h>

#include "preflight/runtime/allocator.hpp"

namespace preflight::runtime {
namespace {

BufferSpec spec(const char* n, Category c, std::int64_t bytes) { return {n, c, DType::u8, bytes}; }

TEST(Allocator, TracksCategoriesPeakAndWhere) {
    DryBackend be;
    TrackingAllocator a(be);
    a.set_recording(true);
    void* w = a.allocate(spec("w", Category::weights, 1000), "setup");
    a.sample("setup", PhaseKind::step_start);
    a.set_phase(PhaseKind::forward);
    void* x = a.allocate(spec("x", Category::activations, 300), "fwd");
    void* t = a.allocate(spec("t", Category::temporary, 200), "fwd tmp");
    a.sample("fwd", PhaseKind::forward);
    a.release(t);
    a.set_phase(PhaseKind::output_loss);
    void* l = a.allocate(spec("logits", Category::logits, 150), "head");
    a.sample("head", PhaseKind::output_loss);
    EXPECT_EQ(a.peak_bytes(), 1500);
    EXPECT_EQ(a.peak_where(), "fwd tmp");
    EXPECT_EQ(a.peak_phase(), PhaseKind::forward);
    EXPECT_EQ(a.peak_breakdown()[static_cast<int>(Category::temporary)], 200);
    EXPECT_EQ(a.current_total(), 1450);
    EXPECT_EQ(a.current()[static_cast<int>(Category::logits)], 150);
    ASSERT_EQ(a.timeline().size(), 3u);
    EXPECT_EQ(total(a.timeline()[1].bytes), 1500);
    EXPECT_EQ(a.timeline()[2].seq, 2);
    EXPECT_EQ(a.timeline()[2].phase, PhaseKind::output_loss);
    for (void* p : {w, x, l}) a.release(p);
    EXPECT_EQ(a.current_total(), 0);
    EXPECT_EQ(a.live_allocations(), 0);
}

TEST(Allocator, NotRecordingKeepsNoTimelineButTracksThePeak) {
    DryBackend be;
    TrackingAllocator a(be);
    void* p = a.allocate(spec("x", Category::activations, 64), "op");
    a.sample("op", PhaseKind::forward);
    EXPECT_TRUE(a.timeline().empty());
    EXPECT_EQ(a.peak_bytes(), 64);
    a.release(p);
    a.reset_peak();
    EXPECT_EQ(a.peak_bytes(), 0);
}

TEST(Allocator, FailureNamesWhereWhatAndFreeMemory) {
    DryBackend be(1 << 20);  // 1 MiB "device"
    TrackingAllocator a(be);
    void* p = a.allocate(spec("weights", Category::weights, 700 << 10), "set-up");
    try {
        a.allocate(spec("logits", Category::logits, 512 << 10), "output+loss: lm head");
        FAIL() << "over-capacity allocation succeeded";
    } catch (const AllocationError& e) {
        EXPECT_EQ(e.where, "output+loss: lm head");
        EXPECT_EQ(e.buffer, "logits");
        EXPECT_EQ(e.category, Category::logits);
        EXPECT_EQ(e.requested_bytes, 512 << 10);
        EXPECT_EQ(e.free_bytes, (1 << 20) - (700 << 10));
        EXPECT_EQ(e.in_use_bytes, 700 << 10);
        EXPECT_NE(std::string(e.what()).find("lm head"), std::string::npos);
    }
    EXPECT_EQ(a.current_total(), 700 << 10);  // nothing half-recorded
    a.release(p);
}

TEST(Allocator, DryBackendHandsOutDistinctAlignedAddresses) {
    DryBackend be;
    void* a = be.allocate(1);
    void* b = be.allocate(1);
    EXPECT_NE(a, b);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b) % 256, 0u);
    EXPECT_EQ(be.free_device_bytes(), -1);
}

}  // namespace
}  // namespace preflight::runtime
