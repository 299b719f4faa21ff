// The RPC wire format shared by the message-passing protocols (herd, server-reply, pilaf's
// PUT/DELETE, pilaf-vo): what a client WRITEs into a worker's request slots (or SENDs to it),
// and the response a worker SENDs or WRITEs back. Everything a remote peer reads or writes is
// here, little-endian, with its size asserted. It is HERD's format (HERD sec. 4.2); the
// protocols differ only in how requests travel and how answers come back (docs/architecture.md).
//
// HERD sec. 4.2: the request region is split per worker (a worker owns a partition, EREW),
// then per client into W slots; client c's r-th request to a worker goes to slot
// c*W + (r mod W) of that worker's region, and clients WRITE only into their own slots.
// A worker accepts a slot only when header and trailer carry the same new sequence number
// and the checksum over key and value matches, never by the order in which a WRITE's bytes
// land (docs/fabric.md: no provider promises the order in which a WRITE's bytes appear).
//
// Sequence numbers: per (client, worker), 1, 2, ... up to seq_cycle(W), then 1 again (0 marks
// an empty slot). Request seq s uses slot seq_slot(s, W) = (s - 1) mod W on both sides, and so
// do the answer buffers, server-reply's and hydradb's ring slots and rfrpc's result slots; the
// slot's previous request is prev_in_slot(s, W). The cycle is the largest multiple of W below
// 2^32, so the slots go round evenly across the wrap: with a cycle of 2^32 - 1 (every non-zero
// number) the slot after the wrap is not the one after the last, and a client counting its
// requests without end and a worker following seq numbers disagreed from then on.
//
// History:
//   v1  first version: inline and indirect (client-memory) requests, SEND responses.
//   v2  responses name the client index and epoch they answer, so a client that took over a
//       departed client's index never accepts an answer meant for its predecessor.
//   v3  a request's check covers its header fields too (op, flags, lengths, version, expiry,
//       client, epoch), not only its body: a header read while the request was landing can
//       no longer pass for the request (read_request below).
//   v4  sequence numbers wrap at seq_cycle(W), not at 2^32 - 1 (same bytes; a v3 peer and a
//       v4 peer disagree on slots after 2^32 - W requests, so the version says which).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "store/hash.h"  // xxh3 compiled inline (XXH_INLINE_ALL), not a call into libxxhash

#include "common/bytes.h"
#include "proto/prefix.h"

