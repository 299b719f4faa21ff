// The pilaf engine's knobs (Pilaf sec. 3.3: a table that grows by generations).
#pragma once

#include <cstddef>
#include <cstdint>

namespace fabkv {
class Knobs;  // common/knobs.h
}

namespace fabkv::pilaf {

struct Options {
  // Starting size of each worker's table (entries) and extent area; both double when full
  // (a new generation) up to the worker's share of --memory.
  size_t entries = 65536;
  size_t extents = size_t{8} << 20;
  // How long a replaced generation stays registered for clients still READing it.
  uint32_t grace_ms = 5000;
};

// Declares these knobs (TOML table [pilaf]; flags --pilaf-entries, --pilaf-extents,
// --pilaf-grace-ms) with their ranges; proto/pilaf/options.cc.
void declare(Knobs& k, Options* o);

}  // namespace fabkv::pilaf
