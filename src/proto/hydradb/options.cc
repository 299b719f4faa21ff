// The hydradb protocol's knobs (proto/hydradb/options.h): TOML table [hydradb], flags --hydradb-*.
#include "proto/hydradb/options.h"

#include "common/knobs.h"
#include "proto/registry.h"

namespace fabkv::hydradb {

void declare(Knobs& k, Options* o) {
  const char* name = proto::info(proto::Id::hydradb).name;
  auto s = k.section(name, name);
  s.number("lease_ms", "--hydradb-lease-ms", &o->lease_ms,
           "hydradb: ms a client may READ an item at the address a GET gave it (on the client's "
           "monotonic clock); longer = more GETs by one READ, replaced items held longer")
      .range(1, 3600 * 1000);
  s.number("margin_ms", "--hydradb-margin-ms", &o->margin_ms,
           "hydradb: ms the worker holds a replaced item's memory beyond the lease (covers a "
           "slower client clock and READs in flight)")
      .range(0, 3600 * 1000);
}

}  // namespace fabkv::hydradb
