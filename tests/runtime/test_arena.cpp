// The planned arena (arena.hpp): greedy-by-size offsets checked by hand, and for real step
// programs (single GPU, ZeRO-3, tensor + sequence parallel, pipeline, fp8) a replay of set-up,
// two steps and teardown in which no two live buffers overlap, every step gets the same
// addresses, and the arena is no larger than the most bytes alive at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <stdexcept>

#include "catalog_fixture.hpp"
#include "preflight/runtime/arena.hpp"
#include "preflight/runtime/errors.hpp"
#include "preflight/runtime/program.hpp"
#include "preflight/runtime/walker.hpp"

namespace preflight::runtime {
namespace {

// By hand: sizes 768 (D), 512 (A), 256 (B, C, E). Largest first: D at 0; A lives beside D, so
// at 768; B and C live beside D and A, so at 1,280; E starts after D is released, beside A and
// C only, so it takes D's old place at 0. The arena is 1,536 bytes, the 512 + 256 + 768 bytes
// alive at ticks 2-3.
TEST(ArenaPlacement, GreedyBySizeByHand) {
    const std::vector<Lifetime> v = {
        {512, 0, 10},  // A
        {256, 1, 4},   // B
        {256, 5, 8},   // C
        {768, 2, 6},   // D
        {256, 7, 9},   // E
    };
    std::int64_t top = 0;
    const std::vector<std::int64_t> off = place_greedy_by_size(v, &top);
    EXPECT_EQ(off, (std::vector<std::int64_t>{768, 1280, 1280, 0, 0}));
    EXPECT_EQ(top, 1536);
}

// A staircase of equal sizes, as the interleaved schedule's chunk micro-batches overlap: A [0, 4),
// B [1, 6), C [5, 9), D [7, 10). Earlier first: A at 0, B beside it at 256, C at 0 (A has
// ended), D at 256 (B has ended): 512 bytes.
TEST(ArenaPlacement, EqualSizesEarlierFirstByHand) {
    const std::vector<Lifetime> v = {{256, 0, 4}, {256, 1, 6}, {256, 5, 9}, {256, 7, 10}};
    std::int64_t top = 0;
    EXPECT_EQ(place_greedy_by_size(v, &top, EqualSizes::earlier_first), (std::vector<std::int64_t>{0, 256, 0, 256}));
    EXPECT_EQ(top, 512);
}

// Tied offsets (a repeated block's two copies, plan_arena): A' follows A, so both go where neither
// meets a placed allocation. Q (512) first at 0; P, the longer-lived 256, beside Q at 512; A alone
// would take 0 (Q is not alive yet), but A' lives beside Q and P, so both take 768. Untied, A takes
// 0 and A' 768. A follower alive beside its leader, or of another size, is refused.
TEST(ArenaPlacement, AFollowerTakesItsLeadersOffsetByHand) {
    const std::vector<Lifetime> v = {
        {256, 0, 10},  // P
        {256, 0, 2},   // A
        {512, 4, 6},   // Q
        {256, 4, 6},   // A'
    };
    std::int64_t top = 0;
    EXPECT_EQ(place_greedy_by_size(v, &top), (std::vector<std::int64_t>{512, 0, 0, 768}));
    EXPECT_EQ(place_greedy_by_size(v, &top, EqualSizes::longer_lived_first, {0, 1, 2, 1}),
              (std::vector<std::int64_t>{512, 768, 0, 768}));
    EXPECT_EQ(top, 1024);
    EXPECT_THROW(place_greedy_by_size(v, &top, EqualSizes::longer_lived_first, {0, 0, 2, 3}), std::logic_error);  // alive together
    EXPECT_THROW(place_greedy_by_size(v, &top, EqualSizes::longer_lived_first, {0, 1, 1, 3}), std::logic_error);  // 512 after 256
    EXPECT_THROW(place_greedy_by_size(v, &top, EqualSizes::longer_lived_first, {0, 1}), std::logic_error);        // not one each
}

// A ring of three equal buffers a repeated block cycles through, X [0, 3), Y [2, 5), Z [4, 7),
// then the next run's X' [6, 9), Y' [8, 11), Z' [10, 13) (each run's copy follows its own): two
// are ever alive together, but tied each keeps one offset and three are needed (Z meets Y, Z'
// meets X'). In a band of two 256-byte slots the runs alternate: 512 bytes, the live peak. W
// (512 bytes, [5, 8), not a step allocation) goes beside the band: 1,024 bytes, again the live
// peak (Z, X' and W at tick 6).
TEST(ArenaPlacement, ARingOfTiedBuffersTakesABandOfTheSlotsItKeepsAliveByHand) {
    std::vector<Lifetime> v = {{256, 0, 3}, {256, 2, 5}, {256, 4, 7}, {256, 6, 9}, {256, 8, 11}, {256, 10, 13}};
    const std::vector<std::size_t> follows = {0, 1, 2, 0, 1, 2};
    std::int64_t top = 0;
    EXPECT_EQ(place_greedy_by_size(v, &top, EqualSizes::longer_lived_first, follows),
              (std::vector<std::int64_t>{0, 256, 512, 0, 256, 512}));
    EXPECT_EQ(top, 768);
    BandedPlacement b = place_in_bands(v, follows, std::vector<bool>(6, true));
    ASSERT_EQ(b.bands.size(), 1u);
    EXPECT_EQ(b.bands[0].offset_bytes, 0);
    EXPECT_EQ(b.bands[0].slot_bytes, 256);
    EXPECT_EQ(b.bands[0].count, 2);
    EXPECT_EQ(b.band, (std::vector<std::int32_t>(6, 0)));
    EXPECT_EQ(b.arena_bytes, 512);

    v.push_back({512, 5, 8});  // W
    b = place_in_bands(v, {0, 1, 2, 0, 1, 2, 6}, {true, true, true, true, true, true, false});
    ASSERT_EQ(b.bands.size(), 1u);
    EXPECT_EQ(b.band[6], -1);
    EXPECT_EQ(b.offset[6], 512);  // the band, as large (512 bytes) and longer-lived (0-13), takes 0
    EXPECT_EQ(b.arena_bytes, 1024);
    // Untied: no band.
    EXPECT_TRUE(place_in_bands(v, {0, 1, 2, 3, 4, 5, 6}, std::vector<bool>(7, true)).bands.empty());
    EXPECT_THROW(place_in_bands(v, {0, 1, 2, 0, 1, 2, 6}, std::vector<bool>(6, true)), std::logic_error);  // not one each
}

// A band's slots go lowest free first as the run asks: the first two take slots 0 and 1 (offsets
// 1,024 and 1,280); with slot 0 given back the third takes it again; a fourth beside two alive
// finds both in use, which the plan said could not happen.
TEST(ArenaPlan, ABandsSlotsGoLowestFreeFirst) {
    ArenaPlan plan;
    plan.bands = {{1024, 256, 2}};
    plan.slots[1].assign(4, ArenaSlot{1024, 256, 0});
    plan.arena_bytes = 1536;
    ArenaBackend arena(plan, reinterpret_cast<void*>(std::uintptr_t{1} << 40), plan.arena_bytes);
    const auto at = [](void* p) { return static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(p) - (std::uintptr_t{1} << 40)); };
    arena.begin_section(Section::step);
    void* a = arena.allocate(256);
    void* b = arena.allocate(200);  // rounded to the slot's 256
    EXPECT_EQ(at(a), 1024);
    EXPECT_EQ(at(b), 1280);
    arena.release(a);
    EXPECT_EQ(at(arena.allocate(256)), 1024);
    EXPECT_THROW(arena.allocate(256), std::logic_error);
    EXPECT_EQ(arena.high_water_bytes(), 1536);
}

// Equal sizes: the longer-lived goes first and lower. A stack of 3 nested lifetimes packs into
// 3 x 256 bytes; two that never meet share one slot.
TEST(ArenaPlacement, EqualSizesLongerLivedFirstAndDisjointOnesShare) {
    const std::vector<Lifetime> v = {{256, 2, 3}, {256, 0, 6}, {256, 1, 4}, {256, 4, 5}};
    std::int64_t top = 0;
    const std::vector<std::int64_t> off = place_greedy_by_size(v, &top);
    EXPECT_EQ(off, (std::vector<std::int64_t>{512, 0, 256, 256}));
    EXPECT_EQ(top, 768);
}

// The brute-force reference of greedy by size: each allocation, largest first (equal sizes: the
// longer-lived first, then the earlier), at the lowest offset clear of every placed one alive
// beside it, found by looking at all of them.
std::vector<std::int64_t> greedy_by_size_reference(const std::vector<Lifetime>& v, EqualSizes ties) {
    std::vector<std::size_t> order(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&v, ties](std::size_t a, std::size_t b) {
        if (v[a].bytes != v[b].bytes) return v[a].bytes > v[b].bytes;
        if (ties == EqualSizes::earlier_first) return v[a].start < v[b].start;
        return v[a].end - v[a].start > v[b].end - v[b].start;
    });
    std::vector<std::int64_t> offset(v.size(), -1);
    for (std::size_t q = 0; q < order.size(); ++q) {
        const Lifetime& x = v[order[q]];
        std::int64_t at = 0;
        for (bool moved = true; moved;) {  // past every placed overlap until none is left
            moved = false;
            for (std::size_t p = 0; p < q; ++p) {
                const Lifetime& y = v[order[p]];
                const std::int64_t lo = offset[order[p]];
                const bool in_time = y.start < x.end && x.start < y.end;
                if (in_time && lo < at + x.bytes && at < lo + y.bytes) {
                    at = lo + y.bytes;
                    moved = true;
                }
            }
        }
        offset[order[q]] = at;
    }
    return offset;
}

