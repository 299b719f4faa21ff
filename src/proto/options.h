// The option blocks of the protocols that have knobs, one member per protocol (or shared piece),
// each declared in its own folder. Part of the registration list (proto/registry.h).
#pragma once

#include "proto/herd/options.h"
#include "proto/pilaf/options.h"
#include "proto/rpc/options.h"

namespace fabkv::proto {

struct ProtocolOptions {
  rpc::Options rpc;
  herd::Options herd;
  pilaf::Options pilaf;
};

}  // namespace fabkv::proto
