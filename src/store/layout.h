// Memory layouts of the storage core: the item header shared by the cache's log and the
// store's heap, and the index entry encodings. A protocol may let clients
// READ these bytes remotely once the partition memory is registered with the NIC, so each
// layout has a size assertion and a version.
//
// Layout version history:
//   1  first version (issue 3).
//   2  the item header's bytes 20..23 hold the memcached client flags (were reserved zero; an
//      item written by version 1 reads as flags 0), issue 16.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "store/engine.h"
#include "store/limits.h"
#include "store/tuning.h"

namespace fabkv::store::layout {

inline constexpr uint32_t kLayoutVersion = 2;

// Item, 8-byte aligned, in the cache log or in a store heap block:
//   off 0   u64 version     CAS value, never 0
//   off 8   u32 expire_at   absolute seconds since the Unix epoch, 0 = never
//   off 12  u32 value_size
//   off 16  u8  key_size    1..kMaxKeySize
//   off 17  u8[3] reserved  zero
//   off 20  u32 flags       opaque client flags (memcached's), 0 unless a PUT set them
//   off 24  key bytes, then value bytes (no alignment between them)
// Read and written with memcpy only: the bytes may sit at any offset of an mmap'd region and
// the compiler turns the fixed-size copies into plain loads.
struct ItemHeader {
  uint64_t version;
  uint32_t expire_at;
  uint32_t value_size;
  uint8_t key_size;
  uint8_t reserved[3];
  uint32_t flags;
};
static_assert(sizeof(ItemHeader) == 24 && alignof(ItemHeader) == 8);
static_assert(offsetof(ItemHeader, expire_at) == 8 && offsetof(ItemHeader, value_size) == 12 &&
              offsetof(ItemHeader, key_size) == 16 && offsetof(ItemHeader, flags) == 20);

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

// The first and last sizeof(T) bytes of n (sizeof(T) <= n <= 2 sizeof(T)), both read before
// either is written, so the ranges may overlap.
template <class T>
inline void move_ends(unsigned char* d, const unsigned char* s, size_t n) {
  T a, b;
  std::memcpy(&a, s, sizeof(T));
  std::memcpy(&b, s + n - sizeof(T), sizeof(T));
  std::memcpy(d, &a, sizeof(T));
  std::memcpy(d + n - sizeof(T), &b, sizeof(T));
}

// memmove(dst, src, n), inline for n <= 32: every source byte is loaded before any is stored,
// so overlapping ranges are safe too. A PUT copies a key and a value whose sizes are only
// known at run time; for small items the memcpy/memmove calls cost more than the copies.
inline void move_bytes(void* dst, const void* src, size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  if (n > 32) {
    std::memmove(d, s, n);
  } else if (n >= 16) {
    struct Bytes16 {
      unsigned char b[16];
    };
    move_ends<Bytes16>(d, s, n);
  } else if (n >= 8) {
    move_ends<uint64_t>(d, s, n);
  } else if (n >= 4) {
    move_ends<uint32_t>(d, s, n);
  } else if (n > 0) {
    const unsigned char a = s[0], b = s[n / 2], c = s[n - 1];
    d[0] = a;
    d[n / 2] = b;
    d[n - 1] = c;
  }
}

// Is the item at `p`, with header `h`, the item of `key`?
inline bool key_matches(const std::byte* p, const ItemHeader& h, std::string_view key) {
  return h.key_size == key.size() && bytes_equal(item_key(p), key.data(), key.size());
}

// What a GET hands out for the item at `p` with header `h`: a view of its value in place.
inline ItemView item_view(const std::byte* p, const ItemHeader& h) {
  return {std::string_view(reinterpret_cast<const char*>(item_key(p)) + h.key_size, h.value_size),
          h.version, h.expire_at, h.flags};
}

// What a scan (Engine::scan) hands out for the item at `p` with header `h`.
inline ScanItem scan_item(const std::byte* p, const ItemHeader& h) {
  return {std::string_view(reinterpret_cast<const char*>(item_key(p)), h.key_size), h.value_size,
          h.expire_at, h.flags, h.version};
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
inline constexpr uint16_t entry_tag(uint64_t e) {
  return static_cast<uint16_t>(e >> kLocationBits);
}
inline constexpr uint64_t entry_location(uint64_t e) { return e & kLocationMask; }

// Which of the 8 entries at `e` carry `tag`: bit 2i+1 of the result is set when entry i does
// (odd bits only; take the index as countr_zero(mask) / 2). Tags are never 0, so tag 0 finds
// the empty entries. One bucket line in four SSE2 compares instead of a loop of 8 compares
// and branches (absl's SwissTable matches its control bytes the same way); the scalar loop
// is the fallback off x86-64.
inline constexpr uint32_t kMatchAll8 = 0xaaaa;
inline uint32_t match_tags8(const uint64_t* e, uint16_t tag) {
#ifdef __SSE2__
  const __m128i t = _mm_set1_epi16(static_cast<short>(tag));
  const auto* v = reinterpret_cast<const __m128i*>(e);
  // 16-bit lane 4k+3 is entry k's tag. Compare all lanes; the two signed-saturating packs keep
  // the sign of each 32-bit lane's upper half (the tag, in the odd 32-bit lanes), one byte each.
  const __m128i c0 = _mm_cmpeq_epi16(_mm_loadu_si128(v + 0), t);
  const __m128i c1 = _mm_cmpeq_epi16(_mm_loadu_si128(v + 1), t);
  const __m128i c2 = _mm_cmpeq_epi16(_mm_loadu_si128(v + 2), t);
  const __m128i c3 = _mm_cmpeq_epi16(_mm_loadu_si128(v + 3), t);
  const __m128i p = _mm_packs_epi16(_mm_packs_epi32(c0, c1), _mm_packs_epi32(c2, c3));
  return static_cast<uint32_t>(_mm_movemask_epi8(p)) & kMatchAll8;
#else
  uint32_t m = 0;
  for (int i = 0; i < 8; ++i) m |= static_cast<uint32_t>(entry_tag(e[i]) == tag) << (2 * i + 1);
  return m;
#endif
}
inline int match_index(uint32_t mask) { return std::countr_zero(mask) >> 1; }

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
static_assert(tuning::kCacheBucketEntries == 8 && tuning::kStoreBucketEntries == 7,
              "match_tags8 matches one line of 8 words");
// match_tags8's bits for a store bucket's 7 entries; the 8th word is `next`, whose high 16
// bits are 0 (heap offsets stay below 2^51) and would look like an empty entry.
inline constexpr uint32_t kMatchStoreEntries = kMatchAll8 & ((1u << (2 * 7)) - 1);

}  // namespace fabkv::store::layout