// The bucketed placement against the reference on random lifetimes: one tick to the whole clock,
// shared start ticks, and clocks long enough that most lifetimes sit in one of the 256 buckets.
TEST(ArenaPlacement, BucketedPlacementEqualsTheBruteForceReference) {
    std::mt19937_64 rng(7);
    for (int trial = 0; trial < 40; ++trial) {
        const auto clock = static_cast<std::uint64_t>(2 + rng() % 5000);
        std::vector<Lifetime> v(1 + rng() % 400);
        for (Lifetime& l : v) {
            l.bytes = 256 * static_cast<std::int64_t>(1 + rng() % 8);
            l.start = static_cast<std::int64_t>(rng() % (clock - 1));
            const auto longest = trial % 4 == 0 ? std::uint64_t{4} : clock - static_cast<std::uint64_t>(l.start);
            l.end = l.start + 1 + static_cast<std::int64_t>(rng() % longest);
        }
        for (EqualSizes ties : {EqualSizes::longer_lived_first, EqualSizes::earlier_first}) {
            const std::vector<std::int64_t> want = greedy_by_size_reference(v, ties);
            std::int64_t top = 0;
            ASSERT_EQ(place_greedy_by_size(v, &top, ties), want) << "trial " << trial;
            std::int64_t want_top = 0;
            for (std::size_t i = 0; i < v.size(); ++i) want_top = std::max(want_top, want[i] + v[i].bytes);
            EXPECT_EQ(top, want_top);
        }
    }
}

