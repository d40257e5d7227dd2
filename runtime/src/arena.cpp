#include "preflight/runtime/arena.hpp"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
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

constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();

// follower[j] = the allocation that takes j's offset (kNone if none), checking `follows`.
std::vector<std::size_t> followers_of(const std::vector<Lifetime>& v, const std::vector<std::size_t>& follows) {
    const std::size_t n = v.size();
    if (!follows.empty() && follows.size() != n) throw std::logic_error("arena placement: `follows` is not one per lifetime");
    std::vector<std::size_t> follower(n, kNone);
    for (std::size_t i = 0; i < follows.size(); ++i) {
        const std::size_t j = follows[i];
        if (j == i) continue;
        if (j >= n || v[j].bytes != v[i].bytes || follower[j] != kNone || follows[j] != j ||
            (v[j].start < v[i].end && v[i].start < v[j].end))
            throw std::logic_error("arena placement: a follower must follow one allocation of its size, alive apart from "
                                   "it, that follows none");
        follower[j] = i;
    }
    return follower;
}

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
    const std::vector<std::size_t> follower = followers_of(v, follows);
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

// Greedy by size with either tie-break between equal sizes, keeping the smaller arena; the
// second is tried only when the first lies over `bound` (the live peak, which none goes under).
std::vector<std::int64_t> place_smaller(const std::vector<Lifetime>& v, const std::vector<std::size_t>& follows,
                                        std::int64_t bound, std::int64_t* top) {
    std::vector<std::int64_t> offset = place_greedy_by_size(v, top, EqualSizes::longer_lived_first, follows);
    if (*top > bound) {
        std::int64_t earlier_first_bytes = 0;
        std::vector<std::int64_t> other = place_greedy_by_size(v, &earlier_first_bytes, EqualSizes::earlier_first, follows);
        if (earlier_first_bytes < *top) offset = std::move(other), *top = earlier_first_bytes;
    }
    return offset;
}

// Most of `ids` alive at once: live_peak of their lifetimes, each counted as one.
std::int64_t most_alive(const std::vector<Lifetime>& v, const std::vector<std::size_t>& ids) {
    std::vector<Lifetime> ones;
    ones.reserve(ids.size());
    for (const std::size_t i : ids) ones.push_back({1, v[i].start, v[i].end});
    return live_peak(ones);
}

// Slots of one size a tied first fit takes for `ids` (a leader with its follower, in order of
// the leader's start, in the lowest slot where neither meets an allocation placed there).
std::int64_t tied_slots(const std::vector<Lifetime>& v, const std::vector<std::size_t>& follows,
                        const std::vector<std::size_t>& follower, std::vector<std::size_t> ids) {
    std::erase_if(ids, [&](std::size_t i) { return follows[i] != i; });
    std::sort(ids.begin(), ids.end(), [&v](std::size_t a, std::size_t b) { return v[a].start < v[b].start; });
    std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> slots;  // each slot's lifetimes, by start
    const auto meets = [](const auto& slot, const Lifetime& x) {           // disjoint and sorted: ends sorted too
        auto it = std::lower_bound(slot.begin(), slot.end(), std::pair{x.end, std::int64_t{0}});
        return it != slot.begin() && std::prev(it)->second > x.start;
    };
    for (const std::size_t i : ids) {
        const std::size_t f = follower[i];
        std::size_t k = 0;
        while (k < slots.size() && (meets(slots[k], v[i]) || (f != kNone && meets(slots[k], v[f])))) ++k;
        if (k == slots.size()) slots.emplace_back();
        for (const std::size_t j : {i, f}) {
            if (j == kNone) continue;
            const std::pair<std::int64_t, std::int64_t> life{v[j].start, v[j].end};
            slots[k].insert(std::lower_bound(slots[k].begin(), slots[k].end(), life), life);
        }
    }
    return static_cast<std::int64_t>(slots.size());
}

}  // namespace

