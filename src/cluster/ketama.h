// Key placement on a list of servers by the ketama consistent-hash ring, computed exactly as
// memcached's own clients compute it (libmemcached's MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED with
// MD5, which pylibmc uses, and twemproxy's `distribution: ketama` with `hash: md5`), so that
// a fabkv cluster client, pylibmc and nutcracker given the same servers place every key on
// the same server. docs/cluster.md has the algorithm, step by step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fabkv::cluster {

// A server's name on the ring, by the rule libmemcached and twemproxy share: "host" when the
// port is memcached's 11211, else "host:port".
std::string ketama_name(std::string_view host, uint16_t port);
// The same from "host:port" ("[v6]:port" too); "" when it is not HOST:PORT.
std::string ketama_name(std::string_view host_port);

// The key's hash: the first four bytes of MD5(key), little-endian.
uint32_t ketama_hash(std::string_view key);

struct Node {
  std::string name;     // hashed into the node's points ("<name>-<i>")
  uint32_t weight = 1;  // > 0
  bool live = true;     // false: left out of the ring (an ejected server)
};

class Ring {
 public:
  Ring() = default;
  // Builds the continuum of the live nodes: each gets floorf(w / sum_w * 40 * n_live + 1e-10)
  // * 4 points (160 with equal weights), four per MD5("<name>-<i>"), sorted by value.
  explicit Ring(const std::vector<Node>& nodes);

  bool empty() const { return points_.empty(); }
  size_t points() const { return points_.size(); }
  // Index (into the nodes given) of the node owning `hash`: the first point >= hash, wrapping
  // to the first point. Precondition: !empty().
  size_t node_for_hash(uint32_t hash) const;
  size_t node_for_key(std::string_view key) const { return node_for_hash(ketama_hash(key)); }
  // Up to n distinct nodes met walking the ring from the key's point (the first is
  // node_for_key): a key's replicas.
  std::vector<size_t> nodes_for_key(std::string_view key, size_t n) const;
  // Points each node got (0 for one left out).
  std::vector<size_t> points_per_node() const;

 private:
  struct Point {
    uint32_t value;
    uint32_t node;
  };
  std::vector<Point> points_;
  size_t nodes_ = 0;
};

}  // namespace fabkv::cluster
