#include "preflight/runtime/allocator.hpp"

namespace preflight::runtime {

std::int64_t total(const CategoryBytes& b) {
    std::int64_t t = 0;
    for (auto v : b) t += v;
    return t;
}

void* DryBackend::allocate(std::int64_t bytes) {
    if (capacity_ >= 0 && in_use_ + bytes > capacity_) return nullptr;
    void* p = reinterpret_cast<void*>(next_);
    next_ += static_cast<std::uintptr_t>((bytes + 255) / 256 * 256 + 256);  // distinct, aligned
    sizes_[p] = bytes;
    in_use_ += bytes;
    return p;
}

void DryBackend::release(void* ptr) {
    auto it = sizes_.find(ptr);
    if (it == sizes_.end()) return;
    in_use_ -= it->second;
    sizes_.erase(it);
}

namespace {
std::string error_text(const std::string& where, const std::string& buffer, Category c, std::int64_t req,
                       std::int64_t free_b, std::int64_t in_use) {
    std::string s = "allocation failed at " + where + ": " + buffer + " (" + std::string(to_string(c)) + ") needs " +
                    std::to_string(req) + " bytes; ";
    s += free_b >= 0 ? std::to_string(free_b) + " bytes free on the device" : "free device memory unknown";
    s += ", " + std::to_string(in_use) + " bytes held by the run";
    return s;
}
}  // namespace

AllocationError::AllocationError(std::string where_, std::string buffer_, Category category_,
                                 std::int64_t requested, std::int64_t free_b, std::int64_t in_use)
    : std::runtime_error(error_text(where_, buffer_, category_, requested, free_b, in_use)),
      where(std::move(where_)),
      buffer(std::move(buffer_)),
      category(category_),
      requested_bytes(requested),
      free_bytes(free_b),
      in_use_bytes(in_use) {}

TrackingAllocator::TrackingAllocator(AllocBackend& backend, std::function<double()> clock)
    : backend_(backend), clock_(std::move(clock)) {}

bool TrackingAllocator::record(void* p, Category category, std::int64_t bytes) {
    live_[p] = {category, bytes};
    current_[static_cast<std::size_t>(category)] += bytes;
    ++allocations_;
    const std::int64_t t = current_total();
    if (t <= peak_) return false;
    peak_ = t;
    peak_breakdown_ = current_;
    peak_phase_ = phase_;
    return true;
}

void TrackingAllocator::release(void* ptr) {
    if (ptr == nullptr) return;
    auto it = live_.find(ptr);
    if (it == live_.end()) return;
    current_[static_cast<std::size_t>(it->second.category)] -= it->second.bytes;
    live_.erase(it);
    backend_.release(ptr);
}

void TrackingAllocator::sample(const std::string& label, PhaseKind phase) {
    if (!recording_) return;
    timeline_.push_back({seq_++, clock_ ? clock_() : 0.0, label, phase, current_});
}

void TrackingAllocator::reset_peak() {
    peak_ = current_total();
    peak_breakdown_ = current_;
    peak_where_.clear();
}

}  // namespace preflight::runtime