BandedPlacement place_in_bands(const std::vector<Lifetime>& v, const std::vector<std::size_t>& follows,
                               const std::vector<bool>& step) {
    const std::size_t n = v.size();
    if (follows.size() != n || step.size() != n) throw std::logic_error("place_in_bands: `follows` and `step` are one per lifetime");
    const std::vector<std::size_t> follower = followers_of(v, follows);
    std::map<std::int64_t, std::vector<std::size_t>> of_size;  // the step's allocations by size
    std::set<std::int64_t> tied;                              // sizes with a tied pair
    std::int64_t run_ticks = 0;                               // a follower's start less its leader's
    for (std::size_t i = 0; i < n; ++i) {
        if (step[i]) of_size[v[i].bytes].push_back(i);
        if (follows[i] == i) continue;
        if (!step[i] || !step[follows[i]]) throw std::logic_error("place_in_bands: a tied pair outside the step");
        tied.insert(v[i].bytes);
        run_ticks = std::max(run_ticks, v[i].start - v[follows[i]].start);
    }
    // A band holds the buffers of its size that outlive a pass's transients: at least 1/64 of a
    // run of the block (a pair as its leader). Transients of that size, kept in the band, would
    // raise its slots to the most alive at any tick. Chosen on 410 random interleaved stages
    // (2026-12-01, bands alone): over the live peak 0.070 % on average with every member, 0.051 %
    // from 1/256 of a run, 0.045 % from 1/64, 0.095 % from 1/16, 0.575 % from 1/4.
    const std::int64_t member_ticks = run_ticks / 64;
    BandedPlacement out;
    out.band.assign(n, -1);
    std::vector<std::vector<std::size_t>> members;
    for (const std::int64_t bytes : tied) {
        std::vector<std::size_t> ids = of_size[bytes];
        std::erase_if(ids, [&](std::size_t i) { return v[follows[i]].end - v[follows[i]].start < member_ticks; });
        const std::int64_t alive = most_alive(v, ids);
        if (ids.empty() || tied_slots(v, follows, follower, ids) <= alive) continue;
        for (const std::size_t i : ids) out.band[i] = static_cast<std::int32_t>(out.bands.size());
        out.bands.push_back({0, bytes, alive});
        members.push_back(std::move(ids));
    }
    // The others as they are (a tie between two of them kept), and each band as one allocation of
    // its slots over the time its members span.
    std::vector<Lifetime> placed;
    std::vector<std::size_t> at(n), placed_follows;
    for (std::size_t i = 0; i < n; ++i)
        if (out.band[i] < 0) at[i] = placed.size(), placed.push_back(v[i]);
    for (std::size_t i = 0; i < n; ++i)
        if (out.band[i] < 0) placed_follows.push_back(at[follows[i]]);
    const std::size_t first_band = placed.size();
    for (std::size_t b = 0; b < out.bands.size(); ++b) {
        Lifetime span{out.bands[b].count * out.bands[b].slot_bytes, std::numeric_limits<std::int64_t>::max(), 0};
        for (const std::size_t i : members[b]) span.start = std::min(span.start, v[i].start), span.end = std::max(span.end, v[i].end);
        placed_follows.push_back(placed.size());
        placed.push_back(span);
    }
    const std::vector<std::int64_t> offset = place_smaller(placed, placed_follows, live_peak(v), &out.arena_bytes);
    for (std::size_t b = 0; b < out.bands.size(); ++b) out.bands[b].offset_bytes = offset[first_band + b];
    out.offset.resize(n);
    for (std::size_t i = 0; i < n; ++i)
        out.offset[i] = out.band[i] < 0 ? offset[at[i]] : out.bands[static_cast<std::size_t>(out.band[i])].offset_bytes;
    return out;
}

