// Test support: endpoint names cross process boundaries as hex text on stdout/stdin.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fabkv::testing {

inline std::string to_hex(std::span<const uint8_t> b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t c : b) {
    s += d[c >> 4];
    s += d[c & 15];
  }
  return s;
}

inline std::vector<uint8_t> from_hex(const std::string& s) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < s.size(); i += 2)
    out.push_back(static_cast<uint8_t>(std::stoul(s.substr(i, 2), nullptr, 16)));
  return out;
}

}  // namespace fabkv::testing
