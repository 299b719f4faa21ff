// RF-RPC (Su et al., "RF-RPC: Remote Fetching RPC Paradigm for RDMA-Enabled Network"; Jakiro
// is its key-value store): the client WRITEs its request into its slot of the worker's request
// region, the worker processes it and writes the result into ITS OWN registered response
// buffer, and the client READs the result from there (RF-RPC sec. 3.1, fig. 3).
//
// Requests are the shared RPC request (proto/rpc/wire.h): RF-RPC's request header "with a
// status bit and a size" is rpc::RequestHeader (seq is the status, key_len/value_len the size)
// and its tail status bit is rpc::RequestTrailer (the seq again), both WRITten by the same
// WRITE; the worker takes a slot only when they agree and the check matches.
//
// Results. Worker w keeps one result slot per (client, request slot): client c's request
// `seq` is answered at
//   (c * W + seq_slot(seq, W)) * result_slot_bytes(max_value)
// of the worker's response region "rfrpc.results.<w>" (registered for remote READ). A result
// is a ResultHeader (RF-RPC sec. 3.1: status, size and a 2-byte server processing time) and
// then the result itself, an rpc::ResponseHeader and the value of a GET hit. The client READs
// F bytes from the slot's start (header + payload in one READ, RF-RPC sec. 3.2) and READs the
// rest only when `size` says the result is larger than what it fetched.
//
// The status is the request's seq, not one bit: a bit cannot tell this request's result from
// the one the slot held W requests ago. The worker writes the slot while clients may READ it,
// and a READ or a WRITE lands its bytes in any order (docs/fabric.md), so a result is taken
// only when the header carries our seq and `check` matches header and result, computed over
// the one copy the client acts on (read_result below).
//
// Hybrid mode (RF-RPC sec. 3.2, "Discussion"): each worker keeps a mode flag per client in
// "rfrpc.modes.<w>" (8 bytes at c * 8, registered for remote WRITE), written only by that
// client: kModeFetch, or kModeReply when the client has flipped to server-reply. The worker
// reads its local copy when it answers: in reply mode it also WRITEs the same bytes (result
// header and result) into the client's ring, a region of client memory announced in the Hello,
// at (w * W + seq_slot(seq, W)) * result_slot_bytes(max_value). The worker always writes its
// own response buffer too, so a request sent just before a flip is found by READ either way.
//
// Batches (RF-RPC sec. 4, fig. 6), when the server enables them (--rfrpc-batch-entries): a
// client buffers small requests per worker and WRITEs them as one request batch into one of its
// W batch slots of "rfrpc.batches.<w>" (client c's slot b at (c * W + b) * batch_slot_bytes(L),
// W the RPC window: a batch holds at least one call, so W slots carry any W calls in flight);
// the worker runs every entry and writes one
// result batch into the matching slot of "rfrpc.bresults.<w>", which the client READs (F bytes,
// then the rest). Both have the paper's header (a status bit and a 31-bit payload size in one
// word, a 16-bit auxiliary field) and a request batch has the tail status; each entry is a
// 32-bit size then its bytes (an rpc request; an rpc::ResponseHeader and value), 8-byte aligned.
//
// History:
//   v1  first version.
//   v2  batches.
//   v3  W batch slots per client and worker (v2 had 2); the worker takes a slot's batch by the
//       number the client wrote, not by the next number it expects.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "store/hash.h"  // xxh3 compiled inline (XXH_INLINE_ALL), not a call into libxxhash

#include "proto/rpc/wire.h"