namespace {

// The step's allocations [first + per, first + 2 per) each take the offset of the one `per` before.
struct SameOffsets {
    std::size_t first = 0, per = 0;
};

// The plan of the program with `step` walked as its step (the program's own, or a copy with its
// repeated block written out twice: step_as_run, whose copies are tied to the same offsets, and
// the sizes a tie costs slots in bands: place_in_bands, or with `tie_alone_too` the smaller of
// that and the tie alone).
ArenaPlan plan_walk(const Program& program, const std::vector<Op>& step, SameOffsets same = {}, bool tie_alone_too = false) {
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
    const std::size_t n = trace.lifetimes.size();
    BandedPlacement placement;
    if (same.per > 0) {
        std::vector<std::size_t> step_ids;  // the step's allocations' places in the trace
        std::vector<bool> in_step(n, false);
        for (std::size_t i = 0; i < n; ++i)
            if (trace.place[i].first == Section::step) step_ids.push_back(i), in_step[i] = true;
        std::vector<std::size_t> follows(n);
        std::iota(follows.begin(), follows.end(), std::size_t{0});
        for (std::size_t k = same.first + same.per; k < same.first + 2 * same.per; ++k) follows[step_ids.at(k)] = step_ids[k - same.per];
        placement = place_in_bands(trace.lifetimes, follows, in_step);
        if (tie_alone_too && !placement.bands.empty() && placement.arena_bytes > plan.live_peak_bytes) {
            // Bands lose now and then to the tie alone (10 of 409 random interleaved stages, by up
            // to 0.39 % of the live peak): the smaller is kept.
            BandedPlacement tied;
            tied.offset = place_smaller(trace.lifetimes, follows, plan.live_peak_bytes, &tied.arena_bytes);
            if (tied.arena_bytes < placement.arena_bytes) tied.band.assign(n, -1), placement = std::move(tied);
        }
    } else {
        placement.offset = place_smaller(trace.lifetimes, {}, plan.live_peak_bytes, &placement.arena_bytes);
        placement.band.assign(n, -1);
    }
    plan.arena_bytes = placement.arena_bytes;
    plan.bands = std::move(placement.bands);
    for (std::size_t s = 0; s < plan.slots.size(); ++s) plan.slots[s].resize(trace.per_section[s]);
    for (std::size_t i = 0; i < n; ++i) {
        const auto& [section, index] = trace.place[i];
        plan.slots[static_cast<std::size_t>(section)][index] = {placement.offset[i], trace.lifetimes[i].bytes, placement.band[i]};
    }
    plan.allocations = static_cast<std::int64_t>(n);
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
// stage's never did (MPT-30B at pp 2 x vpp 12, 20 copies). Tied, an interleaved stage's stashed
// activations cost it slots (a chunk's buffers cycle through more slots than it holds at once),
// so those sizes go in bands whose slots the runs take in turn (place_in_bands): over 409 random
// interleaved stages the arena lies 0.041 % over the live peak on average (P99 0.79 %, at most
// 2.05 %), where the tie alone gave 0.288 % (P99 4.0 %, at most 8.2 %; GPT-2 at pp 2 x vpp 3 in
// test_arena.cpp: 0.79 % then, 0.00 % now), none worse. 1F1B and no-pipeline blocks reach the
// live peak either way.
ArenaPlan plan_arena(const Program& program) {
    const Program::Repeat& r = program.repeat;
    if (r.times <= 1) return plan_walk(program, program.step);
    const std::vector<Op> step = step_as_run(program, 2);  // a copy: walk() runs it once
    if (r.times == 2) return plan_walk(program, step);    // every run placed
    const std::size_t first = allocations_in(step, 0, r.begin), per = allocations_in(step, r.begin, r.end);
    // A step of at most kMaxLayerStepsWrittenOut micro-batches x layers of the stage may also be
    // planned written out (below), which stands in for the tie alone there.
    constexpr std::int64_t kMaxLayerStepsWrittenOut = 1024;
    const bool may_write_out = program.dims.grad_acc * program.dims.layers <= kMaxLayerStepsWrittenOut;
    ArenaPlan plan = plan_walk(program, step, {first, per}, !may_write_out);
    plan.step_repeat = {first + per, per, r.times - 1};
    plan.allocations += static_cast<std::int64_t>(per) * (r.times - 2);
    plan.extended_micro_batches = r.times - 2;
    // Over the live peak (an interleaved stage's tied copies): a step of at most
    // kMaxLayerStepsWrittenOut layer-steps is also planned written out, every run placed freely,
    // and the smaller arena kept. Llama-3-8B's first stage at dp 2 x tp 2 --sp x pp 4 x vpp 2,
    // ZeRO-3, fp8, selective (preflight_bench's interleaved cases): at 128 micro-batches 0.458 %
    // over its live peak written out (2.0 s in all); at 256 and more 1.13 % with bands, 4.44 %
    // with the tie alone (0.65 s for both).
    if (plan.arena_bytes > plan.live_peak_bytes && may_write_out) {
        ArenaPlan whole = plan_walk(program, step_as_run(program));
        if (whole.arena_bytes < plan.arena_bytes) return whole;
    }
    return plan;
}

ArenaBackend::ArenaBackend(const ArenaPlan& plan, void* base, std::int64_t capacity_bytes)
    : plan_(plan), base_(static_cast<char*>(base)), capacity_(capacity_bytes), bands_(plan.bands.size()) {}

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
    Taken taken;
    std::int64_t offset = slot.offset_bytes;
    if (slot.band >= 0) {  // the band's lowest free slot
        const ArenaBand& band = plan_.bands.at(static_cast<std::size_t>(slot.band));
        BandSlots& free = bands_[static_cast<std::size_t>(slot.band)];
        if (free.freed.empty()) {
            if (free.fresh == band.count)
                throw fail("its band's " + std::to_string(band.count) + " slots of " + std::to_string(band.slot_bytes) +
                           " bytes are all in use");
            taken.slot = free.fresh++;
        } else {
            std::pop_heap(free.freed.begin(), free.freed.end(), std::greater<>());
            taken.slot = free.freed.back();
            free.freed.pop_back();
        }
        taken.band = slot.band;
        offset = band.offset_bytes + taken.slot * band.slot_bytes;
    }
    void* p = base_ + offset;
    if (offset + slot.bytes > capacity_) {  // past what the device gave: out of memory
        give_back(taken);
        ++next_;
        return nullptr;
    }
    if (!live_.emplace(p, taken).second) throw fail("its slot is still in use");
    ++next_;
    high_ = std::max(high_, offset + slot.bytes);
    return p;
}

void ArenaBackend::give_back(const Taken& t) {
    if (t.band < 0) return;
    std::vector<std::int64_t>& freed = bands_[static_cast<std::size_t>(t.band)].freed;
    freed.push_back(t.slot);
    std::push_heap(freed.begin(), freed.end(), std::greater<>());
}

void ArenaBackend::release(void* ptr) {
    const auto it = live_.find(ptr);
    if (it == live_.end()) return;
    give_back(it->second);
    live_.erase(it);
}

}  // namespace preflight::runtime