// Forwards to the arena and checks, on every allocation, that the returned range overlaps no
// live one; records each section's addresses in order.
class OverlapCheck final : public AllocBackend {
public:
    explicit OverlapCheck(ArenaBackend& a) : arena_(a) {}
    void begin_section(Section s) override {
        section_ = s;
        arena_.begin_section(s);
        if (s == Section::step) step_addresses.emplace_back();
    }
    void* allocate(std::int64_t bytes) override {
        void* p = arena_.allocate(bytes);
        if (p == nullptr) return p;
        const auto b = reinterpret_cast<std::uintptr_t>(p);
        const auto e = b + static_cast<std::uintptr_t>(std::max<std::int64_t>(bytes, 1));
        auto next = live_.lower_bound(b);
        if (next != live_.end() && next->first < e) overlaps++;
        if (next != live_.begin() && std::prev(next)->second > b) overlaps++;
        live_[b] = e;
        if (section_ == Section::step) step_addresses.back().push_back(p);
        return p;
    }
    void release(void* p) override {
        live_.erase(reinterpret_cast<std::uintptr_t>(p));
        arena_.release(p);
    }
    void pass_over(std::int64_t n) override { arena_.pass_over(n); }
    const char* name() const override { return "overlap check"; }
    int overlaps = 0;
    std::vector<std::vector<void*>> step_addresses;

private:
    ArenaBackend& arena_;
    Section section_ = Section::setup;
    std::map<std::uintptr_t, std::uintptr_t> live_;
};

