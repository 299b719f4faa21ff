// The farm engine's knobs (proto/farm/options.h): TOML table [farm], flags --farm-*.
#include "proto/farm/options.h"

#include "common/knobs.h"
#include "proto/registry.h"

namespace fabkv::farm {

void declare(Knobs& k, Options* o) {
  const char* name = proto::info(proto::Id::farm).name;
  auto s = k.section(name, name);
  s.bytes("inline", "--farm-inline", &o->inline_bytes,
          "farm: key+value bytes held inline in a bucket (default 48; a GET READs 6 x (32 + "
          "this) bytes, larger items take a second READ)")
      .range(16, 4096);
  s.bytes("homes", "--farm-homes", &o->homes,
          "farm engine: starting home buckets per worker (doubles when no displacement fits)")
      .range(16, uint64_t{1} << 32);
  s.bytes("extents", "--farm-extents", &o->extents,
          "farm engine: starting extent bytes per worker (doubles when full)")
      .range(4096);
  s.number("grace_ms", "--farm-grace-ms", &o->grace_ms,
           "farm engine: ms a replaced table generation stays registered for clients still "
           "READing it")
      .range(1, 3600 * 1000);
}

}  // namespace fabkv::farm
