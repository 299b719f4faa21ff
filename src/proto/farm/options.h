// The farm engine's knobs (HERD sec. 5.1.2: FaRM-KV's hopscotch table, grown by generations as
// Pilaf's is, docs/farm.md).
#pragma once

#include <cstddef>
#include <cstdint>

namespace fabkv {
class Knobs;  // common/knobs.h
}

namespace fabkv::farm {

struct Options {
  // Key + value bytes a `farm` bucket holds inline; larger items go to an extent record (a
  // second READ). A GET READs 6 x (32 + inline) bytes: room for bigger items inline costs
  // every GET. 48 = HERD's 16-byte keys with 32-byte values (HERD sec. 5.2). `farm-var`
  // ignores it: its buckets hold a 16-byte pointer.
  size_t inline_bytes = 48;
  // Starting home buckets of each worker's table and its extent area; both double when full
  // (a new generation) up to the worker's share of --memory.
  size_t homes = 65536;
  size_t extents = size_t{4} << 20;
  // How long a replaced generation stays registered for clients still READing it.
  uint32_t grace_ms = 5000;
};

// Declares these knobs (TOML table [farm]; flags --farm-inline, --farm-homes, --farm-extents,
// --farm-grace-ms); proto/farm/options.cc.
void declare(Knobs& k, Options* o);

}  // namespace fabkv::farm
