#include "cluster/ketama.h"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace fabkv::cluster {
namespace {

// MD5 by OpenSSL's libcrypto (EVP: the one-shot digest API of OpenSSL 3), the algorithm fetched
// once: EVP_md5() fetches it again on every digest, half of a key's hashing cost in a profile of
// fabkv-bench over a cluster (docs/results/cluster-2026-11-27.md).
std::array<unsigned char, 16> md5(std::string_view s) {
  static EVP_MD* const kMd5 = EVP_MD_fetch(nullptr, "MD5", nullptr);  // never freed: process-wide
  std::array<unsigned char, 16> d{};
  unsigned int n = 0;
  if (!kMd5 || EVP_Digest(s.data(), s.size(), d.data(), &n, kMd5, nullptr) != 1 || n != d.size())
    throw std::runtime_error("OpenSSL's MD5 failed");
  return d;
}

uint32_t le32(const unsigned char* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

constexpr uint16_t kMemcachedPort = 11211;  // libmemcached's MEMCACHED_DEFAULT_PORT
constexpr float kPointsPerServer = 160;     // MEMCACHED_POINTS_PER_SERVER_KETAMA
constexpr unsigned kPointsPerHash = 4;      // an MD5 digest gives four 32-bit points

}  // namespace

std::string ketama_name(std::string_view host, uint16_t port) {
  if (port == kMemcachedPort) return std::string(host);
  if (host.find(':') != std::string_view::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

std::string ketama_name(std::string_view host_port) {
  size_t colon = host_port.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == host_port.size()) return "";
  std::string_view host = host_port.substr(0, colon), port = host_port.substr(colon + 1);
  unsigned p = 0;
  for (char c : port) {
    if (c < '0' || c > '9' || (p = p * 10 + unsigned(c - '0')) > 65535) return "";
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host.empty()) return "";
  return ketama_name(host, uint16_t(p));
}

uint32_t ketama_hash(std::string_view key) { return le32(md5(key).data()); }

Ring::Ring(const std::vector<Node>& nodes) : nodes_(nodes.size()) {
  uint64_t total = 0;
  uint32_t live = 0;
  for (const Node& n : nodes) {
    if (!n.live) continue;
    if (n.weight == 0) throw std::invalid_argument("a server's weight must be > 0: " + n.name);
    total += n.weight;
    ++live;
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!nodes[i].live) continue;
    // In float32, as both libmemcached (ketama_weighted) and twemproxy compute it: the
    // rounding decides the point count of unequal weights.
    float pct = float(nodes[i].weight) / float(total);
    auto per_server = unsigned(
        std::floor(pct * kPointsPerServer / float(kPointsPerHash) * float(live) + 0.0000000001F) *
        kPointsPerHash);
    for (unsigned h = 0; h < per_server / kPointsPerHash; ++h) {
      auto d = md5(fmt::format("{}-{}", nodes[i].name, h));
      for (unsigned k = 0; k < kPointsPerHash; ++k)
        points_.push_back({le32(d.data() + 4 * k), uint32_t(i)});
    }
  }
  // Equal values from two servers (about one ring in 10^4 at 480 points) are ordered by the
  // server's place in the list, as the clients' qsort of equal values may not be: such a key
  // could differ from theirs; docs/cluster.md says so.
  std::sort(points_.begin(), points_.end(), [](const Point& a, const Point& b) {
    return a.value != b.value ? a.value < b.value : a.node < b.node;
  });
}

size_t Ring::node_for_hash(uint32_t hash) const {
  auto it = std::lower_bound(points_.begin(), points_.end(), hash,
                             [](const Point& p, uint32_t h) { return p.value < h; });
  if (it == points_.end()) it = points_.begin();
  return it->node;
}

std::vector<size_t> Ring::nodes_for_key(std::string_view key, size_t n) const {
  std::vector<size_t> out;
  if (points_.empty()) return out;
  uint32_t hash = ketama_hash(key);
  auto start = std::lower_bound(points_.begin(), points_.end(), hash,
                                [](const Point& p, uint32_t h) { return p.value < h; });
  size_t first = size_t(start - points_.begin()) % points_.size();
  for (size_t k = 0; k < points_.size() && out.size() < n; ++k) {
    size_t node = points_[(first + k) % points_.size()].node;
    if (std::find(out.begin(), out.end(), node) == out.end()) out.push_back(node);
  }
  return out;
}

std::vector<size_t> Ring::points_per_node() const {
  std::vector<size_t> c(nodes_, 0);
  for (const Point& p : points_) ++c[p.node];
  return c;
}

}  // namespace fabkv::cluster
