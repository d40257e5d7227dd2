// Communication cost model: link tiers, ring/tree collectives, p2p, pipeline bubble.
#include "preflight/planner/collectives.hpp"

#include <algorithm>
#include <cmath>

namespace preflight {

std::string_view to_string(CollectiveKind k) {
    switch (k) {
        case CollectiveKind::all_reduce: return "all-reduce";
        case CollectiveKind::all_gather: return "all-gather";
        case CollectiveKind::reduce_scatter: return "reduce-scatter";
    }
    return "?";
}

GroupPlacement place_group(std::int64_t ranks, std::int64_t stride, std::int64_t gpus_per_node) {
    GroupPlacement g;
    g.ranks = std::max<std::int64_t>(ranks, 1);
    stride = std::max<std::int64_t>(stride, 1);
    gpus_per_node = std::max<std::int64_t>(gpus_per_node, 1);
    // Members i*stride apart; a node holds gpus_per_node consecutive ranks, so it holds
    // gpus_per_node / stride members of the group (at least one).
    if (stride < gpus_per_node) {
        g.ranks_per_node = std::min(g.ranks, std::max<std::int64_t>(gpus_per_node / stride, 1));
    } else {
        g.ranks_per_node = 1;
    }
    g.nodes = (g.ranks + g.ranks_per_node - 1) / g.ranks_per_node;
    return g;
}

LinkTier group_link(const Network& net, const GroupPlacement& g) {
    if (g.nodes <= 1) return net.intra_node;
    LinkTier t = net.inter_node;
    t.bandwidth_bytes_per_s = std::min(net.intra_node.bandwidth_bytes_per_s,
                                       static_cast<double>(g.ranks_per_node) * net.inter_node.bandwidth_bytes_per_s);
    return t;
}

double ring_collective_s(CollectiveKind kind, double bytes, std::int64_t n, const LinkTier& link) {
    if (n <= 1 || bytes <= 0) return 0;
    const double steps = static_cast<double>(n - 1);
    const double share = steps / static_cast<double>(n);
    const double passes = kind == CollectiveKind::all_reduce ? 2.0 : 1.0;  // reduce-scatter + all-gather
    return passes * (share * bytes / link.bandwidth_bytes_per_s + steps * link.latency_s);
}

double tree_all_reduce_s(double bytes, std::int64_t n, const LinkTier& link) {
    if (n <= 1 || bytes <= 0) return 0;
    const double depth = std::ceil(std::log2(static_cast<double>(n)));
    return 2.0 * (bytes / link.bandwidth_bytes_per_s + depth * link.latency_s);
}

double collective_s(CollectiveKind kind, double bytes, std::int64_t n, const LinkTier& link,
                    CollectiveAlgorithm algorithm) {
    const double ring = ring_collective_s(kind, bytes, n, link);
    if (kind != CollectiveKind::all_reduce || algorithm == CollectiveAlgorithm::ring) return ring;
    const double tree = tree_all_reduce_s(bytes, n, link);
    return algorithm == CollectiveAlgorithm::tree ? tree : std::min(ring, tree);
}

double p2p_s(double bytes, const LinkTier& link) {
    if (bytes <= 0) return 0;
    return link.latency_s + bytes / link.bandwidth_bytes_per_s;
}

double pipeline_bubble_fraction(std::int64_t stages, std::int64_t micro_batches) {
    if (stages <= 1 || micro_batches <= 0) return 0;
    return static_cast<double>(stages - 1) / static_cast<double>(micro_batches);
}

}  // namespace preflight
