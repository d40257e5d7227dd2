#include "preflight/runtime/op_times.hpp"

#include <algorithm>
#include <map>
#include <tuple>

namespace preflight::runtime {

bool GemmShape::operator<(const GemmShape& o) const { return std::tie(m, n, k, batch) < std::tie(o.m, o.n, o.k, o.batch); }

double gemm_flops(const GemmShape& g) {
    return 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k) *
           static_cast<double>(g.batch);
}

OpTimes aggregate_op_times(const std::vector<OpTiming>& ops) {
    OpTimes out;
    std::map<std::string, OpLabelTime> by_label;
    std::map<std::pair<std::string, GemmShape>, GemmShapeTime> by_shape;
    for (const OpTiming& op : ops) {
        ++out.ops;
        out.total_s += op.time_s;
        OpLabelTime& l = by_label[op.label];
        l.label = op.label;
        ++l.count;
        l.time_s += op.time_s;
        l.gemm_flops += op.gemm_flops;
        if (op.gemms != 1) continue;
        GemmShapeTime& g = by_shape[{op.label, op.shape}];
        g.label = op.label;
        g.shape = op.shape;
        ++g.count;
        g.time_s += op.time_s;
        g.flops += op.gemm_flops;
    }
    for (auto& [key, l] : by_label) out.by_label.push_back(l);
    for (auto& [key, g] : by_shape) out.gemms.push_back(g);
    auto longest = [](const auto& a, const auto& b) { return a.time_s > b.time_s; };
    std::stable_sort(out.by_label.begin(), out.by_label.end(), longest);
    std::stable_sort(out.gemms.begin(), out.gemms.end(), longest);
    return out;
}

nlohmann::json op_times_to_json(const OpTimes& t) {
    nlohmann::json labels = nlohmann::json::array(), gemms = nlohmann::json::array();
    for (const OpLabelTime& l : t.by_label)
        labels.push_back({{"kind", l.label},
                          {"count", l.count},
                          {"time_s", l.time_s},
                          {"share", t.total_s > 0 ? l.time_s / t.total_s : 0.0},
                          {"gemm_flops", l.gemm_flops}});
    for (const GemmShapeTime& g : t.gemms)
        gemms.push_back({{"kind", g.label},
                         {"m", g.shape.m},
                         {"n", g.shape.n},
                         {"k", g.shape.k},
                         {"batch", g.shape.batch},
                         {"count", g.count},
                         {"time_s", g.time_s},
                         {"flops", g.flops},
                         {"flops_per_s", g.time_s > 0 ? nlohmann::json(g.flops / g.time_s) : nlohmann::json(nullptr)}});
    return {{"how",
             "one step after the measured ones, a CUDA event on the compute stream before every op and after the last: "
             "an op's time is from its event to the next (collectives run on their own stream; comm_wait holds the "
             "wait for them)"},
            {"ops", t.ops},
            {"total_s", t.total_s},
            {"by_kind", labels},
            {"gemms", gemms}};
}

}  // namespace preflight::runtime