namespace fabkv::rpc {

inline constexpr uint32_t kWireVersion = 4;

// Sequence numbers (top of this file). `window` is W, 1..4096.
inline constexpr uint32_t seq_cycle(uint32_t window) { return UINT32_MAX / window * window; }
// The seq after `seq` (0: before the first request).
inline constexpr uint32_t next_seq(uint32_t seq, uint32_t window) {
  return seq >= seq_cycle(window) ? 1 : seq + 1;
}
// Which of a client's W slots (per worker) request `seq` uses.
inline constexpr uint32_t seq_slot(uint32_t seq, uint32_t window) { return (seq - 1) % window; }
// The request that used `seq`'s slot before it (in the previous cycle for seq <= W).
inline constexpr uint32_t prev_in_slot(uint32_t seq, uint32_t window) {
  return seq > window ? seq - window : seq_cycle(window) - window + seq;
}
// A client's first seq: `requested` (proto::ClientTestHooks::first_seq, TEST ONLY, told in the
// Hello) when it is one, else 1. Both sides apply it to the same W.
inline constexpr uint32_t first_seq(uint64_t requested, uint32_t window) {
  return requested >= 1 && requested <= seq_cycle(window) ? static_cast<uint32_t>(requested) : 1;
}
static_assert(seq_cycle(4) == 0xfffffffcu && next_seq(0xfffffffcu, 4) == 1 &&
              seq_slot(0xfffffffcu, 4) == 3 && seq_slot(1, 4) == 0 &&
              prev_in_slot(1, 4) == 0xfffffff9u && seq_slot(prev_in_slot(1, 4), 4) == 0);
static_assert(seq_cycle(3) == UINT32_MAX && seq_cycle(1) == UINT32_MAX);

// kNext: a sequencer's "next value" (no key, no value; the answer's version carries the
// value: proto/seq_rpc/, docs/sequencer.md). Only a server side that says so takes it.
enum class OpCode : uint8_t { kGet = 1, kPut = 2, kDel = 3, kNext = 4 };

// ResponseHeader::op of the answer to a request the worker could not read (garbage or a torn
// WRITE that never completed in its slot: kMalformed): there is no op to name, and the client
// matches the answer by its seq alone.
inline constexpr uint8_t kOpUnknown = 0;

// Request flags.
inline constexpr uint8_t kFlagIndirect = 1;  // key+value live in client memory (IndirectBody)

// Status in a response: store::Status's values in its order (proto/rpc/server.cc checks it),
// then what only the protocol can say.
enum class WireStatus : uint8_t {
  kOk = 0,
  kNotFound = 1,
  kTooLarge = 2,
  kInvalidKey = 3,
  kNoSpace = 4,
  kVersionMismatch = 5,
  kMalformed = 6,  // the worker could not parse the request (lengths, opcode, checksum)
  kInternal = 7,   // the worker failed to serve it (e.g. an indirect READ failed)
};

// 32 bytes at the start of every request (a slot, or a SEND message).
struct RequestHeader {
  uint32_t seq;               // per (client, worker) request number, starts at 1; 0 = empty slot
  uint16_t client;            // client index handed out at connect
  uint16_t epoch;             // client incarnation of that index (a reused index gets a new one)
  uint8_t op;                 // OpCode
  uint8_t flags;              // kFlagIndirect
  uint16_t key_len;           // 1..250
  uint32_t value_len;         // kPut: value bytes (inline or indirect); else 0
  uint64_t expected_version;  // kPut: memcached cas; 0 = unconditional
  uint32_t expire_at;         // kPut: absolute Unix seconds, 0 = never
  uint32_t check;             // request_check(): over the fields above and the body
};
static_assert(sizeof(RequestHeader) == 32 && alignof(RequestHeader) == 8);

// A request message starts with the prefix the worker routes every message by
// (proto/prefix.h), and is never shorter than the worker's minimum.
static_assert(offsetof(RequestHeader, seq) == offsetof(proto::MessagePrefix, seq) &&
              offsetof(RequestHeader, client) == offsetof(proto::MessagePrefix, client) &&
              offsetof(RequestHeader, epoch) == offsetof(proto::MessagePrefix, epoch) &&
              sizeof(RequestHeader) == proto::kMinMessageBytes);

// After the header: key bytes then value bytes (inline), or one IndirectBody (indirect), then
// the trailer at the next 4-byte boundary.
struct IndirectBody {
  uint64_t addr;    // where the worker READs key+value from: client RemoteRegion addr + offset
  uint64_t rkey;    // that region's key
  uint64_t length;  // key_len + value_len
};
static_assert(sizeof(IndirectBody) == 24);

struct RequestTrailer {
  uint32_t seq;  // == header.seq once the whole request has landed
};
static_assert(sizeof(RequestTrailer) == 4);

// What follows the header for a request of this shape.
inline size_t request_body_bytes(uint8_t flags, uint16_t key_len, uint32_t value_len) {
  return (flags & kFlagIndirect) ? sizeof(IndirectBody) : size_t{key_len} + value_len;
}
inline size_t trailer_offset(size_t body_bytes) {
  return (sizeof(RequestHeader) + body_bytes + 3) & ~size_t{3};
}
inline size_t request_bytes(size_t body_bytes) {
  return trailer_offset(body_bytes) + sizeof(RequestTrailer);
}

// Checksum over the header's fields between seq and check and over the body that lands with
// the request (inline key+value, or the IndirectBody), seeded with seq so that a stale body
// never matches a new header.
inline uint32_t request_check(const RequestHeader& h, const void* body, size_t n) {
  constexpr size_t kFrom = offsetof(RequestHeader, client), kTo = offsetof(RequestHeader, check);
  const uint64_t fields = XXH3_64bits_withSeed(reinterpret_cast<const char*>(&h) + kFrom,
                                               kTo - kFrom, h.seq);
  return static_cast<uint32_t>(XXH3_64bits_withSeed(body, n, fields));
}

// What read_request found in a slot.
enum class SlotRead {
  kEmpty,    // no request, or still the previous one of this slot
  kLanding,  // our seq is there but the request is not whole (yet): look again
  kTooLong,  // our seq, with lengths no slot holds
  kWhole,    // *h is the request's header, checked; its body follows it in the slot
};

// The default `landing` of read_request and server_reply::read_answer: nothing (tests pass one
// that lands bytes between the reads).
struct NothingLands {
  void operator()() const {}
};

// Request `seq` in a slot of `slot_size` bytes (its previous occupant was prev_in_slot()).
// A client's WRITE may be landing while the worker reads, its bytes in any order: the header
// is copied once, after the trailer carried our seq, and trusted only when the check over
// that copy and the body matches (the answer side does the same,
// proto/server_reply/wire.h). `landing` runs between the reads; tests land bytes there
// (tests/server/request_wire_test.cc).
template <class Landing = NothingLands>
inline SlotRead read_request(char* slot, uint32_t seq, uint32_t window, size_t slot_size,
                             RequestHeader* h, Landing&& landing = {}) {
  const uint32_t first =
      std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(slot)).load(std::memory_order_acquire);
  if (first == 0 || first == prev_in_slot(seq, window)) return SlotRead::kEmpty;
  if (first != seq) return SlotRead::kLanding;  // garbage, or our seq half-landed
  landing();
  // The lengths, only to find the trailer: torn ones find no trailer with our seq, or fail
  // the check.
  std::memcpy(h, slot, sizeof(*h));
  const size_t body = request_body_bytes(h->flags, h->key_len, h->value_len);
  const size_t toff = trailer_offset(body);
  if (body > slot_size || toff + sizeof(RequestTrailer) > slot_size) return SlotRead::kTooLong;
  landing();
  if (std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(slot + toff))
          .load(std::memory_order_acquire) != seq)
    return SlotRead::kLanding;
  landing();
  RequestHeader copy;
  std::memcpy(&copy, slot, sizeof(copy));
  if (copy.seq != seq || request_body_bytes(copy.flags, copy.key_len, copy.value_len) != body ||
      request_check(copy, slot + sizeof(RequestHeader), body) != copy.check)
    return SlotRead::kLanding;
  *h = copy;
  return SlotRead::kWhole;
}

