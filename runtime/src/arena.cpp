#include "preflight/runtime/arena.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <set>
#include <stdexcept>

#include "preflight/runtime/walker.hpp"

namespace preflight::runtime {

namespace {

std::int64_t round_to_slot(std::int64_t bytes) {
    const std::int64_t b = std::max<std::int64_t>(bytes, 1);
    return (b + kArenaAlignBytes - 1) / kArenaAlignBytes * kArenaAlignBytes;
}

const char* section_name(Section s) {
    switch (s) {
        case Section::setup: return "set-up";
        case Section::step: return "step";
        case Section::teardown: return "teardown";
        case Section::other: break;
    }
    return "other";
}

// Records every allocation's rounded size, its lifetime on one event clock (an allocation or a
// release is one tick) and its place in its section.
class TraceBackend final : public AllocBackend {
public:
    std::vector<Lifetime> lifetimes;
    std::vector<std::pair<Section, std::size_t>> place;  // section, index inside it
    std::array<std::size_t, 3> per_section{};

    bool other_is_step = false;  // a copy of the step program (its repeated block unrolled) is walked as the step
    void begin_section(Section s) override {
        if (s == Section::other && other_is_step) s = Section::step;
        if (s == Section::other) throw std::logic_error("an arena plan covers set-up, step and teardown only");
        section_ = s;
    }
    void* allocate(std::int64_t bytes) override {
        const std::size_t id = lifetimes.size();
        lifetimes.push_back({round_to_slot(bytes), clock_++, -1});
        place.emplace_back(section_, per_section[static_cast<std::size_t>(section_)]++);
        void* p = reinterpret_cast<void*>(static_cast<std::uintptr_t>(id + 1) * kArenaAlignBytes);  // distinct, never null
        live_.emplace(p, id);
        return p;
    }
    void release(void* p) override {
        auto it = live_.find(p);
        if (it == live_.end()) return;
        lifetimes[it->second].end = clock_++;
        live_.erase(it);
    }
    const char* name() const override { return "arena trace"; }
    std::set<std::size_t> live_ids() const {
        std::set<std::size_t> s;
        for (const auto& [p, id] : live_) s.insert(id);
        return s;
    }
    std::int64_t now() const { return clock_; }

private:
    Section section_ = Section::setup;
    std::int64_t clock_ = 0;
    std::unordered_map<void*, std::size_t> live_;
};

// Most bytes alive at once (a sweep over the allocation and release ticks).
std::int64_t live_peak(const std::vector<Lifetime>& v) {
    std::vector<std::pair<std::int64_t, std::int64_t>> ticks;
    ticks.reserve(2 * v.size());
    for (const Lifetime& l : v) {
        ticks.emplace_back(l.start, l.bytes);
        ticks.emplace_back(l.end, -l.bytes);
    }
    std::sort(ticks.begin(), ticks.end());
    std::int64_t now = 0, peak = 0;
    for (const auto& [t, b] : ticks) {
        now += b;
        peak = std::max(peak, now);
    }
    return peak;
}

}  // namespace

std::vector<std::int64_t> place_greedy_by_size(const std::vector<Lifetime>& v, std::int64_t* arena_bytes,
                                               EqualSizes ties, const std::vector<std::size_t>& follows) {
    const std::size_t n = v.size();
    if (!follows.empty() && follows.size() != n) throw std::logic_error("place_greedy_by_size: `follows` is not one per lifetime");
    constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
    std::vector<std::size_t> follower(n, kNone);  // the allocation that takes i's offset, if any
    for (std::size_t i = 0; i < follows.size(); ++i) {
        const std::size_t j = follows[i];
        if (j == i) continue;
        if (j >= n || v[j].bytes != v[i].bytes || follower[j] != kNone || follows[j] != j ||
            (v[j].start < v[i].end && v[i].start < v[j].end))
            throw std::logic_error("place_greedy_by_size: a follower must follow one allocation of its size, alive apart "
                                   "from it, that follows none");
        follower[j] = i;
    }
    std::vector<std::int64_t> offset(n, 0);
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&v, ties](std::size_t a, std::size_t b) {
        if (v[a].bytes != v[b].bytes) return v[a].bytes > v[b].bytes;
        if (ties == EqualSizes::earlier_first) return v[a].start < v[b].start;
        return v[a].end - v[a].start > v[b].end - v[b].start;
    });
    // The placed allocations by time bucket, so that placing one looks only at those alive
    // near its lifetime (a long gradient accumulation has 1e5 allocations a step). 256 buckets:
    // fewer lists to visit per lifetime than 4,096 and few false candidates (preflight_bench
    // --benchmark_filter=Arena: 1.26 s against 2.41 s for 123,378 allocations; the same offsets).
    constexpr std::int64_t kBuckets = 256;
    std::int64_t t_end = 1;
    for (const Lifetime& l : v) t_end = std::max(t_end, l.end);
    const std::int64_t width = std::max<std::int64_t>(1, (t_end + kBuckets - 1) / kBuckets);
    std::vector<std::vector<std::size_t>> bucket(static_cast<std::size_t>(t_end / width + 1));
    std::vector<std::size_t> seen(n, std::numeric_limits<std::size_t>::max());
    std::vector<std::pair<std::int64_t, std::int64_t>> busy;  // [begin, end) offsets alive beside it
    std::int64_t top = 0;
    const auto buckets_of = [&](const Lifetime& x) {
        return std::pair{static_cast<std::size_t>(x.start / width), static_cast<std::size_t>(std::max(x.start, x.end - 1) / width)};
    };
    for (std::size_t q = 0; q < n; ++q) {
        const std::size_t i = order[q];
        if (!follows.empty() && follows[i] != i) continue;  // placed with the one it follows
        busy.clear();
        // The placed allocations alive beside i (and beside its follower, which takes its offset).
        for (const std::size_t k : {i, follower[i]}) {
            if (k == kNone) continue;
            const Lifetime& x = v[k];
            const auto [b0, b1] = buckets_of(x);
            const std::size_t stamp = 2 * q + (k == i ? 0 : 1);  // each placed one looked at once per pass
            for (std::size_t b = b0; b <= b1; ++b)
                for (std::size_t j : bucket[b]) {
                    if (seen[j] == stamp) continue;
                    seen[j] = stamp;
                    if (v[j].start < x.end && x.start < v[j].end) busy.emplace_back(offset[j], offset[j] + v[j].bytes);
                }
        }
        std::sort(busy.begin(), busy.end());
        std::int64_t at = 0;  // first fit: the lowest gap that holds it
        for (const auto& [lo, hi] : busy) {
            if (lo >= at + v[i].bytes) break;
            at = std::max(at, hi);
        }
        top = std::max(top, at + v[i].bytes);
        for (const std::size_t k : {i, follower[i]}) {
            if (k == kNone) continue;
            offset[k] = at;
            const auto [b0, b1] = buckets_of(v[k]);
            for (std::size_t b = b0; b <= b1; ++b) bucket[b].push_back(k);
        }
    }
    if (arena_bytes) *arena_bytes = top;
    return offset;
}

