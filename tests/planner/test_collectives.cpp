// Communication cost model: hand-derived collective times, group placement, bubble.
#include <gtest/gtest.h>

#include "preflight/planner/collectives.hpp"

using namespace preflight;

TEST(Collectives, RingAllReduceIsTwoPassesOfNMinusOneOverN) {
    // n = 4, 1 GB at 100 GB/s, 10 us per hop:
    // 2 * 3/4 * 1e9 / 1e11 = 0.015 s of bandwidth + 2 * 3 * 10 us = 60 us of latency.
    const LinkTier link{100e9, 10e-6};
    EXPECT_NEAR(ring_collective_s(CollectiveKind::all_reduce, 1e9, 4, link), 0.015 + 60e-6, 1e-15);
    // All-gather and reduce-scatter are one pass each: 3/4 * 0.01 s + 3 * 10 us.
    EXPECT_NEAR(ring_collective_s(CollectiveKind::all_gather, 1e9, 4, link), 0.0075 + 30e-6, 1e-15);
    EXPECT_NEAR(ring_collective_s(CollectiveKind::reduce_scatter, 1e9, 4, link), 0.0075 + 30e-6, 1e-15);
    // With sequence parallelism an all-reduce becomes a reduce-scatter + all-gather of the same volume.
    EXPECT_NEAR(ring_collective_s(CollectiveKind::all_gather, 1e9, 4, link) +
                    ring_collective_s(CollectiveKind::reduce_scatter, 1e9, 4, link),
                ring_collective_s(CollectiveKind::all_reduce, 1e9, 4, link), 1e-15);
    // One rank or nothing to move: free.
    EXPECT_EQ(ring_collective_s(CollectiveKind::all_reduce, 1e9, 1, link), 0.0);
    EXPECT_EQ(ring_collective_s(CollectiveKind::all_reduce, 0.0, 8, link), 0.0);
}

TEST(Collectives, TreeWinsForSmallMessagesOnManyRanks) {
    // n = 16, 1 MB at 10 GB/s, 10 us per hop.
    const LinkTier link{10e9, 10e-6};
    // Tree: 2 * (1e6 / 1e10 + log2(16) * 10 us) = 2 * (100 us + 40 us) = 280 us.
    EXPECT_NEAR(tree_all_reduce_s(1e6, 16, link), 280e-6, 1e-15);
    // Ring: 2 * 15/16 * 100 us + 2 * 15 * 10 us = 187.5 us + 300 us = 487.5 us.
    EXPECT_NEAR(ring_collective_s(CollectiveKind::all_reduce, 1e6, 16, link), 487.5e-6, 1e-15);
    EXPECT_NEAR(collective_s(CollectiveKind::all_reduce, 1e6, 16, link), 280e-6, 1e-15);
    EXPECT_NEAR(collective_s(CollectiveKind::all_reduce, 1e6, 16, link, CollectiveAlgorithm::ring), 487.5e-6, 1e-15);
    // A large buffer on few ranks: the ring's (n-1)/n saves bandwidth. n = 2, 1 GB:
    // ring 2 * 1/2 * 0.1 s + 2 * 10 us = 0.10002 s; tree 2 * (0.1 s + 10 us) = 0.20002 s.
    EXPECT_NEAR(collective_s(CollectiveKind::all_reduce, 1e9, 2, link), 0.10002, 1e-12);
    // All-gather has no tree: always the ring.
    EXPECT_NEAR(collective_s(CollectiveKind::all_gather, 1e6, 16, link, CollectiveAlgorithm::tree),
                15.0 / 16 * 100e-6 + 15 * 10e-6, 1e-15);
}

TEST(Collectives, PointToPointIsLatencyPlusBytesOverBandwidth) {
    EXPECT_NEAR(p2p_s(1e6, {1e10, 5e-6}), 105e-6, 1e-15);
    EXPECT_EQ(p2p_s(0, {1e10, 5e-6}), 0.0);
}

TEST(Collectives, GroupPlacementOnEightGpuNodes) {
    // tp 8: one node, 8 members in it.
    auto g = place_group(8, 1, 8);
    EXPECT_EQ(g.nodes, 1);
    EXPECT_EQ(g.ranks_per_node, 8);
    // tp 16 and 32: 2 and 4 nodes, 8 members per node.
    EXPECT_EQ(place_group(16, 1, 8).nodes, 2);
    EXPECT_EQ(place_group(32, 1, 8).nodes, 4);
    // dp 4 strided by tp 2: 4 members in one node.
    g = place_group(4, 2, 8);
    EXPECT_EQ(g.nodes, 1);
    EXPECT_EQ(g.ranks_per_node, 4);
    // dp 8 strided by tp 2: 4 per node over 2 nodes.
    g = place_group(8, 2, 8);
    EXPECT_EQ(g.nodes, 2);
    EXPECT_EQ(g.ranks_per_node, 4);
    // dp 16 strided by tp 8: every member in its own node.
    g = place_group(16, 8, 8);
    EXPECT_EQ(g.nodes, 16);
    EXPECT_EQ(g.ranks_per_node, 1);
}

TEST(Collectives, NetworkTierScalesWithMembersPerNode) {
    Network net;
    net.intra_node = {400e9, 3e-6};
    net.inter_node = {50e9, 20e-6};
    net.gpus_per_node = 8;
    // Inside a node: NVLink.
    LinkTier t = group_link(net, place_group(8, 1, 8));
    EXPECT_DOUBLE_EQ(t.bandwidth_bytes_per_s, 400e9);
    EXPECT_DOUBLE_EQ(t.latency_s, 3e-6);
    // One member per node: one NIC, 50 GB/s, network latency.
    t = group_link(net, place_group(16, 8, 8));
    EXPECT_DOUBLE_EQ(t.bandwidth_bytes_per_s, 50e9);
    EXPECT_DOUBLE_EQ(t.latency_s, 20e-6);
    // 4 members per node: 4 NICs, 200 GB/s.
    EXPECT_DOUBLE_EQ(group_link(net, place_group(8, 2, 8)).bandwidth_bytes_per_s, 200e9);
    // 8 members per node (tp 16 across 2 nodes): 8 NICs = 400 GB/s, capped by NVLink (400).
    EXPECT_DOUBLE_EQ(group_link(net, place_group(16, 1, 8)).bandwidth_bytes_per_s, 400e9);
    net.inter_node.bandwidth_bytes_per_s = 100e9;  // faster NICs never beat NVLink
    EXPECT_DOUBLE_EQ(group_link(net, place_group(16, 1, 8)).bandwidth_bytes_per_s, 400e9);
}

TEST(Collectives, PipelineBubbleFraction) {
    // Narayanan et al. 2021, sec. 2.2.1: (p - 1) / m.
    EXPECT_DOUBLE_EQ(pipeline_bubble_fraction(4, 12), 0.25);
    EXPECT_DOUBLE_EQ(pipeline_bubble_fraction(8, 8), 7.0 / 8.0);
    EXPECT_DOUBLE_EQ(pipeline_bubble_fraction(1, 8), 0.0);
    EXPECT_DOUBLE_EQ(pipeline_bubble_fraction(4, 0), 0.0);
}
