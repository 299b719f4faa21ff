// FaRM-KV's hopscotch table (HERD sec. 5.1.2; survey sec. 3.4), byte for byte: what a worker
// exposes for clients to READ and the checks a client runs on what it READ. Shared by the
// server's engine (proto/farm/engine.h) and the client's GET path; nothing here touches the
// fabric.
//
// Per worker and per generation there are two read-only regions:
//
//   table   "farm.table.<w>"    a 64-byte TableHeader, then homes + H - 1 buckets of
//                               bucket_bytes each (32-byte BucketHeader + inline_bytes)
//   extents "farm.extents.<w>"  records (RecordHeader + key + value) of items that do not fit
//                               a bucket, carved by the TLSF heap of store/heap.h
//
// A key's home bucket is home(key) in [0, homes); the key always lives in one of the H = 6
// buckets [home, home + H) (FaRM's choice for items under 128 bytes, HERD sec. 5.1.2), so a GET
// is one READ of H consecutive buckets. No neighbourhood wraps around: the table has H - 1
// buckets past the last home bucket that are never a home, so the READ is always one range
// (no second READ, no mirrored tail; docs/farm.md says why).
//
// Items whose key + value fit inline_bytes live in the bucket (`farm`: 1 READ per GET); the
// others, and every item of a table with inline_bytes = kPointerBytes (`farm-var`), live in an
// extent record the bucket points at (one neighbourhood READ + one record READ).
//
// Consistency (FaRM's per-cache-line versions, done as one check per object): every bucket
// carries a 64-bit xxh3 over all its other bytes, and every record one over its bytes seeded
// with the item's version, which the bucket also carries. FaRM's versions in each cache line
// rely on a NIC reading a cache line at once; the bytes of a READ on shm and tcp may land in
// any order (docs/fabric.md), so fabkv checks whole objects, which catches a tear anywhere,
// inside a cache line too. A client checks the copy it READ and acts on that copy only.
//
// History:
//   v1  first version.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "proto/read_table/table_header.h"
#include "store/hash.h"  // xxh3 inline (XXH_INLINE_ALL)

