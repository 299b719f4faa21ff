#pragma once
// The client's answer ring of the protocols whose workers WRITE their answers into client
// memory (server-reply, hydradb, rfrpc's reply mode; docs/server-reply.md): the client
// registers it, announces it in its Hello as "ring", and says Hello again when the server's
// layout (workers, window, max_value) needs a larger one. Each protocol sizes the ring by its own
// wire (`ring_bytes` in its wire.h: hydradb's answers carry an item reference, for one).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "fabric/memory_region.h"
#include "proto/client_protocol.h"
#include "proto/json.h"
#include "proto/registry.h"
#include "proto/rpc/client.h"
#include "proto/rpc/wire.h"

namespace fabkv::rpc {

class AnswerRing {
 public:
  using Opened = proto::ClientProtocol::Opened;
  // Bytes of the ring for a server's layout.
  using SizeFn = size_t (*)(uint32_t workers, uint32_t window, size_t max_value);

  // The first Hello's ring fits the server's defaults with up to 4 workers (W = kDefaultWindow,
  // max_value = 64 KiB: src/proto/rpc/options.h and src/server/options.h).
  AnswerRing(proto::ClientHost& host, RpcClient& rpc, proto::Id protocol, SizeFn size)
      : host_(host),
        rpc_(rpc),
        protocol_(protocol),
        size_(size),
        bytes_(size(4, kDefaultWindow, size_t{64} << 10)) {}

  // The Hello of a protocol whose requests go by WRITE: the RPC client's keys and the ring,
  // registered anew for every Hello.
  void hello(nlohmann::json* payload) {
    (*payload)["protocol"] = proto::info(protocol_).name;
    (*payload)["transport"] = "write";
    rpc_.hello(payload);
    ring_.reset();
    ring_ = std::make_unique<fabric::RegisteredBuffer>(host_.fabric(), bytes_,
                                                       fabric::Access::kRemoteWrite);
    (*payload)["ring"] = proto::region_to_json(ring_->remote());
  }

  // The RPC client's open(), refusing a server that takes requests by SEND, and kHelloAgain
  // while the ring is too small for the layout (which the RPC client has parsed even when it
  // asks for another Hello itself).
  Opened open(const control::Welcome& w, const nlohmann::json& layout) {
    const Opened r = rpc_.open(w, layout);
    if (rpc_.send_transport())
      RpcClient::bad_layout(std::string(proto::info(protocol_).name) +
                            " takes its requests by write, the server said send");
    const size_t need = size_(rpc_.workers(), rpc_.window(), rpc_.max_value());
    if (need > bytes_) {
      bytes_ = need;
      return Opened::kHelloAgain;
    }
    return r;
  }

  char* data() { return ring_->data(); }

 private:
  proto::ClientHost& host_;
  RpcClient& rpc_;
  const proto::Id protocol_;
  const SizeFn size_;
  size_t bytes_;
  std::unique_ptr<fabric::RegisteredBuffer> ring_;
};

}  // namespace fabkv::rpc
