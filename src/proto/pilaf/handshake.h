// Pilaf's part of the handshake layout (proto/handshake.h), next to the RPC keys
// (rpc/handshake.h): each worker's table as its admit() found it, and how long a replaced
// generation stays registered. The regions are in the Welcome ("pilaf.table.<w>",
// "pilaf.extents.<w>"); the lookup rules in layout.h.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "proto/read_table/handshake.h"

namespace fabkv::pilaf {

struct TableGeneration {
  uint32_t generation = 0;
  uint64_t entries = 0;  // cuckoo table entries (Pilaf sec. 3.2)
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(TableGeneration, generation, entries)

struct PilafLayout {
  std::vector<TableGeneration> pilaf;  // one per worker, in worker order
  uint32_t pilaf_grace_ms = 5000;      // PilafOptions::grace_ms (pilaf/options.h)
};
inline void to_json(nlohmann::json& j, const PilafLayout& l) {
  j = {{"pilaf", l.pilaf}, {"pilaf_grace_ms", l.pilaf_grace_ms}};
}
// "pilaf" is absent from a server that runs no pilaf engine; the client refuses it then (its
// size is not the number of workers). "pilaf_grace_ms" is absent from servers before it.
inline void from_json(const nlohmann::json& j, PilafLayout& l) {
  l.pilaf = j.value("pilaf", std::vector<TableGeneration>{});
  l.pilaf_grace_ms = j.value("pilaf_grace_ms", 5000u);
}

// A table's size in the answer to {"op": "layout"} (read_table/handshake.h).
struct TableShape {
  uint64_t entries = 0;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(TableShape, entries)
using LiveTable = read_table::LiveTable<TableShape>;

}  // namespace fabkv::pilaf
