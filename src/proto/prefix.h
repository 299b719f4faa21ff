// How a worker tells which client, and so which protocol, a message comes from, whatever the
// protocol: the prefixes every client message starts with. Part of every protocol's wire
// (rpc::RequestHeader starts with a MessagePrefix: proto/rpc/wire.h asserts it); the worker
// routes by these alone (server/worker.cc) and knows no protocol's wire beyond them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fabkv::proto {

// The first 8 bytes of every message with a body that a client SENDs to a worker, whatever its
// protocol: the worker hands the message to the protocol of the client they name. Every
// protocol's messages start so (rpc::RequestHeader does: proto/rpc/wire.h).
struct MessagePrefix {
  uint32_t seq;
  uint16_t client;
  uint16_t epoch;
};
static_assert(sizeof(MessagePrefix) == 8 && alignof(MessagePrefix) == 4);
// Every message with a body is at least this long, whatever its protocol (the RPC header's
// size: proto/rpc/wire.h): a shorter one is malformed before its prefix is even read.
inline constexpr size_t kMinMessageBytes = 32;

// Who sent a zero-length message with immediate data (a header-only SEND, Guidelines sec. 3):
// the data's low 32 bits name the client (index, epoch), as MessagePrefix does for a message
// with a body; the high 32 bits are the protocol's (proto/seq_spec/).
struct ImmPrefix {
  uint16_t client;
  uint16_t epoch;
  static ImmPrefix from(uint64_t imm) {
    return {static_cast<uint16_t>(imm & 0xffff), static_cast<uint16_t>((imm >> 16) & 0xffff)};
  }
  uint64_t to_imm(uint32_t high) const {
    return (uint64_t{high} << 32) | (uint64_t{epoch} << 16) | client;
  }
};

}  // namespace fabkv::proto