namespace {

// The step's allocations [first + per, first + 2 per) each take the offset of the one `per` before.
struct SameOffsets {
    std::size_t first = 0, per = 0;
};

// The plan of the program with `step` walked as its step (the program's own, or a copy with its
// repeated block written out twice: step_as_run, whose copies take the same offsets).
ArenaPlan plan_walk(const Program& program, const std::vector<Op>& step, SameOffsets same = {}) {
    TraceBackend trace;
    trace.other_is_step = &step != &program.step;
    TrackingAllocator alloc(trace);
    BufferTable table;
    walk(program, program.setup, alloc, table, nullptr, "set-up");
    const std::set<std::size_t> before_step = trace.live_ids();
    walk(program, step, alloc, table, nullptr, "step", 1);
    if (trace.live_ids() != before_step)
        throw std::logic_error("the step program ends a step with other buffers alive than it started with: one step's "
                               "arena plan would not serve the next");
    walk(program, program.teardown, alloc, table, nullptr, "teardown");
    for (Lifetime& l : trace.lifetimes)
        if (l.end < 0) l.end = trace.now();  // never released: held to the end

    ArenaPlan plan;
    plan.live_peak_bytes = live_peak(trace.lifetimes);
    std::vector<std::size_t> follows;
    if (same.per > 0) {
        std::vector<std::size_t> step_ids;  // the step's allocations' places in the trace
        for (std::size_t i = 0; i < trace.place.size(); ++i)
            if (trace.place[i].first == Section::step) step_ids.push_back(i);
        follows.resize(trace.lifetimes.size());
        std::iota(follows.begin(), follows.end(), std::size_t{0});
        for (std::size_t k = same.first + same.per; k < same.first + 2 * same.per; ++k) follows[step_ids.at(k)] = step_ids[k - same.per];
    }
    std::vector<std::int64_t> offset =
        place_greedy_by_size(trace.lifetimes, &plan.arena_bytes, EqualSizes::longer_lived_first, follows);
    if (plan.arena_bytes > plan.live_peak_bytes) {  // at the live peak no placement does better
        std::int64_t earlier_first_bytes = 0;
        std::vector<std::int64_t> other =
            place_greedy_by_size(trace.lifetimes, &earlier_first_bytes, EqualSizes::earlier_first, follows);
        if (earlier_first_bytes < plan.arena_bytes) offset = std::move(other), plan.arena_bytes = earlier_first_bytes;
    }
    for (std::size_t s = 0; s < plan.slots.size(); ++s) plan.slots[s].resize(trace.per_section[s]);
    for (std::size_t i = 0; i < trace.lifetimes.size(); ++i) {
        const auto& [section, index] = trace.place[i];
        plan.slots[static_cast<std::size_t>(section)][index] = {offset[i], trace.lifetimes[i].bytes};
    }
    plan.allocations = static_cast<std::int64_t>(trace.lifetimes.size());
    return plan;
}

}  // namespace

