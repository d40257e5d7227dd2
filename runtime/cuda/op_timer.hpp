// The events behind `preflight run --op-times` (op_times.hpp): one on the compute stream
// before every op of the timed step and one after its last op; op i took the time from event
// i to event i + 1. Events are created on first use and reused.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "check.hpp"
#include "preflight/runtime/op_times.hpp"

namespace preflight::runtime::cuda {

class OpTimer {
public:
    explicit OpTimer(cudaStream_t s) : stream_(s) {}
    ~OpTimer() {
        for (cudaEvent_t e : events_) cudaEventDestroy(e);
    }
    OpTimer(const OpTimer&) = delete;
    OpTimer& operator=(const OpTimer&) = delete;

    // An op is about to be issued: its event, and its entry.
    void begin_op(std::string label) {
        record();
        ops_.push_back({std::move(label), 0, 0.0, {}, 0.0});
    }
    // The op being issued runs this GEMM.
    void note_gemm(const GemmShape& g) {
        if (ops_.empty()) return;
        OpTiming& op = ops_.back();
        ++op.gemms;
        op.gemm_flops += gemm_flops(g);
        op.shape = g;
    }
    // The op being issued does other work than its kind says (a fused or deferred GEMM).
    void relabel(std::string label) {
        if (!ops_.empty()) ops_.back().label = std::move(label);
    }
    // After the step's last op.
    void finish() { record(); }
    // The ops with their times; call once the stream has synchronised after finish().
    std::vector<OpTiming> collect() {
        for (std::size_t i = 0; i < ops_.size() && i + 1 < used_; ++i) {
            float ms = 0;
            PF_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
            ops_[i].time_s = static_cast<double>(ms) / 1e3;
        }
        std::vector<OpTiming> out = std::move(ops_);
        ops_.clear();
        used_ = 0;
        return out;
    }

private:
    void record() {
        if (used_ == events_.size()) {
            cudaEvent_t e = nullptr;
            PF_CUDA_CHECK(cudaEventCreate(&e));
            events_.push_back(e);
        }
        PF_CUDA_CHECK(cudaEventRecord(events_[used_++], stream_));
    }

    cudaStream_t stream_;
    std::vector<cudaEvent_t> events_;
    std::size_t used_ = 0;
    std::vector<OpTiming> ops_;
};

}  // namespace preflight::runtime::cuda
