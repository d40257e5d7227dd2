// Where a step's time goes, op by op (`preflight run --op-times`): one extra step after the
// measured ones, with a CUDA event on the compute stream before every op and one after the
// last, so op i took the time between event i and event i + 1. Host code: the aggregation and
// the JSON are tested without a GPU; the events are recorded by the CUDA executor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace preflight::runtime {

// One cuBLASLt product as the op passed it (D[M, N] = op(A)[M, K] op(B)[K, N], `batch` of them).
struct GemmShape {
    std::int64_t m = 0, n = 0, k = 0, batch = 1;
    bool operator<(const GemmShape& o) const;
    bool operator==(const GemmShape& o) const = default;
};

// 2 M N K per product (a multiply and an add per term), times the batch.
double gemm_flops(const GemmShape& g);

// One op of the timed step: its label (the op kind, "fp8 " before an fp8 product's, a fused
// epilogue after a '+'), the GEMMs it ran and the time its events enclose.
struct OpTiming {
    std::string label;
    int gemms = 0;          // cuBLASLt calls the op made
    double gemm_flops = 0;  // their FLOPs
    GemmShape shape;        // the last one's shape (the only one's for a linear op)
    double time_s = 0;
};

// The ops of one label, summed.
struct OpLabelTime {
    std::string label;
    std::int64_t count = 0;
    double time_s = 0;
    double gemm_flops = 0;
};

// The single-GEMM ops of one label and shape, summed: the data a GEMM-efficiency fit needs.
struct GemmShapeTime {
    std::string label;
    GemmShape shape;
    std::int64_t count = 0;
    double time_s = 0;
    double flops = 0;
};

struct OpTimes {
    std::int64_t ops = 0;          // ops timed
    double total_s = 0;            // their times summed (the timed step, event to event)
    std::vector<OpLabelTime> by_label;  // longest first
    std::vector<GemmShapeTime> gemms;   // longest first
};

// Sums `ops` by label and, for ops that ran exactly one GEMM, by label and shape.
OpTimes aggregate_op_times(const std::vector<OpTiming>& ops);

nlohmann::json op_times_to_json(const OpTimes& t);

}  // namespace preflight::runtime