struct Case {
    const char* model;
    Plan plan;
    std::int64_t rank;
};

Plan plan_of(std::int64_t seq, std::int64_t mbs, std::int64_t grad_acc, Recompute rc) {
    Plan p;
    p.seq = seq;
    p.mbs = mbs;
    p.grad_acc = grad_acc;
    p.recompute = rc;
    return p;
}

std::vector<Case> cases() {
    std::vector<Case> c;
    c.push_back({"gpt2", plan_of(256, 2, 2, Recompute::none), 0});
    Plan z3 = plan_of(256, 2, 1, Recompute::full);
    z3.dp = 4;
    z3.zero = ZeroStage::zero_weights;
    c.push_back({"llama-3.2-1b", z3, 3});
    Plan tp = plan_of(256, 1, 1, Recompute::selective);
    tp.tp = 2;
    tp.sp = true;
    tp.dp = 2;
    tp.zero = ZeroStage::zero_optimizer_states;
    c.push_back({"llama-3.2-1b", tp, 1});
    Plan pp = plan_of(256, 1, 4, Recompute::none);
    pp.pp = 2;
    c.push_back({"gpt2", pp, 0});
    c.push_back({"gpt2", pp, 1});
    Plan fp8 = plan_of(256, 2, 1, Recompute::none);
    fp8.precision = Precision::fp8_mixed;
    c.push_back({"llama-3.2-1b", fp8, 0});
    // Long accumulations, planned on a shortened step and extended (plan_arena): ZeRO 0-3, the last
    // micro-batch reducing (ZeRO-0/1 with dp) or every one (ZeRO-2/3), tp with --sp, fp8, fp32
    // accumulation.
    c.push_back({"gpt2", plan_of(256, 1, 12, Recompute::none), 0});
    for (ZeroStage z : {ZeroStage::zero_optimizer_states, ZeroStage::zero_gradients, ZeroStage::zero_weights}) {
        Plan dp = plan_of(256, 1, 9, z == ZeroStage::zero_weights ? Recompute::full : Recompute::selective);
        dp.dp = 2;
        dp.zero = z;
        c.push_back({"llama-3.2-1b", dp, 1});
    }
    Plan long_tp = tp;
    long_tp.grad_acc = 8;
    c.push_back({"llama-3.2-1b", long_tp, 0});
    Plan long_fp8 = fp8;
    long_fp8.grad_acc = 10;
    c.push_back({"llama-3.2-1b", long_fp8, 0});
    Plan fp32_grads = plan_of(256, 1, 8, Recompute::none);
    fp32_grads.precision = Precision::bf16_mixed_fp32_grads;
    fp32_grads.dp = 2;
    fp32_grads.zero = ZeroStage::zero_optimizer_states;
    c.push_back({"gpt2", fp32_grads, 0});
    // Pipelines whose steady state repeats: 1F1B, and interleaved (whose two copies the greedy
    // placement, left to itself, never placed alike: plan_arena ties them).
    Plan long_pp = plan_of(256, 1, 24, Recompute::selective);
    long_pp.pp = 2;
    c.push_back({"gpt2", long_pp, 0});
    c.push_back({"gpt2", long_pp, 1});
    Plan long_vpp = plan_of(256, 1, 192, Recompute::none);  // 192 x 6 layers: past kMaxLayerStepsWrittenOut
    long_vpp.pp = 2;
    long_vpp.vpp = 3;
    long_vpp.pp_schedule = PpSchedule::interleaved;
    c.push_back({"gpt2", long_vpp, 0});
    c.push_back({"gpt2", long_vpp, 1});
    return c;
}

