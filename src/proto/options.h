// The option blocks of the protocols that have knobs, one member per protocol (or shared piece),
// each declared in its own folder. Part of the registration list (proto/registry.h).
// A protocol with knobs adds: an options.h and options.cc in its folder (an Options struct and
// `void declare(Knobs&, Options*)`: its own TOML table and --help group), then its member and
// its declare call below.
#pragma once

#include "proto/farm/options.h"
#include "proto/herd/options.h"
#include "proto/hydradb/options.h"
#include "proto/pilaf/options.h"
#include "proto/rfrpc/options.h"
#include "proto/rpc/options.h"

namespace fabkv::proto {

struct ProtocolOptions {
  rpc::Options rpc;
  herd::Options herd;
  pilaf::Options pilaf;
  farm::Options farm;
  hydradb::Options hydradb;
  rfrpc::Options rfrpc;
};

// Declares every block's knobs (common/knobs.h), each in its own TOML table and --help group.
inline void declare_knobs(Knobs& k, ProtocolOptions* o) {
  rpc::declare(k, &o->rpc);
  herd::declare(k, &o->herd);
  pilaf::declare(k, &o->pilaf);
  farm::declare(k, &o->farm);
  hydradb::declare(k, &o->hydradb);
  rfrpc::declare(k, &o->rfrpc);
}

}  // namespace fabkv::proto
