// HydraDB's part of the handshake layout (proto/handshake.h), next to the RPC keys and the
// answer ring's (rpc/handshake.h): the versions of what clients read (wire.h's answers,
// layout.h's items) and how long a lease lasts. The item arenas are in the Welcome's regions
// ("hydradb.items.<w>").
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

namespace fabkv::hydradb {

struct HydradbLayout {
  uint32_t hydradb_wire = 0;    // wire.h's kWireVersion
  uint32_t hydradb_layout = 0;  // layout.h's kLayoutVersion
  uint32_t lease_ms = 0;        // HydradbOptions::lease_ms (options.h)
};
inline void to_json(nlohmann::json& j, const HydradbLayout& l) {
  j = {{"hydradb_wire", l.hydradb_wire},
       {"hydradb_layout", l.hydradb_layout},
       {"lease_ms", l.lease_ms}};
}
// A key that is absent reads as 0: a client refuses versions it does not speak, and learns
// a lease's length from each answer (wire.h), not from here.
inline void from_json(const nlohmann::json& j, HydradbLayout& l) {
  l.hydradb_wire = j.value("hydradb_wire", 0u);
  l.hydradb_layout = j.value("hydradb_layout", 0u);
  l.lease_ms = j.value("lease_ms", 0u);
}

}  // namespace fabkv::hydradb