TEST(ArenaPlan, RealProgramsReplayWithoutOverlapAtTheLivePeak) {
    for (const Case& k : cases()) {
        SCOPED_TRACE(std::string(k.model) + " rank " + std::to_string(k.rank));
        const ModelConfig m = test::catalog_model(k.model);
        const Program prog = build_program(m, resolve_defaults(k.plan, m), k.rank, true);
        const ArenaPlan plan = plan_arena(prog);
        // A long accumulation is planned with its repeated block (Program::repeat) written out
        // twice at the same offsets, the later runs taking the second copy's slots.
        EXPECT_EQ(plan.extended_micro_batches, std::max<std::int64_t>(prog.repeat.times - 2, 0));
        if (k.plan.grad_acc >= (k.plan.pp == 1 ? 6 : 24)) EXPECT_GT(prog.repeat.times, 1);
        const DryRunResult dry = dry_run(prog, 1, false);
        // Each slot is its buffer rounded up to 256 bytes, so the bound sits at or just above
        // the tracked peak; the arena reaches it on these programs but an interleaved stage's.
        EXPECT_GE(plan.live_peak_bytes, dry.peak_bytes);
        EXPECT_LT(plan.live_peak_bytes, dry.peak_bytes + 256 * plan.allocations);
        if (k.plan.pp_schedule == PpSchedule::interleaved && prog.repeat.times > 2) {
            // Its stashed activations would cost it slots tied to one offset per buffer (0.79 % and
            // 0.80 % over the live peak until 2026-12-01); in bands (place_in_bands) they hold no
            // more than they keep alive. 1F1B and no-pipeline blocks reach the live peak.
            EXPECT_FALSE(plan.bands.empty());
            EXPECT_LT(plan.fragmentation(), 0.002) << plan.arena_bytes << " for " << plan.live_peak_bytes;
            std::printf("interleaved stage %ld, %ld runs of its steady state: arena %.3f %% over the live peak\n",
                        static_cast<long>(k.rank), static_cast<long>(prog.repeat.times), 100 * plan.fragmentation());
        } else {
            EXPECT_EQ(plan.arena_bytes, plan.live_peak_bytes);
            EXPECT_EQ(plan.fragmentation(), 0.0);
        }

        // Addresses only: the base is never dereferenced.
        ArenaBackend arena(plan, reinterpret_cast<void*>(std::uintptr_t{1} << 40), plan.arena_bytes);
        OverlapCheck check(arena);
        TrackingAllocator alloc(check);
        BufferTable table;
        // Steps 1 and 3 as a device run walks them, every run of the repeated block; step 2 as a
        // dry run does, passing over the runs between its second and last (the arena skips their
        // slots; a band's slots go on from where the walk left them, so only the others match).
        struct Nothing final : OpRunner {
            void run(const Op&, const BufferTable&) override {}
        } every_run;
        walk(prog, prog.setup, alloc, table, nullptr, "set-up");
        walk(prog, prog.step, alloc, table, &every_run, "step", 1);
        walk(prog, prog.step, alloc, table, nullptr, "step", 2);
        walk(prog, prog.step, alloc, table, &every_run, "step", 3);
        walk(prog, prog.teardown, alloc, table, nullptr, "teardown");
        EXPECT_EQ(check.overlaps, 0);
        ASSERT_EQ(check.step_addresses.size(), 3u);
        EXPECT_EQ(check.step_addresses[2], check.step_addresses[0]);
        std::vector<void*> walked = check.step_addresses[0], passed = check.step_addresses[1];
        for (std::size_t a = 0; a < walked.size(); ++a)  // a band member's address: null in both
            if (plan.slots[1][plan.step_repeat.slot(a)].band >= 0) walked[a] = nullptr;
        if (prog.repeat.times > 3) {  // less the runs a dry walk passes over
            const auto before = static_cast<std::ptrdiff_t>(allocations_in(prog.step, 0, prog.repeat.begin));
            const auto per = static_cast<std::ptrdiff_t>(allocations_in(prog.step, prog.repeat.begin, prog.repeat.end));
            const std::ptrdiff_t from = before + 2 * per;  // the third run's first
            walked.erase(walked.begin() + from, walked.begin() + from + per * (prog.repeat.times - 3));
        }
        ASSERT_EQ(walked.size(), passed.size());
        for (std::size_t a = 0; a < passed.size(); ++a)
            if (walked[a] == nullptr) passed[a] = nullptr;
        EXPECT_EQ(walked, passed);
        EXPECT_EQ(alloc.peak_bytes(), dry.peak_bytes);
        EXPECT_EQ(arena.high_water_bytes(), plan.arena_bytes);
        EXPECT_EQ(alloc.live_allocations(), 0);
    }
}

