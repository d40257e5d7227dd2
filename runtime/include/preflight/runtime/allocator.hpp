// The one tracking allocator every device allocation goes through. It keeps bytes
// per category, the peak (and where it happened) and a timeline; a backend does the
// raw allocation (host "dry" backend: fake addresses; CUDA backend: the device).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "preflight/runtime/program.hpp"

namespace preflight::runtime {

using CategoryBytes = std::array<std::int64_t, kCategoryCount>;
std::int64_t total(const CategoryBytes& b);

// Which part of a step program a walk goes through (walk() tells the backend as it starts):
// a planned arena replays each section's offsets. `other`: ops that are none of the three.
enum class Section : std::uint8_t { setup, step, teardown, other };

// Raw allocation. allocate() returns nullptr when the device is out of memory (and only
// then: never falls back); any other failure (a sticky fault left by an earlier kernel,
// a lost device) throws DeviceError, so it is never reported as "does not fit".
class AllocBackend {
public:
    virtual ~AllocBackend() = default;
    virtual void* allocate(std::int64_t bytes) = 0;
    virtual void release(void* ptr) = 0;
    // Free device memory now, or -1 when the backend has no device.
    virtual std::int64_t free_device_bytes() { return -1; }
    // Bytes the backend has reserved from the device (a pool's reserved memory), or -1.
    virtual std::int64_t reserved_bytes() { return -1; }
    // A walk over section `s` starts (a step starts over at its first allocation).
    virtual void begin_section(Section /*s*/) {}
    // A dry walk passes over n allocations (repeated runs it does not walk: walk()).
    virtual void pass_over(std::int64_t /*n*/) {}
    virtual const char* name() const = 0;
};

// No device: hands out distinct fake addresses (256-byte aligned), never fails
// unless a capacity is set.
class DryBackend final : public AllocBackend {
public:
    explicit DryBackend(std::int64_t capacity_bytes = -1) : capacity_(capacity_bytes) {}
    void* allocate(std::int64_t bytes) override;
    void release(void* ptr) override;
    std::int64_t free_device_bytes() override { return capacity_ < 0 ? -1 : capacity_ - in_use_; }
    const char* name() const override { return "dry"; }

private:
    std::int64_t capacity_;
    std::int64_t in_use_ = 0;
    std::uintptr_t next_ = 0x1000;
    std::unordered_map<void*, std::int64_t> sizes_;
};

// A failed allocation: stops the run (exit 1) with phase, request and free memory.
class AllocationError : public std::runtime_error {
public:
    AllocationError(std::string where, std::string buffer, Category category, std::int64_t requested_bytes,
                    std::int64_t free_bytes, std::int64_t in_use_bytes);
    std::string where;   // op label
    std::string buffer;  // buffer name
    Category category;
    std::int64_t requested_bytes, free_bytes, in_use_bytes;
};

struct TimelineSample {
    std::int64_t seq = 0;  // op index within the recorded section
    double time_s = 0;     // seconds since the allocator was created (0 in a dry run)
    std::string label;     // op label (describe())
    PhaseKind phase = PhaseKind::step_start;
    CategoryBytes bytes{};
};

class TrackingAllocator {
public:
    // `clock` gives seconds (device runs); null records time 0.
    explicit TrackingAllocator(AllocBackend& backend, std::function<double()> clock = {});

    // Throws AllocationError when the backend fails. `where` labels the op.
    void* allocate(const BufferSpec& spec, const std::string& where) {
        return allocate_at(spec, [&where] { return where; });
    }
    // The same, with the op's label made by `where()` only when it is needed (a failure or
    // a new peak), not on every allocation of a long step.
    template <class Where>
    void* allocate_at(const BufferSpec& spec, const Where& where) {
        const std::int64_t bytes = spec.bytes();
        void* p = backend_.allocate(bytes);
        if (p == nullptr)
            throw AllocationError(where(), spec.name, spec.category, bytes, backend_.free_device_bytes(), current_total());
        if (record(p, spec.category, bytes)) peak_where_ = where();
        return p;
    }
    void release(void* ptr);

    // Appends a timeline sample (current bytes) when recording is on.
    void sample(const std::string& label, PhaseKind phase);
    void set_recording(bool on) { recording_ = on; }
    bool recording() const { return recording_; }
    void reset_peak();

    const CategoryBytes& current() const { return current_; }
    std::int64_t current_total() const { return total(current_); }
    std::int64_t peak_bytes() const { return peak_; }
    const CategoryBytes& peak_breakdown() const { return peak_breakdown_; }
    const std::string& peak_where() const { return peak_where_; }
    PhaseKind peak_phase() const { return peak_phase_; }
    const std::vector<TimelineSample>& timeline() const { return timeline_; }
    std::int64_t allocations() const { return allocations_; }
    // Counts allocations a dry walk passed over (walk(): runs of a repeated block that repeat one
    // it walked, from the same buffers alive), and tells the backend (an arena's plan counts them).
    void pass_over_allocations(std::int64_t n) {
        allocations_ += n;
        backend_.pass_over(n);
    }
    std::int64_t live_allocations() const { return static_cast<std::int64_t>(live_.size()); }
    AllocBackend& backend() { return backend_; }
    void set_phase(PhaseKind k) { phase_ = k; }
    void begin_section(Section s) { backend_.begin_section(s); }

private:
    // Books a successful allocation; true when it set a new peak.
    bool record(void* p, Category category, std::int64_t bytes);
    struct Live {
        Category category;
        std::int64_t bytes;
    };
    AllocBackend& backend_;
    std::function<double()> clock_;
    CategoryBytes current_{};
    std::int64_t peak_ = 0;
    CategoryBytes peak_breakdown_{};
    std::string peak_where_;
    PhaseKind peak_phase_ = PhaseKind::step_start;
    PhaseKind phase_ = PhaseKind::step_start;
    std::unordered_map<void*, Live> live_;
    std::vector<TimelineSample> timeline_;
    bool recording_ = false;
    std::int64_t seq_ = 0;
    std::int64_t allocations_ = 0;
};

}  // namespace preflight::runtime
