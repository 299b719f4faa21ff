// HydraDB's RPC path (survey sec. 3.1: "Clients and servers use WRITE to send and receive
// requests/responses"): requests travel exactly as server-reply's (the client WRITEs them into
// its slots of worker w's request region "hydradb.requests.<w>", proto/rpc/wire.h), and the
// worker WRITEs each answer into the client's response ring, laid out as server-reply's
// (proto/server_reply/wire.h) with one addition: every answer carries an ItemRef after the
// value. For a GET hit on an item without an expiry the ItemRef says where the item is in the
// worker's item arena ("hydradb.items.<w>", proto/hydradb/layout.h) and for how long the
// client may READ it there instead of asking again (the lease); otherwise it is empty.
//
//   ring slot of (worker w, seq):  (w * W + seq_slot(seq, W)) * ring_slot_bytes(max_value)
//   answer:  rpc::ResponseHeader | value | zeros to 8 | ItemRef | ResponseTrailer{seq, check}
//
// The bytes of the worker's WRITE may land in any order (docs/architecture.md): read_answer
// copies the answer once after the trailer carried our seq and trusts only a copy whose
// checksum (over header, value, padding and ItemRef) matches.
//
// Leases: lease_us is a duration. The client measures it on its own monotonic clock from the
// moment it submitted the GET (before the worker read the item, so the lease ends no later
// than the worker's view of it); the worker holds a replaced item's memory for lease + margin
// on its own monotonic clock from the moment it cleared the flag (after answering every GET
// that handed the item out). No clock is shared, and an offset between the clocks changes
// nothing; the margin covers rate differences and a READ still in flight (docs/hydradb.md).
//
// History:
//   v1  first version.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "proto/rpc/wire.h"
#include "store/hash.h"  // xxh3 compiled inline (XXH_INLINE_ALL)

namespace fabkv::hydradb {

inline constexpr uint32_t kWireVersion = 1;
inline constexpr uint64_t kNoItem = ~uint64_t{0};

struct ItemRef {
  uint64_t offset;    // the item's byte offset in "hydradb.items.<worker>"; kNoItem = none
  uint32_t lease_us;  // how long the client may READ it there (0 = not at all)
  uint32_t reserved;  // 0
};
static_assert(sizeof(ItemRef) == 16 && alignof(ItemRef) == 8);

struct ResponseTrailer {
  uint32_t seq;    // == header.seq once the whole answer has landed
  uint32_t check;  // response_check(answer, value_len, seq)
};
static_assert(sizeof(ResponseTrailer) == 8);

inline constexpr size_t ref_offset(size_t value_len) {
  return (sizeof(rpc::ResponseHeader) + value_len + 7) & ~size_t{7};
}
inline constexpr size_t trailer_offset(size_t value_len) {
  return ref_offset(value_len) + sizeof(ItemRef);
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

// Over everything before the trailer, seeded with seq (an earlier answer in the slot never
// matches a new header).
inline uint32_t response_check(const void* answer, size_t value_len, uint32_t seq) {
  return static_cast<uint32_t>(XXH3_64bits_withSeed(answer, trailer_offset(value_len), seq));
}

// The answer to `seq` in its ring slot, if it has landed whole: copies everything before the
// trailer into *copy and returns true; false leaves the slot as it is. The same reading rules
// as server_reply::read_answer (read once after the trailer, check the copy); `landing` runs
// between the reads (tests land bytes there).
template <class Landing = rpc::NothingLands>
inline bool read_answer(char* slot, uint32_t seq, size_t max_value, std::string* copy,
                        Landing&& landing = {}) {
  if (std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(slot))
          .load(std::memory_order_acquire) != seq)
    return false;
  landing();
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
  copy->assign(slot, trailer_offset(value_len));
  rpc::ResponseHeader h;
  std::memcpy(&h, copy->data(), sizeof(h));
  return h.seq == seq && h.value_len == value_len &&
         t.check == response_check(copy->data(), value_len, seq);
}

}  // namespace fabkv::hydradb
