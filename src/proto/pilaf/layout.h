// Pilaf's self-verifying data structures (Pilaf sec. 3.2-3.4, 4): what a worker exposes for
// clients to READ, byte by byte, and the checks a client runs on what it READ. Shared by the
// server's engine (proto/pilaf/engine.h) and the client's GET path, and nothing here touches
// the fabric.
//
// Per worker and per generation there are two read-only regions:
//
//   table   "pilaf.table.<w>"   a 64-byte TableHeader, then `entries` 32-byte Entry slots
//   extents "pilaf.extents.<w>" key-value records, each an ExtentHeader + key + value,
//                               8-byte aligned, carved by an allocator that reuses freed space
//
// A key lives in one of three slots, bucket(key, 1..3) (3-way cuckoo hashing, Pilaf sec. 3.4:
// ~1.6 probes per lookup at 75% fill, at most 3). An Entry is a self-verifying pointer (Pilaf
// fig. 5): where the record is, how long, and the CRC64 of the record; the Entry carries a CRC64
// of its own first 24 bytes. A client READs an entry, checks its CRC (a mismatch means the server
// was writing it: READ again), READs the record, checks the record's CRC against the entry (a
// mismatch means the record was freed and reused meanwhile: start the key over) and compares
// the full key (a mismatch means another key: next probe).
//
// Deviation from the paper (fabkv's, documented in docs/pilaf.md): the entry also carries the
// key length and an 8-bit tag of the key hash, so a probe of a slot holding another key skips
// the extent READ 255 times in 256.
//
// History:
//   v1  first version.
//   v2  TableHeader.clock (offset 28, reserved in v1): the owner's expiry clock, so that a
//       client judges expire_at by the server's clock, not its own. A v1 table has 0 there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include <isa-l/crc64.h>
#include <xxhash.h>

#include "proto/read_table/table_header.h"

