// The hydradb protocol's knobs (survey sec. 3.1: leases on the addresses a GET hands out).
#pragma once

#include <cstdint>

namespace fabkv {
class Knobs;  // common/knobs.h
}

namespace fabkv::hydradb {

struct Options {
  // How long a client may READ an item at the address a GET answer gave it before it asks
  // again (measured on the client's monotonic clock from when it sent the GET). Longer: more
  // repeat GETs served by one READ; a replaced item's memory is held longer (more memory for
  // write-heavy keys).
  uint32_t lease_ms = 1000;
  // How much longer than the lease the worker holds a replaced item's memory before reuse
  // (on its own monotonic clock): covers a client clock running slower than the server's and
  // a READ still in flight when the lease ends (docs/hydradb.md, "Leases").
  uint32_t margin_ms = 250;
};

// Declares these knobs (TOML table [hydradb]; flags --hydradb-lease-ms, --hydradb-margin-ms);
// proto/hydradb/options.cc.
void declare(Knobs& k, Options* o);

}  // namespace fabkv::hydradb
