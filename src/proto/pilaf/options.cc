// The pilaf engine's knobs (proto/pilaf/options.h): TOML table [pilaf], flags --pilaf-*.
#include "proto/pilaf/options.h"

#include "common/knobs.h"
#include "proto/registry.h"

namespace fabkv::pilaf {

void declare(Knobs& k, Options* o) {
  const char* name = proto::info(proto::Id::pilaf).name;
  auto s = k.section(name, name);
  s.bytes("entries", "--pilaf-entries", &o->entries,
          "pilaf engine: starting table entries per worker (doubles when full)")
      .range(16, uint64_t{1} << 32)
      .formerly("pilaf_entries");
  s.bytes("extents", "--pilaf-extents", &o->extents,
          "pilaf engine: starting extent bytes per worker (doubles when full)")
      .range(4096)
      .formerly("pilaf_extents");
  s.number("grace_ms", "--pilaf-grace-ms", &o->grace_ms,
           "pilaf engine: ms a replaced table generation stays registered for clients still "
           "READing it")
      .range(1, 3600 * 1000);
}

}  // namespace fabkv::pilaf
