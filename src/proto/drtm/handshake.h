// DrTM-KV's part of the handshake layout (proto/handshake.h), next to the RPC keys
// (rpc/handshake.h): each worker's table size, and the version of the memory layout that
// clients READ, CAS and WRITE (wire.h). The regions are in the Welcome ("drtm.table.<w>",
// "drtm.items.<w>").
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

namespace fabkv::drtm {

struct TableSize {
  uint64_t buckets = 0;   // main buckets
  uint64_t overflow = 0;  // overflow buckets after them
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(TableSize, buckets, overflow)

struct DrtmLayout {
  std::vector<TableSize> drtm;  // one per worker, in worker order
  uint32_t drtm_layout = 0;     // wire.h's kLayoutVersion
};
inline void to_json(nlohmann::json& j, const DrtmLayout& l) {
  j = {{"drtm", l.drtm}, {"drtm_layout", l.drtm_layout}};
}
// Both keys are absent from a server that runs no drtm engine: the client refuses it then
// (no table per worker, version 0).
inline void from_json(const nlohmann::json& j, DrtmLayout& l) {
  l.drtm = j.value("drtm", std::vector<TableSize>{});
  l.drtm_layout = j.value("drtm_layout", 0u);
}

}  // namespace fabkv::drtm
