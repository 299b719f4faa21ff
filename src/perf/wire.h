// What fabkv-perf's processes tell each other over the control channel. Set-up path only, so
// JSON inside the opaque Hello/Welcome payloads and request bodies is plenty.
//
// History: v1 (first version).
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/bytes.h"
#include "fabric/memory_region.h"
#include "proto/json.h"

namespace fabkv::perf {

inline constexpr const char* kService = "perf";
inline constexpr uint32_t kPerfWireVersion = 1;

// Echo request/response slots: [seq u64][client index u32][pad][...][seq u64]. A slot is
// taken only when the header and trailer sequence numbers agree and are new, never by the
// order in which a WRITE's bytes land (docs/architecture.md, "The fabric layer").
inline constexpr size_t kEchoHeader = 8;
inline constexpr size_t kEchoTrailer = 8;

inline uint64_t load_u64(const void* p) { return bytes::load<uint64_t>(p); }
inline void store_u64(void* p, uint64_t v) { bytes::store(p, v); }
inline uint32_t load_u32(const void* p) { return bytes::load<uint32_t>(p); }
inline void store_u32(void* p, uint32_t v) { bytes::store(p, v); }

using proto::json_bytes;
using proto::region_from_json;
using proto::region_to_json;
inline nlohmann::json bytes_json(std::span<const uint8_t> b) {
  return nlohmann::json::parse(b.begin(), b.end());
}

// Server regions named in the Welcome.
inline constexpr const char* kTargetRegion = "perf.target";        // read-write, per-client areas
inline constexpr const char* kCounterRegion = "perf.counters";     // read-write, atomics
inline constexpr const char* kReadOnlyRegion = "perf.readonly";    // remote read only
inline constexpr const char* kWriteOnlyRegion = "perf.writeonly";  // remote write only
inline constexpr size_t kProbeRegionBytes = 64 * 1024;
// The read-only region's contents, so that a peer can check what it READs.
inline char readonly_pattern(size_t i) { return static_cast<char>((i * 7 + 0x5a) & 0xff); }
inline constexpr size_t kRecvBufferBytes = 8 * 1024;  // largest SEND the perf server takes
inline constexpr size_t kServerRecvBuffers = 512;

}  // namespace fabkv::perf