namespace fabkv::pilaf {

inline constexpr uint32_t kLayoutVersion = 2;
inline constexpr const char* kProtocol = "pilaf";       // GETs by READ, PUT/DEL by SEND
inline constexpr const char* kProtocolVo = "pilaf-vo";  // Pilaf sec. 5.1: everything by SEND
inline constexpr uint32_t kWays = 3;                    // Pilaf sec. 3.4: 3-way cuckoo

// CRC64 (ECMA-182 polynomial, reflected) through ISA-L. Pilaf sec. 4 argues for 64 bits: at
// ~1.3 M CRCs/s a 32-bit CRC would let a torn read through about once an hour.
inline uint64_t crc64(const void* p, size_t n) {
  return crc64_ecma_refl(0, static_cast<const unsigned char*>(p), n);
}

// ---- table -------------------------------------------------------------------------------

inline constexpr uint64_t kTableMagic = 0x464c4950564b4631ull;  // "1FKVPILF" little-endian
using read_table::kStateLive;
using read_table::kStateRetired;

// At offset 0 of the table region. Written by the owning worker only; clients READ `moves`,
// `state` and `clock` (16 bytes at offset 16) to confirm a "not found" (see lookup rules
// below) and to learn the server's clock for expiry.
struct TableHeader {
  uint64_t magic;       // kTableMagic
  uint32_t version;     // kLayoutVersion
  uint32_t generation;  // bumped by every growth (the "epoch" of the issue)
  uint64_t moves;       // seqlock over cuckoo displacements: odd while a path is being moved
  uint32_t state;       // kStateLive | kStateRetired
  // The owner's expiry clock (Unix seconds, the clock its engine compares expire_at with),
  // refreshed by the live table's owner at least every few milliseconds while it runs (the
  // engine's reap_retired(), which a worker calls every 1024 poll rounds). A retired table's
  // clock stops. 0 = not published (a v1 table): the client falls back to its own clock.
  uint32_t clock;
  uint64_t entries;       // slots in this table
  uint64_t extent_bytes;  // size of this generation's extent region
  uint64_t reserved[2];
};
static_assert(sizeof(TableHeader) == 64);
inline constexpr size_t kMovesOffset = offsetof(TableHeader, moves);  // 16: moves, state, clock
static_assert(kMovesOffset == 16 && offsetof(TableHeader, state) == 24 &&
              offsetof(TableHeader, clock) == 28);
inline constexpr size_t kClockOffset = offsetof(TableHeader, clock);

// What a client READs at kMovesOffset, and the expiry rule (read_table/table_header.h).
using read_table::expired;
using read_table::HeaderWord;
using read_table::load_header_word;

// Entry flags.
inline constexpr uint8_t kInUse = 1;
inline constexpr uint8_t kRetired = 2;  // this table was replaced: fetch the layout again

// One slot. All 32 zero bytes = an empty slot (a freshly mapped table is all empty). A used
// slot has kInUse and entry_crc == crc64(first 24 bytes). After a growth the worker overwrites
// every slot of the old table with a retired marker (kRetired, valid CRC).
struct Entry {
  uint64_t extent_offset;  // record's offset in the extent region
  uint32_t kv_size;        // record bytes: ExtentHeader + key + value
  uint8_t key_len;         // 1..250 (store::kMaxKeySize)
  uint8_t tag;             // key_tag(key): filters probes before the extent READ
  uint8_t flags;           // kInUse | kRetired
  uint8_t reserved;
  uint64_t kv_crc;     // crc64 of the whole record
  uint64_t entry_crc;  // crc64 of bytes [0, 24) of this entry
};
static_assert(sizeof(Entry) == 32, "Pilaf sec. 3.3: fixed 32-byte entries");
inline constexpr size_t kEntryCrcBytes = offsetof(Entry, entry_crc);
static_assert(kEntryCrcBytes == 24);

inline size_t entry_offset(uint64_t slot) { return sizeof(TableHeader) + slot * sizeof(Entry); }
inline size_t table_bytes(uint64_t entries) { return entry_offset(entries); }

inline void seal(Entry& e) { e.entry_crc = crc64(&e, kEntryCrcBytes); }

enum class EntryState : uint8_t { kEmpty, kUsed, kTorn, kRetired };
inline EntryState check_entry(const Entry& e) {
  static constexpr Entry kZero{};
  if (std::memcmp(&e, &kZero, sizeof(Entry)) == 0) return EntryState::kEmpty;
  if (crc64(&e, kEntryCrcBytes) != e.entry_crc) return EntryState::kTorn;
  if (e.flags & kRetired) return EntryState::kRetired;
  if (e.flags & kInUse) return EntryState::kUsed;
  return EntryState::kEmpty;
}

// ---- extents -----------------------------------------------------------------------------

struct ExtentHeader {
  uint64_t version;    // the item's CAS version
  uint32_t expire_at;  // absolute Unix seconds, 0 = never
  uint16_t key_len;
  uint16_t reserved;
};
static_assert(sizeof(ExtentHeader) == 16);
inline constexpr size_t kExtentAlign = 8;

inline size_t record_bytes(size_t key_len, size_t value_len) {
  return sizeof(ExtentHeader) + key_len + value_len;
}

// A record READ back, checked against the entry that pointed at it.
struct Record {
  ExtentHeader header;
  std::string_view key, value;
};
// False when the bytes are not the record the entry describes (CRC or lengths disagree).
inline bool check_record(const Entry& e, const void* bytes, size_t n, Record* out) {
  if (n != e.kv_size || n < sizeof(ExtentHeader) || crc64(bytes, n) != e.kv_crc) return false;
  std::memcpy(&out->header, bytes, sizeof(ExtentHeader));
  if (out->header.key_len != e.key_len || sizeof(ExtentHeader) + e.key_len > n) return false;
  const char* p = static_cast<const char*>(bytes) + sizeof(ExtentHeader);
  out->key = std::string_view(p, e.key_len);
  out->value = std::string_view(p + e.key_len, n - sizeof(ExtentHeader) - e.key_len);
  return true;
}

// ---- hashing -----------------------------------------------------------------------------

// Three orthogonal slot choices from one 128-bit xxh3 of the key (seeded apart from the
// partition hash, store::hash_key), each mapped onto [0, entries) by multiply-shift.
struct KeySlots {
  uint64_t slot[kWays];
  uint8_t tag;
};
inline constexpr uint64_t kHashSeed = 0x50696c6166ull;  // "Pilaf"

inline KeySlots key_slots(std::string_view key, uint64_t entries) {
  XXH128_hash_t h = XXH3_128bits_withSeed(key.data(), key.size(), kHashSeed);
  const uint64_t mix = h.low64 * 0x9e3779b97f4a7c15ull ^ (h.high64 >> 17 | h.high64 << 47);
  const uint64_t raw[kWays] = {h.low64, h.high64, mix};
  KeySlots s;
  for (uint32_t i = 0; i < kWays; ++i)
    s.slot[i] = static_cast<uint64_t>((static_cast<unsigned __int128>(raw[i]) * entries) >> 64);
  s.tag = static_cast<uint8_t>(h.low64 >> 56 ^ h.high64 >> 48);
  return s;
}

// The fast filter a client applies to a used entry before READing its record.
inline bool may_hold(const Entry& e, std::string_view key, uint8_t tag) {
  return e.key_len == key.size() && e.tag == tag;
}

// ---- lookup rules (client) ---------------------------------------------------------------
//
// GET(key): for i in 0..2: READ entry key_slots(key).slot[i]
//   kTorn     -> READ it again (counted as a retry; bounded)
//   kRetired  -> the layout is stale: fetch it again over the control channel, start over
//   kEmpty, or used but !may_hold -> next i
//   kUsed     -> READ the record; !check_record -> READ the entry again (retry);
//                key differs -> next i; else the value (expired by the server's clock, see
//                TableHeader.clock -> not found)
// After three misses, READ TableHeader.moves/state/clock (16 bytes at kMovesOffset):
// retired -> fetch the layout; odd, or different from the value seen at the end of the
// previous such check -> remember it and probe again (a cuckoo move may have carried the key
// from a slot not yet probed to one already probed); equal and even -> no key moved since
// before the probes began: not found.

}  // namespace fabkv::pilaf
