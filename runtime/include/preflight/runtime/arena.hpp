// Static memory planning: before a device run, every allocation of the step program (set-up,
// one step, teardown) gets its offset in one device arena, so the run holds exactly the arena
// (one cudaMalloc) and no allocator slack. A step program allocates the same buffers in the
// same order every step, so one step's plan serves them all. This is what llm.c does by hand
// (one allocation for the activations, offsets computed up front), done for every buffer.
//
// Offsets: greedy by size (Pisarchyk & Lee 2020, "Efficient Memory Management for Deep Neural
// Net Inference", sec. 4.3): the largest allocation first (equal sizes: the longer-lived first),
// each at the lowest offset where it overlaps no placed allocation that is alive at the same
// time. On the 55 distinct plans recorded on the H100 and the H200 up to 2026-11-28 (single-GPU
// runs and emulated dp, tp, pp and fp8 ranks) it reached the live peak, the least any arena can
// be, on 54, and missed it by 0.006 % on the other; those runs' cudaMallocAsync pool kept up to
// 2.25 GiB beyond it (a ZeRO-3 rank of Llama-3.2-3B with full recompute).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "preflight/runtime/allocator.hpp"

namespace preflight::runtime {

// Every allocation's size is rounded up to this, and every offset is a multiple of it
// (cudaMalloc's own alignment; cuBLASLt and vector loads need 16 bytes).
inline constexpr std::int64_t kArenaAlignBytes = 256;

struct ArenaSlot {
    std::int64_t offset_bytes = 0;  // a band member: its band's
    std::int64_t bytes = 0;         // rounded to kArenaAlignBytes
    std::int32_t band = -1;         // >= 0: taken in ArenaPlan::bands[band] when the run asks (ArenaBand)
};

// `count` slots of `slot_bytes` from offset_bytes for the step's buffers of one size, each taking
// the lowest slot free when it is made. That is first fit in order of start, which colours
// intervals with as many colours as are ever alive together (interval graphs are perfect:
// Golumbic 1980, ch. 8), and lets a repeated block's runs take other slots than the run before:
// a block whose buffers of one size would need more slots tied to one offset per buffer (the
// interleaved schedule's stashed activations: place_in_bands) holds no more than it keeps alive.
struct ArenaBand {
    std::int64_t offset_bytes = 0;
    std::int64_t slot_bytes = 0;
    std::int64_t count = 0;
};

// The plan: each section's allocations in walk order (Section::setup, step, teardown).
struct ArenaPlan {
    std::array<std::vector<ArenaSlot>, 3> slots;
    std::vector<ArenaBand> bands;
    std::int64_t arena_bytes = 0;      // end of the highest slot
    std::int64_t live_peak_bytes = 0;  // most rounded bytes alive at once: no arena can be smaller
    std::int64_t allocations = 0;
    // Runs of the step's repeated block (Program::repeat) past the two copies plan_arena writes
    // out (at the same offsets), which take the second's slots; 0 when every allocation was placed.
    std::int64_t extended_micro_batches = 0;
    // The step's slots [first, first + per) serve each of the repeated block's last `times` runs;
    // the step's later allocations take the slots after them.
    struct Repeat {
        std::size_t first = 0, per = 0;
        std::int64_t times = 1;
        // The slot of the step's allocation k (0-based, in the order a step makes them).
        std::size_t slot(std::size_t k) const {
            if (times <= 1 || k < first) return k;
            const std::size_t runs = static_cast<std::size_t>(times);
            if (k < first + per * runs) return first + (k - first) % per;
            return k - per * (runs - 1);
        }
    } step_repeat;
    // Over the live peak, as a fraction of it (0 when the plan reached the bound).
    double fragmentation() const {
        return live_peak_bytes > 0 ? static_cast<double>(arena_bytes - live_peak_bytes) / static_cast<double>(live_peak_bytes)
                                   : 0.0;
    }
};

// Plans `program`'s allocations (walks set-up, one step and teardown without a device): greedy by
// size with either tie-break between equal sizes (EqualSizes), keeping the smaller arena. Throws
// std::logic_error when a step leaves a buffer it allocated alive (a plan for one step would not
// serve the next).
ArenaPlan plan_arena(const Program& program);

// Greedy-by-size offsets for allocations alive over [start, end) of an event clock (the core of
// plan_arena, apart for tests): returns each one's offset and sets *arena_bytes to the top.
struct Lifetime {
    std::int64_t bytes = 0;  // already rounded
    std::int64_t start = 0, end = 0;
};
// Equal sizes go longer-lived first (nested lifetimes stack), or earlier first (the interleaved
// schedule's chunk micro-batches, whose lifetimes overlap in a staircase: longer-lived first left
// Llama-3-70B's interleaved stage 14.7 % over its live peak, earlier first 0.2 %).
enum class EqualSizes { longer_lived_first, earlier_first };
// `follows` (empty, or one per lifetime): follows[i] = j != i places allocation i at j's offset
// (one follower an allocation, of its size, alive apart from it); j is placed where neither
// overlaps a placed allocation alive beside it. plan_arena ties a repeated block's two copies so.
std::vector<std::int64_t> place_greedy_by_size(const std::vector<Lifetime>& lifetimes, std::int64_t* arena_bytes,
                                               EqualSizes ties = EqualSizes::longer_lived_first,
                                               const std::vector<std::size_t>& follows = {});

// A tie costs a size whose buffers a repeated block cycles through more slots than are alive at
// once: three buffers of one size alive in a ring, A [0, 3), B [2, 5), C [4, 7), then A' [6, 9)
// in the next run, need three offsets when each run's A, B, C keep theirs (A' meets C), and two
// when the runs may alternate. place_in_bands finds each size of `step` allocations (those
// marked) with a tied pair whose tied first fit in order of start needs more slots than its
// buffers keep alive at once (those alive for at least 1/64 of a run: the run is a follower's
// start less its leader's), gives them a band of as many slots (ArenaBand) over the time they
// span, and places the bands and the other allocations greedy by size (both tie-breaks, the
// smaller kept). band[i] is i's band or -1; a band member's offset is its band's.
struct BandedPlacement {
    std::vector<std::int64_t> offset;
    std::vector<std::int32_t> band;
    std::vector<ArenaBand> bands;
    std::int64_t arena_bytes = 0;
};
BandedPlacement place_in_bands(const std::vector<Lifetime>& lifetimes, const std::vector<std::size_t>& follows,
                               const std::vector<bool>& step);

// Hands out the planned offsets inside [base, base + capacity_bytes), replaying the plan
// section by section (walk() says which section starts); a band's slots go lowest free first.
// A dry walk that passes over runs of the repeated block (pass_over) leaves the bands' slots as
// they were: its later runs take valid slots, not always a full walk's. An allocation whose slot
// ends past the capacity fails as out of memory (nullptr): a device that could not give the
// whole arena fails at the op the pool would have failed near. A request that differs from the plan's is a
// program error (std::logic_error), never a silent overlap.
class ArenaBackend final : public AllocBackend {
public:
    ArenaBackend(const ArenaPlan& plan, void* base, std::int64_t capacity_bytes);
    void begin_section(Section s) override;
    void* allocate(std::int64_t bytes) override;
    void release(void* ptr) override;
    void pass_over(std::int64_t n) override { next_ += static_cast<std::size_t>(n); }
    std::int64_t free_device_bytes() override { return capacity_ - high_; }
    std::int64_t reserved_bytes() override { return capacity_; }
    const char* name() const override { return "arena"; }
    std::int64_t high_water_bytes() const { return high_; }  // end of the highest slot handed out

private:
    struct Taken {
        std::int32_t band = -1;
        std::int64_t slot = 0;  // the band's slot
    };
    struct BandSlots {  // lowest free first: the freed ones (all below `fresh`), else the next fresh one
        std::vector<std::int64_t> freed;  // a min-heap
        std::int64_t fresh = 0;
    };
    void give_back(const Taken& t);
    const ArenaPlan& plan_;
    char* base_;
    std::int64_t capacity_;
    Section section_ = Section::setup;
    std::size_t next_ = 0;  // the section's next slot
    std::int64_t high_ = 0;
    std::unordered_map<void*, Taken> live_;
    std::vector<BandSlots> bands_;
};

}  // namespace preflight::runtime
