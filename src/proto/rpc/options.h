// The knobs of the shared RPC pieces (proto/rpc/), used by every protocol whose requests go
// through a worker's request slots or receive buffers: herd, server-reply and pilaf's messages.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace fabkv {
class Knobs;  // common/knobs.h
}

namespace fabkv::rpc {

// How requests reach a worker: WRITten into the client's slots (HERD sec. 4.2) or SENT as
// messages (HERD sec. 5.5).
enum class Transport : uint8_t { kWrite, kSend };
inline const char* to_string(Transport t) { return t == Transport::kWrite ? "write" : "send"; }
inline std::optional<Transport> transport_from_string(std::string_view s) {
  if (s == "write") return Transport::kWrite;
  if (s == "send") return Transport::kSend;
  return std::nullopt;
}

struct Options {
  uint32_t window = 4;        // W: outstanding requests per client per worker (HERD sec. 4.2)
  uint32_t slot_size = 1024;  // bytes per request slot; larger requests go indirect
  uint32_t queues =
      1;  // multi-queue: SEND endpoints per worker, used in turn (Guidelines sec. 4.3.1)
  bool batching =
      true;  // a round's answers leave together, FI_MORE on all but the last (Guidelines sec. 4.1)
};

// Declares these knobs (TOML table [rpc]; flags --window, --slot-size, --queues, --batching)
// with their ranges; proto/rpc/options.cc.
void declare(Knobs& k, Options* o);

}  // namespace fabkv::rpc
