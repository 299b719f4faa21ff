// Memory layouts of the storage core: the item header shared by the cache's log and the
// store's heap, and the index entry encodings. Later protocols (Pilaf, FaRM) will let clients
// READ these bytes remotely once the partition memory is registered with the NIC, so each
// layout has a size assertion and a version.
//
// Layout version history:
//   1  first version (issue 3).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "store/engine.h"
#include "store/limits.h"
#include "store/tuning.h"

namespace fabkv::store::layout {

inline constexpr uint32_t kLayoutVersion = 1;

// Item, 8-byte aligned, in the cache log or in a store heap block:
//   off 0   u64 version     CAS value, never 0
//   off 8   u32 expire_at   absolute seconds since the Unix epoch, 0 = never
//   off 12  u32 value_size
//   off 16  u8  key_size    1..kMaxKeySize
//   off 17  u8[7] reserved  zero
//   off 24  key bytes, then value bytes (no alignment between them)
// Read and written with memcpy only: the bytes may sit at any offset of an mmap'd region and
// the compiler turns the fixed-size copies into plain loads.
struct ItemHeader {
  uint64_t version;
  uint32_t expire_at;
  uint32_t value_size;
  uint8_t key_size;
  uint8_t reserved[7];
};
static_assert(sizeof(ItemHeader) == 24 && alignof(ItemHeader) == 8);
static_assert(offsetof(ItemHeader, expire_at) == 8 && offsetof(ItemHeader, value_size) == 12 &&
              offsetof(ItemHeader, key_size) == 16);

inline constexpr size_t kItemHeaderSize = sizeof(ItemHeader);

inline constexpr size_t align_up(size_t n, size_t a) { return (n + a - 1) & ~(a - 1); }

inline constexpr size_t item_size(size_t key_size, size_t value_size) {
  return align_up(kItemHeaderSize + key_size + value_size, tuning::kItemAlign);
}

inline ItemHeader load_header(const std::byte* p) {
  ItemHeader h;
  std::memcpy(&h, p, sizeof h);
  return h;
}

inline void store_header(std::byte* p, const ItemHeader& h) { std::memcpy(p, &h, sizeof h); }

inline const std::byte* item_key(const std::byte* p) { return p + kItemHeaderSize; }

// n bytes at a and b equal? For keys up to 16 bytes, two pairs of overlapping loads (the
// first and the last 8 or 4 bytes, or bytes 0, n/2, n-1), compared without a branch per
// byte and without a call: the memcmp call was 19 instructions per GET under callgrind
// (docs/results/store-absl-2026-11-23.md), more than the compare itself for a 16-byte key.
// Never reads outside [0, n) of either side. Longer keys go to memcmp.
inline bool bytes_equal(const void* a, const void* b, size_t n) {
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  auto load64 = [](const unsigned char* p) {
    uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  auto load32 = [](const unsigned char* p) {
    uint32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  if (n >= 8) {
    if (n > 16) return std::memcmp(x, y, n) == 0;
    return ((load64(x) ^ load64(y)) | (load64(x + n - 8) ^ load64(y + n - 8))) == 0;
  }
  if (n >= 4) return ((load32(x) ^ load32(y)) | (load32(x + n - 4) ^ load32(y + n - 4))) == 0;
  if (n == 0) return true;
  return ((x[0] ^ y[0]) | (x[n / 2] ^ y[n / 2]) | (x[n - 1] ^ y[n - 1])) == 0;
}

// Is the item at `p`, with header `h`, the item of `key`?
inline bool key_matches(const std::byte* p, const ItemHeader& h, std::string_view key) {
  return h.key_size == key.size() && bytes_equal(item_key(p), key.data(), key.size());
}

// What a GET hands out for the item at `p` with header `h`: a view of its value in place.
inline ItemView item_view(const std::byte* p, const ItemHeader& h) {
  return {std::string_view(reinterpret_cast<const char*>(item_key(p)) + h.key_size, h.value_size),
          h.version, h.expire_at};
}

// Index entry, 64 bits: tag in the high 16 bits, a 48-bit location in the low 48. An all-zero
// entry is empty; tags are never 0 (hash.h), so a used entry is never 0.
//   cache: location = absolute log offset / 8, truncated to 48 bits (2 PiB of appends before
//          it repeats; the engine's index sweep makes sure no stale entry lives that long).
//   store: location = heap payload offset / 8.
inline constexpr uint64_t kLocationBits = 48;
inline constexpr uint64_t kLocationMask = (uint64_t{1} << kLocationBits) - 1;

inline constexpr uint64_t make_entry(uint16_t tag, uint64_t location) {
  return (uint64_t{tag} << kLocationBits) | (location & kLocationMask);
}
inline constexpr uint16_t entry_tag(uint64_t e) { return static_cast<uint16_t>(e >> kLocationBits); }
inline constexpr uint64_t entry_location(uint64_t e) { return e & kLocationMask; }

// Cache bucket: one cache line of 8 entries (HERD sec. 4.1, MICA cache mode).
struct CacheBucket {
  uint64_t entries[tuning::kCacheBucketEntries];
};
static_assert(sizeof(CacheBucket) == tuning::kCacheLine);

// Store bucket: 7 entries and the heap payload offset of the next overflow bucket (0 = none;
// offset 0 is never a payload offset, see heap.h).
struct StoreBucket {
  uint64_t entries[tuning::kStoreBucketEntries];
  uint64_t next;
};
static_assert(sizeof(StoreBucket) == tuning::kCacheLine);

}  // namespace fabkv::store::layout