namespace fabkv::rfrpc {

inline constexpr uint32_t kWireVersion = 3;

// The 2-byte processing time (RF-RPC sec. 3.1 gives the field two bytes and no unit) is a tiny
// float of nanoseconds: 11 bits of mantissa, 5 of exponent, ns = mantissa << exponent. Exact
// below 2 us, within 0.1% above, up to hours: shm rounds of 0.3 us and tcp calls held for ms
// by a busy worker both fit (a fixed unit cannot do both: 50 ns units saturate at 3.3 ms).
inline uint16_t encode_proc_time(uint64_t ns) {
  uint32_t e = 0;
  while (ns >= 2048) {
    ns >>= 1;
    ++e;
  }
  if (e > 31) return 0xffff;
  return static_cast<uint16_t>((e << 11) | ns);
}
inline uint64_t decode_proc_time(uint16_t v) { return uint64_t{v & 2047u} << (v >> 11); }

// How the worker answered (ResultHeader::mode) and the values of a client's mode flag.
inline constexpr uint8_t kModeFetch = 0;  // result only in the worker's response buffer
inline constexpr uint8_t kModeReply = 1;  // also WRITten into the client's ring

struct ResultHeader {
  uint32_t seq;        // status: the request's seq once its result is whole; 0 = none yet
  uint32_t size;       // bytes of result after this header: rpc::ResponseHeader + value
  uint16_t proc_time;  // server processing time, encode_proc_time() (RF-RPC sec. 3.1)
  uint8_t mode;        // kModeFetch or kModeReply: what the worker's flag said
  uint8_t reserved;    // 0
  uint32_t check;      // result_check(): over the fields above (after seq) and the result
};
static_assert(sizeof(ResultHeader) == 16 && alignof(ResultHeader) == 4);

// A client's mode flag in "rfrpc.modes.<w>" (one per client index).
struct ModeFlag {
  uint8_t mode;  // kModeFetch / kModeReply
  uint8_t reserved[7];
};
static_assert(sizeof(ModeFlag) == 8);

inline constexpr size_t result_bytes(size_t value_len) {
  return sizeof(ResultHeader) + sizeof(rpc::ResponseHeader) + value_len;
}
// Every slot holds the largest result, rounded to 8 bytes.
inline constexpr size_t result_slot_bytes(size_t max_value) {
  return (result_bytes(max_value) + 7) & ~size_t{7};
}
inline size_t result_offset(uint32_t client, uint32_t window, size_t max_value, uint32_t seq) {
  return (size_t{client} * window + rpc::seq_slot(seq, window)) * result_slot_bytes(max_value);
}
inline size_t ring_offset(uint32_t worker, uint32_t window, size_t max_value, uint32_t seq) {
  return (size_t{worker} * window + rpc::seq_slot(seq, window)) * result_slot_bytes(max_value);
}
inline size_t ring_bytes(uint32_t workers, uint32_t window, size_t max_value) {
  return size_t{workers} * window * result_slot_bytes(max_value);
}

// Over the header's fields after seq (size, proc_time, mode, reserved) and the `size` bytes of
// result after it, seeded with seq: a result of an earlier use of the slot never matches.
inline uint32_t result_check(const ResultHeader& h, const void* result) {
  constexpr size_t kFrom = offsetof(ResultHeader, size), kTo = offsetof(ResultHeader, check);
  const uint64_t fields = XXH3_64bits_withSeed(reinterpret_cast<const char*>(&h) + kFrom,
                                               kTo - kFrom, h.seq);
  return static_cast<uint32_t>(XXH3_64bits_withSeed(result, h.size, fields));
}

// What read_result found.
enum class ResultRead {
  kNotReady,  // not our seq (yet): a failed fetch
  kBadSize,   // our seq with a size no result has: garbage, or a header still landing
  kNeedMore,  // our seq, and the result is larger than the bytes at hand (*total: how many)
  kTorn,      // our seq and a plausible size, but the check fails: landing, torn or garbage
  kWhole,     // *copy holds header and result, checked
};

// The result of `seq` in `avail` bytes at `src` (a fetched copy of the worker's slot, or the
// client's ring slot while the worker's WRITE may land in it, its bytes in any order). Every
// byte acted on is read once, into *copy (header first), and trusted only if the check over
// that copy matches: a header read before the rest had landed can carry our seq next to the
// previous result's size. `landing` runs between the reads; tests land bytes there
// (tests/client/rfrpc_wire_test.cc).
template <class Landing = rpc::NothingLands>
inline ResultRead read_result(const char* src, size_t avail, uint32_t seq, size_t max_value,
                              std::string* copy, size_t* total, Landing&& landing = {}) {
  if (std::atomic_ref<uint32_t>(*const_cast<uint32_t*>(reinterpret_cast<const uint32_t*>(src)))
          .load(std::memory_order_acquire) != seq)
    return ResultRead::kNotReady;
  landing();
  uint32_t size;  // only to know how much to copy: the copy's own size is checked below
  std::memcpy(&size, src + offsetof(ResultHeader, size), sizeof(size));
  if (size < sizeof(rpc::ResponseHeader) || size > sizeof(rpc::ResponseHeader) + max_value)
    return ResultRead::kBadSize;
  const size_t n = sizeof(ResultHeader) + size;
  if (n > avail) {
    *total = n;
    return ResultRead::kNeedMore;
  }
  landing();
  copy->assign(src, n);
  ResultHeader h;
  std::memcpy(&h, copy->data(), sizeof(h));
  if (h.seq != seq || h.size != size || h.check != result_check(h, copy->data() + sizeof(h)))
    return ResultRead::kTorn;
  rpc::ResponseHeader r;
  std::memcpy(&r, copy->data() + sizeof(h), sizeof(r));
  if (r.seq != seq || size_t{r.value_len} + sizeof(r) != size) return ResultRead::kTorn;
  return ResultRead::kWhole;
}

// ---- batches (RF-RPC sec. 4.1, fig. 6) ------------------------------------------------------

inline constexpr uint32_t kStatusBit = 0x80000000u;

struct BatchHeader {
  uint32_t status_size;  // bit 31: status (set once the batch is whole); bits 0-30: payload bytes
  uint16_t aux;          // request batch: the client's batch size (eq. 3); result batch: the
                         // processing time (encode_proc_time), as a single result's
  uint16_t entries;      // entries in the payload
  uint32_t seq;          // this (client, batch slot)'s batch number, from 1 (never 0): a status
                         // bit alone cannot tell the slot's new batch from its previous one
  uint32_t check;        // batch_check(): the fields after status_size and the payload
};
static_assert(sizeof(BatchHeader) == 16 && alignof(BatchHeader) == 4);
struct BatchTail {
  uint32_t status_seq;  // the tail status (request batches): == seq | kStatusBit once landed
};
static_assert(sizeof(BatchTail) == 4);

// A result entry whose result did not fit the result batch: the client sends it again alone
// (a GET is only read again; PUT and DELETE results always fit).
inline constexpr uint32_t kEntryOverflow = 0xffffffffu;

inline constexpr size_t entry_bytes(size_t n) { return (sizeof(uint32_t) + n + 7) & ~size_t{7}; }
inline constexpr size_t batch_slot_bytes(size_t payload) {
  return sizeof(BatchHeader) + ((payload + 7) & ~size_t{7}) + 8;  // + the tail, 8-aligned
}
// Client c's batch slot b of `slots` (the RPC window W: RF-RPC sec. 4.1's pipeline lets a client
// send batches while its calls without results stay under a threshold; ours is W calls).
inline size_t batch_offset(uint32_t client, uint32_t slots, uint32_t b, size_t slot_bytes) {
  return (size_t{client} * slots + b) * slot_bytes;
}
// Result batches hold a result entry per request plus room for values: 4 x L.
inline constexpr size_t result_batch_payload(size_t batch_bytes) { return 4 * batch_bytes; }

inline uint32_t batch_check(const BatchHeader& h, const void* payload, size_t n) {
  constexpr size_t kFrom = offsetof(BatchHeader, aux), kTo = offsetof(BatchHeader, check);
  const uint64_t fields = XXH3_64bits_withSeed(reinterpret_cast<const char*>(&h) + kFrom,
                                               kTo - kFrom, h.seq);
  return static_cast<uint32_t>(XXH3_64bits_withSeed(payload, n, fields));
}

enum class BatchRead {
  kEmpty,     // no new batch (status clear, or not our seq)
  kLanding,   // our seq but not whole yet (tail, sizes or check): look again
  kBadSize,   // a payload no slot holds
  kNeedMore,  // a result batch larger than the bytes at hand (*total: how many)
  kWhole,     // *copy holds header and payload, checked
};

// The batch `seq` in `avail` bytes at `src` (a request batch slot the client's WRITE may be
// landing in, with_tail; or a fetched result batch). As read_result: everything acted on is
// read once into *copy and checked there.
template <class Landing = rpc::NothingLands>
inline BatchRead read_batch(const char* src, size_t avail, uint32_t seq, size_t max_payload,
                            bool with_tail, std::string* copy, size_t* total,
                            Landing&& landing = {}) {
  const uint32_t ss =
      std::atomic_ref<uint32_t>(*const_cast<uint32_t*>(reinterpret_cast<const uint32_t*>(src)))
          .load(std::memory_order_acquire);
  if ((ss & kStatusBit) == 0) return BatchRead::kEmpty;
  uint32_t hseq;
  std::memcpy(&hseq, src + offsetof(BatchHeader, seq), sizeof(hseq));
  if (hseq != seq) return BatchRead::kEmpty;
  landing();
  const size_t n = ss & ~kStatusBit;
  if (n > max_payload || n % 8 != 0) return BatchRead::kBadSize;
  const size_t whole = sizeof(BatchHeader) + n + (with_tail ? sizeof(BatchTail) : 0);
  if (whole > avail) {
    *total = whole;
    return BatchRead::kNeedMore;
  }
  if (with_tail) {
    const uint32_t tail =
        std::atomic_ref<uint32_t>(*const_cast<uint32_t*>(reinterpret_cast<const uint32_t*>(
                                      src + sizeof(BatchHeader) + n)))
            .load(std::memory_order_acquire);
    if (tail != (seq | kStatusBit)) return BatchRead::kLanding;
  }
  landing();
  copy->assign(src, sizeof(BatchHeader) + n);
  BatchHeader h;
  std::memcpy(&h, copy->data(), sizeof(h));
  if (h.status_size != ss || h.seq != seq || h.check != batch_check(h, copy->data() + sizeof(h), n))
    return BatchRead::kLanding;
  return BatchRead::kWhole;
}

// Walks the entries of a checked payload: f(entry bytes, size) for each (size may be
// kEntryOverflow with no bytes); false when an entry runs past the payload or the count differs.
template <class F>
inline bool for_each_entry(const char* payload, size_t n, uint32_t entries, F&& f) {
  size_t off = 0;
  for (uint32_t i = 0; i < entries; ++i) {
    if (off + sizeof(uint32_t) > n) return false;
    uint32_t size;
    std::memcpy(&size, payload + off, sizeof(size));
    const size_t len = size == kEntryOverflow ? 0 : size;
    if (len > n - off - sizeof(uint32_t)) return false;
    f(payload + off + sizeof(uint32_t), size);
    off += entry_bytes(len);
  }
  return off == n;
}

}  // namespace fabkv::rfrpc
