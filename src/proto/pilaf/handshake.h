// Pilaf's part of the handshake layout (proto/handshake.h), next to the RPC keys
// (rpc/handshake.h): each worker's table as its admit() found it, and how long a replaced
// generation stays registered. The regions are in the Welcome ("pilaf.table.<w>",
// "pilaf.extents.<w>"); the lookup rules in layout.h.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "proto/read_table/handshake.h"

namespace fabkv::pilaf {

struct TableGeneration {
  static constexpr const char* kKey = "pilaf";  // and "pilaf_grace_ms": PilafOptions::grace_ms
  uint32_t generation = 0;
  uint64_t entries = 0;  // cuckoo table entries (Pilaf sec. 3.2)
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(TableGeneration, generation, entries)

using PilafLayout = read_table::PublishedTables<TableGeneration>;

// A table's size in the answer to {"op": "layout"} (read_table/handshake.h).
struct TableShape {
  uint64_t entries = 0;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(TableShape, entries)
using LiveTable = read_table::LiveTable<TableShape>;

}  // namespace fabkv::pilaf
