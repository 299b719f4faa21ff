// What a READ table's server tells its clients about the tables they READ: at admission, in the
// Welcome's layout, each worker's table and the grace time (PublishedTables); later, in answer
// to the protocol's control request, a worker's live generation and where it is (LiveTable).
//
// LiveTable answers the protocol's control request (pilaf: {"op": "layout"}, farm:
// {"op": "farm-layout"}; the server gathers the workers' answers as {"workers": [...]}): a
// client whose READs met a retired table learns where its successor is (Pilaf sec. 3.3, with a
// control request instead of a reset connection). `Shape` is the protocol's own keys of a
// table (its size).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fabric/memory_region.h"
#include "proto/json.h"

namespace fabkv::read_table {

// The Welcome's part: each worker's table as its admit() found it (`Generation`, whose kKey
// names the part: "pilaf", "farm") and how long a replaced generation stays registered
// ("<kKey>_grace_ms"; a client that has not READ a table for half of it fetches the layout).
template <class Generation>
struct PublishedTables {
  std::vector<Generation> tables;  // one per worker, in worker order
  uint32_t grace_ms = 5000;
};

template <class Generation>
void to_json(nlohmann::json& j, const PublishedTables<Generation>& t) {
  j = {{Generation::kKey, t.tables}, {std::string(Generation::kKey) + "_grace_ms", t.grace_ms}};
}
// The tables are absent from a server that runs no such engine (a client refuses that: not one
// table per worker), the grace time from servers before it.
template <class Generation>
void from_json(const nlohmann::json& j, PublishedTables<Generation>& t) {
  t.tables = j.value(Generation::kKey, std::vector<Generation>{});
  t.grace_ms = j.value(std::string(Generation::kKey) + "_grace_ms", 5000u);
}

template <class Shape>
struct LiveTable {
  uint32_t generation = 0;
  Shape shape;
  fabric::RemoteRegion table, extents;
};

template <class Shape>
void to_json(nlohmann::json& j, const LiveTable<Shape>& t) {
  j = t.shape;
  j["generation"] = t.generation;
  j["table"] = proto::region_to_json(t.table);
  j["extents"] = proto::region_to_json(t.extents);
}
template <class Shape>
void from_json(const nlohmann::json& j, LiveTable<Shape>& t) {
  j.get_to(t.shape);
  j.at("generation").get_to(t.generation);
  t.table = proto::region_from_json(j.at("table"));
  t.extents = proto::region_from_json(j.at("extents"));
}

}  // namespace fabkv::read_table
