// The JSON shapes the control channel's service payloads share (set-up path only): a memory
// region a peer may reach, and JSON as payload bytes. Used by fabkv-perf, the server, the
// client library and the tests, so that a region is spelled the same way everywhere:
//   {"addr": u64, "length": u64, "key": u64, "access": fabric::Access bits}
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fabric/memory_region.h"

namespace fabkv::proto {

inline nlohmann::json region_to_json(const fabric::RemoteRegion& r) {
  return {{"addr", r.addr},
          {"length", r.length},
          {"key", r.key},
          {"access", static_cast<uint32_t>(r.access)}};
}
// Throws nlohmann::json::exception when a field is missing or of the wrong type.
inline fabric::RemoteRegion region_from_json(const nlohmann::json& j) {
  return {j.at("addr").get<uint64_t>(), j.at("length").get<uint64_t>(), j.at("key").get<uint64_t>(),
          static_cast<fabric::Access>(j.at("access").get<uint32_t>())};
}

inline std::vector<uint8_t> json_bytes(const nlohmann::json& j) {
  std::string s = j.dump();
  return {s.begin(), s.end()};
}

}  // namespace fabkv::proto
