// server-reply (RF-RPC sec. 5.3 calls it "server-reply"; PARADIGMS.md): requests travel as in
// HERD (the client WRITEs them into its slots of the worker's request region, proto/rpc/wire.h)
// and the worker WRITEs each answer into the client's own memory, a response ring the client
// polls. No SEND, no RECV on either side: 1 WRITE each way per request.
//
// The ring is one region of client memory, registered for remote WRITE and announced in the
// Hello ({"ring": region}). Worker w answers request `seq` in ring slot
//   (w * W + seq_slot(seq, W)) * ring_slot_bytes(max_value)
// with one WRITE of: rpc::ResponseHeader, the value (GET hit), then a ResponseTrailer at the
// next 8-byte boundary. The bytes of a WRITE may land in any order (docs/fabric.md), so the
// client takes a slot only when header and trailer carry the seq it waits for and the
// trailer's checksum matches the header and value; it then zeroes the slot's header before the
// slot's next request can be sent. Large values need no second WRITE: every ring slot holds
// the server's largest value (W slots per worker, W x (48 + max_value) bytes).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "store/hash.h"  // xxh3 compiled inline (XXH_INLINE_ALL), not a call into libxxhash

#include "proto/rpc/wire.h"

namespace fabkv::server_reply {

struct ResponseTrailer {
  uint32_t seq;    // == header.seq once the whole answer has landed
  uint32_t check;  // response_check(header, value)
};
static_assert(sizeof(ResponseTrailer) == 8);

inline constexpr size_t trailer_offset(size_t value_len) {
  return (sizeof(rpc::ResponseHeader) + value_len + 7) & ~size_t{7};
}
inline constexpr size_t response_bytes(size_t value_len) {
  return trailer_offset(value_len) + sizeof(ResponseTrailer);
}
inline constexpr size_t ring_slot_bytes(size_t max_value) { return response_bytes(max_value); }
inline size_t ring_offset(uint32_t worker, uint32_t window, size_t max_value, uint32_t seq) {
  return (size_t{worker} * window + rpc::seq_slot(seq, window)) * ring_slot_bytes(max_value);
}
inline size_t ring_bytes(uint32_t workers, uint32_t window, size_t max_value) {
  return size_t{workers} * window * ring_slot_bytes(max_value);
}

// Over the header and the value that follows it, seeded with seq: an answer from an earlier
// use of the slot never matches a new header.
inline uint32_t response_check(const void* header_and_value, size_t value_len, uint32_t seq) {
  return static_cast<uint32_t>(XXH3_64bits_withSeed(header_and_value,
                                                    sizeof(rpc::ResponseHeader) + value_len, seq));
}

// The answer to `seq` in its ring slot, if it has landed whole: copies header and value into
// *copy (header first) and returns true; false leaves the slot as it is, to be looked at again.
//
// The worker's WRITE may be landing while we read, its bytes in any order. Everything the
// answer is built from is read once, into *copy, after the trailer carried our seq, and is
// trusted only if the checksum over that copy matches: a header read before the rest had
// landed can hold the previous answer's op, client and epoch next to our seq, and an answer
// judged by such a header is dropped after its slot was cleared, lost for good (it was, on
// shm under load). `landing` runs between the reads; tests land bytes there
// (tests/client/server_reply_wire_test.cc).
template <class Landing = rpc::NothingLands>
inline bool read_answer(char* slot, uint32_t seq, size_t max_value, std::string* copy,
                        Landing&& landing = {}) {
  if (std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(slot))
          .load(std::memory_order_acquire) != seq)
    return false;
  landing();
  // Only to find the trailer: a torn length finds no trailer with our seq, or fails the
  // checksum below.
  uint32_t value_len;
  std::memcpy(&value_len, slot + offsetof(rpc::ResponseHeader, value_len), sizeof(value_len));
  if (value_len > max_value) return false;
  landing();
  const uint64_t raw =
      std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(slot + trailer_offset(value_len)))
          .load(std::memory_order_acquire);
  ResponseTrailer t;
  std::memcpy(&t, &raw, sizeof(t));
  if (t.seq != seq) return false;
  landing();
  copy->assign(slot, sizeof(rpc::ResponseHeader) + value_len);
  rpc::ResponseHeader h;
  std::memcpy(&h, copy->data(), sizeof(h));
  return h.seq == seq && h.value_len == value_len &&
         t.check == response_check(copy->data(), value_len, seq);
}

}  // namespace fabkv::server_reply
