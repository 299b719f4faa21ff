// What a READ table's server tells a client about a worker's live generation, in answer to the
// protocol's control request (pilaf: {"op": "layout"}, farm: {"op": "farm-layout"}; the server
// gathers the workers' answers as {"workers": [...]}): a client whose READs met a retired
// table learns where its successor is (Pilaf sec. 3.3, with a control request instead of a
// reset connection). `Shape` is the protocol's own keys of a table (its size).
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "fabric/memory_region.h"
#include "proto/json.h"

namespace fabkv::read_table {

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