// Response: one SEND from the worker, header then value bytes (kGet hit).
struct ResponseHeader {
  uint32_t seq;        // the request's seq
  uint8_t status;      // WireStatus
  uint8_t op;          // the request's OpCode
  uint16_t worker;     // which worker answered
  uint32_t value_len;  // kGet hit: value bytes that follow
  uint32_t expire_at;  // kGet hit
  uint64_t version;    // kGet: item version; kPut: new version; kNext: the value
  uint16_t client;     // the request's client index and epoch (v2)
  uint16_t epoch;
  uint32_t reserved;  // 0
};
static_assert(sizeof(ResponseHeader) == 32 && alignof(ResponseHeader) == 8);

// Layout a client learns at connect (the Welcome payload, JSON on the set-up path):
//   {"wire": 1, "client": c, "epoch": e, "workers": N, "window": W, "slot_size": S,
//    "max_clients": Nc, "queues": k, "transport": "write"|"send", "max_value": V,
//    "max_key": 250, "engine": "cache"|"store", "provider": "...",
//    "recv_size": bytes a client must post per response buffer}
// Welcome.fabric_addresses: worker w's k response endpoints at [w*k .. w*k+k-1]; requests go
// to the first of them (w*k). Welcome.regions: "<protocol>.requests.<w>", worker w's request
// region (Nc*W slots of S bytes, client c's slot r at offset (c*W + r) * S; request seq goes to
// r = seq_slot(seq, W)).
inline size_t slot_offset(uint32_t client, uint32_t window, uint32_t slot_size, uint32_t r) {
  return (size_t{client} * window + (r % window)) * slot_size;
}

inline constexpr uint32_t kDefaultWindow = 4;       // HERD's default W
inline constexpr uint32_t kDefaultSlotSize = 1024;  // fits 250 B keys with ~700 B values inline
inline constexpr uint32_t kDefaultMaxClients = 64;

// Largest inline body a slot holds.
inline size_t slot_inline_capacity(uint32_t slot_size) {
  return slot_size - sizeof(RequestHeader) - sizeof(RequestTrailer) - 3;
}

using ::fabkv::bytes::load;
using ::fabkv::bytes::store;

}  // namespace fabkv::rpc
