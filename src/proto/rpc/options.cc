// The shared RPC knobs (proto/rpc/options.h): TOML table [rpc], flags as before.
#include "proto/rpc/options.h"

#include "common/knobs.h"

namespace fabkv::rpc {

void declare(Knobs& k, Options* o) {
  auto s = k.section("rpc", "RPC (herd, server-reply, pilaf messages)");
  s.number("window", "--window", &o->window,
           "W: outstanding requests per client per worker (HERD sec. 4.2)")
      .range(1, 64);
  s.number("slot_size", "--slot-size", &o->slot_size,
           "request slot bytes; larger requests go indirect")
      .range(64, 1u << 20)
      .multiple_of(8);
  s.number("queues", "--queues", &o->queues,
           "multi-queue: response endpoints per worker, used in turn (Guidelines sec. 4.3.1)")
      .range(1, 16);
  s.on_off("batching", "--batching", &o->batching,
           "response batching: a round's answers leave with FI_MORE on all but the last "
           "(Guidelines sec. 4.1)");
}

}  // namespace fabkv::rpc
