// Self-describing values for end-to-end tests: a torn or foreign copy cannot imitate one.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>

namespace fabkv::testing {

// "<key>#<n>#" padded to `len` with letters drawn from a seed of both: value_ok() recomputes it.
inline std::string value_for(const std::string& key, uint64_t n, size_t len) {
  std::string v = key + "#" + std::to_string(n) + "#";
  std::mt19937_64 rng(std::hash<std::string>{}(v));
  while (v.size() < len) v.push_back(static_cast<char>('a' + rng() % 26));
  return v;
}
inline bool value_ok(const std::string& key, const std::string& v) {
  size_t a = v.find('#'), b = v.find('#', a + 1);
  if (a == std::string::npos || b == std::string::npos || v.substr(0, a) != key) return false;
  return v == value_for(key, std::stoull(v.substr(a + 1, b - a - 1)), v.size());
}

}  // namespace fabkv::testing