// A long gradient accumulation repeats a block of ops on the same buffers (Program::repeat: without
// a pipeline one micro-batch, with one a period of the steady state), so the step is planned with
// that block written out twice, both copies tied to the same offsets, and every later run takes
// them again (ArenaPlan::step_repeat). walk() refuses to allocate a live buffer, so a buffer a run
// allocates is freed before the next run allocates it again: it lives at most into the next run.
// Each boundary between two runs is then the one between the two copies, which the plan placed,
// and the last run meets what follows the block as the second copy did (append_repeating: the
// block is followed by the same ops on every run). Until 2026-12-01 the copies were placed apart
// and the later runs took the last's offsets once two copies had settled alike: an interleaved
// stage's never did (MPT-30B at pp 2 x vpp 12, 20 copies). Tied, they cost an interleaved stage
// about 0.8 % over the live peak (GPT-2 at pp 2 x vpp 3, test_arena.cpp; a free third copy did
// no better); 1F1B and no-pipeline blocks still reach it.
ArenaPlan plan_arena(const Program& program) {
    const Program::Repeat& r = program.repeat;
    if (r.times <= 1) return plan_walk(program, program.step);
    const std::vector<Op> step = step_as_run(program, 2);  // a copy: walk() runs it once
    if (r.times == 2) return plan_walk(program, step);    // every run placed
    const std::size_t first = allocations_in(step, 0, r.begin), per = allocations_in(step, r.begin, r.end);
    ArenaPlan plan = plan_walk(program, step, {first, per});
    plan.step_repeat = {first + per, per, r.times - 1};
    plan.allocations += static_cast<std::int64_t>(per) * (r.times - 2);
    plan.extended_micro_batches = r.times - 2;
    // Over the live peak (an interleaved stage's tied copies): a step of at most
    // kMaxLayerStepsWrittenOut micro-batches x layers of the stage is also planned written out,
    // every run placed freely, and the smaller arena kept. Llama-3-8B's first stage at tp 2 --sp,
    // pp 4 x vpp 2, ZeRO-3, fp8, selective: at 64 micro-batches 12.26 GiB, 0.28 % over its live
    // peak, where the tied copies alone take 12.46 GiB, 1.9 % (dry run 1.8 s); written out, 256
    // micro-batches took 4.4 s and 512 8.4 s (all of them were until 2026-12-01), tied 0.8 s.
    constexpr std::int64_t kMaxLayerStepsWrittenOut = 1024;
    if (plan.arena_bytes > plan.live_peak_bytes &&
        program.dims.grad_acc * program.dims.layers <= kMaxLayerStepsWrittenOut) {
        ArenaPlan whole = plan_walk(program, step_as_run(program));
        if (whole.arena_bytes < plan.arena_bytes) return whole;
    }
    return plan;
}

ArenaBackend::ArenaBackend(const ArenaPlan& plan, void* base, std::int64_t capacity_bytes)
    : plan_(plan), base_(static_cast<char*>(base)), capacity_(capacity_bytes) {}

void ArenaBackend::begin_section(Section s) {
    section_ = s;
    next_ = 0;
}

void* ArenaBackend::allocate(std::int64_t bytes) {
    if (section_ == Section::other) throw std::logic_error("an arena serves a step program's set-up, step and teardown only");
    const std::vector<ArenaSlot>& slots = plan_.slots[static_cast<std::size_t>(section_)];
    const auto fail = [&](const std::string& why) {
        return std::logic_error(std::string("arena plan, ") + section_name(section_) + " allocation " +
                                std::to_string(next_ + 1) + ": " + why);
    };
    const std::size_t index = section_ == Section::step ? plan_.step_repeat.slot(next_) : next_;
    if (index >= slots.size()) throw fail("the plan has only " + std::to_string(slots.size()) + " allocations there");
    const ArenaSlot& slot = slots[index];
    if (round_to_slot(bytes) != slot.bytes)
        throw fail("the run asks for " + std::to_string(bytes) + " bytes, the plan holds " + std::to_string(slot.bytes));
    if (slot.offset_bytes + slot.bytes > capacity_) {  // past what the device gave: out of memory
        ++next_;
        return nullptr;
    }
    void* p = base_ + slot.offset_bytes;
    if (!live_.emplace(p, slot.bytes).second) throw fail("its slot is still in use");
    ++next_;
    high_ = std::max(high_, slot.offset_bytes + slot.bytes);
    return p;
}

void ArenaBackend::release(void* ptr) { live_.erase(ptr); }

}  // namespace preflight::runtime
