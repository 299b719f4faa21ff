// The RPC pieces' part of the handshake layout (proto/handshake.h): how a client reaches a
// worker's request slots and how big its answers are. Written by RpcServer::welcome() (and, for
// the keys they share, by the sequencers' servers), read by RpcClient::open().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "proto/rpc/wire.h"

namespace fabkv::rpc {

struct RpcLayout {
  uint32_t wire = kWireVersion;  // rpc/wire.h's version
  uint32_t window = 0;           // W: slots per client per worker
  uint32_t slot_size = 0;
  uint32_t queues = 1;              // endpoints per worker (fabric addresses: workers x queues)
  std::string transport = "write";  // how requests travel: "write" or "send" (rpc/options.h)
  size_t recv_size = 0;             // the worker's receive buffers: the largest answer by SEND
};

inline void to_json(nlohmann::json& j, const RpcLayout& l) {
  j = {{"wire", l.wire},     {"window", l.window},       {"slot_size", l.slot_size},
       {"queues", l.queues}, {"transport", l.transport}, {"recv_size", l.recv_size}};
}
// wire, queues, transport and recv_size may be absent (servers before them): the defaults
// above are what such a server meant; a client that receives its answers checks recv_size.
inline void from_json(const nlohmann::json& j, RpcLayout& l) {
  l.wire = j.value("wire", kWireVersion);
  j.at("window").get_to(l.window);
  j.at("slot_size").get_to(l.slot_size);
  l.queues = j.value("queues", 1u);
  l.transport = j.value("transport", std::string("write"));
  l.recv_size = j.value("recv_size", size_t{0});
}

// The protocols that WRITE their answers into a ring the client registers (rpc/answer_ring.h):
// the bytes the ring needs for this server (each protocol's ring_bytes() in its wire.h). A
// client computes the same from the RPC keys and comes back with a ring that fits; the key
// tells a reader of the layout (fabkv-cli, a test) what it was sized for.
struct RingLayout {
  size_t ring_bytes = 0;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(RingLayout, ring_bytes)

}  // namespace fabkv::rpc