// GPT-2 small's step program at seq 256 and `mbs`.
Program gpt2_program(std::int64_t mbs) {
    const ModelConfig m = test::catalog_model("gpt2");
    return build_program(m, resolve_defaults(plan_of(256, mbs, 1, Recompute::none), m), 0);
}

// A device that gives less than the plan: the walk fails, out of memory, at the first
// allocation whose slot ends past what it gave, and the failure names that request.
TEST(ArenaPlan, ASmallerArenaFailsAtTheFirstSlotPastIt) {
    const Program prog = gpt2_program(2);
    const ArenaPlan plan = plan_arena(prog);
    const std::int64_t capacity = plan.arena_bytes - 1;
    const ArenaSlot* first_past = nullptr;
    for (const std::vector<ArenaSlot>* section : {&plan.slots[0], &plan.slots[1]})
        for (const ArenaSlot& s : *section)
            if (first_past == nullptr && s.offset_bytes + s.bytes > capacity) first_past = &s;
    ASSERT_NE(first_past, nullptr);
    ArenaBackend arena(plan, reinterpret_cast<void*>(std::uintptr_t{1} << 40), capacity);
    TrackingAllocator alloc(arena);
    BufferTable table;
    try {
        walk(prog, prog.setup, alloc, table, nullptr, "set-up");
        walk(prog, prog.step, alloc, table, nullptr, "step", 1);
        FAIL() << "an arena one byte short ran the step";
    } catch (const AllocationError& e) {
        EXPECT_EQ((e.requested_bytes + 255) / 256 * 256, first_past->bytes);
        EXPECT_FALSE(e.where.empty());
    }
}

// A run whose requests differ from the plan's (another plan's program) stops with an error
// naming the arena plan, never an overlap.
TEST(ArenaPlan, ARunThatDiffersFromThePlanStops) {
    const Program small = gpt2_program(1), large = gpt2_program(2);
    const ArenaPlan plan = plan_arena(small);
    ArenaBackend arena(plan, reinterpret_cast<void*>(std::uintptr_t{1} << 40), plan.arena_bytes);
    TrackingAllocator alloc(arena);
    BufferTable table;
    try {
        walk(large, large.setup, alloc, table, nullptr, "set-up");
        walk(large, large.step, alloc, table, nullptr, "step", 1);
        FAIL() << "a program larger than its plan ran";
    } catch (const OpError& e) {
        EXPECT_NE(std::string(e.what()).find("arena plan, "), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("the run asks for"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace preflight::runtime
