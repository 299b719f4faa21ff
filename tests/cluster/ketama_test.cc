// The ketama ring (cluster/ketama.h) against libmemcached 1.1's own placement
// (memcached_generate_hash with MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED, the behaviour pylibmc's
// ketama_weighted sets), its remapping properties, and the cluster list's parsing.
#include <libmemcached/memcached.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "client/cluster.h"
#include "cluster/ketama.h"

namespace fabkv::cluster {
namespace {

struct Srv {
  std::string host;
  uint16_t port;
  uint32_t weight;
};

std::vector<std::string> random_keys(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> len(1, 250), ch(33, 126);
  std::vector<std::string> keys;
  for (size_t i = 0; i < n; ++i) {
    std::string k(size_t(len(rng)) % 40 + 1, ' ');
    for (char& c : k) c = char(ch(rng));
    keys.push_back(i % 3 == 0 ? fmt::format("key:{}", i) : k);
  }
  return keys;
}

Ring ring_of(const std::vector<Srv>& servers) {
  std::vector<Node> nodes;
  for (const Srv& s : servers) nodes.push_back({ketama_name(s.host, s.port), s.weight, true});
  return Ring(nodes);
}

// Where libmemcached puts each key, given the same servers in the same order.
std::vector<uint32_t> libmemcached_placement(const std::vector<Srv>& servers,
                                             const std::vector<std::string>& keys) {
  memcached_st* mc = memcached_create(nullptr);
  EXPECT_EQ(memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED, 1), MEMCACHED_SUCCESS);
  for (const Srv& s : servers)
    EXPECT_EQ(memcached_server_add_with_weight(mc, s.host.c_str(), s.port, s.weight),
              MEMCACHED_SUCCESS);
  std::vector<uint32_t> out;
  for (const std::string& k : keys) out.push_back(memcached_generate_hash(mc, k.data(), k.size()));
  memcached_free(mc);
  return out;
}

void expect_same_as_libmemcached(const std::vector<Srv>& servers) {
  auto keys = random_keys(20000, 7);
  auto theirs = libmemcached_placement(servers, keys);
  Ring ring = ring_of(servers);
  size_t differ = 0;
  std::vector<size_t> per(servers.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    size_t ours = ring.node_for_key(keys[i]);
    differ += ours != theirs[i];
    ++per[ours];
  }
  EXPECT_EQ(differ, 0u) << "of " << keys.size() << " keys";
  for (size_t s = 0; s < servers.size(); ++s)
    EXPECT_GT(per[s], 0u) << "server " << s << " got none";
}

TEST(KetamaName, PortOf11211IsLeftOut) {
  EXPECT_EQ(ketama_name("10.0.0.1", 11211), "10.0.0.1");
  EXPECT_EQ(ketama_name("10.0.0.1", 7000), "10.0.0.1:7000");
  EXPECT_EQ(ketama_name("10.0.0.1:11211"), "10.0.0.1");
  EXPECT_EQ(ketama_name("cache-a:7000"), "cache-a:7000");
  EXPECT_EQ(ketama_name("nonsense"), "");
  EXPECT_EQ(ketama_name("h:99999"), "");
}

TEST(KetamaHash, IsTheLittleEndianHeadOfMd5) {
  // MD5("") = d41d8cd98f00b204e9800998ecf8427e: first four bytes d4 1d 8c d9.
  EXPECT_EQ(ketama_hash(""), 0xd98c1dd4u);
}

TEST(Ketama, EqualWeightsPlaceEveryKeyAsLibmemcachedDoes) {
  expect_same_as_libmemcached(
      {{"10.0.0.1", 7000, 1}, {"10.0.0.2", 7000, 1}, {"10.0.0.3", 7000, 1}});
}

TEST(Ketama, WeightsOneTwoOnePlaceEveryKeyAsLibmemcachedDoes) {
  expect_same_as_libmemcached(
      {{"10.0.0.1", 7000, 1}, {"10.0.0.2", 7000, 2}, {"10.0.0.3", 7000, 1}});
}

TEST(Ketama, PortsOf11211AndOthersPlaceEveryKeyAsLibmemcachedDoes) {
  expect_same_as_libmemcached({{"198.18.0.1", 11211, 1},
                               {"198.18.0.2", 11211, 3},
                               {"198.18.0.3", 11311, 1},
                               {"cache-d", 11211, 2}});
}

TEST(Ketama, PointsPerServerFollowTheWeights) {
  EXPECT_EQ(ring_of({{"a", 1, 1}, {"b", 1, 1}, {"c", 1, 1}}).points_per_node(),
            (std::vector<size_t>{160, 160, 160}));
  // floorf(w / 4 * 40 * 3) * 4: 30 * 4 and 60 * 4.
  EXPECT_EQ(ring_of({{"a", 1, 1}, {"b", 1, 2}, {"c", 1, 1}}).points_per_node(),
            (std::vector<size_t>{120, 240, 120}));
}

TEST(Ketama, AddingAFourthServerMovesAboutAQuarterOfTheKeysAllToIt) {
  std::vector<Srv> three = {{"h1", 7000, 1}, {"h2", 7000, 1}, {"h3", 7000, 1}};
  std::vector<Srv> four = three;
  four.push_back({"h4", 7000, 1});
  Ring before = ring_of(three), after = ring_of(four);
  auto keys = random_keys(100000, 11);
  size_t moved = 0;
  for (const auto& k : keys) {
    size_t a = before.node_for_key(k), b = after.node_for_key(k);
    if (a != b) {
      ++moved;
      ASSERT_EQ(b, 3u) << "a key moved between two old servers: " << k;
    }
  }
  double f = double(moved) / double(keys.size());
  RecordProperty("moved_fraction", fmt::format("{:.4f}", f));
  EXPECT_GT(f, 0.18);
  EXPECT_LT(f, 0.32);
}

TEST(Ketama, EjectingAServerMovesOnlyItsKeys) {
  std::vector<Node> nodes = {{"h1:7000", 1, true}, {"h2:7000", 1, true}, {"h3:7000", 1, true}};
  Ring before(nodes);
  nodes[1].live = false;
  Ring after(nodes);
  EXPECT_EQ(after.points_per_node(), (std::vector<size_t>{160, 0, 160}));
  for (const auto& k : random_keys(50000, 13)) {
    size_t a = before.node_for_key(k), b = after.node_for_key(k);
    if (a != 1) ASSERT_EQ(a, b) << k;
    else ASSERT_NE(b, 1u) << k;
  }
}

TEST(Ketama, ReplicasAreDistinctAndStartAtTheKeysServer) {
  Ring r = ring_of({{"h1", 7000, 1}, {"h2", 7000, 1}, {"h3", 7000, 1}, {"h4", 7000, 1}});
  for (const auto& k : random_keys(5000, 17)) {
    auto n = r.nodes_for_key(k, 3);
    ASSERT_EQ(n.size(), 3u);
    EXPECT_EQ(n[0], r.node_for_key(k));
    EXPECT_EQ(std::set<size_t>(n.begin(), n.end()).size(), 3u);
  }
  EXPECT_EQ(r.nodes_for_key("x", 9).size(), 4u);  // never more than there are
}

TEST(ClusterList, ParsesTwemproxysServerForm) {
  auto s =
      parse_cluster_servers("10.0.0.1:7000, 10.0.0.2:7000:2,10.0.0.3:7000:1 cache-c,[::1]:7000:3");
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].address, "10.0.0.1:7000");
  EXPECT_EQ(s[0].weight, 1u);
  EXPECT_EQ(s[0].name, "10.0.0.1:7000");
  EXPECT_EQ(s[1].weight, 2u);
  EXPECT_EQ(s[2].name, "cache-c");
  EXPECT_EQ(s[3].address, "[::1]:7000");
  EXPECT_EQ(s[3].weight, 3u);
  EXPECT_THROW(parse_cluster_server("10.0.0.1"), std::invalid_argument);
  EXPECT_THROW(parse_cluster_server("10.0.0.1:7000:0"), std::invalid_argument);
  EXPECT_THROW(parse_cluster_server("10.0.0.1:7000:x"), std::invalid_argument);
  EXPECT_THROW(parse_cluster_server("10.0.0.1:7000 a b"), std::invalid_argument);
}

TEST(ClusterList, RefusesTwoServersOfOneNameAndTooManyReplicas) {
  ClusterOptions o;
  o.servers = parse_cluster_servers("a:7000,b:7000 x,c:7000 x");
  EXPECT_THROW(Cluster{o}, std::invalid_argument);
  o.servers = parse_cluster_servers("a:7000,b:7000");
  o.replicas = 3;
  EXPECT_THROW(Cluster{o}, std::invalid_argument);
}

}  // namespace
}  // namespace fabkv::cluster
