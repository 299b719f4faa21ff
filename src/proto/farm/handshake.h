// FaRM-KV's part of the handshake layout (proto/handshake.h), next to the RPC keys
// (rpc/handshake.h): each worker's table as its admit() found it, and how long a replaced
// generation stays registered. The regions are in the Welcome ("farm.table.<w>",
// "farm.extents.<w>"); the table's shape and lookup rules in layout.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "proto/read_table/handshake.h"

namespace fabkv::farm {

struct TableGeneration {
  static constexpr const char* kKey = "farm";  // and "farm_grace_ms": FarmOptions::grace_ms
  uint32_t generation = 0;
  uint64_t homes = 0;  // home buckets (layout.h)
  size_t bucket_bytes = 0;
  uint32_t neighbourhood = 0;  // H: layout.h's kNeighbourhood, so a client can refuse another
  uint32_t version = 0;        // layout.h's kLayoutVersion
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(TableGeneration, generation, homes, bucket_bytes, neighbourhood,
                                   version)

using FarmLayout = read_table::PublishedTables<TableGeneration>;

// A table's size in the answer to {"op": "farm-layout"} (read_table/handshake.h).
struct TableShape {
  uint64_t homes = 0;
  size_t bucket_bytes = 0;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(TableShape, homes, bucket_bytes)
using LiveTable = read_table::LiveTable<TableShape>;

}  // namespace fabkv::farm
