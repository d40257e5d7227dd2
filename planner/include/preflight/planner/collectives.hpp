// Communication cost model: collectives as latency + bandwidth per link tier
// (NVLink inside a node, the network between nodes), algorithm-aware (ring, tree),
// point-to-point sends, and the 1F1B pipeline bubble. Pure functions.
#pragma once

#include <cstdint>
#include <string_view>

namespace preflight {

// One link tier: achieved bus bandwidth per GPU per direction and per-hop latency.
struct LinkTier {
    double bandwidth_bytes_per_s = 0;
    double latency_s = 0;
};

// The two tiers of a cluster of identical nodes.
struct Network {
    LinkTier intra_node;       // NVLink/NVSwitch, per GPU
    LinkTier inter_node;       // network between nodes, per GPU (one NIC per GPU)
    std::int64_t gpus_per_node = 1;
};

// Where a communication group sits: `ranks` members, consecutive members `stride`
// global ranks apart (ranks ordered tp fastest, then dp, then pp, as Megatron-LM and
// nanotron build their process grids).
struct GroupPlacement {
    std::int64_t ranks = 1;
    std::int64_t nodes = 1;           // nodes the group spans
    std::int64_t ranks_per_node = 1;  // members sharing one node (>= 1)
};
GroupPlacement place_group(std::int64_t ranks, std::int64_t stride, std::int64_t gpus_per_node);

// The tier a group's collectives run at. Inside one node: NVLink. Across nodes each
// member drives its own NIC and NCCL runs one ring per NIC, so a group with k members
// per node moves k NICs' worth of bytes per node, never more than NVLink:
// bandwidth = min(NVLink, k * NIC), latency of the network (NCCL's ring over
// multi-NIC nodes; nccl-tests' bus-bandwidth definition, PERFORMANCE.md).
LinkTier group_link(const Network& net, const GroupPlacement& g);

enum class CollectiveKind { all_reduce, all_gather, reduce_scatter };
enum class CollectiveAlgorithm { ring, tree, fastest };
std::string_view to_string(CollectiveKind k);

// Ring collectives over n ranks of a buffer of `bytes` (the full tensor: the all-reduced
// buffer, the gathered output, the reduce-scatter input). Patarasuk & Yuan 2009 / NCCL:
//   all-reduce:                2(n-1)/n * bytes / bw + 2(n-1) * latency
//   all-gather, reduce-scatter: (n-1)/n * bytes / bw +  (n-1) * latency
double ring_collective_s(CollectiveKind kind, double bytes, std::int64_t n, const LinkTier& link);

// Pipelined (double) binary tree all-reduce (NCCL 2.4+, Sanders et al. 2009): the buffer
// goes up the tree (reduce) and down again (broadcast), each rank sending it once each
// way: 2 * bytes / bw + 2 * ceil(log2 n) * latency. Only all-reduce has a tree.
double tree_all_reduce_s(double bytes, std::int64_t n, const LinkTier& link);

// The collective's time with the requested algorithm; `fastest` takes the cheaper of
// ring and tree for all-reduce (NCCL's tuner picks per size) and the ring otherwise.
double collective_s(CollectiveKind kind, double bytes, std::int64_t n, const LinkTier& link,
                    CollectiveAlgorithm algorithm = CollectiveAlgorithm::fastest);

// One point-to-point send of `bytes`: latency + bytes / bw.
double p2p_s(double bytes, const LinkTier& link);

// 1F1B (and GPipe) idle fraction of the steady-state time: (p - 1) / m for p stages and
// m micro-batches (Narayanan et al. 2021, sec. 2.2.1). 0 when p <= 1 or m <= 0.
double pipeline_bubble_fraction(std::int64_t stages, std::int64_t micro_batches);

}  // namespace preflight