namespace fabkv::farm {

inline constexpr uint32_t kLayoutVersion = 1;
inline constexpr const char* kProtocol = "farm";
inline constexpr const char* kProtocolVar = "farm-var";
// HERD sec. 5.1.2: "its authors set it to 6 to balance good space utilization and performance
// for items smaller than 128 bytes".
inline constexpr uint32_t kNeighbourhood = 6;

// ---- table header --------------------------------------------------------------------------

inline constexpr uint64_t kTableMagic = 0x4d524146564b4631ull;  // "1FKVFARM" little-endian
using read_table::kStateLive;
using read_table::kStateRetired;

// At offset 0 of the table region; written by the owning worker only. Clients READ `moves`,
// `state` and `clock` (16 bytes at kMovesOffset) to confirm a miss and to learn the server's
// expiry clock, as Pilaf's clients do (proto/pilaf/layout.h).
struct TableHeader {
  uint64_t magic;       // kTableMagic
  uint32_t version;     // kLayoutVersion
  uint32_t generation;  // 1, then +1 per growth
  uint64_t moves;       // seqlock over hopscotch displacements: odd while keys are moving
  uint32_t state;       // kStateLive | kStateRetired
  uint32_t clock;       // the owner's expiry clock (Unix seconds), refreshed every few ms
  uint64_t homes;       // home buckets; the table holds homes + H - 1 buckets
  uint32_t bucket_bytes;
  uint32_t inline_bytes;
  uint64_t extent_bytes;
  uint64_t reserved;
};
static_assert(sizeof(TableHeader) == 64);
inline constexpr size_t kMovesOffset = offsetof(TableHeader, moves);
static_assert(kMovesOffset == 16 && offsetof(TableHeader, state) == 24 &&
              offsetof(TableHeader, clock) == 28);

using read_table::expired;
using read_table::HeaderWord;
using read_table::load_header_word;

// ---- buckets -------------------------------------------------------------------------------

inline constexpr uint8_t kInline = 1;    // key and value in the bucket
inline constexpr uint8_t kIndirect = 2;  // Pointer in the bucket, key and value in a record
inline constexpr uint8_t kRetired = 4;   // this table was replaced: fetch the layout again

// All bucket_bytes zero = an empty bucket (a fresh mapping is an empty table; a DELETE zeroes
// the bucket). Anything else must carry check == bucket_check(bucket).
struct BucketHeader {
  uint64_t check;      // xxh3 of bytes [8, bucket_bytes) of the bucket, seed kCheckSeed
  uint64_t version;    // the item's CAS version (an indirect record carries it too)
  uint32_t expire_at;  // absolute Unix seconds, 0 = never
  uint32_t value_len;
  uint8_t key_len;  // 1..250
  uint8_t flags;    // kInline | kIndirect | kRetired
  uint16_t reserved;
  uint32_t tag;  // 32 bits of the key's hash: filters before a record READ
};
static_assert(sizeof(BucketHeader) == 32);

// The data area of an indirect bucket.
struct Pointer {
  uint64_t extent_offset;  // the record's offset in the extent region
  uint32_t record_bytes;   // RecordHeader + key + value
  uint32_t reserved;
};
inline constexpr size_t kPointerBytes = sizeof(Pointer);  // farm-var's inline_bytes
static_assert(kPointerBytes == 16);

inline constexpr uint64_t kCheckSeed = 0x4661524d4b56ull;  // "FaRMKV"

// inline_bytes: at least a Pointer, a multiple of 8.
inline size_t bucket_bytes(size_t inline_bytes) { return sizeof(BucketHeader) + inline_bytes; }
inline size_t table_buckets(uint64_t homes) { return homes + kNeighbourhood - 1; }
inline size_t bucket_offset(uint64_t b, size_t bucket_bytes) {
  return sizeof(TableHeader) + b * bucket_bytes;
}
inline size_t table_bytes(uint64_t homes, size_t bucket_bytes) {
  return bucket_offset(table_buckets(homes), bucket_bytes);
}
// What a GET READs: the H buckets from the key's home on.
inline size_t neighbourhood_bytes(size_t bucket_bytes) { return kNeighbourhood * bucket_bytes; }

inline uint64_t bucket_check(const void* bucket, size_t bucket_bytes) {
  return XXH3_64bits_withSeed(static_cast<const char*>(bucket) + 8, bucket_bytes - 8, kCheckSeed);
}
// Writes the check of a bucket built locally (the server then copies it into place).
inline void seal(void* bucket, size_t bucket_bytes) {
  const uint64_t c = bucket_check(bucket, bucket_bytes);
  std::memcpy(bucket, &c, 8);
}

// ---- extent records ------------------------------------------------------------------------

struct RecordHeader {
  uint64_t check;    // xxh3 of bytes [8, record_bytes) of the record, seeded with `version`
  uint64_t version;  // == the bucket's version
  uint32_t key_len;
  uint32_t value_len;
};
static_assert(sizeof(RecordHeader) == 24);
inline size_t record_bytes(size_t key_len, size_t value_len) {
  return sizeof(RecordHeader) + key_len + value_len;
}
inline uint64_t record_check(const void* record, size_t n, uint64_t version) {
  return XXH3_64bits_withSeed(static_cast<const char*>(record) + 8, n - 8, version);
}

// ---- hashing -------------------------------------------------------------------------------

inline constexpr uint64_t kHashSeed = 0x4641524dull;  // "FARM": independent of the partition hash

struct KeyHome {
  uint64_t home;  // in [0, homes)
  uint32_t tag;
};
inline KeyHome key_home(std::string_view key, uint64_t homes) {
  const XXH128_hash_t h = XXH3_128bits_withSeed(key.data(), key.size(), kHashSeed);
  return KeyHome{static_cast<uint64_t>((static_cast<unsigned __int128>(h.low64) * homes) >> 64),
                 static_cast<uint32_t>(h.high64 >> 32)};
}

// ---- checking a copy -----------------------------------------------------------------------

enum class BucketState : uint8_t { kEmpty, kInline, kIndirect, kTorn, kRetired };

// A bucket as decoded from a copy that passed bucket_check; views point into that copy.
struct Bucket {
  BucketHeader header{};
  std::string_view key;    // kInline
  std::string_view value;  // kInline
  Pointer pointer{};       // kIndirect
};

// Judges one bucket copy of `bucket_bytes` bytes. The caller passes a private copy (the READ's
// landing buffer after its completion, or a memcpy): everything returned comes from it.
inline BucketState check_bucket(const char* copy, size_t bucket_bytes, Bucket* out) {
  const size_t inline_bytes = bucket_bytes - sizeof(BucketHeader);
  BucketHeader h;
  std::memcpy(&h, copy, sizeof h);
  if (h.check == 0) {
    // Empty only when every byte is zero; anything else is a bucket being written or cleared.
    for (size_t i = 8; i < bucket_bytes; ++i)
      if (copy[i] != 0) return BucketState::kTorn;
    return BucketState::kEmpty;
  }
  if (bucket_check(copy, bucket_bytes) != h.check) return BucketState::kTorn;
  out->header = h;
  if (h.flags == kRetired) return BucketState::kRetired;
  if (h.key_len == 0) return BucketState::kTorn;  // sealed but not a bucket the server writes
  if (h.flags == kInline) {
    if (size_t{h.key_len} + h.value_len > inline_bytes) return BucketState::kTorn;
    out->key = std::string_view(copy + sizeof h, h.key_len);
    out->value = std::string_view(copy + sizeof h + h.key_len, h.value_len);
    return BucketState::kInline;
  }
  if (h.flags == kIndirect) {
    std::memcpy(&out->pointer, copy + sizeof h, sizeof(Pointer));
    if (out->pointer.record_bytes != record_bytes(h.key_len, h.value_len))
      return BucketState::kTorn;
    return BucketState::kIndirect;
  }
  return BucketState::kTorn;
}

// A record READ for an indirect bucket `b`, checked against it; key/value point into `copy`.
inline bool check_record(const Bucket& b, const char* copy, size_t n, std::string_view* key,
                         std::string_view* value) {
  if (n != b.pointer.record_bytes || n < sizeof(RecordHeader)) return false;
  RecordHeader h;
  std::memcpy(&h, copy, sizeof h);
  if (h.version != b.header.version || h.key_len != b.header.key_len ||
      h.value_len != b.header.value_len || record_check(copy, n, h.version) != h.check)
    return false;
  *key = std::string_view(copy + sizeof h, h.key_len);
  *value = std::string_view(copy + sizeof h + h.key_len, h.value_len);
  return true;
}

// What a neighbourhood copy says about `key` (the client's first step; search_neighbourhood).
enum class Search : uint8_t {
  kInline,    // found, value inline: `bucket` holds it
  kIndirect,  // a bucket whose tag and lengths match points at a record: READ it
  kMiss,      // no bucket holds the key, none torn: confirm with the header (moves)
  kTorn,      // no valid bucket holds it and one is torn: READ the neighbourhood again
  kRetired,   // the table was replaced: fetch the layout
};

// Looks for `key` in a copy of its H buckets. A valid bucket holding the key wins even when
// another one is torn: the key is in one bucket, or in two identical ones while a
// displacement copies it (engine.h), and what a valid bucket holds was the key's value at
// an instant during the READ. `skip` indirect candidates are passed over (a candidate whose
// record held another key).
inline Search search_neighbourhood(const char* copy, size_t bucket_bytes, std::string_view key,
                                   uint32_t tag, Bucket* bucket, uint32_t skip = 0) {
  bool torn = false;
  for (uint32_t i = 0; i < kNeighbourhood; ++i) {
    Bucket b;
    switch (check_bucket(copy + i * bucket_bytes, bucket_bytes, &b)) {
      case BucketState::kEmpty: break;
      case BucketState::kTorn: torn = true; break;
      case BucketState::kRetired: return Search::kRetired;
      case BucketState::kInline:
        if (b.key == key) {
          *bucket = b;
          return Search::kInline;
        }
        break;
      case BucketState::kIndirect:
        if (b.header.key_len == key.size() && b.header.tag == tag) {
          if (skip > 0) {
            --skip;
            break;
          }
          *bucket = b;
          return Search::kIndirect;
        }
        break;
    }
  }
  return torn ? Search::kTorn : Search::kMiss;
}

// ---- lookup rules (client) -----------------------------------------------------------------
//
// GET(key): READ the H buckets at bucket_offset(home(key)); search_neighbourhood on the copy:
//   kInline    -> the value (an item with expire_at: READ the header word, judge by its clock)
//   kIndirect  -> READ the record; check_record fails -> READ the neighbourhood again (retry);
//                 another key -> search again skipping that candidate; else the value
//   kTorn      -> READ the neighbourhood again (retry)
//   kRetired   -> fetch the layout, start over
//   kMiss      -> READ the header word: retired -> fetch the layout; moves even and equal to
//                 the value seen before this GET's READ -> not found; else remember it and
//                 READ again (a displacement may have carried the key between buckets while
//                 the READ copied them)
// Every retry counts against a bound (64, then kContended), as Pilaf's reader does.

}  // namespace fabkv::farm
